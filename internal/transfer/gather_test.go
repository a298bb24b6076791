package transfer_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/transfer"
	"github.com/kvfabric/kvfabric/kernels"
)

// gatherSrc is a set of objects laid out in DRAM segments, and their
// content.
type gatherSrc struct {
	rowBytes uint64
	objs     []transfer.GatherObj
	data     [][]byte // data[o]: object o's rows
}

// newGatherSrc lays out nobj objects of 1..maxRows rows each (exactly
// maxRows when fixed) back to back in DRAM segments of segBytes, filled
// with random bytes; with misalign, every object starts 16*n+3 bytes into
// its segment.
func newGatherSrc(tb testing.TB, e *env, rng *rand.Rand, nobj int, rowBytes uint64, maxRows int, fixed, misalign bool) *gatherSrc {
	tb.Helper()
	const segBytes = 4 << 20
	g := &gatherSrc{rowBytes: rowBytes}
	var seg *region
	used := uint64(0)
	for range nobj {
		rows := uint64(maxRows)
		if !fixed {
			rows = 1 + rng.Uint64N(uint64(maxRows))
		}
		size := rows * rowBytes
		pad := uint64(0)
		if misalign {
			pad = 3
		}
		if size+pad > segBytes {
			tb.Fatalf("object of %d bytes does not fit a segment", size)
		}
		if seg == nil || used+pad+size > segBytes {
			seg = &region{base: e.dram(tb, segBytes), want: make([]byte, segBytes)}
			seg.fill(tb, e, rng)
			used = 0
		}
		at := used + pad
		g.objs = append(g.objs, transfer.GatherObj{Base: seg.base + cuda.DevicePtr(at), Rows: rows})
		g.data = append(g.data, seg.want[at:at+size])
		used = (at + size + 15) &^ 15
	}
	return g
}

// want returns the gather's expected output and number of out-of-range
// indices; idx are the indices as the kernel reads them (unsigned).
func (g *gatherSrc) want(objs []int, k int, idx []uint64) ([]byte, uint32) {
	out := make([]byte, uint64(len(objs)*k)*g.rowBytes)
	bad := uint32(0)
	for r, i := range idx {
		o := objs[r/k]
		d := out[uint64(r)*g.rowBytes:][:g.rowBytes]
		if rows := uint64(len(g.data[o])) / g.rowBytes; i < rows {
			copy(d, g.data[o][i*g.rowBytes:])
		} else {
			bad++ // and zero
		}
	}
	return out, bad
}

// randIdx returns k random row indices per object of objs, in range.
func (g *gatherSrc) randIdx(rng *rand.Rand, objs []int, k int) []uint64 {
	idx := make([]uint64, 0, len(objs)*k)
	for _, o := range objs {
		for range k {
			idx = append(idx, rng.Uint64N(g.objs[o].Rows))
		}
	}
	return idx
}

// upload writes idx as idxBytes-byte little-endian indices to a new HBM
// buffer.
func upload(tb testing.TB, e *env, idx []uint64, idxBytes int) cuda.DevicePtr {
	tb.Helper()
	b := make([]byte, len(idx)*idxBytes)
	for j, i := range idx {
		if idxBytes == 8 {
			binary.LittleEndian.PutUint64(b[j*8:], i)
		} else {
			binary.LittleEndian.PutUint32(b[j*4:], uint32(i))
		}
	}
	p := e.hbm(tb, uint64(len(b)))
	if err := e.drv.MemcpyHtoD(e.ctx, p, b); err != nil {
		tb.Fatal(err)
	}
	return p
}

// counter returns a zeroed u32 counter in HBM and a function that reads it.
func counter(tb testing.TB, e *env) (cuda.DevicePtr, func() uint32) {
	tb.Helper()
	p := e.hbm(tb, 4)
	if err := e.drv.MemcpyHtoD(e.ctx, p, make([]byte, 4)); err != nil {
		tb.Fatal(err)
	}
	return p, func() uint32 {
		tb.Helper()
		b := make([]byte, 4)
		if err := e.drv.MemcpyDtoH(e.ctx, b, p); err != nil {
			tb.Fatal(err)
		}
		return binary.LittleEndian.Uint32(b)
	}
}

