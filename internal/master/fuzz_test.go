package master

import (
	"context"
	"errors"
	"testing"

	"github.com/kvfabric/kvfabric/internal/segment"
)

func fuzzService(t *testing.T) (*Service, string) {
	svc, err := New(Config{ReapInterval: -1, MaxKeyLen: 64, Clock: newManualClock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	reg, err := svc.RegisterClient(context.Background(), ClientInfo{ID: "p", Node: "h", NUMANode: -1, Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	return svc, reg.ID
}

// FuzzPutStart: a request the validator rejects gets ErrInvalid and
// changes nothing; an accepted one either succeeds or fails with a
// documented sentinel, and the allocator invariants hold.
func FuzzPutStart(f *testing.F) {
	f.Add("key", uint64(100), 1, uint8(0), false, int32(-1), int32(-1), "", "s0")
	f.Add("", uint64(0), -1, uint8(7), true, int32(-5), int32(3), "\xff", "\x00")
	f.Add("k", uint64(1<<40), 9, uint8(2), true, int32(0), int32(0), "p", "")
	f.Fuzz(func(t *testing.T, key string, size uint64, replicas int, tier uint8, only bool, numa, dev int32, client, seg string) {
		svc, owner := fuzzService(t)
		ctx := context.Background()
		for i, d := range []segment.Descriptor{
			desc("s0", owner, "h", segment.TierDRAM, 0, MiB),
			desc("s1", owner, "h", segment.TierHBM, 1, MiB),
		} {
			d.Generation += uint64(i)
			if err := svc.MountSegment(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		if client == "" {
			client = owner // a registered writer; others are ErrUnknownClient
		}
		req := PutStartReq{Key: key, Size: size, Replicas: replicas, Pin: only,
			Placement: Placement{Tier: segment.Tier(tier), TierOnly: only, Client: client, NUMANode: numa, Device: dev, Segments: []string{seg}}}
		before, _ := svc.Stats(ctx)
		res, err := svc.PutStart(ctx, []PutStartReq{req})
		if err != nil {
			t.Fatal(err)
		}
		verr := validatePutStart(&req, 64)
		after, _ := svc.Stats(ctx)
		switch e := res[0].Err; {
		case verr != nil:
			if !errors.Is(e, ErrInvalid) {
				t.Fatalf("validator says %v, PutStart says %v", verr, e)
			}
		case e == nil:
			if after.PendingPuts != before.PendingPuts+1 || len(res[0].Replicas) != max(replicas, 1) {
				t.Fatalf("accepted put not recorded: %+v", after)
			}
			for _, r := range res[0].Replicas {
				if r.Length < size || r.Offset+r.Length > r.Segment.Size {
					t.Fatalf("replica %+v out of bounds for size %d", r, size)
				}
			}
		case errors.Is(e, ErrNoSpace), errors.Is(e, ErrInvalid), errors.Is(e, ErrUnknownClient) && client != owner:
		default:
			t.Fatalf("unexpected error %v", e)
		}
		if res[0].Err != nil && (after.PendingPuts != before.PendingPuts || after.Tiers[0].Used != 0 || after.Tiers[1].Used != 0) {
			t.Fatalf("rejected put changed state: %+v → %+v", before, after)
		}
		svc.mu.Lock()
		defer svc.mu.Unlock()
		for _, sg := range svc.mu.segs {
			if err := sg.al.Check(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzMountSegment: descriptors the validator rejects are refused with
// ErrInvalid and mount nothing.
func FuzzMountSegment(f *testing.F) {
	f.Add("h/p/dram0/0", uint64(7), "h", uint8(1), int32(0), uint64(1<<20), uint8(2), "/run/s")
	f.Add("", uint64(0), "", uint8(9), int32(-1), uint64(0), uint8(0), "")
	f.Add("x\n", uint64(1), "\xff", uint8(2), int32(3), uint64(63), uint8(1), "")
	f.Fuzz(func(t *testing.T, id string, gen uint64, node string, tier uint8, loc int32, size uint64, kind uint8, sock string) {
		svc, owner := fuzzService(t)
		ctx := context.Background()
		d := segment.Descriptor{ID: id, Generation: gen, Node: node, Owner: owner, Tier: segment.Tier(tier),
			Location: loc, Size: size, Handle: segment.Handle{Kind: segment.HandleKind(kind), SocketPath: sock}}
		err := svc.MountSegment(ctx, d)
		verr := validateDescriptor(&d)
		segs, _ := svc.ListSegments(ctx)
		switch {
		case verr != nil || size < 64:
			if !errors.Is(err, ErrInvalid) || len(segs) != 0 {
				t.Fatalf("invalid descriptor (%v): Mount = %v, %d segments", verr, err, len(segs))
			}
		case err != nil:
			t.Fatalf("valid descriptor refused: %v", err)
		case len(segs) != 1 || segs[0] != d:
			t.Fatalf("mounted %v, want %v", segs, d)
		}
		// The wire form round-trips every valid descriptor exactly.
		if verr == nil && descFromPB(descToPB(&d)) != d {
			t.Fatalf("descriptor does not round-trip: %+v", d)
		}
	})
}

// FuzzKeys: key validation for the key-only calls agrees with validateKey
// and never changes state for a rejected key.
func FuzzKeys(f *testing.F) {
	f.Add("a", true)
	f.Add("", false)
	f.Add("\xff\xfe", true)
	f.Fuzz(func(t *testing.T, key string, force bool) {
		svc, _ := fuzzService(t)
		ctx := context.Background()
		verr := validateKey(key, 64)
		g, err := svc.GetReplicas(ctx, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		rm := svc.Remove(ctx, []string{key}, force)[0]
		end := svc.PutEnd(ctx, []PutRef{{Key: key, Token: 1}})[0]
		for _, e := range []error{g[0].Err, rm, end} {
			if verr != nil && !errors.Is(e, ErrInvalid) || verr == nil && !errors.Is(e, ErrNotFound) {
				t.Fatalf("key %q: validator %v, call %v", key, verr, e)
			}
		}
		_, err = svc.Exists(ctx, []string{key}, false)
		if (verr != nil) != errors.Is(err, ErrInvalid) {
			t.Fatalf("Exists(%q) = %v, validator %v", key, err, verr)
		}
	})
}
