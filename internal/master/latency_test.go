package master

import (
	"context"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// BenchmarkLatency is one small call at a time: the round trip a single get
// pays (sequential, no batching). These are the first rungs of the latency
// ladder (docs/perf/latency.md, "dev VM ladder"). The master is
//
//	embedded   in this goroutine's process, no transport
//	grpc       a Server in this process on TCP loopback
//	grpc-proc  a Server in a child process (this test binary) on TCP
//	           loopback, as `kvfabric master` is to a client process
//
// and the calls are
//
//	exists       a trivial unary call (one absent key, no lease): gRPC's floor
//	getreplicas  GetReplicas of one visible 4 KiB object, as a get asks it
//	             (named reader, read lease; the leases are released after
//	             the timed loop)
//
// /locked makes the calls from a goroutine locked to its OS thread, as a
// call entering Go from a C thread (the C ABI, Python) is. p50-us and
// p99-us are over the individual calls.
func BenchmarkLatency(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc", "grpc-proc"} {
		for _, thread := range []string{"", "/locked"} {
			b.Run(kind+"/exists"+thread, func(b *testing.B) {
				c := latencyMaster(b, kind)
				ctx := context.Background()
				keys := []string{"absent"}
				onThread(thread != "", func() {
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						if _, err := c.Exists(ctx, keys, false); err != nil {
							b.Fatal(err)
						}
						lat.add(t0)
					}
					lat.report(b)
				})
			})
			b.Run(kind+"/getreplicas"+thread, func(b *testing.B) {
				c := latencyMaster(b, kind)
				ctx := WithReader(context.Background(), latencyClient)
				keys := []string{"k"}
				var leases []uint64
				onThread(thread != "", func() {
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						res, err := c.GetReplicas(ctx, keys)
						if err != nil || res[0].Err != nil {
							b.Fatal(err, res)
						}
						lat.add(t0)
						leases = append(leases, res[0].LeaseID)
					}
					lat.report(b)
				})
				if err := c.ReleaseLeases(ctx, leases); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// latencyClient is the client latencyMaster registers.
const latencyClient = "bench"

// latencyMaster returns a Client of a master of kind (see BenchmarkLatency)
// on which latencyClient is registered with one DRAM segment and "k" is a
// visible 4 KiB object.
func latencyMaster(b *testing.B, kind string) Client {
	b.Helper()
	ctx := context.Background()
	var c Client
	switch kind {
	case "embedded", "grpc":
		svc, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = svc.Close() })
		c = NewEmbedded(svc)
		if kind == "grpc" {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := NewServer(svc, nil)
			go srv.Serve(lis, nil)
			b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			c = dialLatency(b, lis.Addr().String())
		}
	case "grpc-proc":
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := lis.Addr().String() // free until the child listens on it
		_ = lis.Close()
		startMasterProc(b, addr)
		c = dialLatency(b, addr)
	default:
		b.Fatalf("master kind %q", kind)
	}
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: latencyClient, Node: "h", TTL: time.Hour, NUMANode: -1, Device: -1}); err != nil {
		b.Fatal(err)
	}
	if err := c.MountSegment(ctx, desc("seg0", latencyClient, "h", segment.TierDRAM, 0, 1<<40)); err != nil {
		b.Fatal(err)
	}
	place := NoPlacement
	place.Client = latencyClient
	res, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 4096, Placement: place}})
	if err != nil || res[0].Err != nil {
		b.Fatal(err, res)
	}
	if err := c.PutEnd(ctx, []PutRef{{Key: "k", Token: res[0].Token}})[0]; err != nil {
		b.Fatal(err)
	}
	return c
}

func dialLatency(b *testing.B, addr string) Client {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// onThread runs f, locked to this goroutine's OS thread when locked.
func onThread(locked bool, f func()) {
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	f()
}

// latencies are the durations of a benchmark's individual calls.
type latencies []time.Duration

// add records the time since t0.
func (l *latencies) add(t0 time.Time) { *l = append(*l, time.Since(t0)) }

// report adds the median and the 99th percentile as p50-us and p99-us.
func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(l[len(l)/2]), "p50-us")
	b.ReportMetric(us(l[(len(l)-1)*99/100]), "p99-us")
}
