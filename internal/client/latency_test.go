package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BenchmarkGetLatency is one 4 KiB get at a time through a master on
// loopback gRPC (and embedded, for comparison): the latency one engine
// request sees. Its phases say where the time goes.
func BenchmarkGetLatency(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc"} {
		b.Run(kind, func(b *testing.B) {
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
			var mc master.Client = master.NewEmbedded(svc)
			if kind == "grpc" {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				srv := master.NewServer(svc, nil)
				go srv.Serve(lis, nil)
				defer srv.Shutdown(context.Background())
				if mc, err = master.Dial(ctx, lis.Addr().String()); err != nil {
					b.Fatal(err)
				}
			}
			defer mc.Close()
			cfg := map[string]any{"global_segment_size": "64MiB", "enable_egm_store_pool": true, "max_mr_size": "64MiB",
				"driver": "sim", "socket_dir": b.TempDir()}
			c, err := config.FromMap(cfg)
			if err != nil {
				b.Fatal(err)
			}
			s, err := client.Open(ctx, c, client.Options{Driver: drv, Master: mc, ClientID: "lat"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			buf, err := drv.MemAlloc(s.Context(), 4096)
			if err != nil {
				b.Fatal(err)
			}
			defer drv.MemFree(s.Context(), buf)
			r := client.Bytes(uintptr(buf), 4096)
			if err := s.Put(ctx, "k", r, 0, client.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			_, before := s.Phases()
			start := time.Now()
			for b.Loop() {
				if _, err := s.Get(ctx, "k", r, 0); err != nil {
					b.Fatal(err)
				}
			}
			_, g := s.Phases()
			g = g.Sub(before)
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(g.Calls) }
			b.ReportMetric(per(g.Check), "check-us")
			b.ReportMetric(per(g.Meta), "meta-us")
			b.ReportMetric(per(g.Resolve), "resolve-us")
			b.ReportMetric(per(g.Copy), "copy-us")
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(g.Calls), "total-us")
		})
	}
}

// TestRemoteGetReleasesItsLease: with a master over gRPC, lease releases
// go out in the background, yet a get followed by a plain Remove of the
// same Store finds the key unleased (its removals flush the releases), and
// the leases of gets are gone without any removal shortly after.
func TestRemoteGetReleasesItsLease(t *testing.T) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := master.New(master.Config{LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	go srv.Serve(lis, nil)
	defer srv.Shutdown(context.Background())
	ctx := context.Background()
	mc, err := master.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	// Releases reach the master 200 ms late: without the flush a plain
	// remove right after the get would find the lease.
	s, err := client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{Driver: drv, Master: slowRelease{mc, 200 * time.Millisecond}, ClientID: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := drv.MemAlloc(s.Context(), 8192)
	if err != nil {
		t.Fatal(err)
	}
	r := client.Bytes(uintptr(buf), 8192)
	for _, k := range []string{"a", "b"} {
		if err := s.Put(ctx, k, r, 0, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, k, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(ctx, "a", false); err != nil {
		t.Fatalf("plain remove right after this Store's get: %v", err)
	}
	// "b" is released in the background: another client's plain remove
	// succeeds once it has gone out (well within a second).
	other := master.NewEmbedded(svc)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := other.Remove(ctx, []string{"b"}, false)[0]
		if err == nil {
			break
		}
		if !errors.Is(err, master.ErrHasLease) || time.Now().After(deadline) {
			t.Fatalf("remove of b by another client: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := drv.MemFree(s.Context(), buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := svc.Stats(ctx)
	if err != nil || st.Objects != 0 {
		t.Fatalf("after close: %+v %v", st, err)
	}
}

// slowRelease delays every ReleaseLeases by d.
type slowRelease struct {
	master.Client
	d time.Duration
}

func (m slowRelease) ReleaseLeases(ctx context.Context, ids []uint64) error {
	time.Sleep(m.d)
	return m.Client.ReleaseLeases(ctx, ids)
}
