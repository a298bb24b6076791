package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// manualClock is a Clock tests move by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is a Service with a manual clock and no background reaper, reached
// through one Client.
type env struct {
	t   testing.TB
	svc *Service
	c   Client
	clk *manualClock
	ctx context.Context
	// writer is the client putStart writes as when a test names none
	// (registered on first use).
	writer string
}

// transports are the Client implementations every behaviour test runs
// against; grpc_test.go adds the remote one.
var transports = map[string]func(testing.TB, *Service) Client{
	"embedded": func(_ testing.TB, s *Service) Client { return NewEmbedded(s) },
}

func testConfig() Config {
	return Config{
		LeaseTTL:     5 * time.Second,
		PutTimeout:   30 * time.Second,
		ClientTTL:    time.Hour, // TestClientDeath asks for a short one
		MaxClientTTL: 2 * time.Hour,
		ReapInterval: -1,
	}
}

// forEachTransport runs fn once per Client implementation, each with a
// fresh Service built from cfg (with a manual clock).
func forEachTransport(t *testing.T, cfg Config, fn func(t *testing.T, e *env)) {
	for _, name := range []string{"embedded", "grpc", "fast"} {
		mk, ok := transports[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			fn(t, newEnvWith(t, cfg, mk))
		})
	}
}

func newEnvWith(t testing.TB, cfg Config, mk func(testing.TB, *Service) Client) *env {
	clk := newManualClock()
	cfg.Clock = clk
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	c := mk(t, svc)
	t.Cleanup(func() { _ = c.Close() })
	return &env{t: t, svc: svc, c: c, clk: clk, ctx: context.Background()}
}

func (e *env) register(id, node string, numa, dev int32) string {
	e.t.Helper()
	reg, err := e.c.RegisterClient(e.ctx, ClientInfo{ID: id, Node: node, NUMANode: numa, Device: dev})
	if err != nil {
		e.t.Fatalf("RegisterClient(%q): %v", id, err)
	}
	return reg.ID
}

func (e *env) registerTTL(id string, ttl time.Duration) string {
	e.t.Helper()
	reg, err := e.c.RegisterClient(e.ctx, ClientInfo{ID: id, Node: "host-" + id, NUMANode: 0, Device: 0, TTL: ttl})
	if err != nil || reg.TTL != ttl {
		e.t.Fatalf("RegisterClient(%q) = %+v, %v", id, reg, err)
	}
	return reg.ID
}

// desc is a segment with a fabric handle: every client of the default
// fabric domain reaches it, wherever its node, so the tests built on it are
// about placement and state, not reachability (reach_test.go is).
func desc(id, owner, node string, tier segment.Tier, loc int32, size uint64) segment.Descriptor {
	d := segment.Descriptor{ID: id, Generation: 0x9f00 + uint64(len(id))*7 + uint64(loc), Node: node, Owner: owner,
		Tier: tier, Location: loc, Size: size, Handle: segment.Handle{Kind: segment.HandleFabric}}
	d.Handle.Fabric[0] = byte(len(id))
	return d
}

func (e *env) mount(d segment.Descriptor) segment.Descriptor {
	e.t.Helper()
	if err := e.c.MountSegment(e.ctx, d); err != nil {
		e.t.Fatalf("MountSegment(%s): %v", d.ID, err)
	}
	return d
}

// put does PutStart + PutEnd for one key.
func (e *env) put(key string, size uint64, opts ...func(*PutStartReq)) PutStartResult {
	e.t.Helper()
	r := e.putStart(key, size, opts...)
	if r.Err != nil {
		e.t.Fatalf("PutStart(%q): %v", key, r.Err)
	}
	if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: key, Token: r.Token}}); errs[0] != nil {
		e.t.Fatalf("PutEnd(%q): %v", key, errs[0])
	}
	return r
}

// putBatch starts the puts reqs through c, fails tb on any error, ends
// them, and returns their refs (appended to refs[:0], reused).
func putBatch(tb testing.TB, ctx context.Context, c Client, reqs []PutStartReq, refs []PutRef) []PutRef {
	tb.Helper()
	refs = startRefs(tb, ctx, c, reqs, refs)
	endRefs(tb, ctx, c, refs)
	return refs
}

// startRefs starts the puts reqs through c, fails tb on any error, and
// returns their refs (appended to refs[:0]).
func startRefs(tb testing.TB, ctx context.Context, c Client, reqs []PutStartReq, refs []PutRef) []PutRef {
	tb.Helper()
	res, err := c.PutStart(ctx, reqs)
	if err != nil {
		tb.Fatal(err)
	}
	refs = refs[:0]
	for i, r := range res {
		if r.Err != nil {
			tb.Fatal(r.Err)
		}
		refs = append(refs, r.Ref(reqs[i].Key))
	}
	return refs
}

// endRefs ends the puts refs through c and fails tb on any error.
func endRefs(tb testing.TB, ctx context.Context, c Client, refs []PutRef) {
	tb.Helper()
	for _, err := range c.PutEnd(ctx, refs) {
		if err != nil {
			tb.Fatal(err)
		}
	}
}

func (e *env) putStart(key string, size uint64, opts ...func(*PutStartReq)) PutStartResult {
	e.t.Helper()
	req := PutStartReq{Key: key, Size: size, Placement: NoPlacement}
	for _, o := range opts {
		o(&req)
	}
	if req.Placement.Client == "" {
		req.Placement.Client = e.defaultWriter()
	}
	res, err := e.c.PutStart(e.ctx, []PutStartReq{req})
	if err != nil {
		e.t.Fatalf("PutStart(%q): %v", key, err)
	}
	return res[0]
}

// defaultWriter registers (once) and returns the client puts are made as
// when a test names no writer.
func (e *env) defaultWriter() string {
	e.t.Helper()
	if e.writer == "" {
		e.writer = e.register("writer", "host-writer", -1, -1)
	}
	return e.writer
}

func (e *env) get(key string) GetResult {
	e.t.Helper()
	res, err := e.c.GetReplicas(e.ctx, []string{key})
	if err != nil {
		e.t.Fatalf("GetReplicas(%q): %v", key, err)
	}
	return res[0]
}

func (e *env) exists(key string) bool {
	e.t.Helper()
	res, err := e.c.Exists(e.ctx, []string{key}, false)
	if err != nil {
		e.t.Fatalf("Exists(%q): %v", key, err)
	}
	return res[0]
}

func (e *env) stats() Stats {
	e.t.Helper()
	st, err := e.c.Stats(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) tierUsed(t segment.Tier) uint64 {
	for _, u := range e.stats().Tiers {
		if u.Tier == t {
			return u.Used
		}
	}
	return 0
}

func wantErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func withReplicas(n int) func(*PutStartReq) { return func(r *PutStartReq) { r.Replicas = n } }
func withTier(t segment.Tier, only bool) func(*PutStartReq) {
	return func(r *PutStartReq) { r.Placement.Tier, r.Placement.TierOnly = t, only }
}
func withClient(id string) func(*PutStartReq) {
	return func(r *PutStartReq) { r.Placement.Client = id }
}
func withPin() func(*PutStartReq) { return func(r *PutStartReq) { r.Pin = true } }

func keyN(i int) string { return fmt.Sprintf("k%06d", i) }
