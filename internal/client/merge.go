package client

import "github.com/kvfabric/kvfabric/internal/cuda"

// copyRuns folds the copies of one pipeline chunk that continue one another
// into one: when an object's bytes follow the previous object's on both
// sides — the caller's buffer and the segment — the two copies become one
// longer copy. A batch of equal-size objects from one staging buffer is
// placed in runs inside a segment, so its copies merge into a few long
// ones, which the transfer engine sends to the copy engines (0.96–1.00 of
// the link from 256 KiB on the H200) instead of the SM kernel (0.92–0.95 at
// every block size); see docs/perf/datapath.md.
//
// A merged copy never leaves one allocation on either side, so it is the
// same memory the separate copies touched, seen by the driver as one
// buffer:
//   - the store side stays inside one segment mapping (the range the
//     pipeline resolved the object in: add's seg);
//   - the caller's side stays inside one allocation as the driver reports
//     it (cuda.Driver.PointerRanges: one cuMemAlloc buffer, one registered
//     or page-locked host range, one mapping). Two buffers that merely
//     adjoin in the address space are not merged. The answer is kept for
//     the following copies, so a part whose buffers lie in one allocation
//     asks once; a part asks at most maxRangeQueries times (then stops
//     merging copies outside the ranges it knows), so the driver crossings
//     stay per batch, not per object.
//
// A copyRuns belongs to one pipeline (a put or get part) and is used by its
// goroutine only.
type copyRuns struct {
	drv  cuda.Driver
	cctx cuda.Context
	put  bool // the caller's buffers are the sources (a put), else the destinations
	off  bool // Options.SeparateCopies or merge_copies=false: nothing merged
	// seg is the segment mapping the store side of the chunk's last copy
	// lies in.
	seg cuda.AddrRange
	// user is the last allocation PointerRanges reported for the caller's
	// side (zero: none yet, or the driver knew none).
	user    cuda.AddrRange
	queries int
	merged  uint64 // copies folded into the one before them
}

// maxRangeQueries bounds a pipeline's PointerRanges calls.
const maxRangeQueries = 8

func (s *Store) copyRuns(put bool) copyRuns {
	return copyRuns{drv: s.drv, cctx: s.cctx, put: put, off: s.separateCopies}
}

// add merges cs[n0:] — the copies just appended for one object (one
// replica), whose store side lies in the segment mapping seg — into the
// copy before them where they continue it, and returns cs shortened.
func (r *copyRuns) add(cs []cuda.Copy, n0 int, seg cuda.AddrRange) []cuda.Copy {
	if r.off || n0 == len(cs) {
		return cs
	}
	out := n0
	for _, c := range cs[n0:] {
		if out > 0 && r.continues(cs[out-1], c, seg) {
			cs[out-1].Len += c.Len
			r.merged++
			continue
		}
		cs[out] = c
		out++
		r.seg = seg
	}
	return cs[:out]
}

// continues reports whether c may be folded into last: it starts where last
// ends on both sides, its store side is in last's segment mapping, and the
// caller's side of both lies in one allocation.
func (r *copyRuns) continues(last, c cuda.Copy, seg cuda.AddrRange) bool {
	if seg != r.seg || seg.Size == 0 || c.Src != last.Src+cuda.DevicePtr(last.Len) || c.Dst != last.Dst+cuda.DevicePtr(last.Len) {
		return false
	}
	n := last.Len + c.Len
	if n < last.Len {
		return false
	}
	u := last.Dst
	if r.put {
		u = last.Src
	}
	if r.user.Contains(u, n) {
		return true
	}
	if r.queries >= maxRangeQueries {
		return false
	}
	r.queries++
	var got [1]cuda.AddrRange
	if err := r.drv.PointerRanges(r.cctx, []cuda.DevicePtr{u}, got[:]); err != nil {
		// Nothing merged: the copies go as given, and the copy itself
		// reports whatever is wrong with the memory.
		return false
	}
	r.user = got[0]
	return r.user.Contains(u, n)
}

// runMark is a copyRuns' state before an object's copies were added: undo
// takes them out again.
type runMark struct {
	n       int
	lastLen uint64
	seg     cuda.AddrRange
	merged  uint64
}

func (r *copyRuns) mark(cs []cuda.Copy) runMark {
	m := runMark{n: len(cs), seg: r.seg, merged: r.merged}
	if m.n > 0 {
		m.lastLen = cs[m.n-1].Len
	}
	return m
}

// undo removes the copies added since m, including the bytes merged into
// the copy before them.
func (r *copyRuns) undo(cs []cuda.Copy, m runMark) []cuda.Copy {
	cs = cs[:m.n]
	if m.n > 0 {
		cs[m.n-1].Len = m.lastLen
	}
	r.seg, r.merged = m.seg, m.merged
	return cs
}
