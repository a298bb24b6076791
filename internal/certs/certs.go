// Package certs makes a small certificate authority for kvfabric's mutual
// TLS: a CA, a server certificate for the master and client certificates
// whose subject common name is the client's principal (organizational unit
// "admin" for the admin role). It is for tests and first deployments
// (`kvfabric certs`); production sites use their own PKI. Only the standard
// library's crypto is used: ECDSA P-256 keys, SHA-256 signatures.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// AdminOU is the organizational unit that gives a client certificate the
// admin role.
const AdminOU = "admin"

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Pair is an issued certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"kvfabric"}}, validity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// Server issues a server certificate for hosts (DNS names or IP
// addresses).
func (ca *CA) Server(hosts []string, validity time.Duration) (Pair, error) {
	if len(hosts) == 0 {
		return Pair{}, errors.New("certs: a server certificate needs at least one host")
	}
	tmpl, err := template(pkix.Name{CommonName: hosts[0], Organization: []string{"kvfabric"}}, validity)
	if err != nil {
		return Pair{}, err
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return ca.issue(tmpl)
}

// Client issues a client certificate for principal name (the subject's
// common name); admin adds the AdminOU unit.
func (ca *CA) Client(name string, admin bool, validity time.Duration) (Pair, error) {
	if name == "" {
		return Pair{}, errors.New("certs: a client certificate needs a name")
	}
	subj := pkix.Name{CommonName: name, Organization: []string{"kvfabric"}}
	if admin {
		subj.OrganizationalUnit = []string{AdminOU}
	}
	tmpl, err := template(subj, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("certs: key: %w", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("certs: certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("certs: key for %q: %w", tmpl.Subject.CommonName, err)
	}
	return Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", kder)}, nil
}

func template(subj pkix.Name, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subj,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Write writes p as dir/name.pem and dir/name-key.pem (mode 0600 for the
// key), refusing to overwrite existing files.
func (p Pair) Write(dir, name string) error {
	if err := writeNew(filepath.Join(dir, name+".pem"), p.CertPEM, 0o644); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, name+"-key.pem"), p.KeyPEM, 0o600)
}

// WriteCA writes the CA certificate as dir/ca.pem (its key stays in
// memory: issue everything needed in one run).
func (ca *CA) WriteCA(dir string) error {
	return writeNew(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o644)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: close %s: %w", path, err)
	}
	return nil
}