// poisoned returns an HBM buffer of n bytes filled with 0xa5: rows the
// gather zero-fills must not keep it.
func poisoned(tb testing.TB, e *env, n uint64) cuda.DevicePtr {
	tb.Helper()
	p := e.hbm(tb, n)
	if err := e.drv.MemcpyHtoD(e.ctx, p, bytes.Repeat([]byte{0xa5}, int(n))); err != nil {
		tb.Fatal(err)
	}
	return p
}

func checkDst(tb testing.TB, e *env, dst cuda.DevicePtr, want []byte, rowBytes uint64) {
	tb.Helper()
	got := make([]byte, len(want))
	if err := e.drv.MemcpyDtoH(e.ctx, got, dst); err != nil {
		tb.Fatal(err)
	}
	if i := firstDiff(got, want); i >= 0 {
		tb.Fatalf("dst byte %d (row %d) is %#x, want %#x", i, uint64(i)/rowBytes, got[i], want[i])
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// runGather runs g on s to completion through Gather or GatherAsync.
func runGather(eng *transfer.Engine, e *env, s cuda.Stream, g transfer.Gather, async bool) error {
	if async {
		h, err := eng.GatherAsync(s, g)
		if err != nil {
			return err
		}
		werr := h.Wait()
		if done, err := h.Done(); !done || err != werr {
			return fmt.Errorf("Done after Wait = %v, %v; Wait said %v", done, err, werr)
		}
		return werr
	}
	if err := eng.Gather(s, g); err != nil {
		return err
	}
	return e.drv.StreamSynchronize(e.ctx, s)
}

// TestGatherByteExact gathers random rows of many DRAM objects into HBM with
// host indices and device indices of both widths, aligned and not, through
// both completion styles: byte-exact, one launch per gather.
func TestGatherByteExact(t *testing.T) {
	for _, tc := range []struct {
		name     string
		idxBytes int // 0: host indices
		rowBytes uint64
		misalign bool
	}{
		{"host", 0, 1152, false},
		{"device int64", 8, 1152, false},
		{"device int32", 4, 1152, false},
		{"host unaligned", 0, 100, true},
		{"device int32 unaligned", 4, 13, true},
		{"device int64 8-byte rows", 8, 24, false},
	} {
		for _, up := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/upload=%v", tc.name, up), func(t *testing.T) {
				e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
				eng := newEngine(t, e, transfer.Options{UploadTables: up})
				rng := rand.New(rand.NewPCG(21, tc.rowBytes))
				const nobj, k = 16, 32
				src := newGatherSrc(t, e, rng, nobj, tc.rowBytes, 600, false, tc.misalign)
				for round, async := range []bool{false, true} {
					idx := src.randIdx(rng, seq(nobj), k)
					want, wantBad := src.want(seq(nobj), k, idx)
					if wantBad != 0 {
						t.Fatal("random indices out of range")
					}
					g := transfer.Gather{Objs: src.objs, PerObj: k, RowBytes: tc.rowBytes}
					if tc.idxBytes == 0 {
						g.Host = idx
					} else {
						g.Device, g.IdxBytes = upload(t, e, idx, tc.idxBytes), tc.idxBytes
					}
					off := cuda.DevicePtr(0)
					if tc.misalign {
						off = 5
					}
					g.Dst = poisoned(t, e, uint64(len(want))+8) + off
					var bad func() uint32
					g.Bad, bad = counter(t, e)
					e.sim.ResetCalls()
					if err := runGather(eng, e, e.s, g, async); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					checkDst(t, e, g.Dst, want, tc.rowBytes)
					if n := bad(); n != 0 {
						t.Fatalf("bad counter %d for in-range indices", n)
					}
					// The table is uploaded only when asked to: by default
					// the kernel reads it in the pinned host ring.
					wantUploads := 0
					if up {
						wantUploads = 1
					}
					if got := [2]int{e.sim.CallCount("LaunchKernel"), e.sim.CallCount("MemcpyAsync")}; got != [2]int{1, wantUploads} {
						t.Fatalf("(launches, uploads) = %v, want (1, %d): %v", got, wantUploads, e.sim.Calls())
					}
				}
				if st := eng.Stats(); st.GatherLaunches != 2 || st.GatherRows != 2*nobj*k || st.KernelLaunches != 0 {
					t.Fatalf("stats %+v, want 2 gather launches of %d rows", st, nobj*k)
				}
			})
		}
	}
}

