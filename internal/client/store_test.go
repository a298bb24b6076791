package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// env is one process's store setup on the simulator: a driver, an embedded
// master, a provider Store and a consumer Store.
type env struct {
	t    *testing.T
	drv  *sim.Driver
	svc  *master.Service
	mc   master.Client
	prov *client.Store
	cons *client.Store
	bufs []cuda.DevicePtr // consumer device buffers, freed by close
}

// sockDirs is the socket directory of each running test: its providers
// create their sockets there, and its consumers trust only sockets there.
var sockDirs sync.Map // *testing.T → string

func sockDir(t *testing.T) string {
	if d, ok := sockDirs.Load(t); ok {
		return d.(string)
	}
	d := t.TempDir()
	sockDirs.Store(t, d)
	t.Cleanup(func() { sockDirs.Delete(t) })
	return d
}

func cfgFor(t *testing.T, m map[string]any) config.Config {
	t.Helper()
	m["driver"] = "sim"
	if _, ok := m["socket_dir"]; !ok {
		m["socket_dir"] = sockDir(t)
	}
	c, err := config.FromMap(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newEnv(t *testing.T, simCfg sim.Config, provCfg map[string]any, mcfg master.Config) *env {
	t.Helper()
	return newEnvWrapped(t, simCfg, provCfg, mcfg, nil)
}

// newEnvWrapped is newEnv with the consumer driving the simulator through
// wrap(drv) (a test hook around some driver calls); nil means no wrapper.
func newEnvWrapped(t *testing.T, simCfg sim.Config, provCfg map[string]any, mcfg master.Config, wrap func(*sim.Driver) cuda.Driver) *env {
	t.Helper()
	return newEnvParts(t, simCfg, provCfg, mcfg, wrap, 1)
}

// newEnvParts is newEnvWrapped with the consumer splitting its large batch
// gets into up to parts parts (client.Options.BatchParts). The other
// constructors keep every batch in one pipeline, so that a test's chunk
// order does not depend on the machine's cores.
func newEnvParts(t *testing.T, simCfg sim.Config, provCfg map[string]any, mcfg master.Config, wrap func(*sim.Driver) cuda.Driver, parts int) *env {
	t.Helper()
	drv, err := sim.New(simCfg)
	if err != nil {
		t.Fatal(err)
	}
	var consDrv cuda.Driver = drv
	if wrap != nil {
		consDrv = wrap(drv)
	}
	e := &env{t: t, drv: drv}
	if e.svc, err = master.New(mcfg); err != nil {
		t.Fatal(err)
	}
	e.mc = master.NewEmbedded(e.svc)
	ctx := context.Background()
	if provCfg != nil {
		e.prov, err = client.Open(ctx, cfgFor(t, provCfg), client.Options{Driver: drv, Master: e.mc, ClientID: "prov"})
		if err != nil {
			t.Fatal(err)
		}
	}
	e.cons, err = client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: consDrv, Master: e.mc, ClientID: "cons", PipelineChunk: testPipelineChunk, BatchParts: parts})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// close tears everything down and asserts that nothing leaked.
func (e *env) close() {
	t := e.t
	t.Helper()
	for _, p := range e.bufs {
		if err := e.drv.MemFree(e.cons.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	e.bufs = nil
	if e.cons != nil {
		if err := e.cons.Close(); err != nil {
			t.Fatalf("consumer close: %v", err)
		}
	}
	if e.prov != nil {
		if err := e.prov.Close(); err != nil {
			t.Fatalf("provider close: %v", err)
		}
	}
	segs, err := e.mc.ListSegments(context.Background())
	if err != nil || len(segs) != 0 {
		t.Fatalf("segments after close: %d (%v)", len(segs), err)
	}
	if err := e.mc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, e.drv)
}

// devBuf is a consumer "GPU" buffer (sim device memory: a real address).
func devBuf(t *testing.T, e *env, n uint64) cuda.DevicePtr {
	t.Helper()
	p, err := e.drv.MemAlloc(e.cons.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	e.bufs = append(e.bufs, p)
	return p
}

func fillRandom(t *testing.T, e *env, p cuda.DevicePtr, n uint64, rng *rand.Rand) []byte {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if err := e.drv.MemcpyHtoD(e.cons.Context(), p, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func readBack(t *testing.T, e *env, p cuda.DevicePtr, n uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := e.drv.MemcpyDtoH(e.cons.Context(), b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

func egmProvider(size string) map[string]any {
	return map[string]any{"global_segment_size": size, "enable_egm_store_pool": true, "max_mr_size": "8MiB"}
}

func TestRoundTripRandomSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		prov map[string]any
	}{
		{"egm-dram", egmProvider("32MiB")},
		{"hbm", map[string]any{"global_segment_size": "32MiB", "max_mr_size": "8MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sim.Config{}, tc.prov, master.Config{LeaseTTL: 300 * time.Millisecond})
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 64
			sizes := make([]uint64, n)
			var sum uint64
			for i := range sizes {
				sizes[i] = 1 + rng.Uint64N(96<<10)
				sum += sizes[i]
			}
			src, dst := devBuf(t, e, sum), devBuf(t, e, sum)
			want := fillRandom(t, e, src, sum, rng)
			keys := make([]string, n)
			srcs := make([][]client.Region, n)
			dsts := make([][]client.Region, n)
			off := uint64(0)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				// Two parts per object: scatter/gather.
				h := sizes[i] / 2
				srcs[i] = []client.Region{{Ptr: uintptr(src) + uintptr(off), Len: h}, {Ptr: uintptr(src) + uintptr(off+h), Len: sizes[i] - h}}
				dsts[i] = client.Bytes(uintptr(dst)+uintptr(off), sizes[i])
				off += sizes[i]
			}
			for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
				if err != nil {
					t.Fatalf("put %d: %v", i, err)
				}
			}
			got, errs := e.cons.BatchGet(ctx, keys, dsts, 0)
			for i, err := range errs {
				if err != nil || got[i] != sizes[i] {
					t.Fatalf("get %d: %d bytes, %v", i, got[i], err)
				}
			}
			if !bytes.Equal(readBack(t, e, dst, sum), want) {
				t.Fatal("bytes differ after round trip")
			}
			// The provider reads the consumer's objects too (its own segments,
			// without importing them).
			pb, err := e.prov.GetBytes(ctx, keys[3])
			if err != nil || !bytes.Equal(pb, want[sizes[0]+sizes[1]+sizes[2]:][:sizes[3]]) {
				t.Fatalf("provider GetBytes: %v", err)
			}
			if _, err := e.cons.RemoveAll(ctx, true); err != nil {
				t.Fatal(err)
			}
			e.close()
		})
	}
}

func TestSemantics(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 200 * time.Millisecond})
	ctx := context.Background()
	src := devBuf(t, e, 1<<20)
	fillRandom(t, e, src, 1<<20, rand.New(rand.NewPCG(3, 4)))
	put := func(key string, n uint64) error {
		return e.cons.Put(ctx, key, client.Bytes(uintptr(src), n), 0, client.PutOptions{})
	}
	if err := put("a", 4096); err != nil {
		t.Fatal(err)
	}
	if err := put("a", 4096); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("second put: %v, want ErrAlreadyExists", err)
	}
	small := devBuf(t, e, 100)
	if _, err := e.cons.Get(ctx, "a", client.Bytes(uintptr(small), 100), 0); !errors.Is(err, client.ErrBufferTooSmall) {
		t.Fatalf("small get: %v", err)
	}
	if _, err := e.cons.Get(ctx, "missing", client.Bytes(uintptr(small), 100), 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing get: %v", err)
	}
	if ok, err := e.cons.Exists(ctx, "a"); !ok || err != nil {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if n, err := e.cons.Size(ctx, "a"); n != 4096 || err != nil {
		t.Fatalf("size: %d %v", n, err)
	}
	if err := e.cons.Put(ctx, "bad", nil, 0, client.PutOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("put without buffer: %v", err)
	}
	// An object larger than any segment is invalid; pinned objects that
	// fill the store make the next put ErrNoSpace (nothing is evictable).
	big := devBuf(t, e, 32<<20)
	if err := e.cons.Put(ctx, "huge", client.Bytes(uintptr(big), 32<<20), 0, client.PutOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("huge put: %v, want ErrInvalidArgument", err)
	}
	var full error
	for i := 0; i < 8 && full == nil; i++ {
		full = e.cons.Put(ctx, fmt.Sprintf("pinned%d", i), client.Bytes(uintptr(big), 4<<20), 0, client.PutOptions{Pin: true})
	}
	if !errors.Is(full, client.ErrNoSpace) {
		t.Fatalf("filling the store: %v, want ErrNoSpace", full)
	}
	// Bytes API.
	if err := e.cons.PutBytes(ctx, "b", []byte("hello kv"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := e.cons.GetBytes(ctx, "b"); err != nil || string(b) != "hello kv" {
		t.Fatalf("GetBytes: %q %v", b, err)
	}
	if err := e.cons.Remove(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cons.GetBytes(ctx, "b"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after remove: %v", err)
	}
	// Registered host memory as a source.
	host := make([]byte, 1<<16)
	for i := range host {
		host[i] = byte(i * 7)
	}
	hp := uintptr(addrOf(host))
	if err := e.cons.RegisterBuffer(hp, uint64(len(host))); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.RegisterBuffer(hp+8, 16); !errors.Is(err, client.ErrAlreadyRegistered) {
		t.Fatalf("overlapping register: %v", err)
	}
	if err := e.cons.Put(ctx, "host", client.Bytes(hp, uint64(len(host))), 0, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := e.cons.GetBytes(ctx, "host"); err != nil || !bytes.Equal(b, host) {
		t.Fatalf("host round trip: %v", err)
	}
	if err := e.cons.UnregisterBuffer(ctx, hp); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.UnregisterBuffer(ctx, hp); !errors.Is(err, client.ErrNotRegistered) {
		t.Fatalf("double unregister: %v", err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	cons := e.cons
	e.close()
	if err := cons.Put(ctx, "late", client.Bytes(uintptr(src), 1), 0, client.PutOptions{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if err := cons.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestGetBytesInto: the size comes from the master before any copy, so a
// destination that is too small gets ErrBufferTooSmall and the size with no
// copy at all (and stays untouched); one that fits gets the bytes.
func TestGetBytesInto(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 200 * time.Millisecond})
	ctx := context.Background()
	want := []byte("twenty bytes of data")
	if err := e.cons.PutBytes(ctx, "k", want, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	copies := func() uint64 {
		st := e.cons.TransferStats()
		return st.KernelLaunches + st.BatchCalls + st.EachCalls
	}
	before := copies()
	small := []byte("untouched")
	n, err := e.cons.GetBytesInto(ctx, "k", small)
	if !errors.Is(err, client.ErrBufferTooSmall) || n != uint64(len(want)) {
		t.Fatalf("GetBytesInto %d bytes: %d, %v; want %d, ErrBufferTooSmall", len(small), n, err, len(want))
	}
	if string(small) != "untouched" || copies() != before {
		t.Fatalf("too-small GetBytesInto copied (%d copy submissions; buffer %q)", copies()-before, small)
	}
	big := make([]byte, 64)
	if n, err := e.cons.GetBytesInto(ctx, "k", big); err != nil || n != uint64(len(want)) || !bytes.Equal(big[:n], want) {
		t.Fatalf("GetBytesInto: %d, %v, %q", n, err, big)
	}
	if _, err := e.cons.GetBytesInto(ctx, "missing", big); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("GetBytesInto of a missing key: %v", err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestCloseRetry fails one teardown step of the provider pool and checks
// that Close reports cleanup pending, keeps what it holds, and that a second
// Close finishes without leaks.
func TestCloseRetry(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	e.drv.Fail("MemUnmap", 1, cuda.ErrorUnknown)
	err := e.prov.Close()
	if !errors.Is(err, client.ErrCleanupPending) || !e.prov.CleanupPending() {
		t.Fatalf("close with failed unmap: %v (pending %v)", err, e.prov.CleanupPending())
	}
	if err := e.prov.Close(); err != nil {
		t.Fatalf("retried close: %v", err)
	}
	if e.prov.CleanupPending() {
		t.Fatal("cleanup still pending after a successful close")
	}
	e.close()
}

// TestImportFaults fails every driver call of the consumer's first import
// and map of a segment in turn: the get fails cleanly, nothing leaks, and
// the next get succeeds.
func TestImportFaults(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 300 * time.Millisecond})
	ctx := context.Background()
	if err := e.prov.PutBytes(ctx, "x", bytes.Repeat([]byte{0xab}, 8192), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := devBuf(t, e, 8192)
	// Count the calls of one cold get on a fresh consumer.
	probe, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: e.mc, ClientID: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	before := e.drv.CallCount("")
	if _, err := probe.Get(ctx, "x", client.Bytes(uintptr(dst), 8192), 0); err != nil {
		t.Fatal(err)
	}
	calls := e.drv.CallCount("") - before
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= calls; k++ {
		c, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: e.mc, ClientID: fmt.Sprintf("c%d", k)})
		if err != nil {
			t.Fatal(err)
		}
		e.drv.FailAny(k, cuda.ErrorOutOfMemory)
		_, gerr := c.Get(ctx, "x", client.Bytes(uintptr(dst), 8192), 0)
		e.drv.ClearFaults()
		if gerr != nil && !errors.Is(gerr, client.ErrTransfer) {
			t.Fatalf("call %d: get error %v is not ErrTransfer", k, gerr)
		}
		if _, err := c.Get(ctx, "x", client.Bytes(uintptr(dst), 8192), 0); err != nil {
			t.Fatalf("call %d: get after fault: %v", k, err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("call %d: close: %v", k, err)
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestEGMConfigRules: the store refuses bad EGM combinations before touching
// anything.
func TestEGMConfigRules(t *testing.T) {
	for _, m := range []map[string]any{
		{"enable_egm_store_pool": true, "global_segment_size": 0},
		{"enable_egm_store_pool": true, "global_segment_size": "1GiB", "protocol": "rdma"},
		{"enable_egm_store_pool": true, "global_segment_size": "1GiB", "local_buffer_size": "1MiB"},
	} {
		m["driver"] = "sim"
		if _, err := config.FromMap(m); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%v: %v, want config.ErrInvalid", m, err)
		}
	}
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := config.Defaults()
	c.Driver = "sim"
	c.Device = 3
	if _, err := client.Open(context.Background(), c, client.Options{Driver: drv}); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("device 3 of 1: %v", err)
	}
	simtest.AssertNoLeaks(t, drv)
}

// TestOpenPoolUnwindFails: the provider pool's setup fails and so does its
// unwinding. Open must return an *OpenError (ErrCleanupPending) that keeps
// the pool's leftovers — and the context, fd server and master they need —
// owned, so that Retry releases everything.
func TestOpenPoolUnwindFails(t *testing.T) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mc := master.NewEmbedded(svc)
	drv.Fail("MemExportToFD", 2, cuda.ErrorOutOfMemory) // setup fails on the second chunk
	// ... and so do its unwinding and Open's retry of it.
	for n := 1; n <= 3; n++ {
		drv.Fail("MemUnmap", n, cuda.ErrorUnknown)
	}
	_, err = client.Open(context.Background(), cfgFor(t, egmProvider("16MiB")), client.Options{Driver: drv, Master: mc, ClientID: "prov"})
	var oe *client.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, client.ErrCleanupPending) {
		t.Fatalf("open with failed setup and unwind: %v (%T), want an *OpenError with ErrCleanupPending", err, err)
	}
	if err := oe.Retry(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := oe.Retry(); err != nil {
		t.Fatalf("second retry: %v", err)
	}
	if err := mc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
}

// TestConcurrentClose: Close may be called from several goroutines at once
// (a signal handler and a deferred Close); all return nil and nothing leaks.
func TestConcurrentClose(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { errs <- e.prov.Close() }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Close: %v", err)
		}
	}
	e.close()
}

// TestCloseAfterMasterDroppedSegments: the master no longer has the
// provider's segments (its registration expired, or a restarted master lost
// them). Unmounting is then already done; Close must release the rest
// instead of failing on the unmount forever.
func TestCloseAfterMasterDroppedSegments(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	for _, d := range e.prov.Pool().Segments() {
		if err := e.mc.UnmountSegment(ctx, d.Key()); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.prov.Close(); err != nil {
		t.Fatalf("close with segments the master already dropped: %v", err)
	}
	e.close()
}

// badOffsets is a master client whose GetReplicas answers place every
// replica at the end of its segment (a malformed or mismatched master).
type badOffsets struct{ master.Client }

func (b badOffsets) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	res, err := b.Client.GetReplicas(ctx, keys)
	for i := range res {
		for j := range res[i].Replicas {
			res[i].Replicas[j].Offset = res[i].Replicas[j].Segment.Size - 4096
		}
	}
	return res, err
}

// TestReplicaOutsideSegment: a replica range that does not fit in its
// segment is refused before any copy is enqueued (it would read or write
// whatever is mapped after the segment).
func TestReplicaOutsideSegment(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 300 * time.Millisecond})
	ctx := context.Background()
	if err := e.prov.PutBytes(ctx, "x", bytes.Repeat([]byte{0xab}, 8192), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := devBuf(t, e, 8192)
	c, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: badOffsets{e.mc}, ClientID: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	e.drv.ResetCalls()
	_, gerr := c.Get(ctx, "x", client.Bytes(uintptr(dst), 8192), 0)
	_, berr := c.GetBytes(ctx, "x")
	copies := e.drv.CallCount("MemcpyBatchAsync") + e.drv.CallCount("MemcpyAsync") + e.drv.CallCount("LaunchKernel")
	if !errors.Is(gerr, client.ErrTransfer) || !errors.Is(berr, client.ErrTransfer) || copies != 0 {
		t.Fatalf("replica past the segment end: Get %v, GetBytes %v, %d copy calls", gerr, berr, copies)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestOpsFailFastDuringSlowClose: while a provider's Close waits for a
// reader's lease to end, new operations on it fail with ErrClosed at once
// instead of queueing behind the teardown.
func TestOpsFailFastDuringSlowClose(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 700 * time.Millisecond})
	ctx := context.Background()
	if err := e.cons.PutBytes(ctx, "leased", []byte("value"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// A reader in the middle of its copy holds a lease (a Store's get
	// releases its lease when its copy is done).
	if res, err := e.mc.GetReplicas(ctx, []string{"leased"}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.prov.Close() }()
	time.Sleep(100 * time.Millisecond) // Close is now waiting for the lease
	if err := e.prov.PutBytes(ctx, "late", []byte("x"), client.PutOptions{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("put during close: %v, want ErrClosed", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close (%v) returned before the put: the put queued behind the teardown", err)
	default: // the put failed while Close still waited for the lease
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	e.prov = nil
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestLeaseExpiredDuringCopy: a get whose read lease ended before its copy
// finished reports ErrLeaseExpired (the bytes may be torn), per key.
func TestLeaseExpiredDuringCopy(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 300 * time.Millisecond})
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if err := e.cons.PutBytes(ctx, k, []byte("value-"+k), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dst := devBuf(t, e, 64)
	restore := client.SetTimeNow(func() time.Time { return time.Now().Add(time.Hour) })
	_, errs := e.cons.BatchGet(ctx, []string{"a", "b"}, [][]client.Region{client.Bytes(uintptr(dst), 32), client.Bytes(uintptr(dst)+32, 32)}, 0)
	_, berr := e.cons.GetBytes(ctx, "a")
	restore()
	for i, err := range errs {
		if !errors.Is(err, client.ErrLeaseExpired) {
			t.Fatalf("key %d: %v, want ErrLeaseExpired", i, err)
		}
	}
	if !errors.Is(berr, client.ErrLeaseExpired) {
		t.Fatalf("GetBytes: %v, want ErrLeaseExpired", berr)
	}
	if _, errs := e.cons.BatchGet(ctx, []string{"a"}, [][]client.Region{client.Bytes(uintptr(dst), 32)}, 0); errs[0] != nil {
		t.Fatalf("get in time: %v", errs[0])
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// stepClock is a master clock tests move forward by hand.
type stepClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// TestReregisterAfterExpiry: a provider whose registration expired (here:
// the master's clock jumps past its TTL) registers again on its next
// heartbeat and mounts the same segments; objects written before are gone
// (never stale), and new puts and gets work.
func TestReregisterAfterExpiry(t *testing.T) {
	clk := &stepClock{}
	e := newEnv(t, sim.Config{}, nil, master.Config{Clock: clk, ReapInterval: 10 * time.Millisecond, LeaseTTL: 200 * time.Millisecond})
	ctx := context.Background()
	var err error
	e.prov, err = client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{Driver: e.drv, Master: e.mc, ClientID: "prov", ClientTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cons.PutBytes(ctx, "before", []byte("old"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	segs := func() int {
		l, err := e.mc.ListSegments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	want := segs()
	clk.advance(time.Hour) // every registration expires at the next reap
	deadline := time.Now().Add(5 * time.Second)
	for segs() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// The provider's heartbeat (every TTL/3) registers again and remounts.
	for segs() != want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := segs(); got != want {
		t.Fatalf("segments after re-registration: %d, want %d", got, want)
	}
	if _, err := e.cons.GetBytes(ctx, "before"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("object from before the expiry: %v, want ErrNotFound", err)
	}
	// The consumer re-registers on its own heartbeat too; then it can put.
	for time.Now().Before(deadline) {
		if err = e.cons.PutBytes(ctx, "after", []byte("new"), client.PutOptions{}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("put after re-registration: %v", err)
	}
	if b, err := e.cons.GetBytes(ctx, "after"); err != nil || string(b) != "new" {
		t.Fatalf("get after re-registration: %q %v", b, err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// slowPutStart is a master client after whose PutStart the writer's clock
// has moved on by delay: the writer was paused (SIGSTOP, a long GC, a
// preempted VM) between starting its puts and enqueueing their copies.
type slowPutStart struct {
	master.Client
	delay time.Duration
	once  sync.Once
	stop  func()
}

func (m *slowPutStart) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	res, err := m.Client.PutStart(ctx, reqs)
	m.once.Do(func() { m.stop = client.SetTimeNow(func() time.Time { return time.Now().Add(m.delay) }) })
	return res, err
}

// TestPutPausedPastItsTimeoutWritesNothing: a writer paused past its put's
// timeout between PutStart and the copy must not enqueue the copy — the
// master may have handed the range to a new writer (DESIGN §9, "timeouts
// keep, never give"). The put fails, nothing is copied and the put is
// revoked.
func TestPutPausedPastItsTimeoutWritesNothing(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{PutTimeout: 2 * time.Second})
	ctx := context.Background()
	m := &slowPutStart{Client: e.mc, delay: 3 * time.Second}
	w, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: m, ClientID: "paused", ClientTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src := devBuf(t, e, 4096)
	e.drv.ResetCalls()
	perr := w.Put(ctx, "k", client.Bytes(uintptr(src), 4096), 0, client.PutOptions{})
	m.stop()
	copies := e.drv.CallCount("MemcpyBatchAsync") + e.drv.CallCount("MemcpyAsync") + e.drv.CallCount("LaunchKernel")
	if !errors.Is(perr, client.ErrRPC) || copies != 0 {
		t.Fatalf("put paused past its timeout: %v, %d copy calls; want ErrRPC and no copy", perr, copies)
	}
	st, err := e.mc.Stats(ctx)
	if err != nil || st.PendingPuts != 0 || st.Objects != 0 {
		t.Fatalf("after the failed put: %+v, %v; want it revoked", st, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestGetReleasesItsLease: a get releases its read lease when its copy is
// done, so the space of an object removed by force right after comes back
// at once, not at the lease TTL (issue 10, item 5).
func TestGetReleasesItsLease(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	if err := e.cons.PutBytes(ctx, "k", bytes.Repeat([]byte{7}, 8192), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := devBuf(t, e, 8192)
	if _, err := e.cons.Get(ctx, "k", client.Bytes(uintptr(dst), 8192), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cons.GetBytes(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.Remove(ctx, "k", false); err != nil {
		t.Fatalf("remove after the gets (their leases released): %v", err)
	}
	st, err := e.mc.Stats(ctx)
	if err != nil || st.Tiers[0].Used != 0 {
		t.Fatalf("space after remove: %+v, %v", st, err)
	}
	e.close()
}

// slabs returns n keys prefix/0 … and, for each, the size bytes at i*size
// of src and of dst as its put source and get destination.
func slabs(prefix string, src, dst cuda.DevicePtr, n, size int) (keys []string, srcs, dsts [][]client.Region) {
	return stridedSlabs(prefix, src, dst, n, size, size)
}

// apartSlabs is slabs with a gap of size bytes after each slot (the
// buffers hold 2*n*size bytes): no key's bytes continue another's, so the
// Store copies each key on its own (no merged copies) — for tests that
// count copies or kernel launches per chunk.
func apartSlabs(prefix string, src, dst cuda.DevicePtr, n, size int) (keys []string, srcs, dsts [][]client.Region) {
	return stridedSlabs(prefix, src, dst, n, size, 2*size)
}

func stridedSlabs(prefix string, src, dst cuda.DevicePtr, n, size, stride int) (keys []string, srcs, dsts [][]client.Region) {
	keys = make([]string, n)
	srcs, dsts = make([][]client.Region, n), make([][]client.Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", prefix, i)
		srcs[i] = client.Bytes(uintptr(src)+uintptr(i*stride), uint64(size))
		dsts[i] = client.Bytes(uintptr(dst)+uintptr(i*stride), uint64(size))
	}
	return keys, srcs, dsts
}

// testPipelineChunk makes the test consumer's batches run in several
// pipelined chunks (metadata of one chunk while the previous copies), so
// every batch test covers the pipeline.
const testPipelineChunk = 5

// A batch get that stops at a failed copy has already fetched the next
// chunk's replicas (prefetch): the leases of that chunk are released with
// the others, so nothing keeps the objects from a plain remove.
func TestBatchGetStoppedReleasesPrefetchedLeases(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	const n, size = 40, 4096
	src := devBuf(t, e, 2*n*size)
	dst := devBuf(t, e, 2*n*size)
	keys, srcs, dsts := apartSlabs("prefetch", src, dst, n, size)
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	// Chunks of 1, 2, 4, 5, … keys (testPipelineChunk 5): the first two
	// go to the copy engine, the third is the first kernel launch, which
	// fails while the fourth chunk's replicas are already fetched.
	e.drv.Fail("LaunchKernel", 1, cuda.ErrorLaunchFailed)
	_, errs := e.cons.BatchGet(ctx, keys, dsts, 0)
	for i, err := range errs {
		if wantOK := i < 3; (err == nil) != wantOK {
			t.Fatalf("get %s: %v (want success: %v)", keys[i], err, wantOK)
		}
		if i >= 3 && !errors.Is(err, client.ErrTransfer) {
			t.Fatalf("get %s: %v, want ErrTransfer", keys[i], err)
		}
	}
	for i, err := range e.cons.BatchRemove(ctx, keys, false) {
		if err != nil {
			t.Fatalf("plain remove of %s after the failed batch (a lease left behind?): %v", keys[i], err)
		}
	}
	e.close()
}

// A batch put that stops at a failed copy has already started the next
// chunk's puts (prefetch): they are revoked, so their keys are free at once
// and no range stays reserved.
func TestBatchPutStoppedRevokesPrefetchedPuts(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 40, 4096
	src := devBuf(t, e, 2*n*size)
	keys, srcs, _ := apartSlabs("prefetch-put", src, src, n, size)
	// Chunks of 1, 2, 4, 5, … keys: the third is the first kernel launch.
	e.drv.Fail("LaunchKernel", 1, cuda.ErrorLaunchFailed)
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if wantOK := i < 3; (err == nil) != wantOK {
			t.Fatalf("put %s: %v (want success: %v)", keys[i], err, wantOK)
		}
	}
	st, err := e.mc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Tiers[0].Used; used != 3*size {
		t.Fatalf("after the failed batch the store holds %d bytes, want %d (the 3 puts that ended): a started put was left behind", used, 3*size)
	}
	for i, err := range e.cons.BatchPut(ctx, keys[3:], srcs[3:], 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s again after the failed batch: %v", keys[3+i], err)
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// A put pipeline builds each chunk's requests when it gets there: a chunk
// whose keys all fail their checks starts nothing, the chunks after it
// still put, and every result is at its key's position.
// Chunks of 1, 2, 4, 5, 5, 3 keys (testPipelineChunk 5): the third chunk
// (positions 3-6) is all bad keys, and one bad key sits in a later chunk.
func TestBatchPutChunkOfBadKeys(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 20, 4096
	src := devBuf(t, e, n*size)
	dst := devBuf(t, e, n*size)
	want := fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(9, 10)))
	keys, srcs, dsts := slabs("badchunk", src, dst, n, size)
	bad := map[int]bool{3: true, 4: true, 5: true, 6: true, 15: true}
	for i := range bad {
		keys[i] = fmt.Sprintf("\x00bad/%d", i) // reserved for tenant namespaces
	}
	errs := e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	for i, err := range errs {
		if bad[i] != errors.Is(err, client.ErrInvalidArgument) || !bad[i] && err != nil {
			t.Fatalf("put %d (%q): %v (bad key: %v)", i, keys[i], err, bad[i])
		}
	}
	var good []string
	var gdst [][]client.Region
	for i := range keys {
		if !bad[i] {
			good, gdst = append(good, keys[i]), append(gdst, dsts[i])
		}
	}
	_, gerrs := e.cons.BatchGet(ctx, good, gdst, 0)
	for i, err := range gerrs {
		if err != nil {
			t.Fatalf("get %q: %v", good[i], err)
		}
	}
	got := readBack(t, e, dst, n*size)
	for i := range keys {
		if !bad[i] && !bytes.Equal(got[i*size:(i+1)*size], want[i*size:(i+1)*size]) {
			t.Fatalf("key %d: bytes differ", i)
		}
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}
