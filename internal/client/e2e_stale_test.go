package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// TestStaleSocketsSwept: a provider process that dies without teardown
// leaves its fd-exchange socket behind; the next provider to start in the
// socket directory removes it, under whatever name it was, and leaves the
// socket of a live provider alone.
func TestStaleSocketsSwept(t *testing.T) {
	if simtest.Role() == "provider" {
		runProvider(t)
		return
	}
	addr := startMaster(t, master.Config{MinClientTTL: 100 * time.Millisecond})
	sockets := t.TempDir()
	spawn := func(name string) *simtest.Child {
		c := simtest.Spawn(t, t.Name(), "provider", simtest.Options{Config: &sim.Config{}, Timeout: time.Minute,
			Env: []string{envMaster + "=" + addr, envSocket + "=" + sockets, envName + "=" + name}})
		if m := c.Recv(); m != "ready" {
			t.Fatal(m)
		}
		return c
	}
	sock := func(name string) string { return filepath.Join(sockets, "kvfabric-"+name+".sock") }
	// Older than client.StaleSocketAge, as after a while.
	age := func(p string) {
		old := time.Now().Add(-time.Minute)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	dead, live := spawn("dead-1234"), spawn("live-5678")
	dead.Send("crash")
	dead.Wait()
	for _, name := range []string{"dead-1234", "live-5678"} {
		age(sock(name))
	}
	next := spawn("next-9012")
	if _, err := os.Stat(sock("dead-1234")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket of the dead provider after the next one started: %v; want it removed", err)
	}
	if _, err := os.Stat(sock("live-5678")); err != nil {
		t.Fatalf("socket of the live provider: %v", err)
	}
	for _, c := range []*simtest.Child{live, next} {
		c.Send("quit")
		if m := c.Recv(); m != "closed" {
			t.Fatal(m)
		}
		c.Wait()
	}
	ents, err := os.ReadDir(sockets)
	if err != nil || len(ents) != 0 {
		t.Fatalf("socket directory after every provider closed: %v, %v", ents, err)
	}
}