// TestGatherRagged: k=1 with one GatherObj per output row — how a caller
// gathers a different number of rows from each object — with the same
// objects repeated many times.
func TestGatherRagged(t *testing.T) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	eng := newEngine(t, e, transfer.Options{})
	rng := rand.New(rand.NewPCG(8, 9))
	const rowBytes = 576
	src := newGatherSrc(t, e, rng, 5, rowBytes, 300, false, false)
	var objs []int
	var gobjs []transfer.GatherObj
	for o := range src.objs {
		for range 1 + 40*o { // 1, 41, 81, ... rows from object o
			objs = append(objs, o)
			gobjs = append(gobjs, src.objs[o])
		}
	}
	rng.Shuffle(len(objs), func(i, j int) {
		objs[i], objs[j] = objs[j], objs[i]
		gobjs[i], gobjs[j] = gobjs[j], gobjs[i]
	})
	idx := src.randIdx(rng, objs, 1)
	want, _ := src.want(objs, 1, idx)
	for _, idxBytes := range []int{0, 4, 8} {
		t.Run(fmt.Sprintf("idx_bytes=%d", idxBytes), func(t *testing.T) {
			g := transfer.Gather{Objs: gobjs, PerObj: 1, RowBytes: rowBytes, Dst: poisoned(t, e, uint64(len(want)))}
			if idxBytes == 0 {
				g.Host = idx
			} else {
				g.Device, g.IdxBytes = upload(t, e, idx, idxBytes), idxBytes
			}
			before := eng.Stats().GatherLaunches
			if err := runGather(eng, e, e.s, g, false); err != nil {
				t.Fatal(err)
			}
			checkDst(t, e, g.Dst, want, rowBytes)
			if n := eng.Stats().GatherLaunches - before; n != 1 {
				t.Fatalf("%d launches for %d rows, want 1", n, len(objs))
			}
		})
	}
}

// TestGatherOutOfRange: indices at or past an object's Rows — -1 of either
// width, Rows itself, 2^32 and up — zero-fill their rows and count in Bad;
// without Bad they are zero-filled all the same.
func TestGatherOutOfRange(t *testing.T) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	eng := newEngine(t, e, transfer.Options{})
	rng := rand.New(rand.NewPCG(1, 5))
	const rowBytes, nobj, k = 256, 6, 20
	src := newGatherSrc(t, e, rng, nobj, rowBytes, 100, false, false)
	src.objs[2].Rows = 0 // an empty object: every index is out of range
	src.data[2] = nil
	for _, tc := range []struct {
		name     string
		idxBytes int
		withBad  bool
	}{
		{"host", 0, true},
		{"device int64", 8, true},
		{"device int32", 4, true},
		{"device int64 no counter", 8, false},
		{"host no counter", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := make([]uint64, 0, nobj*k)
			for o := range nobj {
				for range k {
					rows := src.objs[o].Rows
					var i uint64
					switch rng.IntN(6) {
					case 0: // -1
						i = ^uint64(0)
					case 1:
						i = rows
					case 2:
						i = 1<<32 + rng.Uint64N(1000)
					default:
						if rows > 0 {
							i = rng.Uint64N(rows)
						}
					}
					if tc.idxBytes == 4 {
						i = uint64(uint32(i)) // what the kernel reads: -1 is 0xffffffff
					}
					idx = append(idx, i)
				}
			}
			want, wantBad := src.want(seq(nobj), k, idx)
			if wantBad < k {
				t.Fatalf("only %d out-of-range indices", wantBad)
			}
			g := transfer.Gather{Objs: src.objs, PerObj: k, RowBytes: rowBytes, Dst: poisoned(t, e, uint64(len(want)))}
			if tc.idxBytes == 0 {
				g.Host = idx
			} else {
				g.Device, g.IdxBytes = upload(t, e, idx, tc.idxBytes), tc.idxBytes
			}
			bad, read := counter(t, e)
			if tc.withBad {
				g.Bad = bad
			}
			// Twice: the counter accumulates, the engine never resets it.
			for range 2 {
				if err := runGather(eng, e, e.s, g, true); err != nil {
					t.Fatal(err)
				}
			}
			checkDst(t, e, g.Dst, want, rowBytes)
			if !tc.withBad {
				wantBad = 0
			}
			if n := read(); n != 2*wantBad {
				t.Fatalf("bad counter %d, want 2 x %d", n, wantBad)
			}
		})
	}
}

