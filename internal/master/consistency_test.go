package master

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// The tests of this file break one of the ownership rules of DESIGN §9 on
// purpose and check that no range ends up with two owners.

// TestTimedOutPutKeepsRangeWhileWriterLives: a put past its timeout is
// never visible and frees its key, but its range is handed to nobody while
// its writer is registered — a slow writer's queued copy would land on the
// next owner's bytes (issue 10, item 2).
func TestTimedOutPutKeepsRangeWhileWriterLives(t *testing.T) {
	cfg := testConfig()
	cfg.PutTimeout = 2 * time.Second
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		// A segment with room for exactly two objects: any reuse of the slow
		// writer's range would show.
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 2*64*KiB))
		slow := e.registerTTL("slow", 10*time.Second)
		fast := e.registerTTL("fast", 10*time.Second)
		s := e.putStart("slow", 64*KiB, withClient(slow))
		wantErr(t, "slow PutStart", s.Err, nil)
		e.clk.Advance(3 * time.Second)
		e.svc.Reap()
		heartbeat(t, e, slow, fast)
		// Timed out: the key is free and the object never shows up...
		wantErr(t, "Get of a timed-out put", e.get("slow").Err, ErrNotFound)
		// ...but its bytes are still the slow writer's: a new writer gets the
		// other half, and then nothing.
		a := e.putStart("a", 64*KiB, withClient(fast))
		wantErr(t, "PutStart a", a.Err, nil)
		if a.Replicas[0].Offset == s.Replicas[0].Offset {
			t.Fatalf("new put got the timed-out writer's range at %d", a.Replicas[0].Offset)
		}
		wantErr(t, "PutStart into the reserved range", e.putStart("b", 64*KiB, withClient(fast)).Err, ErrNoSpace)
		// The slow writer's copy is done: its PutEnd fails and frees it.
		wantErr(t, "late PutEnd", e.c.PutEnd(e.ctx, []PutRef{{Key: "slow", Token: s.Token}})[0], ErrNotFound)
		b := e.putStart("b", 64*KiB, withClient(fast))
		wantErr(t, "PutStart after the late PutEnd", b.Err, nil)
		if b.Replicas[0].Offset != s.Replicas[0].Offset {
			t.Fatalf("freed range not reused: got %d", b.Replicas[0].Offset)
		}
	})
}

// TestDeadWritersPutsRevokedAtExpiry: a writer whose registration expires
// loses its puts at once — never visible, keys free for others — not at the
// put timeout (issue 10, item 7). Their bytes stay reserved for copies it
// may have queued before it stopped (DESIGN §9, "timeouts keep, never
// give"): until it registers again (the client waits for its copies first)
// or, if it never does, one put timeout after the expiry.
func TestDeadWritersPutsRevokedAtExpiry(t *testing.T) {
	cfg := testConfig()
	cfg.PutTimeout = 30 * time.Second
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.registerTTL("p1", time.Hour)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		for _, w := range []string{"w", "dead"} {
			e.registerTTL(w, 10*time.Second)
			e.putStart(w+"/a", MiB, withClient(w))
			e.putStart(w+"/b", MiB, withClient(w))
		}
		other := e.registerTTL("other", time.Hour)
		e.clk.Advance(11 * time.Second) // past the TTLs, far from the put timeout
		heartbeat(t, e, other)
		e.svc.Reap()
		// Revoked: the keys are free at once...
		for _, k := range []string{"w/a", "dead/b"} {
			r := e.putStart(k, 10, withClient(other))
			wantErr(t, "PutStart of a dead writer's key", r.Err, nil)
			wantErr(t, "PutRevoke", e.c.PutRevoke(e.ctx, []PutRef{{Key: k, Token: r.Token}})[0], nil)
		}
		// ...but the bytes are held for copies the writers may have queued.
		if st := e.stats(); st.PendingPuts != 4 || e.tierUsed(segment.TierDRAM) != 4*MiB {
			t.Fatalf("after expiry: %+v", st)
		}
		// A put by an expired writer is refused.
		wantErr(t, "PutStart by an expired writer", e.putStart("c", 10, withClient("w")).Err, ErrUnknownClient)
		wantErr(t, "PutStart by nobody", e.putStart("c", 10, withClient("ghost")).Err, ErrUnknownClient)
		// w comes back (its client fenced its copies first): its bytes are
		// free at once.
		e.registerTTL("w", 10*time.Second)
		if u := e.tierUsed(segment.TierDRAM); u != 2*MiB {
			t.Fatalf("used %d after w registered again, want 2 MiB (dead's)", u)
		}
		// dead never comes back: freed one put timeout after its expiry.
		e.clk.Advance(29 * time.Second)
		heartbeat(t, e, other)
		e.svc.Reap()
		if u := e.tierUsed(segment.TierDRAM); u != 2*MiB {
			t.Fatalf("freed before the put timeout after expiry: used %d", u)
		}
		e.clk.Advance(2 * time.Second)
		heartbeat(t, e, other)
		e.svc.Reap()
		if st := e.stats(); st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("dead writer's bytes still held: %+v", st)
		}
	})
}

