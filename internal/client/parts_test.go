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
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// leasesHeld is the master's count of lease periods not yet released,
// once the consumer's background releases have gone out.
func leasesHeld(t *testing.T, e *env) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := e.svc.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.LeasesHeld == 0 || time.Now().After(deadline) {
			return st.LeasesHeld
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBatchGetParts: a batch get split into parts (Options.BatchParts), run
// by two callers at once, returns every key's own bytes, size and error at
// its own position — missing keys, too-small buffers, and the keys each
// part's own checks refuse (a pageable destination, a reserved name)
// interleaved with the rest — and leaves no lease behind.
func TestBatchGetParts(t *testing.T) {
	e := newEnvParts(t, sim.Config{}, egmProvider("32MiB"), master.Config{LeaseTTL: time.Hour}, nil, 4)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const n, slot = 203, 8192 // 203 keys: four parts of 50-51 keys, each of several chunks
	src := devBuf(t, e, n*slot)
	want := fillRandom(t, e, src, n*slot, rng)
	keys := make([]string, n)
	sizes := make([]uint64, n)
	var putKeys []string
	var putSrcs [][]client.Region
	for i := range keys {
		keys[i] = fmt.Sprintf("parts/%d", i)
		sizes[i] = uint64(1 + rng.IntN(slot))
		if i%7 != 3 { // every seventh key is never put
			putKeys = append(putKeys, keys[i])
			putSrcs = append(putSrcs, client.Bytes(uintptr(src)+uintptr(i*slot), sizes[i]))
		}
	}
	for i, err := range e.cons.BatchPut(ctx, putKeys, putSrcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", putKeys[i], err)
		}
	}
	var wg sync.WaitGroup
	for c, dst := range []cuda.DevicePtr{devBuf(t, e, n*slot), devBuf(t, e, n*slot)} {
		wg.Go(func() {
			poison := make([]byte, n*slot)
			for i := range poison {
				poison[i] = 0xee
			}
			if err := e.drv.MemcpyHtoD(e.cons.Context(), dst, poison); err != nil {
				t.Error(err)
				return
			}
			pageable := make([]byte, slot) // ordinary Go memory: never registered
			dsts := make([][]client.Region, n)
			gkeys := append([]string(nil), keys...)
			for i := range dsts {
				room := uint64(slot)
				if i%11 == 5 { // too small, unless the object is tiny
					room = 1
				}
				dsts[i] = client.Bytes(uintptr(dst)+uintptr(i*slot), room)
				switch {
				case i%13 == 8:
					dsts[i] = client.Bytes(uintptr(unsafe.Pointer(&pageable[0])), slot)
				case i%17 == 9:
					gkeys[i] = "\x00" + keys[i]
				}
			}
			got, errs := e.cons.BatchGet(ctx, gkeys, dsts, 0)
			runtime.KeepAlive(pageable)
			back := readBack(t, e, dst, n*slot)
			for i, err := range errs {
				switch {
				case i%13 == 8:
					if !errors.Is(err, client.ErrNotRegistered) || got[i] != 0 {
						t.Errorf("caller %d: get %s into pageable memory: %d, %v, want ErrNotRegistered", c, keys[i], got[i], err)
					}
				case i%17 == 9:
					if !errors.Is(err, client.ErrInvalidArgument) || got[i] != 0 {
						t.Errorf("caller %d: get of a NUL-prefixed key: %d, %v, want ErrInvalidArgument", c, got[i], err)
					}
				case i%7 == 3:
					if !errors.Is(err, client.ErrNotFound) {
						t.Errorf("caller %d: get %s (never put): %v, want ErrNotFound", c, keys[i], err)
					}
				case i%11 == 5 && sizes[i] > 1:
					if !errors.Is(err, client.ErrBufferTooSmall) {
						t.Errorf("caller %d: get %s into 1 byte: %v, want ErrBufferTooSmall", c, keys[i], err)
					}
				case err != nil:
					t.Errorf("caller %d: get %s: %v", c, keys[i], err)
				case got[i] != sizes[i]:
					t.Errorf("caller %d: get %s: size %d, want %d", c, keys[i], got[i], sizes[i])
				default:
					lo := i * slot
					if string(back[lo:lo+int(sizes[i])]) != string(want[lo:lo+int(sizes[i])]) {
						t.Errorf("caller %d: get %s: wrong bytes", c, keys[i])
					}
				}
			}
		})
	}
	wg.Wait()
	if n := leasesHeld(t, e); n != 0 {
		t.Fatalf("%d lease periods held after the gets", n)
	}
	for i, err := range e.cons.BatchRemove(ctx, putKeys, false) {
		if err != nil {
			t.Fatalf("plain remove of %s: %v", putKeys[i], err)
		}
	}
	e.close()
}

