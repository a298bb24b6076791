package master

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// TestUpsert: an upsert replaces a visible object; a reader that holds a
// lease on the old one keeps its bytes until it releases them; a put of
// the key in progress is still ErrAlreadyExists, and an upsert that cannot
// be placed leaves the old value (issue 12).
func TestUpsert(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		upsert := func(r *PutStartReq) { r.Upsert = true }

		old := e.put("k", MiB)
		// Without upsert an existing key is refused.
		if r := e.putStart("k", MiB); !errors.Is(r.Err, ErrAlreadyExists) {
			t.Fatalf("put of an existing key: %v, want ErrAlreadyExists", r.Err)
		}
		g := e.get("k") // a reader leases the old value
		nu := e.putStart("k", 2*MiB, upsert)
		if nu.Err != nil {
			t.Fatalf("upsert: %v", nu.Err)
		}
		if nu.Replicas[0].Offset == old.Replicas[0].Offset {
			t.Fatal("upsert reused the leased old range")
		}
		// While the new value is pending the key is not readable, and a
		// second put of it is refused.
		if e.exists("k") {
			t.Fatal("key visible while its upsert is pending")
		}
		if r := e.putStart("k", MiB, upsert); !errors.Is(r.Err, ErrAlreadyExists) {
			t.Fatalf("upsert over a pending put: %v, want ErrAlreadyExists", r.Err)
		}
		if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "k", Token: nu.Token}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if g2 := e.get("k"); g2.Err != nil || g2.Size != 2*MiB {
			t.Fatalf("after upsert: size %d, %v", g2.Size, g2.Err)
		}
		// Old 1 MiB (leased) + new 2 MiB are allocated until the reader
		// releases the old value.
		if u := e.tierUsed(segment.TierDRAM); u != 3*MiB {
			t.Fatalf("used %d, want 3 MiB while the old value is leased", u)
		}
		release(t, e, g.LeaseID)
		if u := e.tierUsed(segment.TierDRAM); u != 2*MiB {
			t.Fatalf("used %d after the old value's release, want 2 MiB", u)
		}

		// An upsert that does not fit leaves the old value in place.
		e.clk.Advance(10 * time.Second) // leases from the gets above end
		pin := func(r *PutStartReq) { r.Pin = true }
		e.put("pinned", 2*MiB, pin) // the segment is full of pinned data ...
		if r := e.putStart("pinned", 3*MiB, upsert, pin); !errors.Is(r.Err, ErrNoSpace) {
			t.Fatalf("upsert that cannot fit: %v, want ErrNoSpace", r.Err)
		}
		if g := e.get("pinned"); g.Err != nil || g.Size != 2*MiB {
			t.Fatalf("old value after a failed upsert: size %d, %v", g.Size, g.Err)
		}
		// Upsert of a missing key is a plain put.
		e.put("fresh", MiB/2, upsert)
		if !e.exists("fresh") {
			t.Fatal("upsert of a new key not visible")
		}
	})
}

// TestSoftPinTTL: a soft pin with a TTL protects the object from eviction
// until the TTL (counted from PutEnd) ends; an upsert with KeepSoftPin
// carries the pin and its expiry over; bad combinations are ErrInvalid.
func TestSoftPinTTL(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	cfg.EvictSample = 1000 // exact LRU
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 3*MiB))
		soft := func(ttl time.Duration) func(*PutStartReq) {
			return func(r *PutStartReq) { r.SoftPin, r.SoftPinTTL = true, ttl }
		}
		r := e.putStart("soft", MiB, soft(2*time.Second))
		e.clk.Advance(5 * time.Second) // pending time does not count
		if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "soft", Token: r.Token}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		e.clk.Advance(time.Millisecond)
		e.put("a", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("b", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("c", MiB) // evicts "a": "soft" is older but pinned
		if !e.exists("soft") || e.exists("a") {
			t.Fatal("soft pin with a live TTL did not protect the object")
		}
		e.clk.Advance(2 * time.Second) // the soft pin ends
		e.put("d", MiB)                // now "soft" is the oldest unpinned
		if e.exists("soft") || !e.exists("b") {
			t.Fatal("expired soft pin still protects the object")
		}

		// KeepSoftPin carries pin and expiry over an upsert.
		for _, k := range []string{"b", "c", "d"} {
			wantErr(t, "remove", e.c.Remove(e.ctx, []string{k}, true)[0], nil)
		}
		e.put("x", MiB, soft(3*time.Second))
		keep := func(r *PutStartReq) { r.Upsert, r.KeepSoftPin = true, true }
		e.clk.Advance(time.Second)
		e.put("x", MiB, keep) // keeps the pin until 2 s from now
		e.clk.Advance(time.Millisecond)
		e.put("y", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("z", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("w", MiB) // "x" is older than "y" but still soft-pinned
		if !e.exists("x") || e.exists("y") {
			t.Fatal("KeepSoftPin lost the soft pin")
		}
		e.clk.Advance(2 * time.Second)
		e.put("v", MiB)
		if e.exists("x") {
			t.Fatal("KeepSoftPin extended the soft pin past its expiry")
		}

		for _, bad := range []func(*PutStartReq){
			func(r *PutStartReq) { r.SoftPinTTL = time.Second },                            // TTL without a soft pin
			func(r *PutStartReq) { r.SoftPin, r.SoftPinTTL = true, -time.Second },          // negative
			func(r *PutStartReq) { r.KeepSoftPin = true },                                  // keep without upsert
			func(r *PutStartReq) { r.Upsert, r.KeepSoftPin, r.SoftPin = true, true, true }, // keep and a new pin
		} {
			if r := e.putStart("bad", MiB, bad); !errors.Is(r.Err, ErrInvalid) {
				t.Errorf("bad soft pin request: %v, want ErrInvalid", r.Err)
			}
		}
	})
}

// TestExistsLease: Exists with lease grants a read lease that blocks
// eviction and a plain Remove until the lease TTL, which a get's release
// cannot cut short; without lease nothing is granted.
func TestExistsLease(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.put("a", MiB)
		e.put("b", MiB)
		ex, err := e.c.Exists(e.ctx, []string{"a", "nope"}, true)
		if err != nil || !ex[0] || ex[1] {
			t.Fatalf("Exists: %v %v", ex, err)
		}
		g := e.get("a")
		release(t, e, g.LeaseID) // the exist lease is still held
		wantErr(t, "remove a", e.c.Remove(e.ctx, []string{"a"}, false)[0], ErrHasLease)
		if _, err := e.c.Exists(e.ctx, []string{"b"}, false); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "remove b (no lease)", e.c.Remove(e.ctx, []string{"b"}, false)[0], nil)
		e.clk.Advance(5*time.Second + time.Millisecond)
		e.svc.Reap()
		wantErr(t, "remove a after the lease TTL", e.c.Remove(e.ctx, []string{"a"}, false)[0], nil)

		// An exist check's lease does not hold up the provider's unmount (no
		// copy depends on it); a reader's unreleased lease does.
		d2 := e.mount(desc("s1", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.put("c", MiB, func(r *PutStartReq) { r.Placement.Segments = []string{"s1"} })
		if _, err := e.c.Exists(e.ctx, []string{"c"}, true); err != nil {
			t.Fatal(err)
		}
		e.get("c") // not released
		wantErr(t, "unmount under a reader's lease", e.c.UnmountSegment(e.ctx, d2.Key()), ErrHasLease)
		e.clk.Advance(5*time.Second + time.Millisecond)
		e.svc.Reap()
		if _, err := e.c.Exists(e.ctx, []string{"c"}, true); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "unmount under an exist check's lease", e.c.UnmountSegment(e.ctx, d2.Key()), nil)
	})
}