// TestRemountWaitsForOldLeases: a provider that expired and comes back
// with the same allocation cannot mount it while a reader's lease from
// before may still be copying out of it; a new writer would be handed
// offset 0 again (issue 10, item 1).
func TestRemountWaitsForOldLeases(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.registerTTL("p1", 10*time.Second)
		d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("k", 4096)
		g := e.get("k") // a reader's lease: 5 s
		wantErr(t, "Get", g.Err, nil)
		e.clk.Advance(2 * time.Second)
		// The provider is replaced by a new incarnation (or expired): the
		// segment goes, the reader's lease is still running.
		e.registerTTL("p1", 10*time.Second)
		if e.exists("k") {
			t.Fatal("object survived its segment")
		}
		wantErr(t, "remount under a live lease", e.c.MountSegment(e.ctx, d), ErrHasLease)
		e.clk.Advance(3 * time.Second) // the lease has ended
		e.svc.Reap()
		e.mount(d)
		w := e.putStart("new", 4096)
		wantErr(t, "PutStart after the remount", w.Err, nil)
		wantErr(t, "PutRevoke", e.c.PutRevoke(e.ctx, []PutRef{{Key: "new", Token: w.Token}})[0], nil)
		// Without a lease or put outstanding at the drop there is no
		// quarantine.
		e.registerTTL("p1", 10*time.Second)
		e.mount(d)
	})
}

// TestReleaseLeases: a force-removed object's space returns when its last
// reader releases, not at the lease's end; a stale release from an ended
// lease period never ends a newer reader's lease (issue 10, item 5).
func TestReleaseLeases(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("k", 4096)
		r1, r2 := e.get("k"), e.get("k")
		if r1.LeaseID == 0 || r2.LeaseID == 0 || r1.LeaseID == r2.LeaseID {
			t.Fatalf("lease ids %#x %#x: want one per reader", r1.LeaseID, r2.LeaseID)
		}
		wantErr(t, "Remove leased", e.c.Remove(e.ctx, []string{"k"}, false)[0], ErrHasLease)
		wantErr(t, "Remove force", e.c.Remove(e.ctx, []string{"k"}, true)[0], nil)
		release(t, e, r1.LeaseID)
		if e.tierUsed(segment.TierDRAM) != 4096 {
			t.Fatal("freed while a reader still copies")
		}
		// A reader that releases its lease again (a bug, a retried call)
		// must not end the other reader's: the range would be reused
		// under its copy.
		release(t, e, r1.LeaseID, r1.LeaseID)
		if e.tierUsed(segment.TierDRAM) != 4096 {
			t.Fatal("a repeated release freed the object while another reader still copies")
		}
		release(t, e, r2.LeaseID)
		if u := e.tierUsed(segment.TierDRAM); u != 0 {
			t.Fatalf("used %d after the last release, want 0", u)
		}

		// A period that ended by expiry: its late release is ignored.
		e.put("j", 4096)
		old := e.get("j")
		e.clk.Advance(6 * time.Second)
		e.svc.Reap()
		cur := e.get("j")
		if cur.LeaseID == old.LeaseID {
			t.Fatal("a new lease period reused the old id")
		}
		release(t, e, old.LeaseID)
		wantErr(t, "Remove while the current reader holds its lease", e.c.Remove(e.ctx, []string{"j"}, false)[0], ErrHasLease)
		release(t, e, cur.LeaseID)
		wantErr(t, "Remove after the release", e.c.Remove(e.ctx, []string{"j"}, false)[0], nil)
		release(t, e, 12345, cur.LeaseID) // unknown and repeated ids are ignored
	})
}

