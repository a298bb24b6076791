package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BenchmarkStore measures BatchPut and BatchGet through the whole Store on
// the simulator (embedded master, EGM provider, consumer importing its
// segments). On the simulator copies are memmoves, so the numbers show the
// Store's per-key overhead, not a GPU's bandwidth (kvfabric demo and
// kvfabric bench measure that on the device).
func BenchmarkStore(b *testing.B) {
	for _, op := range []string{"put", "get"} {
		for _, size := range []uint64{4 << 10, 64 << 10} {
			for _, batch := range []int{128, 4096} {
				if size*uint64(batch) > 64<<20 {
					continue // the 256 MiB store must hold a few batches
				}
				b.Run(fmt.Sprintf("op=%s/size=%s/batch=%d", op, config.FormatSize(size), batch), func(b *testing.B) {
					benchStore(b, op, size, batch)
				})
			}
		}
	}
}

// benchStore: op=put writes new keys every iteration (the master evicts the
// oldest objects once the 256 MiB store is full: they are never read, so
// never leased); op=get reads the same batch again and again.
func benchStore(b *testing.B, op string, size uint64, batch int) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := master.New(master.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	mc := master.NewEmbedded(svc)
	defer mc.Close()
	ctx := context.Background()
	sockets := b.TempDir() // the consumer trusts only sockets here
	mk := func(m map[string]any) config.Config {
		m["driver"], m["socket_dir"] = "sim", sockets
		c, err := config.FromMap(m)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	prov, err := client.Open(ctx, mk(map[string]any{"global_segment_size": "256MiB", "enable_egm_store_pool": true, "max_mr_size": "64MiB"}),
		client.Options{Driver: drv, Master: mc, ClientID: "bench-prov"})
	if err != nil {
		b.Fatal(err)
	}
	defer prov.Close()
	cons, err := client.Open(ctx, mk(map[string]any{}), client.Options{Driver: drv, Master: mc, ClientID: "bench-cons"})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	buf, err := drv.MemAlloc(cons.Context(), size*uint64(batch))
	if err != nil {
		b.Fatal(err)
	}
	defer drv.MemFree(cons.Context(), buf)
	regions := make([][]client.Region, batch)
	for i := range regions {
		regions[i] = client.Bytes(uintptr(buf)+uintptr(uint64(i)*size), size)
	}
	keys := make([]string, batch)
	for i := range keys {
		keys[i] = fmt.Sprintf("fixed/%d", i)
	}
	if op == "get" {
		for _, err := range cons.BatchPut(ctx, keys, regions, 0, client.PutOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(size) * int64(batch))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if op == "get" {
			if _, errs := cons.BatchGet(ctx, keys, regions, 0); errs[0] != nil {
				b.Fatal(errs[0])
			}
			continue
		}
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d/%d", n, i)
		}
		n++
		for _, err := range cons.BatchPut(ctx, keys, regions, 0, client.PutOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
	if _, err := cons.RemoveAll(ctx, true); err != nil {
		b.Fatal(err)
	}
}
