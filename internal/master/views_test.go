package master

import (
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// hold calls HoldLeases and fails the test on a whole-call error.
func hold(t *testing.T, e *env, req HoldReq) HoldResult {
	t.Helper()
	res, err := e.c.HoldLeases(e.ctx, req)
	if err != nil {
		t.Fatalf("HoldLeases(%+v): %v", req, err)
	}
	if len(res.Errs) != len(req.Hold)+len(req.Renew) {
		t.Fatalf("HoldLeases: %d results for %d ids", len(res.Errs), len(req.Hold)+len(req.Renew))
	}
	return res
}

func viewsOf(t *testing.T, e *env, client string) (total, own int) {
	t.Helper()
	st := e.stats()
	for _, c := range st.PerClient {
		if c.ID == client {
			own = c.Views
		}
	}
	return st.Views, own
}

// TestHoldLeases: a read lease held as a view lasts as long as its holder
// renews it — blocking eviction, plain removal and the reuse of its range
// past the lease TTL — and ends at release or one TTL after the last
// renewal; a draining segment's views are not renewed, so it drains; the
// master counts views per client (issue 15, item 1).
func TestHoldLeases(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		c := e.register("viewer", "host-v", 0, 0)
		d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("k", 4096)

		g := e.get("k")
		res := hold(t, e, HoldReq{Client: c, Hold: []uint64{g.LeaseID}})
		wantErr(t, "hold", res.Errs[0], nil)
		if res.TTL != 5*time.Second {
			t.Fatalf("TTL %v, want the lease TTL 5s", res.TTL)
		}
		if total, own := viewsOf(t, e, c); total != 1 || own != 1 {
			t.Fatalf("views %d (viewer %d), want 1 (1)", total, own)
		}
		// Renewed every 4 s, the lease outlives its TTL many times over.
		for range 4 {
			e.clk.Advance(4 * time.Second)
			e.svc.Reap()
			wantErr(t, "renew", hold(t, e, HoldReq{Client: c, Renew: []uint64{g.LeaseID}}).Errs[0], nil)
		}
		wantErr(t, "plain Remove of a viewed object", e.c.Remove(e.ctx, []string{"k"}, false)[0], ErrHasLease)
		wantErr(t, "force Remove of a viewed object", e.c.Remove(e.ctx, []string{"k"}, true)[0], nil)
		e.clk.Advance(4 * time.Second)
		e.svc.Reap()
		if u := e.tierUsed(segment.TierDRAM); u != 4096 {
			t.Fatalf("used %d: the viewed range was freed while the view is held", u)
		}
		wantErr(t, "renew of a removed (zombie) object", hold(t, e, HoldReq{Client: c, Renew: []uint64{g.LeaseID}}).Errs[0], nil)
		// Release: the view and its lease end; the zombie is freed at once.
		hold(t, e, HoldReq{Client: c, Release: []uint64{g.LeaseID}})
		if u := e.tierUsed(segment.TierDRAM); u != 0 {
			t.Fatalf("used %d after the view's release, want 0", u)
		}
		if total, own := viewsOf(t, e, c); total != 0 || own != 0 {
			t.Fatalf("views %d (viewer %d) after release, want 0", total, own)
		}
		wantErr(t, "renew after release", hold(t, e, HoldReq{Client: c, Renew: []uint64{g.LeaseID}}).Errs[0], ErrNotFound)

		// A holder that stops renewing: its lease ends one TTL after the
		// last renewal and cannot be renewed after that, even before Reap.
		e.put("j", 4096)
		gj := e.get("j")
		hold(t, e, HoldReq{Client: c, Hold: []uint64{gj.LeaseID}})
		e.clk.Advance(6 * time.Second)
		wantErr(t, "renew after expiry (not reaped yet)", hold(t, e, HoldReq{Client: c, Renew: []uint64{gj.LeaseID}}).Errs[0], ErrNotFound)
		e.svc.Reap()
		if total, _ := viewsOf(t, e, c); total != 0 {
			t.Fatalf("views %d after the lease lapsed, want 0", total)
		}
		wantErr(t, "plain Remove after the lapse", e.c.Remove(e.ctx, []string{"j"}, false)[0], nil)

		// Two views of one object by one client: counted twice, ended one
		// by one.
		e.put("m", 4096)
		a, b := e.get("m"), e.get("m")
		res = hold(t, e, HoldReq{Client: c, Hold: []uint64{a.LeaseID, b.LeaseID, 777}})
		wantErr(t, "hold a", res.Errs[0], nil)
		wantErr(t, "hold b", res.Errs[1], nil)
		wantErr(t, "hold of an unknown lease", res.Errs[2], ErrNotFound)
		if total, _ := viewsOf(t, e, c); total != 2 {
			t.Fatalf("views %d, want 2", total)
		}
		hold(t, e, HoldReq{Client: c, Release: []uint64{a.LeaseID}})
		if total, _ := viewsOf(t, e, c); total != 1 {
			t.Fatalf("views %d after one release, want 1", total)
		}
		wantErr(t, "plain Remove with one view left", e.c.Remove(e.ctx, []string{"m"}, false)[0], ErrHasLease)

		// The segment drains: the view is not renewed, so the unmount
		// succeeds one TTL later.
		wantErr(t, "unmount with a view held", e.c.UnmountSegment(e.ctx, d.Key()), ErrHasLease)
		wantErr(t, "renew on a draining segment", hold(t, e, HoldReq{Client: c, Renew: []uint64{b.LeaseID}}).Errs[0], ErrWrongState)
		e.clk.Advance(6 * time.Second)
		e.svc.Reap()
		wantErr(t, "unmount after the view lapsed", e.c.UnmountSegment(e.ctx, d.Key()), nil)

		// Bad input and other clients.
		_, err := e.c.HoldLeases(e.ctx, HoldReq{Client: ""})
		wantErr(t, "empty client id", err, ErrInvalid)
		_, err = e.c.HoldLeases(e.ctx, HoldReq{Client: "ghost", Renew: []uint64{1}})
		wantErr(t, "unregistered client", err, ErrUnknownClient)
	})
}

// TestViewsBlockEviction: an object held as a view survives eviction for
// as long as its view is renewed — past many lease TTLs, with the store
// full and everything else evicted — and is evictable once the renewals
// stop (issue 15, item 1).
func TestViewsBlockEviction(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		c := e.register("viewer", "host-v", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.put("viewed", MiB)
		g := e.get("viewed")
		wantErr(t, "hold", hold(t, e, HoldReq{Client: c, Hold: []uint64{g.LeaseID}}).Errs[0], nil)
		for i := range 12 { // 4 TTLs of puts into a full store
			e.clk.Advance(2 * time.Second)
			wantErr(t, "renew", hold(t, e, HoldReq{Client: c, Renew: []uint64{g.LeaseID}}).Errs[0], nil)
			e.svc.Reap()
			e.put(keyN(i), MiB) // fails the test unless eviction made room
			if !e.exists("viewed") {
				t.Fatalf("round %d: the viewed object was evicted", i)
			}
		}
		if st := e.stats(); st.Evictions == 0 {
			t.Fatal("nothing was evicted: the test did not fill the store")
		}
		// Renewals stop: once the lease ends the object is evictable.
		e.clk.Advance(6 * time.Second)
		e.svc.Reap()
		for i := 12; i < 16; i++ {
			e.put(keyN(i), MiB)
		}
		if e.exists("viewed") {
			t.Fatal("an object whose view lapsed still escapes eviction")
		}
	})
}
