package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// Environment of the provider child of TestProviderSIGTERMMasterDown.
const (
	envProvMaster  = "KVFABRIC_TEST_PROV_MASTER"
	envProvSockets = "KVFABRIC_TEST_PROV_SOCKETS"
	envProvReady   = "KVFABRIC_TEST_PROV_READY"
	envProvClose   = "KVFABRIC_TEST_PROV_CLOSE_TIMEOUT"
)

// providerChild is `kvfabric provider` in a child process: it runs until
// SIGTERM and reports how runProvider ended.
func providerChild(t *testing.T) {
	cfg, err := config.FromMap(map[string]any{
		"driver": "sim", "master_server_addr": os.Getenv(envProvMaster), "socket_dir": os.Getenv(envProvSockets),
		"global_segment_size": "24MiB", "enable_egm_store_pool": true, "max_mr_size": "8MiB",
	})
	if err != nil {
		t.Fatal(err)
	}
	closeTimeout, err := time.ParseDuration(os.Getenv(envProvClose))
	if err != nil {
		t.Fatal(err)
	}
	err = runProvider(context.Background(), os.Stdout, cfg, providerOptions{
		clientID: "prov", readyFile: os.Getenv(envProvReady), closeTimeout: closeTimeout,
	})
	simtest.Send(fmt.Sprintf("exit %v", err))
}

// serveMaster serves svc over gRPC on addr ("127.0.0.1:0" for any port)
// and returns the address and a hard stop (the master process is gone).
func serveMaster(t *testing.T, svc *master.Service, addr string) (string, func()) {
	t.Helper()
	var lis net.Listener
	var err error
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = srv.Shutdown(ctx) // cuts what is in flight: the master is gone
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// TestProviderSIGTERMMasterDown: `kvfabric provider` receiving SIGTERM
// while its master is down keeps retrying its teardown up to its close
// timeout instead of exiting at once. When the master is back in time the
// segments are unmounted cleanly; when it is not, the provider releases its
// memory anyway and exits. Either way its socket is removed and no driver
// object is left.
func TestProviderSIGTERMMasterDown(t *testing.T) {
	if simtest.Role() == "provider" {
		providerChild(t)
		return
	}
	for _, tc := range []struct {
		name         string
		back         time.Duration // when the master serves again; 0: never
		closeTimeout time.Duration
	}{
		{"master back", 1500 * time.Millisecond, 20 * time.Second},
		{"master gone", 0, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := master.New(master.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			addr, stop := serveMaster(t, svc, "127.0.0.1:0")
			sockets, ready := t.TempDir(), filepath.Join(t.TempDir(), "ready")
			child := simtest.Spawn(t, t.Name(), "provider", simtest.Options{
				Config: &sim.Config{},
				Env: []string{envProvMaster + "=" + addr, envProvSockets + "=" + sockets, envProvReady + "=" + ready,
					envProvClose + "=" + tc.closeTimeout.String()},
				Timeout: time.Minute,
			})
			for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("provider not ready in 30s:\n%s", child.Output())
				}
			}
			sock := filepath.Join(sockets, "kvfabric-prov.sock")
			if _, err := os.Stat(sock); err != nil {
				t.Fatalf("provider socket: %v", err)
			}
			segs, err := svc.ListSegments(context.Background())
			if err != nil || len(segs) != 3 {
				t.Fatalf("mounted: %d segments, %v; want 3", len(segs), err)
			}

			stop()
			start := time.Now()
			if err := syscall.Kill(child.Pid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.back > 0 {
				time.Sleep(tc.back)
				serveMaster(t, svc, addr)
			}
			msg := child.Recv()
			took := time.Since(start)
			child.Wait()
			out := child.Output()
			if msg != "exit <nil>" {
				t.Fatalf("provider ended with %q after %v:\n%s", msg, took, out)
			}
			if !strings.Contains(out, "live driver objects after teardown: none") {
				t.Fatalf("provider left driver objects:\n%s", out)
			}
			if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("socket after exit: %v; want it removed", err)
			}
			segs, err = svc.ListSegments(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.back > 0 {
				if took < tc.back || len(segs) != 0 {
					t.Fatalf("exited after %v with %d segments mounted; want it to wait for the master (back after %v) and unmount all",
						took, len(segs), tc.back)
				}
				return
			}
			if took < tc.closeTimeout || took > tc.closeTimeout+5*time.Second {
				t.Fatalf("exited after %v; want the close timeout %v", took, tc.closeTimeout)
			}
			if len(segs) != 3 || !strings.Contains(out, "unmounts abandoned") {
				t.Fatalf("%d segments at the master, output:\n%s\nwant 3, left to expire with the registration, and said so", len(segs), out)
			}
		})
	}
}
