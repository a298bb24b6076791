package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// newShardedEnv is an env whose Client is a Sharded master of n shards
// (e.svc is shard 0).
func newShardedEnv(t *testing.T, n int) (*env, *Sharded) {
	t.Helper()
	clk := newManualClock()
	cfg := testConfig()
	cfg.Clock = clk
	m, err := NewSharded(cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &env{t: t, svc: m.Shard(0), c: m, clk: clk, ctx: context.Background()}, m
}

// assertShardsEmpty fails t unless no shard holds an object, a pending
// put, a segment or a view: the sharded tests' leak check.
func assertShardsEmpty(t *testing.T, m *Sharded) {
	t.Helper()
	for i := range m.Shards() {
		st, err := m.Shard(i).Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Objects != 0 || st.PendingPuts != 0 || st.Segments != 0 || st.Views != 0 || len(st.Tiers) != 0 {
			t.Fatalf("shard %d left %+v", i, st)
		}
	}
}

func TestNewShardedBadCount(t *testing.T) {
	for _, n := range []int{0, -1, MaxShards + 1} {
		_, err := NewSharded(testConfig(), n)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("master shards=%d", n)) {
			t.Fatalf("NewSharded(%d) = %v, want ErrInvalid naming the count", n, err)
		}
	}
}

// TestShardedRoundTrip puts a batch that spans every shard, and checks
// that each key's replica lies in its shard's slice of the segment, that
// no two replicas overlap, that every lease id names the key's shard, and
// that everything is released and unmounted at the end.
func TestShardedRoundTrip(t *testing.T) {
	const shards, keys = 4, 2000
	e, m := newShardedEnv(t, shards)
	p := e.register("p1", "host-a", 0, 0)
	segs := []segment.Descriptor{
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB)),
		e.mount(desc("s1", p, "host-a", segment.TierDRAM, 0, 32*MiB+4096)),
	}
	if st := e.stats(); st.Segments != 2 || len(st.Tiers) != 1 || st.Tiers[0].Capacity != 96*MiB+4096 {
		t.Fatalf("stats after mount: %+v (want 2 segments, capacity %d summed over shards)", st, 96*MiB+4096)
	}
	w := e.defaultWriter()
	reqs := make([]PutStartReq, keys)
	perShard := make([]int, shards)
	for i := range reqs {
		reqs[i] = PutStartReq{Key: fmt.Sprintf("k/%05d", i), Size: 4000 + uint64(i%7)*1000, Placement: Placement{Client: w}}
		perShard[m.ShardOf(reqs[i].Key)]++
	}
	for s, n := range perShard {
		if n == 0 {
			t.Fatalf("shard %d got no key of %d: the batch does not span the shards", s, keys)
		}
	}
	refs := putBatch(t, e.ctx, e.c, reqs, nil)

	names := make([]string, keys)
	for i := range names {
		names[i] = reqs[i].Key
	}
	res, err := e.c.GetReplicas(e.ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ off, end uint64 }
	used := map[string][]span{}
	var leases []uint64
	for i, r := range res {
		if r.Err != nil || r.Size != reqs[i].Size || len(r.Replicas) != 1 {
			t.Fatalf("get %q = %+v", names[i], r)
		}
		rp := r.Replicas[0]
		sh := uint64(m.ShardOf(names[i]))
		slice := rp.Segment.Size / shards / testConfig().Defaults().Alignment * testConfig().Defaults().Alignment
		lo, hi := sh*slice, (sh+1)*slice
		if sh == shards-1 {
			hi = rp.Segment.Size
		}
		if rp.Offset < lo || rp.Offset+rp.Length > hi {
			t.Fatalf("key %q of shard %d at [%d, %d) of %s: outside its slice [%d, %d)", names[i], sh, rp.Offset, rp.Offset+rp.Length, rp.Segment.ID, lo, hi)
		}
		used[rp.Segment.ID] = append(used[rp.Segment.ID], span{rp.Offset, rp.Offset + rp.Length})
		if got := m.leaseShard(r.LeaseID); got != int(sh) {
			t.Fatalf("lease %#x of key %q names shard %d, want %d", r.LeaseID, names[i], got, sh)
		}
		leases = append(leases, r.LeaseID)
	}
	for id, spans := range used {
		slices.SortFunc(spans, func(a, b span) int { return int(a.off) - int(b.off) })
		for i := 1; i < len(spans); i++ {
			if spans[i].off < spans[i-1].end {
				t.Fatalf("segment %s: replicas [%d, %d) and [%d, %d) overlap", id, spans[i-1].off, spans[i-1].end, spans[i].off, spans[i].end)
			}
		}
	}
	// A lease on every key: no unmount yet.
	wantErr(t, "unmount while leased", e.c.UnmountSegment(e.ctx, segs[0].Key()), ErrHasLease)
	if err := e.c.ReleaseLeases(e.ctx, leases); err != nil {
		t.Fatal(err)
	}
	// Exists and Remove split across shards and answer in order.
	probe := []string{names[0], "missing", names[1], names[2]}
	ex, err := e.c.Exists(e.ctx, probe, false)
	if err != nil || !slices.Equal(ex, []bool{true, false, true, true}) {
		t.Fatalf("Exists(%q) = %v, %v", probe, ex, err)
	}
	rm := e.c.Remove(e.ctx, []string{names[0], "missing", names[1]}, false)
	if rm[0] != nil || !errors.Is(rm[1], ErrNotFound) || rm[2] != nil {
		t.Fatalf("Remove = %v", rm)
	}
	if st := e.stats(); st.Objects != keys-2 {
		t.Fatalf("objects after removing 2 of %d: %d", keys, st.Objects)
	}
	// PutEnd again is a no-op on every shard.
	for j, err := range e.c.PutEnd(e.ctx, refs[2:]) {
		if err != nil {
			t.Fatalf("PutEnd retry of %q: %v", refs[2+j].Key, err)
		}
	}
	n, err := e.c.RemoveAll(e.ctx, Filter{}, false)
	if err != nil || n != keys-2 {
		t.Fatalf("RemoveAll = %d, %v; want %d", n, err, keys-2)
	}
	for _, d := range segs {
		wantErr(t, "unmount "+d.ID, e.c.UnmountSegment(e.ctx, d.Key()), nil)
	}
	wantErr(t, "unmount again", e.c.UnmountSegment(e.ctx, segs[0].Key()), ErrUnknownSegment)
	assertShardsEmpty(t, m)
}

