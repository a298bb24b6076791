package client

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BenchmarkPutChunkBuild measures what a put pipeline does for a chunk
// before its PutStart, per key (sim driver, embedded master, one
// registered buffer, chunks of 512 keys): checking the buffers and the
// master's preparation of the chunk (aheadSource.fill), ns/key.
func BenchmarkPutChunkBuild(b *testing.B) {
	const size, chunk, n = 4 << 10, 512, 4096
	s, keys, srcs := chunkBuildStore(b, size, n)
	errs := make([]error, n)
	o := PutOptions{}
	for b.Loop() {
		clear(errs)
		lazy := &lazyPuts{s: s, keys: keys, srcs: srcs, errs: errs, o: &o, place: s.placement()}
		a := aheadSource{src: lazy, ch: &chunker{size: chunk, max: chunk}, prep: s.prep}
		for a.more() {
			a.fill()
			if c, _, _ := a.next(); c.pre == nil {
				b.Fatal("a chunk not prepared")
			}
		}
		s.release(lazy.held)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}

// simStore opens a Store "bench" on a simulator of its own with an
// embedded master, configured by keys (besides the driver and the socket
// directory: a provider's keys give it capacity), closed at cleanup.
func simStore(tb testing.TB, keys map[string]any) *Store {
	tb.Helper()
	drv, err := sim.New(sim.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := master.New(master.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = svc.Close() })
	m := map[string]any{"driver": "sim", "socket_dir": tb.TempDir()}
	maps.Copy(m, keys)
	c, err := config.FromMap(m)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := Open(context.Background(), c, Options{Driver: drv, Master: master.NewEmbedded(svc), ClientID: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// chunkBuildStore opens a Store on the simulator with an embedded master
// and n registered sources of size bytes under keys "bench/round/<i>".
func chunkBuildStore(tb testing.TB, size, n int) (*Store, []string, [][]Region) {
	tb.Helper()
	s := simStore(tb, nil)
	drv := s.drv
	buf, err := drv.MemAlloc(s.Context(), uint64(size*n))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = drv.MemFree(s.Context(), buf) })
	if err := s.RegisterBuffer(uintptr(buf), uint64(size*n)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.UnregisterBuffer(context.Background(), uintptr(buf)) })
	keys := make([]string, n)
	srcs := make([][]Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/round/%d", i)
		srcs[i] = Bytes(uintptr(buf)+uintptr(i*size), uint64(size))
	}
	return s, keys, srcs
}

// failingPrep is a master.Preparer whose preparations fail, as a closed
// embedded master's do.
type failingPrep struct{ master.Preparer }

func (failingPrep) PrepareUniformPutStart(master.UniformPuts) (*master.PreparedPuts, error) {
	return nil, master.ErrClosed
}

// TestUniformChunkUnprepared: a chunk whose uniform preparation fails goes
// out as requests — every key with its size and the batch's options — so
// that its unprepared PutStart asks for what the batch asked for.
func TestUniformChunkUnprepared(t *testing.T) {
	const size, n = 4 << 10, 8
	s, keys, srcs := chunkBuildStore(t, size, n)
	errs := make([]error, n)
	o := PutOptions{Pin: true}
	lazy := &lazyPuts{s: s, keys: keys, srcs: srcs, errs: errs, o: &o, place: s.placement()}
	a := aheadSource{src: lazy, ch: &chunker{size: n, max: n}, prep: failingPrep{s.prep}}
	c, idx, _ := a.next()
	s.release(lazy.held)
	if c.pre != nil || len(c.reqs) != n || len(idx) != n {
		t.Fatalf("chunk: prepared %v, %d requests, %d positions; want unprepared, %d of each", c.pre != nil, len(c.reqs), len(idx), n)
	}
	for j, r := range c.reqs {
		if r.Key != keys[j] || r.Size != size || !r.Pin || r.Placement.Client != s.clientID || c.key(j) != keys[j] {
			t.Fatalf("request %d: %+v; want key %q, size %d, pinned, placed by %q", j, r, keys[j], size, s.clientID)
		}
	}
}

// BenchmarkCheckBuffersLayers measures checkBuffers on vLLM's layout of a
// paged KV cache: one registered buffer per layer tensor (a K and a V per
// layer), each key one block of every tensor (128 keys of 64 regions of 32
// KiB, sim driver), ns per region.
func BenchmarkCheckBuffersLayers(b *testing.B) {
	const tensors, keys, blk = 64, 128, 32 << 10
	drv, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := master.New(master.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close() })
	c, err := config.FromMap(map[string]any{"driver": "sim", "socket_dir": b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), c, Options{Driver: drv, Master: master.NewEmbedded(svc), ClientID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	bases := make([]uintptr, tensors)
	for t := range bases {
		p, err := drv.MemAlloc(s.Context(), keys*blk)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = drv.MemFree(s.Context(), p) })
		if err := s.RegisterBuffer(uintptr(p), keys*blk); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.UnregisterBuffer(context.Background(), uintptr(p)) })
		bases[t] = uintptr(p)
	}
	ks := make([]string, keys)
	bufs := make([][]Region, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("layers/%d", i)
		bufs[i] = make([]Region, tensors)
		for t := range bufs[i] {
			bufs[i][t] = Region{Ptr: bases[t] + uintptr(i*blk), Len: blk}
		}
	}
	errs := make([]error, keys)
	for b.Loop() {
		held := s.checkBuffers(ks, bufs, errs)
		if len(held) != tensors {
			b.Fatalf("%d buffers held, want %d", len(held), tensors)
		}
		s.release(held)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys*tensors), "ns/region")
}

