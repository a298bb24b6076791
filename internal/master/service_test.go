package master

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

func TestPutGetVisibility(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		d := e.mount(desc("host-a/p1/dram0/0", c, "host-a", segment.TierDRAM, 0, 64*MiB))

		r := e.putStart("a", 1000)
		if r.Err != nil || r.Token == 0 || len(r.Replicas) != 1 {
			t.Fatalf("PutStart = %+v", r)
		}
		rep := r.Replicas[0]
		if rep.Segment.Key() != d.Key() || *rep.Segment != d || rep.Length != 1024 || rep.Offset%64 != 0 {
			t.Fatalf("replica %+v (descriptor %+v), want segment %v, length 1024", rep, *rep.Segment, d.Key())
		}
		// Not visible before PutEnd.
		wantErr(t, "Get before PutEnd", e.get("a").Err, ErrNotFound)
		if e.exists("a") {
			t.Fatal("Exists before PutEnd")
		}
		if st := e.stats(); st.Objects != 0 || st.PendingPuts != 1 {
			t.Fatalf("stats %+v", st)
		}
		// Put-if-absent while in progress.
		wantErr(t, "PutStart of a key in progress", e.putStart("a", 10).Err, ErrAlreadyExists)
		wantErr(t, "PutEnd with a wrong token", e.c.PutEnd(e.ctx, []PutRef{{Key: "a", Token: r.Token + 1}})[0], ErrNotFound)
		wantErr(t, "PutEnd", e.c.PutEnd(e.ctx, []PutRef{{Key: "a", Token: r.Token}})[0], nil)
		wantErr(t, "PutEnd again (retry)", e.c.PutEnd(e.ctx, []PutRef{{Key: "a", Token: r.Token}})[0], nil)
		wantErr(t, "PutRevoke after PutEnd", e.c.PutRevoke(e.ctx, []PutRef{{Key: "a", Token: r.Token}})[0], ErrWrongState)
		wantErr(t, "PutStart of an existing key", e.putStart("a", 10).Err, ErrAlreadyExists)

		g := e.get("a")
		if g.Err != nil || g.Size != 1000 || len(g.Replicas) != 1 || g.Replicas[0].Offset != rep.Offset || *g.Replicas[0].Segment != d {
			t.Fatalf("Get = %+v", g)
		}
		// Embedded: the master's clock. Remote: the reader's own clock
		// (send time + TTL; see TestRemoteLeaseInLocalClock).
		masterClock := g.LeaseExpiry.Equal(e.clk.Now().Add(5 * time.Second))
		localClock := !g.LeaseExpiry.After(time.Now().Add(5*time.Second)) && g.LeaseExpiry.After(time.Now().Add(4*time.Second))
		if g.LeaseTTL != 5*time.Second || !(masterClock || localClock) {
			t.Fatalf("lease expiry %v (TTL %v), want %v in the master's clock or now+5s in ours", g.LeaseExpiry, g.LeaseTTL, e.clk.Now().Add(5*time.Second))
		}
		if !e.exists("a") || e.exists("b") {
			t.Fatal("Exists wrong")
		}
		if st := e.stats(); st.Objects != 1 || st.PendingPuts != 0 || st.Segments != 1 || st.Clients != 2 { // the provider and the writer
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestBatchPositional(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("exists", 10)
		w := Placement{Client: e.defaultWriter()}
		reqs := []PutStartReq{
			{Key: "x", Size: 100, Placement: w},
			{Key: "exists", Size: 100, Placement: w},
			{Key: "", Size: 100, Placement: w},
			{Key: "x", Size: 100, Placement: w}, // duplicate within the batch
			{Key: "y", Size: 0, Placement: w},
			{Key: "z", Size: 200, Placement: w},
		}
		res, err := e.c.PutStart(e.ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		want := []error{nil, ErrAlreadyExists, ErrInvalid, ErrAlreadyExists, ErrInvalid, nil}
		for i := range want {
			wantErr(t, "item "+reqs[i].Key, res[i].Err, want[i])
		}
		errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "z", Token: res[5].Token}, {Key: "nope", Token: 1}, {Key: "x", Token: res[0].Token}})
		for i, w := range []error{nil, ErrNotFound, nil} {
			wantErr(t, "PutEnd item", errs[i], w)
		}
		gets, err := e.c.GetReplicas(e.ctx, []string{"x", "missing", "z", "exists"})
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range []error{nil, ErrNotFound, nil, nil} {
			wantErr(t, "Get item", gets[i].Err, w)
		}
		if gets[0].Size != 100 || gets[2].Size != 200 || gets[3].Size != 10 {
			t.Fatalf("sizes %d %d %d", gets[0].Size, gets[2].Size, gets[3].Size)
		}
		ex, err := e.c.Exists(e.ctx, []string{"z", "nope", "x"}, false)
		if err != nil || !slices.Equal(ex, []bool{true, false, true}) {
			t.Fatalf("Exists = %v, %v", ex, err)
		}
		// Empty batches are fine.
		if res, err := e.c.PutStart(e.ctx, nil); err != nil || len(res) != 0 {
			t.Fatalf("empty PutStart = %v, %v", res, err)
		}
	})
}

func TestBatchLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch = 4
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		keys := []string{"a", "b", "c", "d", "e"}
		_, err := e.c.GetReplicas(e.ctx, keys)
		wantErr(t, "oversized GetReplicas", err, ErrInvalid)
		for _, err := range e.c.Remove(e.ctx, keys, false) {
			wantErr(t, "oversized Remove", err, ErrInvalid)
		}
	})
}

func TestPutTimeoutAndRevoke(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		slow := e.putStart("slow", 4096)
		rev := e.putStart("rev", 4096)
		if e.tierUsed(segment.TierDRAM) != 8192 {
			t.Fatalf("used %d", e.tierUsed(segment.TierDRAM))
		}
		wantErr(t, "Remove of a put in progress", e.c.Remove(e.ctx, []string{"rev"}, true)[0], ErrWrongState)
		wantErr(t, "PutRevoke", e.c.PutRevoke(e.ctx, []PutRef{{Key: "rev", Token: rev.Token}})[0], nil)
		wantErr(t, "PutRevoke again", e.c.PutRevoke(e.ctx, []PutRef{{Key: "rev", Token: rev.Token}})[0], ErrNotFound)

		e.clk.Advance(29 * time.Second)
		e.svc.Reap()
		if e.stats().PendingPuts != 1 {
			t.Fatal("put revoked before its timeout")
		}
		e.clk.Advance(time.Second)
		e.svc.Reap()
		// Timed out: never visible, the key is free, but the slow writer
		// may still be copying, so its bytes stay reserved (timeouts keep,
		// never give).
		if st := e.stats(); st.PendingPuts != 1 || e.tierUsed(segment.TierDRAM) != 4096 {
			t.Fatalf("after timeout: %+v", st)
		}
		wantErr(t, "Get after timeout", e.get("slow").Err, ErrNotFound)
		// A new writer of the same key gets other bytes and is not confused
		// with the old one.
		again := e.putStart("slow", 100)
		wantErr(t, "PutStart after timeout", again.Err, nil)
		if again.Replicas[0].Offset == slow.Replicas[0].Offset {
			t.Fatalf("new put of the key got the timed-out writer's range at %d", again.Replicas[0].Offset)
		}
		// The slow writer finds out when it ends its put (after its copies):
		// nothing half-written became visible, and its range is free now.
		wantErr(t, "PutEnd after timeout", e.c.PutEnd(e.ctx, []PutRef{{Key: "slow", Token: slow.Token}})[0], ErrNotFound)
		if st := e.stats(); st.PendingPuts != 1 || e.tierUsed(segment.TierDRAM) != 128 {
			t.Fatalf("after the slow writer's PutEnd: %+v, used %d", st, e.tierUsed(segment.TierDRAM))
		}
		wantErr(t, "stale PutEnd", e.c.PutEnd(e.ctx, []PutRef{{Key: "slow", Token: slow.Token}})[0], ErrNotFound)
		if e.exists("slow") {
			t.Fatal("stale PutEnd made the new put visible")
		}
	})
}

