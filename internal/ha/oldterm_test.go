package ha_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/ha"
)

// TestFailoverOldTermReader: a reader holds a lease granted by the old
// leader, its copy stalled (a held stream), when the leader is killed. The
// provider remounts its segment (same memory, same generation) at the new
// leader, and a writer puts a new object, which the new leader places where
// the old object was (the segment is empty in the new term). Only then does
// the reader's copy run. The reader must get its own object's bytes or
// ErrLeaseExpired — never the new object's bytes: the new leader places no
// put before its fence, which outlasts every lease the old leader granted.
//
// KVFABRIC_HA_BREAK=1 runs the masters without the fence, to show that
// this test catches it (it then fails: the reader gets the new bytes).
func TestFailoverOldTermReader(t *testing.T) {
	switch simtest.Role() {
	case "master":
		runMaster(t)
		return
	case "provider":
		runProvider(t)
		return
	}
	const leaseTTL = 3 * time.Second
	eps := startEtcdCluster(t, 1)
	etcdAddr := "etcd://" + strings.Join(eps, ",") + prefix
	sockets, err := os.MkdirTemp("", "kvf-ha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	simCfg := &sim.Config{}
	env := []string{envEtcdAddr + "=" + etcdAddr, envEndpoints + "=" + strings.Join(eps, ","), envSockets + "=" + sockets,
		envLease + "=" + leaseTTL.String(), envPool + "=8MiB"} // one segment: the new object lands where the old one was
	if os.Getenv("KVFABRIC_HA_BREAK") != "" {
		env = append(env, envNoFence+"=1")
		t.Log("masters run WITHOUT the put fence (KVFABRIC_HA_BREAK): this test should fail")
	}
	spawn := func(role, name string) *simtest.Child {
		return simtest.Spawn(t, t.Name(), role, simtest.Options{Config: simCfg, Env: append(env, envName+"="+name), Timeout: 3 * time.Minute})
	}
	masters := map[string]*simtest.Child{}
	for _, name := range []string{"m1", "m2"} {
		c := spawn("master", name)
		f := strings.Fields(c.Recv())
		if len(f) != 2 || f[0] != "ready" {
			t.Fatalf("master: %v", f)
		}
		masters[f[1]] = c
	}
	ctx := context.Background()
	mc, err := ha.Dial(ctx, etcdAddr, ha.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
		}
	}
	segs := func() int {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		s, err := mc.ListSegments(cctx)
		if err != nil {
			return -1
		}
		return len(s)
	}
	prov := spawn("provider", "prov")
	if m := prov.Recv(); m != "ready" {
		t.Fatal(m)
	}
	waitUntil("the provider's segment is mounted", func() bool { return segs() == 1 })

	drv, err := sim.New(*simCfg)
	if err != nil {
		t.Fatal(err)
	}
	open := func(id string) *client.Store {
		cfg, err := config.FromMap(map[string]any{"driver": "sim", "master_server_addr": etcdAddr, "socket_dir": sockets, "rpc_timeout": "3s"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := client.Open(ctx, cfg, client.Options{Driver: drv, ClientID: id, ClientTTL: clientTTL})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w, r := open("writer"), open("reader")
	const size = 64 << 10
	old, fresh := bytes.Repeat([]byte{0xAA}, size), bytes.Repeat([]byte{0xBB}, size)
	if err := w.PutBytes(ctx, "x", old, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	// The reader's get: lease granted now, copy stalled until release.
	buf, err := drv.MemAlloc(r.Context(), size)
	if err != nil {
		t.Fatal(err)
	}
	st, err := drv.StreamCreate(r.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	release := drv.HoldStream(st)
	type result struct {
		n   uint64
		err error
	}
	got := make(chan result, 1)
	granted := time.Now()
	go func() {
		n, err := r.Get(ctx, "x", client.Bytes(uintptr(buf), size), st)
		got <- result{n, err}
	}()
	time.Sleep(300 * time.Millisecond) // GetReplicas answered; the copy waits

	l := mc.Leader()
	killed := time.Now()
	if err := syscall.Kill(masters[l.Addr].Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	delete(masters, l.Addr)
	waitUntil("a new leader with the segment remounted", func() bool { return mc.Leader().Epoch > l.Epoch && segs() == 1 })

	// The writer's new object, at the new leader (retried through its
	// fence).
	var putErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if putErr = w.PutBytes(ctx, "y", fresh, client.PutOptions{}); putErr == nil {
			break
		}
	}
	if putErr != nil {
		t.Fatalf("put at the new leader: %v", putErr)
	}
	putAt := time.Now()
	release()
	res := <-got
	view := make([]byte, size)
	if err := drv.MemcpyDtoH(r.Context(), view, buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("lease granted %v before the kill (TTL %v); the new object was put %v after the kill; the reader's get: %d bytes, %v",
		killed.Sub(granted).Round(time.Millisecond), leaseTTL, putAt.Sub(killed).Round(time.Millisecond), res.n, res.err)
	switch {
	case res.err == nil && bytes.Equal(view, old):
	case res.err == nil && bytes.Equal(view, fresh):
		t.Errorf("the reader's get succeeded with the bytes of an object put in the new term, inside its old-term lease")
	case res.err == nil:
		t.Errorf("the reader's get succeeded with other bytes")
	case !errors.Is(res.err, client.ErrLeaseExpired):
		t.Errorf("the reader's get: %v, want its bytes or ErrLeaseExpired", res.err)
	}
	if got, err := w.GetBytes(ctx, "y"); err != nil || !bytes.Equal(got, fresh) {
		t.Errorf("the new object: %d bytes, %v", len(got), err)
	}
	if _, err := r.GetBytes(ctx, "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the old term's object at the new leader: %v, want not found", err)
	}

	// Teardown.
	if err := drv.StreamDestroy(r.Context(), st); err != nil {
		t.Fatal(err)
	}
	if err := drv.MemFree(r.Context(), buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*client.Store{w, r} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	prov.Send("quit")
	if m := prov.Recv(); m != "closed" {
		t.Fatal(m)
	}
	prov.Wait()
	for _, c := range masters {
		c.Send("quit")
		c.Recv()
		c.Wait()
	}
	simtest.AssertNoLeaks(t, drv)
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
}
