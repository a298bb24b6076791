package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// routedMaster serves a Router on loopback and returns a term Client for
// it: over gRPC only, or (fast) with its hot calls over the fast path.
func routedMaster(t *testing.T, r *Router, epochs *Epochs, fast bool) Client {
	t.Helper()
	if fast {
		fs := serveFast(t, NewRoutedServer(r, nil), nil)
		c, err := DialTermFast(fs.addr, epochs, FastPath{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.(*remote).fast.advertise(context.Background(), portOf(t, fs.fastAddr)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if st := c.(*remote).Transports(); st.GRPC != 0 {
				t.Errorf("transports %+v: want every hot call over the fast path", st)
			}
			_ = c.Close()
		})
		return c
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewRoutedServer(r, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	c, err := DialTerm(lis.Addr().String(), epochs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = srv.Shutdown(context.Background())
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c
}

// overBoth runs fn over gRPC only and over the fast path.
func overBoth(t *testing.T, fn func(t *testing.T, fast bool)) {
	t.Run("grpc", func(t *testing.T) { fn(t, false) })
	t.Run("fast", func(t *testing.T) { fn(t, true) })
}

// TestRouterStandbyRefusesEveryCall: a master that leads no term answers
// every RPC with ErrNotLeader naming the leader it knows, executes nothing,
// and its answers carry no epoch.
func TestRouterStandbyRefusesEveryCall(t *testing.T) { overBoth(t, testRouterStandbyRefusesEveryCall) }

func testRouterStandbyRefusesEveryCall(t *testing.T, fast bool) {
	var r Router
	r.SetLeader("10.0.0.9:50051", 42)
	c := routedMaster(t, &r, &Epochs{}, fast)
	ctx := context.Background()
	calls := map[string]func() error{
		"RegisterClient": func() error {
			_, err := c.RegisterClient(ctx, ClientInfo{ID: "a", NUMANode: -1, Device: -1})
			return err
		},
		"Heartbeat": func() error { _, err := c.Heartbeat(ctx, "a", Mapped{}); return err },
		"PutStart": func() error {
			_, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 1, Placement: NoPlacement}})
			return err
		},
		"PutEnd":      func() error { return c.PutEnd(ctx, []PutRef{{Key: "k", Token: 1}})[0] },
		"GetReplicas": func() error { _, err := c.GetReplicas(ctx, []string{"k"}); return err },
		"Stats":       func() error { _, err := c.Stats(ctx); return err },
		"MountSegment": func() error {
			return c.MountSegment(ctx, segment.Descriptor{ID: "s", Generation: 1, Owner: "a", Size: 1 << 20})
		},
	}
	for name, call := range calls {
		err := call()
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) || nl.Leader != "10.0.0.9:50051" || nl.Epoch != 42 {
			t.Errorf("%s at a standby: %v, want NotLeaderError naming 10.0.0.9:50051 epoch 42", name, err)
		}
	}
	if got := r.Refused.Load(); got != uint64(len(calls)) {
		t.Errorf("refused %d calls, want %d", got, len(calls))
	}
	// Every method of the service goes through the router (a new RPC that
	// bypassed it would serve from no Service).
	g := &grpcService{router: &r}
	for _, m := range serviceDesc().Methods {
		_, err := m.Handler(g, context.Background(), func(any) error { return nil }, nil)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s at a standby: %v, want Unavailable (not leader)", m.MethodName, err)
		}
	}
	if n := len(serviceDesc().Methods); n != len(pb.Master_ServiceDesc.Methods) {
		t.Fatalf("%d methods served, %d in the service", n, len(pb.Master_ServiceDesc.Methods))
	}
}

// TestRouterEpochs: every answer of a term carries its epoch; a client
// that has seen a newer epoch refuses the old leader's answers; a term
// whose lease ended answers nothing, also a call already running.
func TestRouterEpochs(t *testing.T) { overBoth(t, testRouterEpochs) }

