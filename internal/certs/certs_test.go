package certs

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func parse(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIssue: certificates chain to the CA with the right usages; the admin
// unit marks admins; files are written once and never overwritten.
func TestIssue(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	srv, err := ca.Server([]string{"master.rack", "10.0.0.5"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sc := parse(t, srv.CertPEM)
	if _, err := sc.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.0.5", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	for _, admin := range []bool{false, true} {
		p, err := ca.Client("eng", admin, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c := parse(t, p.CertPEM)
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("client certificate: %v", err)
		}
		if c.Subject.CommonName != "eng" || slices.Contains(c.Subject.OrganizationalUnit, AdminOU) != admin {
			t.Fatalf("subject %v, admin %v", c.Subject, admin)
		}
	}
	if _, err := ca.Server(nil, time.Hour); err == nil {
		t.Fatal("a server certificate without hosts")
	}
	if _, err := ca.Client("", false, time.Hour); err == nil {
		t.Fatal("a client certificate without a name")
	}
	dir := t.TempDir()
	if err := srv.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "server-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if err := srv.Write(dir, "server"); err == nil {
		t.Fatal("overwrote an existing certificate")
	}
}
