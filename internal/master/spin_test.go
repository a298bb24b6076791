package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// setSpinSlots lets n waits of the process spin at once until restore
// (this machine may have too few CPUs for any by default).
func setSpinSlots(n int32) (restore func()) {
	old := spinLimit.Swap(n)
	return func() { spinLimit.Store(old) }
}

func TestSpinSlotsFor(t *testing.T) {
	for _, c := range []struct {
		procs int
		want  int32
	}{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {8, 2}, {16, 4}, {128, 32}} {
		if got := spinSlotsFor(c.procs); got != c.want {
			t.Errorf("spinSlotsFor(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}

// TestSpinSlotBound: no more waits spin at once than the limit; a freed
// slot is taken again.
func TestSpinSlotBound(t *testing.T) {
	defer setSpinSlots(2)()
	if spinning.Load() != 0 {
		t.Fatalf("%d waits spinning before the test", spinning.Load())
	}
	if !takeSpinSlot() || !takeSpinSlot() {
		t.Fatal("could not take the two slots")
	}
	if takeSpinSlot() {
		t.Fatal("took a third slot of two")
	}
	spinning.Add(-1)
	if !takeSpinSlot() {
		t.Fatal("could not take a freed slot")
	}
	spinning.Add(-2)
	defer setSpinSlots(0)()
	if takeSpinSlot() {
		t.Fatal("took a slot with a limit of 0")
	}
}

// TestSpinRecv: data already there is read by the spin (a hit); nothing
// there is a miss after the spin, and the slot is given back; an ended
// stream is left to the caller's own read; without a slot nothing spins.
func TestSpinRecv(t *testing.T) {
	defer setSpinSlots(1)()
	a, b := socketPair(t)
	var c spinCounts
	p := make([]byte, 16)
	if n, ok := spinRecv(a, p, time.Millisecond, &c); ok || n != 0 {
		t.Fatalf("spin on an empty socket: %d, %v", n, ok)
	}
	if c.hits.Load() != 0 || c.misses.Load() != 1 || spinning.Load() != 0 {
		t.Fatalf("after a miss: hits %d misses %d spinning %d", c.hits.Load(), c.misses.Load(), spinning.Load())
	}
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n, ok := spinRecv(a, p, time.Millisecond, &c); !ok || string(p[:n]) != "hello" {
		t.Fatalf("spin with data: %q, %v", p[:n], ok)
	}
	if c.hits.Load() != 1 || spinning.Load() != 0 {
		t.Fatalf("after a hit: hits %d spinning %d", c.hits.Load(), spinning.Load())
	}
	// Data written while spinning is found by it.
	go func() {
		time.Sleep(200 * time.Microsecond)
		_, _ = b.Write([]byte("late"))
	}()
	if n, ok := spinRecv(a, p, 5*time.Second, &c); !ok || string(p[:n]) != "late" {
		t.Fatalf("spin while data comes: %q, %v", p[:n], ok)
	}
	// No slot: no spin, no count.
	spinning.Add(1)
	if _, ok := spinRecv(a, p, time.Second, &c); ok || c.misses.Load() != 1 {
		t.Fatalf("spun without a slot (ok %v, misses %d)", ok, c.misses.Load())
	}
	spinning.Add(-1)
	// 0: off.
	if _, ok := spinRecv(a, p, 0, &c); ok || c.misses.Load() != 1 {
		t.Fatalf("spun with a spin of 0 (ok %v, misses %d)", ok, c.misses.Load())
	}
	// The peer closes: not a hit, not counted as a miss, slot given back.
	b.Close()
	if n, ok := spinRecv(a, p, time.Second, &c); ok || n != 0 || c.misses.Load() != 1 || spinning.Load() != 0 {
		t.Fatalf("spin on an ended stream: %d, %v, misses %d, spinning %d", n, ok, c.misses.Load(), spinning.Load())
	}
}

// socketPair returns the file descriptor of one end of a loopback TCP
// connection and the other end; both close when the test ends.
func socketPair(t *testing.T) (int, net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	a, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	f, err := a.(*net.TCPConn).File() // a blocking duplicate, as the client's socket is
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd()), b
}

// TestFastSpinCalls: with spinning on both ends (slots forced on this
// machine), every hot call's answer is the master's, over plaintext and
// TLS, and both ends found answers and requests while spinning (hits), so
// the spin's reads are the ones the calls used. An idle connection's spin
// ends in the netpoller (a miss), and shutdown is not held up by it.
func TestFastSpinCalls(t *testing.T) {
	newLeakCheck(t)
	defer setSpinSlots(4)()
	for _, withTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", withTLS), func(t *testing.T) {
			var r Client
			var srv *Server
			var svc *Service
			id := "w"
			if withTLS {
				a := newAuthEnv(t)
				a.fast = true
				svc, srv, id = a.svc, a.srv, "p1"
				r = a.dial("prov", "") // the default spin
			} else {
				var err error
				if svc, err = New(testConfig()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = svc.Close() })
				srv = NewServer(svc, nil)
				r = dialFast(t, serveFast(t, srv, nil), FastPath{Spin: 5 * time.Millisecond})
			}
			defer r.Close()
			ctx := context.Background()
			e := &env{t: t, svc: svc, c: r, ctx: ctx}
			w := e.register(id, "h", 0, 0)
			e.mount(desc(id+"/0", w, "h", segment.TierDRAM, 0, 64*MiB))
			for i := range 200 {
				key := fmt.Sprintf("k%d", i)
				res, err := r.PutStart(ctx, []PutStartReq{{Key: key, Size: uint64(64 * (i + 1)), Placement: Placement{Client: w, NUMANode: -1, Device: -1}}})
				if err != nil || res[0].Err != nil {
					t.Fatalf("PutStart %s: %v %+v", key, err, res)
				}
				if errs := r.PutEnd(ctx, []PutRef{{Key: key, Token: res[0].Token}}); errs[0] != nil {
					t.Fatalf("PutEnd %s: %v", key, errs[0])
				}
				got, err := r.GetReplicas(ctx, []string{key, "missing"})
				if err != nil || got[0].Err != nil || got[0].Size != uint64(64*(i+1)) || !errors.Is(got[1].Err, ErrNotFound) {
					t.Fatalf("GetReplicas %s: %v %+v", key, err, got)
				}
				if err := r.ReleaseLeases(ctx, []uint64{got[0].LeaseID}); err != nil {
					t.Fatal(err)
				}
			}
			st, _ := Transports(r)
			if st.GRPC != 0 || st.Fast == 0 {
				t.Fatalf("transports %+v: want every hot call over the fast path", st)
			}
			if st.SpinHits == 0 {
				t.Errorf("client: no answer was found while spinning (%+v)", st)
			}
			hits, _ := srv.FastSpinCounts()
			if hits == 0 {
				t.Errorf("master: no request was found while spinning")
			}
			// The idle connection's spin misses, then it sleeps.
			deadline := time.Now().Add(5 * time.Second)
			for _, m := srv.FastSpinCounts(); m == 0; _, m = srv.FastSpinCounts() {
				if time.Now().After(deadline) {
					t.Fatal("master: an idle connection's spin never ended in a miss")
				}
				time.Sleep(time.Millisecond)
			}
			t0 := time.Now()
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d > time.Second {
				t.Errorf("shutdown took %v with spinning connections", d)
			}
			t.Logf("client %+v; master hits/misses %v", st, fmt.Sprint(srv.FastSpinCounts()))
		})
	}
}

