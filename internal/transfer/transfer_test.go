package transfer_test

import (
	"bytes"
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

func newEngine(tb testing.TB, e *env, opts transfer.Options) *transfer.Engine {
	tb.Helper()
	eng, err := transfer.New(e.drv, e.ctx, 0, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := eng.Close(); err != nil {
			tb.Errorf("engine Close: %v", err)
		}
	})
	return eng
}

// region is a device-addressable range and its expected content.
type region struct {
	base cuda.DevicePtr
	want []byte
}

func (r *region) fill(tb testing.TB, e *env, rng *rand.Rand) {
	tb.Helper()
	for i := range r.want {
		r.want[i] = byte(rng.Uint32())
	}
	if err := e.drv.MemcpyHtoD(e.ctx, r.base, r.want); err != nil {
		tb.Fatal(err)
	}
}

func (r *region) check(tb testing.TB, e *env) {
	tb.Helper()
	got := make([]byte, len(r.want))
	if err := e.drv.MemcpyDtoH(e.ctx, got, r.base); err != nil {
		tb.Fatal(err)
	}
	if i := firstDiff(got, r.want); i >= 0 {
		tb.Fatalf("region %#x: byte %d is %#x, want %#x", r.base, i, got[i], r.want[i])
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// plan builds a batch of n random-size, non-overlapping copies from srcs to
// dsts (any region of each), applying them to the dsts' expected content.
func plan(rng *rand.Rand, srcs, dsts []*region, n int, maxLen int) []cuda.Copy {
	type used struct{ lo, hi int }
	taken := make(map[*region][]used)
	free := func(r *region, lo, hi int) bool {
		for _, u := range taken[r] {
			if lo < u.hi && u.lo < hi {
				return false
			}
		}
		return true
	}
	var cs []cuda.Copy
	for len(cs) < n {
		l := 1 + rng.IntN(maxLen)
		if rng.IntN(3) == 0 {
			l = (l + 15) &^ 15 // some 16-byte multiples
		}
		s, d := srcs[rng.IntN(len(srcs))], dsts[rng.IntN(len(dsts))]
		if l > len(s.want) || l > len(d.want) {
			continue
		}
		so, do := rng.IntN(len(s.want)-l+1), rng.IntN(len(d.want)-l+1)
		if rng.IntN(2) == 0 { // aligned offsets half of the time
			so, do = so&^15, do&^15
		}
		if !free(d, do, do+l) {
			continue
		}
		taken[d] = append(taken[d], used{do, do + l})
		cs = append(cs, cuda.Copy{Dst: d.base + cuda.DevicePtr(do), Src: s.base + cuda.DevicePtr(so), Len: uint64(l)})
		copy(d.want[do:do+l], s.want[so:so+l])
	}
	return cs
}

// TestBatchesByteExact puts random blocks from HBM into several DRAM
// segments and gets them back into HBM, through each completion style, with
// a crossover that sends part of every batch to each path.
func TestBatchesByteExact(t *testing.T) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	eng := newEngine(t, e, transfer.Options{CopyEngineMinBytes: 64 << 10, SlotDescs: 64, RingSlots: 2})
	rng := rand.New(rand.NewPCG(7, 11))
	var dram []*region
	for range 3 {
		dram = append(dram, &region{base: e.dram(t, 1<<20), want: make([]byte, 1<<20)})
	}
	hbmSrc := &region{base: e.hbm(t, 2<<20), want: make([]byte, 2<<20)}
	hbmDst := &region{base: e.hbm(t, 2<<20), want: make([]byte, 2<<20)}
	for _, r := range append([]*region{hbmSrc, hbmDst}, dram...) {
		r.fill(t, e, rng)
	}
	waits := map[string]func([]cuda.Copy) error{
		"Submit": func(cs []cuda.Copy) error {
			if err := eng.Submit(e.s, cs); err != nil {
				return err
			}
			return e.drv.StreamSynchronize(e.ctx, e.s)
		},
		"Do": func(cs []cuda.Copy) error { return eng.Do(e.s, cs) },
		"SubmitAsync": func(cs []cuda.Copy) error {
			h, err := eng.SubmitAsync(e.s, cs)
			if err != nil {
				return err
			}
			if err := h.Wait(); err != nil {
				return err
			}
			if done, err := h.Done(); !done || err != nil {
				return fmt.Errorf("Done after Wait = %v, %v", done, err)
			}
			return nil
		},
	}
	for _, name := range []string{"Submit", "Do", "SubmitAsync"} {
		t.Run(name, func(t *testing.T) {
			for round := range 4 {
				put := plan(rng, []*region{hbmSrc}, dram, 150, 96<<10)
				if err := waits[name](put); err != nil {
					t.Fatalf("round %d put: %v", round, err)
				}
				get := plan(rng, dram, []*region{hbmDst}, 150, 96<<10)
				if err := waits[name](get); err != nil {
					t.Fatalf("round %d get: %v", round, err)
				}
			}
			for _, r := range append([]*region{hbmDst}, dram...) {
				r.check(t, e)
			}
		})
	}
	st := eng.Stats()
	if st.KernelBlocks == 0 || st.BatchBlocks == 0 || st.KernelLaunches < 3*8*2 {
		t.Fatalf("both paths should have run, with 64-descriptor slots splitting launches: %+v", st)
	}
}

// TestRouting counts driver calls: one upload + one launch for the small
// blocks, one batched copy for the large ones — never a call per block.
func TestRouting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     sim.Config
		opts    transfer.Options
		small   int // blocks of 4 KiB
		large   int // blocks of 1 MiB
		launch  int
		batch   int
		memcpy  int // MemcpyAsync crossings (descriptor uploads + per-copy fallback)
		kBlocks uint64
	}{
		{"mixed", sim.Config{}, transfer.Options{}, 100, 3, 1, 1, 1, 100},
		{"small only", sim.Config{}, transfer.Options{}, 64, 0, 1, 0, 1, 64},
		{"large only", sim.Config{}, transfer.Options{}, 0, 4, 0, 1, 0, 0},
		{"no batch capability", sim.Config{NoMemcpyBatch: true}, transfer.Options{}, 10, 4, 1, 0, 2, 10},
		{"old driver", sim.Config{DriverVersion: 12040}, transfer.Options{}, 0, 4, 0, 0, 1, 0},
		{"threshold 4KiB", sim.Config{}, transfer.Options{CopyEngineMinBytes: 4096}, 10, 4, 0, 1, 0, 0},
		{"forced kernel", sim.Config{}, transfer.Options{Route: transfer.RouteKernel}, 10, 4, 1, 0, 1, 14},
		{"forced per-copy", sim.Config{}, transfer.Options{Route: transfer.RouteCopyEach}, 10, 4, 0, 0, 1, 0},
		{"forced batch", sim.Config{}, transfer.Options{Route: transfer.RouteCopyBatch}, 10, 4, 0, 1, 0, 0},
		{"split launches", sim.Config{}, transfer.Options{SlotDescs: 32}, 100, 0, 4, 0, 4, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSimEnv(t, tc.cfg)
			eng := newEngine(t, e, tc.opts)
			src := e.hbm(t, 8<<20)
			dst := e.dram(t, 8<<20)
			var cs []cuda.Copy
			for i := range tc.small {
				cs = append(cs, cuda.Copy{Dst: dst + cuda.DevicePtr(i*4096), Src: src + cuda.DevicePtr(i*4096), Len: 4096})
			}
			for i := range tc.large {
				off := cuda.DevicePtr(4<<20 + i<<20)
				cs = append(cs, cuda.Copy{Dst: dst + off, Src: src + off, Len: 1 << 20})
			}
			e.sim.ResetCalls()
			if err := eng.Submit(e.s, cs); err != nil {
				t.Fatal(err)
			}
			got := [3]int{e.sim.CallCount("LaunchKernel"), e.sim.CallCount("MemcpyBatchAsync"), e.sim.CallCount("MemcpyAsync")}
			if want := [3]int{tc.launch, tc.batch, tc.memcpy}; got != want {
				t.Fatalf("calls (launch, batch, memcpy) = %v, want %v\n%v", got, want, e.sim.Calls())
			}
			if n := e.sim.CallCount("StreamSynchronize") + e.sim.CallCount("EventSynchronize"); n != 0 {
				t.Fatalf("Submit waited on the CPU (%d synchronizations)", n)
			}
			if st := eng.Stats(); st.KernelBlocks != tc.kBlocks {
				t.Fatalf("kernel blocks %d, want %d (%+v)", st.KernelBlocks, tc.kBlocks, st)
			}
		})
	}
}

