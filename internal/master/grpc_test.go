package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

func init() {
	transports["grpc"] = newBufconnClient
}

// newBufconnClient serves s over an in-memory gRPC connection.
func newBufconnClient(t testing.TB, s *Service) Client {
	lis := bufconn.Listen(1 << 20)
	srv := NewServer(s, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return NewRemote(conn)
}

// TestWireErrors: every sentinel survives the trip with its code, reason and
// message, and errors.Is works on the decoded error.
func TestWireErrors(t *testing.T) {
	for _, w := range wireCodes {
		t.Run(w.reason, func(t *testing.T) {
			orig := fmt.Errorf("ctx: %w: detail", w.err)
			st := toStatus(orig)
			if status.Code(st) != w.code {
				t.Fatalf("code %v, want %v", status.Code(st), w.code)
			}
			back := fromStatus(st)
			if !errors.Is(back, w.err) || back.Error() != orig.Error() {
				t.Fatalf("status round trip: %v (Is=%v)", back, errors.Is(back, w.err))
			}
			item := fromItemError(toItemError(orig))
			if !errors.Is(item, w.err) || item.Error() != orig.Error() {
				t.Fatalf("item round trip: %v", item)
			}
		})
	}
	if fromItemError(toItemError(nil)) != nil || toStatus(nil) != nil {
		t.Fatal("nil does not round-trip to nil")
	}
	other := toStatus(errors.New("boom"))
	if status.Code(other) != codes.Internal {
		t.Fatalf("unknown error: %v", other)
	}
}

// TestTCPLoopback runs the master as `kvfabric master` does: real TCP
// listeners, Dial, metrics over HTTP, graceful Shutdown.
func TestTCPLoopback(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, err := New(Config{Registerer: reg, ReapInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(svc, reg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis, mlis) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg1, err := c.RegisterClient(ctx, ClientInfo{Node: "h", NUMANode: 0, Device: 0, Driver: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	d := desc("tcp/0", reg1.ID, "h", segment.TierDRAM, 0, 64*MiB)
	d.Handle = segment.Handle{Kind: segment.HandleFabric}
	for i := range d.Handle.Fabric {
		d.Handle.Fabric[i] = byte(i * 3)
	}
	if err := c.MountSegment(ctx, d); err != nil {
		t.Fatal(err)
	}
	res, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 100, Placement: Placement{Client: reg1.ID, NUMANode: -1, Device: -1}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if *res[0].Replicas[0].Segment != d {
		t.Fatalf("descriptor over the wire: %+v, want %+v", *res[0].Replicas[0].Segment, d)
	}
	if errs := c.PutEnd(ctx, []PutRef{{Key: "k", Token: res[0].Token}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	g, err := c.GetReplicas(ctx, []string{"k", "missing"})
	if err != nil || g[0].Err != nil || !errors.Is(g[1].Err, ErrNotFound) {
		t.Fatal(err, g)
	}
	if g[0].Replicas[0].Segment != res[0].Replicas[0].Segment {
		t.Fatal("remote Client does not intern descriptors")
	}
	_, err = c.PutStart(ctx, make([]PutStartReq, 70000))
	if !errors.Is(err, ErrInvalid) || status.Code(err) != codes.OK && !strings.Contains(err.Error(), "batch too large") {
		t.Fatalf("oversized batch over TCP: %v", err)
	}

	// The driver and handle kinds in Stats (kvfabric stat, issue 11).
	st, err := c.Stats(ctx)
	if err != nil || len(st.PerClient) != 1 || st.PerClient[0].Driver != "sim" ||
		!slices.Equal(st.PerClient[0].Handles, []segment.HandleKind{segment.HandleFabric}) {
		t.Fatalf("Stats over TCP: %+v, %v", st.PerClient, err)
	}

	// Metrics.
	resp, err := http.Get("http://" + mlis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`kvfabric_master_ops_total{op="put_start",result="ok"} 1`,
		`kvfabric_master_ops_total{op="get_replicas",result="not_found"} 1`,
		`kvfabric_master_capacity_bytes{location="0",node="h",tier="dram"} 6.7108864e+07`,
		`kvfabric_master_used_bytes{location="0",node="h",tier="dram"} 128`,
		`kvfabric_master_objects 1`,
		`kvfabric_master_op_duration_seconds_count{op="put_start"} 2`,
		`kvfabric_master_lease_expiries_total 0`,
		`kvfabric_master_segments_by_handle{handle="fabric"} 1`,
		`kvfabric_master_segments_by_handle{handle="posix_fd"} 0`,
		`kvfabric_master_capacity_bytes_by_handle{handle="fabric"} 6.7108864e+07`,
		`kvfabric_master_clients_by_driver{driver="sim"} 1`,
		`kvfabric_master_clients_by_driver{driver="cuda"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stats(ctx); err == nil {
		t.Fatal("call after Shutdown succeeded")
	}
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestDialTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, addr); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nothing: %v", err)
	}
}

// TestShutdownDeadline: Shutdown cuts calls still running at its deadline.
func TestShutdownDeadline(t *testing.T) {
	svc, err := New(Config{ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lis := bufconn.Listen(1 << 20)
	block := make(chan struct{})
	srv := NewServer(svc, nil, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		select {
		case <-block:
		case <-ctx.Done(): // Stop cancels it
		}
		return h(ctx, req)
	}))
	go srv.Serve(lis, nil)
	conn, _ := grpc.NewClient("passthrough:///x",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := NewRemote(conn)
	callErr := make(chan error, 1)
	go func() { _, err := c.Stats(context.Background()); callErr <- err }()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = srv.Shutdown(ctx)
	close(block)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if err := <-callErr; err == nil {
		t.Fatal("cut call succeeded")
	}
}

func TestInvalidUTF8BothTransports(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		bad := "k\xff"
		w := Placement{Client: e.defaultWriter()}
		res, err := e.c.PutStart(e.ctx, []PutStartReq{{Key: "ok", Size: 1, Placement: w}, {Key: bad, Size: 1, Placement: w}})
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, "no segments", res[0].Err, ErrNoSpace)
		wantErr(t, "bad key", res[1].Err, ErrInvalid)
		g, err := e.c.GetReplicas(e.ctx, []string{bad, "ok"})
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, "Get bad", g[0].Err, ErrInvalid)
		wantErr(t, "Get ok", g[1].Err, ErrNotFound)
		errs := e.c.Remove(e.ctx, []string{"x", bad}, false)
		wantErr(t, "Remove x", errs[0], ErrNotFound)
		wantErr(t, "Remove bad", errs[1], ErrInvalid)
		_, hbErr := e.c.Heartbeat(e.ctx, bad, Mapped{})
		wantErr(t, "Heartbeat bad", hbErr, ErrInvalid)
		_, err = e.c.RegisterClient(e.ctx, ClientInfo{ID: bad})
		wantErr(t, "Register bad", err, ErrInvalid)
		wantErr(t, "Mount bad", e.c.MountSegment(e.ctx, desc(bad, "o", "h", segment.TierDRAM, 0, MiB)), ErrInvalid)
		wantErr(t, "Unmount bad", e.c.UnmountSegment(e.ctx, segment.Key{ID: bad, Generation: 1}), ErrInvalid)
	})
}

// TestRemoteLeaseInLocalClock: a master whose clock is an hour ahead of the
// reader's must not hand the reader an hour-long lease — the remote Client
// puts the lease in its own clock (send time + granted TTL).
func TestRemoteLeaseInLocalClock(t *testing.T) {
	cfg := testConfig()
	e := newEnvWith(t, cfg, newBufconnClient)
	e.clk.Advance(time.Until(e.clk.Now()) + time.Hour) // master clock: now + 1h
	owner := e.register("lease-owner", "h", 0, 0)
	if err := e.c.MountSegment(e.ctx, desc("lease/0", owner, "h", segment.TierDRAM, 0, 64*MiB)); err != nil {
		t.Fatal(err)
	}
	res, err := e.c.PutStart(e.ctx, []PutStartReq{{Key: "k", Size: 100, Placement: Placement{Client: owner, NUMANode: -1, Device: -1}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "k", Token: res[0].Token}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	before := time.Now()
	got, err := e.c.GetReplicas(e.ctx, []string{"k"})
	if err != nil || got[0].Err != nil {
		t.Fatal(err, got)
	}
	if got[0].LeaseTTL != cfg.LeaseTTL {
		t.Fatalf("LeaseTTL %v, want %v", got[0].LeaseTTL, cfg.LeaseTTL)
	}
	if exp := got[0].LeaseExpiry; exp.Before(before) || exp.After(time.Now().Add(cfg.LeaseTTL)) {
		t.Fatalf("lease expiry %v not within [%v, now+%v]", exp, before, cfg.LeaseTTL)
	}
}

// TestEveryRPCImplemented: the server embeds pb.UnimplementedMasterServer
// (gRPC's forward-compatibility pattern); every RPC the proto declares must
// still be served by grpcService, never by the generated "not implemented"
// fallback. Each handler is invoked with an empty request: any answer but
// codes.Unimplemented proves the method is ours.
func TestEveryRPCImplemented(t *testing.T) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := &grpcService{svc: svc}
	methods := pb.Master_ServiceDesc.Methods
	if len(methods) == 0 {
		t.Fatal("service descriptor lists no methods")
	}
	for _, m := range methods {
		_, err := m.Handler(srv, context.Background(), func(any) error { return nil }, nil)
		if status.Code(err) == codes.Unimplemented {
			t.Errorf("%s falls through to pb.UnimplementedMasterServer: %v", m.MethodName, err)
		}
	}
}