func TestLeasesAndRemove(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("a", 4096)
		e.put("b", 4096)
		e.put("c", 4096)
		wantErr(t, "Remove unleased", e.c.Remove(e.ctx, []string{"c"}, false)[0], nil)
		wantErr(t, "Remove again", e.c.Remove(e.ctx, []string{"c"}, false)[0], ErrNotFound)
		e.get("a")
		e.get("b")
		wantErr(t, "Remove leased", e.c.Remove(e.ctx, []string{"a"}, false)[0], ErrHasLease)
		if !e.exists("a") {
			t.Fatal("refused Remove changed state")
		}
		wantErr(t, "force Remove leased", e.c.Remove(e.ctx, []string{"a"}, true)[0], nil)
		if e.exists("a") || e.get("a").Err == nil {
			t.Fatal("force-removed key still visible")
		}
		// The bytes stay allocated under the reader until its lease ends.
		if used := e.tierUsed(segment.TierDRAM); used != 8192 {
			t.Fatalf("used %d, want 8192 (a held by its lease, b)", used)
		}
		// The key can be written again meanwhile, elsewhere.
		e.put("a", 4096)
		e.clk.Advance(5 * time.Second)
		e.svc.Reap()
		if used := e.tierUsed(segment.TierDRAM); used != 8192 {
			t.Fatalf("after lease expiry: used %d, want 8192 (new a, b)", used)
		}
		// A lease renewed by a later get lasts from that get.
		e.get("b")
		e.clk.Advance(3 * time.Second)
		e.get("b")
		e.clk.Advance(3 * time.Second)
		wantErr(t, "Remove of renewed lease", e.c.Remove(e.ctx, []string{"b"}, false)[0], ErrHasLease)
		e.clk.Advance(2 * time.Second)
		wantErr(t, "Remove after expiry", e.c.Remove(e.ctx, []string{"b"}, false)[0], nil)
	})
}

func TestRemoveAll(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		for i := range 10 {
			e.put(keyN(i), 100)
		}
		e.putStart("pending", 100)
		e.get(keyN(3))
		n, err := e.c.RemoveAll(e.ctx, Filter{}, false)
		if err != nil || n != 9 {
			t.Fatalf("RemoveAll = %d, %v; want 9", n, err)
		}
		if !e.exists(keyN(3)) {
			t.Fatal("leased object removed without force")
		}
		n, err = e.c.RemoveAll(e.ctx, Filter{}, true)
		if err != nil || n != 1 || e.exists(keyN(3)) {
			t.Fatalf("RemoveAll(force) = %d, %v", n, err)
		}
		if st := e.stats(); st.Objects != 0 || st.PendingPuts != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestEviction(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 0.9, Low: 0.5}
	cfg.EvictSample = 1000 // sample everything: exact LRU, deterministic
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 100*64*KiB))
		for i := range 89 {
			e.put(keyN(i), 64*KiB)
			e.clk.Advance(time.Millisecond)
		}
		if st := e.stats(); st.Objects != 89 || st.Evictions != 0 {
			t.Fatalf("at the high watermark: %+v", st)
		}
		// Touch the oldest 10: they become the most recent. Their leases
		// must not protect them past expiry, so let them run out.
		for i := range 10 {
			e.get(keyN(i))
		}
		e.clk.Advance(6 * time.Second)
		e.put("pinned", 64*KiB, withPin())
		if st := e.stats(); st.Evictions != 0 {
			t.Fatalf("evicted at the high watermark: %+v", st)
		}
		e.put("over", 64*KiB) // 91 > 90%: evict down to 50
		st := e.stats()
		if used := e.tierUsed(segment.TierDRAM); used > 50*64*KiB {
			t.Fatalf("used %d after eviction, want <= low watermark %d", used, 50*64*KiB)
		}
		if st.Evictions == 0 || st.Objects != 50 {
			t.Fatalf("stats after eviction %+v", st)
		}
		for i := range 10 {
			if !e.exists(keyN(i)) {
				t.Fatalf("recently read %s evicted before older ones", keyN(i))
			}
		}
		if !e.exists("pinned") || !e.exists("over") {
			t.Fatal("pinned or newest object evicted")
		}
		if e.exists(keyN(10)) {
			t.Fatal("least recently used object survived")
		}
	})
}

func TestEvictionSparesLeasedPinnedPending(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.put("leased", MiB)
		e.put("pinned", MiB, withPin())
		e.putStart("pending", MiB)
		e.put("old", MiB)
		e.get("leased")
		// Full. The allocation fails, eviction frees "old" only, the retry
		// succeeds.
		wantErr(t, "PutStart on a full store", e.putStart("new", MiB).Err, nil)
		if e.exists("old") {
			t.Fatal("old not evicted")
		}
		// Nothing else is evictable: ErrNoSpace, and nothing changed.
		before := e.stats()
		wantErr(t, "PutStart with nothing evictable", e.putStart("new2", MiB).Err, ErrNoSpace)
		if after := e.stats(); after.Objects != before.Objects || after.PendingPuts != before.PendingPuts {
			t.Fatalf("failed PutStart changed state: %+v → %+v", before, after)
		}
		if !e.exists("leased") || !e.exists("pinned") || e.stats().PendingPuts != 2 {
			t.Fatal("leased, pinned or pending object evicted")
		}
		// Once the lease ends the leased object is fair game.
		e.clk.Advance(5 * time.Second)
		wantErr(t, "PutStart after the lease ended", e.putStart("new2", MiB).Err, nil)
		if e.exists("leased") {
			t.Fatal("expired lease still protects")
		}
	})
}