// TestReleaseLeasesAcrossBlocks: one ReleaseLeases call whose ids come
// from two GetReplicas calls (two lease blocks), interleaved and in runs,
// with a repeated, an unknown and a forged id (a lease's with another
// shard) and ids of a block already fully released, releases exactly the
// leases it names: each object's count is
// right afterwards (an object keeps the lease not released), and at the
// end no lease and no block is left. It fails if ReleaseLeases looks a
// lease up in the wrong block (leaseLookup).
func TestReleaseLeasesAcrossBlocks(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		var as, bs []string
		for i := range 10 {
			as, bs = append(as, fmt.Sprintf("a%d", i)), append(bs, fmt.Sprintf("b%d", i))
			e.put(as[i], 4096)
			e.put(bs[i], 4096)
		}
		ids := func(keys []string) []uint64 {
			res, err := e.c.GetReplicas(e.ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]uint64, len(res))
			for i, r := range res {
				if r.Err != nil || r.LeaseID == 0 {
					t.Fatalf("get %s: %v, lease %#x", keys[i], r.Err, r.LeaseID)
				}
				out[i] = r.LeaseID
			}
			return out
		}
		done := ids([]string{"a0", "b9"}) // a block released whole before
		release(t, e, done...)
		r1 := ids(as)                          // a0…a9
		r2 := ids(append(as[:5:5], bs...))     // a0…a4 again, then b0…b9
		all := []uint64{done[1], 0xdead << 32} // a dropped block's, an unknown id
		for i := range 5 {                     // interleaved: a_i of each block
			all = append(all, r1[i], r2[i])
		}
		all = append(all, r2[5]^1)               // b0's lease with another shard: forged
		all = append(all, r1[5:]...)             // a run of block 1
		all = append(all, r2[6:]...)             // a run of block 2: b1…b9
		all = append(all, r1[0], done[0], r2[0]) // repeated
		// Left out: b0's lease (r2[5]).
		release(t, e, all...)
		for _, k := range append(as, bs...) {
			want := error(nil)
			if k == "b0" {
				want = ErrHasLease
			}
			wantErr(t, "Remove "+k, e.c.Remove(e.ctx, []string{k}, false)[0], want)
		}
		if n := e.svc.rd.leasesHeld(); n != 1 {
			t.Fatalf("%d leases held, want 1 (b0's)", n)
		}
		release(t, e, r2[5])
		wantErr(t, "Remove b0", e.c.Remove(e.ctx, []string{"b0"}, false)[0], nil)
		if n, b := e.svc.rd.leasesHeld(), e.svc.rd.blocks(); n != 0 || b != 0 {
			t.Fatalf("%d leases held in %d blocks, want none", n, b)
		}
	})
}