// TestAllPutReqsAllocs: a split batch's requests are built into slices
// made once for the batch (two allocations: requests and positions), not
// grown by append, which copied every ~136-byte request several times
// before any part started (allPutReqs).
func TestAllPutReqsAllocs(t *testing.T) {
	const n = 4096
	s, keys, srcs := chunkBuildStore(t, 4<<10, n)
	errs := make([]error, n)
	o := PutOptions{}
	place := s.placement()
	held := s.checkBuffers(keys, srcs, errs)
	defer s.release(held)
	var got int
	allocs := testing.AllocsPerRun(5, func() {
		reqs, idx := s.allPutReqs(keys, srcs, errs, &o, place)
		got = len(reqs)
		if len(idx) != len(reqs) {
			t.Fatalf("%d requests, %d positions", len(reqs), len(idx))
		}
	})
	if got != n {
		t.Fatalf("%d requests for %d keys", got, n)
	}
	// Two of its own; AllocsPerRun counts the whole process, and the
	// Store's background goroutines (heartbeat, releaser) may allocate
	// meanwhile. Grown by append, the two slices took 29.
	if allocs > 6 {
		t.Fatalf("%v allocations per %d-key batch, want 2 (up to 6 with the Store's background work)", allocs, n)
	}
}

// BenchmarkSplitPutPrelude measures what a split BatchPut does before its
// parts start, per key (sim driver, one registered buffer, 4096 keys of
// 64 KiB, 4 parts): checking the buffers, building the requests
// (allPutReqs) and dealing them into parts (splitPuts), ns/key each.
func BenchmarkSplitPutPrelude(b *testing.B) {
	const size, n = 64 << 10, 4096
	s, keys, srcs := chunkBuildStore(b, size, n)
	errs := make([]error, n)
	o := PutOptions{}
	place := s.placement()
	var check, reqs, split time.Duration
	for b.Loop() {
		clear(errs)
		t0 := time.Now()
		held := s.checkBuffers(keys, srcs, errs)
		t1 := time.Now()
		r, idx := s.allPutReqs(keys, srcs, errs, &o, place)
		t2 := time.Now()
		if parts := splitPuts(r, idx, 4); len(parts) != 4 {
			b.Fatalf("%d parts", len(parts))
		}
		check, reqs, split = check+t1.Sub(t0), reqs+t2.Sub(t1), split+time.Since(t2)
		s.release(held)
	}
	k := float64(b.N * n)
	b.ReportMetric(float64(check.Nanoseconds())/k, "check-ns/key")
	b.ReportMetric(float64(reqs.Nanoseconds())/k, "reqs-ns/key")
	b.ReportMetric(float64(split.Nanoseconds())/k, "split-ns/key")
}