// TestSubmitOptionsCrossover: SubmitAsyncWith's CopyEngineMinBytes routes
// that batch alone — 64 KiB blocks go to the copy engine with 64 KiB, to
// the kernel with the engine's 128 KiB default — and the bytes arrive
// either way.
func TestSubmitOptionsCrossover(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	const n, size = 10, 64 << 10
	src := &region{base: e.hbm(t, n*size), want: make([]byte, n*size)}
	src.fill(t, e, rng)
	for _, tc := range []struct {
		name          string
		o             transfer.SubmitOptions
		launch, batch int
	}{
		{"default", transfer.SubmitOptions{}, 1, 0},
		{"64KiB", transfer.SubmitOptions{CopyEngineMinBytes: 64 << 10}, 0, 1},
		{"128KiB", transfer.SubmitOptions{CopyEngineMinBytes: 128 << 10}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := &region{base: e.dram(t, n*size), want: src.want}
			var cs []cuda.Copy
			for i := range n {
				off := cuda.DevicePtr(i * size)
				cs = append(cs, cuda.Copy{Dst: dst.base + off, Src: src.base + off, Len: size})
			}
			e.sim.ResetCalls()
			h, err := eng.SubmitAsyncWith(e.s, cs, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Wait(); err != nil {
				t.Fatal(err)
			}
			if got := [2]int{e.sim.CallCount("LaunchKernel"), e.sim.CallCount("MemcpyBatchAsync")}; got != [2]int{tc.launch, tc.batch} {
				t.Fatalf("calls (launch, batch) = %v, want [%d %d]", got, tc.launch, tc.batch)
			}
			dst.check(t, e)
		})
	}
}