// TestReleaseBoundToReader: with authentication a lease is released only by
// the principal it was granted to (or an admin): another client that
// names its id — guessed, or by mistake — changes nothing.
func TestReleaseBoundToReader(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
	e.put("k", 4096)
	as := func(name string, role Role) context.Context {
		return WithPrincipal(e.ctx, Principal{Name: name, Role: role})
	}
	alice, mallory, ops := as("alice", RoleClient), as("mallory", RoleClient), as("ops", RoleAdmin)
	get := func(ctx context.Context) uint64 {
		t.Helper()
		res, err := e.svc.GetReplicas(ctx, []string{"k"})
		if err != nil || res[0].Err != nil {
			t.Fatalf("get: %v %v", err, res[0].Err)
		}
		return res[0].LeaseID
	}
	a1, a2 := get(alice), get(alice)
	wantErr(t, "Remove force", e.svc.Remove(e.ctx, []string{"k"}, true)[0], nil)
	if err := e.svc.ReleaseLeases(mallory, []uint64{a1, a2}); err != nil {
		t.Fatal(err)
	}
	if e.tierUsed(segment.TierDRAM) != 4096 || e.svc.rd.leasesHeld() != 2 {
		t.Fatalf("another principal's release ended alice's leases: used %d, %d leases held", e.tierUsed(segment.TierDRAM), e.svc.rd.leasesHeld())
	}
	if err := e.svc.ReleaseLeases(alice, []uint64{a1}); err != nil {
		t.Fatal(err)
	}
	if e.tierUsed(segment.TierDRAM) != 4096 {
		t.Fatal("freed while alice's second lease is held")
	}
	if err := e.svc.ReleaseLeases(ops, []uint64{a2}); err != nil { // an admin may
		t.Fatal(err)
	}
	if u, h := e.tierUsed(segment.TierDRAM), e.svc.rd.leasesHeld(); u != 0 || h != 0 {
		t.Fatalf("after the last release: used %d, %d leases held; want 0, 0", u, h)
	}
	if e.svc.rd.blocks() != 0 {
		t.Fatalf("%d lease blocks left", e.svc.rd.blocks())
	}
}

// TestUnreleasedLeasesSwept: a reader that never releases (it crashed)
// leaves nothing behind once its leases have expired; its late release is
// ignored and ends no newer reader's lease.
func TestUnreleasedLeasesSwept(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
	e.put("k", 4096)
	e.put("j", 4096)
	crashed := e.get("k")
	early := e.get("j")
	e.clk.Advance(time.Second)
	late := e.get("j") // a later call's block on the same period
	if h, b := e.svc.rd.leasesHeld(), e.svc.rd.blocks(); h != 3 || b != 3 {
		t.Fatalf("%d leases, %d blocks held; want 3, 3", h, b)
	}
	release(t, e, late.LeaseID)
	e.clk.Advance(e.svc.cfg.LeaseTTL)
	e.svc.Reap()
	if h, b := e.svc.rd.leasesHeld(), e.svc.rd.blocks(); h != 0 || b != 0 {
		t.Fatalf("after the leases expired: %d leases, %d blocks held; want none", h, b)
	}
	cur := e.get("k")
	wantErr(t, "Remove force", e.c.Remove(e.ctx, []string{"k"}, true)[0], nil)
	release(t, e, crashed.LeaseID, early.LeaseID) // late: ignored
	if e.tierUsed(segment.TierDRAM) != 2*4096 {
		t.Fatal("a late release of an expired lease ended the current reader's")
	}
	release(t, e, cur.LeaseID)
	if u := e.tierUsed(segment.TierDRAM); u != 4096 {
		t.Fatalf("used %d after the last release, want 4096 (j)", u)
	}
	wantErr(t, "Remove j", e.c.Remove(e.ctx, []string{"j"}, false)[0], nil)
	// Expired but not yet swept (no reap since): the old lease is still in
	// the table, and its release must not count on the period begun since.
	e.put("m", 4096)
	old := e.get("m")
	e.clk.Advance(e.svc.cfg.LeaseTTL + time.Millisecond)
	cur = e.get("m")
	if _, _, ok := e.svc.rd.lease(old.LeaseID); !ok {
		t.Fatal("the expired lease was swept without a reap")
	}
	release(t, e, old.LeaseID)
	wantErr(t, "Remove while the new period is held", e.c.Remove(e.ctx, []string{"m"}, false)[0], ErrHasLease)
	release(t, e, cur.LeaseID)
	wantErr(t, "Remove m", e.c.Remove(e.ctx, []string{"m"}, false)[0], nil)
	if h, b := e.svc.rd.leasesHeld(), e.svc.rd.blocks(); h != 0 || b != 0 {
		t.Fatalf("leaked: %d leases, %d blocks", h, b)
	}
}

