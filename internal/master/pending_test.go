package master

import (
	"fmt"
	"math/rand/v2"
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
				wantErr(t, fmt.Sprintf("step %d: PutEnd(%q)", step, k), e.c.PutEnd(e.ctx, []PutRef{{k, p.token}})[0], nil)
				delete(inFlight, k)
			}
		case op < 80:
			what = "put revoke"
			if k, p, ok := anyKey(); ok {
				wantErr(t, fmt.Sprintf("step %d: PutRevoke(%q)", step, k), e.c.PutRevoke(e.ctx, []PutRef{{k, p.token}})[0], nil)
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
		wantErr(t, fmt.Sprintf("final PutEnd(%q)", k), e.c.PutEnd(e.ctx, []PutRef{{k, p.token}})[0], nil)
		delete(inFlight, k)
	}
	check(-1, "final put ends")
}
