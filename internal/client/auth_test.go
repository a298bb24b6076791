package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvfabric/kvfabric/internal/certs"
	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestStoreOverMutualTLS: a provider and a consumer reach a master that
// requires client certificates through the tls_* configuration keys; a
// client without a certificate is refused at Open with a clear error.
func TestStoreOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	srvPair, err := ca.Server([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := srvPair.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"prov", "cons"} {
		p, err := ca.Client(n, false, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Write(dir, n); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := master.New(master.Config{RequireAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := master.ServerTLS(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServerAuth(svc, nil, master.NewAuthenticator(nil, nil, true), grpc.Creds(credentials.NewTLS(tc)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		_ = svc.Close()
	}()

	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sock := t.TempDir()
	conf := func(name string, extra map[string]any) map[string]any {
		m := map[string]any{"master_server_addr": lis.Addr().String(), "socket_dir": sock,
			"tls_ca_file": filepath.Join(dir, "ca.pem")}
		if name != "" {
			m["tls_cert_file"], m["tls_key_file"] = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = client.Open(octx, cfgFor(t, conf("", nil)), client.Options{Driver: drv, ClientID: "nobody"})
	cancel()
	if !errors.Is(err, client.ErrPermission) || !errors.Is(err, master.ErrUnauthenticated) {
		t.Fatalf("Open without a client certificate: %v; want ErrPermission wrapping ErrUnauthenticated", err)
	}
	prov, err := client.Open(ctx, cfgFor(t, conf("prov", egmProvider("16MiB"))), client.Options{Driver: drv, ClientID: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := client.Open(ctx, cfgFor(t, conf("cons", nil)), client.Options{Driver: drv, ClientID: "cons"})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("tls"), 1000)
	if err := cons.PutBytes(ctx, "k", want, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cons.GetBytes(ctx, "k"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get over mutual TLS: %d bytes, %v", len(got), err)
	}
	// The consumer is not an admin: it cannot wipe everything.
	if _, err := cons.RemoveAll(ctx, true); !errors.Is(err, client.ErrPermission) || !errors.Is(err, master.ErrPermission) {
		t.Fatalf("RemoveAll(force) by a client: %v, want ErrPermission", err)
	}
	if err := cons.Remove(ctx, "k", false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*client.Store{cons, prov} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	simtest.AssertNoLeaks(t, drv)
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
}
