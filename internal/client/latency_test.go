package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// BenchmarkGetLatency is one 4 KiB get at a time (sim driver): the latency
// one engine request sees, a rung of the latency ladder (docs/perf/
// latency.md, "dev VM ladder"). The master is
//
//	embedded   in the Store
//	grpc       a master.Server in this process on TCP loopback
//	grpc-proc  a master.Server in a child process (this test binary) on TCP
//	           loopback, as `kvfabric master` is to a client process
//	fast-proc  the same with the hot calls over the master's fast path
//	fast-proc-nospin  the same with neither end spinning on its socket
//	           before it sleeps (master.FastPath.Spin, Server.SetFastSpin)
//
// -locked gets from a goroutine locked to its OS thread, as a get entering
// Go from a C thread (the C ABI, Python) does. The phases say where the
// time goes (means); p50-us and p99-us are over the individual gets.
//
// Over a remote master, the slowest 1 % of gets (those at or above p99)
// are told apart by what else happened while each ran (tail-*, fractions
// of those gets): tail-spinmiss, its client waited out a whole spin for
// the answer (fast-proc); tail-release, a background lease release call
// was in flight; tail-gc, this process's garbage collector finished a
// cycle. tail-none is the fraction with none of these.
func BenchmarkGetLatency(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc", "grpc-proc", "fast-proc", "fast-proc-nospin"} {
		for _, thread := range []string{"", "-locked"} {
			b.Run(kind+thread, func(b *testing.B) {
				benchGetLatency(b, kind, thread != "")
			})
		}
	}
}

