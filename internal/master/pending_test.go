package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// checkPendingLocked checks Service.mu.pending against the object table:
// it holds every pending object's slot exactly once, each at the index its
// record names, and nothing else.
func checkPendingLocked(s *Service) error {
	seen := map[uint32]bool{}
	for i, slot := range s.mu.pending {
		if int(slot) >= s.mu.objs.len() {
			return fmt.Errorf("pending[%d] = slot %d, past the table (%d slots)", i, slot, s.mu.objs.len())
		}
		o := s.mu.objs.at(slot)
		switch {
		case seen[slot]:
			return fmt.Errorf("pending[%d]: slot %d is listed twice", i, slot)
		case o.state != statePending:
			return fmt.Errorf("pending[%d]: slot %d (key %q) is in state %d, not pending", i, slot, s.mu.objs.key(slot), o.state)
		case o.leaseID != uint64(i):
			return fmt.Errorf("pending[%d]: slot %d (key %q) records index %d", i, slot, s.mu.objs.key(slot), o.leaseID)
		}
		seen[slot] = true
	}
	for slot := range s.mu.objs.len() {
		if s.mu.objs.at(uint32(slot)).state == statePending && !seen[uint32(slot)] {
			return fmt.Errorf("slot %d (key %q) is pending but not in the pending list", slot, s.mu.objs.key(uint32(slot)))
		}
	}
	return nil
}

// TestPendingSetModel drives random puts, ends, revokes, upserts, timeouts
// and writer expiries and checks after every step that the pending list
// holds exactly the puts in progress (an entry lost there would be a put
// that never times out), and that the puts the model still expects in
// progress can be ended.
func TestPendingSetModel(t *testing.T) {
	cfg := testConfig()
	cfg.PutTimeout = 10 * time.Second
	e := newEnvWith(t, cfg, transports["embedded"])
	p := e.registerTTL("prov", 2*time.Hour) // the steps advance the clock about 10 minutes in all
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 1<<30))
	writers := []string{"w0", "w1", "w2"}
	for _, w := range writers {
		e.registerTTL(w, time.Minute)
	}
	rng := rand.New(rand.NewPCG(13, 2))
	type put struct {
		writer string
		token  uint64
		at     time.Time // started at (manual clock)
	}
	inFlight := map[string]put{} // key → put the model expects in progress
	check := func(step int, what string) {
		t.Helper()
		e.svc.mu.Lock()
		err := checkPendingLocked(e.svc)
		n := len(e.svc.mu.pending)
		e.svc.mu.Unlock()
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		if n != len(inFlight) {
			t.Fatalf("step %d (%s): %d puts pending, the model has %d", step, what, n, len(inFlight))
		}
	}
	anyKey := func() (string, put, bool) {
		for k, p := range inFlight { // map order: random enough
			return k, p, true
		}
		return "", put{}, false
	}
	for step := range 3000 {
		var what string
		switch op := rng.IntN(100); {
		case op < 45: // a batch of new puts, some upserts of visible keys
			what = "put start"
			n := 1 + rng.IntN(8)
			w := writers[rng.IntN(len(writers))]
			reqs := make([]PutStartReq, n)
			for i := range reqs {
				reqs[i] = PutStartReq{Key: fmt.Sprintf("k%d", rng.IntN(400)), Size: 4096, Placement: Placement{Client: w, NUMANode: -1, Device: -1}, Upsert: rng.IntN(4) == 0}
			}
			res, err := e.c.PutStart(e.ctx, reqs)
			if err != nil {
				t.Fatalf("step %d: PutStart: %v", step, err)
			}
			for i, r := range res {
				if r.Err == nil {
					inFlight[reqs[i].Key] = put{writer: w, token: r.Token, at: e.clk.Now()}
				}
			}
		case op < 65:
			what = "put end"
			if k, p, ok := anyKey(); ok {
				wantErr(t, fmt.Sprintf("step %d: PutEnd(%q)", step, k), e.c.PutEnd(e.ctx, []PutRef{{Key: k, Token: p.token}})[0], nil)
				delete(inFlight, k)
			}
		case op < 80:
			what = "put revoke"
			if k, p, ok := anyKey(); ok {
				wantErr(t, fmt.Sprintf("step %d: PutRevoke(%q)", step, k), e.c.PutRevoke(e.ctx, []PutRef{{Key: k, Token: p.token}})[0], nil)
				delete(inFlight, k)
			}
		case op < 90: // time passes: puts past their timeout are revoked
			what = "reap"
			e.clk.Advance(time.Duration(1+rng.IntN(4)) * time.Second)
			for _, w := range writers {
				if _, err := e.c.Heartbeat(e.ctx, w, Mapped{}); err != nil {
					t.Fatalf("step %d: Heartbeat(%s): %v", step, w, err)
				}
			}
			e.svc.Reap()
			for k, p := range inFlight {
				if e.clk.Now().Sub(p.at) >= cfg.PutTimeout {
					delete(inFlight, k)
				}
			}
		default: // a writer goes away: its puts are revoked
			what = "unregister"
			w := writers[rng.IntN(len(writers))]
			if err := e.c.UnregisterClient(e.ctx, w); err != nil {
				t.Fatalf("step %d: UnregisterClient(%s): %v", step, w, err)
			}
			for k, p := range inFlight {
				if p.writer == w {
					delete(inFlight, k)
				}
			}
			e.registerTTL(w, time.Minute)
		}
		check(step, what)
	}
	// Every put the model still has in progress ends.
	for k, p := range inFlight {
		wantErr(t, fmt.Sprintf("final PutEnd(%q)", k), e.c.PutEnd(e.ctx, []PutRef{{Key: k, Token: p.token}})[0], nil)
		delete(inFlight, k)
	}
	check(-1, "final put ends")
}