func TestForcedBatchWithoutCapability(t *testing.T) {
	e := newSimEnv(t, sim.Config{NoMemcpyBatch: true})
	before := e.live()
	_, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{Route: transfer.RouteCopyBatch})
	if !errors.Is(err, cuda.ErrorNotSupported) {
		t.Fatalf("New(RouteCopyBatch) without the capability: %v", err)
	}
	if after := e.live(); after.Total() != before.Total() {
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

func TestInvalidCopies(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	buf := e.hbm(t, 1<<20)
	for _, bad := range []cuda.Copy{
		{Dst: 0, Src: buf, Len: 8},
		{Dst: buf, Src: 0, Len: 8},
		{Dst: ^cuda.DevicePtr(0) - 4, Src: buf, Len: 8},
	} {
		e.sim.ResetCalls()
		err := eng.Submit(e.s, []cuda.Copy{{Dst: buf, Src: buf + 4096, Len: 16}, bad})
		if !errors.Is(err, transfer.ErrInvalidCopy) {
			t.Fatalf("copy %+v: %v", bad, err)
		}
		if n := e.sim.CallCount(""); n != 0 {
			t.Fatalf("rejected batch made %d driver calls", n)
		}
	}
	// Empty batches and zero-length copies are no-ops.
	e.sim.ResetCalls()
	if err := eng.Submit(e.s, nil); err != nil {
		t.Fatal(err)
	}
	if err := eng.Submit(e.s, []cuda.Copy{{Dst: buf, Src: buf + 64, Len: 0}}); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.CallCount(""); n != 0 {
		t.Fatalf("empty batches made %d driver calls", n)
	}
	// A copy the device cannot access fails in the kernel (simulated fault).
	err := eng.Do(e.s, []cuda.Copy{{Dst: buf, Src: 4096, Len: 64}})
	if !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Fatalf("unmapped source: %v", err)
	}
}