// TestShardedUnmountDrainsPerShard: a lease held in one shard keeps the
// segment mounted there (draining) while the other shards let it go; the
// owner's retry after the lease finishes the unmount.
func TestShardedUnmountDrainsPerShard(t *testing.T) {
	e, m := newShardedEnv(t, 3)
	p := e.register("p1", "host-a", 0, 0)
	d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 48*MiB))
	e.put("held", 1000)
	g := e.get("held")
	sh := m.ShardOf("held")
	wantErr(t, "unmount while leased", e.c.UnmountSegment(e.ctx, d.Key()), ErrHasLease)
	for i := range m.Shards() {
		st, _ := m.Shard(i).Stats(e.ctx)
		if want := map[bool]int{true: 1, false: 0}[i == sh]; st.Segments != want {
			t.Fatalf("shard %d (lease in shard %d) has %d segments after the refused unmount, want %d", i, sh, st.Segments, want)
		}
	}
	if ls, err := e.c.ListSegments(e.ctx); err != nil || len(ls) != 1 || ls[0].ID != "s0" {
		t.Fatalf("ListSegments while one shard drains = %v, %v", ls, err)
	}
	if err := e.c.ReleaseLeases(e.ctx, []uint64{g.LeaseID}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "unmount after the release", e.c.UnmountSegment(e.ctx, d.Key()), nil)
	assertShardsEmpty(t, m)
}