// TestGatherSplit: with slots too small for the whole object table, a
// gather is split by objects (and, for host indices of one object larger
// than a slot, by rows) into launches over several slots — byte-exact, Dst
// and Device advanced per launch, the ring reused and grown.
func TestGatherSplit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slotDescs int // slot bytes: 24*slotDescs rounded up to 16
		k         int
		idxBytes  int
		launches  uint64
	}{
		// 96-byte slots: 16+3*8 = 40 bytes per object, 2 objects per launch.
		{"host by objects", 4, 3, 0, 5},
		// 6 objects of 16 bytes per launch.
		{"device int32 by objects", 4, 7, 4, 2},
		{"device int64 by objects", 4, 7, 8, 2},
		// 16+50*8 bytes per object > 96: 10 rows per launch.
		{"host by rows", 4, 50, 0, 10 * 5},
		// A 24-byte slot rounded up to 32: 16+2*8, two rows per launch.
		{"host two rows per launch", 1, 3, 0, 10 * 2},
	} {
		for _, up := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/upload=%v", tc.name, up), func(t *testing.T) {
				const nobj, rowBytes = 10, 160
				e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
				eng := newEngine(t, e, transfer.Options{SlotDescs: tc.slotDescs, RingSlots: 2, UploadTables: up})
				rng := rand.New(rand.NewPCG(uint64(tc.k), uint64(tc.idxBytes)))
				src := newGatherSrc(t, e, rng, nobj, rowBytes, 64, false, false)
				idx := src.randIdx(rng, seq(nobj), tc.k)
				idx[len(idx)-1] = src.objs[nobj-1].Rows // the last row of the last launch: out of range
				want, wantBad := src.want(seq(nobj), tc.k, idx)
				g := transfer.Gather{Objs: src.objs, PerObj: tc.k, RowBytes: rowBytes, Dst: poisoned(t, e, uint64(len(want)))}
				if tc.idxBytes == 0 {
					g.Host = idx
				} else {
					g.Device, g.IdxBytes = upload(t, e, idx, tc.idxBytes), tc.idxBytes
				}
				var read func() uint32
				g.Bad, read = counter(t, e)
				e.sim.ResetCalls()
				if err := eng.Gather(e.s, g); err != nil {
					t.Fatal(err)
				}
				// The simulator's launches complete at once: every slot is
				// free again by the next launch, which must not wait for it.
				if n := e.sim.CallCount("StreamSynchronize") + e.sim.CallCount("EventSynchronize"); n != 0 {
					t.Fatalf("Gather waited on the CPU (%d synchronizations)", n)
				}
				if err := e.drv.StreamSynchronize(e.ctx, e.s); err != nil {
					t.Fatal(err)
				}
				checkDst(t, e, g.Dst, want, rowBytes)
				if n := read(); n != wantBad || n != 1 {
					t.Fatalf("bad counter %d, want %d", n, wantBad)
				}
				if st := eng.Stats(); st.GatherLaunches != tc.launches || st.GatherRows != uint64(nobj*tc.k) {
					t.Fatalf("stats %+v, want %d launches of %d rows in all", st, tc.launches, nobj*tc.k)
				}
			})
		}
	}
}

// TestGatherSplitHeld: the same split with the stream held (as a busy GPU
// stream would be), so that each launch's slot is still in flight when the
// next launch needs one: the gather waits for its own stream's oldest
// launch (which it is ordered behind anyway) rather than grow the ring;
// released, it finishes byte-exact.
func TestGatherSplitHeld(t *testing.T) {
	for _, up := range []bool{false, true} {
		t.Run(fmt.Sprintf("upload=%v", up), func(t *testing.T) { gatherSplitHeld(t, up) })
	}
}

