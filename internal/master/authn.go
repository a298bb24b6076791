package master

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/kvfabric/kvfabric/internal/certs"
)

// Authentication of gRPC callers (DESIGN §9, "every caller is someone").
// A caller is identified by a client certificate verified against the
// master's client CA (mutual TLS: the principal is the certificate's
// subject common name, the admin role comes with organizational unit
// "admin") or by a bearer token from the master's tokens file. The standard
// gRPC TLS credentials do the cryptography; nothing here is home-made
// beyond comparing tokens in constant time.

// MinTokenLen bounds bearer tokens from below (bytes): guessing one must
// be out of reach.
const MinTokenLen = 32

type tokenEntry struct {
	token []byte
	p     Principal
}

// Authenticator finds the principal of a gRPC call.
type Authenticator struct {
	tokens []tokenEntry
	// Require: calls that carry neither a verified client certificate nor a
	// valid token are refused with Unauthenticated.
	Require bool
}

// ParseTokens reads a tokens file: one "<principal> <role> <token>" per
// line (role client or admin; token at least MinTokenLen bytes); empty
// lines and lines starting with # are skipped. Principals and tokens must
// be unique.
func ParseTokens(data []byte) ([]Principal, [][]byte, error) {
	var ps []Principal
	var ts [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, nil, fmt.Errorf("%w: tokens file line %d: want \"<principal> <role> <token>\"", ErrInvalid, n)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, nil, fmt.Errorf("tokens file line %d: %w", n, err)
		}
		if len(f[2]) < MinTokenLen {
			return nil, nil, fmt.Errorf("%w: tokens file line %d: token of %q is %d bytes, want at least %d", ErrInvalid, n, f[0], len(f[2]), MinTokenLen)
		}
		for i, p := range ps {
			if p.Name == f[0] || string(ts[i]) == f[2] {
				return nil, nil, fmt.Errorf("%w: tokens file line %d: principal %q or its token repeats an earlier line", ErrInvalid, n, f[0])
			}
		}
		ps = append(ps, Principal{Name: f[0], Role: role})
		ts = append(ts, []byte(f[2]))
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	return ps, ts, nil
}

// NewAuthenticator accepts the given principals' tokens (parallel slices,
// as ParseTokens returns) and verified client certificates.
func NewAuthenticator(ps []Principal, tokens [][]byte, require bool) *Authenticator {
	a := &Authenticator{Require: require}
	for i := range ps {
		a.tokens = append(a.tokens, tokenEntry{token: tokens[i], p: ps[i]})
	}
	return a
}

// principal authenticates the caller of gRPC call method (see
// authenticate) from its connection's TLS state and its "authorization"
// metadata.
func (a *Authenticator) principal(ctx context.Context, method string) (Principal, error) {
	var st *tls.ConnectionState
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
			st = &ti.State
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return a.authenticate(st, tok, true, method)
		}
	}
	return a.authenticate(st, "", false, method)
}

// identify finds a caller from its connection's TLS state (nil: plaintext)
// and the bearer token it presented (hasToken): a verified client
// certificate first, then the token. Neither gives the zero Principal. The
// gRPC server (per call) and the fast path (per connection) both decide
// here.
func (a *Authenticator) identify(st *tls.ConnectionState, token string, hasToken bool) (Principal, error) {
	if st != nil && len(st.VerifiedChains) > 0 && len(st.VerifiedChains[0]) > 0 {
		return certPrincipal(st.VerifiedChains[0][0])
	}
	if hasToken {
		return a.tokenPrincipal(token)
	}
	return Principal{}, nil
}

// authenticate is identify with a.Require applied: a caller without a
// principal is refused with ErrUnauthenticated naming what (the method, or
// the fast path connection). A nil Authenticator admits everyone
// anonymously.
func (a *Authenticator) authenticate(st *tls.ConnectionState, token string, hasToken bool, what string) (Principal, error) {
	if a == nil {
		return Principal{}, nil
	}
	p, err := a.identify(st, token, hasToken)
	if err != nil {
		return Principal{}, err
	}
	if p.Name == "" && a.Require {
		return Principal{}, fmt.Errorf("%w: %s needs a client certificate or a bearer token", ErrUnauthenticated, what)
	}
	return p, nil
}

func certPrincipal(c *x509.Certificate) (Principal, error) {
	name := c.Subject.CommonName
	if name == "" && len(c.DNSNames) > 0 {
		name = c.DNSNames[0]
	}
	if name == "" {
		return Principal{}, fmt.Errorf("%w: client certificate has no subject common name or DNS name", ErrUnauthenticated)
	}
	role := RoleClient
	if slices.Contains(c.Subject.OrganizationalUnit, certs.AdminOU) {
		role = RoleAdmin
	}
	return Principal{Name: name, Role: role}, nil
}

// ServerTLS is the master's TLS configuration from PEM files: its
// certificate and key, and optionally the CA whose client certificates it
// accepts (mutual TLS; a client without one may still authenticate with a
// token).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("master: TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pemData, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("master: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalid, file)
	}
	return pool, nil
}

// ClientSecurity is how a client reaches a master: TLS when CAFile is set
// (the master's certificate is verified against it), a client certificate
// when CertFile/KeyFile are set, a bearer token read from TokenFile.
type ClientSecurity struct {
	CAFile, CertFile, KeyFile string
	// ServerName overrides the name verified in the master's certificate
	// (default: the host of the address).
	ServerName string
	TokenFile  string
}

// Enabled reports whether any security option is set.
func (c ClientSecurity) Enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.TokenFile != ""
}

// DialOptions returns the gRPC options for c: TLS credentials and the
// token, or plaintext when nothing is set. A client certificate or a token
// without a CA is an error: they must not travel in the clear.
func (c ClientSecurity) DialOptions() ([]grpc.DialOption, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cfg, tok, err := c.tlsAndToken()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	return opts, nil
}

// tlsAndToken returns c's TLS configuration and token ("" when none).
func (c ClientSecurity) tlsAndToken() (*tls.Config, string, error) {
	if c.CAFile == "" {
		return nil, "", fmt.Errorf("%w: tls_ca_file is required with a client certificate or a token (they must not travel in plaintext)", ErrInvalid)
	}
	pool, err := loadPool(c.CAFile)
	if err != nil {
		return nil, "", err
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: c.ServerName, MinVersion: tls.VersionTLS13}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, "", fmt.Errorf("%w: tls_cert_file %q and tls_key_file %q must be set together", ErrInvalid, c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("master: client certificate %s / key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	var tok string
	if c.TokenFile != "" {
		data, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("master: token file: %w", err)
		}
		tok = strings.TrimSpace(string(data))
		if len(tok) < MinTokenLen {
			return nil, "", fmt.Errorf("%w: token in %s is %d bytes, want at least %d", ErrInvalid, c.TokenFile, len(tok), MinTokenLen)
		}
	}
	return cfg, tok, nil
}

// bearer sends a token with every call; only over TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// IsLoopback reports whether listen address addr (host:port) only accepts
// connections from this host.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