func TestPlacement(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		a := e.register("pa", "host-a", 0, 0)
		b := e.register("pb", "host-b", 1, 1)
		e.register("reader", "host-b", 1, 3)
		for _, d := range []segment.Descriptor{
			desc("a/dram0", a, "host-a", segment.TierDRAM, 0, 64*MiB),
			desc("a/dram1", a, "host-a", segment.TierDRAM, 1, 64*MiB),
			desc("a/hbm0", a, "host-a", segment.TierHBM, 0, 64*MiB),
			desc("b/dram0", b, "host-b", segment.TierDRAM, 0, 64*MiB),
			desc("b/dram1", b, "host-b", segment.TierDRAM, 1, 32*MiB),
			desc("b/hbm3", b, "host-b", segment.TierHBM, 3, 64*MiB),
		} {
			e.mount(d)
		}
		segOf := func(r PutStartResult) []string {
			t.Helper()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			var ids []string
			for _, rp := range r.Replicas {
				ids = append(ids, rp.Segment.ID)
			}
			return ids
		}
		// Default: DRAM first.
		if ids := segOf(e.putStart("d", 100)); !strings.Contains(ids[0], "dram") {
			t.Fatalf("default placement %v, want DRAM", ids)
		}
		// The reading client's node and NUMA node.
		if ids := segOf(e.putStart("near", 100, withClient("reader"))); ids[0] != "b/dram1" {
			t.Fatalf("near placement %v, want b/dram1", ids)
		}
		// HBM near the reader's device.
		if ids := segOf(e.putStart("hbm", 100, withClient("reader"), withTier(segment.TierHBM, true))); ids[0] != "b/hbm3" {
			t.Fatalf("HBM placement %v, want b/hbm3", ids)
		}
		// Explicit hints win over the client's.
		if ids := segOf(e.putStart("hint", 100, withClient("reader"), func(r *PutStartReq) {
			r.Placement.Node, r.Placement.NUMANode = "host-a", 1
		})); ids[0] != "a/dram1" {
			t.Fatalf("hinted placement %v, want a/dram1", ids)
		}
		// A preferred segment wins over locality; unknown ids are ignored.
		if ids := segOf(e.putStart("pref", 100, withClient("reader"), func(r *PutStartReq) {
			r.Placement.Segments = []string{"nope", "a/hbm0"}
		})); ids[0] != "a/hbm0" {
			t.Fatalf("preferred placement %v, want a/hbm0", ids)
		}
		// A client id names every segment that client provides.
		if ids := segOf(e.putStart("pref-owner", 100, withClient("reader"), func(r *PutStartReq) {
			r.Placement.Segments = []string{a}
		})); !strings.HasPrefix(ids[0], "a/") {
			t.Fatalf("placement preferring client %s: %v, want one of its segments", a, ids)
		}
		// Replicas spread over segments and nodes, DRAM first.
		ids := segOf(e.putStart("r2", 100, withReplicas(2)))
		if len(ids) != 2 || ids[0][:1] == ids[1][:1] || !strings.Contains(ids[0], "dram") || !strings.Contains(ids[1], "dram") {
			t.Fatalf("2 replicas on %v, want DRAM on two nodes", ids)
		}
		ids = segOf(e.putStart("r4", 100, withReplicas(4), withTier(segment.TierDRAM, true)))
		if slices.Sort(ids); !slices.Equal(ids, []string{"a/dram0", "a/dram1", "b/dram0", "b/dram1"}) {
			t.Fatalf("4 DRAM replicas on %v", ids)
		}
		wantErr(t, "5 DRAM-only replicas", e.putStart("r5", 100, withReplicas(5), withTier(segment.TierDRAM, true)).Err, ErrNoSpace)
		wantErr(t, "7 replicas", e.putStart("r7", 100, withReplicas(7)).Err, ErrNoSpace)
		// Falls back to HBM when DRAM is full, unless TierOnly.
		wantErr(t, "too big for any segment", e.putStart("huge", 65*MiB).Err, ErrInvalid)
		wantErr(t, "DRAM only, too big", e.putStart("big", 64*MiB, withTier(segment.TierDRAM, true), withReplicas(3)).Err, ErrNoSpace)
		if ids := segOf(e.putStart("big", 60*MiB, withReplicas(4))); !strings.Contains(ids[3], "hbm") {
			t.Fatalf("4 big replicas on %v, want the fourth in HBM (b/dram1 is too small)", ids)
		}
	})
}

