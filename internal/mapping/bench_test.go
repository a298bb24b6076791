package mapping_test

import (
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/mapping"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// BenchmarkAcquireHit is the cached path: Acquire + Release of a mapped
// segment (DESIGN §4 goal: <= 200 ns).
func BenchmarkAcquireHit(b *testing.B) {
	p := newProvider(b, sim.Config{})
	c := newConsumer(b, sim.Config{})
	cache := newCache(b, c, mapping.Options{})
	s := p.segment(b, "host/prov/dram0/0", 0x77, 1, segment.HandlePosixFD)
	m, err := cache.Acquire(bg, s.d)
	if err != nil {
		b.Fatal(err)
	}
	m.Release()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := cache.Acquire(bg, s.d)
			if err != nil {
				b.Fatal(err)
			}
			m.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m, err := cache.Acquire(bg, s.d)
				if err != nil {
					b.Error(err)
					return
				}
				m.Release()
			}
		})
	})
}
