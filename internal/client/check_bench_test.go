package client

import (
	"context"
	"fmt"
	"testing"

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