// TestShardedMountTooSmall: a segment with no aligned slice per shard is
// refused by name and size, and no shard keeps it.
func TestShardedMountTooSmall(t *testing.T) {
	e, m := newShardedEnv(t, 8)
	p := e.register("p1", "host-a", 0, 0)
	err := e.c.MountSegment(e.ctx, desc("tiny", p, "host-a", segment.TierDRAM, 0, 4*testConfig().Defaults().Alignment))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `segment "tiny"`) || !strings.Contains(err.Error(), "8 master shards") {
		t.Fatalf("mount of a segment smaller than 8 slices = %v", err)
	}
	assertShardsEmpty(t, m)
}

// TestShardedRegistration: an id assigned by shard 0 is registered in every
// shard; unregistering ends it everywhere.
func TestShardedRegistration(t *testing.T) {
	e, m := newShardedEnv(t, 3)
	reg, err := e.c.RegisterClient(e.ctx, ClientInfo{Node: "host-a"})
	if err != nil || reg.ID == "" {
		t.Fatalf("RegisterClient = %+v, %v", reg, err)
	}
	for i := range m.Shards() {
		st, _ := m.Shard(i).Stats(e.ctx)
		if st.Clients != 1 || st.PerClient[0].ID != reg.ID {
			t.Fatalf("shard %d clients %+v, want %q", i, st.PerClient, reg.ID)
		}
	}
	if _, err := e.c.Heartbeat(e.ctx, reg.ID, Mapped{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "unregister", e.c.UnregisterClient(e.ctx, reg.ID), nil)
	wantErr(t, "unregister again", e.c.UnregisterClient(e.ctx, reg.ID), ErrUnknownClient)
	wantErr(t, "heartbeat after", func() error { _, err := e.c.Heartbeat(e.ctx, reg.ID, Mapped{}); return err }(), ErrUnknownClient)
	for i := range m.Shards() {
		if st, _ := m.Shard(i).Stats(e.ctx); st.Clients != 0 {
			t.Fatalf("shard %d still has %d clients", i, st.Clients)
		}
	}
}

// TestShardedPrepared: a prepared batch of one shard goes to it; one that
// spans shards is split at PutStartPrepared; each starts once.
func TestShardedPrepared(t *testing.T) {
	e, m := newShardedEnv(t, 4)
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
	w := e.defaultWriter()
	var one, all []string
	for i := 0; len(one) < 5 || len(all) < 40; i++ {
		k := fmt.Sprintf("p/%d", i)
		if m.ShardOf(k) == 2 && len(one) < 5 {
			one = append(one, k)
		} else if len(all) < 40 {
			all = append(all, k)
		}
	}
	for _, keys := range [][]string{one, all} {
		sizes := make([]uint64, len(keys))
		for i := range sizes {
			sizes[i] = 1000
		}
		pp, err := m.PrepareUniformPutStart(UniformPuts{Keys: keys, Sizes: sizes, Req: PutStartReq{Placement: Placement{Client: w}}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.PutStartPrepared(e.ctx, pp)
		if err != nil || len(res) != len(keys) {
			t.Fatalf("PutStartPrepared of %d keys = %d results, %v", len(keys), len(res), err)
		}
		refs := make([]PutRef, len(res))
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("put %q: %v", keys[i], r.Err)
			}
			refs[i] = r.Ref(keys[i])
		}
		endRefs(t, e.ctx, e.c, refs)
		if _, err := m.PutStartPrepared(e.ctx, pp); !errors.Is(err, ErrInvalid) {
			t.Fatalf("second PutStartPrepared = %v, want ErrInvalid", err)
		}
	}
	other, _ := New(testConfig())
	defer other.Close()
	foreign, _ := other.PreparePutStart([]PutStartReq{{Key: "x", Size: 1}})
	if _, err := m.PutStartPrepared(e.ctx, foreign); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PutStartPrepared of another master's batch = %v, want ErrInvalid", err)
	}
	if st := e.stats(); st.Objects != len(one)+len(all) {
		t.Fatalf("objects %d, want %d", st.Objects, len(one)+len(all))
	}
}

