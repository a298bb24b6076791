package client

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkMultiRegion measures a batch put and get of vLLM's layout —
// keys of one block of every layer's K and V tensor, each tensor its own
// registered buffer — on the simulator with an embedded master: 128 keys
// of 64 regions of 64 bytes (small, so that the Store's per-region work and
// not the simulator's memcpy dominates), ns per region.
func BenchmarkMultiRegion(b *testing.B) {
	const keys, tensors, region = 128, 64, 64
	s := simStore(b, map[string]any{"global_segment_size": "64MiB", "enable_egm_store_pool": true, "max_mr_size": "16MiB"})
	drv := s.drv
	var src, dst []uintptr
	for range tensors {
		for _, side := range []*[]uintptr{&src, &dst} {
			p, err := drv.MemAlloc(s.Context(), keys*region)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = drv.MemFree(s.Context(), p) })
			if err := s.RegisterBuffer(uintptr(p), keys*region); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.UnregisterBuffer(context.Background(), uintptr(p)) })
			*side = append(*side, uintptr(p))
		}
	}
	ks := make([]string, keys)
	srcs, dsts := make([][]Region, keys), make([][]Region, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("mr/%d", i)
		for t := range tensors {
			srcs[i] = append(srcs[i], Region{Ptr: src[t] + uintptr(i*region), Len: region})
			dsts[i] = append(dsts[i], Region{Ptr: dst[t] + uintptr(i*region), Len: region})
		}
	}
	ctx := context.Background()
	put := func(b *testing.B) {
		for i, err := range s.BatchPut(ctx, ks, srcs, 0, PutOptions{Upsert: true}) {
			if err != nil {
				b.Fatal(ks[i], err)
			}
		}
	}
	for _, op := range []string{"put", "get"} {
		b.Run("op="+op, func(b *testing.B) {
			if op == "get" {
				put(b)
			}
			for b.Loop() {
				if op == "put" {
					put(b)
					continue
				}
				if _, errs := s.BatchGet(ctx, ks, dsts, 0); errs[0] != nil {
					b.Fatal(errs[0])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys*tensors), "ns/region")
		})
	}
}
