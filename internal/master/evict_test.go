package master

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// TestEvictionFindsVictimsInSparseTable: a put into a full store evicts
// and succeeds whatever the object table held before. Here the store
// first held 65,536 small objects, all removed, and then 16 large ones: a
// table of 65,552 slots with 16 visible objects, as after a workload of
// small blocks gave way to large ones, or after a mass removal. Eviction
// that samples table slots hit a visible object about once in 4,000
// draws, gave up after a few empty samples, and the puts failed with
// ErrNoSpace (the H200 bench --store --prefill: 4 MiB puts after the
// 4 KiB rounds).
func TestEvictionFindsVictimsInSparseTable(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1} // only puts evict
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		w := e.defaultWriter()
		put := func(prefix string, n int, size uint64) {
			t.Helper()
			for lo := 0; lo < n; lo += 4096 {
				reqs := make([]PutStartReq, 0, 4096)
				for i := lo; i < min(lo+4096, n); i++ {
					reqs = append(reqs, PutStartReq{Key: prefix + strconv.Itoa(i), Size: size, Placement: Placement{Client: w, NUMANode: -1, Device: -1}})
				}
				putBatch(t, e.ctx, e.c, reqs, nil)
			}
		}
		put("small/", 65536, KiB)
		if n, err := e.c.RemoveAll(e.ctx, Filter{}, true); err != nil || n != 65536 {
			t.Fatalf("RemoveAll = %d, %v", n, err)
		}
		put("big/", 16, 4*MiB) // full
		for i := range 64 {
			e.clk.Advance(time.Millisecond)
			put("more"+strconv.Itoa(i)+"/", 1, 4*MiB) // fails on the old sampling: no space
		}
		st := e.stats()
		if st.Evictions != 64 || st.Objects != 16 {
			t.Fatalf("evictions %d, objects %d: want 64 and 16", st.Evictions, st.Objects)
		}
		// LRU: with no more members than EvictSample (16), each eviction
		// takes the least recently used of them all, so every one of the
		// first 16 is gone and the newest stays.
		for i := range 16 {
			if k := "big/" + strconv.Itoa(i); e.exists(k) {
				t.Errorf("%s, older than every other object, survived 64 evictions", k)
			}
		}
		if !e.exists("more63/0") {
			t.Error("the newest object was evicted")
		}
		if n, err := e.c.RemoveAll(e.ctx, Filter{}, true); err != nil || n != 16 {
			t.Fatalf("RemoveAll = %d, %v", n, err)
		}
		if st := e.stats(); st.Objects != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("leaked: %d objects, %d bytes used", st.Objects, e.tierUsed(segment.TierDRAM))
		}
	})
}

// checkEvictLists fails t unless each tier's eviction list holds exactly
// the visible objects with a replica in that tier, and its positions agree.
func checkEvictLists(t *testing.T, svc *Service) {
	t.Helper()
	svc.mu.Lock()
	defer svc.mu.Unlock()
	want := [3]map[uint32]bool{{}, {}, {}}
	for slot := range uint32(svc.mu.objs.len()) {
		if svc.mu.objs.at(slot).state != stateVisible {
			continue
		}
		for _, r := range svc.repsLocked(slot) {
			want[svc.mu.segs[r.seg].tier][slot] = true
		}
	}
	for tier := range svc.mu.evict {
		l := &svc.mu.evict[tier]
		if l.n != len(want[tier]) {
			t.Errorf("tier %d: %d members, %d visible objects there", tier, l.n, len(want[tier]))
		}
		for i := range l.n {
			m := l.member(i)
			if !want[tier][m] {
				t.Errorf("tier %d: member %d (slot %d) is not a visible object there", tier, i, m)
			}
			if p := entry(&l.pos, m, false); p == nil || *p != uint32(i+1) {
				t.Errorf("tier %d: slot %d at %d, position says %v", tier, m, i, p)
			}
		}
	}
}