// TestPutEndHints: every transport carries a put's hint (PutStartResult
// and PutRef), and PutEnd and PutRevoke use a PutRef's Hint only when the
// record it names is a put of that key with that token. A hint naming
// another key's put, a timed-out put, a reused slot or no slot at all
// must end exactly what the same call without a hint ends. Fails if the
// hinted record's key, state or token goes unchecked.
func TestPutEndHints(t *testing.T) {
	cfg := testConfig()
	cfg.PutTimeout = 2 * time.Second
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 8*64*KiB))
		start := func(k string) PutStartResult {
			t.Helper()
			r := e.putStart(k, 64*KiB)
			wantErr(t, "PutStart "+k, r.Err, nil)
			if r.Hint == 0 {
				t.Fatalf("PutStart %q: no hint (a remote master sends it over the wire too)", k)
			}
			return r
		}
		end := func(what string, ref PutRef, want error) {
			t.Helper()
			wantErr(t, what, e.c.PutEnd(e.ctx, []PutRef{ref})[0], want)
		}
		a, b := start("a"), start("b")
		// b's key with a's token, hinted at a's record: neither put ends.
		end("b with a's token and hint", PutRef{Key: "b", Token: a.Token, Hint: a.Hint}, ErrNotFound)
		wantErr(t, "Get a", e.get("a").Err, ErrNotFound)
		// b's own put, hinted at a's record: b ends, a does not.
		end("b hinted at a", PutRef{Key: "b", Token: b.Token, Hint: a.Hint}, nil)
		wantErr(t, "Get b", e.get("b").Err, nil)
		wantErr(t, "Get a after b's end", e.get("a").Err, ErrNotFound)
		// A hint past the table, then a retried PutEnd with the right hint.
		end("a hinted past the table", a.Ref("a"), nil)
		end("a retried", PutRef{Key: "a", Token: a.Token, Hint: 1 << 31}, nil)
		wantErr(t, "Get a", e.get("a").Err, nil)

		// A timed-out put, hinted at its own record: revoked, never visible,
		// and its range freed by the late PutEnd.
		c := start("c")
		e.clk.Advance(3 * time.Second)
		e.svc.Reap()
		used := e.tierUsed(segment.TierDRAM)
		end("timed-out c", c.Ref("c"), ErrNotFound)
		wantErr(t, "Get c", e.get("c").Err, ErrNotFound)
		if got := e.tierUsed(segment.TierDRAM); got != used-64*KiB {
			t.Fatalf("DRAM used after the late PutEnd = %d, want %d (the timed-out range freed)", got, used-64*KiB)
		}

		// A revoked put's hint, its slot reused by the next put: the stale
		// ref ends nothing, the new put ends with its own.
		d := start("d")
		wantErr(t, "PutRevoke d", e.c.PutRevoke(e.ctx, []PutRef{d.Ref("d")})[0], nil)
		n := start("n")
		if n.Hint != d.Hint {
			t.Logf("slot not reused (d %d, n %d): the stale-hint case is weaker", d.Hint, n.Hint)
		}
		end("stale d", d.Ref("d"), ErrNotFound)
		wantErr(t, "PutRevoke stale d", e.c.PutRevoke(e.ctx, []PutRef{{Key: "n", Token: d.Token, Hint: n.Hint}})[0], ErrNotFound)
		if st := e.stats(); st.PendingPuts != 1 {
			t.Fatalf("pending puts = %d, want 1 (n)", st.PendingPuts)
		}
		end("n", n.Ref("n"), nil)

		e.svc.mu.Lock()
		err := checkPendingLocked(e.svc)
		e.svc.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.RemoveAll(e.ctx, Filter{}, true); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(cfg.LeaseTTL + time.Second) // the gets' leases end: the zombies go
		e.svc.Reap()
		if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("after RemoveAll: %d objects, %d pending, %d bytes used", st.Objects, st.PendingPuts, e.tierUsed(segment.TierDRAM))
		}

	})
}

