package master

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkFastSpinCPU is what the master's fast path spin (spin.go) costs
// in CPU: callers clients, each its own connection making one small call
// (Exists of one key) at a time, gap apart, to a master in this process
// whose connections spin (spin=on, the default) or not (spin=off). The
// clients never spin (FastPath.Spin < 0), so the difference in the
// process's CPU time per call (cpu-us/call) between on and off is the
// master's spinning. gap=0 is callers that call again at once (a batch's
// small calls, back-to-back gets); gap=200us is an engine that asks now
// and then, whose next call comes after any spin has ended. master-hits
// and master-misses are the master's waits per call that spun and found
// the next call, and that spun in vain; p50-us and p99-us the calls'
// latency. The clients share the master's Go runtime, so with several
// callers their latency is not a remote client's: on an H100 host, eight
// callers 200 µs apart took 52–56 µs p50 with the master spinning in vain
// against 70–86 without (docs/perf/logs-2026-12-06-s29, run1).
func BenchmarkFastSpinCPU(b *testing.B) {
	for _, gap := range []time.Duration{0, 200 * time.Microsecond} {
		for _, callers := range []int{1, 8, 32} {
			for _, spin := range []bool{true, false} {
				name := fmt.Sprintf("gap=%v/callers=%d/spin=%v", gap, callers, map[bool]string{true: "on", false: "off"}[spin])
				b.Run(name, func(b *testing.B) { benchFastSpinCPU(b, gap, callers, spin) })
			}
		}
	}
}

func benchFastSpinCPU(b *testing.B, gap time.Duration, callers int, spin bool) {
	svc, err := New(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close() }) // after the server's shutdown
	srv := NewServer(svc, nil)
	if !spin {
		if err := srv.SetFastSpin(0); err != nil {
			b.Fatal(err)
		}
	}
	fs := serveFast(b, srv, nil)
	clients := make([]*remote, callers)
	for i := range clients {
		clients[i] = dialFast(b, fs, FastPath{Spin: -1})
		defer clients[i].Close()
	}
	ctx := context.Background()
	keys := []string{"k"}
	lat := make([][]time.Duration, callers)
	per := b.N/callers + 1
	for i, c := range clients { // warm up: every connection open
		if _, err := c.Exists(ctx, keys, false); err != nil {
			b.Fatal(err)
		}
		lat[i] = make([]time.Duration, 0, per)
	}
	h0, m0 := srv.FastSpinCounts()
	var m meter
	b.ResetTimer()
	m.start()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				t0 := time.Now()
				if _, err := c.Exists(ctx, keys, false); err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
				if gap > 0 {
					time.Sleep(gap)
				}
			}
		}()
	}
	wg.Wait()
	m.stop()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	h1, m1 := srv.FastSpinCounts()
	calls := float64(per * callers)
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(m.cpu.Microseconds())/calls, "cpu-us/call")
	b.ReportMetric(float64(h1-h0)/calls, "master-hits/call")
	b.ReportMetric(float64(m1-m0)/calls, "master-misses/call")
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(all[(len(all)-1)*99/100].Nanoseconds())/1e3, "p99-us")
}
