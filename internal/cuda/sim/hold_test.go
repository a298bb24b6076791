package sim_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

// TestHoldStream: work behind a hold runs only at the release, in order;
// events recorded behind it are incomplete until then, CPU waits on them
// block, a stream that waits on one queues behind it, and other streams
// run at once.
func TestHoldStream(t *testing.T) {
	d := newDriver(t, sim.Config{})
	ctx := retain(t, d, 0)
	var s [3]cuda.Stream
	for i := range s {
		var err error
		s[i], err = d.StreamCreate(ctx, cuda.StreamNonBlocking)
		must(t, err)
	}
	const n = 4096
	src, err := d.MemAlloc(ctx, n)
	must(t, err)
	mid, err := d.MemAlloc(ctx, n)
	must(t, err)
	dst, err := d.MemAlloc(ctx, n)
	must(t, err)
	other, err := d.MemAlloc(ctx, n)
	must(t, err)
	want := bytes.Repeat([]byte{0x3c}, n)
	must(t, d.MemcpyHtoD(ctx, src, want))
	ev, err := d.EventCreate(ctx, cuda.EventDisableTiming)
	must(t, err)
	read := func(p cuda.DevicePtr) []byte {
		b := make([]byte, n)
		must(t, d.MemcpyDtoH(ctx, b, p))
		return b
	}

	release := d.HoldStream(s[0])
	must(t, d.MemcpyBatchAsync(ctx, []cuda.Copy{{Dst: mid, Src: src, Len: n}}, s[0]))
	must(t, d.EventRecord(ctx, ev, s[0]))
	// s[1] waits for ev, then copies mid -> dst: behind the hold too.
	must(t, d.StreamWaitEvent(ctx, s[1], ev))
	must(t, d.MemcpyAsync(ctx, []cuda.Copy{{Dst: dst, Src: mid, Len: n}}, s[1]))
	// s[2] is independent and runs at once.
	must(t, d.MemcpyAsync(ctx, []cuda.Copy{{Dst: other, Src: src, Len: n}}, s[2]))
	must(t, d.StreamSynchronize(ctx, s[2]))
	if !bytes.Equal(read(other), want) {
		t.Fatal("an independent stream waited for the held one")
	}
	if bytes.Equal(read(mid), want) || bytes.Equal(read(dst), want) {
		t.Fatal("work behind the hold ran before the release")
	}
	if done, err := d.EventQuery(ctx, ev); err != nil || done {
		t.Fatalf("EventQuery behind the hold = %v, %v; want false", done, err)
	}
	if got := [2]int{d.PendingOps(s[0]), d.PendingOps(s[1])}; got != [2]int{2, 2} {
		t.Fatalf("pending ops = %v, want [2 2]", got)
	}
	synced := make(chan error, 2)
	go func() { synced <- d.EventSynchronize(ctx, ev) }()
	go func() { synced <- d.StreamSynchronize(ctx, s[1]) }()
	select {
	case err := <-synced:
		t.Fatalf("a CPU wait returned before the release: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	release() // idempotent
	for range 2 {
		must(t, <-synced)
	}
	if !bytes.Equal(read(dst), want) {
		t.Fatal("the chain mid -> dst did not run in order after the release")
	}
	if done, err := d.EventQuery(ctx, ev); err != nil || !done {
		t.Fatalf("EventQuery after the release = %v, %v", done, err)
	}

	// A kernel fault behind a hold fails no enqueueing call; the stream's
	// next synchronization and the events recorded after it report it.
	m, err := d.ModuleLoadData(ctx, append([]byte(testPTX), 0))
	must(t, err)
	d.RegisterKernel("fill", fillKernel)
	f, err := d.ModuleGetFunction(ctx, m, "fill")
	must(t, err)
	release = d.HoldStream(s[0])
	must(t, d.LaunchKernel(ctx, f, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, 0, s[0], fillParams(4096, 16, 1)))
	must(t, d.EventRecord(ctx, ev, s[0]))
	release()
	if err := d.EventSynchronize(ctx, ev); !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Errorf("EventSynchronize after a deferred fault: %v", err)
	}
	if err := d.StreamSynchronize(ctx, s[0]); !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Errorf("StreamSynchronize after a deferred fault: %v", err)
	}
	must(t, d.StreamSynchronize(ctx, s[0])) // reported once

	must(t, d.ModuleUnload(ctx, m))
	must(t, d.EventDestroy(ctx, ev))
	for _, p := range []cuda.DevicePtr{src, mid, dst, other} {
		must(t, d.MemFree(ctx, p))
	}
	for _, st := range s {
		must(t, d.StreamDestroy(ctx, st))
	}
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}
