package client

import (
	"context"
	"sync"
	"time"
)

// releaser ends read leases in the background: a get's lease release needs
// no answer before the get returns, and with a remote master it is a whole
// round trip (about half of a small get's latency). A release waits up to
// releaseDelay for others to join it, so that back-to-back gets share one
// call instead of each making one beside the next get's own round trip
// (which it slows down: the two calls share the connection, the master
// and the CPUs); releaseBatch queued ids go out at once.
//
// A client's own removals flush it first (flush), so a get followed by a
// plain Remove of the same key by the same Store still finds the lease
// released. Others may see the lease a little longer (up to releaseDelay
// plus a round trip; bounded by the lease TTL, as for any reader).
//
// Ownership: Open starts the goroutine (start), for a remote master and an
// embedded one alike; teardown stops it after flushing what is queued
// (stop). stop is idempotent. Not started, queue releases at once.
type releaser struct {
	send  func(context.Context, []uint64) // Store.releaseNow
	delay time.Duration                   // releaseDelay when started
	wake  chan struct{}                   // capacity 1: the queue became non-empty, or full
	quit  chan struct{}
	done  chan struct{}

	// call serialises release calls (the goroutine's and flush's), so that
	// when flush returns every release queued before it has been sent.
	call sync.Mutex
	mu   struct {
		sync.Mutex
		ids     []uint64 // queued lease ids
		stopped bool
	}
}

// releaseDelay is how long a queued release waits for more: a few small
// gets' worth, far below any lease TTL. A variable for tests
// (SetReleaseDelay).
var releaseDelay = 2 * time.Millisecond

// releaseBatch queued ids are sent without waiting.
const releaseBatch = 1024

func (r *releaser) start(send func(context.Context, []uint64)) {
	r.send = send
	r.delay = releaseDelay
	r.wake = make(chan struct{}, 1)
	r.quit = make(chan struct{})
	r.done = make(chan struct{})
	go r.run()
}

// queue adds lease ids to release in the background; false when the
// releaser is not running (never started, or stopped): the caller then
// releases them itself. Only the first ids after a send wake the
// goroutine (and a full batch): a get does not hand off to it each time.
func (r *releaser) queue(ids []uint64) bool {
	if r.wake == nil {
		return false
	}
	r.mu.Lock()
	if r.mu.stopped {
		r.mu.Unlock()
		return false
	}
	first := len(r.mu.ids) == 0
	r.mu.ids = append(r.mu.ids, ids...)
	full := len(r.mu.ids) >= releaseBatch
	r.mu.Unlock()
	if first || full {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return true
}

func (r *releaser) run() {
	defer close(r.done)
	t := time.NewTimer(r.delay)
	t.Stop()
	for {
		select {
		case <-r.wake:
		case <-r.quit:
			return
		}
		// Let the releases of the next gets join these, unless a batch is
		// full. (The timer's channel holds no stale tick after Stop or
		// Reset: Go 1.23 timers.)
		t.Reset(r.delay)
	wait:
		for !r.full() {
			select {
			case <-t.C:
				break wait
			case <-r.wake: // more queued: see whether the batch is full
			case <-r.quit: // stop sends what is queued
				t.Stop()
				return
			}
		}
		t.Stop()
		r.flush(context.Background())
	}
}

func (r *releaser) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.ids) >= releaseBatch
}

// flush sends every queued release and waits for those already in flight.
func (r *releaser) flush(ctx context.Context) {
	if r.wake == nil {
		return
	}
	r.call.Lock()
	defer r.call.Unlock()
	r.mu.Lock()
	ids := r.mu.ids
	r.mu.ids = nil
	r.mu.Unlock()
	if len(ids) > 0 {
		r.send(ctx, ids)
	}
}

// stop ends the goroutine and sends what is queued.
func (r *releaser) stop() {
	if r.wake == nil {
		return
	}
	r.mu.Lock()
	if r.mu.stopped {
		r.mu.Unlock()
		return
	}
	r.mu.stopped = true
	r.mu.Unlock()
	close(r.quit)
	<-r.done
	r.flush(context.Background())
}
