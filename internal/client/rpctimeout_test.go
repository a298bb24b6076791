package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/master"
)

// stallingMaster is a real master over TCP whose handlers, once stall is
// set, block until the test ends: it accepts connections and calls and
// never answers them (a wedged master process).
type stallingMaster struct {
	addr    string
	stalled atomic.Bool
	release chan struct{}
	srv     *master.Server
}

// stop shuts the master down (its port then refuses connections).
func (sm *stallingMaster) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sm.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func startStallingMaster(t *testing.T) *stallingMaster {
	t.Helper()
	sm := &stallingMaster{release: make(chan struct{})}
	svc, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	block := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if sm.stalled.Load() {
			<-sm.release // not ctx.Done(): a wedged master does not notice the client giving up
		}
		return h(ctx, req)
	}
	srv := master.NewServer(svc, nil, grpc.UnaryInterceptor(block))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(sm.release) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-done
		_ = svc.Close()
	})
	sm.addr, sm.srv = lis.Addr().String(), srv
	return sm
}

// TestRPCTimeoutStalledMaster: every Store call made without a deadline (as
// the C ABI and Python make them) fails with ErrRPC naming rpc_timeout
// within about rpc_timeout when the master stops answering, and the Store
// works again once the master does.
func TestRPCTimeoutStalledMaster(t *testing.T) {
	sm := startStallingMaster(t)
	const timeout = 500 * time.Millisecond
	open := func(m map[string]any) *client.Store {
		m["master_server_addr"] = sm.addr
		m["rpc_timeout"] = "500ms"
		s, err := client.Open(context.Background(), cfgFor(t, m), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prov := open(egmProvider("64MiB"))
	cons := open(map[string]any{})
	bg := context.Background()
	if err := cons.PutBytes(bg, "before", []byte("v"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	sm.stalled.Store(true)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"PutBytes", func() error { return cons.PutBytes(bg, "k", []byte("v"), client.PutOptions{}) }},
		{"GetBytes", func() error { _, err := cons.GetBytes(bg, "before"); return err }},
		{"Exists", func() error { _, err := cons.Exists(bg, "before"); return err }},
		{"BatchExists", func() error { _, err := cons.BatchExists(bg, []string{"a", "b"}, false); return err }},
		{"Size", func() error { _, err := cons.Size(bg, "before"); return err }},
		{"Remove", func() error { return cons.Remove(bg, "before", false) }},
		{"RemoveAll", func() error { _, err := cons.RemoveAll(bg, false); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errc := make(chan error, 1)
			t0 := time.Now()
			go func() { errc <- tc.call() }()
			select {
			case err := <-errc:
				took := time.Since(t0)
				if !errors.Is(err, client.ErrRPC) || !strings.Contains(err.Error(), "rpc_timeout=500ms") {
					t.Fatalf("err = %v; want ErrRPC naming rpc_timeout=500ms", err)
				}
				// About rpc_timeout; the slack is for a loaded machine.
				if took < timeout || took > timeout+2*time.Second {
					t.Fatalf("failed after %v; want about rpc_timeout (%v)", took, timeout)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked for 10s on a master that does not answer (no rpc_timeout)")
			}
		})
	}

	// A caller's own deadline is kept, not replaced by rpc_timeout.
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	t0 := time.Now()
	_, err := cons.Exists(ctx, "before")
	cancel()
	if took := time.Since(t0); !errors.Is(err, context.DeadlineExceeded) || took > timeout {
		t.Fatalf("Exists with a 100ms deadline: %v after %v", err, took)
	}

	// The master answers again: so does the Store.
	sm.stalled.Store(false)
	if ok, err := cons.Exists(bg, "before"); err != nil || !ok {
		t.Fatalf("after the stall: Exists = %v, %v", ok, err)
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	if err := prov.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRPCTimeoutDefault: a Config without rpc_timeout (the zero value)
// still bounds master calls, by config.DefaultRPCTimeout.
func TestRPCTimeoutDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s default")
	}
	sm := startStallingMaster(t)
	cfg := cfgFor(t, map[string]any{"master_server_addr": sm.addr})
	cfg.RPCTimeout = 0
	s, err := client.Open(context.Background(), cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sm.stalled.Store(true)
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() { _, err := s.Exists(context.Background(), "k"); errc <- err }()
	select {
	case err := <-errc:
		want := "rpc_timeout=" + config.DefaultRPCTimeout.String()
		if !errors.Is(err, client.ErrRPC) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v; want ErrRPC naming %s", err, want)
		}
		t.Logf("failed after %v: %v", time.Since(t0), err)
	case <-time.After(config.DefaultRPCTimeout + 10*time.Second):
		t.Fatal("blocked on a master that does not answer")
	}
	sm.stalled.Store(false)
}

// TestMasterDownIsErrRPC: a call to a master that is not there (gRPC
// Unavailable) is ErrRPC — KVFABRIC_ERR_RPC, kvfabric.RPCError — not an
// internal error.
func TestMasterDownIsErrRPC(t *testing.T) {
	sm := startStallingMaster(t)
	s, err := client.Open(context.Background(), cfgFor(t, map[string]any{"master_server_addr": sm.addr}), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sm.stop(t)
	_, err = s.Exists(context.Background(), "k")
	if !errors.Is(err, client.ErrRPC) {
		t.Fatalf("Exists with the master down: %v; want ErrRPC", err)
	}
}

// TestRPCTimeoutOnlyRemote: a remote master's calls get rpc_timeout (the
// tests above say what it does); an embedded master's do not — it answers
// from this process and waits on no peer, so the deadline could not fire
// and its timer would cost every call (0.5 µs of a 4 µs single get,
// BenchmarkGetLatency/embedded on the dev VM).
func TestRPCTimeoutOnlyRemote(t *testing.T) {
	sm := startStallingMaster(t)
	for _, c := range []struct {
		addr string
		want bool
	}{{"embedded", false}, {sm.addr, true}} {
		s, err := client.Open(context.Background(), cfgFor(t, map[string]any{"master_server_addr": c.addr}), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := client.RPCDeadline(s); got != c.want {
			t.Errorf("master %s: calls with rpc_timeout %v, want %v", c.addr, got, c.want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
