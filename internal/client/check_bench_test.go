package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BenchmarkPutChunkBuild measures what a put pipeline does for a chunk
// before its PutStart, per key (sim driver, embedded master, one
// registered buffer, chunks of 512 keys): check-ns/key is checking the
// buffers and building the requests (lazyPuts.next), prep-ns/key the
// master's preparation (PreparePutStart).
func BenchmarkPutChunkBuild(b *testing.B) {
	const size, chunk, n = 4 << 10, 512, 4096
	drv, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := master.New(master.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	c, err := config.FromMap(map[string]any{"driver": "sim", "socket_dir": b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(ctx, c, Options{Driver: drv, Master: master.NewEmbedded(svc), ClientID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	buf, err := drv.MemAlloc(s.Context(), size*n)
	if err != nil {
		b.Fatal(err)
	}
	defer drv.MemFree(s.Context(), buf)
	if err := s.RegisterBuffer(uintptr(buf), size*n); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	srcs := make([][]Region, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/round/%d", i)
		srcs[i] = Bytes(uintptr(buf)+uintptr(i*size), size)
	}
	errs := make([]error, n)
	o := PutOptions{}
	var tCheck, tPrep time.Duration
	for b.Loop() {
		clear(errs)
		lazy := &lazyPuts{s: s, keys: keys, srcs: srcs, errs: errs, o: &o, place: s.placement()}
		for lazy.more() {
			t0 := time.Now()
			reqs, _, _ := lazy.next(chunk)
			t1 := time.Now()
			if _, err := s.prep.PreparePutStart(reqs); err != nil {
				b.Fatal(err)
			}
			tCheck += t1.Sub(t0)
			tPrep += time.Since(t1)
		}
		s.release(lazy.held)
	}
	b.ReportMetric(float64(tCheck.Nanoseconds())/float64(b.N*n), "check-ns/key")
	b.ReportMetric(float64(tPrep.Nanoseconds())/float64(b.N*n), "prep-ns/key")
}