func gatherSplitHeld(t *testing.T, up bool) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	eng := newEngine(t, e, transfer.Options{SlotDescs: 4, RingSlots: 2, MaxRingSlots: 4, UploadTables: up})
	rng := rand.New(rand.NewPCG(3, 3))
	const nobj, k, rowBytes = 12, 3, 64
	src := newGatherSrc(t, e, rng, nobj, rowBytes, 64, false, false)
	idx := src.randIdx(rng, seq(nobj), k)
	want, _ := src.want(seq(nobj), k, idx)
	g := transfer.Gather{Objs: src.objs, PerObj: k, Host: idx, RowBytes: rowBytes, Dst: poisoned(t, e, uint64(len(want)))}
	release := e.sim.HoldStream(e.s)
	done := make(chan error, 1)
	go func() { done <- eng.Gather(e.s, g) }()
	// 6 launches, 2 slots: the first two launches (upload, kernel, fence
	// each; no upload when the kernel reads its table in host memory) wait
	// behind the hold, and so does the gather.
	pending := 4
	if up {
		pending = 6
	}
	waitPending(t, e.sim, e.s, pending)
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("gather returned (%v) while its first launches' slots were still in flight", err)
	default:
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(holWait):
		t.Fatal("gather did not finish after the stream was released")
	}
	if err := e.drv.StreamSynchronize(e.ctx, e.s); err != nil {
		t.Fatal(err)
	}
	checkDst(t, e, g.Dst, want, rowBytes)
	if st := eng.Stats(); st.GatherLaunches != 6 || st.RingSlots != 2 || st.RingWaits == 0 {
		t.Fatalf("stats %+v, want 6 launches over 2 slots, with waits", st)
	}
}

// TestGatherInvalid: a malformed Gather is rejected with ErrInvalidGather
// naming the field and its value, and makes no driver call.
func TestGatherInvalid(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	buf := e.hbm(t, 1<<20)
	objs := []transfer.GatherObj{{Base: buf, Rows: 16}, {Base: buf + 4096, Rows: 16}}
	ok := transfer.Gather{Objs: objs, PerObj: 2, Host: []uint64{0, 1, 2, 3}, RowBytes: 64, Dst: buf + 8192}
	if err := eng.Gather(e.s, ok); err != nil {
		t.Fatalf("the valid base case: %v", err)
	}
	const top = ^cuda.DevicePtr(0)
	for _, tc := range []struct {
		name string
		mod  func(*transfer.Gather)
		want []string // in the message
	}{
		{"no objects", func(g *transfer.Gather) { g.Objs = nil }, []string{"Objs is empty"}},
		{"PerObj 0", func(g *transfer.Gather) { g.PerObj = 0 }, []string{"PerObj 0"}},
		{"PerObj negative", func(g *transfer.Gather) { g.PerObj = -3 }, []string{"PerObj -3"}},
		{"PerObj above u32", func(g *transfer.Gather) { g.PerObj = 1 << 32 }, []string{"PerObj 4294967296"}},
		{"RowBytes 0", func(g *transfer.Gather) { g.RowBytes = 0 }, []string{"RowBytes is 0"}},
		{"null Dst", func(g *transfer.Gather) { g.Dst = 0 }, []string{"Dst is null"}},
		{"Dst overflows", func(g *transfer.Gather) { g.Dst = top - 100 }, []string{"Dst 0xffffffffffffff9b", "RowBytes 64"}},
		{"size overflows", func(g *transfer.Gather) { g.RowBytes = 1 << 62 }, []string{"RowBytes 4611686018427387904", "overflows"}},
		{"Host too short", func(g *transfer.Gather) { g.Host = g.Host[:3] }, []string{"len(Host) 3", "PerObj 2 = 4"}},
		{"Host too long", func(g *transfer.Gather) { g.Host = append(g.Host, 0) }, []string{"len(Host) 5"}},
		{"both indices", func(g *transfer.Gather) { g.Device, g.IdxBytes = buf, 8 }, []string{"both Host (4 indices) and Device 0x"}},
		{"no indices", func(g *transfer.Gather) { g.Host = nil }, []string{"neither Host nor Device"}},
		{"IdxBytes 2", func(g *transfer.Gather) { g.Host, g.Device, g.IdxBytes = nil, buf, 2 }, []string{"IdxBytes 2"}},
		{"IdxBytes 0", func(g *transfer.Gather) { g.Host, g.Device = nil, buf }, []string{"IdxBytes 0"}},
		{"Device misaligned", func(g *transfer.Gather) { g.Host, g.Device, g.IdxBytes = nil, buf+4, 8 }, []string{"Device 0x", "not 8-byte aligned"}},
		{"Device overflows", func(g *transfer.Gather) { g.Host, g.Device, g.IdxBytes = nil, top-7, 4 }, []string{"Device 0xfffffffffffffff8", "overflows"}},
		{"Bad misaligned", func(g *transfer.Gather) { g.Bad = buf + 2 }, []string{"Bad 0x", "not 4-byte aligned"}},
		{"null object base", func(g *transfer.Gather) { g.Objs = []transfer.GatherObj{objs[0], {Base: 0, Rows: 3}} }, []string{"Objs[1].Base is null", "Rows 3"}},
		{"object overflows", func(g *transfer.Gather) { g.Objs = []transfer.GatherObj{objs[0], {Base: buf, Rows: 1 << 60}} }, []string{"Objs[1]", "Rows 1152921504606846976", "overflows"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ok
			g.Host = append([]uint64(nil), ok.Host...)
			tc.mod(&g)
			e.sim.ResetCalls()
			for _, async := range []bool{false, true} {
				var err error
				if async {
					_, err = eng.GatherAsync(e.s, g)
				} else {
					err = eng.Gather(e.s, g)
				}
				if !errors.Is(err, transfer.ErrInvalidGather) {
					t.Fatalf("async=%v: %v, want ErrInvalidGather", async, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not say %q", err, w)
					}
				}
			}
			if n := e.sim.CallCount(""); n != 0 {
				t.Fatalf("rejected gather made %d driver calls: %v", n, e.sim.Calls())
			}
		})
	}
	// An empty object with a null base is valid: every index into it is out
	// of range.
	g := ok
	g.Objs = []transfer.GatherObj{objs[0], {}}
	if err := eng.Gather(e.s, g); err != nil {
		t.Fatalf("an empty object: %v", err)
	}
}