// TestRemoveAllFilter: RemoveAll removes only keys of the filter's tenant
// namespace whose names match the pattern; the default namespace never
// sees tenants' keys; a bad pattern or tenant is ErrInvalid and removes
// nothing.
func TestRemoveAllFilter(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		keys := map[string]string{ // stored key → what it is
			TenantKey("t1", "a1"): "t1/a1", TenantKey("t1", "a2"): "t1/a2", TenantKey("t1", "b1"): "t1/b1",
			TenantKey("t2", "a1"): "t2/a1", "a1": "default/a1", "b1": "default/b1",
		}
		for k := range keys {
			e.put(k, 4096)
		}
		for _, bad := range []Filter{{Tenant: "t1", Pattern: "("}, {Tenant: "t\x00"}, {Tenant: strings.Repeat("t", MaxTenantLen+1)}} {
			if _, err := e.c.RemoveAll(e.ctx, bad, false); !errors.Is(err, ErrInvalid) {
				t.Fatalf("RemoveAll(%q): %v, want ErrInvalid", bad, err)
			}
		}
		step := func(f Filter, n int, gone ...string) {
			t.Helper()
			if got, err := e.c.RemoveAll(e.ctx, f, false); err != nil || got != n {
				t.Fatalf("RemoveAll(%+v) = %d, %v; want %d", f, got, err, n)
			}
			for _, g := range gone {
				for k, what := range keys {
					if what == g {
						if e.exists(k) {
							t.Fatalf("%s still exists after RemoveAll(%+v)", g, f)
						}
						delete(keys, k)
					}
				}
			}
			for k, what := range keys {
				if !e.exists(k) {
					t.Fatalf("%s removed by RemoveAll(%+v)", what, f)
				}
			}
		}
		step(Filter{Tenant: "t1", Pattern: "^a"}, 2, "t1/a1", "t1/a2")
		step(Filter{Pattern: "1$"}, 2, "default/a1", "default/b1") // default namespace only
		step(Filter{}, 0)
		step(Filter{Tenant: "t2"}, 1, "t2/a1")
		step(Filter{Tenant: "t1"}, 1, "t1/b1")
	})
}

// TestPutEndOnUnreachableSegmentFails: a put whose segment was reported
// unreachable while it was in progress fails at PutEnd (and frees its
// range) instead of reporting success for bytes no reader can get
// (issue 12, item 1).
func TestPutEndOnUnreachableSegmentFails(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.registerTTL("p1", time.Hour)
		c := e.registerTTL("consumer", time.Hour)
		d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		r := e.putStart("k", MiB)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		wantErr(t, "report", e.c.ReportUnreachable(e.ctx, c, d.Key(), "connection refused"), nil)
		wantErr(t, "PutEnd into a suspect segment", e.c.PutEnd(e.ctx, []PutRef{{Key: "k", Token: r.Token}})[0], ErrNotFound)
		if e.exists("k") {
			t.Fatal("object visible after its PutEnd failed")
		}
		if u := e.tierUsed(segment.TierDRAM); u != 0 {
			t.Fatalf("%d bytes still allocated after the failed put", u)
		}
	})
}
