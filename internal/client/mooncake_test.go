package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestTenants: two Stores of different tenants (and one of the default
// namespace) on one master use the same key names without seeing each
// other's objects; removals are scoped to the tenant; keys starting with
// NUL are refused (issue 12: Mooncake's tenant_id).
func TestTenants(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	open := func(id, tenant string) *client.Store {
		s, err := client.Open(ctx, cfgFor(t, map[string]any{"tenant": tenant}), client.Options{Driver: e.drv, Master: e.mc, ClientID: id})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := open("ta", "alpha"), open("tb", "beta")
	def := e.cons
	for i, s := range []*client.Store{a, b, def} {
		if err := s.PutBytes(ctx, "k", []byte{byte('a' + i)}, client.PutOptions{}); err != nil {
			t.Fatalf("store %d put: %v", i, err)
		}
		if err := s.PutBytes(ctx, "only-"+string(rune('a'+i)), []byte{1}, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []*client.Store{a, b, def} {
		got, err := s.GetBytes(ctx, "k")
		if err != nil || !bytes.Equal(got, []byte{byte('a' + i)}) {
			t.Fatalf("store %d reads %q (%v): another tenant's value", i, got, err)
		}
		ex, err := s.BatchExists(ctx, []string{"only-a", "only-b", "only-c"}, false)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range ex {
			if v != (i == j) {
				t.Fatalf("store %d: exists(only-%c) = %v", i, 'a'+j, v)
			}
		}
	}
	if n, err := a.RemoveAll(ctx, false); err != nil || n != 2 {
		t.Fatalf("tenant RemoveAll = %d, %v; want its 2 keys", n, err)
	}
	if n, err := def.RemoveMatching(ctx, "^only", false); err != nil || n != 1 {
		t.Fatalf("default RemoveMatching(^only) = %d, %v; want 1", n, err)
	}
	if _, err := b.GetBytes(ctx, "k"); err != nil {
		t.Fatalf("beta's key gone after others' removals: %v", err)
	}
	if err := def.PutBytes(ctx, "\x00beta\x00k", []byte{9}, client.PutOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("put of a NUL-prefixed key: %v, want ErrInvalidArgument", err)
	}
	for _, s := range []*client.Store{a, b} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e.close()
}

// TestUpsertRangesReplicas: Upsert replaces a value (and is refused
// without it), BatchGetRanges copies exactly the ranges asked for and
// refuses ranges past the end, Replicas describes the object, and an exist
// check with lease blocks a plain Remove.
func TestUpsertRangesReplicas(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	v1 := []byte("0123456789abcdef")
	v2 := []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	if err := e.cons.PutBytes(ctx, "k", v1, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cons.PutBytes(ctx, "k", v2, client.PutOptions{}); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("put over an existing key: %v", err)
	}
	if err := e.cons.PutBytes(ctx, "k", v2, client.PutOptions{Upsert: true, SoftPin: true, SoftPinTTL: time.Second}); err != nil {
		t.Fatalf("upsert: %v", err)
	}
	if got, err := e.cons.GetBytes(ctx, "k"); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("after upsert: %q %v", got, err)
	}

	dst := devBuf(t, e, 64)
	spans := [][]client.Span{
		{{Dst: client.Region{Ptr: uintptr(dst), Len: 3}, Src: 1}, {Dst: client.Region{Ptr: uintptr(dst) + 8, Len: 4}, Src: 22}},
		{{Dst: client.Region{Ptr: uintptr(dst) + 16, Len: 4}, Src: 23}}, // past the end
		{{Dst: client.Region{Ptr: uintptr(dst) + 24, Len: 1}, Src: 0}},
	}
	errs := e.cons.BatchGetRanges(ctx, []string{"k", "k", "missing"}, spans, 0)
	if errs[0] != nil || !errors.Is(errs[1], client.ErrInvalidArgument) || !errors.Is(errs[2], client.ErrNotFound) {
		t.Fatalf("ranges: %v", errs)
	}
	got := readBack(t, e, dst, 24)
	if string(got[0:3]) != "BCD" || string(got[8:12]) != "WXYZ" || !bytes.Equal(got[16:20], make([]byte, 4)) {
		t.Fatalf("ranges copied %q", got)
	}

	infos, rerrs := e.cons.Replicas(ctx, []string{"k", "missing"})
	if rerrs[0] != nil || infos[0].Size != uint64(len(v2)) || len(infos[0].Replicas) != 1 ||
		infos[0].Replicas[0].Segment.Owner != "prov" || !errors.Is(rerrs[1], client.ErrNotFound) {
		t.Fatalf("replicas: %+v %v", infos, rerrs)
	}
	// Replicas released its lease; an exist check with lease takes one.
	if ex, err := e.cons.BatchExists(ctx, []string{"k"}, true); err != nil || !ex[0] {
		t.Fatal(ex, err)
	}
	if err := e.cons.Remove(ctx, "k", false); !errors.Is(err, client.ErrHasLease) {
		t.Fatalf("remove after a leasing exist check: %v, want ErrHasLease", err)
	}
	if err := e.cons.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	e.close()
}
