package master

import (
	"testing"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// getCarrying is e's GetReplicas of keys carrying the release of ids
// (ReleaseCarry); it returns the results, the call's error and whether
// the master took the releases.
func getCarrying(e *env, keys []string, ids ...uint64) ([]GetResult, error, bool) {
	c := &ReleaseCarry{IDs: ids}
	res, err := e.c.GetReplicas(WithReleases(e.ctx, c), keys)
	return res, err, c.Released
}

// TestGetReplicasCarriesReleases: a GetReplicas carrying lease ids ends
// them as ReleaseLeases would — on every transport, leaving the leases it
// grants held (also when it carries an earlier lease of the key it reads),
// ignoring unknown and repeated ids — and says so; a call
// that fails ends none and says so, so that its caller still releases
// them. It fails if a transport drops the ids or the answer, or if the
// Service releases before or without a successful lookup.
func TestGetReplicasCarriesReleases(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch = 4
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		p := e.register("p1", "host-a", 0, 0)
		e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
		e.put("k", 4096)
		e.put("j", 4096)
		rk := e.get("k")
		held := e.svc.rd.leasesHeld()

		// A get of j carries k's lease: k is free to remove plainly, j
		// holds its new lease.
		res, err, released := getCarrying(e, []string{"j"}, rk.LeaseID)
		if err != nil || res[0].Err != nil || !released {
			t.Fatalf("get of j carrying k's lease: %+v, %v, released %v", res, err, released)
		}
		if h := e.svc.rd.leasesHeld(); h != held {
			t.Fatalf("after the carry: %d leases held, want %d (k's ended, j's granted)", h, held)
		}
		wantErr(t, "Remove of k after its carried release", e.c.Remove(e.ctx, []string{"k"}, false)[0], nil)
		wantErr(t, "Remove of j while its reader holds its lease", e.c.Remove(e.ctx, []string{"j"}, false)[0], ErrHasLease)

		// Reading j again while carrying j's earlier lease: the carried
		// lease ends, the new one holds j.
		rj := res[0]
		res, err, released = getCarrying(e, []string{"j"}, rj.LeaseID, rj.LeaseID, 12345)
		if err != nil || res[0].Err != nil || !released || res[0].LeaseID == rj.LeaseID {
			t.Fatalf("get of j carrying its own earlier lease (repeated) and an unknown id: %+v, %v, released %v", res, err, released)
		}
		wantErr(t, "Remove of j under its new lease", e.c.Remove(e.ctx, []string{"j"}, false)[0], ErrHasLease)

		// A call that fails (a batch over MaxBatch) ends nothing and says
		// so: the caller still owes the release.
		cur := res[0].LeaseID
		_, err, released = getCarrying(e, []string{"a", "b", "c", "d", "e"}, cur)
		if err == nil || released {
			t.Fatalf("failed get carrying j's lease: %v, released %v", err, released)
		}
		wantErr(t, "Remove of j after a failed carry", e.c.Remove(e.ctx, []string{"j"}, false)[0], ErrHasLease)

		// A carry on a get of a missing key still ends the leases: the
		// lookup succeeded.
		res, err, released = getCarrying(e, []string{"missing"}, cur)
		if err != nil || !released {
			t.Fatalf("get of a missing key carrying j's lease: %+v, %v, released %v", res, err, released)
		}
		wantErr(t, "get of a missing key", res[0].Err, ErrNotFound)
		wantErr(t, "Remove of j after its carried release", e.c.Remove(e.ctx, []string{"j"}, false)[0], nil)
		if h := e.svc.rd.leasesHeld(); h != 0 {
			t.Fatalf("%d leases held at the end, want 0", h)
		}
		if st := e.stats(); st.Objects != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("at the end: %d objects, %d bytes used", st.Objects, e.tierUsed(segment.TierDRAM))
		}
		// Taken: k's (1), j's repeated and an unknown id (3), j's (1).
		if n := counterValue(e.svc.met.carriedReleases); n != 5 {
			t.Fatalf("kvfabric_master_carried_lease_releases_total %v, want 5", n)
		}
	})
}

// TestGeneratedGetReplicasCarriesReleases: the generated gRPC handler (a
// server with interceptors serves GetReplicas through it) ends carried
// leases and answers leases_released as the hand codec's does.
func TestGeneratedGetReplicasCarriesReleases(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 64*MiB))
	e.put("k", 4096)
	e.put("j", 4096)
	rk := e.get("k")
	g := &grpcService{svc: e.svc}
	first, err := g.GetReplicas(e.ctx, &pb.GetReplicasRequest{Keys: []string{"j"}, ReleaseLeaseIds: []uint64{rk.LeaseID}})
	if err != nil || !first.LeasesReleased || len(first.Results) != 1 || first.Results[0].LeaseId == 0 {
		t.Fatalf("generated GetReplicas carrying k's lease: %+v, %v", first, err)
	}
	wantErr(t, "Remove of k after its carried release", e.c.Remove(e.ctx, []string{"k"}, false)[0], nil)
	second, err := g.GetReplicas(e.ctx, &pb.GetReplicasRequest{Keys: []string{"j"}})
	if err != nil || second.LeasesReleased || len(second.Results) != 1 {
		t.Fatalf("generated GetReplicas carrying nothing: %+v, %v", second, err)
	}
	release(t, e, second.Results[0].LeaseId)
	wantErr(t, "Remove of j while its first lease is held", e.c.Remove(e.ctx, []string{"j"}, false)[0], ErrHasLease)
	third, err := g.GetReplicas(e.ctx, &pb.GetReplicasRequest{Keys: []string{"nope"}, ReleaseLeaseIds: []uint64{first.Results[0].LeaseId}})
	if err != nil || !third.LeasesReleased {
		t.Fatalf("generated GetReplicas of a missing key carrying j's lease: %+v, %v", third, err)
	}
	wantErr(t, "Remove of j after its carried release", e.c.Remove(e.ctx, []string{"j"}, false)[0], nil)
	if h := e.svc.rd.leasesHeld(); h != 0 {
		t.Fatalf("%d leases held at the end, want 0", h)
	}
}
