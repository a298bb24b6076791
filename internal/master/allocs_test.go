package master

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// TestAllocsPerCallNotPerKey: the per-key paths of puts and gets allocate
// per call (the result slices), never per key: a call of 1024 keys
// allocates no more than one of 16. Allocation counts are deterministic,
// unlike timings.
func TestAllocsPerCallNotPerKey(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate on their own")
	}
	type counts struct{ putStartRevoke, putEndRemove, getRelease float64 }
	measure := func(n int) counts {
		e := newEnvWith(t, testConfig(), transports["embedded"])
		p := e.registerTTL("prov", time.Hour)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 1<<30))
		w := e.register("w", "host-a", -1, -1)
		reqs := make([]PutStartReq, n)
		refs := make([]PutRef, n)
		keys := make([]string, n)
		ids := make([]uint64, n)
		for i := range reqs {
			keys[i] = "key-" + strconv.Itoa(i)
			reqs[i] = PutStartReq{Key: keys[i], Size: 4096, Placement: Placement{Client: w, NUMANode: -1, Device: -1}}
		}
		start := func() {
			res, err := e.svc.PutStart(e.ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				refs[i] = PutRef{Key: keys[i], Token: r.Token}
			}
		}
		finish := func(end bool) {
			var errs []error
			if end {
				errs = e.svc.PutEnd(e.ctx, refs)
			} else {
				errs = e.svc.PutRevoke(e.ctx, refs)
			}
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		getRelease := func() {
			res, err := e.svc.GetReplicas(e.ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				ids[i] = r.LeaseID
			}
			if err := e.svc.ReleaseLeases(e.ctx, ids); err != nil {
				t.Fatal(err)
			}
		}
		var c counts
		start() // warm up: the table, index and pending list have grown
		finish(false)
		c.putStartRevoke = testing.AllocsPerRun(20, func() { start(); finish(false) })
		c.putEndRemove = testing.AllocsPerRun(20, func() {
			start()
			finish(true)
			for _, err := range e.svc.Remove(e.ctx, keys, false) {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
		start()
		finish(true)
		// Warm up: the lease table has grown — every shard of it, as a
		// call begins its lease periods in a shard of its own.
		for range nLeaseShards {
			getRelease()
		}
		c.getRelease = testing.AllocsPerRun(20, getRelease)
		return c
	}
	small, large := measure(16), measure(1024)
	t.Logf("allocations per call at 16 keys: %+v; at 1024 keys: %+v", small, large)
	if large.putStartRevoke > small.putStartRevoke || large.putEndRemove > small.putEndRemove || large.getRelease > small.getRelease {
		t.Errorf("allocations grow with the batch: at 16 keys %+v, at 1024 keys %+v", small, large)
	}
}