func testRouterEpochs(t *testing.T, fast bool) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	var r Router
	var valid atomic.Bool
	valid.Store(true)
	r.Lead(svc, nil, Term{Epoch: 5, Valid: valid.Load})
	var seen []uint64
	epochs := &Epochs{OnNew: func(e uint64) { seen = append(seen, e) }}
	c := routedMaster(t, &r, epochs, fast)
	ctx := context.Background()
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: "w", NUMANode: -1, Device: -1}); err != nil {
		t.Fatal(err)
	}
	if epochs.Max() != 5 || len(seen) != 1 {
		t.Fatalf("epoch after an answer: %d (new terms seen %v), want 5", epochs.Max(), seen)
	}

	// A newer term is known (from etcd): the old leader's answers are
	// refused, whatever they say.
	if err := epochs.Observe(6); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stats(ctx); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("answer of epoch 5 after epoch 6 was seen: %v, want ErrStaleEpoch", err)
	}
	if _, err := c.GetReplicas(ctx, []string{"k"}); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("get answered in epoch 5 after epoch 6 was seen: %v, want ErrStaleEpoch", err)
	}
	if err := epochs.Observe(5); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("Observe(5) after 6: %v", err)
	}

	// The lease ends by the master's clock: nothing is answered.
	c2 := routedMaster(t, &r, &Epochs{}, fast)
	valid.Store(false)
	if _, err := c2.Heartbeat(ctx, "w", Mapped{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("heartbeat after the lease ended: %v, want ErrNotLeader", err)
	}
	if _, err := c2.Exists(ctx, []string{"k"}, false); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("exists after the lease ended: %v, want ErrNotLeader", err)
	}

	// The lease ends during a call: its answer is replaced.
	var checks atomic.Int32
	r.Lead(svc, nil, Term{Epoch: 7, Valid: func() bool { return checks.Add(1) == 1 }})
	if _, err := c2.RegisterClient(ctx, ClientInfo{ID: "x", NUMANode: -1, Device: -1}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("register while the lease ended: %v, want ErrNotLeader", err)
	}
	r.StandBy()
	if _, err := c2.Stats(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("after StandBy: %v, want ErrNotLeader", err)
	}
}

// TestRouterFence: a new term places no puts before its fence; other calls
// are served.
func TestRouterFence(t *testing.T) { overBoth(t, testRouterFence) }

func testRouterFence(t *testing.T, fast bool) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	var r Router
	r.Lead(svc, nil, Term{Epoch: 3, Valid: func() bool { return true }, FenceUntil: time.Now().Add(300 * time.Millisecond)})
	c := routedMaster(t, &r, &Epochs{}, fast)
	ctx := context.Background()
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: "w", NUMANode: -1, Device: -1}); err != nil {
		t.Fatal(err)
	}
	if err := c.MountSegment(ctx, desc("w/s", "w", "", segment.TierDRAM, 0, 1<<20)); err != nil {
		t.Fatal(err)
	}
	put := func() error {
		res, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 100, Placement: Placement{Client: "w", NUMANode: -1, Device: -1}}})
		if err != nil {
			return err
		}
		return res[0].Err
	}
	if err := put(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put inside the fence: %v, want ErrNoSpace", err)
	}
	time.Sleep(350 * time.Millisecond)
	if err := put(); err != nil {
		t.Fatalf("put after the fence: %v", err)
	}
}

// BenchmarkTermGet is BenchmarkGet's grpc case (batch 1 and 128) through a
// Router and DialTerm, against the plain server: the cost of the epoch
// header on both sides and of the term checks.
func BenchmarkTermGet(b *testing.B) {
	const objects = 10_000
	for _, kind := range []string{"grpc", "term"} {
		for _, n := range []int{1, 128} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, n), func(b *testing.B) {
				svc, c := benchService(b, "embedded")
				fill(b, svc, objects)
				if kind == "grpc" {
					_, c = benchServiceOver(b, svc, NewServer(svc, nil), func(addr string) (Client, error) { return Dial(context.Background(), addr) })
				} else {
					var r Router
					r.Lead(svc, nil, Term{Epoch: 9, Valid: func() bool { return true }})
					_, c = benchServiceOver(b, svc, NewRoutedServer(&r, nil), func(addr string) (Client, error) { return DialTerm(addr, &Epochs{}) })
				}
				var seq atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(4)
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					keys := make([]string, n)
					for pb.Next() {
						base := seq.Add(int64(n))
						for i := range keys {
							keys[i] = "key-" + strconv.Itoa(int((base+int64(i)*7919)%objects))
						}
						res, err := c.GetReplicas(ctx, keys)
						if err != nil {
							b.Fatal(err)
						}
						if res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
						ids := make([]uint64, len(res))
						for i := range res {
							ids[i] = res[i].LeaseID
						}
						if err := c.ReleaseLeases(ctx, ids); err != nil {
							b.Fatal(err)
						}
					}
				})
				reportKeys(b, start, n)
			})
		}
	}
}

func benchServiceOver(b *testing.B, svc *Service, srv *Server, dial func(string) (Client, error)) (*Service, Client) {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis, nil)
	c, err := dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = srv.Shutdown(context.Background())
	})
	return svc, c
}
