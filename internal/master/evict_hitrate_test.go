package master

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// evictPolicy names how a test Service picks eviction victims.
type evictPolicy string

const (
	policyExact   evictPolicy = "exact"   // every member examined: exact LRU
	policySampled evictPolicy = "sampled" // EvictSample random members, the oldest of them (before the clock)
	policyClock   evictPolicy = "clock"   // the default: the clock hand, sampling as its fallback
)

// hitRateService is a full-able store of capacity objects of size bytes,
// evicting only for puts (watermarks at 1), with the given policy.
func hitRateService(tb testing.TB, policy evictPolicy, capacity int, size uint64) (*Service, *manualClock) {
	tb.Helper()
	cfg := testConfig()
	cfg.DRAM = Watermarks{High: 1, Low: 1}
	clk := newManualClock()
	cfg.Clock = clk
	if policy == policyExact {
		cfg.EvictSample = 1 << 30
	}
	svc, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = svc.Close() })
	svc.evictSampleOnly = policy == policySampled
	ctx := context.Background()
	reg, err := svc.RegisterClient(ctx, ClientInfo{ID: "w", Node: "h", TTL: time.Hour, NUMANode: -1, Device: -1})
	if err != nil {
		tb.Fatal(err)
	}
	if err := svc.MountSegment(ctx, desc("s0", reg.ID, "h", segment.TierDRAM, 0, uint64(capacity)*size)); err != nil {
		tb.Fatal(err)
	}
	return svc, clk
}

// fullStore returns a clock-evicting store of capacity objects of size
// bytes, filled by puts of k0 … k(capacity-1) in that order, and the keys.
func fullStore(t *testing.T, capacity int, size uint64) (*Service, *manualClock, []string) {
	t.Helper()
	svc, clk := hitRateService(t, policyClock, capacity, size)
	keys := make([]string, capacity)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	replay(t, svc, clk, keys, size)
	return svc, clk, keys
}

// replay runs a cache's loop over trace through svc: get each key (and
// release its lease at once); on a miss, put it. It returns the hits.
func replay(tb testing.TB, svc *Service, clk *manualClock, trace []string, size uint64) int {
	tb.Helper()
	ctx := context.Background()
	hits := 0
	for _, k := range trace {
		clk.Advance(time.Microsecond)
		res, err := svc.GetReplicas(ctx, []string{k})
		if err != nil {
			tb.Fatal(err)
		}
		if res[0].Err == nil {
			hits++
			if err := svc.ReleaseLeases(ctx, []uint64{res[0].LeaseID}); err != nil {
				tb.Fatalf("release %s: %v", k, err)
			}
			continue
		}
		p, err := svc.PutStart(ctx, []PutStartReq{{Key: k, Size: size, Placement: Placement{Client: "w", NUMANode: -1, Device: -1}}})
		if err != nil || p[0].Err != nil {
			tb.Fatalf("put %s into a full store: %v %v", k, err, p[0].Err)
		}
		if errs := svc.PutEnd(ctx, []PutRef{{Key: k, Token: p[0].Token}}); errs[0] != nil {
			tb.Fatal(errs[0])
		}
	}
	return hits
}

// Traces of keys as a KV cache sees them. zipf: popular prefixes reused
// with a heavy tail. scan: the same, with every other request a key never
// seen again (one-off prompts), which pushes popular keys out of an LRU.
// shift: a working set that moves (a new popular set every quarter).
func hitRateTraces(n int) map[string][]string {
	out := map[string][]string{}
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 1<<16)
	zipf := make([]string, n)
	for i := range zipf {
		zipf[i] = "z" + strconv.FormatUint(z.Uint64(), 10)
	}
	out["zipf"] = zipf
	scan := make([]string, n)
	for i := range scan {
		if i%2 == 0 {
			scan[i] = "z" + strconv.FormatUint(z.Uint64(), 10)
		} else {
			scan[i] = "once" + strconv.Itoa(i)
		}
	}
	out["scan"] = scan
	shift := make([]string, n)
	for i := range shift {
		shift[i] = "p" + strconv.Itoa(i*4/n) + "/" + strconv.FormatUint(z.Uint64(), 10)
	}
	out["shift"] = shift
	return out
}

