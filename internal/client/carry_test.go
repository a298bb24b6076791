package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestGetsCarryReleases: with a remote master, back-to-back gets make no
// lease release calls — each get's GetReplicas carries the leases of the
// gets before it, and the master ends them. The master itself (not this
// Store, which would flush first) can then remove every key but the last
// one read; a plain Remove through the Store sends that last lease in one
// call. It fails if gets stop carrying, or the master does not end what
// they carry. With an embedded master gets carry nothing (a carry spares
// no round trip there): the releases wait for the releaser, and the
// remove's flush sends them all.
func TestGetsCarryReleases(t *testing.T) {
	for _, kind := range []string{"remote", "embedded"} {
		t.Run(kind, func(t *testing.T) {
			var rel *countReleases
			count := func(mc master.Client) master.Client { rel = &countReleases{Client: mc}; return rel }
			keys := []string{"a", "b", "c"}
			e := openCarry(t, carryOpts{embedded: kind == "embedded", wrap: count}, "carry-"+kind, keys...)
			ctx := context.Background()
			const n = 99 // the last get reads "c"
			for i := range n {
				e.get(t, keys[i%3])
			}
			if c := rel.calls.Load(); c != 0 {
				t.Fatalf("%d release calls after %d back-to-back gets, want 0 (carried or queued)", c, n)
			}
			if kind == "embedded" {
				if err := removeAtMaster(ctx, e.svc, "a"); !errors.Is(err, master.ErrHasLease) {
					t.Fatalf("embedded: the master's own plain remove of a key read: %v, want its leases held (queued, not carried)", err)
				}
				if err := e.s.Remove(ctx, "a", false); err != nil {
					t.Fatalf("plain remove through the Store: %v", err)
				}
				if c, ids := rel.calls.Load(), rel.ids.Load(); c != 1 || ids != n {
					t.Fatalf("embedded: after the remove's flush: %d calls with %d ids, want 1 with %d", c, ids, n)
				}
				if errs := e.s.BatchRemove(ctx, []string{"b", "c"}, false); errors.Join(errs...) != nil {
					t.Fatal(errors.Join(errs...))
				}
				e.close(t)
				return
			}
			// Remove the keys at the master as another client would.
			for _, k := range []string{"a", "b"} {
				if err := removeAtMaster(ctx, e.svc, k); err != nil {
					t.Fatalf("the master's own plain remove of %q, whose leases were carried: %v", k, err)
				}
			}
			if err := removeAtMaster(ctx, e.svc, "c"); !errors.Is(err, master.ErrHasLease) {
				t.Fatalf("the master's own plain remove of the key read last: %v, want its lease held", err)
			}
			if err := e.s.Remove(ctx, "c", false); err != nil {
				t.Fatalf("plain remove through the Store: %v", err)
			}
			if c, ids := rel.calls.Load(), rel.ids.Load(); c != 1 || ids != 1 {
				t.Fatalf("after the remove's flush: %d calls with %d ids, want 1 with 1", c, ids)
			}

			// A batch get's leases, more than a get carries, are left to the
			// releaser's own call: the next get does not carry them.
			batch := make([]string, client.CarryMax+1)
			dsts := make([][]client.Region, len(batch))
			for i := range batch {
				batch[i] = fmt.Sprintf("batch/%d", i)
				if err := e.s.Put(ctx, batch[i], e.r, 0, client.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				dsts[i] = e.r
			}
			if _, errs := e.s.BatchGet(ctx, batch, dsts, 0); errs != nil && errors.Join(errs...) != nil {
				t.Fatal(errors.Join(errs...))
			}
			if err := e.s.Put(ctx, "d", e.r, 0, client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			e.get(t, "d")
			if err := removeAtMaster(ctx, e.svc, batch[0]); !errors.Is(err, master.ErrHasLease) {
				t.Fatalf("a batch get's lease after the next get: %v, want it held (not carried)", err)
			}
			if errs := e.s.BatchRemove(ctx, append(batch, "d"), false); errors.Join(errs...) != nil {
				t.Fatalf("plain remove of the batch through the Store: %v", errors.Join(errs...))
			}
			if c, ids := rel.calls.Load(), rel.ids.Load(); c != 2 || ids != 1+int64(len(batch))+1 {
				t.Fatalf("after the batch remove's flush: %d calls with %d ids, want 2 with %d", c, ids, 1+len(batch)+1)
			}
			e.close(t)
		})
	}
}

// carryEnv is a Store (ClientID id) whose master is a Service over gRPC
// (grpcMaster; carryOpts.embedded: in the process, and the Store told so),
// with one 4 KiB device buffer (r) and keys put from it. Releases go only
// by carries and flushes (the release delay is an hour).
type carryEnv struct {
	svc *master.Service // nil with carryOpts.master
	// admin sees the master as another client would (the Service's
	// embedded Client, or carryOpts.admin).
	admin master.Client
	drv   *sim.Driver
	s     *client.Store
	buf   cuda.DevicePtr
	r     []client.Region
}

// carryOpts shape a carryEnv: the master's config (leases of an hour
// unless it says otherwise), an embedded master, a wrapper of the
// master's Client (nil: none) and the Store's configuration beside its
// EGM pool (e.g. rpc_timeout).
type carryOpts struct {
	cfg      master.Config
	embedded bool
	wrap     func(master.Client) master.Client
	store    map[string]any
	// master, if not nil, is the Store's master (cfg and embedded
	// unused) and admin another Client of it.
	master, admin master.Client
}

func openCarry(t *testing.T, o carryOpts, id string, keys ...string) *carryEnv {
	t.Helper()
	cfg, embedded, wrap := o.cfg, o.embedded, o.wrap
	if wrap == nil {
		wrap = func(mc master.Client) master.Client { return mc }
	}
	t.Cleanup(client.SetReleaseDelay(time.Hour))
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Hour
	}
	var svc *master.Service
	var mc master.Client
	admin := o.admin
	switch {
	case o.master != nil:
		mc = o.master
	case embedded:
		if svc, err = master.New(cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		mc = master.NewEmbedded(svc)
	default:
		svc, mc = grpcMaster(t, cfg)
	}
	if svc != nil {
		admin = master.NewEmbedded(svc)
	}
	ctx := context.Background()
	sc := egmProvider("16MiB")
	for k, v := range o.store {
		sc[k] = v
	}
	s, err := client.Open(ctx, cfgFor(t, sc), client.Options{Driver: drv, Master: wrap(mc), ClientID: id})
	if err != nil {
		t.Fatal(err)
	}
	if embedded {
		client.ForceEmbedded(s) // wrap hides the embedded Client
	}
	buf, err := drv.MemAlloc(s.Context(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	e := &carryEnv{svc: svc, admin: admin, drv: drv, s: s, buf: buf, r: client.Bytes(uintptr(buf), 4096)}
	for _, k := range keys {
		if err := s.Put(ctx, k, e.r, 0, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// get reads k into e's buffer.
func (e *carryEnv) get(t *testing.T, k string) {
	t.Helper()
	if _, err := e.s.Get(context.Background(), k, e.r, 0); err != nil {
		t.Fatalf("get %q: %v", k, err)
	}
}

// close frees e's buffer, closes its Store and checks that the master
// holds no object and the driver no resource.
func (e *carryEnv) close(t *testing.T) {
	t.Helper()
	if err := e.drv.MemFree(e.s.Context(), e.buf); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := e.admin.Stats(context.Background()); err != nil || st.Objects != 0 {
		t.Fatalf("after close: %+v %v", st, err)
	}
	simtest.AssertNoLeaks(t, e.drv)
}

// removeAtMaster removes the Store's key k (default namespace) at the
// master directly, as another client would: no flush of the Store's queued
// releases first. A leased key is not removed: ErrHasLease.
func removeAtMaster(ctx context.Context, m interface {
	RemoveAll(context.Context, master.Filter, bool) (int, error)
}, k string) error {
	n, err := m.RemoveAll(ctx, master.Filter{Pattern: "^" + k + "$"}, false)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: %d objects named %q removed", master.ErrHasLease, n, k)
	}
	return nil
}

// TestRemoveAfterGetWhileOthersCarry: a Store's plain Remove of a key it
// just read succeeds while its other goroutines' gets carry releases — the
// key's lease may be in flight on one of them, and the remove's flush waits
// for it. Run with -race. It fails if flush returns before a carry in
// flight has reached the master.
func TestRemoveAfterGetWhileOthersCarry(t *testing.T) {
	e := openCarry(t, carryOpts{}, "carry-remove")
	ctx, s, drv := context.Background(), e.s, e.drv
	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := drv.MemAlloc(s.Context(), 4096)
			if err != nil {
				errs <- err
				return
			}
			defer drv.MemFree(s.Context(), buf)
			r := client.Bytes(uintptr(buf), 4096)
			for i := range rounds {
				k := fmt.Sprintf("w%d/%d", w, i)
				if err := s.Put(ctx, k, r, 0, client.PutOptions{}); err != nil {
					errs <- err
					return
				}
				for range 3 {
					if _, err := s.Get(ctx, k, r, 0); err != nil {
						errs <- err
						return
					}
				}
				if err := s.Remove(ctx, k, false); err != nil {
					errs <- fmt.Errorf("plain remove of %q after its gets: %w", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.close(t)
}

// failingCarry fails the first GetReplicas that carries releases, before
// the master sees it, and counts the gets that carried.
type failingCarry struct {
	master.Client
	carries, failed atomic.Int64
}

func (m *failingCarry) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	if c := master.ReleasesFrom(ctx); c != nil && len(c.IDs) > 0 {
		m.carries.Add(1)
		if m.failed.CompareAndSwap(0, 1) {
			return nil, fmt.Errorf("%w: injected failure of a carrying get", master.ErrClosed)
		}
	}
	return m.Client.GetReplicas(ctx, keys)
}

// TestFailedCarryIsQueuedAgain: a get whose call fails while it carries
// releases leaves them queued (the next get carries them, with its own),
// and a failed call does not pause carrying as an ignored carry does. At
// the end no lease is left and no release call was needed. It fails if
// a failed carry's ids are dropped (the master's remove of that key would
// find its lease) or if a failure pauses carrying.
func TestFailedCarryIsQueuedAgain(t *testing.T) {
	var fail *failingCarry
	var rel *countReleases
	wrap := func(mc master.Client) master.Client {
		fail = &failingCarry{Client: mc}
		rel = &countReleases{Client: fail}
		return rel
	}
	e := openCarry(t, carryOpts{wrap: wrap}, "carry-fail", "a", "b", "c")
	ctx, s, svc := context.Background(), e.s, e.svc
	e.get(t, "a")                                      // its lease is queued
	if _, err := s.Get(ctx, "b", e.r, 0); err == nil { // carries a's lease; fails
		t.Fatal("the get whose carrying call failed succeeded")
	}
	e.get(t, "b") // carries a's lease again
	e.get(t, "c") // carries b's
	if c := fail.carries.Load(); c != 3 {
		t.Fatalf("%d gets carried releases, want 3 (a failure must not pause carrying)", c)
	}
	for _, k := range []string{"a", "b"} {
		if err := removeAtMaster(ctx, svc, k); err != nil {
			t.Fatalf("the master's own plain remove of %q after its lease was carried: %v", k, err)
		}
	}
	if err := s.Remove(ctx, "c", false); err != nil {
		t.Fatal(err)
	}
	if c, ids := rel.calls.Load(), rel.ids.Load(); c != 1 || ids != 1 {
		t.Fatalf("release calls: %d with %d ids, want 1 with 1 (c's, at the remove's flush)", c, ids)
	}
	e.close(t)
}

// pausedMaster stands for a master process stopped (SIGSTOP) while a get
// carries releases: armed, the next carrying GetReplicas blocks past its
// caller's deadline, and the request it "read" is served only when the
// test resumes the master (late): after the caller gave up, as a resumed
// process would.
type pausedMaster struct {
	master.Client
	armed atomic.Bool
	late  chan func() error
}

func (m *pausedMaster) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	if c := master.ReleasesFrom(ctx); c != nil && len(c.IDs) > 0 && m.armed.CompareAndSwap(true, false) {
		// What the master read: the caller owns c again once this returns.
		read := master.WithReleases(context.WithoutCancel(ctx), &master.ReleaseCarry{IDs: slices.Clone(c.IDs)})
		keys = slices.Clone(keys)
		<-ctx.Done()
		m.late <- func() error {
			_, err := m.Client.GetReplicas(read, keys)
			return err
		}
		return nil, ctx.Err()
	}
	return m.Client.GetReplicas(ctx, keys)
}

// TestCarryPastRPCTimeout: the master stops while a get carries a lease
// release, past the client's rpc_timeout. The get fails with ErrRPC and
// its carry is queued again: the next get carries it and the lease ends
// while the master's copy of the failed request still waits (another
// reader's lease on the same object holds until that reader releases
// it). When the master resumes it serves the stale request: the repeated
// release is ignored, and the lease it grants the timed-out get (whose
// caller is gone) holds that object until the lease TTL and no longer.
// It fails if a failed carry's release is lost (a stays leased after the
// other reader's release) or if the late lease outlives its TTL.
func TestCarryPastRPCTimeout(t *testing.T) {
	const ttl = 2 * time.Second
	paused := &pausedMaster{late: make(chan func() error, 1)}
	wrap := func(mc master.Client) master.Client { paused.Client = mc; return paused }
	e := openCarry(t, carryOpts{cfg: master.Config{LeaseTTL: ttl}, wrap: wrap, store: map[string]any{"rpc_timeout": "200ms"}},
		"carry-paused", "a", "b", "c")
	ctx := context.Background()
	other, err := e.svc.GetReplicas(ctx, []string{"a"}) // another reader's lease on a
	if err != nil || other[0].Err != nil {
		t.Fatal(err, other[0].Err)
	}
	e.get(t, "a") // its lease is queued
	paused.armed.Store(true)
	if _, err := e.s.Get(ctx, "b", e.r, 0); !errors.Is(err, client.ErrRPC) { // carries a's lease; the master stops
		t.Fatalf("get while the master is stopped: %v, want ErrRPC", err)
	}
	e.get(t, "c") // carries a's lease again
	if err := removeAtMaster(ctx, e.svc, "a"); !errors.Is(err, master.ErrHasLease) {
		t.Fatalf("plain remove of a while another reader holds its lease: %v, want ErrHasLease", err)
	}
	if err := e.svc.ReleaseLeases(ctx, []uint64{other[0].LeaseID}); err != nil {
		t.Fatal(err)
	}
	if err := removeAtMaster(ctx, e.svc, "a"); err != nil {
		t.Fatalf("plain remove of a after both readers released (the failed carry's release carried again): %v", err)
	}
	if err := (<-paused.late)(); err != nil { // the master resumes and serves the stale request
		t.Fatalf("the stopped master's late get: %v", err)
	}
	if err := removeAtMaster(ctx, e.svc, "b"); !errors.Is(err, master.ErrHasLease) {
		t.Fatalf("plain remove of b under the timed-out get's late lease: %v, want ErrHasLease until the TTL", err)
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for err := removeAtMaster(ctx, e.svc, "b"); err != nil; err = removeAtMaster(ctx, e.svc, "b") {
		if time.Now().After(deadline) {
			t.Fatalf("b still leased %v after the lease TTL: %v", ttl+10*time.Second, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.s.Remove(ctx, "c", false); err != nil {
		t.Fatalf("plain remove of c through the Store: %v", err)
	}
	e.close(t)
}

// TestCarryMasterProcessStopped: a real master process stopped with
// SIGSTOP past the Store's rpc_timeout while a get carries a lease release
// over the fast path, then continued. The get fails with ErrRPC; the
// master, once it runs again, refuses the stale request (its deadline has
// passed), so that request neither ends the carried lease nor grants a
// new one; the Store's next get carries the release again and ends it.
// Leases are an hour long: nothing here ends by expiry. It fails if a
// failed carry's ids are dropped, or if the master runs a request past
// its deadline.
func TestCarryMasterProcessStopped(t *testing.T) {
	addr, proc := masterProcess(t, envLatencyLeaseTTL+"=1h")
	ctx := context.Background()
	dial := func() master.Client {
		c, err := master.DialFast(ctx, addr, master.FastPath{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	mc, admin := dial(), dial()
	e := openCarry(t, carryOpts{master: mc, admin: admin, store: map[string]any{"rpc_timeout": "300ms"}},
		"carry-stopped", "a", "b", "c")
	other, err := admin.GetReplicas(ctx, []string{"a"}) // another reader's lease on a
	if err != nil || other[0].Err != nil {
		t.Fatal(err, other[0].Err)
	}
	e.get(t, "a") // its lease is queued

	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	cont := func() {
		if stopped {
			stopped = false
			if err := proc.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(cont)          // runs before the process's own cleanup closes its stdin
	waitStopped(t, proc.Pid) // the signal is asynchronous
	t0 := time.Now()
	if _, err := e.s.Get(ctx, "b", e.r, 0); !errors.Is(err, client.ErrRPC) { // carries a's lease
		t.Fatalf("get while the master process is stopped: %v, want ErrRPC", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the get failed after %v, rpc_timeout 300ms", d)
	}
	cont()

	if err := admin.ReleaseLeases(ctx, []uint64{other[0].LeaseID}); err != nil {
		t.Fatal(err)
	}
	if err := removeAtMaster(ctx, admin, "a"); !errors.Is(err, master.ErrHasLease) {
		t.Fatalf("plain remove of a, whose release was carried by the refused request: %v, want ErrHasLease", err)
	}
	if err := removeAtMaster(ctx, admin, "b"); err != nil {
		t.Fatalf("plain remove of b, read only by the refused request: %v", err)
	}
	e.get(t, "c") // carries a's lease again
	if err := removeAtMaster(ctx, admin, "a"); err != nil {
		t.Fatalf("plain remove of a after the next get carried its release: %v", err)
	}
	if err := e.s.Remove(ctx, "c", false); err != nil {
		t.Fatalf("plain remove of c through the Store: %v", err)
	}
	st, ok := master.Transports(mc)
	if !ok || st.Fast == 0 || st.Columns == 0 {
		t.Errorf("transports %+v (%v): want the fast path, answers by column", st, ok)
	}
	e.close(t)
}
