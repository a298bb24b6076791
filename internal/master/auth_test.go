package master

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvfabric/kvfabric/internal/certs"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// authEnv is a master behind mutual TLS and bearer tokens on loopback, with
// a CA and certificates in a temp dir.
type authEnv struct {
	t    *testing.T
	svc  *Service
	addr string
	dir  string
	ca   *certs.CA
	// fastPort is the master's fast path; with fast set, dial's clients
	// use it from the start.
	fastPort uint32
	fast     bool
	tc       *tls.Config // the master's
	srv      *Server
}

const (
	tokA     = "token-of-alice-0123456789abcdef0123456789"
	tokAdmin = "token-of-admin-0123456789abcdef0123456789"
)

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.NewCA("kvfabric test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server([]string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		admin bool
	}{{"prov", false}, {"cons", false}, {"mallory", false}, {"ops", true}} {
		p, err := ca.Client(c.name, c.admin, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Write(dir, c.name); err != nil {
			t.Fatal(err)
		}
	}
	// A second CA: its certificates must not be accepted.
	rogue, err := certs.NewCA("rogue", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := rogue.Client("prov", true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Write(dir, "rogue"); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"alice": tokA, "admin": tokAdmin} {
		if err := os.WriteFile(filepath.Join(dir, name+".token"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	cfg := testConfig()
	cfg.ReapInterval = -1
	cfg.RequireAuth = true
	cfg.Quotas = Quotas{Segments: 4, PendingPuts: 8}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := ServerTLS(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ps, toks, err := ParseTokens([]byte("# test tokens\nalice client " + tokA + "\nadmin admin " + tokAdmin + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewServerAuth(svc, nil, NewAuthenticator(ps, toks, true), grpc.Creds(credentialsTLS(tc)))
	t.Cleanup(func() { _ = svc.Close() }) // after the servers (cleanups run last first)
	fs := serveFast(t, s, tc)
	return &authEnv{t: t, svc: svc, addr: fs.addr, dir: dir, ca: ca, fastPort: portOf(t, fs.fastAddr), tc: tc, srv: s}
}

// dial connects with a client certificate (cert "" for none) and/or token
// file (tok "" for none).
func (a *authEnv) dial(cert, tok string) Client {
	a.t.Helper()
	sec := ClientSecurity{CAFile: filepath.Join(a.dir, "ca.pem"), ServerName: "localhost"}
	if cert != "" {
		sec.CertFile, sec.KeyFile = filepath.Join(a.dir, cert+".pem"), filepath.Join(a.dir, cert+"-key.pem")
	}
	if tok != "" {
		sec.TokenFile = filepath.Join(a.dir, tok+".token")
	}
	opts, err := sec.DialOptions()
	if err != nil {
		a.t.Fatal(err)
	}
	fp, err := sec.FastPath()
	if err != nil {
		a.t.Fatal(err)
	}
	fp.Off = !a.fast
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialFast(ctx, a.addr, fp, opts...)
	if err != nil {
		a.t.Fatalf("dial as %q/%q: %v", cert, tok, err)
	}
	if a.fast {
		if err := c.(*remote).fast.advertise(ctx, a.fastPort); err != nil {
			a.t.Fatal(err)
		}
	}
	a.t.Cleanup(func() {
		if st := c.(*remote).Transports(); a.fast && (st.GRPC != 0 || st.Fallback != 0) {
			a.t.Errorf("client %q/%q: transports %+v, want every hot call over the fast path", cert, tok, st)
		}
		_ = c.Close()
	})
	return c
}

// TestAuthRefusesAttacks tries each attack of issue 11 against a master
// that authenticates its callers: every one is refused with a clear error
// and the victims' data stays intact.
func TestAuthRefusesAttacks(t *testing.T) { overBoth(t, testAuthRefusesAttacks) }

func testAuthRefusesAttacks(t *testing.T, fast bool) {
	a := newAuthEnv(t)
	a.fast = fast
	ctx := context.Background()
	prov, cons, mal, ops := a.dial("prov", ""), a.dial("cons", ""), a.dial("mallory", ""), a.dial("ops", "")
	alice, admin := a.dial("", "alice"), a.dial("", "admin")

	if _, err := prov.RegisterClient(ctx, ClientInfo{ID: "p1", Node: "h", NUMANode: 0, Device: 0, Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	d := desc("p1/0", "p1", "h", segment.TierDRAM, 0, 64*MiB)
	if err := prov.MountSegment(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := cons.RegisterClient(ctx, ClientInfo{ID: "c1", Node: "h", NUMANode: -1, Device: -1, Incarnation: 2}); err != nil {
		t.Fatal(err)
	}
	put := func(c Client, writer, key string) PutStartResult {
		t.Helper()
		res, err := c.PutStart(ctx, []PutStartReq{{Key: key, Size: 4096, Placement: Placement{Client: writer, NUMANode: -1, Device: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	r := put(cons, "c1", "victim")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pending := put(cons, "c1", "pending")
	wantErr(t, "PutEnd", cons.PutEnd(ctx, []PutRef{{Key: "victim", Token: r.Token}})[0], nil)

	// Unauthenticated: plaintext, TLS without a certificate or token, a
	// certificate from another CA.
	plainCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := Dial(plainCtx, a.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		_, err := c.Stats(ctx)
		c.Close()
		if err == nil {
			t.Fatal("plaintext call succeeded on a TLS master")
		}
	}
	anon := a.dial("", "")
	_, err := anon.Stats(ctx)
	wantErr(t, "call without credentials", err, ErrUnauthenticated)
	_, err = anon.RemoveAll(ctx, Filter{}, true)
	wantErr(t, "RemoveAll without credentials", err, ErrUnauthenticated)
	sec := ClientSecurity{CAFile: filepath.Join(a.dir, "ca.pem"), ServerName: "localhost",
		CertFile: filepath.Join(a.dir, "rogue.pem"), KeyFile: filepath.Join(a.dir, "rogue-key.pem")}
	opts, err := sec.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if c, err := Dial(rctx, a.addr, opts...); err == nil {
		_, err := c.RemoveAll(ctx, Filter{}, true)
		c.Close()
		if err == nil {
			t.Fatal("a certificate of another CA was accepted")
		}
	}
	badTok := filepath.Join(a.dir, "bad.token")
	if err := os.WriteFile(badTok, []byte(strings.Repeat("x", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	sec = ClientSecurity{CAFile: filepath.Join(a.dir, "ca.pem"), ServerName: "localhost", TokenFile: badTok}
	if opts, err = sec.DialOptions(); err != nil {
		t.Fatal(err)
	}
	bad, err := Dial(ctx, a.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.Stats(ctx)
	wantErr(t, "unknown token", err, ErrUnauthenticated)

	// Authenticated but not the owner.
	_, err = mal.RegisterClient(ctx, ClientInfo{ID: "p1", Node: "evil", Incarnation: 9})
	wantErr(t, "RegisterClient with another principal's id", err, ErrPermission)
	_, err = mal.Heartbeat(ctx, "p1", Mapped{})
	wantErr(t, "Heartbeat of another principal", err, ErrPermission)
	wantErr(t, "Unregister another principal", mal.UnregisterClient(ctx, "p1"), ErrPermission)
	wantErr(t, "Unmount another principal's segment", mal.UnmountSegment(ctx, d.Key()), ErrPermission)
	if _, err := mal.RegisterClient(ctx, ClientInfo{ID: "m1", Node: "evil", Incarnation: 3}); err != nil {
		t.Fatal(err)
	}
	fake := desc("p1/evil", "p1", "evil", segment.TierDRAM, 0, 1<<40)
	wantErr(t, "Mount as another principal", mal.MountSegment(ctx, fake), ErrPermission)
	wantErr(t, "PutStart as another principal's client", put(mal, "c1", "x").Err, ErrPermission)
	wantErr(t, "PutEnd of another principal's put", mal.PutEnd(ctx, []PutRef{{Key: "pending", Token: pending.Token}})[0], ErrPermission)
	wantErr(t, "PutRevoke of another principal's put", mal.PutRevoke(ctx, []PutRef{{Key: "pending", Token: pending.Token}})[0], ErrPermission)
	wantErr(t, "ReportUnreachable as another principal", mal.ReportUnreachable(ctx, "c1", d.Key(), "x"), ErrPermission)
	_, err = mal.RemoveAll(ctx, Filter{}, true)
	wantErr(t, "RemoveAll(force) without admin", err, ErrPermission)
	_, err = alice.RemoveAll(ctx, Filter{}, true)
	wantErr(t, "RemoveAll(force) with a client token", err, ErrPermission)

	// Quotas: m1 may mount 4 segments and have 8 puts in progress.
	for i := range 4 {
		dm := desc("m1/"+string(rune('a'+i)), "m1", "evil", segment.TierDRAM, 0, MiB)
		dm.Generation += uint64(i)
		wantErr(t, "Mount within the quota", mal.MountSegment(ctx, dm), nil)
	}
	wantErr(t, "Mount past the segment quota", mal.MountSegment(ctx, desc("m1/z", "m1", "evil", segment.TierDRAM, 0, MiB)), ErrQuota)
	for i := range 8 {
		wantErr(t, "PutStart within the quota", put(mal, "m1", "m/"+string(rune('a'+i))).Err, nil)
	}
	wantErr(t, "PutStart past the pending-put quota", put(mal, "m1", "m/z").Err, ErrQuota)

	// The victims' data is intact and the owners still work.
	g, err := cons.GetReplicas(ctx, []string{"victim"})
	if err != nil || g[0].Err != nil || g[0].Replicas[0].Segment.ID != "p1/0" {
		t.Fatalf("victim after the attacks: %+v %v", g, err)
	}
	// Naming another principal's lease id ends nothing; its reader can.
	held := a.svc.rd.leasesHeld()
	wantErr(t, "ReleaseLeases of another principal's lease (ignored)", mal.ReleaseLeases(ctx, []uint64{g[0].LeaseID}), nil)
	if h := a.svc.rd.leasesHeld(); h != held {
		t.Fatalf("mallory's release of cons's lease: %d leases held, want %d", h, held)
	}
	// Nor does a carried release (a GetReplicas naming it, ReleaseCarry):
	// the master takes the carry, as ReleaseLeases ignores the id.
	c := &ReleaseCarry{IDs: []uint64{g[0].LeaseID}}
	if _, err := mal.GetReplicas(WithReleases(ctx, c), []string{"nope"}); err != nil || !c.Released {
		t.Fatalf("mallory's get carrying cons's lease: released %v, %v", c.Released, err)
	}
	if h := a.svc.rd.leasesHeld(); h != held {
		t.Fatalf("mallory's carried release of cons's lease: %d leases held, want %d", h, held)
	}
	wantErr(t, "ReleaseLeases by its reader", cons.ReleaseLeases(ctx, []uint64{g[0].LeaseID}), nil)
	if h := a.svc.rd.leasesHeld(); h != held-1 {
		t.Fatalf("cons's release of its lease: %d leases held, want %d", h, held-1)
	}
	if _, err := prov.Heartbeat(ctx, "p1", Mapped{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "owner ends its put", cons.PutEnd(ctx, []PutRef{{Key: "pending", Token: pending.Token}})[0], nil)
	// Admins may do what clients may not.
	if _, err := ops.RemoveAll(ctx, Filter{}, true); err != nil {
		t.Fatalf("admin certificate RemoveAll(force): %v", err)
	}
	if _, err := admin.Stats(ctx); err != nil {
		t.Fatalf("admin token: %v", err)
	}
	if _, err := alice.Stats(ctx); err != nil {
		t.Fatalf("client token: %v", err)
	}
}

// TestDuplicateClientIDRefused: a second process registering an id that a
// live process holds is refused — even without authentication — instead of
// wiping the first one's segments; the same process retrying is fine, and
// once the first expires the id is free (issue 11, item 2).
func TestDuplicateClientIDRefused(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		first := ClientInfo{ID: "prov", Node: "h1", TTL: 10 * time.Second, NUMANode: -1, Device: -1, Incarnation: 11}
		if _, err := e.c.RegisterClient(e.ctx, first); err != nil {
			t.Fatal(err)
		}
		e.mount(desc("prov/0", "prov", "h1", segment.TierDRAM, 0, MiB))
		second := first
		second.Node, second.Incarnation = "h2", 22
		_, err := e.c.RegisterClient(e.ctx, second)
		wantErr(t, "RegisterClient of a live id by another process", err, ErrAlreadyExists)
		if err == nil || !strings.Contains(err.Error(), "h1") {
			t.Fatalf("error should name the live process's node: %v", err)
		}
		if segs, _ := e.c.ListSegments(e.ctx); len(segs) != 1 {
			t.Fatalf("first process's segments after the refused registration: %d", len(segs))
		}
		if _, err := e.c.RegisterClient(e.ctx, first); err != nil {
			t.Fatalf("the same incarnation retrying: %v", err)
		}
		if segs, _ := e.c.ListSegments(e.ctx); len(segs) != 1 {
			t.Fatal("a retried registration dropped the segments")
		}
		e.clk.Advance(11 * time.Second)
		if _, err := e.c.RegisterClient(e.ctx, second); err != nil {
			t.Fatalf("after the first expired: %v", err)
		}
		// A client that closes cleanly ends its registration: its segments
		// go and the id is free at once.
		wantErr(t, "UnregisterClient", e.c.UnregisterClient(e.ctx, "prov"), nil)
		wantErr(t, "UnregisterClient again", e.c.UnregisterClient(e.ctx, "prov"), ErrUnknownClient)
		third := first
		third.Incarnation = 33
		if _, err := e.c.RegisterClient(e.ctx, third); err != nil {
			t.Fatalf("after the other unregistered: %v", err)
		}
	})
}

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"a client " + tokA + "\n# c\n\nb admin " + tokAdmin, ""},
		{"a client short", "at least"},
		{"a root " + tokA, "role"},
		{"a client " + tokA + " extra", "want"},
		{"a client " + tokA + "\na admin " + tokAdmin, "repeats"},
		{"a client " + tokA + "\nb admin " + tokA, "repeats"},
	} {
		_, _, err := ParseTokens([]byte(tc.in))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid)) {
			t.Errorf("ParseTokens(%q) = %v, want error containing %q", tc.in, err, tc.err)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "[::1]:1": true, "localhost:5": true,
		"0.0.0.0:50051": false, ":50051": false, "10.0.0.1:1": false, "bad": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func credentialsTLS(c *tls.Config) credentials.TransportCredentials { return credentials.NewTLS(c) }
