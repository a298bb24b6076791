package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/master"
)

// The multi-process tests run the master in the test process (over real
// gRPC on loopback) and the provider and consumers as child processes of
// the same test binary, each with its own simulated driver.

const (
	envMaster = "KVFABRIC_E2E_MASTER"
	envSocket = "KVFABRIC_E2E_SOCKETS"
	envName   = "KVFABRIC_E2E_NAME"
	// envTTL overrides a child's registration TTL (a time.Duration; 1s
	// when unset).
	envTTL = "KVFABRIC_E2E_TTL"
	// envDebug, when set (in the test's environment), makes the master and
	// every child log at debug level to stderr (a child's stderr shows when
	// it fails).
	envDebug = "KVFABRIC_E2E_DEBUG"
	// envParts, when set, makes a worker split its batches into that many
	// parts (client.Options.BatchParts) of pipeline chunks of 4 keys, so
	// that the real-process tests cover the split path on any machine.
	envParts = "KVFABRIC_E2E_BATCH_PARTS"
	// envStream, set to a number of keys, makes a worker's put loop feed
	// its batches as put streams in pieces of that many keys, a chunk of 4
	// keys at a time and one part.
	envStream = "KVFABRIC_E2E_PUT_STREAM"
	// envPacked, set to a number of bytes, makes a worker's values that
	// size each (packedValue) and lays its keys' buffers back to back, so
	// that the Store merges the copies of keys placed one after another
	// (copyRuns) — the real-process tests then cover merged copies.
	envPacked = "KVFABRIC_E2E_PACKED"
	// envRegions, set to a number of regions R (2 to 64, a power of two),
	// makes a worker scatter every key's buffer over R regions, region j of
	// key i in piece j*bufKeys+i of its buffer (vLLM's layer-major KV
	// layout), for its puts and its gets: the real-process tests then cover
	// multi-region keys, whose batch gets split over parts by regions.
	envRegions = "KVFABRIC_E2E_REGIONS"
)

// value is the deterministic content of key: any process can check it.
func value(key string) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, 77))
	b := make([]byte, 1+rng.IntN(200<<10))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// packedValue is key's value of exactly n bytes (envPacked), derived
