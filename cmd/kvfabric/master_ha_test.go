//go:build !kvfabric_noembed

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMasterEmbeddedEtcd: `kvfabric master --embedded-etcd DIR` is a
// one-command HA setup: it runs etcd, leads the first term (no put fence:
// no term before it) and clients find it through etcd://; a second master
// on the same etcd stands by and names the leader.
func TestMasterEmbeddedEtcd(t *testing.T) {
	etcdPort := freePort(t)
	o := masterOpts{listen: "127.0.0.1:0", shutdownTimeout: time.Second, cfg: master.Config{LeaseTTL: time.Second, PutTimeout: time.Second},
		ha: haOpts{embeddedDir: filepath.Join(t.TempDir(), "etcd"), embeddedClientURL: fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
			embeddedPeerURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), prefix: "/kvfabric/t", leaseTTL: 2 * time.Second}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runMaster(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr := fmt.Sprintf("etcd://127.0.0.1:%d/kvfabric/t", etcdPort)
	var c *ha.Client
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		var err error
		c, err = ha.Dial(dctx, addr, ha.DialOptions{})
		dcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", addr, err)
		}
	}
	defer c.Close()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := c.RegisterClient(cctx, master.ClientInfo{ID: "w", Node: "n", NUMANode: -1, Device: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stats(cctx); err != nil {
		t.Fatal(err)
	}

	// A second master on the same etcd: a standby that names the leader.
	o2 := masterOpts{listen: "127.0.0.1:0", shutdownTimeout: time.Second,
		ha: haOpts{endpoints: fmt.Sprintf("127.0.0.1:%d", etcdPort), prefix: "/kvfabric/t", leaseTTL: 2 * time.Second}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o2.ha.advertise = lis.Addr().String()
	o2.listen = lis.Addr().String()
	lis.Close()
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- runMaster(ctx2, o2) }()
	defer func() {
		cancel2()
		if err := <-done2; err != nil {
			t.Error(err)
		}
	}()
	standby, err := master.DialTerm(o2.listen, &master.Epochs{})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := standby.Stats(cctx)
		var nl *master.NotLeaderError
		if errors.As(err, &nl) && nl.Leader == c.Leader().Addr && nl.Epoch == c.Leader().Epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby answers %v; want not leader naming %+v", err, c.Leader())
		}
	}
}

// TestMasterHAFlags: bad HA flag combinations are refused before anything
// starts.
func TestMasterHAFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    masterOpts
		err  string
	}{
		{"both etcds", masterOpts{ha: haOpts{endpoints: "127.0.0.1:2379", embeddedDir: "x", prefix: "/p"}}, "exclude each other"},
		{"bad prefix", masterOpts{ha: haOpts{endpoints: "127.0.0.1:2379", prefix: "p/"}}, "--etcd-prefix"},
		{"plaintext to a remote etcd", masterOpts{ha: haOpts{endpoints: "10.1.2.3:2379", prefix: "/p"}}, "refusing to talk to etcd in plaintext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runMasterHA(context.Background(), tc.o, master.Config{}, nil, nil, nil, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%v, want an error containing %q", err, tc.err)
			}
		})
	}
}
