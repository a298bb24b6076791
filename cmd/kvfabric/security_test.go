package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/certs"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestMasterRefusesExposedPlaintext: on a non-loopback address the master
// refuses to serve without TLS and client authentication unless --insecure
// says so, and says why (issue 11, item 1).
func TestMasterRefusesExposedPlaintext(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server([]string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := srv.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	cert, key, caf := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	for _, tc := range []struct {
		name string
		o    masterOpts
		err  string // "" means it serves
		auth bool
	}{
		{"loopback plaintext", masterOpts{listen: "127.0.0.1:50051"}, "", false},
		{"exposed plaintext", masterOpts{listen: "0.0.0.0:50051"}, "refusing to serve plaintext", false},
		{"exposed plaintext, insecure", masterOpts{listen: "0.0.0.0:50051", insecure: true}, "", false},
		{"exposed TLS without client auth", masterOpts{listen: "0.0.0.0:50051", tlsCert: cert, tlsKey: key}, "without client authentication", false},
		{"exposed mutual TLS", masterOpts{listen: "0.0.0.0:50051", tlsCert: cert, tlsKey: key, clientCA: caf}, "", true},
		{"cert without key", masterOpts{listen: "127.0.0.1:1", tlsCert: cert}, "must be given together", false},
		{"client CA without TLS", masterOpts{listen: "127.0.0.1:1", clientCA: caf}, "plaintext", false},
		{"loopback, exposed fast path", masterOpts{listen: "127.0.0.1:50051", fastListen: "0.0.0.0:50052"}, "--fast-listen 0.0.0.0:50052 is not a loopback address: refusing to serve plaintext", false},
		{"loopback, exposed fast path, insecure", masterOpts{listen: "127.0.0.1:50051", fastListen: "0.0.0.0:50052", insecure: true}, "", false},
		{"loopback, exposed fast path with TLS without client auth", masterOpts{listen: "127.0.0.1:50051", fastListen: "0.0.0.0:0", tlsCert: cert, tlsKey: key}, "--fast-listen 0.0.0.0:0 is not a loopback address: refusing to serve without client authentication", false},
		{"exposed, fast path off", masterOpts{listen: "0.0.0.0:50051", fastListen: "off", tlsCert: cert, tlsKey: key, clientCA: caf}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg master.Config
			_, _, a, err := tc.o.security(&cfg)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("security() = %v, want error containing %q", err, tc.err)
			}
			if err == nil && (cfg.RequireAuth != tc.auth || a == nil || a.Require != tc.auth) {
				t.Fatalf("RequireAuth %v, authenticator %+v; want %v", cfg.RequireAuth, a, tc.auth)
			}
		})
	}
}

// TestMasterHTTPListenerRules: --metrics-listen (dashboard, status,
// metrics) follows --listen's rules: a non-loopback address needs TLS and
// client authentication or --insecure, and with TLS it serves HTTPS.
func TestMasterHTTPListenerRules(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ca.WriteCA(dir) != nil || srv.Write(dir, "server") != nil {
		t.Fatal("writing certificates")
	}
	cert, key, caf := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	for _, tc := range []struct {
		name string
		o    masterOpts
		err  string
		tls  bool
	}{
		{"none", masterOpts{}, "", false},
		{"loopback plaintext", masterOpts{metricsListen: "127.0.0.1:0"}, "", false},
		{"exposed plaintext", masterOpts{metricsListen: "0.0.0.0:0"}, "refusing to serve the dashboard", false},
		{"exposed plaintext, insecure", masterOpts{metricsListen: "0.0.0.0:0", insecure: true}, "", false},
		{"exposed TLS without client auth", masterOpts{metricsListen: "0.0.0.0:0", tlsCert: cert, tlsKey: key}, "refusing", false},
		{"exposed mutual TLS", masterOpts{metricsListen: "0.0.0.0:0", tlsCert: cert, tlsKey: key, clientCA: caf}, "", true},
		{"loopback TLS", masterOpts{metricsListen: "127.0.0.1:0", tlsCert: cert, tlsKey: key}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := tc.o.httpListener()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("httpListener() = %v, want error containing %q", err, tc.err)
			}
			if lis == nil {
				if err == nil && tc.o.metricsListen != "" {
					t.Fatal("no listener")
				}
				return
			}
			defer lis.Close()
			if got := fmt.Sprintf("%T", lis) != "*net.TCPListener"; got != tc.tls {
				t.Errorf("listener %T, want TLS %v", lis, tc.tls)
			}
		})
	}
}