// TestReplicasSpreadOverProviders: two providers on one node (two
// processes, as two Mooncake clients on a host): the replicas of an object go
// to both, even where one of them has more free bytes in a second segment,
// so that the object outlives either process.
func TestReplicasSpreadOverProviders(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		a := e.register("pa", "host", 0, 0)
		b := e.register("pb", "host", 0, 0)
		for _, d := range []segment.Descriptor{
			desc("host/pa/dram0/0", a, "host", segment.TierDRAM, 0, 64*MiB),
			desc("host/pa/dram0/1", a, "host", segment.TierDRAM, 0, 64*MiB),
			desc("host/pb/dram0/0", b, "host", segment.TierDRAM, 0, 32*MiB),
		} {
			e.mount(d)
		}
		r := e.putStart("k", 100, withReplicas(2))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		var owners []string
		for _, rp := range r.Replicas {
			owners = append(owners, rp.Segment.Owner)
		}
		if slices.Sort(owners); !slices.Equal(owners, []string{a, b}) {
			t.Fatalf("2 replicas on segments of %v, want one on each provider", owners)
		}
	})
}

func TestUnmountDrainsWhileLeased(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		s0 := e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		s1 := e.mount(desc("s1", c, "host-a", segment.TierDRAM, 0, 32*MiB))
		e.put("only0", 100, func(r *PutStartReq) { r.Placement.Segments = []string{"s0"} })
		e.put("both", 100, withReplicas(2))
		e.get("only0")

		wantErr(t, "Unmount unknown", e.c.UnmountSegment(e.ctx, segment.Key{ID: "nope", Generation: 1}), ErrUnknownSegment)
		wantErr(t, "Unmount wrong generation", e.c.UnmountSegment(e.ctx, segment.Key{ID: "s0", Generation: s0.Generation + 1}), ErrGenerationMismatch)
		wantErr(t, "Unmount leased", e.c.UnmountSegment(e.ctx, s0.Key()), ErrHasLease)
		// Draining: no new allocations, no new leases on it.
		r := e.putStart("new", 100, func(r *PutStartReq) { r.Placement.Segments = []string{"s0"} })
		if r.Err != nil || r.Replicas[0].Segment.ID != "s1" {
			t.Fatalf("PutStart while s0 drains: %+v", r)
		}
		wantErr(t, "Get of an object only on a draining segment", e.get("only0").Err, ErrNotFound)
		if g := e.get("both"); g.Err != nil || len(g.Replicas) != 1 || g.Replicas[0].Segment.ID != "s1" {
			t.Fatalf("Get of a replicated object while draining: %+v", g)
		}
		e.clk.Advance(5 * time.Second)
		wantErr(t, "Unmount after the lease", e.c.UnmountSegment(e.ctx, s0.Key()), nil)
		if e.exists("only0") {
			t.Fatal("object left without replicas survived the unmount")
		}
		if g := e.get("both"); g.Err != nil || len(g.Replicas) != 1 {
			t.Fatalf("replicated object after unmount: %+v", g)
		}
		segs, err := e.c.ListSegments(e.ctx)
		if err != nil || len(segs) != 1 || segs[0] != s1 {
			t.Fatalf("ListSegments = %v, %v", segs, err)
		}
		// An in-progress put also holds the segment.
		w := e.putStart("w", 100)
		wantErr(t, "Unmount with a put in progress", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		e.clk.Advance(5 * time.Second) // lease on "both" ends; "new" and "w" stay pending
		wantErr(t, "Unmount with puts in progress", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		e.clk.Advance(30 * time.Second)
		e.svc.Reap()
		// Timed out, but their writer is registered and may still write.
		wantErr(t, "Unmount after the put timeout", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		for _, p := range []PutRef{{Key: "new", Token: r.Token}, {Key: "w", Token: w.Token}} {
			wantErr(t, "PutRevoke after the timeout", e.c.PutRevoke(e.ctx, []PutRef{p})[0], nil)
		}
		wantErr(t, "Unmount once the writer revoked", e.c.UnmountSegment(e.ctx, s1.Key()), nil)
		if st := e.stats(); st.Objects != 0 || st.Segments != 0 || len(st.Tiers) != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestMountRules(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		d := desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB)
		wantErr(t, "Mount with unknown owner", e.c.MountSegment(e.ctx, desc("x", "ghost", "h", segment.TierDRAM, 0, MiB)), ErrUnknownClient)
		e.mount(d)
		wantErr(t, "Mount again (retry)", e.c.MountSegment(e.ctx, d), nil)
		d2 := d
		d2.Generation++
		wantErr(t, "Mount other generation", e.c.MountSegment(e.ctx, d2), ErrAlreadyExists)
		if st := e.stats(); st.Segments != 1 || st.Tiers[0].Capacity != 64*MiB {
			t.Fatalf("stats %+v", st)
		}
		_, hbErr := e.c.Heartbeat(e.ctx, "ghost", Mapped{})
		wantErr(t, "Heartbeat unknown", hbErr, ErrUnknownClient)
		// Re-registering the same id is a new incarnation: old segments go.
		e.register("p1", "host-a", 0, 0)
		if st := e.stats(); st.Segments != 0 {
			t.Fatalf("segments of the old incarnation survived: %+v", st)
		}
		// An assigned id.
		if id := e.register("", "host-b", -1, -1); !strings.HasPrefix(id, "client-") {
			t.Fatalf("assigned id %q", id)
		}
	})
}

// TestClientDeath: a client that stops heartbeating loses its segments and
// the objects only on them within its TTL; others are untouched.
func TestClientDeath(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		dead := e.registerTTL("dead", 10*time.Second)
		live := e.registerTTL("live", 10*time.Second)
		e.mount(desc("dead/0", dead, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.mount(desc("dead/1", dead, "host-a", segment.TierHBM, 0, 64*MiB))
		e.mount(desc("live/0", live, "host-b", segment.TierDRAM, 0, 64*MiB))
		pin := func(id string) func(*PutStartReq) {
			return func(r *PutStartReq) { r.Placement.Segments = []string{id} }
		}
		e.put("on-dead", 100, pin("dead/0"))
		e.put("on-dead-hbm", 100, withTier(segment.TierHBM, true))
		e.put("on-live", 100, pin("live/0"))
		e.put("on-both", 100, withReplicas(2), withTier(segment.TierDRAM, true))
		e.putStart("pending-dead", 100, pin("dead/0"))
		e.get("on-dead") // a lease does not keep dead memory alive

		for range 4 {
			e.clk.Advance(3 * time.Second)
			if _, err := e.c.Heartbeat(e.ctx, live, Mapped{}); err != nil {
				t.Fatal(err)
			}
			e.svc.Reap()
		}
		// 12s > TTL 10s: dead expired.
		_, hbErr := e.c.Heartbeat(e.ctx, dead, Mapped{})
		wantErr(t, "Heartbeat after expiry", hbErr, ErrUnknownClient)
		segs, err := e.c.ListSegments(e.ctx)
		if err != nil || len(segs) != 1 || segs[0].ID != "live/0" {
			t.Fatalf("segments after client death: %v, %v", segs, err)
		}
		for key, want := range map[string]bool{"on-dead": false, "on-dead-hbm": false, "on-live": true, "on-both": true} {
			if got := e.exists(key); got != want {
				t.Fatalf("Exists(%q) = %v, want %v", key, got, want)
			}
		}
		if g := e.get("on-both"); g.Err != nil || len(g.Replicas) != 1 || g.Replicas[0].Segment.ID != "live/0" {
			t.Fatalf("on-both after death: %+v", g)
		}
		st := e.stats()
		if st.Objects != 2 || st.PendingPuts != 0 || st.Clients != 2 || st.Segments != 1 { // live and the writer
			t.Fatalf("stats %+v", st)
		}
		if u := e.tierUsed(segment.TierDRAM); u != 256 {
			t.Fatalf("DRAM used %d, want 256", u)
		}
		// The dead client can come back, as a new incarnation. Its old
		// allocation was dropped under a live writer's put (deadline in
		// 18s) and a reader's lease: mounting it again must wait until
		// neither can touch it, so no range is handed to two owners.
		e.register(dead, "host-a", 0, 0)
		d0 := desc("dead/0", dead, "host-a", segment.TierDRAM, 0, 64*MiB)
		wantErr(t, "remount while quarantined", e.c.MountSegment(e.ctx, d0), ErrHasLease)
		other := d0
		other.Generation++ // a new allocation: nothing old can touch it
		other.ID = "dead/2"
		e.mount(other)
		e.clk.Advance(18 * time.Second)
		e.svc.Reap()
		e.mount(d0)
	})
}

func TestClosed(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		e.register("p1", "h", 0, 0)
		if err := e.c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		_, err := e.c.GetReplicas(e.ctx, []string{"a"})
		wantErr(t, "Get after Close", err, ErrClosed)
		wantErr(t, "PutEnd after Close", e.c.PutEnd(e.ctx, []PutRef{{Key: "a", Token: 1}})[0], ErrClosed)
		_, hbErr := e.c.Heartbeat(e.ctx, "p1", Mapped{})
		wantErr(t, "Heartbeat after Close", hbErr, ErrClosed)
	})
}

