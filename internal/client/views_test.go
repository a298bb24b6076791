package client_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

func viewsHeld(t *testing.T, e *env) (total, cons int) {
	t.Helper()
	st, err := e.mc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.PerClient {
		if c.ID == "cons" {
			cons = c.Views
		}
	}
	return st.Views, cons
}

// TestViews: Acquire returns addresses the GPU reads the objects at, held
// past many lease TTLs while the Store renews them; a plain Remove is
// refused meanwhile and a forced one keeps the bytes until Release; the
// master counts the views; Release ends them (issue 15, item 1).
func TestViews(t *testing.T) {
	const ttl = 150 * time.Millisecond
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: ttl, ReapInterval: 10 * time.Millisecond})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	vals := map[string][]byte{}
	for _, k := range []string{"a", "b"} {
		v := make([]byte, 5000+rng.IntN(5000))
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		vals[k] = v
		if err := e.cons.PutBytes(ctx, k, v, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	views, err := e.cons.Acquire(ctx, []string{"a", "missing", "b"})
	if err != nil {
		t.Fatal(err)
	}
	objs := views.Objects()
	if len(objs) != 3 || !errors.Is(objs[1].Err, client.ErrNotFound) {
		t.Fatalf("views %+v: want 3, the second ErrNotFound", objs)
	}
	read := func(o client.View) []byte {
		t.Helper()
		b := make([]byte, o.Size)
		if err := e.drv.MemcpyDtoH(e.cons.Context(), b, o.Replicas[0].Addr); err != nil {
			t.Fatalf("read view of %q: %v", o.Key, err)
		}
		return b
	}
	for _, i := range []int{0, 2} {
		o := objs[i]
		if o.Err != nil || o.Size != uint64(len(vals[o.Key])) || len(o.Replicas) != 1 {
			t.Fatalf("view %d: %+v", i, o)
		}
		if !bytes.Equal(read(o), vals[o.Key]) {
			t.Fatalf("view of %q reads other bytes", o.Key)
		}
	}
	if total, cons := viewsHeld(t, e); total != 2 || cons != 2 {
		t.Fatalf("master shows %d views (%d of cons), want 2", total, cons)
	}
	// Held for many lease TTLs.
	time.Sleep(5 * ttl)
	if err := views.Err(); err != nil {
		t.Fatalf("views lost while held: %v", err)
	}
	if err := e.cons.Remove(ctx, "a", false); !errors.Is(err, client.ErrHasLease) {
		t.Fatalf("plain Remove of a held object: %v, want ErrHasLease", err)
	}
	if err := e.cons.Remove(ctx, "b", true); err != nil {
		t.Fatalf("forced Remove: %v", err)
	}
	// New objects fill the store; the removed object's range is not reused
	// while its view is held.
	for i := range 64 {
		_ = e.cons.PutBytes(ctx, "fill"+string(rune('A'+i%26))+string(rune('a'+i/26)), make([]byte, 200<<10), client.PutOptions{})
	}
	time.Sleep(2 * ttl)
	if !bytes.Equal(read(objs[2]), vals["b"]) {
		t.Fatal("a removed object's bytes changed while its view was held")
	}
	views.Release()
	views.Release() // idempotent
	if err := views.Err(); !errors.Is(err, client.ErrViewsReleased) {
		t.Fatalf("Err after Release: %v", err)
	}
	if total, _ := viewsHeld(t, e); total != 0 {
		t.Fatalf("master shows %d views after Release", total)
	}
	if err := e.cons.Remove(ctx, "a", false); err != nil {
		t.Fatalf("plain Remove after Release: %v", err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestViewsLost: a view whose segment drains is not renewed, so Err
// reports it and the provider's unmount goes through one TTL later; a
// view whose renewals stop (the Store's clock past the lease) reports
// ErrLeaseExpired; views still held at Close are released by it, leaking
// nothing.
func TestViewsLost(t *testing.T) {
	const ttl = 150 * time.Millisecond
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: ttl, ReapInterval: 10 * time.Millisecond})
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if err := e.cons.PutBytes(ctx, k, []byte("value of "+k), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	va, err := e.cons.Acquire(ctx, []string{"a"})
	if err != nil || va.Objects()[0].Err != nil {
		t.Fatalf("acquire: %v %v", err, va.Objects()[0].Err)
	}
	restore := client.SetTimeNow(func() time.Time { return time.Now().Add(time.Hour) })
	err = va.Err()
	restore()
	if !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("Err past the leases' end: %v, want ErrLeaseExpired", err)
	}
	va.Release()

	vb, err := e.cons.Acquire(ctx, []string{"b"})
	if err != nil || vb.Objects()[0].Err != nil {
		t.Fatalf("acquire: %v", err)
	}
	segs, err := e.mc.ListSegments(ctx)
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v", err)
	}
	var draining bool
	for _, d := range segs {
		if err := e.mc.UnmountSegment(ctx, d.Key()); errors.Is(err, master.ErrHasLease) {
			draining = true
		}
	}
	if !draining {
		t.Fatal("no segment refused its unmount while a view is held")
	}
	deadline := time.Now().Add(20 * ttl)
	for vb.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(ttl / 10)
	}
	if err := vb.Err(); !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("view on a draining segment: Err %v, want ErrLeaseExpired", err)
	}
	// Still held (lost, not released) at Close: Close releases it — its
	// mapping too, or the leak check below fails.
	e.close()
}

// TestRemoteViews: with the master over gRPC, a held view's lease is
// renewed across many TTLs (another client's plain remove is refused), the
// master counts it for this client, and Release ends it at once.
func TestRemoteViews(t *testing.T) {
	const ttl = 150 * time.Millisecond
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, mc := grpcMaster(t, master.Config{LeaseTTL: ttl, ReapInterval: 10 * time.Millisecond})
	ctx := context.Background()
	s, err := client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{Driver: drv, Master: mc, ClientID: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("view over grpc "), 100)
	if err := s.PutBytes(ctx, "k", val, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	views, err := s.Acquire(ctx, []string{"k"})
	if err != nil || views.Objects()[0].Err != nil {
		t.Fatalf("acquire: %v", err)
	}
	time.Sleep(6 * ttl)
	if err := views.Err(); err != nil {
		t.Fatalf("view lost while held over gRPC: %v", err)
	}
	other := master.NewEmbedded(svc)
	if err := other.Remove(ctx, []string{"k"}, false)[0]; !errors.Is(err, master.ErrHasLease) {
		t.Fatalf("another client's plain remove of a held object: %v, want ErrHasLease", err)
	}
	st, err := svc.Stats(ctx)
	if err != nil || st.Views != 1 || len(st.PerClient) != 1 || st.PerClient[0].Views != 1 {
		t.Fatalf("master stats %+v (%v): want 1 view of client remote", st, err)
	}
	got := make([]byte, len(val))
	if err := drv.MemcpyDtoH(s.Context(), got, views.Objects()[0].Replicas[0].Addr); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("read through the view: %v", err)
	}
	views.Release()
	if st, _ := svc.Stats(ctx); st.Views != 0 {
		t.Fatalf("views %d after Release", st.Views)
	}
	if err := other.Remove(ctx, []string{"k"}, false)[0]; err != nil {
		t.Fatalf("plain remove after Release: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
}