// spinServed serves a Service over gRPC and the fast path with the master's
// spin set to spin, and dials it with fp; all end with the test.
func spinServed(t *testing.T, spin time.Duration, fp FastPath) (*Server, *remote) {
	t.Helper()
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() }) // after the server's shutdown
	srv := NewServer(svc, nil)
	if err := srv.SetFastSpin(spin); err != nil {
		t.Fatal(err)
	}
	r := dialFast(t, serveFast(t, srv, nil), fp)
	t.Cleanup(func() { _ = r.Close() })
	return srv, r
}

// TestFastSpinOff: a spin of 0 on the master and a negative one on the
// client never spin, even with slots free.
func TestFastSpinOff(t *testing.T) {
	defer setSpinSlots(4)()
	srv, r := spinServed(t, 0, FastPath{Spin: -1})
	ctx := context.Background()
	for range 50 {
		if _, err := r.Exists(ctx, []string{"k"}, false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	st := r.Transports()
	h, m := srv.FastSpinCounts()
	if st.Fast == 0 || st.SpinHits+st.SpinMisses+h+m != 0 {
		t.Fatalf("spinning with spin off: client %+v, master %d/%d", st, h, m)
	}
}

// TestFastSpinBadInput: spins out of range are refused, naming the value,
// and leave the server's setting and the client unmade.
func TestFastSpinBadInput(t *testing.T) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := NewServer(svc, nil)
	if err := srv.SetFastSpin(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Microsecond, 11 * time.Millisecond} {
		err := srv.SetFastSpin(d)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), d.String()) {
			t.Errorf("SetFastSpin(%v): %v", d, err)
		}
	}
	if got := srv.fast.spinFor(); got != time.Millisecond {
		t.Errorf("after refused settings the spin is %v, want 1ms", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := openFDs()
	if _, err := DialFast(ctx, "127.0.0.1:1", FastPath{Spin: time.Second}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "1s") {
		t.Errorf("DialFast with a spin of 1s: %v", err)
	}
	if after := openFDs(); after > before {
		t.Errorf("a refused DialFast left %d file descriptors open", after-before)
	}
}

// TestFastSpinMetrics: the collector exports the server's counts.
func TestFastSpinMetrics(t *testing.T) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := NewServer(svc, nil)
	srv.fast.spins.hits.Add(3)
	srv.fast.spins.misses.Add(2)
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.FastSpinCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvfabric_master_fast_spin_waits_total" || mf.GetType().String() != "COUNTER" {
			t.Fatalf("metric %s of type %v", mf.GetName(), mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetName()+"="+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if len(got) != 2 || got["result=hit"] != 3 || got["result=miss"] != 2 {
		t.Fatalf("spin metrics %v, want hit 3 and miss 2", got)
	}
}

// TestFastSpinSmallCallsOnly: a call whose request exceeds spinMaxRequest
// spins on neither end (its answer, and its caller's next call, come later
// than a spin); the small call after it spins again on both.
func TestFastSpinSmallCallsOnly(t *testing.T) {
	defer setSpinSlots(4)()
	srv, r := spinServed(t, DefaultFastSpin, FastPath{Spin: 5 * time.Millisecond})
	ctx := context.Background()
	counts := func() (uint64, uint64) {
		st := r.Transports()
		h, m := srv.FastSpinCounts()
		return st.SpinHits + st.SpinMisses, h + m
	}
	// A small call arms the master's next wait; let it run out.
	if _, err := r.Exists(ctx, []string{"k"}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("a-key-of-some-length/%06d", i)
	}
	c0, m0 := counts()
	got, err := r.GetReplicas(ctx, keys) // ~14 KB of request
	if err != nil || len(got) != len(keys) || !errors.Is(got[0].Err, ErrNotFound) {
		t.Fatalf("GetReplicas: %v (%d results)", err, len(got))
	}
	time.Sleep(20 * time.Millisecond) // the master's next wait, had it spun, would have missed by now
	if c1, m1 := counts(); c1 != c0 || m1 != m0 {
		t.Fatalf("a large call spun: client %d -> %d, master %d -> %d", c0, c1, m0, m1)
	}
	if _, err := r.Exists(ctx, []string{"k"}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if c2, m2 := counts(); c2 == c0 || m2 == m0 {
		t.Fatalf("a small call did not spin: client %d -> %d, master %d -> %d", c0, c2, m0, m2)
	}
}
