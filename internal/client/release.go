package client

import (
	"context"
	"sync"
)

// releaser ends read leases in the background: a get's lease release needs
// no answer before the get returns, and with a remote master it is a whole
// round trip (about half of a small get's latency). Releases queued while
// one is in flight go out together in the next call.
//
// A client's own removals flush it first (flush), so a get followed by a
// plain Remove of the same key by the same Store still finds the lease
// released. Others may see the lease a little longer (bounded by the lease
// TTL, as for any reader).
//
// Ownership: Open starts the goroutine (start) for a remote master only;
// teardown stops it after flushing what is queued (stop). stop is
// idempotent. Not started, queue releases at once.
type releaser struct {
	send func(context.Context, []uint64) // Store.releaseNow
	wake chan struct{}                   // capacity 1
	quit chan struct{}
	done chan struct{}

	// call serialises release calls (the goroutine's and flush's), so that
	// when flush returns every release queued before it has been sent.
	call sync.Mutex
	mu   struct {
		sync.Mutex
		ids     []uint64 // queued lease ids
		stopped bool
	}
}

func (r *releaser) start(send func(context.Context, []uint64)) {
	r.send = send
	r.wake = make(chan struct{}, 1)
	r.quit = make(chan struct{})
	r.done = make(chan struct{})
	go r.run()
}

// queue adds lease ids to release in the background; false when the
// releaser is not running (never started, or stopped): the caller then
// releases them itself.
func (r *releaser) queue(ids []uint64) bool {
	if r.wake == nil {
		return false
	}
	r.mu.Lock()
	if r.mu.stopped {
		r.mu.Unlock()
		return false
	}
	r.mu.ids = append(r.mu.ids, ids...)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

func (r *releaser) run() {
	defer close(r.done)
	for {
		select {
		case <-r.wake:
			r.flush(context.Background())
		case <-r.quit:
			return
		}
	}
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
