package master

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Spinning on the fast path's sockets.
//
// A fast path call is two wake-ups: the request wakes the master's
// connection goroutine, the answer wakes the client's calling thread. When
// the sleeper sits on another CPU than the waker, each wake-up crosses
// CPUs, and on the lab's virtual machines one such wake-up costs about as
// much as the call's work: on the dev VM one small get over loopback took
// 66-69 µs p50 with client and master pinned to two CPUs against 14 µs
// with both on one (docs/perf/latency.md, session 28). A wait that first polls its socket
// without sleeping for a short while (FastSpin) finds an answer that comes
// quickly on a CPU that is still running, and sleeps as before when none
// comes.
//
// Spinning spends a CPU, so it is bounded: only a small call's waits spin
// (a request of at most spinMaxRequest bytes: a get or a few keys, whose
// answer comes within a spin; a batch's master work takes longer, and its
// caller comes back later), each wait spins at most FastSpin, and at most
// spinSlots() waits of this process spin at once (a quarter of GOMAXPROCS,
// at least one); a wait that finds no free slot sleeps at once. Between
// its polls a spinning wait yields its CPU (sched_yield), so a thread that
// waits for that CPU runs first: without it, client and master sharing one
// CPU took 116 µs p50 per get, each end's spin holding off the other, and
// with it 14 µs, as without spinning (docs/perf/logs-2026-12-05-s28/devvm).
// Both ends count the waits that spun and found their data and those that
// spun in vain (TransportStats, Server.FastSpinCounts).

// DefaultFastSpin is how long a fast path wait (a client's for its answer,
// the master's for a connection's next request) polls its socket before it
// sleeps, unless configured otherwise.
const DefaultFastSpin = 50 * time.Microsecond

// ConfiguredSpin maps a configured spin, where 0 means none (the
// master's --fast-spin, a client's master_fast_path_spin), to FastPath.Spin
// and ha.MasterConfig.FastSpin, where 0 means DefaultFastSpin and negative
// none.
func ConfiguredSpin(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// spinMaxRequest is the largest request whose waits spin: the client's
// for its answer, the master's for the connection's next request after
// answering it. A get of one key is ~50 bytes; a Store's chunk of 512
// uniform puts ~20 KB.
const spinMaxRequest = 4096

// maxFastSpin bounds a configured spin: beyond it a wait is better asleep.
const maxFastSpin = 10 * time.Millisecond

// CheckFastSpin checks a configured spin (0: off; at most 10 ms), naming
// what configured it (what).
func CheckFastSpin(what string, d time.Duration) error {
	if d < 0 || d > maxFastSpin {
		return fmt.Errorf("%w: %s=%v: want 0 (off) to %v", ErrInvalid, what, d, maxFastSpin)
	}
	return nil
}

// spinSlotsFor is the number of waits that may spin at once in a process
// of gomaxprocs Ps: a quarter of them, at least one.
func spinSlotsFor(gomaxprocs int) int32 { return int32(max(gomaxprocs/4, 1)) }

// spinLimit is the number of waits that may spin at once: -1 until first
// used, then spinSlotsFor(GOMAXPROCS) (tests set it: setSpinSlots).
var spinLimit atomic.Int32

func init() { spinLimit.Store(-1) }

// spinSlots returns spinLimit, computing it on first use.
func spinSlots() int32 {
	n := spinLimit.Load()
	if n < 0 {
		n = spinSlotsFor(runtime.GOMAXPROCS(0))
		spinLimit.Store(n)
	}
	return n
}

// spinning counts the waits spinning now, process-wide.
var spinning atomic.Int32

// spinCounts counts one end's spinning waits.
type spinCounts struct {
	hits, misses atomic.Uint64
}

// spinRecv polls fd for up to d without sleeping, reading into p with
// recv(MSG_DONTWAIT) when a spin slot is free. ok reports data read (n >
// 0); otherwise the caller waits as without spinning, and sees for itself
// an error or an end of stream recv met.
func spinRecv(fd int, p []byte, d time.Duration, c *spinCounts) (n int, ok bool) {
	if d <= 0 || len(p) == 0 || !takeSpinSlot() {
		return 0, false
	}
	defer spinning.Add(-1)
	end := time.Now().Add(d)
	for {
		n, err := recvNow(fd, p)
		switch {
		case err == nil && n > 0:
			c.hits.Add(1)
			return n, true
		case err == nil, !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			return 0, false // end of stream or an error: the caller's read reports it
		}
		if !time.Now().Before(end) {
			c.misses.Add(1)
			return 0, false
		}
		// Let a thread waiting for this CPU run: it may be the one that
		// answers (the peer on the same CPU, or the thread that must
		// deliver the data). With nothing else to run it returns at once.
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// takeSpinSlot takes one of the process's spin slots, if one is free.
func takeSpinSlot() bool {
	limit := spinSlots()
	for {
		n := spinning.Load()
		if n >= limit {
			return false
		}
		if spinning.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// recvNow reads what fd holds without waiting (recv with MSG_DONTWAIT,
// whatever the socket's blocking mode): EAGAIN when it holds nothing.
func recvNow(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// fastSpinDesc describes a master's fast path spin counters.
var fastSpinDesc = prometheus.NewDesc("kvfabric_master_fast_spin_waits_total",
	"Fast path reads that polled the socket before sleeping (--fast-spin), by result: hit (data came while polling) or miss (none came; the read slept).",
	[]string{"result"}, nil)

// fastSpinCollector exports a Server's FastSpinCounts.
type fastSpinCollector struct{ s *Server }

// FastSpinCollector returns a Prometheus collector of s's fast path spin
// counters (kvfabric_master_fast_spin_waits_total{result="hit"|"miss"}).
func (s *Server) FastSpinCollector() prometheus.Collector { return fastSpinCollector{s} }

func (c fastSpinCollector) Describe(ch chan<- *prometheus.Desc) { ch <- fastSpinDesc }

func (c fastSpinCollector) Collect(ch chan<- prometheus.Metric) {
	hits, misses := c.s.FastSpinCounts()
	ch <- prometheus.MustNewConstMetric(fastSpinDesc, prometheus.CounterValue, float64(hits), "hit")
	ch <- prometheus.MustNewConstMetric(fastSpinDesc, prometheus.CounterValue, float64(misses), "miss")
}