// TestPreparedPuts: a prepared PutStart batch starts once, only on the
// Service that prepared it, and answers as PutStart would: a request
// that failed validation fails at its position, the others start.
func TestPreparedPuts(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 8*64*KiB))
	w := e.defaultWriter()
	reqs := []PutStartReq{
		{Key: "a", Size: 64 * KiB, Placement: NoPlacement},
		{Key: "", Size: 64 * KiB, Placement: NoPlacement}, // invalid: no key
		{Key: "c", Size: 0, Placement: NoPlacement},       // invalid: size 0
		{Key: "d", Size: 64 * KiB, Placement: NoPlacement},
	}
	for i := range reqs {
		reqs[i].Placement.Client = w
	}
	other, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pre, err := e.svc.PreparePutStart(reqs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.PutStartPrepared(e.ctx, pre); !errors.Is(err, ErrInvalid) {
		t.Fatalf("another master's PutStartPrepared: %v, want ErrInvalid", err)
	}
	res, err := e.svc.PutStartPrepared(e.ctx, pre)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, ErrInvalid, ErrInvalid, nil} {
		wantErr(t, "item "+reqs[i].Key, res[i].Err, want)
	}
	if res[0].Token == 0 || res[0].Token == res[3].Token {
		t.Fatalf("tokens %#x and %#x: want two, distinct and not 0", res[0].Token, res[3].Token)
	}
	if _, err := e.svc.PutStartPrepared(e.ctx, pre); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second PutStartPrepared: %v, want ErrInvalid", err)
	}
	if st := e.stats(); st.PendingPuts != 2 {
		t.Fatalf("pending puts = %d, want 2 (a, d: the second start started nothing)", st.PendingPuts)
	}
	if _, err := e.svc.PreparePutStart(make([]PutStartReq, e.svc.cfg.MaxBatch+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized batch: %v, want ErrInvalid", err)
	}
	for _, i := range []int{0, 3} {
		wantErr(t, "PutEnd "+reqs[i].Key, e.c.PutEnd(e.ctx, []PutRef{res[i].Ref(reqs[i].Key)})[0], nil)
	}
	if _, err := e.svc.RemoveAll(e.ctx, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
		t.Fatalf("after RemoveAll: %d objects, %d pending, %d bytes used", st.Objects, st.PendingPuts, e.tierUsed(segment.TierDRAM))
	}
}

