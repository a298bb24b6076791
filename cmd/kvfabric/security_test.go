package main

import (
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg master.Config
			_, a, err := tc.o.security(&cfg)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("security() = %v, want error containing %q", err, tc.err)
			}
			if err == nil && (cfg.RequireAuth != tc.auth || a == nil || a.Require != tc.auth) {
				t.Fatalf("RequireAuth %v, authenticator %+v; want %v", cfg.RequireAuth, a, tc.auth)
			}
		})
	}
}