// TestShardedHoldLeases: views of keys in several shards are held,
// renewed and released through the shards that granted their leases, and
// the answers keep their positions.
func TestShardedHoldLeases(t *testing.T) {
	e, m := newShardedEnv(t, 4)
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
	w := e.defaultWriter()
	var keys []string
	for i := range 32 {
		k := fmt.Sprintf("v/%d", i)
		e.put(k, 1000)
		keys = append(keys, k)
	}
	res, err := e.c.GetReplicas(WithReader(e.ctx, w), keys)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(res))
	for i, r := range res {
		ids[i] = r.LeaseID
	}
	bogus := ids[0] + 1<<(leaseBlockBits+leaseShardBits)*uint64(m.Shards())*1000
	hold := append(slices.Clone(ids), bogus)
	hr, err := e.c.HoldLeases(e.ctx, HoldReq{Client: w, Hold: hold})
	if err != nil || len(hr.Errs) != len(hold) || hr.TTL <= 0 {
		t.Fatalf("HoldLeases = %+v, %v", hr, err)
	}
	for i, err := range hr.Errs[:len(ids)] {
		if err != nil {
			t.Fatalf("hold of %q's lease: %v", keys[i], err)
		}
	}
	if hr.Errs[len(ids)] == nil {
		t.Fatal("hold of an unknown lease id succeeded")
	}
	if st := e.stats(); st.Views != len(ids) {
		t.Fatalf("views %d, want %d", st.Views, len(ids))
	}
	hr, err = e.c.HoldLeases(e.ctx, HoldReq{Client: w, Renew: ids[:5], Release: ids})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.stats(); st.Views != 0 {
		t.Fatalf("views after release %d (renew answers %v)", st.Views, hr.Errs)
	}
}

// TestShardedConcurrent: writers, readers and removers on all shards at
// once (run with -race), then everything removed and unmounted.
func TestShardedConcurrent(t *testing.T) {
	e, m := newShardedEnv(t, 4)
	p := e.register("p1", "host-a", 0, 0)
	d := e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 256*MiB))
	w := e.defaultWriter()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			for round := range 20 {
				reqs := make([]PutStartReq, 64)
				keys := make([]string, len(reqs))
				for i := range reqs {
					keys[i] = fmt.Sprintf("c/%d/%d/%d", g, round, i)
					reqs[i] = PutStartReq{Key: keys[i], Size: 4096, Placement: Placement{Client: w}}
				}
				res, err := e.c.PutStart(e.ctx, reqs)
				if err != nil {
					errc <- err
					return
				}
				refs := make([]PutRef, len(res))
				for i, r := range res {
					if r.Err != nil {
						errc <- fmt.Errorf("put %q: %w", keys[i], r.Err)
						return
					}
					refs[i] = r.Ref(keys[i])
				}
				for _, err := range e.c.PutEnd(e.ctx, refs) {
					if err != nil {
						errc <- err
						return
					}
				}
				got, err := e.c.GetReplicas(e.ctx, keys)
				if err != nil {
					errc <- err
					return
				}
				ids := make([]uint64, 0, len(got))
				for i, r := range got {
					if r.Err != nil || r.Size != 4096 {
						errc <- fmt.Errorf("get %q: %+v", keys[i], r)
						return
					}
					ids = append(ids, r.LeaseID)
				}
				if err := e.c.ReleaseLeases(e.ctx, ids); err != nil {
					errc <- err
					return
				}
				if round%2 == 1 {
					for _, err := range e.c.Remove(e.ctx, keys, false) {
						if err != nil {
							errc <- err
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if st := e.stats(); st.Objects != 4*10*64 {
		t.Fatalf("objects %d, want %d", st.Objects, 4*10*64)
	}
	if _, err := e.c.RemoveAll(e.ctx, Filter{}, false); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	wantErr(t, "unmount", e.c.UnmountSegment(e.ctx, d.Key()), nil)
	assertShardsEmpty(t, m)
}