// TestBatchGetPartsStoppedReleasesLeases: when a copy of one part fails,
// that part's remaining keys fail with ErrTransfer, the keys that
// succeeded have their bytes, and every lease any part took — including
// the prefetched chunks of parts that stopped — is released.
func TestBatchGetPartsStoppedReleasesLeases(t *testing.T) {
	e := newEnvParts(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour}, nil, 4)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	const n, size = 120, 4096
	// Slots apart: each key's copy is a kernel launch of its own (merged
	// copies of a run would go to the copy engines, and no launch fail).
	src := devBuf(t, e, 2*n*size)
	dst := devBuf(t, e, 2*n*size)
	want := fillRandom(t, e, src, 2*n*size, rng)
	keys, srcs, dsts := apartSlabs("parts-fail", src, dst, n, size)
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	e.drv.Fail("LaunchKernel", 2, cuda.ErrorLaunchFailed)
	_, errs := e.cons.BatchGet(ctx, keys, dsts, 0)
	back := readBack(t, e, dst, 2*n*size)
	failed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			if lo := 2 * i * size; string(back[lo:lo+size]) != string(want[lo:lo+size]) {
				t.Errorf("get %s succeeded with wrong bytes", keys[i])
			}
		case errors.Is(err, client.ErrTransfer):
			failed++
		default:
			t.Errorf("get %s: %v, want success or ErrTransfer", keys[i], err)
		}
	}
	if failed == 0 || failed == n {
		t.Fatalf("%d of %d keys failed: want the failed launch to stop one part only", failed, n)
	}
	if n := leasesHeld(t, e); n != 0 {
		t.Fatalf("%d lease periods held after the failed batch", n)
	}
	for i, err := range e.cons.BatchRemove(ctx, keys, false) {
		if err != nil {
			t.Fatalf("plain remove of %s after the failed batch (a lease left behind?): %v", keys[i], err)
		}
	}
	e.close()
}

// TestBatchPartsOption: a negative Options.BatchParts is refused by name.
func TestBatchPartsOption(t *testing.T) {
	_, err := client.Open(context.Background(), cfgFor(t, map[string]any{}), client.Options{BatchParts: -2})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "BatchParts=-2") {
		t.Fatalf("Open with BatchParts -2: %v", err)
	}
}

