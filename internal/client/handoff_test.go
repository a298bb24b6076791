package client

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSpinRecv: a value queued before, sent while the receiver spins, or
// sent after it parked arrives; a closed channel reports !ok; the budget
// is back to zero after each wait, and a budget of none still receives
// (parking at once).
func TestSpinRecv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int32
		delay time.Duration // before the send; < 0: queued before the wait
		close bool
	}{
		{name: "queued", max: 1, delay: -1},
		{name: "while spinning", max: 1, delay: handOffSpin / 10},
		{name: "after parking", max: 1, delay: 5 * handOffSpin},
		{name: "closed", max: 1, delay: handOffSpin / 10, close: true},
		{name: "no budget", max: 0, delay: handOffSpin / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &spinBudget{max: tc.max}
			ch := make(chan int, 1)
			send := func() {
				if tc.close {
					close(ch)
				} else {
					ch <- 7
				}
			}
			if tc.delay < 0 {
				send()
			} else {
				go func() { time.Sleep(tc.delay); send() }()
			}
			v, ok := spinRecv(b, ch)
			if want := !tc.close; ok != want || ok && v != 7 {
				t.Fatalf("spinRecv = %d, %v; want 7, %v", v, ok, want)
			}
			if n := b.n.Load(); n != 0 {
				t.Fatalf("budget holds %d spinners after the wait", n)
			}
		})
	}
}

// TestSpinBudget: at most max goroutines spin at once.
func TestSpinBudget(t *testing.T) {
	b := &spinBudget{max: 2}
	if !b.acquire() || !b.acquire() {
		t.Fatal("budget of 2 refused a first or second spinner")
	}
	if b.acquire() {
		t.Fatal("budget of 2 let a third spinner in")
	}
	b.release()
	if !b.acquire() {
		t.Fatal("a released place was not given again")
	}
	b.release()
	b.release()
	if n := b.n.Load(); n != 0 {
		t.Fatalf("%d spinners after all released", n)
	}
	var z spinBudget
	z.init()
	if z.max < 0 {
		t.Fatalf("init: max %d", z.max)
	}
}

// TestMetaWorker: calls run one at a time in order; a call queued when
// stop is called still runs, and then the worker ends (its WaitGroup
// done); a nil worker runs calls on a goroutine each and stops as a no-op.
func TestMetaWorker(t *testing.T) {
	b := &spinBudget{max: 1}
	var wg sync.WaitGroup
	w := startMetaWorker(b, &wg)
	var running atomic.Int32
	var order []int
	done := make(chan int, 1)
	for i := range 20 {
		w.call(func() {
			if running.Add(1) != 1 {
				t.Error("two calls ran at once")
			}
			order = append(order, i) // one call at a time: no race
			if i%5 == 0 {
				time.Sleep(2 * handOffSpin) // the pipeline parks
			}
			running.Add(-1)
			done <- i
		})
		if got := awaitMeta(b, w, done); got != i {
			t.Fatalf("answer %d, want %d", got, i)
		}
		if i%7 == 0 {
			time.Sleep(2 * handOffSpin) // the worker parks
		}
	}
	var last atomic.Bool
	w.call(func() { time.Sleep(time.Millisecond); last.Store(true) })
	w.stop()
	wg.Wait()
	if !last.Load() {
		t.Fatal("the worker ended before the call queued at stop ran")
	}
	select {
	case <-w.done:
	default:
		t.Fatal("the WaitGroup was done before the worker ended")
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("calls ran in order %v", order)
		}
	}
	if n := b.n.Load(); n != 0 {
		t.Fatalf("budget holds %d spinners after the worker ended", n)
	}

	var nw *metaWorker
	ch := make(chan int, 1)
	nw.call(func() { ch <- 1 })
	if v := awaitMeta(b, nw, ch); v != 1 {
		t.Fatalf("nil worker's call answered %d", v)
	}
	nw.stop()
}
