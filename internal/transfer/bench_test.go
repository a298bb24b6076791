package transfer_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkCrossStream measures the latency of small batches on one stream
// while another goroutine keeps a large batch in flight on a second stream
// (issue #13 item 5): the small caller's latency must not track the large
// one's. Each op is one blocking Do of 16 x 4 KiB blocks (the SM kernel);
// the large caller loops Do of 1 MiB copy-engine blocks plus a few small
// blocks, so that its kernel launch — and the ring slot it holds — waits
// behind its copies. On the simulator, whose copies take no time, the
// large batch's GPU time is emulated by holding its stream for 2 ms
// (sim.Driver.HoldStream); on a GPU (KVFABRIC_GPU_TESTS=1) it is 256 MiB
// of real copies. Reported: the small batches' mean (ns/op), p50, p99 and
// p99.9 latency, and how many large batches ran meanwhile. Before the fix
// the small caller waited for the large one once per ring cycle (8
// launches): on the simulator its mean latency doubled and its p99.9 was
// the large batch's time.
//
//	go test -run '^$' -bench CrossStream ./internal/transfer
func BenchmarkCrossStream(b *testing.B) {
	e := newBenchEnv(b)
	eng := newEngine(b, e, transfer.Options{})
	const small, smallN = 4 << 10, 16
	largeN, largeHold := 256, 2*time.Millisecond
	if e.sim != nil {
		largeN = 4 // the copies are instant; the hold stands for their time
	}
	sSmall := e.s
	sLarge, err := e.drv.StreamCreate(e.ctx, cuda.StreamNonBlocking)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.drv.StreamDestroy(e.ctx, sLarge) })
	hbm := e.hbm(b, uint64(largeN)<<20+1<<20)
	pool := e.dram(b, uint64(largeN)<<20+1<<20)
	var large []cuda.Copy
	for i := range largeN {
		off := cuda.DevicePtr(i) << 20
		large = append(large, cuda.Copy{Dst: pool + off, Src: hbm + off, Len: 1 << 20})
	}
	tail := cuda.DevicePtr(largeN) << 20 // the last MiB: small blocks
	for i := range smallN {
		off := tail + cuda.DevicePtr(i)*small
		large = append(large, cuda.Copy{Dst: pool + off, Src: hbm + off, Len: small})
	}
	var smallCs []cuda.Copy
	for i := range smallN {
		off := tail + 512<<10 + cuda.DevicePtr(i)*small
		smallCs = append(smallCs, cuda.Copy{Dst: hbm + off, Src: pool + off, Len: small})
	}
	var nLarge atomic.Int64
	largeDo := func() error { nLarge.Add(1); return eng.Do(sLarge, large) }
	if e.sim != nil {
		largeDo = func() error {
			nLarge.Add(1)
			release := e.sim.HoldStream(sLarge)
			t := time.AfterFunc(largeHold, release)
			defer t.Stop()
			defer release()
			return eng.Do(sLarge, large)
		}
	}
	for _, withLarge := range []bool{false, true} {
		name := "large=none"
		if withLarge {
			name = fmt.Sprintf("large=%dx1MiB", largeN)
		}
		b.Run(name+"/small=16x4KiB", func(b *testing.B) {
			nLarge.Store(0)
			stop := make(chan struct{})
			done := make(chan error, 1)
			if withLarge {
				go func() {
					for {
						select {
						case <-stop:
							done <- nil
							return
						default:
						}
						if err := largeDo(); err != nil {
							done <- err
							return
						}
					}
				}()
			} else {
				done <- nil
			}
			var lat []time.Duration
			b.SetBytes(smallN * small)
			for b.Loop() {
				t0 := time.Now()
				if err := eng.Do(sSmall, smallCs); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			close(stop)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(q(0.5), "p50-us")
			b.ReportMetric(q(0.99), "p99-us")
			b.ReportMetric(q(0.999), "p99.9-us")
			b.ReportMetric(float64(nLarge.Load()), "large-batches")
		})
	}
}