// TestBatchPutParts: a batch put split into parts stores every key's own
// bytes; a key named twice in the batch is put by its first occurrence
// and refused at its second (equal keys share a part, in batch order), as
// in one pipeline.
func TestBatchPutParts(t *testing.T) {
	e := newEnvParts(t, sim.Config{}, egmProvider("32MiB"), master.Config{}, nil, 4)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	const n, slot = 203, 8192
	src := devBuf(t, e, n*slot)
	want := fillRandom(t, e, src, n*slot, rng)
	keys := make([]string, n)
	srcs := make([][]client.Region, n)
	sizes := make([]uint64, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("put-parts/%d", i)
		switch {
		case i%17 == 16:
			keys[i] = keys[i-9] // named again, later in the batch
		case i%23 == 22 && i >= 100:
			keys[i] = keys[i-100] // and much later
		}
		sizes[i] = uint64(1 + rng.IntN(slot))
		srcs[i] = client.Bytes(uintptr(src)+uintptr(i*slot), sizes[i])
	}
	first := map[string]int{}
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if j, seen := first[keys[i]]; seen {
			if !errors.Is(err, client.ErrAlreadyExists) {
				t.Fatalf("put %s again (first at %d): %v, want ErrAlreadyExists", keys[i], j, err)
			}
			continue
		}
		first[keys[i]] = i
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	dst := devBuf(t, e, n*slot)
	var getKeys []string
	var dsts [][]client.Region
	for k, i := range first {
		getKeys = append(getKeys, k)
		dsts = append(dsts, client.Bytes(uintptr(dst)+uintptr(i*slot), slot))
	}
	got, errs := e.cons.BatchGet(ctx, getKeys, dsts, 0)
	back := readBack(t, e, dst, n*slot)
	for j, err := range errs {
		i := first[getKeys[j]]
		if err != nil || got[j] != sizes[i] {
			t.Fatalf("get %s: size %d, %v (want %d)", getKeys[j], got[j], err, sizes[i])
		}
		if lo := i * slot; string(back[lo:lo+int(sizes[i])]) != string(want[lo:lo+int(sizes[i])]) {
			t.Fatalf("get %s: not the bytes of its first put", getKeys[j])
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestBatchPutPartsStoppedRevokes: when a copy of one part fails, that
// part's remaining puts are revoked and the other parts' complete: the
// store holds exactly the bytes of the keys reported put, and the failed
// keys can be put again at once.
func TestBatchPutPartsStoppedRevokes(t *testing.T) {
	e := newEnvParts(t, sim.Config{}, egmProvider("16MiB"), master.Config{}, nil, 4)
	ctx := context.Background()
	const n, size = 120, 4096
	// Slots apart: each key's copy is a kernel launch of its own (merged
	// copies of a run would go to the copy engines, and no launch fail).
	src := devBuf(t, e, 2*n*size)
	keys := make([]string, n)
	srcs := make([][]client.Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("put-parts-fail/%d", i)
		srcs[i] = client.Bytes(uintptr(src)+uintptr(2*i*size), size)
	}
	e.drv.Fail("LaunchKernel", 2, cuda.ErrorLaunchFailed)
	var okKeys, failKeys []string
	var failSrcs [][]client.Region
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		switch {
		case err == nil:
			okKeys = append(okKeys, keys[i])
		case errors.Is(err, client.ErrTransfer):
			failKeys = append(failKeys, keys[i])
			failSrcs = append(failSrcs, srcs[i])
		default:
			t.Fatalf("put %s: %v, want success or ErrTransfer", keys[i], err)
		}
	}
	if len(failKeys) == 0 || len(okKeys) == 0 {
		t.Fatalf("%d of %d puts failed: want the failed launch to stop one part only", len(failKeys), n)
	}
	st, err := e.mc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Tiers[0].Used; used != uint64(len(okKeys))*size {
		t.Fatalf("the store holds %d bytes after the failed batch, want %d (%d puts ended): a started put was left behind", used, len(okKeys)*size, len(okKeys))
	}
	for i, err := range e.cons.BatchPut(ctx, failKeys, failSrcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s again after the failed batch: %v", failKeys[i], err)
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestBatchPartsRemoteMaster: with a master behind gRPC (in this process),
// split batches — puts too, parts of half a pipeline chunk — put and get
// every key's own bytes, and leave no lease, mapping or driver object.
func TestBatchPartsRemoteMaster(t *testing.T) {
	addr := startMaster(t, master.Config{LeaseTTL: time.Hour})
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := egmProvider("16MiB")
	m["master_server_addr"] = addr
	ctx := context.Background()
	s, err := client.Open(ctx, cfgFor(t, m), client.Options{Driver: drv, ClientID: "remote-parts", PipelineChunk: 5, BatchParts: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	const n, slot = 90, 8192 // parts of 22-23 keys, each of several chunks
	src, err := drv.MemAlloc(s.Context(), n*slot)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := drv.MemAlloc(s.Context(), n*slot)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n*slot)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if err := drv.MemcpyHtoD(s.Context(), src, want); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, n)
	srcs, dsts := make([][]client.Region, n), make([][]client.Region, n)
	sizes := make([]uint64, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("remote-parts/%d", i)
		sizes[i] = uint64(1 + rng.IntN(slot))
		srcs[i] = client.Bytes(uintptr(src)+uintptr(i*slot), sizes[i])
		dsts[i] = client.Bytes(uintptr(dst)+uintptr(i*slot), slot)
	}
	for i, err := range s.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	// The chunks went as uniform puts (a key and a size each on the wire,
	// not a whole request): 4 parts of 22-23 keys in chunks of at most 5.
	if st := s.MasterTransports(); st.UniformPuts < 20 {
		t.Errorf("%d PutStart calls sent as uniform puts, want one per chunk (at least 20)", st.UniformPuts)
	}
	got, errs := s.BatchGet(ctx, keys, dsts, 0)
	back := make([]byte, n*slot)
	if err := drv.MemcpyDtoH(s.Context(), back, dst); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		lo := i * slot
		if err != nil || got[i] != sizes[i] || string(back[lo:lo+int(sizes[i])]) != string(want[lo:lo+int(sizes[i])]) {
			t.Fatalf("get %s: size %d (want %d), %v, or wrong bytes", keys[i], got[i], sizes[i], err)
		}
	}
	if _, err := s.RemoveAll(ctx, false); err != nil {
		t.Fatalf("plain RemoveAll after the gets (a lease left behind?): %v", err)
	}
	for _, p := range []cuda.DevicePtr{src, dst} {
		if err := drv.MemFree(s.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
}

// TestBatchGetPartsByRegion: a batch get counts a key once per region
// when it splits over cores — 12 keys of 8 regions each split into parts
// (each part's GetReplicas on a goroutine of its own) where 12 keys of one
// region stay one part — and every key of the split batch gets its own
// bytes, size and error at its own position (a missing key, a buffer too
// small), with no lease left. A batch of no keys is no part.
func TestBatchGetPartsByRegion(t *testing.T) {
	e := newEnvParts(t, sim.Config{}, egmProvider("32MiB"), master.Config{LeaseTTL: time.Hour}, nil, 4)
	ctx := context.Background()
	spy := &goroutineSpy{Client: e.mc}
	st, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: spy, ClientID: "by-region",
		PipelineChunk: testPipelineChunk, BatchParts: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client.ForceEmbedded(st) // parts of at least 2*testPipelineChunk: 12 one-region keys are one part
	if sizes, errs := st.BatchGet(ctx, nil, nil, 0); len(sizes) != 0 || len(errs) != 0 {
		t.Fatalf("a batch get of no keys: %d sizes, %d errors", len(sizes), len(errs))
	}
	const n, regions, region = 12, 8, 4096
	src, dst := devBuf(t, e, n*regions*region), devBuf(t, e, n*regions*region)
	want := fillRandom(t, e, src, n*regions*region, rand.New(rand.NewPCG(12, 8)))
	keys := make([]string, n)
	srcs, dsts := make([][]client.Region, n), make([][]client.Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("by-region/%d", i)
		for j := range regions { // region j of key i: block i of "tensor" j
			off := uintptr((j*n + i) * region)
			srcs[i] = append(srcs[i], client.Region{Ptr: uintptr(src) + off, Len: region})
			dsts[i] = append(dsts[i], client.Region{Ptr: uintptr(dst) + off, Len: region})
		}
	}
	for i, err := range st.BatchPut(ctx, keys[:n-1], srcs[:n-1], 0, client.PutOptions{}) { // the last key is never put
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	distinct := func() int {
		spy.mu.Lock()
		defer spy.mu.Unlock()
		seen := map[uint64]bool{}
		for _, g := range spy.gets {
			seen[g] = true
		}
		spy.gets = nil
		return len(seen)
	}
	one := make([][]client.Region, n)
	for i := range one {
		one[i] = client.Bytes(uintptr(dst)+uintptr(i*regions*region), regions*region)
	}
	distinct()
	if _, errs := st.BatchGet(ctx, keys[:n-1], one[:n-1], 0); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if g := distinct(); g > 2 {
		t.Fatalf("12 one-region keys: GetReplicas on %d goroutines; want one part (its own goroutine and at most a worker)", g)
	}
	dsts[3] = dsts[3][:regions-1] // one region short: too small
	sizes, errs := st.BatchGet(ctx, keys, dsts, 0)
	if g := distinct(); g < 4 {
		t.Fatalf("12 keys of %d regions: GetReplicas on %d goroutines; want four parts", regions, g)
	}
	back := readBack(t, e, dst, n*regions*region)
	for i := range keys {
		switch {
		case i == n-1:
			if !errors.Is(errs[i], client.ErrNotFound) {
				t.Fatalf("get %s (never put): %v; want ErrNotFound", keys[i], errs[i])
			}
		case i == 3:
			if !errors.Is(errs[i], client.ErrBufferTooSmall) {
				t.Fatalf("get %s into %d regions: %v; want ErrBufferTooSmall", keys[i], regions-1, errs[i])
			}
		case errs[i] != nil || sizes[i] != regions*region:
			t.Fatalf("get %s: %d, %v", keys[i], sizes[i], errs[i])
		default:
			for j := range regions {
				off := (j*n + i) * region
				if !bytes.Equal(back[off:off+region], want[off:off+region]) {
					t.Fatalf("get %s: region %d not its bytes", keys[i], j)
				}
			}
		}
	}
	closeAfterGets(t, e, st)
}

// sizeSpy records how many keys each PutStart and GetReplicas call of a
// Store carries: its pipeline's chunks.
type sizeSpy struct {
	master.Client
	mu         sync.Mutex
	puts, gets []int
}

func (m *sizeSpy) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	m.mu.Lock()
	m.puts = append(m.puts, len(reqs))
	m.mu.Unlock()
	return m.Client.PutStart(ctx, reqs)
}

func (m *sizeSpy) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	m.mu.Lock()
	m.gets = append(m.gets, len(keys))
	m.mu.Unlock()
	return m.Client.GetReplicas(ctx, keys)
}

func (m *sizeSpy) Close() error { return nil } // the env closes the master client

// take returns the chunks recorded since the last take.
func (m *sizeSpy) take() (puts, gets []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	puts, gets, m.puts, m.gets = m.puts, m.gets, nil, nil
	return puts, gets
}

// TestChunksCountCopyEngineRegions: a batch whose keys each have several
// regions that go to the copy engines is pipelined in chunks that count
// those regions (vLLM's layout: 64 regions a key), so that its first
// copies start after a one-key chunk's enqueueing, not after the whole
// batch's; keys of regions below the copy engines' size keep chunks of
// keys. Either way every region gets its own bytes back.
func TestChunksCountCopyEngineRegions(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("32MiB"), master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	spy := &sizeSpy{Client: e.mc}
	conf := map[string]any{"copy_engine_min_bytes": 4096, "get_copy_engine_min_bytes": 4096}
	const chunk, n, regions = 16, 8, 4
	st, err := client.Open(ctx, cfgFor(t, conf), client.Options{Driver: e.drv, Master: spy, ClientID: "ce-chunks", PipelineChunk: chunk, BatchParts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, tc := range []struct {
		region     uint64
		wantChunks []int
	}{
		// 4 copy-engine regions a key: chunks of chunk/8/4 -> 1 key first, doubling up to chunk/4 = 4 keys.
		{4096, []int{1, 2, 4, 1}},
		// Regions below copy_engine_min_bytes: chunks of keys, chunk/8 = 2 first, as for one region a key.
		{1024, []int{2, 4, 2}},
	} {
		size := n * regions * tc.region
		src, dst := devBuf(t, e, size), devBuf(t, e, size)
		want := fillRandom(t, e, src, size, rand.New(rand.NewPCG(tc.region, 4)))
		keys := make([]string, n)
		srcs, dsts := make([][]client.Region, n), make([][]client.Region, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("ce-chunks/%d/%d", tc.region, i)
			for j := range regions { // region j of key i: block i of "tensor" j
				off := uintptr(uint64(j*n+i) * tc.region)
				srcs[i] = append(srcs[i], client.Region{Ptr: uintptr(src) + off, Len: tc.region})
				dsts[i] = append(dsts[i], client.Region{Ptr: uintptr(dst) + off, Len: tc.region})
			}
		}
		spy.take()
		for i, err := range st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
			if err != nil {
				t.Fatalf("put %s: %v", keys[i], err)
			}
		}
		sizes, errs := st.BatchGet(ctx, keys, dsts, 0)
		puts, gets := spy.take()
		if !slices.Equal(puts, tc.wantChunks) || !slices.Equal(gets, tc.wantChunks) {
			t.Errorf("%d keys of %d regions of %d bytes: put chunks %v, get chunks %v; want %v", n, regions, tc.region, puts, gets, tc.wantChunks)
		}
		back := readBack(t, e, dst, size)
		for i := range keys {
			if errs[i] != nil || sizes[i] != regions*tc.region {
				t.Fatalf("get %s: %d, %v", keys[i], sizes[i], errs[i])
			}
			for j := range regions {
				off := uint64(j*n+i) * tc.region
				if !bytes.Equal(back[off:off+tc.region], want[off:off+tc.region]) {
					t.Fatalf("get %s: region %d not its bytes", keys[i], j)
				}
			}
		}
	}
	closeAfterGets(t, e, st)
}

// closeAfterGets ends a test of st, a Store of e's: no lease may be held
// after its gets, it removes what it put and closes, then e closes
// (asserting that nothing leaked).
func closeAfterGets(t *testing.T, e *env, st *client.Store) {
	t.Helper()
	if n := leasesHeld(t, e); n != 0 {
		t.Fatalf("%d lease periods held after the gets", n)
	}
	if _, err := st.RemoveAll(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	e.close()
}
