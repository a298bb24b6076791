package master

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Loopback benchmark (issue 13 item 3): batched GetReplicas and PutStart
// of 4096 keys per call, one remote Client (one connection, as a client
// process has) to a Service behind a Server on TCP loopback, client and
// server in this process. loopbackInFlight goroutines make loopbackCalls
// calls each per round; PutStart's puts are revoked after each round with
// the timer stopped (so the Service's table does not grow and the quotas
// are not hit). ns/key is wall time per key; cpu-ns/key the process's CPU
// time per key (two cores: up to twice ns/key); allocs/key and B/key count
// every allocation of client, server and gRPC in the timed part.
const (
	loopbackKeys     = 4096
	loopbackInFlight = 8
	loopbackCalls    = 2
	loopbackRound    = loopbackInFlight * loopbackCalls
)

type loopback struct {
	svc    *Service
	c      Client
	writer Placement
	gets   [][]string // loopbackRound key sets of visible objects
	puts   [][]string // loopbackRound key sets of new keys
}

// newLoopback serves a Service with 4 segments on a loopback listener and
// dials it, each with the given extra options.
func newLoopback(b *testing.B, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption) *loopback {
	b.Helper()
	svc, err := New(Config{ReapInterval: time.Second, PutTimeout: time.Hour, LeaseTTL: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close() })
	ctx := context.Background()
	reg, err := svc.RegisterClient(ctx, ClientInfo{ID: "vllm-worker-3", Node: "gpu-node-17", TTL: 5 * time.Minute, NUMANode: 1, Device: 3})
	if err != nil {
		b.Fatal(err)
	}
	f := newCodecFixture()
	for _, d := range f.descs {
		d.Owner, d.Node = reg.ID, "gpu-node-17"
		if err := svc.MountSegment(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(svc, nil, srvOpts...)
	go srv.Serve(lis, nil)
	c, err := Dial(ctx, lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = srv.Shutdown(context.Background())
	})
	l := &loopback{svc: svc, c: c, writer: Placement{Client: reg.ID, Node: "gpu-node-17", NUMANode: 1, Device: 3}}
	for i := range loopbackRound {
		var gets, puts []string
		for _, k := range f.keys {
			gets = append(gets, fmt.Sprintf("%s/%02d", k, i))
			puts = append(puts, fmt.Sprintf("%s/p%02d", k, i))
		}
		l.gets, l.puts = append(l.gets, gets), append(l.puts, puts)
		refs := l.startLocal(b, gets)
		for j, err := range svc.PutEnd(ctx, refs) {
			if err != nil {
				b.Fatalf("PutEnd %s: %v", refs[j].Key, err)
			}
		}
	}
	return l
}

func (l *loopback) reqs(keys []string) []PutStartReq {
	reqs := make([]PutStartReq, len(keys))
	for i, k := range keys {
		reqs[i] = PutStartReq{Key: k, Size: 512 << 10, Placement: l.writer}
	}
	return reqs
}

// startLocal starts puts of keys straight in the Service.
func (l *loopback) startLocal(b *testing.B, keys []string) []PutRef {
	res, err := l.svc.PutStart(context.Background(), l.reqs(keys))
	if err != nil {
		b.Fatal(err)
	}
	refs := make([]PutRef, len(keys))
	for i, r := range res {
		if r.Err != nil {
			b.Fatalf("PutStart %s: %v", keys[i], r.Err)
		}
		refs[i] = PutRef{Key: keys[i], Token: r.Token}
	}
	return refs
}

// meter sums the allocations and the process's CPU time (user and
// system, all threads: client, server, gRPC, GC) of the timed parts of a
// benchmark. CPU time is less sensitive than wall time to other jobs on
// a shared machine.
type meter struct {
	mallocs, bytes uint64
	cpu            time.Duration
	ms             runtime.MemStats
}

func (a *meter) start() {
	runtime.ReadMemStats(&a.ms)
	a.mallocs -= a.ms.Mallocs
	a.bytes -= a.ms.TotalAlloc
	a.cpu -= cpuTime()
}

func (a *meter) stop() {
	a.cpu += cpuTime()
	runtime.ReadMemStats(&a.ms)
	a.mallocs += a.ms.Mallocs
	a.bytes += a.ms.TotalAlloc
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLoopback: see the top of this file. client=embedded is the
// same load on the Service without gRPC, for the remote master's own
// cost (the difference); client=grpc-window the remote Client with 4 MiB
// HTTP/2 flow-control windows and 1 MiB socket buffers on both sides;
// client=fast the remote Client over the master's fast path.
func BenchmarkLoopback(b *testing.B) {
	const mib = 1 << 20
	for _, rpc := range []string{"GetReplicas", "PutStart"} {
		for _, client := range []string{"grpc", "embedded", "grpc-window", "fast"} {
			b.Run(fmt.Sprintf("rpc=%s/client=%s/keys=%d", rpc, client, loopbackKeys), func(b *testing.B) {
				var srvOpts []grpc.ServerOption
				var dialOpts []grpc.DialOption
				if client == "grpc-window" {
					srvOpts = []grpc.ServerOption{grpc.InitialWindowSize(4 * mib), grpc.InitialConnWindowSize(4 * mib),
						grpc.ReadBufferSize(mib), grpc.WriteBufferSize(mib)}
					dialOpts = []grpc.DialOption{grpc.WithInitialWindowSize(4 * mib), grpc.WithInitialConnWindowSize(4 * mib),
						grpc.WithReadBufferSize(mib), grpc.WithWriteBufferSize(mib)}
				}
				l := newLoopback(b, srvOpts, dialOpts)
				switch client {
				case "embedded":
					l.c = NewEmbedded(l.svc)
				case "fast": // the master's fast path (fastpath.go), same Service
					l.c = dialFast(b, serveFast(b, NewServer(l.svc, nil), nil), FastPath{})
				}
				benchLoopback(b, l, rpc)
			})
		}
	}
}

func benchLoopback(b *testing.B, l *loopback, rpc string) {
	ctx := context.Background()
	reqs := make([][]PutStartReq, loopbackRound)
	for i := range reqs {
		reqs[i] = l.reqs(l.puts[i])
	}
	refs := make([][]PutRef, loopbackRound)
	var ac meter
	runtime.GC()
	b.ResetTimer()
	ac.start()
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make([]error, loopbackInFlight)
		for g := range loopbackInFlight {
			wg.Go(func() {
				for c := range loopbackCalls {
					i := g*loopbackCalls + c
					if rpc == "GetReplicas" {
						res, err := l.c.GetReplicas(ctx, l.gets[i])
						if err == nil && (len(res) != loopbackKeys || res[0].Err != nil || res[loopbackKeys-1].Err != nil) {
							err = fmt.Errorf("GetReplicas: %d results, first %v", len(res), res[0].Err)
						}
						if err != nil {
							errs[g] = err
							return
						}
						continue
					}
					res, err := l.c.PutStart(ctx, reqs[i])
					if err != nil {
						errs[g] = err
						return
					}
					refs[i] = refs[i][:0]
					for j, r := range res {
						if r.Err != nil {
							errs[g] = fmt.Errorf("PutStart %s: %w", reqs[i][j].Key, r.Err)
							return
						}
						refs[i] = append(refs[i], PutRef{Key: reqs[i][j].Key, Token: r.Token})
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		if rpc == "PutStart" {
			b.StopTimer()
			ac.stop()
			for i := range refs {
				for _, err := range l.svc.PutRevoke(ctx, refs[i]) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			ac.start()
			b.StartTimer()
		}
	}
	ac.stop()
	keys := float64(b.N) * loopbackRound * loopbackKeys
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keys, "ns/key")
	b.ReportMetric(float64(ac.mallocs)/keys, "allocs/key")
	b.ReportMetric(float64(ac.bytes)/keys, "B/key")
	b.ReportMetric(float64(ac.cpu.Nanoseconds())/keys, "cpu-ns/key")
}

// BenchmarkLoopbackOneCaller is BenchmarkLoopback's load made by one
// goroutine, one call at a time, as one pipeline of a Store makes its
// master calls (a chunk of up to 512 keys, a batch of up to 4096): the
// latency of a call per key, not the throughput of eight callers. Over
// gRPC and over the fast path. PutStartUniform is PutStart's puts sent as
// uniform puts (UniformPutStarter), as a Store's batch puts go.
// GetReplicasRows and PutStartUniformRows ask for the answer by result,
// as clients did before answers by column (pb.GetColumns,
// pb.PutStartColumns).
func BenchmarkLoopbackOneCaller(b *testing.B) {
	for _, rpc := range []string{"GetReplicas", "GetReplicasRows", "PutStart", "PutStartUniform", "PutStartUniformRows"} {
		for _, n := range []int{64, 512, loopbackKeys} {
			for _, client := range []string{"grpc", "fast"} {
				b.Run(fmt.Sprintf("rpc=%s/client=%s/keys=%d", rpc, client, n), func(b *testing.B) {
					l := newLoopback(b, nil, nil)
					if client == "fast" {
						l.c = dialFast(b, serveFast(b, NewServer(l.svc, nil), nil), FastPath{})
					}
					l.c.(*remote).noColumns = strings.HasSuffix(rpc, "Rows")
					ctx := context.Background()
					gets, reqs := l.gets[0][:n], l.reqs(l.puts[0][:n])
					// The same puts as reqs, as a Store's batch sends them.
					uni := UniformPuts{Keys: l.puts[0][:n], Sizes: make([]uint64, n), Req: PutStartReq{Placement: l.writer}}
					for j := range reqs {
						uni.Sizes[j] = reqs[j].Size
					}
					refs := make([]PutRef, n)
					var ac meter
					runtime.GC()
					b.ResetTimer()
					ac.start()
					for b.Loop() {
						if rpc == "GetReplicas" || rpc == "GetReplicasRows" {
							res, err := l.c.GetReplicas(ctx, gets)
							if err == nil && res[n-1].Err != nil {
								err = res[n-1].Err
							}
							if err != nil {
								b.Fatal(err)
							}
							continue
						}
						var res []PutStartResult
						var err error
						if strings.HasPrefix(rpc, "PutStartUniform") {
							res, err = l.c.(UniformPutStarter).PutStartUniform(ctx, uni)
						} else {
							res, err = l.c.PutStart(ctx, reqs)
						}
						if err != nil {
							b.Fatal(err)
						}
						for j, r := range res {
							if r.Err != nil {
								b.Fatalf("PutStart %s: %v", reqs[j].Key, r.Err)
							}
							refs[j] = PutRef{Key: reqs[j].Key, Token: r.Token}
						}
						b.StopTimer()
						ac.stop()
						for _, err := range l.svc.PutRevoke(ctx, refs) {
							if err != nil {
								b.Fatal(err)
							}
						}
						ac.start()
						b.StartTimer()
					}
					ac.stop()
					keys := float64(b.N) * float64(n)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keys, "ns/key")
					b.ReportMetric(float64(ac.cpu.Nanoseconds())/keys, "cpu-ns/key")
					b.ReportMetric(float64(ac.bytes)/keys, "B/key")
				})
			}
		}
	}
}

// BenchmarkLoopbackPutEnd is one caller's PutEnd of a 4096-key batch
// over gRPC and the fast path, the puts started through the same remote
// Client (untimed): with their hints (PutStartResult.Hint, carried by the
// wire both ways), and without (hint=off: every key looked up, as a
// master did for remote puts before the wire carried hints).
func BenchmarkLoopbackPutEnd(b *testing.B) {
	for _, client := range []string{"grpc", "fast"} {
		for _, hint := range []string{"on", "off"} {
			b.Run(fmt.Sprintf("client=%s/hint=%s/keys=%d", client, hint, loopbackKeys), func(b *testing.B) {
				l := newLoopback(b, nil, nil)
				if client == "fast" {
					l.c = dialFast(b, serveFast(b, NewServer(l.svc, nil), nil), FastPath{})
				}
				ctx := context.Background()
				keys := l.puts[0]
				reqs := l.reqs(keys)
				refs := make([]PutRef, len(keys))
				var ac meter
				for b.Loop() {
					b.StopTimer()
					res, err := l.c.PutStart(ctx, reqs)
					if err != nil {
						b.Fatal(err)
					}
					for j := range res {
						if res[j].Err != nil {
							b.Fatalf("PutStart %s: %v", keys[j], res[j].Err)
						}
						if refs[j] = res[j].Ref(keys[j]); hint == "off" {
							refs[j].Hint = 0
						} else if refs[j].Hint == 0 {
							b.Fatalf("PutStart %s: no hint over the wire", keys[j])
						}
					}
					runtime.GC()
					ac.start()
					b.StartTimer()
					for j, err := range l.c.PutEnd(ctx, refs) {
						if err != nil {
							b.Fatalf("PutEnd %s: %v", keys[j], err)
						}
					}
					b.StopTimer()
					ac.stop()
					for j, err := range l.svc.Remove(ctx, keys, true) {
						if err != nil {
							b.Fatalf("Remove %s: %v", keys[j], err)
						}
					}
					b.StartTimer()
				}
				n := float64(b.N) * loopbackKeys
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/key")
				b.ReportMetric(float64(ac.cpu.Nanoseconds())/n, "cpu-ns/key")
				b.ReportMetric(float64(ac.bytes)/n, "B/key")
			})
		}
	}
}