// TestEvictListsFollowVisible: the eviction lists stay exactly the visible
// objects per tier through everything that makes an object visible or
// ends it: PutEnd, upsert, remove, a forced remove of a leased object (a
// zombie) and its lease's end, revoke, eviction, and a segment's unmount
// that orphans objects (and one that only drops one replica of two).
func TestEvictListsFollowVisible(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		d0 := e.mount(desc("d0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		e.mount(desc("d1", p, "host-a", segment.TierDRAM, 1, 4*MiB))
		h0 := e.mount(desc("h0", p, "host-a", segment.TierHBM, 0, 4*MiB))
		onto := func(segs ...string) func(*PutStartReq) {
			return func(r *PutStartReq) { r.Placement.Segments = segs }
		}
		two := func(r *PutStartReq) { r.Replicas = 2; r.Placement.Segments = []string{"d1", "h0"} }
		for i := range 8 {
			e.put("a"+strconv.Itoa(i), 256*KiB, onto("d0"))
			e.put("b"+strconv.Itoa(i), 256*KiB, two)
			e.put("c"+strconv.Itoa(i), 256*KiB, onto("h0"))
		}
		checkEvictLists(t, e.svc)
		upsert := func(r *PutStartReq) { r.Upsert = true; r.Placement.Segments = []string{"d0"} }
		e.put("a0", 128*KiB, upsert)
		e.put("c0", 128*KiB, upsert) // from HBM to DRAM
		wantErr(t, "remove", e.c.Remove(e.ctx, []string{"a1", "b1"}, false)[0], nil)
		e.get("a2") // leased: a forced remove leaves a zombie
		wantErr(t, "forced remove", e.c.Remove(e.ctx, []string{"a2"}, true)[0], nil)
		r := e.putStart("pending", 64*KiB, onto("d1"))
		checkEvictLists(t, e.svc)
		e.c.PutRevoke(e.ctx, []PutRef{{Key: "pending", Token: r.Token}})
		e.clk.Advance(cfg.LeaseTTL + time.Second)
		e.svc.Reap()        // a2's lease ends: the zombie is freed
		for i := range 24 { // the store is full: these evict
			e.clk.Advance(time.Millisecond)
			e.put("n"+strconv.Itoa(i), 512*KiB)
		}
		checkEvictLists(t, e.svc)
		if e.stats().Evictions == 0 {
			t.Fatal("nothing was evicted")
		}
		// h0 leaves: the c objects are orphans, the b objects keep their
		// DRAM replica (and leave the HBM list).
		wantErr(t, "unmount h0", e.c.UnmountSegment(e.ctx, h0.Key()), nil)
		checkEvictLists(t, e.svc)
		wantErr(t, "unmount d0", e.c.UnmountSegment(e.ctx, d0.Key()), nil)
		checkEvictLists(t, e.svc)
		if _, err := e.c.RemoveAll(e.ctx, Filter{}, true); err != nil {
			t.Fatal(err)
		}
		checkEvictLists(t, e.svc)
		if st := e.stats(); st.Objects != 0 {
			t.Fatalf("leaked: %d objects", st.Objects)
		}
		for tier := range e.svc.mu.evict {
			if n := e.svc.mu.evict[tier].n; n != 0 {
				t.Fatalf("tier %d: %d members left", tier, n)
			}
		}
	})
}

// TestPutEvictsUntilARangeFits: eviction frees bytes, not ranges. In a full
// store of 256 KiB objects whose least recently used half lies at every
// other offset, evicting 512 KiB leaves two holes that cannot hold a
// 512 KiB object; the put evicts again (up to maxEvictRounds) until two
// neighbours are gone, and succeeds. It failed with ErrNoSpace when a put
// evicted only once.
func TestPutEvictsUntilARangeFits(t *testing.T) {
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	cfg.EvictSample = 1000 // exact LRU: the order below decides the victims
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 4*MiB))
		for i := range 16 {
			e.put("o"+strconv.Itoa(i), 256*KiB)
			e.clk.Advance(time.Millisecond)
		}
		for i := 0; i < 16; i += 2 { // the even ones are read: the odd ones are older
			e.get("o" + strconv.Itoa(i))
		}
		e.clk.Advance(cfg.LeaseTTL + time.Second)
		e.svc.Reap() // the reads' leases end
		r := e.putStart("big", 512*KiB)
		wantErr(t, "put of 512 KiB into a store of 256 KiB holes", r.Err, nil)
		if st := e.stats(); st.Evictions < 9 {
			t.Errorf("%d evictions: every odd object (8) and a neighbour should have gone", st.Evictions)
		}
		checkEvictLists(t, e.svc)
	})
}
