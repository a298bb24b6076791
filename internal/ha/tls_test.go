package ha_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvfabric/kvfabric/internal/certs"
	"github.com/kvfabric/kvfabric/internal/ha"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestEtcdTLS: etcd serves TLS with the master's own certificate and
// requires client certificates of the master's client CA (as `kvfabric
// master --embedded-etcd` with --tls-* does); the master reaches it with
// its own client certificate, and a client with the tls_* keys finds the
// leader there and talks to it over mutual TLS. Without a client
// certificate, or without TLS, etcd is out of reach.
func TestEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("kvfabric test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.Write(dir, "server"))
	for _, name := range []string{"master-etcd", "engine"} {
		p, err := ca.Client(name, false, time.Hour)
		must(err)
		must(p.Write(dir, name))
	}
	f := func(name string) string { return filepath.Join(dir, name) }

	ports := freePorts(t, 2)
	ep := fmt.Sprintf("127.0.0.1:%d", ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := ha.StartEtcd(ctx, ha.EtcdConfig{Dir: f("etcd"), ClientURL: "https://" + ep, PeerURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		CertFile: f("server.pem"), KeyFile: f("server-key.pem"), ClientCAFile: f("ca.pem"), TickMs: 50, ElectionMs: 500, UnsafeNoFsync: true})
	must(err)
	defer e.Close()

	// The master: etcd over TLS with its client certificate, gRPC over TLS
	// with its server certificate.
	tc, err := ha.EtcdTLS(f("ca.pem"), f("master-etcd.pem"), f("master-etcd-key.pem"))
	must(err)
	cli, err := ha.NewEtcdClient([]string{ep}, tc)
	must(err)
	defer cli.Close()
	stc, err := master.ServerTLS(f("server.pem"), f("server-key.pem"), f("ca.pem"))
	must(err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	m, err := ha.NewMaster(ha.MasterConfig{Etcd: cli, Prefix: prefix, Advertise: lis.Addr().String(), LeaseTTL: time.Second,
		Service: masterCfg, ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(stc))}})
	must(err)
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(mctx, lis, time.Second) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	addr := "etcd://" + ep + prefix
	c, err := ha.Dial(ctx, addr, ha.DialOptions{Security: master.ClientSecurity{CAFile: f("ca.pem"),
		CertFile: f("engine.pem"), KeyFile: f("engine-key.pem")}})
	must(err)
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Stats(sctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats over TLS: %v", err)
		}
	}
	if l := c.Leader(); l.Addr != lis.Addr().String() || l.Epoch == 0 || c.Epoch() != l.Epoch {
		t.Fatalf("leader %+v (epoch seen %d), want %s", l, c.Epoch(), lis.Addr())
	}
	// The serving master's fast path spin counters are among its metrics.
	mfs, err := m.Gatherer().Gather()
	must(err)
	spinMetric := false
	for _, mf := range mfs {
		spinMetric = spinMetric || mf.GetName() == "kvfabric_master_fast_spin_waits_total"
	}
	if !spinMetric {
		t.Error("kvfabric_master_fast_spin_waits_total is not among the HA master's metrics")
	}

	for name, sec := range map[string]master.ClientSecurity{
		"no client certificate": {CAFile: f("ca.pem")},
		"plaintext":             {},
	} {
		dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		c, err := ha.Dial(dctx, addr, ha.DialOptions{Security: sec})
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s: found the leader in etcd; want etcd out of reach", name)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("%s: %v", name, err)
		}
	}
}