// TestReportUnreachable: a segment reported unreachable gets no new puts or
// leases at once; its provider is expired at half its TTL unless it
// heartbeats, which clears the suspicion (issue 10, item 8).
func TestReportUnreachable(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.registerTTL("p1", 10*time.Second)
		q := e.registerTTL("p2", time.Hour)
		c := e.registerTTL("consumer", time.Hour)
		d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.mount(desc("s1", q, "host-b", segment.TierDRAM, 0, MiB))
		e.put("k", 4096, func(r *PutStartReq) { r.Placement.Segments = []string{"s0"} })
		wantErr(t, "report by nobody", e.c.ReportUnreachable(e.ctx, "ghost", d.Key(), "x"), ErrUnknownClient)
		wantErr(t, "report by the owner", e.c.ReportUnreachable(e.ctx, p, d.Key(), "x"), ErrInvalid)
		wantErr(t, "report", e.c.ReportUnreachable(e.ctx, c, d.Key(), "connection refused"), nil)
		r := e.putStart("new", 4096, func(r *PutStartReq) { r.Placement.Segments = []string{"s0"} })
		if r.Err != nil || r.Replicas[0].Segment.ID != "s1" {
			t.Fatalf("put after the report: %+v", r)
		}
		wantErr(t, "Get of an object on a suspect segment", e.get("k").Err, ErrNotFound)
		// The provider heartbeats: it is alive, the segment is usable again.
		heartbeat(t, e, p)
		wantErr(t, "Get after the provider's heartbeat", e.get("k").Err, nil)
		// Reported again and silent: expired at half its TTL, not the full.
		wantErr(t, "report", e.c.ReportUnreachable(e.ctx, c, d.Key(), "connection refused"), nil)
		e.clk.Advance(5*time.Second + time.Millisecond)
		e.svc.Reap()
		_, err := e.c.Heartbeat(e.ctx, p, Mapped{})
		wantErr(t, "provider heartbeat after the probe window", err, ErrUnknownClient)
		wantErr(t, "report of a gone segment", e.c.ReportUnreachable(e.ctx, c, d.Key(), "x"), ErrUnknownSegment)
	})
}

// TestSegmentsVersion: every mount and unmount changes the version
// heartbeats carry (consumers then drop mappings of gone segments).
func TestSegmentsVersion(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		v0 := heartbeat(t, e, p)
		d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, MiB))
		v1 := heartbeat(t, e, p)
		wantErr(t, "unmount", e.c.UnmountSegment(e.ctx, d.Key()), nil)
		v2 := heartbeat(t, e, p)
		if v0 == v1 || v1 == v2 || v0 == v2 {
			t.Fatalf("versions %d %d %d: want all different", v0, v1, v2)
		}
		if v := heartbeat(t, e, p); v != v2 {
			t.Fatalf("version changed without a mount: %d → %d", v2, v)
		}
	})
}

// TestSoftPinEvictedLast: soft-pinned objects survive eviction while
// unpinned ones can go, and still go under pressure.
func TestSoftPinEvictedLast(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	cfg.EvictSample = 1000 // sample everything: exact LRU, deterministic
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		soft := func(r *PutStartReq) { r.SoftPin = true }
		e.put("soft-old", MiB, soft)
		e.clk.Advance(time.Millisecond)
		e.put("soft-old2", MiB, soft)
		e.clk.Advance(time.Millisecond)
		e.put("plain", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("plain2", MiB)
		e.clk.Advance(time.Millisecond)
		e.put("new", MiB) // evicts an unpinned one although soft ones are older
		e.clk.Advance(time.Millisecond)
		if !e.exists("soft-old") || !e.exists("soft-old2") || e.exists("plain") {
			t.Fatal("soft-pinned object evicted before an unpinned one")
		}
		e.put("new2", MiB) // plain2 goes (the oldest unpinned)
		if e.exists("plain2") || !e.exists("soft-old") {
			t.Fatal("wrong victim")
		}
		// Nothing but soft-pinned objects: under pressure they go too,
		// oldest first.
		for _, err := range e.c.Remove(e.ctx, []string{"new", "new2"}, false) {
			wantErr(t, "remove", err, nil)
		}
		e.put("soft3", MiB, soft)
		e.put("soft4", MiB, soft)
		e.put("last", MiB)
		if e.exists("soft-old") || !e.exists("soft-old2") || !e.exists("last") {
			t.Fatal("soft-pinned objects not evicted oldest first under pressure")
		}
	})
}