// from the key as value is.
func packedValue(key string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(h.Sum64(), 78))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func startMaster(t *testing.T, mcfg master.Config) string {
	t.Helper()
	if os.Getenv(envDebug) != "" {
		mcfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	svc, err := master.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	return lis.Addr().String()
}

// childStore opens this child's Store from the environment the parent set.
func childStore(t *testing.T, extra map[string]any) (*client.Store, cuda.Driver) {
	t.Helper()
	s := openChild(t, extra, client.Options{})
	drv, _ := s.Driver()
	return s, drv
}

// openChild opens this child's Store with opts (ClientID and ClientTTL come
// from the environment).
func openChild(t *testing.T, extra map[string]any, opts client.Options) *client.Store {
	t.Helper()
	m := map[string]any{"driver": "sim", "master_server_addr": os.Getenv(envMaster), "socket_dir": os.Getenv(envSocket)}
	for k, v := range extra {
		m[k] = v
	}
	cfg, err := config.FromMap(m)
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientID, opts.ClientTTL = os.Getenv(envName), time.Second
	if os.Getenv(envDebug) != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if v := os.Getenv(envTTL); v != "" {
		if opts.ClientTTL, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	s, err := client.Open(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runConsumer serves the parent's commands: "put <prefix> <n>", "get
// <prefix> <n>" (verify every byte), "gone <prefix> <n>" (every key must be
// not found — never old bytes), "quit".
func runConsumer(t *testing.T) {
	s, drv := childStore(t, nil)
	ctx := context.Background()
	buf, err := drv.MemAlloc(s.Context(), 256<<10*64)
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := simtest.Recv()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(msg)
		if f[0] == "quit" {
			break
		}
		n, _ := strconv.Atoi(f[2])
		keys := make([]string, n)
		regions := make([][]client.Region, n)
		vals := make([][]byte, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/%d", f[1], i)
			vals[i] = value(keys[i])
			regions[i] = client.Bytes(uintptr(buf)+uintptr(i*(256<<10)), uint64(len(vals[i])))
		}
		var fail string
		switch f[0] {
		case "put":
			for i, v := range vals {
				if err := drv.MemcpyHtoD(s.Context(), buf+cuda.DevicePtr(i*(256<<10)), v); err != nil {
					t.Fatal(err)
				}
			}
			for i, err := range s.BatchPut(ctx, keys, regions, 0, client.PutOptions{}) {
				if err != nil {
					fail = fmt.Sprintf("put %s: %v", keys[i], err)
					break
				}
			}
		case "get", "gone":
			for i := range regions {
				regions[i] = client.Bytes(uintptr(buf)+uintptr(i*(256<<10)), 256<<10)
				if err := drv.MemcpyHtoD(s.Context(), buf+cuda.DevicePtr(i*(256<<10)), make([]byte, 256<<10)); err != nil {
					t.Fatal(err)
				}
			}
			sizes, errs := s.BatchGet(ctx, keys, regions, 0)
			for i := range keys {
				if f[0] == "gone" {
					if !errors.Is(errs[i], client.ErrNotFound) {
						fail = fmt.Sprintf("get %s after provider restart: %d bytes, err %v; want not found", keys[i], sizes[i], errs[i])
						break
					}
					continue
				}
				if errs[i] != nil {
					fail = fmt.Sprintf("get %s: %v", keys[i], errs[i])
					break
				}
				got := make([]byte, sizes[i])
				if err := drv.MemcpyDtoH(s.Context(), got, buf+cuda.DevicePtr(i*(256<<10))); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, vals[i]) {
					fail = fmt.Sprintf("get %s: bytes differ (%d bytes)", keys[i], sizes[i])
					break
				}
			}
		}
		if fail != "" {
			simtest.Send("fail " + fail)
			continue
		}
		simtest.Send("ok")
	}
	if err := drv.MemFree(s.Context(), buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.Send("closed")
}

// runProvider mounts an EGM pool and waits: "quit" closes it cleanly,
// "crash" exits without any teardown (the process dies).
func runProvider(t *testing.T) {
	s, drv := childStore(t, map[string]any{"global_segment_size": "24MiB", "enable_egm_store_pool": true, "max_mr_size": "8MiB"})
	simtest.Send("ready")
	msg, err := simtest.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg == "crash" {
		os.Exit(0) // no teardown: the kernel closes fds, consumers keep their mappings
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, drv)
	simtest.Send("closed")
}

func expectOK(t *testing.T, c *simtest.Child, what string) {
	t.Helper()
	if m := c.Recv(); m != "ok" {
		t.Fatalf("%s: %s", what, m)
	}
}

func TestMultiProcess(t *testing.T) {
	switch simtest.Role() {
	case "consumer":
		runConsumer(t)
		return
	case "provider":
		runProvider(t)
		return
	}
	addr := startMaster(t, master.Config{LeaseTTL: 500 * time.Millisecond, MinClientTTL: 100 * time.Millisecond})
	sockets := t.TempDir()
	simCfg := &sim.Config{}
	env := func(name string) []string {
		return []string{envMaster + "=" + addr, envSocket + "=" + sockets, envName + "=" + name}
	}
	spawn := func(role, name string) *simtest.Child {
		return simtest.Spawn(t, t.Name(), role, simtest.Options{Config: simCfg, Env: env(name), Timeout: 2 * time.Minute})
	}

	prov := spawn("provider", "provider-a")
	if m := prov.Recv(); m != "ready" {
		t.Fatal(m)
	}
	c1, c2 := spawn("consumer", "consumer-1"), spawn("consumer", "consumer-2")

	// Concurrent consumers put disjoint keys, then each reads both sets.
	c1.Send("put one 40")
	c2.Send("put two 40")
	expectOK(t, c1, "consumer 1 put")
	expectOK(t, c2, "consumer 2 put")
	c1.Send("get two 40")
	c2.Send("get one 40")
	expectOK(t, c1, "consumer 1 reads consumer 2's keys")
	expectOK(t, c2, "consumer 2 reads consumer 1's keys")

	// The provider dies without teardown and restarts under the same name:
	// same segment ids, new generations. Consumers that mapped the old
	// allocations must never read old bytes through them.
	prov.Send("crash")
	prov.Wait()
	prov = spawn("provider", "provider-a")
	if m := prov.Recv(); m != "ready" {
		t.Fatal(m)
	}
	c1.Send("gone one 40")
	expectOK(t, c1, "old keys after provider restart")
	c1.Send("put three 30")
	expectOK(t, c1, "put into the restarted provider")
	c2.Send("get three 30")
	expectOK(t, c2, "get from the restarted provider (remapped)")

	quit(t, c1)
	quit(t, c2)
	quit(t, prov)

	// Nothing is left mounted once every provider closed.
	mc, err := master.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	segs, err := mc.ListSegments(context.Background())
	if err != nil || len(segs) != 0 {
		t.Fatalf("segments left: %d (%v)", len(segs), err)
	}
}
