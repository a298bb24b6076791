package transfer_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

func sizeName(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkSubmit measures blocking batches (Do) of random blocks between an
// HBM buffer and a DRAM-tier (HOST_NUMA VMM) pool: put = HBM→DRAM, get =
// DRAM→HBM. It runs on the simulator unless KVFABRIC_GPU_TESTS=1.
//
//	go test -run '^$' -bench 'Submit/size=4KiB' ./internal/transfer
func BenchmarkSubmit(b *testing.B) {
	e := newBenchEnv(b)
	routes := []transfer.Route{transfer.RouteAuto, transfer.RouteKernel, transfer.RouteCopyEach}
	if e.drv.Capabilities().MemcpyBatchAsync {
		routes = append(routes, transfer.RouteCopyBatch)
	}
	engines := map[transfer.Route]*transfer.Engine{}
	for _, r := range routes {
		engines[r] = newEngine(b, e, transfer.Options{Route: r})
	}
	for _, shape := range []struct {
		size  uint64
		batch int
	}{{4 << 10, 128}, {64 << 10, 128}, {1 << 20, 32}} {
		poolBlocks := 4 * shape.batch
		pool := e.dram(b, uint64(poolBlocks)*shape.size)
		hbm := e.hbm(b, uint64(shape.batch)*shape.size)
		rng := rand.New(rand.NewPCG(1, uint64(shape.size)))
		slots := rng.Perm(poolBlocks)[:shape.batch]
		put := make([]cuda.Copy, shape.batch)
		get := make([]cuda.Copy, shape.batch)
		for i, s := range slots {
			d := pool + cuda.DevicePtr(uint64(s)*shape.size)
			h := hbm + cuda.DevicePtr(uint64(i)*shape.size)
			put[i] = cuda.Copy{Dst: d, Src: h, Len: shape.size}
			get[i] = cuda.Copy{Dst: h, Src: d, Len: shape.size}
		}
		for _, r := range routes {
			for _, dir := range []struct {
				name string
				cs   []cuda.Copy
			}{{"put", put}, {"get", get}} {
				name := fmt.Sprintf("size=%s/batch=%d/route=%v/dir=%s", sizeName(shape.size), shape.batch, r, dir.name)
				b.Run(name, func(b *testing.B) {
					eng := engines[r]
					b.SetBytes(int64(shape.size) * int64(shape.batch))
					b.ReportAllocs()
					for b.Loop() {
						if err := eng.Do(e.s, dir.cs); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
