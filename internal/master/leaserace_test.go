package master

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// heldRanges is what the readers of TestLeasedRangesNeverReused hold: per
// segment key, the ranges of their unreleased leases, counted.
type heldRanges struct {
	mu sync.Mutex
	m  map[segment.Key]map[[2]uint64]int // [offset, length] → leases holding it
}

func (h *heldRanges) add(rs []Replica, d int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rs {
		k := r.Segment.Key()
		if h.m[k] == nil {
			h.m[k] = map[[2]uint64]int{}
		}
		span := [2]uint64{r.Offset, r.Length}
		if h.m[k][span] += d; h.m[k][span] == 0 {
			delete(h.m[k], span)
		}
	}
}

// overlap returns a held range that r overlaps, if any.
func (h *heldRanges) overlap(r Replica) (span [2]uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for span := range h.m[r.Segment.Key()] {
		if r.Offset < span[0]+span[1] && span[0] < r.Offset+r.Length {
			return span, true
		}
	}
	return span, false
}

// TestLeasedRangesNeverReused is the reader's half of DESIGN §9 ("one
// owner per range") under concurrency: readers get and release leases in
// batches from several goroutines — concurrently with each other, since
// gets share the Service's lock — while writers fill small segments past
// their watermarks (so eviction runs all the time) and removers remove
// keys, by force too (leased objects become zombies, freed by the last
// release). No PutStart may hand out a range that overlaps one a reader
// still holds a lease on; at the end every byte and object is free. Run
// with -race.
func TestLeasedRangesNeverReused(t *testing.T) {
	cfg := testConfig()
	cfg.LeaseTTL = time.Minute // no lease expires during the test: only releases end them
	cfg.ReapInterval = 5 * time.Millisecond
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	c := NewEmbedded(svc)
	ctx := context.Background()
	reg, err := c.RegisterClient(ctx, ClientInfo{ID: "p", Node: "h", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := c.MountSegment(ctx, desc(fmt.Sprintf("lr%d", i), reg.ID, "h", segment.TierDRAM, int32(i%2), 2*MiB)); err != nil {
			t.Fatal(err)
		}
	}
	held := &heldRanges{m: map[segment.Key]map[[2]uint64]int{}}
	// hot keys are read by many readers at once (a shared prefix), and
	// written and removed by force often: an object several readers hold.
	const nkeys, hot = 512, 8
	key := func(i int) string { return fmt.Sprintf("lr-%05d", i%nkeys) }
	pick := func(rng *rand.Rand) string {
		if rng.IntN(2) == 0 {
			return key(rng.IntN(hot))
		}
		return key(rng.IntN(nkeys))
	}
	var (
		stop                       atomic.Bool
		reused, gets, puts, zombie atomic.Int64
		wg                         sync.WaitGroup
	)
	dur := 1500 * time.Millisecond
	if testing.Short() {
		dur = 300 * time.Millisecond
	}
	time.AfterFunc(dur, func() { stop.Store(true) })
	for w := range 3 { // writers: fill past the watermarks
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for !stop.Load() {
				reqs := make([]PutStartReq, 16)
				for i := range reqs {
					reqs[i] = PutStartReq{Key: pick(rng), Size: uint64(4*KiB + rng.IntN(60*KiB)), Upsert: rng.IntN(4) == 0,
						Placement: Placement{Client: reg.ID}}
				}
				res, err := c.PutStart(ctx, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				var refs []PutRef
				for i, r := range res {
					if r.Err != nil {
						continue
					}
					for _, rp := range r.Replicas {
						if span, ok := held.overlap(rp); ok {
							reused.Add(1)
							t.Errorf("PutStart(%q) got %s [%d, +%d), which overlaps a leased range [%d, +%d)",
								reqs[i].Key, rp.Segment.Key(), rp.Offset, rp.Length, span[0], span[1])
						}
					}
					refs = append(refs, PutRef{Key: reqs[i].Key, Token: r.Token})
				}
				for _, err := range c.PutEnd(ctx, refs) {
					if err != nil {
						t.Error(err)
					}
				}
				puts.Add(int64(len(refs)))
			}
		})
	}
	for r := range 6 { // readers: hold leases a little, then release them
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for !stop.Load() {
				keys := make([]string, 1+rng.IntN(64))
				for i := range keys {
					keys[i] = pick(rng)
				}
				res, err := c.GetReplicas(ctx, keys)
				if err != nil {
					t.Error(err)
					return
				}
				var ids []uint64
				var got [][]Replica
				for _, g := range res {
					if g.Err == nil {
						held.add(g.Replicas, 1)
						ids = append(ids, g.LeaseID)
						got = append(got, g.Replicas)
					} else if !errors.Is(g.Err, ErrNotFound) {
						t.Error(g.Err)
					}
				}
				gets.Add(int64(len(ids)))
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				// Forget the ranges before releasing: from the release on,
				// the master may hand them out again.
				for _, rs := range got {
					held.add(rs, -1)
				}
				// Sometimes a reader releases part of its leases twice (a
				// retried call, a bug) before the rest: that must end
				// nothing of the other readers' — their ranges stay theirs.
				parts := [][]uint64{ids}
				if k := len(ids) / 2; k > 0 && rng.IntN(3) == 0 {
					parts = [][]uint64{ids[:k], ids[:k], ids[k:]}
				}
				for _, p := range parts {
					if err := c.ReleaseLeases(ctx, p); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() { // remover: plain and forced removals (zombies while leased)
		rng := rand.New(rand.NewPCG(7, 3))
		for !stop.Load() {
			keys := []string{pick(rng), pick(rng)}
			force := rng.IntN(2) == 0
			for _, err := range c.Remove(ctx, keys, force) {
				if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrHasLease) && !errors.Is(err, ErrWrongState) {
					t.Error(err)
				}
			}
			if force {
				zombie.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	wg.Wait()
	t.Logf("%d leases granted and released, %d puts, %d forced removals, %d reused ranges", gets.Load(), puts.Load(), zombie.Load(), reused.Load())
	if gets.Load() == 0 || puts.Load() == 0 {
		t.Fatalf("the test did nothing: %d gets, %d puts", gets.Load(), puts.Load())
	}
	if _, err := c.RemoveAll(ctx, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	// Every lease was released, so nothing waits for the lease wheel.
	svc.mu.Lock()
	defer svc.mu.Unlock()
	var used uint64
	for _, sg := range svc.mu.segs {
		if err := sg.al.Check(); err != nil {
			t.Fatal(err)
		}
		used += sg.al.Used()
	}
	if objs := svc.mu.objs.indexed + svc.mu.zombies; used != 0 || objs != 0 || svc.rd.leasesHeld() != 0 || svc.rd.blocks() != 0 {
		t.Fatalf("leaked: %d bytes, %d objects, %d leases, %d lease blocks", used, objs, svc.rd.leasesHeld(), svc.rd.blocks())
	}
}

// TestLeaseBlocks: the lease table keeps a GetReplicas call's leases in
// blocks of at most leaseBlockMax; a block leaves the table exactly when
// its call is done and its last lease was released — a lease released
// twice counts once — and a released id no longer names a lease.
func TestLeaseBlocks(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	p := e.registerTTL("prov", time.Hour)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 1<<30))
	w := e.register("w", "host-a", -1, -1)
	const n = leaseBlockMax + 100 // two blocks
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("blk-%05d", i)
	}
	for lo := 0; lo < n; lo += 1000 {
		hi := min(lo+1000, n)
		reqs := make([]PutStartReq, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			reqs = append(reqs, PutStartReq{Key: k, Size: 4096, Placement: Placement{Client: w, NUMANode: -1, Device: -1}})
		}
		putBatch(t, e.ctx, e.c, reqs, nil)
	}
	res, err := e.svc.GetReplicas(e.ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, n)
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.LeaseID
	}
	if b, h := e.svc.rd.blocks(), e.svc.rd.leasesHeld(); b != 2 || h != n {
		t.Fatalf("after one call of %d gets: %d blocks, %d leases; want 2 and %d", n, b, h, n)
	}
	// Ids nobody was given — other blocks, shards and offsets, beyond a
	// block's end, random — change nothing.
	rng := rand.New(rand.NewPCG(1, 2))
	var junk []uint64
	for range 1000 {
		junk = append(junk, rng.Uint64(), ids[n-1]+1<<leaseShardBits, ids[0]^1, ids[0]+1<<62)
	}
	if err := e.svc.ReleaseLeases(e.ctx, junk); err != nil {
		t.Fatal(err)
	}
	if b, h := e.svc.rd.blocks(), e.svc.rd.leasesHeld(); b != 2 || h != n {
		t.Fatalf("after releasing ids never given: %d blocks, %d leases; want 2 and %d", b, h, n)
	}
	// Releasing one lease twice counts once: the block keeps its other ones.
	if err := e.svc.ReleaseLeases(e.ctx, []uint64{ids[0], ids[0]}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := e.svc.rd.lease(ids[0]); ok {
		t.Fatal("a released lease is still in the table")
	}
	if _, _, ok := e.svc.rd.lease(ids[1]); !ok || e.svc.rd.leasesHeld() != n-1 || e.svc.rd.blocks() != 2 {
		t.Fatalf("after releasing one lease twice: lease 1 found %v, %d leases, %d blocks; want true, %d, 2", ok, e.svc.rd.leasesHeld(), e.svc.rd.blocks(), n-1)
	}
	if errs := e.svc.Remove(e.ctx, keys[:1], false); errs[0] != nil {
		t.Fatalf("plain remove of an object whose only lease was released: %v", errs[0])
	}
	if errs := e.svc.Remove(e.ctx, keys[1:2], false); !errors.Is(errs[0], ErrHasLease) {
		t.Fatalf("plain remove of a leased object: %v", errs[0])
	}
	if err := e.svc.ReleaseLeases(e.ctx, ids[1:leaseBlockMax]); err != nil {
		t.Fatal(err)
	}
	if b := e.svc.rd.blocks(); b != 1 {
		t.Fatalf("after releasing the first block's leases: %d blocks, want 1", b)
	}
	if err := e.svc.ReleaseLeases(e.ctx, ids[leaseBlockMax:]); err != nil {
		t.Fatal(err)
	}
	if b, h := e.svc.rd.blocks(), e.svc.rd.leasesHeld(); b != 0 || h != 0 {
		t.Fatalf("after releasing every lease: %d blocks, %d leases; want none", b, h)
	}
	if _, err := e.svc.RemoveAll(e.ctx, Filter{}, false); err != nil {
		t.Fatal(err)
	}
}