// TestGatherFaults fails each driver call of the gather path once, with a
// one-slot ring: the call returns the error, the slot goes back to the ring
// (were it leaked, the next gather would find no slot and grow the ring),
// the engine gathers byte-exact afterwards, and Close leaves nothing
// behind.
func TestGatherFaults(t *testing.T) {
	for _, tc := range []struct {
		method string
		async  bool
	}{
		{"MemcpyAsync", false}, {"MemcpyAsync", true}, // the table upload
		{"LaunchKernel", false}, {"LaunchKernel", true},
		{"EventRecord", false}, {"EventRecord", true}, // the slot's fence
		{"EventQuery", false}, {"EventQuery", true}, // is the slot's last launch done?
		{"EventCreate", true},      // the completion event
		{"EventSynchronize", true}, // Handle.Wait
	} {
		method, async := tc.method, tc.async
		t.Run(fmt.Sprintf("%s/async=%v", method, async), func(t *testing.T) {
			e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
			rng := rand.New(rand.NewPCG(4, 4))
			const nobj, k, rowBytes = 8, 16, 512
			src := newGatherSrc(t, e, rng, nobj, rowBytes, 200, false, false)
			dst := poisoned(t, e, nobj*k*rowBytes)
			before := e.live()
			// The table upload exists only with UploadTables; every other
			// call is on the default path (the kernel reads the host ring).
			eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{RingSlots: 1, MaxRingSlots: 2, UploadTables: method == "MemcpyAsync"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() }) // idempotent; the test closes it itself
			gather := func() (transfer.Gather, []byte) {
				idx := src.randIdx(rng, seq(nobj), k)
				want, _ := src.want(seq(nobj), k, idx)
				return transfer.Gather{Objs: src.objs, PerObj: k, Host: idx, RowBytes: rowBytes, Dst: dst}, want
			}
			run := func(g transfer.Gather) error { return runGather(eng, e, e.s, g, async) }
			// Warm up: the slot is in flight (EventQuery on reuse), the
			// event pool holds one event (no EventCreate next time).
			if method != "EventCreate" {
				g, _ := gather()
				if err := run(g); err != nil {
					t.Fatal(err)
				}
			}
			g, _ := gather()
			e.sim.ResetCalls()
			e.sim.Fail(method, 1, cuda.ErrorLaunchFailed)
			err = run(g)
			injected := false
			for _, c := range e.sim.Calls() {
				injected = injected || c.Injected
			}
			e.sim.ClearFaults()
			if !injected {
				t.Fatalf("%s is not on the async=%v gather path: no fault fired", method, async)
			}
			if !errors.Is(err, cuda.ErrorLaunchFailed) {
				t.Fatalf("injected %s failure, got %v", method, err)
			}
			for range 3 {
				g, want := gather()
				if err := run(g); err != nil {
					t.Fatalf("after the fault: %v", err)
				}
				checkDst(t, e, dst, want, rowBytes)
			}
			if st := eng.Stats(); st.RingSlots != 1 {
				t.Fatalf("ring has %d slots, want 1: the failed launch leaked its slot", st.RingSlots)
			}
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			if after := e.live(); after.Total() != before.Total() {
				t.Fatalf("live objects %v -> %v", before, after)
			}
		})
	}
}

