package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// mmapHost is n bytes of page-aligned host memory outside the Go heap.
func mmapHost(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func ptrOf(b []byte) uintptr { return uintptr(addrOf(b)) }

// TestUnregisteredHostMemory: a region in pageable host memory the driver
// does not know fails its key with ErrNotRegistered (naming key, region and
// address) before anything is enqueued; the other keys of the batch —
// device memory, a Store-registered buffer, host memory page-locked by
// someone else — succeed. One PointerMemoryTypes call per get part or put
// pipeline chunk at most, none when every region is in a registered buffer.
func TestUnregisteredHostMemory(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 5 * time.Second})
	ctx := context.Background()
	const n = 4096
	dev := devBuf(t, e, n)
	fillRandom(t, e, dev, n, rand.New(rand.NewPCG(5, 6)))
	reg := mmapHost(t, 2*n) // registered through the Store
	if err := e.cons.RegisterBuffer(ptrOf(reg), uint64(len(reg))); err != nil {
		t.Fatal(err)
	}
	pinned := mmapHost(t, n) // page-locked by "another library"
	if err := e.drv.MemHostRegister(e.cons.Context(), ptrOf(pinned), n, 0); err != nil {
		t.Fatal(err)
	}
	pageable := make([]byte, n) // ordinary Go memory: never registered
	for i := range reg {
		reg[i] = byte(i * 3)
	}
	copy(pinned, bytes.Repeat([]byte{0x5a}, n))
	copy(pageable, bytes.Repeat([]byte{0xee}, n))

	keys := []string{"dev", "reg", "bad", "pinned"}
	srcs := [][]client.Region{
		client.Bytes(uintptr(dev), n),
		client.Bytes(ptrOf(reg), n),
		// Region 1 of "bad" is the pageable one.
		{{Ptr: ptrOf(reg) + n, Len: 16}, {Ptr: ptrOf(pageable), Len: n}},
		client.Bytes(ptrOf(pinned), n),
	}
	before := e.drv.CallCount("PointerMemoryTypes")
	errs := e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	// A put checks each pipeline chunk as it reaches it: the env's chunks
	// are of 1, 2 and 1 keys here.
	if c := e.drv.CallCount("PointerMemoryTypes") - before; c < 1 || c > 3 {
		t.Fatalf("%d PointerMemoryTypes calls for one batch of 3 chunks, want one per chunk at most", c)
	}
	for i, err := range errs {
		if keys[i] == "bad" {
			continue
		}
		if err != nil {
			t.Fatalf("put %q: %v", keys[i], err)
		}
	}
	bad := errs[2]
	if !errors.Is(bad, client.ErrNotRegistered) {
		t.Fatalf("put from pageable memory: %v, want ErrNotRegistered", bad)
	}
	for _, want := range []string{`"bad"`, "region 1", fmt.Sprintf("%#x", ptrOf(pageable))} {
		if !strings.Contains(bad.Error(), want) {
			t.Errorf("error %q does not name %s", bad, want)
		}
	}
	if ok, err := e.cons.Exists(ctx, "bad"); ok || err != nil {
		t.Fatalf("refused key exists: %v %v", ok, err)
	}

	// Gets: the pageable destination fails and stays untouched, the others
	// are byte-exact.
	clear(pageable)
	outDev := devBuf(t, e, n)
	outPinned := mmapHost(t, n)
	if err := e.drv.MemHostRegister(e.cons.Context(), ptrOf(outPinned), n, 0); err != nil {
		t.Fatal(err)
	}
	gkeys := []string{"reg", "dev", "pinned"}
	dsts := [][]client.Region{client.Bytes(ptrOf(pageable), n), client.Bytes(uintptr(outDev), n), client.Bytes(ptrOf(outPinned), n)}
	before = e.drv.CallCount("PointerMemoryTypes")
	sizes, gerrs := e.cons.BatchGet(ctx, gkeys, dsts, 0)
	if c := e.drv.CallCount("PointerMemoryTypes") - before; c != 1 {
		t.Fatalf("%d PointerMemoryTypes calls for one batch, want 1", c)
	}
	if !errors.Is(gerrs[0], client.ErrNotRegistered) || sizes[0] != 0 || !strings.Contains(gerrs[0].Error(), `"reg"`) {
		t.Fatalf("get into pageable memory: %d, %v", sizes[0], gerrs[0])
	}
	if !bytes.Equal(pageable, make([]byte, n)) {
		t.Fatal("refused get wrote into the pageable buffer")
	}
	for i := 1; i < 3; i++ {
		if gerrs[i] != nil || sizes[i] != n {
			t.Fatalf("get %q: %d, %v", gkeys[i], sizes[i], gerrs[i])
		}
	}
	if !bytes.Equal(readBack(t, e, outDev, n), readBack(t, e, dev, n)) {
		t.Fatal("device round trip differs")
	}
	if !bytes.Equal(outPinned, pinned) {
		t.Fatal("pinned round trip differs")
	}

	// Every region inside a registered buffer: no classification at all.
	before = e.drv.CallCount("PointerMemoryTypes")
	if _, err := e.cons.Get(ctx, "reg", client.Bytes(ptrOf(reg)+n, n), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.Put(ctx, "reg2", []client.Region{{Ptr: ptrOf(reg), Len: 8}, {Ptr: ptrOf(reg) + 100, Len: 8}}, 0, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := e.drv.CallCount("PointerMemoryTypes") - before; c != 0 {
		t.Fatalf("%d PointerMemoryTypes calls with registered buffers only, want 0", c)
	}
	if !bytes.Equal(reg[n:], reg[:n]) {
		t.Fatal("registered round trip differs")
	}

	// A region that starts in a registered buffer but runs past its end
	// into pageable memory is refused too (its last byte is unknown).
	tail := mmapHost(t, 2*4096)
	if err := e.cons.RegisterBuffer(ptrOf(tail), 4096); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.Put(ctx, "over", client.Bytes(ptrOf(tail)+4000, 200), 0, client.PutOptions{}); !errors.Is(err, client.ErrNotRegistered) {
		t.Fatalf("region past a registered buffer: %v, want ErrNotRegistered", err)
	}

	// A driver failure while classifying fails the keys that needed it
	// (ErrTransfer), not those inside registered buffers.
	e.drv.Fail("PointerMemoryTypes", 1, cuda.ErrorUnknown)
	perrs := e.cons.BatchPut(ctx, []string{"f1", "f2"}, [][]client.Region{client.Bytes(uintptr(dev), 64), client.Bytes(ptrOf(reg), 64)}, 0, client.PutOptions{})
	if !errors.Is(perrs[0], client.ErrTransfer) || !errors.Is(perrs[0], cuda.ErrorUnknown) || perrs[1] != nil {
		t.Fatalf("classification failure: %v", perrs)
	}

	for _, p := range []uintptr{ptrOf(pinned), ptrOf(outPinned)} {
		if err := e.drv.MemHostUnregister(e.cons.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close() // unregisters reg and tail; asserts no leaks
}

// TestRegisterBufferClassifies: RegisterBuffer registers only pageable host
// memory with the driver (and unregisters only that); device memory and
// host memory that is page-locked already are recorded as they are.
func TestRegisterBufferClassifies(t *testing.T) {
	e := newEnv(t, sim.Config{}, nil, master.Config{})
	cctx := e.cons.Context()
	dev := devBuf(t, e, 1<<16)
	pinned := mmapHost(t, 3*4096) // the first two pages page-locked
	if err := e.drv.MemHostRegister(cctx, ptrOf(pinned), 8192, 0); err != nil {
		t.Fatal(err)
	}
	pageable := mmapHost(t, 8192)
	regs := func() int { return e.drv.LiveObjects()[cuda.ObjRegistration] }
	base := regs() // pinned (ours, in this test) and the Store's own

	for _, tc := range []struct {
		name     string
		p        uintptr
		size     uint64
		newRegs  int // driver registrations RegisterBuffer adds
		wantHost bool
	}{
		{"device", uintptr(dev) + 64, 4096, 0, false},
		{"page-locked", ptrOf(pinned), 8192, 0, false},
		{"pageable", ptrOf(pageable), 8192, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := e.drv.CallCount("MemHostRegister")
			if err := e.cons.RegisterBuffer(tc.p, tc.size); err != nil {
				t.Fatal(err)
			}
			if got := e.drv.CallCount("MemHostRegister") - hr; got != tc.newRegs {
				t.Fatalf("%d MemHostRegister calls, want %d", got, tc.newRegs)
			}
			if got := regs() - base; got != tc.newRegs {
				t.Fatalf("%d new driver registrations, want %d", got, tc.newRegs)
			}
			if err := e.cons.RegisterBuffer(tc.p, 1); !errors.Is(err, client.ErrAlreadyRegistered) {
				t.Fatalf("second register: %v", err)
			}
			hu := e.drv.CallCount("MemHostUnregister")
			if err := e.cons.UnregisterBuffer(context.Background(), tc.p); err != nil {
				t.Fatal(err)
			}
			if got := e.drv.CallCount("MemHostUnregister") - hu; got != tc.newRegs {
				t.Fatalf("%d MemHostUnregister calls, want %d", got, tc.newRegs)
			}
			if regs() != base {
				t.Fatalf("driver registrations %d after unregister, want %d", regs(), base)
			}
		})
	}

	// A range from page-locked into unknown memory (ends of different
	// kinds), and a failing classification: refused, nothing registered.
	if err := e.cons.RegisterBuffer(ptrOf(pinned)+4096, 8192); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("range from pinned into unknown memory: %v, want ErrInvalidArgument", err)
	}
	e.drv.Fail("PointerMemoryTypes", 1, cuda.ErrorUnknown)
	if err := e.cons.RegisterBuffer(ptrOf(pageable), 8192); !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("register with a failing classification: %v", err)
	}
	if regs() != base {
		t.Fatalf("failed registers left driver registrations: %d, want %d", regs(), base)
	}
	if err := e.drv.MemHostUnregister(cctx, ptrOf(pinned)); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// lateSync is a consumer driver whose batches complete late: while armed,
// the next EventSynchronize (where transfer.Engine.Do waits for a batch's
// copies) reports on entered and blocks until release is closed.
type lateSync struct {
	*sim.Driver
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (d *lateSync) arm() {
	d.entered, d.release = make(chan struct{}), make(chan struct{})
	d.armed.Store(true)
}

func (d *lateSync) EventSynchronize(ctx cuda.Context, e cuda.Event) error {
	if d.armed.CompareAndSwap(true, false) {
		close(d.entered)
		<-d.release
	}
	return d.Driver.EventSynchronize(ctx, e)
}

// TestUnregisterWaitsForBatches: an UnregisterBuffer racing a batch whose
// copies into the buffer are still running does not return (nor unpin the
// memory) until the copies are complete; meanwhile new batches refuse the
// buffer. When its context ends first it fails with ErrBufferInUse, naming
// the buffer and the batches, and the buffer stays registered and usable.
func TestUnregisterWaitsForBatches(t *testing.T) {
	var ls *lateSync
	// The lease outlasts the copies held back below (else ErrLeaseExpired).
	e := newEnvWrapped(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Second},
		func(d *sim.Driver) cuda.Driver { ls = &lateSync{Driver: d}; return ls })
	ctx := context.Background()
	const n = 4096
	src := devBuf(t, e, n)
	want := fillRandom(t, e, src, n, rand.New(rand.NewPCG(9, 10)))
	if err := e.cons.Put(ctx, "k", client.Bytes(uintptr(src), n), 0, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	buf := mmapHost(t, 2*n)
	if err := e.cons.RegisterBuffer(ptrOf(buf), uint64(len(buf))); err != nil {
		t.Fatal(err)
	}

	ls.arm()
	got := make(chan error, 1)
	go func() {
		_, err := e.cons.Get(ctx, "k", client.Bytes(ptrOf(buf), n), 0)
		got <- err
	}()
	<-ls.entered // the get's copy is in flight
	unpins := e.drv.CallCount("MemHostUnregister")
	unreg := make(chan error, 1)
	go func() { unreg <- e.cons.UnregisterBuffer(ctx, ptrOf(buf)) }()
	select {
	case err := <-unreg:
		t.Fatalf("UnregisterBuffer returned (%v) while a copy into the buffer was running", err)
	case <-time.After(200 * time.Millisecond):
	}
	if c := e.drv.CallCount("MemHostUnregister") - unpins; c != 0 {
		t.Fatalf("buffer unpinned %d times while a copy into it was running", c)
	}
	// While the unregister waits, a new batch refuses the buffer at once.
	err := e.cons.Put(ctx, "late", client.Bytes(ptrOf(buf)+n, 64), 0, client.PutOptions{})
	if !errors.Is(err, client.ErrNotRegistered) || !strings.Contains(err.Error(), "being unregistered") {
		t.Fatalf("put from a buffer being unregistered: %v, want ErrNotRegistered", err)
	}
	close(ls.release)
	if err := <-got; err != nil {
		t.Fatalf("get: %v", err)
	}
	if err := <-unreg; err != nil {
		t.Fatalf("unregister: %v", err)
	}
	if c := e.drv.CallCount("MemHostUnregister") - unpins; c != 1 {
		t.Fatalf("%d MemHostUnregister calls, want 1", c)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Fatal("get into the buffer is not byte-exact")
	}

	// The wait is bounded by ctx: ErrBufferInUse, and nothing changes.
	if err := e.cons.RegisterBuffer(ptrOf(buf), uint64(len(buf))); err != nil {
		t.Fatal(err)
	}
	ls.arm()
	go func() {
		_, err := e.cons.Get(ctx, "k", client.Bytes(ptrOf(buf), n), 0)
		got <- err
	}()
	<-ls.entered
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = e.cons.UnregisterBuffer(short, ptrOf(buf))
	cancel()
	if !errors.Is(err, client.ErrBufferInUse) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unregister with a short deadline: %v, want ErrBufferInUse", err)
	}
	for _, w := range []string{fmt.Sprintf("%#x", ptrOf(buf)), "1 batch"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	close(ls.release)
	if err := <-got; err != nil {
		t.Fatalf("get: %v", err)
	}
	probes := e.drv.CallCount("PointerMemoryTypes")
	if _, err := e.cons.Get(ctx, "k", client.Bytes(ptrOf(buf)+n, n), 0); err != nil {
		t.Fatalf("get after a failed unregister: %v", err)
	}
	if c := e.drv.CallCount("PointerMemoryTypes") - probes; c != 0 {
		t.Fatalf("buffer no longer registered after a failed unregister (%d classifications)", c)
	}
	if err := e.cons.UnregisterBuffer(ctx, ptrOf(buf)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestLazyPutChecks: a batch put of many chunks checks each chunk's
// buffers as its pipeline reaches it. A key whose source is pageable
// memory fails with ErrNotRegistered at its own position, whichever chunk
// it is in; the others are stored byte-exact; and every hold the chunks
// took on the registered source is released when BatchPut returns (an
// unregister then does not wait).
func TestLazyPutChecks(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 64, 1024
	reg := mmapHost(t, n*size)
	for i := range reg {
		reg[i] = byte(i*7 + i/size)
	}
	pageable := make([]byte, size) // ordinary Go memory: never registered
	st, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: e.mc, ClientID: "lazy-checks", PipelineChunk: testPipelineChunk, BatchParts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterBuffer(ptrOf(reg), uint64(len(reg))); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, n)
	srcs := make([][]client.Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("lazy/%d", i)
		srcs[i] = client.Bytes(ptrOf(reg)+uintptr(i*size), size)
		if i%9 == 4 {
			srcs[i] = client.Bytes(ptrOf(pageable), size)
		}
	}
	errs := st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	runtime.KeepAlive(pageable)
	out := mmapHost(t, size)
	if err := e.drv.MemHostRegister(e.cons.Context(), ptrOf(out), size, 0); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if i%9 == 4 {
			if !errors.Is(err, client.ErrNotRegistered) || !strings.Contains(err.Error(), keys[i]) {
				t.Fatalf("put %s from pageable memory: %v, want ErrNotRegistered naming the key", keys[i], err)
			}
			if ok, err := st.Exists(ctx, keys[i]); ok || err != nil {
				t.Fatalf("refused key %s exists: %v %v", keys[i], ok, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
		if _, err := st.Get(ctx, keys[i], client.Bytes(ptrOf(out), size), 0); err != nil || !bytes.Equal(out, reg[i*size:(i+1)*size]) {
			t.Fatalf("get %s: %v or not its bytes", keys[i], err)
		}
	}
	wantNoPending(t, e)
	uctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := st.UnregisterBuffer(uctx, ptrOf(reg)); err != nil {
		t.Fatalf("unregister after the batch: %v (a hold not released?)", err)
	}
	if _, err := st.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.MemHostUnregister(e.cons.Context(), ptrOf(out)); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestCheckBuffersPerTensor: vLLM's paged KV cache, one registered buffer
// per layer tensor and each key one block of every tensor (region j in
// tensor j), where checkBuffers takes region j's buffer from the keys
// before. A region that starts in that buffer but runs past its end, one
// in pageable memory and one in another tensor than the keys before each
// get their own check: the first two fail their key with ErrNotRegistered
// naming the region, before anything is copied, and the batch's other
// keys — the third included — round-trip byte-exact, scattered back over
// other tensors. Every hold is released when the batches return.
func TestCheckBuffersPerTensor(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 5 * time.Second})
	ctx := context.Background()
	const tensors, nkeys, blk = 6, 8, 4096
	const size = 12 * blk // blocks: 8 keys, 3 odd ones, one refused get
	rng := rand.New(rand.NewPCG(7, 8))
	tensor := func() []byte {
		b := mmapHost(t, 2*size) // the second half is never registered
		if err := e.cons.RegisterBuffer(ptrOf(b), size); err != nil {
			t.Fatal(err)
		}
		return b
	}
	src, dst := make([][]byte, tensors), make([][]byte, tensors)
	for j := range src {
		src[j], dst[j] = tensor(), tensor()
		for i := range src[j][:size] {
			src[j][i] = byte(rng.Uint32())
		}
	}
	pageable := make([]byte, blk)
	block := func(ts [][]byte, j, i int) client.Region {
		return client.Region{Ptr: ptrOf(ts[j]) + uintptr(i*blk), Len: blk}
	}
	layers := func(ts [][]byte, i int, edit func(j int) (client.Region, bool)) []client.Region {
		rs := make([]client.Region, tensors)
		for j := range rs {
			rs[j] = block(ts, j, i)
			if edit != nil {
				if r, ok := edit(j); ok {
					rs[j] = r
				}
			}
		}
		return rs
	}
	var keys []string
	var srcs [][]client.Region
	add := func(k string, rs []client.Region) { keys, srcs = append(keys, k), append(srcs, rs) }
	for i := range 4 {
		add(fmt.Sprintf("layers/%d", i), layers(src, i, nil))
	}
	add("past-end", layers(src, 4, func(j int) (client.Region, bool) {
		return client.Region{Ptr: ptrOf(src[3]) + size - 100, Len: 200}, j == 3
	}))
	add("pageable", layers(src, 5, func(j int) (client.Region, bool) {
		return client.Region{Ptr: ptrOf(pageable), Len: blk}, j == 2
	}))
	add("swapped", layers(src, 6, func(j int) (client.Region, bool) { return block(src, tensors-1-j, 6), true }))
	for i := 4; i < nkeys; i++ {
		add(fmt.Sprintf("layers/%d", i), layers(src, i, nil))
	}
	errs := e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	bad := map[string]string{"past-end": "region 3", "pageable": "region 2"}
	for i, k := range keys {
		if want, ok := bad[k]; ok {
			if !errors.Is(errs[i], client.ErrNotRegistered) || !strings.Contains(errs[i].Error(), want) {
				t.Fatalf("put %q: %v, want ErrNotRegistered naming %s", k, errs[i], want)
			}
			if ok, err := e.cons.Exists(ctx, k); ok || err != nil {
				t.Fatalf("refused key %q exists: %v %v", k, ok, err)
			}
		} else if errs[i] != nil {
			t.Fatalf("put %q: %v", k, errs[i])
		}
	}

	// Back into the destination tensors, region j of key i in tensor j;
	// one destination runs past its tensor's registration.
	var gkeys []string
	var dsts [][]client.Region
	for _, k := range keys {
		if _, ok := bad[k]; ok {
			continue
		}
		gkeys, dsts = append(gkeys, k), append(dsts, layers(dst, len(gkeys), nil))
	}
	gkeys, dsts = append(gkeys, "layers/0"), append(dsts, layers(dst, 10, func(j int) (client.Region, bool) {
		return client.Region{Ptr: ptrOf(dst[1]) + size - 8, Len: blk}, j == 1
	}))
	sizes, gerrs := e.cons.BatchGet(ctx, gkeys, dsts, 0)
	last := len(gkeys) - 1
	if !errors.Is(gerrs[last], client.ErrNotRegistered) || !strings.Contains(gerrs[last].Error(), "region 1") {
		t.Fatalf("get past a tensor's end: %v, want ErrNotRegistered naming region 1", gerrs[last])
	}
	for j := range dst {
		if !bytes.Equal(dst[j][10*blk:11*blk], make([]byte, blk)) || !bytes.Equal(dst[j][size:], make([]byte, size)) {
			t.Fatalf("the refused get wrote tensor %d", j)
		}
	}
	for n, k := range gkeys[:last] {
		if gerrs[n] != nil || sizes[n] != tensors*blk {
			t.Fatalf("get %q: %d, %v", k, sizes[n], gerrs[n])
		}
		for j, r := range dsts[n] {
			want := srcs[slices.Index(keys, k)][j]
			if !bytes.Equal(bytesAt(t, dst, r), bytesAt(t, src, want)) {
				t.Fatalf("key %q region %d differs", k, j)
			}
		}
	}

	// No hold outlived its batch: every unregister returns at once.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for j := range src {
		for _, b := range [][]byte{src[j], dst[j]} {
			if err := e.cons.UnregisterBuffer(short, ptrOf(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// bytesAt is region r of one of the buffers bs.
func bytesAt(t *testing.T, bs [][]byte, r client.Region) []byte {
	t.Helper()
	for _, b := range bs {
		if p := ptrOf(b); r.Ptr >= p && uint64(r.Ptr-p)+r.Len <= uint64(len(b)) {
			return b[r.Ptr-p:][:r.Len]
		}
	}
	t.Fatalf("region %#x +%d in none of the buffers", r.Ptr, r.Len)
	return nil
}