// TestFaults fails each driver call of the data path once: the call returns
// the error, the engine stays usable, and Close leaves no objects behind.
func TestFaults(t *testing.T) {
	for _, method := range []string{"MemcpyAsync", "LaunchKernel", "EventRecord", "MemcpyBatchAsync", "EventCreate", "EventSynchronize", "EventQuery"} {
		for _, api := range []string{"Do", "SubmitAsync"} {
			t.Run(method+"/"+api, func(t *testing.T) {
				e := newSimEnv(t, sim.Config{})
				rng := rand.New(rand.NewPCG(3, 4))
				src := &region{base: e.hbm(t, 4<<20), want: make([]byte, 4<<20)}
				dst := &region{base: e.dram(t, 4<<20), want: make([]byte, 4<<20)}
				src.fill(t, e, rng)
				dst.fill(t, e, rng)
				before := e.live()
				eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{RingSlots: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { eng.Close() }) // idempotent; the test closes it itself
				run := func(cs []cuda.Copy) error {
					if api == "Do" {
						return eng.Do(e.s, cs)
					}
					h, err := eng.SubmitAsync(e.s, cs)
					if err != nil {
						return err
					}
					werr := h.Wait()
					if done, err := h.Done(); !done || err != werr {
						return fmt.Errorf("Done after Wait = %v, %v; Wait said %v", done, err, werr)
					}
					return werr
				}
				// 20 small blocks in the first 3 MiB, one large block after.
				mixed := func() []cuda.Copy {
					lo := &region{base: dst.base, want: dst.want[:3<<20]}
					return plan(rng, []*region{src}, []*region{lo}, 20, 64<<10)
				}
				// Warm up: the ring slot is in flight (EventQuery on reuse) and
				// the event pool holds one event (no EventCreate next time).
				if method != "EventCreate" {
					if err := run(append(mixed(), cuda.Copy{Dst: dst.base + 3<<20, Src: src.base + 3<<20, Len: 1 << 20})); err != nil {
						t.Fatal(err)
					}
				}
				e.sim.Fail(method, 1, cuda.ErrorLaunchFailed)
				cs := append(mixed(), cuda.Copy{Dst: dst.base + 3<<20, Src: src.base + 3<<20, Len: 1 << 20})
				err = run(cs)
				injected := false
				for _, c := range e.sim.Calls() {
					injected = injected || c.Injected
				}
				if !injected {
					t.Fatalf("%s is not on the %s path: no fault fired", method, api)
				}
				if !errors.Is(err, cuda.ErrorLaunchFailed) {
					t.Fatalf("injected %s failure, got %v", method, err)
				}
				e.sim.ClearFaults()
				// Usable afterwards and byte-exact for a fresh batch over
				// the whole destination.
				if err := run([]cuda.Copy{{Dst: dst.base, Src: src.base, Len: 4 << 20}}); err != nil {
					t.Fatalf("after the fault: %v", err)
				}
				copy(dst.want, src.want)
				dst.check(t, e)
				if err := eng.Close(); err != nil {
					t.Fatal(err)
				}
				if after := e.live(); after.Total() != before.Total() {
					t.Fatalf("live objects %v -> %v", before, after)
				}
			})
		}
	}
}