// TestGatherKernelFault: a row the device cannot access fails the launch
// like a faulting kernel; the engine stays usable.
func TestGatherKernelFault(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	buf := e.hbm(t, 1<<20)
	g := transfer.Gather{Objs: []transfer.GatherObj{{Base: 4096, Rows: 8}}, PerObj: 2, Host: []uint64{0, 1}, RowBytes: 64, Dst: buf}
	if err := runGather(eng, e, e.s, g, true); !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Fatalf("unmapped object: %v", err)
	}
	g.Objs[0].Base = buf + 4096
	if err := runGather(eng, e, e.s, g, true); err != nil {
		t.Fatal(err)
	}
}

// TestGatherConcurrentStreams: gathers on several streams at once share a
// small ring (run under -race).
func TestGatherConcurrentStreams(t *testing.T) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	eng := newEngine(t, e, transfer.Options{RingSlots: 2, SlotDescs: 64})
	rng := rand.New(rand.NewPCG(6, 6))
	const nobj, k, rowBytes = 12, 8, 320
	src := newGatherSrc(t, e, rng, nobj, rowBytes, 200, false, false)
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := newStream(t, e)
		dst := poisoned(t, e, nobj*k*rowBytes)
		bad, read := counter(t, e)
		dev := e.hbm(t, nobj*k*8)
		rng := rand.New(rand.NewPCG(uint64(w), 77))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				idx := src.randIdx(rng, seq(nobj), k)
				idx[rng.IntN(len(idx))] = 1 << 40 // one out-of-range row per gather
				want, _ := src.want(seq(nobj), k, idx)
				g := transfer.Gather{Objs: src.objs, PerObj: k, RowBytes: rowBytes, Dst: dst, Bad: bad}
				if i%2 == 0 {
					g.Host = idx
				} else {
					b := make([]byte, len(idx)*8)
					for j, x := range idx {
						binary.LittleEndian.PutUint64(b[j*8:], x)
					}
					if err := e.drv.MemcpyHtoD(e.ctx, dev, b); err != nil {
						errs <- err
						return
					}
					g.Device, g.IdxBytes = dev, 8
				}
				if err := runGather(eng, e, s, g, i%4 < 2); err != nil {
					errs <- fmt.Errorf("worker %d gather %d: %w", w, i, err)
					return
				}
				got := make([]byte, len(want))
				if err := e.drv.MemcpyDtoH(e.ctx, got, dst); err != nil {
					errs <- err
					return
				}
				if j := firstDiff(got, want); j >= 0 {
					errs <- fmt.Errorf("worker %d gather %d: byte %d differs", w, i, j)
					return
				}
			}
			if n := read(); n != 20 {
				errs <- fmt.Errorf("worker %d: bad counter %d, want 20", w, n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := eng.Stats(); st.GatherLaunches != workers*20 {
		t.Fatalf("stats %+v, want %d gather launches", st, workers*20)
	}
}

// TestGatherClose: the gather module is loaded by New and unloaded by Close
// as its own step (retried alone when it fails); gathers after Close fail
// with ErrClosed; nothing leaks.
func TestGatherClose(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	before := e.live()
	eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := e.hbm(t, 1<<20)
	g := transfer.Gather{Objs: []transfer.GatherObj{{Base: buf, Rows: 8}}, PerObj: 2, Host: []uint64{0, 1}, RowBytes: 64, Dst: buf + 4096}
	if err := eng.Gather(e.s, g); err != nil {
		t.Fatal(err)
	}
	h, err := eng.GatherAsync(e.s, g)
	if err != nil {
		t.Fatal(err)
	}
	// The second ModuleUnload is the gather module's.
	e.sim.ResetCalls()
	e.sim.Fail("ModuleUnload", 2, cuda.ErrorUnknown)
	if err := eng.Close(); !errors.Is(err, cuda.ErrorUnknown) || !strings.Contains(err.Error(), "gather module") {
		t.Fatalf("Close with a failing gather-module unload: %v", err)
	}
	if err := eng.Gather(e.s, g); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Gather after Close: %v", err)
	}
	if _, err := eng.GatherAsync(e.s, g); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("GatherAsync after Close: %v", err)
	}
	if err := h.Wait(); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	e.sim.ResetCalls()
	if err := eng.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if n := e.sim.CallCount(""); n != 1 || e.sim.CallCount("ModuleUnload") != 1 {
		t.Fatalf("retry made %v, want the gather module's unload only", e.sim.Calls())
	}
	if after := e.live(); after.Total() != before.Total()+1 { // the test buffer
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

func TestGatherEmulationRegistered(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	newEngine(t, e, transfer.Options{})
	for _, c := range e.sim.Calls() {
		if c.Method == "ModuleGetFunction" && strings.Contains(c.Args, kernels.GatherRowsEntry) && c.Result == cuda.Success {
			return
		}
	}
	t.Fatal("the embedded gather PTX's entry was not resolved")
}

// TestGatherOnDevice checks the kernel's paths that the simulator's
// emulation does not model — the 16/8/4/1-byte copy units chosen by
// alignment, rows above 16 KiB split across CTAs (grid.y), warps striding
// over more rows than the grid has warps — byte-exact
// with out-of-range rows zeroed and counted once each. It runs on the
// simulator unless KVFABRIC_GPU_TESTS=1, then on the GPU.
func TestGatherOnDevice(t *testing.T) {
	e := newBenchEnv(t)
	// Both table paths: read in the pinned host ring (the default where the
	// device can use host pointers) and uploaded to device memory.
	engs := map[bool]*transfer.Engine{false: newEngine(t, e, transfer.Options{}), true: newEngine(t, e, transfer.Options{UploadTables: true})}
	for _, tc := range []struct {
		name     string
		rowBytes uint64
		misalign bool
		k        int
		idxBytes int // 0: host
	}{
		{"16-byte units", 1152, false, 32, 0},
		{"16-byte units int32", 1152, false, 32, 4},
		{"8-byte units", 24, false, 40, 8},
		{"4-byte units", 12, false, 40, 4},
		{"byte units", 13, false, 40, 8},
		{"byte units misaligned base", 64, true, 40, 0},
		{"split rows", 40 << 10, false, 3, 8},
		{"split rows odd", 40<<10 + 8, true, 3, 0},
		// 700,000 rows: more warps than the grid's 65,536 CTAs x 8 have.
		{"grid-stride", 16, false, 100000, 4},
	} {
		for _, up := range []bool{false, true} {
			eng := engs[up]
			t.Run(fmt.Sprintf("%s/upload=%v", tc.name, up), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(tc.rowBytes, uint64(tc.k)))
				const nobj = 7
				maxRows := int(min(60, (3<<20)/tc.rowBytes))
				src := newGatherSrc(t, e, rng, nobj, tc.rowBytes, maxRows, false, tc.misalign)
				idx := src.randIdx(rng, seq(nobj), tc.k)
				for j := 0; j < len(idx); j += 5 {
					idx[j] = src.objs[j/tc.k].Rows + uint64(j%3) // out of range, once in five
				}
				want, wantBad := src.want(seq(nobj), tc.k, idx)
				g := transfer.Gather{Objs: src.objs, PerObj: tc.k, RowBytes: tc.rowBytes}
				if tc.idxBytes == 0 {
					g.Host = idx
				} else {
					g.Device, g.IdxBytes = upload(t, e, idx, tc.idxBytes), tc.idxBytes
				}
				off := cuda.DevicePtr(0)
				if tc.misalign {
					off = 7
				}
				g.Dst = poisoned(t, e, uint64(len(want))+8) + off
				var read func() uint32
				g.Bad, read = counter(t, e)
				if err := runGather(eng, e, e.s, g, true); err != nil {
					t.Fatal(err)
				}
				checkDst(t, e, g.Dst, want, tc.rowBytes)
				if n := read(); n != wantBad {
					t.Fatalf("bad counter %d, want %d", n, wantBad)
				}
			})
		}
	}
}