func TestServiceClosed(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		_ = e.svc.Close()
		_, err := e.c.Stats(e.ctx)
		wantErr(t, "Stats after Service.Close", err, ErrClosed)
		wantErr(t, "Remove after Service.Close", e.c.Remove(e.ctx, []string{"a"}, false)[0], ErrClosed)
	})
}

func TestContextCanceled(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		_, err := e.c.GetReplicas(ctx, []string{"a"})
		wantErr(t, "Get with canceled ctx", err, context.Canceled)
	})
}

func TestStats(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		a := e.register("pa", "host-a", 0, 0)
		e.mount(desc("a0", a, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.mount(desc("a1", a, "host-a", segment.TierDRAM, 1, 32*MiB))
		e.mount(desc("ah", a, "host-a", segment.TierHBM, 2, 16*MiB))
		e.put("x", 1000, withTier(segment.TierHBM, true))
		e.put("y", 64, func(r *PutStartReq) { r.Placement.Segments = []string{"a1"} })
		st := e.stats()
		wantTiers := []UsageStats{
			{Tier: segment.TierDRAM, Location: -1, Segments: 2, Capacity: 96 * MiB, Used: 64},
			{Tier: segment.TierHBM, Location: -1, Segments: 1, Capacity: 16 * MiB, Used: 1024},
		}
		wantLocs := []UsageStats{
			{Node: "host-a", Tier: segment.TierDRAM, Location: 0, Segments: 1, Capacity: 64 * MiB},
			{Node: "host-a", Tier: segment.TierDRAM, Location: 1, Segments: 1, Capacity: 32 * MiB, Used: 64},
			{Node: "host-a", Tier: segment.TierHBM, Location: 2, Segments: 1, Capacity: 16 * MiB, Used: 1024},
		}
		if !slices.Equal(st.Tiers, wantTiers) || !slices.Equal(st.Locations, wantLocs) || st.Objects != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestConcurrent exercises the Service from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	cfg := testConfig()
	cfg.ReapInterval = time.Millisecond
	cfg.LeaseTTL = time.Millisecond
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	c := NewEmbedded(svc)
	ctx := context.Background()
	reg, _ := c.RegisterClient(ctx, ClientInfo{ID: "p", Node: "h", TTL: time.Minute})
	for i := range 4 {
		d := desc(keyN(i), reg.ID, "h", segment.TierDRAM, int32(i%2), 8*MiB)
		if err := c.MountSegment(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				k := keyN(w*1000 + i%50)
				res, err := c.PutStart(ctx, []PutStartReq{{Key: k, Size: uint64(1 + i*97%(256*KiB)), Placement: Placement{Client: reg.ID}}})
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Err == nil {
					if i%7 == 0 {
						c.PutRevoke(ctx, []PutRef{{Key: k, Token: res[0].Token}})
					} else {
						c.PutEnd(ctx, []PutRef{{Key: k, Token: res[0].Token}})
					}
				} else if !errors.Is(res[0].Err, ErrAlreadyExists) && !errors.Is(res[0].Err, ErrNoSpace) {
					t.Error(res[0].Err)
				}
				c.GetReplicas(ctx, []string{k, keyN(i)})
				if i%3 == 0 {
					c.Remove(ctx, []string{k}, i%2 == 0)
				}
				if i%50 == 0 {
					_, _ = c.Stats(ctx)
				}
			}
		})
	}
	wg.Wait()
	if _, err := c.RemoveAll(ctx, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	// Force-removed objects are freed when their leases end (the lease
	// wheel has 100ms buckets).
	deadline := time.Now().Add(5 * time.Second)
	for {
		svc.mu.Lock()
		var used uint64
		for _, sg := range svc.mu.segs {
			if err := sg.al.Check(); err != nil {
				t.Fatal(err)
			}
			used += sg.al.Used()
		}
		objs := svc.mu.objs.indexed + svc.mu.zombies
		svc.mu.Unlock()
		if used == 0 && objs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes, %d objects leaked", used, objs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNoSpaceReclaimsExpiredZombies: an object removed by force while
// leased keeps its bytes until the lease ends; once it has ended, a put
// that finds no space frees it at once instead of failing until the next
// reap (nothing visible is left to evict here).
func TestNoSpaceReclaimsExpiredZombies(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.put("big", 3*MiB)
		e.get("big") // leased
		wantErr(t, "force Remove leased", e.c.Remove(e.ctx, []string{"big"}, true)[0], nil)
		wantErr(t, "put while the removed object is still leased", e.putStart("next", 3*MiB).Err, ErrNoSpace)
		e.clk.Advance(6 * time.Second) // the lease ended; no reap ran
		e.put("next", 3*MiB)
	})
}

// TestDrainLapsesWithoutRetry: a refused unmount drains the segment only
// while its owner keeps retrying; an owner that gives up (its Close timed
// out and it lives on) gets its capacity back after DrainTimeout instead of
// a segment that takes no puts for good.
func TestDrainLapsesWithoutRetry(t *testing.T) {
	cfg := testConfig() // LeaseTTL 5s: DrainTimeout defaults to 10s
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		c := e.register("p1", "host-a", 0, 0)
		s0 := e.mount(desc("s0", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		s1 := e.mount(desc("s1", c, "host-a", segment.TierDRAM, 0, 64*MiB))
		on := func(seg string) func(*PutStartReq) {
			return func(r *PutStartReq) {
				r.Placement.Segments, r.Placement.Tier, r.Placement.TierOnly = []string{seg}, segment.TierDRAM, true
			}
		}
		// Pinned: a put that finds no usable segment evicts what it can.
		e.put("k", 100, on("s0"), withPin())
		e.get("k") // a lease until +5s
		w := e.putStart("w", 100, on("s1"))
		if w.Err != nil || w.Replicas[0].Segment.ID != "s1" {
			t.Fatalf("PutStart on s1: %+v", w)
		}
		wantErr(t, "Unmount s0 leased", e.c.UnmountSegment(e.ctx, s0.Key()), ErrHasLease)
		wantErr(t, "Unmount s1 written", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		drained := func(what string, want bool) {
			t.Helper()
			e.svc.Reap()
			key := "probe-" + e.clk.Now().Format(time.RFC3339Nano)
			r := e.putStart(key, 100)
			if want {
				wantErr(t, what+": PutStart while both drain", r.Err, ErrNoSpace)
				return
			}
			if r.Err != nil {
				t.Fatalf("%s: PutStart after the drain lapsed: %v", what, r.Err)
			}
			wantErr(t, "revoke probe", e.c.PutRevoke(e.ctx, []PutRef{{Key: key, Token: r.Token}})[0], nil)
		}
		drained("at once", true)
		e.clk.Advance(6 * time.Second) // the lease on k ended; nobody retried
		drained("after the lease", true)
		// s1's owner retries (refused again: w is in progress): renewed.
		wantErr(t, "Unmount s1 retried", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		e.clk.Advance(5 * time.Second) // s0: 11s without a retry; s1: 5s
		e.svc.Reap()
		if g := e.get("k"); g.Err != nil {
			t.Fatalf("Get of an object on a lapsed drain: %v", g.Err)
		}
		// Placement.Segments is a preference: s1 is preferred, but drains.
		r := e.putStart("after", 100, on("s1"))
		if r.Err != nil || r.Replicas[0].Segment.ID != "s0" {
			t.Fatalf("PutStart after s0's drain lapsed: %+v; want it on s0 (s1 still drains: its owner retried)", r)
		}
		e.clk.Advance(6 * time.Second) // s1: 11s since its last retry
		e.svc.Reap()
		r2 := e.putStart("after-s1", 100, on("s1"))
		if r2.Err != nil || r2.Replicas[0].Segment.ID != "s1" {
			t.Fatalf("PutStart on s1 after its drain lapsed: %+v", r2)
		}
		// A later unmount is refused and drains again, and once nothing is
		// outstanding it succeeds.
		refs := []PutRef{{Key: "after", Token: r.Token}, {Key: "w", Token: w.Token}, {Key: "after-s1", Token: r2.Token}}
		wantErr(t, "Unmount s1 again", e.c.UnmountSegment(e.ctx, s1.Key()), ErrHasLease)
		for _, p := range refs {
			wantErr(t, "PutRevoke", e.c.PutRevoke(e.ctx, []PutRef{p})[0], nil)
		}
		e.clk.Advance(6 * time.Second) // the lease from the Get above
		wantErr(t, "Unmount s0", e.c.UnmountSegment(e.ctx, s0.Key()), nil)
		wantErr(t, "Unmount s1", e.c.UnmountSegment(e.ctx, s1.Key()), nil)
	})
}