// TestEvictionHitRate: the clock's victims keep a cache's hit rate within
// a point of exact LRU and of the sampled LRU it replaced, on traces a KV
// cache sees (a store of 2,048 objects, 200,000 requests each). A clock
// that evicts what it should keep (the hand not honouring recent use: a
// FIFO) falls below them on every trace (ran it: 2.3–3.5 points).
func TestEvictionHitRate(t *testing.T) {
	if raceEnabled {
		t.Skip("a policy's hit rate, single-threaded: the plain run checks it (3 × 200,000 requests are minutes under -race)")
	}
	const capacity, size, requests = 2048, 4096, 200_000
	for name, trace := range hitRateTraces(requests) {
		t.Run(name, func(t *testing.T) {
			rate := map[evictPolicy]float64{}
			for _, p := range []evictPolicy{policyExact, policySampled, policyClock} {
				svc, clk := hitRateService(t, p, capacity, size)
				rate[p] = float64(replay(t, svc, clk, trace, size)) / requests
				if st, _ := svc.Stats(context.Background()); st.Evictions == 0 {
					t.Fatalf("%s: nothing evicted: the trace does not test eviction", p)
				}
			}
			t.Logf("hit rate: exact LRU %.4f, sampled %.4f, clock %.4f", rate[policyExact], rate[policySampled], rate[policyClock])
			for _, p := range []evictPolicy{policyExact, policySampled} {
				if rate[policyClock] < rate[p]-0.01 {
					t.Errorf("clock hit rate %.4f is more than a point below %s's %.4f", rate[policyClock], p, rate[p])
				}
			}
		})
	}
}

// TestClockKeepsHotRun: a run of objects put one after another and read
// since (a long prefix every request shares) lies in a run of the
// eviction list. The clock passes it; when a window of the hand holds
// nothing evictable it falls back to sampling, which rarely draws the run.
// Evicting the least recently used of each window instead (ran it) took
// one hot object per window: 128 of 2,048 gone here.
func TestClockKeepsHotRun(t *testing.T) {
	const capacity, size, hot = 4096, 4096, 2048
	svc, clk, keys := fullStore(t, capacity, size)
	ctx := context.Background()
	// The store is full: cold objects, then the hot run, then cold ones.
	hotKeys := keys[1024 : 1024+hot]
	readHot := func() {
		t.Helper()
		clk.Advance(time.Microsecond)
		res, err := svc.GetReplicas(ctx, hotKeys)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, r := range res {
			if r.Err == nil {
				ids = append(ids, r.LeaseID)
			}
		}
		if err := svc.ReleaseLeases(ctx, ids); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 16 { // 16 × 256 new objects: the whole store turns over
		readHot()
		var fresh []string
		for i := range 256 {
			fresh = append(fresh, "new"+strconv.Itoa(round)+"/"+strconv.Itoa(i))
		}
		replay(t, svc, clk, fresh, size)
	}
	lost := 0
	for _, k := range hotKeys {
		if ok, err := svc.Exists(ctx, []string{k}, false); err != nil {
			t.Fatal(err)
		} else if !ok[0] {
			lost++
		}
	}
	if st, _ := svc.Stats(ctx); st.Evictions < 4096 {
		t.Fatalf("%d evictions: the store did not turn over", st.Evictions)
	}
	t.Logf("hot objects evicted: %d of %d", lost, hot)
	if lost > hot/100 {
		t.Errorf("%d of %d hot objects evicted, read before every 256 puts", lost, hot)
	}
}

// TestClockPassesLeasedRun: a run of leased objects (a large get in
// flight: 3,072 of the store's 4,096, put one after another) lies where
// the hand starts. Puts into the full store still find victims — the
// hand's windows there find nothing, and sampling does — and no leased
// object is evicted. Without the sampling fallback the first put failed
// with no space (ran it).
func TestClockPassesLeasedRun(t *testing.T) {
	const capacity, size, leased = 4096, 4096, 3072
	svc, clk, keys := fullStore(t, capacity, size)
	ctx := context.Background()
	clk.Advance(time.Millisecond)
	res, err := svc.GetReplicas(ctx, keys[:leased]) // held: not released
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("get %s: %v", keys[i], r.Err)
		}
	}
	var fresh []string
	for i := range 1024 {
		fresh = append(fresh, "new"+strconv.Itoa(i))
	}
	replay(t, svc, clk, fresh, size) // fails the test on any put error
	ok, err := svc.Exists(ctx, keys[:leased], false)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ok {
		if !v {
			t.Fatalf("leased object %s was evicted", keys[i])
		}
	}
	if st, _ := svc.Stats(ctx); st.Evictions != 1024 {
		t.Fatalf("%d evictions, want 1024 (every unleased old object)", st.Evictions)
	}
	ids := make([]uint64, len(res))
	for i, r := range res {
		ids[i] = r.LeaseID
	}
	if err := svc.ReleaseLeases(ctx, ids); err != nil {
		t.Fatal(err)
	}
}