func heartbeat(t *testing.T, e *env, ids ...string) uint64 {
	t.Helper()
	var v uint64
	for _, id := range ids {
		hb, err := e.c.Heartbeat(e.ctx, id, Mapped{})
		if err != nil {
			t.Fatalf("Heartbeat(%q): %v", id, err)
		}
		v = hb.SegmentsVersion
	}
	return v
}

func release(t *testing.T, e *env, ids ...uint64) {
	t.Helper()
	if err := e.c.ReleaseLeases(e.ctx, ids); err != nil {
		t.Fatalf("ReleaseLeases: %v", err)
	}
}

// TestPerClientStats: Stats shows each client's provided segments and what
// it reported mapped at its last heartbeat (issue 10, item 3), its driver
// and fabric domain as registered and the handle kinds of its segments
// (issue 11, item 7).
func TestPerClientStats(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		reg, err := e.c.RegisterClient(e.ctx, ClientInfo{ID: "p1", Node: "host-a", Driver: "sim", FabricDomain: "nvl72-a"})
		if err != nil {
			t.Fatal(err)
		}
		p := reg.ID
		c := e.register("c1", "host-b", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, MiB))
		s1 := desc("s1", p, "host-a", segment.TierDRAM, 1, MiB)
		s1.Handle = segment.Handle{Kind: segment.HandlePosixFD, SocketPath: "/run/kvf/p1"}
		e.mount(s1)
		if _, err := e.c.Heartbeat(e.ctx, c, Mapped{Segments: 3, Bytes: 3 * MiB}); err != nil {
			t.Fatal(err)
		}
		want := []ClientStats{
			{ID: "c1", Node: "host-b", Mapped: Mapped{Segments: 3, Bytes: 3 * MiB}},
			{ID: "p1", Node: "host-a", Segments: 2, Driver: "sim", FabricDomain: "nvl72-a",
				Handles: []segment.HandleKind{segment.HandleFabric, segment.HandlePosixFD}},
		}
		if got := e.stats().PerClient; !reflect.DeepEqual(got, want) {
			t.Fatalf("PerClient = %+v, want %+v", got, want)
		}
	})
}

// TestPutEvictsWhereItCanPlace: a put that finds no space evicts from
// segments it may use; objects on a draining segment (which takes no puts)
// are not evicted for it — that would free nothing the put can take.
func TestPutEvictsWhereItCanPlace(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	cfg.EvictSample = 1000 // exact LRU
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		s0 := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 3*MiB))
		e.mount(desc("s1", p, "host-a", segment.TierDRAM, 0, 2*MiB))
		onto := func(seg string) func(*PutStartReq) {
			return func(r *PutStartReq) { r.Placement.Segments = []string{seg} }
		}
		// The oldest objects live on s0, which then drains.
		e.put("old0", MiB, onto("s0"))
		e.put("old1", MiB, onto("s0"))
		e.clk.Advance(time.Millisecond)
		e.put("new0", MiB, onto("s1"))
		e.put("new1", MiB, onto("s1"))
		e.putStart("hold", 64, onto("s0")) // a put in progress keeps s0 from unmounting
		wantErr(t, "unmount (drains)", e.c.UnmountSegment(e.ctx, s0.Key()), ErrHasLease)
		r := e.putStart("next", MiB)
		wantErr(t, "put with only s1 usable", r.Err, nil)
		if r.Replicas[0].Segment.ID != "s1" || !e.exists("old0") || !e.exists("old1") {
			t.Fatalf("put on %s; old0 %v old1 %v: evicted from the draining segment", r.Replicas[0].Segment.ID, e.exists("old0"), e.exists("old1"))
		}
	})
}