// TestNewFaults fails every driver call New makes, one at a time: New fails
// with that error and leaves nothing behind.
func TestNewFaults(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	before := e.live()
	for n := 1; ; n++ {
		e.sim.ResetCalls()
		e.sim.FailAny(n, cuda.ErrorOutOfMemory)
		eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{RingSlots: 3})
		e.sim.ClearFaults()
		if err == nil {
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			if n < 6 {
				t.Fatalf("New succeeded with only %d calls", n-1)
			}
			break
		}
		if !errors.Is(err, cuda.ErrorOutOfMemory) {
			t.Fatalf("call %d failed: New returned %v", n, err)
		}
		if after := e.live(); after.Total() != before.Total() {
			t.Fatalf("call %d (%v) failed: live objects %v -> %v", n, e.sim.Calls()[n-1], before, after)
		}
	}
	if after := e.live(); after.Total() != before.Total() {
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

func TestCloseFaultRetry(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	before := e.live()
	eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := eng.SubmitAsync(e.s, []cuda.Copy{{Dst: e.hbm(t, 4096), Src: e.hbm(t, 4096), Len: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Fail("ModuleUnload", 1, cuda.ErrorUnknown)
	e.sim.Fail("MemFree", 1, cuda.ErrorUnknown)
	if err := eng.Close(); !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("Close with failing teardown: %v", err)
	}
	if err := eng.Submit(e.s, nil); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if err := h.Wait(); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	e.sim.ResetCalls()
	if err := eng.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if got := [2]int{e.sim.CallCount("ModuleUnload"), e.sim.CallCount("MemFree")}; got != [2]int{1, 1} {
		t.Fatalf("retry redid (ModuleUnload, MemFree) = %v, want only the failed steps once", got)
	}
	if e.sim.CallCount("EventDestroy") != 0 || e.sim.CallCount("MemHostUnregister") != 0 {
		t.Fatalf("retry repeated succeeded steps: %v", e.sim.Calls())
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if after := e.live(); after.Total() != before.Total()+2 { // the two test buffers
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

func TestConcurrentStreams(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{CopyEngineMinBytes: 16 << 10, RingSlots: 2})
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s, err := e.drv.StreamCreate(e.ctx, cuda.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		defer e.drv.StreamDestroy(e.ctx, s)
		rng := rand.New(rand.NewPCG(uint64(w), 99))
		src := &region{base: e.hbm(t, 1<<20), want: make([]byte, 1<<20)}
		dst := &region{base: e.dram(t, 2<<20), want: make([]byte, 2<<20)}
		src.fill(t, e, rng)
		dst.fill(t, e, rng)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				cs := plan(rng, []*region{src}, []*region{dst}, 40, 32<<10)
				var err error
				if i%2 == 0 {
					err = eng.Do(s, cs)
				} else {
					var h *transfer.Handle
					if h, err = eng.SubmitAsync(s, cs); err == nil {
						err = h.Wait()
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			got := make([]byte, len(dst.want))
			if err := e.drv.MemcpyDtoH(e.ctx, got, dst.base); err != nil {
				errs <- err
			} else if i := firstDiff(got, dst.want); i >= 0 {
				errs <- fmt.Errorf("worker %d: byte %d differs", w, i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestKernelEmulationRegistered(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	newEngine(t, e, transfer.Options{})
	found := false
	for _, c := range e.sim.Calls() {
		if c.Method == "ModuleGetFunction" && bytes.Contains([]byte(c.Args), []byte(kernels.CopyBlocksEntry)) && c.Result == cuda.Success {
			found = true
		}
	}
	if !found {
		t.Fatal("the embedded PTX's entry was not resolved")
	}
}

// TestBatchOnDefaultStream: cuMemcpyBatchAsync refuses the default streams
// (as the real driver does), so large blocks submitted on stream 0 — the
// default current stream of PyTorch — run on the engine's side stream
// between a fork and a join event, byte-exact, without a CPU wait.
func TestBatchOnDefaultStream(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	src := e.hbm(t, 8<<20)
	dst := e.dram(t, 8<<20)
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i*31 + 7)
	}
	if err := e.drv.MemcpyHtoD(e.ctx, src, want); err != nil {
		t.Fatal(err)
	}
	cs := []cuda.Copy{{Dst: dst, Src: src, Len: 2 << 20}, {Dst: dst + 2<<20, Src: src + 2<<20, Len: 2 << 20}}
	if err := e.drv.MemcpyBatchAsync(e.ctx, cs, 0); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("sim MemcpyBatchAsync on stream 0 = %v, want INVALID_VALUE", err)
	}
	for round := 0; round < 2; round++ {
		e.sim.ResetCalls()
		if err := eng.Submit(0, cs); err != nil {
			t.Fatal(err)
		}
		var batchStream string
		for _, c := range e.sim.Calls() {
			if c.Method == "MemcpyBatchAsync" {
				batchStream = c.Args
			}
		}
		if e.sim.CallCount("MemcpyBatchAsync") != 1 || strings.Contains(batchStream, "stream=0x0") {
			t.Fatalf("want one batch on the side stream: %v", e.sim.Calls())
		}
		if got := [2]int{e.sim.CallCount("EventRecord"), e.sim.CallCount("StreamWaitEvent")}; got != [2]int{2, 2} {
			t.Fatalf("fork/join (record, wait) = %v, want [2 2]: %v", got, e.sim.Calls())
		}
		if n := e.sim.CallCount("StreamSynchronize") + e.sim.CallCount("EventSynchronize"); n != 0 {
			t.Fatalf("Submit waited on the CPU (%d synchronizations)", n)
		}
	}
	got := make([]byte, 4<<20)
	if err := e.drv.MemcpyDtoH(e.ctx, got, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
}

// TestCloseDrainFailure: when Close cannot wait for a launch that still
// reads the descriptor ring, it must keep the ring, its events and the
// module (the kernel may still run), and a retried Close must finish.
func TestCloseDrainFailure(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	before := e.live()
	eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A small block: a kernel launch, so a ring slot is in flight.
	if err := eng.Submit(e.s, []cuda.Copy{{Dst: e.hbm(t, 4096), Src: e.hbm(t, 4096), Len: 4096}}); err != nil {
		t.Fatal(err)
	}
	e.sim.ResetCalls()
	e.sim.Fail("EventSynchronize", 1, cuda.ErrorUnknown)
	if err := eng.Close(); !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("Close with a failing drain: %v", err)
	}
	for _, m := range []string{"EventDestroy", "MemFree", "MemHostUnregister", "ModuleUnload"} {
		if n := e.sim.CallCount(m); n != 0 {
			t.Fatalf("Close released what an undrained launch may still use (%s x%d): %v", m, n, e.sim.Calls())
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if after := e.live(); after.Total() != before.Total()+2 { // the two test buffers
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

// TestDoWaitsAfterPartialSubmit: when a driver call fails after part of the
// batch was enqueued (the copy-engine blocks, then the kernel launch fails;
// or the copies, then the completion event), Do must not return while those
// copies may still run: its caller releases the mappings and the buffers
// they touch.
func TestDoWaitsAfterPartialSubmit(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		kernel       bool // a small block too (the SM kernel after the copy engine)
	}{
		{"launch fails", "LaunchKernel", true},
		{"no completion event", "EventCreate", false},
		{"completion event not recorded", "EventRecord", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSimEnv(t, sim.Config{})
			eng := newEngine(t, e, transfer.Options{})
			src, dst := e.hbm(t, 4<<20), e.dram(t, 4<<20)
			cs := []cuda.Copy{{Dst: dst, Src: src, Len: 2 << 20}} // copy engine
			if tc.kernel {
				cs = append(cs, cuda.Copy{Dst: dst + 3<<20, Src: src + 3<<20, Len: 4096})
			}
			e.sim.ResetCalls()
			e.sim.Fail(tc.method, 1, cuda.ErrorLaunchFailed)
			if err := eng.Do(e.s, cs); !errors.Is(err, cuda.ErrorLaunchFailed) {
				t.Fatalf("Do with a failing %s: %v", tc.method, err)
			}
			waited, failed := false, false
			for _, c := range e.sim.Calls() {
				failed = failed || c.Injected
				if failed && (c.Method == "StreamSynchronize" || c.Method == "EventSynchronize") && c.Result == cuda.Success {
					waited = true
				}
			}
			if !failed {
				t.Fatalf("%s was not called: %v", tc.method, e.sim.Calls())
			}
			if !waited {
				t.Fatalf("Do returned without waiting for the enqueued part of the batch: %v", e.sim.Calls())
			}
		})
	}
}

// TestFewCopies: with FewCopies set, a batch of at most that many copies
// goes to the copy engine, one cuMemcpyAsync each on the caller's stream
// (lowest latency for a single get or put); larger batches of small copies
// still go to the kernel.
func TestFewCopies(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{FewCopies: 2})
	src, dst := e.hbm(t, 1<<20), e.dram(t, 1<<20)
	mk := func(n int) []cuda.Copy {
		cs := make([]cuda.Copy, n)
		for i := range cs {
			cs[i] = cuda.Copy{Dst: dst + cuda.DevicePtr(i*4096), Src: src + cuda.DevicePtr(i*4096), Len: 4096}
		}
		return cs
	}
	if err := eng.Do(e.s, mk(2)); err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats(); st.EachCalls != 1 || st.EachBlocks != 2 || st.KernelLaunches != 0 {
		t.Fatalf("two small copies: %+v, want one per-copy crossing", st)
	}
	if err := eng.Do(e.s, mk(3)); err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats(); st.KernelLaunches != 1 || st.KernelBlocks != 3 {
		t.Fatalf("three small copies: %+v, want a kernel launch", st)
	}
}

// TestTimeBatches: with Options.TimeBatches every SubmitAsync batch reports
// its GPU time once complete (and only then), the bytes are the same, and
// the timing events go back to the pool and are destroyed by Close; without
// it GPUTime stays 0.
func TestTimeBatches(t *testing.T) {
	e := newSimEnv(t, sim.Config{Granularity: 1 << 20})
	before := e.live()
	rng := rand.New(rand.NewPCG(3, 5))
	dram := &region{base: e.dram(t, 1<<20), want: make([]byte, 1<<20)}
	src := &region{base: e.hbm(t, 1<<20), want: make([]byte, 1<<20)}
	src.fill(t, e, rng)
	for _, timed := range []bool{false, true} {
		eng, err := transfer.New(e.drv, e.ctx, 0, transfer.Options{CopyEngineMinBytes: 64 << 10, TimeBatches: timed})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			// Two batches in flight at once, each with both paths, timed
			// from an anchor recorded before them.
			var anchor cuda.Event
			if timed {
				if anchor, err = eng.Anchor(e.s); err != nil {
					t.Fatal(err)
				}
			}
			var hs []*transfer.Handle
			for range 2 {
				h, err := eng.SubmitAsyncWith(e.s, plan(rng, []*region{src}, []*region{dram}, 40, 96<<10), transfer.SubmitOptions{Anchor: anchor})
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			var prevEnd time.Duration
			for i, h := range hs {
				if err := h.Wait(); err != nil {
					t.Fatal(err)
				}
				if g := h.GPUTime(); (g > 0) != timed {
					t.Errorf("timed %v, round %d, batch %d: GPUTime %v", timed, round, i, g)
				}
				// In stream order: each batch starts after the last ended.
				st, end := h.GPUSpan()
				if timed && (st < prevEnd || end <= st) || !timed && (st != 0 || end != 0) {
					t.Errorf("timed %v, round %d, batch %d: GPU span [%v, %v], the last ended at %v", timed, round, i, st, end, prevEnd)
				}
				prevEnd = end
			}
			if anchor != 0 {
				eng.ReleaseAnchor(anchor)
			}
		}
		dram.check(t, e)
		if err := eng.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := e.live(); after.Total() != before.Total()+4 { // the test buffers: HBM, and DRAM's reservation, allocation, mapping
		t.Fatalf("live objects %v -> %v", before, after)
	}
}

// TestKernelSlicesOnDevice: launches of few blocks, which launchShape splits
// over CTAs (grid.y) in slices, copy every byte of every block and nothing
// beside it — blocks of 16 KiB multiples and odd lengths, aligned and not
// (the kernel's byte tail), both directions. It runs on the simulator (whose
// emulation cuts the same slices) unless KVFABRIC_GPU_TESTS=1, then on the
// GPU's SM kernel.
func TestKernelSlicesOnDevice(t *testing.T) {
	e := newBenchEnv(t)
	eng := newEngine(t, e, transfer.Options{Route: transfer.RouteKernel})
	rng := rand.New(rand.NewPCG(19, 4))
	const size = 8 << 20
	dram := &region{base: e.dram(t, size), want: make([]byte, size)}
	hbm := &region{base: e.hbm(t, size), want: make([]byte, size)}
	for _, tc := range []struct {
		name string
		n    int
		len  uint64
		skew uint64 // added to every offset: 0 keeps 16-byte alignment
	}{
		{"one 1 MiB block", 1, 1 << 20, 0},
		{"3 blocks of 64 KiB", 3, 64 << 10, 0},
		{"64 blocks of 64 KiB", 64, 64 << 10, 0},
		{"64 blocks of 32 KiB", 64, 32 << 10, 0},
		{"5 odd blocks", 5, 64<<10 + 17, 0},
		{"7 unaligned odd blocks", 7, 200<<10 + 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, put := range []bool{true, false} {
				src, dst := hbm, dram
				if !put {
					src, dst = dram, hbm
				}
				src.fill(t, e, rng)
				dst.fill(t, e, rng) // the bytes beside the blocks must stay
				// Blocks at shuffled slots of the destination, each a slot
				// of the source in order.
				slot := (tc.len + tc.skew + 4095) &^ 4095
				order := rng.Perm(int(size / slot))[:tc.n]
				cs := make([]cuda.Copy, tc.n)
				for i, j := range order {
					so, do := uint64(i)*slot+tc.skew, uint64(j)*slot+tc.skew
					cs[i] = cuda.Copy{Dst: dst.base + cuda.DevicePtr(do), Src: src.base + cuda.DevicePtr(so), Len: tc.len}
					copy(dst.want[do:do+tc.len], src.want[so:so+tc.len])
				}
				if err := eng.Do(e.s, cs); err != nil {
					t.Fatalf("put=%v: %v", put, err)
				}
				dst.check(t, e)
			}
		})
	}
	if st := eng.Stats(); st.KernelLaunches != 12 || st.BatchBlocks != 0 {
		t.Fatalf("want one kernel launch per batch and no copy-engine block: %+v", st)
	}
}
