package client

import (
	"context"
	"sync"
	"time"

	"github.com/kvfabric/kvfabric/internal/master"
)

// releaser ends read leases in the background: a get's lease release needs
// no answer before the get returns, and with a remote master it is a whole
// round trip (about half of a small get's latency). A release waits up to
// releaseDelay for others to join it, so that back-to-back gets share one
// call instead of each making one beside the next get's own round trip
// (which it slows down: the two calls share the connection, the master
// and the CPUs); releaseBatch queued ids go out at once.
//
// Mostly, though, the next get carries them (take, up to carryMax): its
// GetReplicas request names the queued leases and the master ends them
// after its lookup (master.ReleaseCarry), so that back-to-back gets make
// no release calls at all — a release call beside a get was in flight
// during about half of the slowest 1 % of remote gets (session 29). One
// get carries at a time; the others leave the queue to the next. A carry
// the master did not take (the call failed, or a master that predates
// carrying ignored it) goes back on the queue; after an ignored one, gets
// carry nothing for carryPause (an older master answers the same way
// every time).
//
// A client's own removals flush it first (flush), so a get followed by a
// plain Remove of the same key by the same Store still finds the lease
// released: flush holds new carries off, waits for the one in flight and
// sends what is queued then. Others may see the lease a little longer (up
// to releaseDelay plus a round trip; bounded by the lease TTL, as for any
// reader).
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
		// armed: the goroutine was woken for the queued ids and has not
		// sent them yet (later ids join them without waking it again).
		armed bool
		// carrying: a get carries releases in carry (idle is signalled
		// when it is done); flushing counts flushes, which hold new
		// carries off; noCarry is when gets may carry again after a
		// master ignored a carry; spare is the slice of the last carry
		// the master took, for the queue to reuse.
		carrying bool
		flushing int
		noCarry  time.Time
		carries  uint64 // carries taken, ever
		spare    []uint64
	}
	// carry is the one carry in flight (mu.carrying): its get owns it
	// from take until carried.
	carry master.ReleaseCarry
	idle  sync.Cond // on mu: a carry is done
}

// carryPause is how long gets carry no releases after the master ignored
// a carry.
const carryPause = time.Minute

// carryMax bounds what a get carries: the master ends carried leases
// before it answers, so the get waits for them. More queued (the leases of
// batch gets) are left to the goroutine, which sends them beside the gets,
// as before carrying.
const carryMax = 64

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
	r.idle.L = &r.mu.Mutex
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
	r.mu.ids = append(r.mu.ids, ids...)
	r.wakeUnlock()
	return true
}

// wakeUnlock wakes the goroutine for newly queued ids, unless it was woken
// for earlier ones it has not sent yet and the batch is not full, and
// unlocks r.mu (which the caller holds).
func (r *releaser) wakeUnlock() {
	if r.mu.armed && len(r.mu.ids) < releaseBatch {
		r.mu.Unlock()
		return
	}
	r.mu.armed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take hands the queued releases to a GetReplicas call that carries them
// (master.WithReleases); nil when there are none or more than carryMax,
// another get carries, a flush runs, carries pause, or the releaser does
// not run. A caller given a carry calls carried once the call returns.
func (r *releaser) take() *master.ReleaseCarry {
	if r.wake == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.mu.ids) == 0 || len(r.mu.ids) > carryMax || r.mu.stopped || r.mu.carrying || r.mu.flushing > 0 ||
		!r.mu.noCarry.IsZero() && time.Now().Before(r.mu.noCarry) {
		return nil
	}
	r.carry = master.ReleaseCarry{IDs: r.mu.ids}
	r.mu.ids, r.mu.spare = r.mu.spare[:0], nil
	r.mu.carrying = true
	r.mu.carries++
	return &r.carry
}

// carried ends the carry take handed out, whose call returned err: if the
// master ended its leases (ReleaseCarry.Released) its slice is kept for
// the queue; if not, they are queued again, and an answer without them
// (err nil: a master that predates carrying) pauses carries.
func (r *releaser) carried(err error) {
	r.mu.Lock()
	ids, released := r.carry.IDs, r.carry.Released
	r.carry = master.ReleaseCarry{}
	r.mu.carrying = false
	r.idle.Broadcast()
	if err == nil && !released {
		r.mu.noCarry = time.Now().Add(carryPause)
	}
	if released {
		r.mu.spare = ids[:0]
		r.mu.Unlock()
		return
	}
	// A flush waiting for this carry sends them (it takes the queue after
	// this); so does a stop.
	r.mu.ids = append(r.mu.ids, ids...)
	r.wakeUnlock()
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
		// full; while gets carry releases, leave the queue to them (the
		// last get's release is queued between its copy and the next
		// get: sent from here, it would be a call beside that get).
		// (The timer's channel holds no stale tick after Stop or Reset:
		// Go 1.23 timers.)
		t.Reset(r.delay)
		mark := r.carries()
	wait:
		for !r.full() {
			select {
			case <-t.C:
				if n := r.carries(); n != mark {
					mark = n
					t.Reset(r.delay)
					continue
				}
				break wait
			case <-r.wake: // more queued: see whether the batch is full
			case <-r.quit: // stop sends what is queued
				t.Stop()
				return
			}
		}
		t.Stop()
		r.sendQueued(context.Background())
	}
}

// carries is how many carries gets have taken.
func (r *releaser) carries() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.carries
}

func (r *releaser) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.ids) >= releaseBatch
}

// flush sends every queued release and waits for those already in flight
// (sent or carried): when it returns, every release queued before it was
// called has reached the master, or failed.
func (r *releaser) flush(ctx context.Context) {
	if r.wake == nil {
		return
	}
	r.mu.Lock()
	r.mu.flushing++ // no get takes the queue from here on
	for r.mu.carrying {
		r.idle.Wait() // until the carry in flight ends (what the master did not take is queued again)
	}
	r.mu.Unlock()
	r.sendQueued(ctx)
	r.mu.Lock()
	r.mu.flushing--
	r.mu.Unlock()
}

// sendQueued sends the queued releases, after any send in flight.
func (r *releaser) sendQueued(ctx context.Context) {
	r.call.Lock()
	defer r.call.Unlock()
	r.mu.Lock()
	ids := r.mu.ids
	r.mu.ids = nil
	r.mu.armed = false
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