// TestUniformPutsAsRequests: a batch prepared as UniformPuts (keys, sizes
// and one request template) starts as the same batch of requests does:
// on two masters in the same state, every item's error (its class and
// text), size and replicas are the same, and so are the masters' objects
// and pending puts afterwards — for batches with invalid keys and sizes,
// a key twice, an existing key, and templates that are invalid or ask
// for pins and replicas. Keys and sizes of different lengths, and an
// oversized batch, fail the whole batch.
func TestUniformPutsAsRequests(t *testing.T) {
	type batch struct {
		keys  []string
		sizes []uint64
		tmpl  PutStartReq
	}
	long := strings.Repeat("k", testConfig().MaxKeyLen+1)
	batches := []batch{
		{keys: []string{"a", "", "c", "bad-\xff", long, "f"}, sizes: []uint64{64 * KiB, 64 * KiB, 0, 4 * KiB, 4 * KiB, MaxObjectSize + 1}},
		{keys: []string{"g", "h", "g", "a"}, sizes: []uint64{4 * KiB, 8 * KiB, 4 * KiB, 4 * KiB}}, // g twice; a exists
		{keys: []string{"i", "j"}, sizes: []uint64{4 * KiB, 4 * KiB}, tmpl: PutStartReq{Replicas: 2, Pin: true}},
		{keys: []string{"k", "l"}, sizes: []uint64{4 * KiB, 4 * KiB}, tmpl: PutStartReq{SoftPin: true, SoftPinTTL: time.Minute}},
		{keys: []string{"a", "m"}, sizes: []uint64{4 * KiB, 4 * KiB}, tmpl: PutStartReq{Upsert: true, KeepSoftPin: true}},
		{keys: []string{"n", "o"}, sizes: []uint64{4 * KiB, 4 * KiB}, tmpl: PutStartReq{Replicas: -1}},
		{keys: []string{"p"}, sizes: []uint64{4 * KiB}, tmpl: PutStartReq{KeepSoftPin: true}},
	}
	newMaster := func() (*env, Placement) {
		e := newEnvWith(t, testConfig(), transports["embedded"])
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 16*MiB))
		e.mount(desc("s1", p, "host-a", segment.TierDRAM, 0, 16*MiB))
		pl := NoPlacement
		pl.Client = e.defaultWriter()
		return e, pl
	}
	asReqs, pl := newMaster()
	asUni, _ := newMaster()
	for bi, b := range batches {
		b.tmpl.Placement = pl
		reqs := make([]PutStartReq, len(b.keys))
		for i := range reqs {
			reqs[i] = b.tmpl
			reqs[i].Key, reqs[i].Size = b.keys[i], b.sizes[i]
		}
		want, err := asReqs.c.PutStart(asReqs.ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		pre, err := asUni.svc.PrepareUniformPutStart(UniformPuts{Keys: b.keys, Sizes: b.sizes, Req: b.tmpl})
		if err != nil {
			t.Fatal(err)
		}
		got, err := asUni.svc.PutStartPrepared(asUni.ctx, pre)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			w, g := want[i], got[i]
			if (w.Err == nil) != (g.Err == nil) || w.Err != nil && w.Err.Error() != g.Err.Error() {
				t.Fatalf("batch %d item %d (%q): uniform %v, requests %v", bi, i, b.keys[i], g.Err, w.Err)
			}
			if len(w.Replicas) != len(g.Replicas) {
				t.Fatalf("batch %d item %d: %d replicas uniform, %d as requests", bi, i, len(g.Replicas), len(w.Replicas))
			}
			for r := range w.Replicas {
				if w.Replicas[r].Segment.ID != g.Replicas[r].Segment.ID || w.Replicas[r].Offset != g.Replicas[r].Offset || w.Replicas[r].Length != g.Replicas[r].Length {
					t.Fatalf("batch %d item %d replica %d: uniform %+v, requests %+v", bi, i, r, g.Replicas[r], w.Replicas[r])
				}
			}
			if w.Err == nil {
				wantErr(t, "PutEnd (requests)", asReqs.c.PutEnd(asReqs.ctx, []PutRef{w.Ref(b.keys[i])})[0], nil)
				wantErr(t, "PutEnd (uniform)", asUni.c.PutEnd(asUni.ctx, []PutRef{g.Ref(b.keys[i])})[0], nil)
			}
		}
		if ws, gs := asReqs.stats(), asUni.stats(); ws.Objects != gs.Objects || ws.PendingPuts != gs.PendingPuts {
			t.Fatalf("after batch %d: %d objects, %d pending uniform; %d, %d as requests", bi, gs.Objects, gs.PendingPuts, ws.Objects, ws.PendingPuts)
		}
	}
	if _, err := asUni.svc.PrepareUniformPutStart(UniformPuts{Keys: []string{"x", "y"}, Sizes: []uint64{1}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("2 keys, 1 size: %v, want ErrInvalid", err)
	}
	if _, err := asUni.svc.PrepareUniformPutStart(UniformPuts{Keys: make([]string, asUni.svc.cfg.MaxBatch+1), Sizes: make([]uint64, asUni.svc.cfg.MaxBatch+1)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized batch: %v, want ErrInvalid", err)
	}
	for _, e := range []*env{asReqs, asUni} {
		if _, err := e.svc.RemoveAll(e.ctx, Filter{}, true); err != nil {
			t.Fatal(err)
		}
		if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("after RemoveAll: %d objects, %d pending, %d bytes used", st.Objects, st.PendingPuts, e.tierUsed(segment.TierDRAM))
		}
	}
}
