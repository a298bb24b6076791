package client

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// How a pipeline hands its next chunk's master call to another goroutine.
//
// A batch's pipeline (putPart, getPart) asks the master for chunk k+1 while
// it resolves and submits chunk k. It used to start a goroutine per call.
// Go puts a new (or woken) goroutine in the runnext slot of the P that made
// it runnable, and while that P's goroutine keeps running — the pipeline,
// resolving the chunk before — another P may take it only after sleeping
// 3 µs, which Linux's default 50 µs timer slack stretches. On the H200 host
// each chunk's PutStart so began 9–203 µs (middle half 61–81) after the
// pipeline asked for it, with the master idle meanwhile: at 16 KiB a fifth
// of a batch's time (docs/perf/logs-2026-12-02-s11/runA/timeline.txt, by
// timeline.py there).
//
// So each pipeline of more than one chunk has one metaWorker, started
// before its first master call and stopped when it returns, that runs the
// calls one at a time. The Store owns the workers: Close waits for them
// (a pipeline does not: a caller locked to its thread, as the C ABI's is,
// would park for the worker's exit and wait for its thread to be woken).
// With an embedded master a put pipeline's worker also runs its PutEnds
// (putPipe.w), so that one goroutine, not two, takes the master's lock.
// Both sides wait spinning, for up to handOffSpin, before they park: the
// worker for the next call, the pipeline for a call's answer. While
// neither parks no goroutine is made runnable, and a hand-off takes what
// an atomic load takes. A side that parked is woken as before (and the
// worker yields its P after each call, so that a pipeline woken by the
// answer runs at once on it). Spinning costs a core while it
// lasts; a Store lets at most half of GOMAXPROCS goroutines spin at once
// (spinBudget), none with GOMAXPROCS 1, where a spinner would only keep
// the other side from running.

// handOffSpin bounds how long one wait of a hand-off spins before it parks:
// longer than the pipeline takes between two calls when the master bounds
// it, and short, because a copy-bound pipeline's worker waits for the GPU
// and spinning takes a core from the other parts of a batch. On the H200
// host 100 µs did better than 300 µs at every size, gets most (runC:
// embedded 4 KiB get 0.239–0.252 against 0.153–0.217).
const handOffSpin = 100 * time.Microsecond

// spinBudget limits how many goroutines of a Store spin in hand-offs at
// once.
type spinBudget struct {
	n   atomic.Int32
	max int32
}

// init sets the limit: half of GOMAXPROCS.
func (b *spinBudget) init() { b.max = int32(runtime.GOMAXPROCS(0) / 2) }

// acquire reports whether the caller may spin; if so it must release.
func (b *spinBudget) acquire() bool {
	if b.n.Add(1) > b.max {
		b.n.Add(-1)
		return false
	}
	return true
}

func (b *spinBudget) release() { b.n.Add(-1) }

// spinRecv receives from ch, spinning for up to handOffSpin first when b
// allows. ok is false when ch is closed.
func spinRecv[T any](b *spinBudget, ch <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-ch:
		return v, ok
	default:
	}
	if b.acquire() {
		deadline := time.Now().Add(handOffSpin)
		for i := 1; ; i++ {
			select {
			case v, ok = <-ch:
				b.release()
				return v, ok
			default:
			}
			if i%64 == 0 && time.Now().After(deadline) {
				break
			}
		}
		b.release()
	}
	v, ok = <-ch
	return v, ok
}

// metaWorker runs one pipeline's master calls, one at a time, on a
// goroutine of its own. The pipeline that starts it stops it; the
// goroutine then ends after the calls queued, and the Store's Close waits
// for it (Store.workers).
type metaWorker struct {
	spin *spinBudget
	// jobs are the calls queued: a put pipeline's one PutStart ahead and
	// the PutEnds of the chunks it has seen complete (putPipe.w), which
	// sending must not wait for while the worker runs the call before.
	jobs chan func()
	done chan struct{}
	// started is set when the goroutine first runs (run). Until then it
	// sits in the runnext slot of the P that started it — the pipeline's,
	// where another P takes it only after a while (above) — so a pipeline
	// that spun for its answer then would keep it from running: on the dev
	// VM a 128-key get waited 97–101 µs for its second chunk's answer, the
	// whole spin, for a call that takes 10–11 µs inline
	// (docs/perf/logs-2026-12-04-s20/devvm-getpart-timestamps.txt).
	// awaitMeta parks instead, and the P runs the worker at once.
	started atomic.Bool
}

// workerQueue is how many calls a metaWorker queues before a send waits:
// one PutStart, the PutEnds of up to pipeDepth chunks and finish's marker.
const workerQueue = pipeDepth + 2

// startMetaWorker starts a worker counted in wg.
func startMetaWorker(spin *spinBudget, wg *sync.WaitGroup) *metaWorker {
	w := &metaWorker{spin: spin, jobs: make(chan func(), workerQueue), done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.run()
	}()
	return w
}

func (w *metaWorker) run() {
	w.started.Store(true)
	defer close(w.done)
	for {
		f, ok := spinRecv(w.spin, w.jobs)
		if !ok {
			return
		}
		f()
		// Sending the answer may have woken the pipeline onto this P:
		// let it run now rather than after this goroutine's next spin.
		runtime.Gosched()
	}
}

// call runs f on the worker, after the calls queued before it; without a
// worker (nil: a pipeline of one chunk starts none) on a goroutine of its
// own. A pipeline waits for a prefetch's answer (awaitMeta) before it
// queues its next prefetch.
func (w *metaWorker) call(f func()) {
	if w == nil {
		go f()
		return
	}
	w.jobs <- f
}

// stop lets the worker end once its queued calls have run; done is closed
// when it has. A nil worker is a no-op.
func (w *metaWorker) stop() {
	if w != nil {
		close(w.jobs)
	}
}

// awaitMeta receives the answer of a call made on w (nil: on a goroutine
// of its own) from ch, spinning first (spinRecv) unless w has not begun to
// run yet (metaWorker.started).
func awaitMeta[T any](b *spinBudget, w *metaWorker, ch <-chan T) T {
	if w != nil && !w.started.Load() {
		return <-ch
	}
	v, _ := spinRecv(b, ch)
	return v
}
