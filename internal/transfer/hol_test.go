package transfer_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// holWait bounds how long the small caller may take while the large one's
// stream is held. It only has to outlast a loaded CI machine: on the old
// engine the small caller never finishes while the hold lasts.
const holWait = 10 * time.Second

// waitPending waits until n operations wait behind the hold on s.
func waitPending(t *testing.T, d *sim.Driver, s cuda.Stream, n int) {
	t.Helper()
	deadline := time.Now().Add(holWait)
	for d.PendingOps(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("stream %#x: %d operations pending, want %d", s, d.PendingOps(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNoHeadOfLineBlocking (issue #13 item 5): caller A's batch on stream 1
// sits behind copies that do not finish (the simulator holds stream 1, as a
// long copy-engine batch would keep a GPU stream busy); caller B's batches
// of small blocks on stream 2 must all complete, byte-exact, while A's
// copies are still queued. The old engine waited for the next ring slot in
// turn under its lock — after RingSlots launches, the slot A's launch still
// used — so B stopped behind A's copies (and every other submitter behind
// B). Then A's stream is released and A's bytes are checked too.
func TestNoHeadOfLineBlocking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots int
		// aBatches: A's SubmitAsync batches on the held stream before its
		// Do; with as many as there are slots, A owns every slot and B
		// needs one more.
		aBatches int
	}{
		{"A holds one slot", 8, 0},
		{"A holds every slot", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSimEnv(t, sim.Config{})
			eng := newEngine(t, e, transfer.Options{RingSlots: tc.slots})
			sA, sB := e.s, newStream(t, e)
			rng := rand.New(rand.NewPCG(5, 13))
			srcA := &region{base: e.hbm(t, 8<<20), want: make([]byte, 8<<20)}
			dstA := &region{base: e.dram(t, 8<<20), want: make([]byte, 8<<20)}
			srcB := &region{base: e.hbm(t, 1<<20), want: make([]byte, 1<<20)}
			dstB := &region{base: e.dram(t, 1<<20), want: make([]byte, 1<<20)}
			for _, r := range []*region{srcA, dstA, srcB, dstB} {
				r.fill(t, e, rng)
			}
			// A: per batch, one 1 MiB block (copy engine) and small blocks
			// (a kernel launch, whose ring slot is fenced after the copy).
			aBatch := func(i int) []cuda.Copy {
				off := cuda.DevicePtr(i) << 20
				cs := []cuda.Copy{{Dst: dstA.base + off, Src: srcA.base + off, Len: 1 << 20}}
				for j := range 16 {
					o := off + 512<<10 + cuda.DevicePtr(j)*4096
					cs = append(cs, cuda.Copy{Dst: dstA.base + o, Src: srcA.base + o + 256<<10, Len: 4096})
				}
				return cs
			}
			applyA := func(cs []cuda.Copy) {
				for _, c := range cs {
					do, so := int(c.Dst-dstA.base), int(c.Src-srcA.base)
					copy(dstA.want[do:do+int(c.Len)], srcA.want[so:so+int(c.Len)])
				}
			}

			release := e.sim.HoldStream(sA)
			defer release() // a failed test must not leave A waiting forever
			var handles []*transfer.Handle
			for i := range tc.aBatches {
				cs := aBatch(i)
				h, err := eng.SubmitAsync(sA, cs)
				if err != nil {
					t.Fatal(err)
				}
				applyA(cs)
				handles = append(handles, h)
			}
			aDone := make(chan error, 1)
			last := aBatch(tc.aBatches)
			applyA(last)
			go func() { aDone <- eng.Do(sA, last) }()
			// A's Do enqueued what it could: its batch copy at least.
			waitPending(t, e.sim, sA, tc.aBatches*5+1)

			bDone := make(chan error, 1)
			go func() {
				for i := range 4 * tc.slots {
					cs := plan(rng, []*region{srcB}, []*region{dstB}, 8, 8<<10)
					if err := eng.Do(sB, cs); err != nil {
						bDone <- fmt.Errorf("B's batch %d: %w", i, err)
						return
					}
					got := make([]byte, len(dstB.want))
					if err := e.drv.MemcpyDtoH(e.ctx, got, dstB.base); err != nil {
						bDone <- err
						return
					}
					if j := firstDiff(got, dstB.want); j >= 0 {
						bDone <- fmt.Errorf("B's batch %d: byte %d differs", i, j)
						return
					}
				}
				bDone <- nil
			}()
			select {
			case err := <-bDone:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(holWait):
				release()
				<-bDone
				t.Fatalf("B's small batches on stream 2 waited for A's copies on stream 1 (%+v)", eng.Stats())
			}
			select {
			case err := <-aDone:
				t.Fatalf("A's Do returned before its stream ran: %v", err)
			default:
			}
			release()
			if err := <-aDone; err != nil {
				t.Fatal(err)
			}
			for _, h := range handles {
				if err := h.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			dstA.check(t, e)
			dstB.check(t, e)
			if st := eng.Stats(); tc.aBatches >= tc.slots && st.RingGrows == 0 {
				t.Errorf("A owned every slot, yet the ring did not grow: %+v", st)
			}
		})
	}
}

func newStream(tb testing.TB, e *env) cuda.Stream {
	tb.Helper()
	s, err := e.drv.StreamCreate(e.ctx, cuda.StreamNonBlocking)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.drv.StreamDestroy(e.ctx, s); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// TestRingAtItsLimit: when the ring cannot grow — at MaxRingSlots, or
// because the driver refuses the allocation — a launch that finds every
// slot in flight on another stream waits for the oldest (outside the
// lock), and never reuses a slot before the launch that read it ran: the
// simulator uploads a held stream's descriptors only when it runs, so an
// early reuse would corrupt A's copies.
func TestRingAtItsLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		fail bool // the growth's host registration fails
	}{
		{"at MaxRingSlots", 2, false},
		{"growth refused", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSimEnv(t, sim.Config{})
			eng := newEngine(t, e, transfer.Options{RingSlots: 2, MaxRingSlots: tc.max})
			sA, sB := e.s, newStream(t, e)
			rng := rand.New(rand.NewPCG(8, 1))
			src := &region{base: e.hbm(t, 1<<20), want: make([]byte, 1<<20)}
			dstA := &region{base: e.dram(t, 1<<20), want: make([]byte, 1<<20)}
			dstB := &region{base: e.dram(t, 1<<20), want: make([]byte, 1<<20)}
			for _, r := range []*region{src, dstA, dstB} {
				r.fill(t, e, rng)
			}
			release := e.sim.HoldStream(sA)
			defer release()
			var handles []*transfer.Handle
			for range 2 {
				h, err := eng.SubmitAsync(sA, plan(rng, []*region{src}, []*region{dstA}, 32, 4<<10))
				if err != nil {
					t.Fatal(err)
				}
				handles = append(handles, h)
			}
			if tc.fail {
				e.sim.Fail("MemHostRegister", 1, cuda.ErrorOutOfMemory)
			}
			bDone := make(chan error, 1)
			go func() { bDone <- eng.Do(sB, plan(rng, []*region{src}, []*region{dstB}, 32, 4<<10)) }()
			select {
			case err := <-bDone:
				t.Fatalf("B found a slot although every slot was in flight and the ring could not grow: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			release()
			if err := <-bDone; err != nil {
				t.Fatal(err)
			}
			for _, h := range handles {
				if err := h.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			dstA.check(t, e)
			dstB.check(t, e)
			if injected := slices.ContainsFunc(e.sim.Calls(), func(c sim.Call) bool { return c.Injected }); injected != tc.fail {
				t.Errorf("growth refused by the driver: %v, want %v", injected, tc.fail)
			}
			st := eng.Stats()
			if st.RingGrows != 0 || st.RingSlots != 2 || st.RingWaits == 0 {
				t.Errorf("stats %+v: want no growth, 2 slots, a wait", st)
			}
		})
	}
}