func benchGetLatency(b *testing.B, kind string, locked bool) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cfg := map[string]any{"global_segment_size": "64MiB", "enable_egm_store_pool": true, "max_mr_size": "64MiB",
		"driver": "sim", "socket_dir": b.TempDir()}
	var mc master.Client
	switch kind {
	case "embedded":
		svc, err := master.New(master.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer svc.Close()
		mc = master.NewEmbedded(svc)
	case "grpc":
		_, mc = grpcMaster(b, master.Config{})
	case "grpc-proc", "fast-proc", "fast-proc-nospin":
		// fast-proc: the hot calls over the master's fast path, from the
		// Store's RegisterClient on.
		fp := master.FastPath{Off: kind == "grpc-proc"}
		if kind == "fast-proc-nospin" {
			fp.Spin = -1
		}
		if mc, err = master.DialFast(ctx, startMasterProcess(b, kind == "fast-proc-nospin"), fp); err != nil {
			b.Fatal(err)
		}
	}
	defer mc.Close()
	raw := mc
	var rel *countReleases
	if kind != "embedded" {
		rel = &countReleases{Client: mc}
		mc = rel
	}
	c, err := config.FromMap(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := client.Open(ctx, c, client.Options{Driver: drv, Master: mc, ClientID: "lat"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	buf, err := drv.MemAlloc(s.Context(), 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer drv.MemFree(s.Context(), buf)
	r := client.Bytes(uintptr(buf), 4096)
	if err := s.Put(ctx, "k", r, 0, client.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	_, before := s.Phases()
	var relBefore int64
	if rel != nil {
		relBefore = rel.calls.Load()
	}
	lat := make([]time.Duration, 0, 1<<16)
	var tags []getTags // remote masters: what each get overlapped
	gcs := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	misses := func() uint64 { st, _ := master.Transports(raw); return st.SpinMisses }
	start := time.Now()
	for b.Loop() {
		var tg getTags
		if rel != nil {
			metrics.Read(gcs)
			tg.gc, tg.miss, tg.rel = gcs[0].Value.Uint64(), misses(), rel.calls.Load()
			tg.relBusy = rel.inFlight.Load() > 0
		}
		t0 := time.Now()
		if _, err := s.Get(ctx, "k", r, 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if rel != nil {
			metrics.Read(gcs)
			tg.gc, tg.miss = gcs[0].Value.Uint64()-tg.gc, misses()-tg.miss
			tg.relBusy = tg.relBusy || rel.inFlight.Load() > 0 || rel.calls.Load() != tg.rel
			tags = append(tags, tg)
		}
	}
	total := time.Since(start)
	if rel != nil {
		reportTail(b, lat, tags)
	}
	_, g := s.Phases()
	g = g.Sub(before)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	per := func(d time.Duration) float64 { return us(d) / float64(g.Calls) }
	b.ReportMetric(per(g.Check), "check-us")
	b.ReportMetric(per(g.Meta), "meta-us")
	b.ReportMetric(per(g.Resolve), "resolve-us")
	b.ReportMetric(per(g.Copy), "copy-us")
	b.ReportMetric(per(total), "total-us")
	slices.Sort(lat)
	b.ReportMetric(us(lat[len(lat)/2]), "p50-us")
	b.ReportMetric(us(lat[(len(lat)-1)*90/100]), "p90-us")
	b.ReportMetric(us(lat[(len(lat)-1)*99/100]), "p99-us")
	if rel != nil {
		// Lease release calls (background) per get.
		b.ReportMetric(float64(rel.calls.Load()-relBefore)/float64(g.Calls), "releases/op")
	}
	if st, ok := master.Transports(raw); ok && kind != "grpc-proc" && (st.GRPC != 0 || st.Fast == 0) {
		b.Fatalf("%s: transports %+v, want every hot call over the fast path", kind, st)
	} else if ok && kind == "fast-proc-nospin" && st.SpinHits+st.SpinMisses != 0 {
		b.Fatalf("%s: transports %+v, want no spinning", kind, st)
	} else if ok && kind == "fast-proc" {
		b.ReportMetric(float64(st.SpinHits)/float64(st.Fast), "spin-hits/call")
	}
}

// getTags is what else happened while one get ran (BenchmarkGetLatency):
// gc, this process's GC cycles ended; miss, its client's fast path spins
// that ended in a sleep; rel (while it runs: release calls started before
// it) and relBusy, whether a lease release call was in flight.
type getTags struct {
	gc, miss uint64
	rel      int64
	relBusy  bool
}

// reportTail reports the fractions of the gets at or above p99 (lat[i],
// tagged by tags[i]) that overlapped each of tags' events (see
// BenchmarkGetLatency).
func reportTail(b *testing.B, lat []time.Duration, tags []getTags) {
	b.Helper()
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	p99 := sorted[(len(sorted)-1)*99/100]
	var n, miss, rel, gc, none int
	for i, d := range lat {
		if d < p99 {
			continue
		}
		t := tags[i]
		n++
		miss += b2i(t.miss > 0)
		rel += b2i(t.relBusy)
		gc += b2i(t.gc > 0)
		none += b2i(t.miss == 0 && !t.relBusy && t.gc == 0)
	}
	f := func(k int) float64 { return float64(k) / float64(n) }
	b.ReportMetric(f(miss), "tail-spinmiss")
	b.ReportMetric(f(rel), "tail-release")
	b.ReportMetric(f(gc), "tail-gc")
	b.ReportMetric(f(none), "tail-none")
}

func b2i(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// countReleases counts the ReleaseLeases calls made through it and the
// lease ids they carry (calls counts them as they begin); inFlight counts
// those not yet returned.
type countReleases struct {
	master.Client
	calls, ids atomic.Int64
	inFlight   atomic.Int64
}

func (m *countReleases) ReleaseLeases(ctx context.Context, ids []uint64) error {
	m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	m.calls.Add(1)
	m.ids.Add(int64(len(ids)))
	return m.Client.ReleaseLeases(ctx, ids)
}

// envLatencyMaster makes TestLatencyMasterProcess serve a master on its
// value (host:port); envLatencyNoSpin set, with no fast path spin;
// envLatencyLeaseTTL, with that lease TTL (a time.Duration).
const (
	envLatencyMaster   = "KVFABRIC_LATENCY_MASTER"
	envLatencyNoSpin   = "KVFABRIC_LATENCY_NOSPIN"
	envLatencyLeaseTTL = "KVFABRIC_LATENCY_LEASE_TTL"
)

// TestLatencyMasterProcess is the master process of BenchmarkGetLatency's
// grpc-proc rung, run by it as a child of the test binary; on its own it
// skips. It serves until its stdin is closed.
func TestLatencyMasterProcess(t *testing.T) {
	addr := os.Getenv(envLatencyMaster)
	if addr == "" {
		t.Skip("the master process of BenchmarkGetLatency")
	}
	var cfg master.Config
	if v := os.Getenv(envLatencyLeaseTTL); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		cfg.LeaseTTL = ttl
	}
	svc, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	flis, err := net.Listen("tcp", "127.0.0.1:0") // the fast path (fast-proc)
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	if os.Getenv(envLatencyNoSpin) != "" {
		if err := srv.SetFastSpin(0); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 2)
	go func() { done <- srv.Serve(lis, nil) }()
	if err := srv.ListenFast(flis); err != nil {
		t.Fatal(err)
	}
	go func() { done <- srv.ServeFast(flis, nil) }()
	fmt.Println("listening")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// startMasterProcess starts TestLatencyMasterProcess in a child process
// (its fast path spinning unless noSpin) and returns its address once it
// listens; the child ends with the benchmark.
func startMasterProcess(b *testing.B, noSpin bool) string {
	b.Helper()
	var env []string
	if noSpin {
		env = append(env, envLatencyNoSpin+"=1")
	}
	addr, _ := masterProcess(b, env...)
	return addr
}

// masterProcess starts TestLatencyMasterProcess in a child process with
// env added to its environment, and returns its address once it listens
// and the process (to signal it); the child ends with the test, when its
// stdin closes.
func masterProcess(tb testing.TB, env ...string) (string, *os.Process) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := lis.Addr().String() // free until the child listens on it
	_ = lis.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLatencyMasterProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envLatencyMaster+"="+addr), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "listening" {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return addr, cmd.Process
		}
	}
	tb.Fatalf("master process exited before listening")
	return "", nil
}

// TestRemoteGetReleasesItsLease: with a master over gRPC, lease releases
// go out in the background, yet a get followed by a plain Remove of the
// same Store finds the key unleased (its removals flush the releases), and
// the leases of gets are gone without any removal shortly after.
func TestRemoteGetReleasesItsLease(t *testing.T) {
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, mc := grpcMaster(t, master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	// Releases reach the master 200 ms late: without the flush a plain
	// remove right after the get would find the lease.
	s, err := client.Open(ctx, cfgFor(t, egmProvider("16MiB")), client.Options{Driver: drv, Master: slowRelease{mc, 200 * time.Millisecond}, ClientID: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := drv.MemAlloc(s.Context(), 8192)
	if err != nil {
		t.Fatal(err)
	}
	r := client.Bytes(uintptr(buf), 8192)
	for _, k := range []string{"a", "b"} {
		if err := s.Put(ctx, k, r, 0, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, k, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(ctx, "a", false); err != nil {
		t.Fatalf("plain remove right after this Store's get: %v", err)
	}
	// "b" is released in the background: another client's plain remove
	// succeeds once it has gone out (well within a second).
	other := master.NewEmbedded(svc)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := other.Remove(ctx, []string{"b"}, false)[0]
		if err == nil {
			break
		}
		if !errors.Is(err, master.ErrHasLease) || time.Now().After(deadline) {
			t.Fatalf("remove of b by another client: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := drv.MemFree(s.Context(), buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := svc.Stats(ctx)
	if err != nil || st.Objects != 0 {
		t.Fatalf("after close: %+v %v", st, err)
	}
}

// slowRelease delays every ReleaseLeases by d.
type slowRelease struct {
	master.Client
	d time.Duration
}

func (m slowRelease) ReleaseLeases(ctx context.Context, ids []uint64) error {
	time.Sleep(m.d)
	return m.Client.ReleaseLeases(ctx, ids)
}

// oldMaster is a master that predates carried releases: its GetReplicas
// ignores them (master.ReleaseCarry stays unreleased). carries counts the
// gets that carried some.
type oldMaster struct {
	master.Client
	carries *atomic.Int64
}

func (m oldMaster) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	if c := master.ReleasesFrom(ctx); c != nil && len(c.IDs) > 0 {
		m.carries.Add(1)
	}
	return m.Client.GetReplicas(master.WithReleases(ctx, nil), keys)
}

// TestRemoteReleasesAreBatched: with a master that does not take carried
// releases, the lease releases of back-to-back gets go out together — none
// before the delay while fewer than a batch are queued, all of them at a
// plain Remove of this Store (which still succeeds), a full batch at once
// without waiting, and the rest at Close. (The first carry the master
// ignores pauses carrying, and its ids go back on the queue.)
func TestRemoteReleasesAreBatched(t *testing.T) {
	var carries atomic.Int64
	var rel *countReleases
	wrap := func(mc master.Client) master.Client {
		rel = &countReleases{Client: oldMaster{mc, &carries}}
		return rel
	}
	e := openCarry(t, carryOpts{wrap: wrap}, "batched", "a", "b")
	ctx := context.Background()
	gets := func(key string, n int) {
		t.Helper()
		for range n {
			e.get(t, key)
		}
	}
	const n = 50
	gets("a", n)
	time.Sleep(20 * time.Millisecond) // a release sent per get would be out by now
	if c := rel.calls.Load(); c != 0 {
		t.Fatalf("%d release calls before the delay with %d gets queued", c, n)
	}
	if c := carries.Load(); c != 1 {
		t.Fatalf("%d gets carried releases to a master that ignores them, want 1 (then carrying pauses)", c)
	}
	if err := e.s.Remove(ctx, "a", false); err != nil {
		t.Fatalf("plain remove after this Store's gets: %v", err)
	}
	if c, ids := rel.calls.Load(), rel.ids.Load(); c != 1 || ids != n {
		t.Fatalf("after the remove's flush: %d calls with %d ids, want 1 with %d", c, ids, n)
	}
	// A full batch goes out without a flush.
	gets("b", client.ReleaseBatch)
	deadline := time.Now().Add(10 * time.Second)
	for rel.calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c, ids := rel.calls.Load(), rel.ids.Load(); c != 2 || ids != n+client.ReleaseBatch {
		t.Fatalf("after a full batch: %d calls with %d ids, want 2 with %d", c, ids, n+client.ReleaseBatch)
	}
	gets("b", 3)
	e.close(t)
	if c, ids := rel.calls.Load(), rel.ids.Load(); c != 3 || ids != n+client.ReleaseBatch+3 {
		t.Fatalf("after Close: %d calls with %d ids, want 3 with %d", c, ids, n+client.ReleaseBatch+3)
	}
}

// grpcMaster starts a master Service with cfg, serves it over gRPC on
// loopback and dials it. Everything ends with the test: the client, then
// the server, then the Service.
func grpcMaster(tb testing.TB, cfg master.Config) (*master.Service, master.Client) {
	tb.Helper()
	svc, err := master.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { svc.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := master.NewServer(svc, nil)
	go srv.Serve(lis, nil)
	tb.Cleanup(func() { srv.Shutdown(context.Background()) })
	mc, err := master.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mc.Close() })
	return svc, mc
}
