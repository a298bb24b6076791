package client

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// rangesOnly answers PointerRanges from a fixed list of allocations and
// counts the calls; it implements nothing else.
type rangesOnly struct {
	cuda.Driver
	allocs []cuda.AddrRange
	calls  int
	fail   bool
}

func (d *rangesOnly) PointerRanges(_ cuda.Context, ptrs []cuda.DevicePtr, out []cuda.AddrRange) error {
	d.calls++
	if d.fail {
		return errors.New("injected")
	}
	for i, p := range ptrs {
		out[i] = cuda.AddrRange{}
		for _, a := range d.allocs {
			if a.Contains(p, 1) {
				out[i] = a
			}
		}
	}
	return nil
}

// TestCopyRuns: copies merge only when they continue the last one on both
// sides, inside its segment mapping and one allocation of the caller's
// side; undo restores the copies and the last one's length; the driver is
// asked once per allocation and at most maxRangeQueries times; a failed
// query merges nothing.
func TestCopyRuns(t *testing.T) {
	c := func(src, dst, n uint64) cuda.Copy {
		return cuda.Copy{Src: cuda.DevicePtr(src), Dst: cuda.DevicePtr(dst), Len: n}
	}
	segA := cuda.AddrRange{Start: 0x10000, Size: 0x1000}
	segB := cuda.AddrRange{Start: 0x11000, Size: 0x1000} // adjoins segA
	drv := &rangesOnly{allocs: []cuda.AddrRange{{Start: 0x1000, Size: 0x100}, {Start: 0x1100, Size: 0x100}}}
	r := copyRuns{drv: drv, put: true}

	var cs []cuda.Copy
	add := func(seg cuda.AddrRange, more ...cuda.Copy) {
		n0 := len(cs)
		cs = r.add(append(cs, more...), n0, seg)
	}
	add(segA, c(0x1000, 0x10000, 0x10))
	add(segA, c(0x1010, 0x10010, 0x10), c(0x1020, 0x10020, 0x20)) // one object, two regions: both merge
	add(segA, c(0x1040, 0x10060, 0x10))                           // destination gap
	add(segA, c(0x1050, 0x10070, 0x10))                           // merges
	if want := []cuda.Copy{c(0x1000, 0x10000, 0x40), c(0x1040, 0x10060, 0x20)}; !slices.Equal(cs, want) {
		t.Fatalf("runs: %v, want %v", cs, want)
	}
	if drv.calls != 1 || r.merged != 3 {
		t.Fatalf("%d PointerRanges calls, %d merged; want 1 and 3", drv.calls, r.merged)
	}

	// An object with two replicas whose second fails to resolve: undo
	// takes its first replica's bytes back out of the run it joined.
	mk := r.mark(cs)
	add(segA, c(0x1060, 0x10080, 0x10))
	add(segB, c(0x1060, 0x11000, 0x10))
	cs = r.undo(cs, mk)
	if want := []cuda.Copy{c(0x1000, 0x10000, 0x40), c(0x1040, 0x10060, 0x20)}; !slices.Equal(cs, want) || r.merged != 3 {
		t.Fatalf("after undo: %v (%d merged)", cs, r.merged)
	}

	// Into the next segment mapping, though it adjoins: a new copy.
	cs = nil
	add(segA, c(0x1000, 0x10ff0, 0x10))
	add(segB, c(0x1010, 0x11000, 0x10))
	if len(cs) != 2 {
		t.Fatalf("across segments: %v", cs)
	}
	// Across two allocations of the caller's side that adjoin: a new copy.
	cs = nil
	add(segA, c(0x10f0, 0x10000, 0x10))
	add(segA, c(0x1100, 0x10010, 0x10))
	if len(cs) != 2 {
		t.Fatalf("across allocations: %v", cs)
	}

	// At most maxRangeQueries calls, whatever the copies.
	drv.allocs = nil
	for i := range uint64(3 * maxRangeQueries) {
		add(segA, c(0x1110+0x10*i, 0x10020+0x10*i, 0x10))
	}
	if drv.calls > maxRangeQueries {
		t.Fatalf("%d PointerRanges calls", drv.calls)
	}

	// A failed query: nothing merged.
	drv2 := &rangesOnly{fail: true}
	r = copyRuns{drv: drv2, put: false}
	cs = nil
	add(segA, c(0x10000, 0x1000, 0x10))
	add(segA, c(0x10010, 0x1010, 0x10))
	if len(cs) != 2 || r.merged != 0 {
		t.Fatalf("failed query: %v", cs)
	}

	// SeparateCopies: nothing merged, no query.
	drv3 := &rangesOnly{allocs: drv.allocs}
	r = copyRuns{drv: drv3, put: true, off: true}
	cs = nil
	add(segA, c(0x1000, 0x10000, 0x10))
	add(segA, c(0x1010, 0x10010, 0x10))
	if len(cs) != 2 || drv3.calls != 0 {
		t.Fatalf("off: %v, %d calls", cs, drv3.calls)
	}
}
