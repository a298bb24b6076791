package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// serveMaster runs a master on addr ("127.0.0.1:0" for any port) and
// returns its address and a stop function.
func serveMaster(t *testing.T, addr string, cfg master.Config) (string, func()) {
	t.Helper()
	svc, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		_ = svc.Close()
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// TestMasterRestartRemountsAfterOldLeases: a master restarts on the same
// address knowing nothing. The provider registers again at once but mounts
// its segments only after max(lease TTL, TTL): a reader may still hold a
// lease the dead master granted on them, which the new one cannot know.
// Objects from before are gone, never stale; new puts and gets work. A
// lease of the dead master, still queued for release, rides on the first
// get to the new one, which ignores the unknown id.
func TestMasterRestartRemountsAfterOldLeases(t *testing.T) {
	const leaseTTL = 1500 * time.Millisecond
	t.Cleanup(client.SetReleaseDelay(time.Hour)) // releases go only by carries and flushes
	mcfg := master.Config{LeaseTTL: leaseTTL, MinClientTTL: 100 * time.Millisecond}
	addr, stop := serveMaster(t, "127.0.0.1:0", mcfg)
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(id string, m map[string]any) *client.Store {
		t.Helper()
		m["master_server_addr"] = addr
		s, err := client.Open(ctx, cfgFor(t, m), client.Options{Driver: drv, ClientID: id, ClientTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prov := open("prov", egmProvider("16MiB"))
	cons := open("cons", map[string]any{})
	if err := cons.PutBytes(ctx, "before", []byte("old"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cons.GetBytes(ctx, "before"); err != nil || string(got) != "old" { // its lease is queued
		t.Fatalf("get before the restart: %q, %v", got, err)
	}
	nsegs := len(prov.Pool().Segments())

	stop()
	restarted := time.Now()
	_, _ = serveMaster(t, addr, mcfg)
	mc, err := master.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	var mounted time.Time
	for deadline := restarted.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		segs, err := mc.ListSegments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) == nsegs {
			mounted = time.Now()
			break
		}
	}
	if mounted.IsZero() {
		t.Fatal("the provider did not mount its segments at the restarted master within 10s")
	}
	// The provider learns of the restart at its next heartbeat (≤ TTL/3)
	// and then waits max(lease TTL, TTL) = 1.5 s.
	if d := mounted.Sub(restarted); d < leaseTTL {
		t.Fatalf("segments mounted %v after the restart, before an old lease (%v) could have ended", d, leaseTTL)
	}
	t.Logf("segments back %v after the master restarted", mounted.Sub(restarted).Round(time.Millisecond))
	if _, err := cons.GetBytes(ctx, "before"); !errors.Is(err, client.ErrNotFound) { // carries the old lease
		t.Fatalf("object from before the restart: %v, want ErrNotFound", err)
	}
	want := bytes.Repeat([]byte("after"), 100)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err = cons.PutBytes(ctx, "after", want, client.PutOptions{})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("put after the restart: %v", err)
	}
	if got, err := cons.GetBytes(ctx, "after"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get after the restart: %d bytes, %v", len(got), err)
	}
	if err := cons.Remove(ctx, "after", false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*client.Store{cons, prov} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	simtest.AssertNoLeaks(t, drv)
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
}
