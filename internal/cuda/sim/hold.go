package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// Held streams. By default the simulator runs a stream's work inside the
// call that enqueues it. HoldStream stalls one stream, as a long copy
// stalls a GPU stream: what is enqueued on it after that (copies, kernel
// launches, event records, event waits) is validated at once but runs
// only after the hold is released, in enqueue order. Events recorded
// behind the hold stay incomplete (EventQuery false, EventSynchronize
// blocks), and another stream that waits on such an event (StreamWaitEvent)
// queues its later work behind that wait. So tests can show what waits for
// what: a CPU wait on an event recorded after held work blocks until the
// release, exactly as it would block until the GPU got there.
//
// Work deferred this way reads and writes memory when it runs, not when it
// is enqueued (a kernel reads its descriptors then; a copy from host memory
// copies what the host holds then), as on a GPU. A deferred operation that
// fails when it runs (memory unmapped in between, a kernel fault) does not
// fail its enqueueing call: the failure is reported by the next
// StreamSynchronize of its stream and by EventSynchronize/EventQuery of the
// events recorded on that stream after it.

// sched is the state of held streams and of their deferred work.
type sched struct {
	sync.Mutex
	// guards everything below
	cond    *sync.Cond // broadcast whenever deferred work completes
	queues  map[cuda.Stream]*queue
	evs     map[cuda.Event]*evState
	errs    map[cuda.Stream]cuda.Result // first failure of deferred work, until a StreamSynchronize reports it
	pumping bool                        // a goroutine is running deferred work
	again   bool                        // pump was called while pumping: look again
}

// queue is one stream's deferred work. It exists while the stream is held
// or has work left; work enqueued on a stream without a queue runs at once.
type queue struct {
	held int  // holds not yet released
	ops  []op // in enqueue order; ops[0] may be running
}

// op is one deferred operation: run (without locks) unless it waits for an
// event record, then complete under the sched lock.
type op struct {
	run      func() cuda.Result
	waitEv   cuda.Event // when set: ready only once record waitSeq of waitEv ran
	waitSeq  uint64
	complete func(r cuda.Result) // under the sched lock, after run
}

// evState tracks an event's records: seq numbers the records, outstanding
// holds those enqueued behind a hold that have not run yet.
type evState struct {
	seq         uint64
	outstanding map[uint64]struct{}
	err         cuda.Result // failure of deferred work before the last record that ran
	destroyed   bool
}

func (sc *sched) init() {
	sc.cond = sync.NewCond(&sc.Mutex)
	sc.queues = make(map[cuda.Stream]*queue)
	sc.evs = make(map[cuda.Event]*evState)
	sc.errs = make(map[cuda.Stream]cuda.Result)
}

// HoldStream holds s (a stream created in this driver) until release is
// called: see the package's notes on held streams. Holds nest; release is
// idempotent. A hold never released keeps its stream's work queued and CPU
// waits on it blocked for good. Holding an unknown stream is a bug in the
// test and panics.
func (d *Driver) HoldStream(s cuda.Stream) (release func()) {
	d.mu.RLock()
	_, ok := d.mu.streams[s]
	d.mu.RUnlock()
	if !ok {
		panic(fmt.Sprintf("sim: HoldStream(%#x): no such stream", s))
	}
	d.sched.Lock()
	q := d.sched.queues[s]
	if q == nil {
		q = &queue{}
		d.sched.queues[s] = q
	}
	q.held++
	d.sched.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.sched.Lock()
			q.held--
			d.sched.Unlock()
			d.pump()
		})
	}
}

// PendingOps reports how many operations enqueued on s wait behind a hold.
func (d *Driver) PendingOps(s cuda.Stream) int {
	d.sched.Lock()
	defer d.sched.Unlock()
	if q := d.sched.queues[s]; q != nil {
		return len(q.ops)
	}
	return 0
}

// queuedLocked reports whether work on s is deferred (s is held or has
// work left). The caller holds d.mu (either side).
func (d *Driver) queuedLocked(s cuda.Stream) bool {
	d.sched.Lock()
	defer d.sched.Unlock()
	return d.sched.queues[s] != nil
}

// deferLocked appends o to s's queue when s has one (it is held or has
// work left) and reports whether it did; otherwise the caller runs the
// operation itself, at once. The caller holds d.mu (either side).
func (d *Driver) deferLocked(s cuda.Stream, o op) bool {
	d.sched.Lock()
	defer d.sched.Unlock()
	q := d.sched.queues[s]
	if q == nil {
		return false
	}
	q.ops = append(q.ops, o)
	return true
}

// pump runs deferred work that can run, until none can. One goroutine
// pumps at a time; a call during a pump makes that pump look again.
func (d *Driver) pump() {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	if sc.pumping {
		sc.again = true
		return
	}
	sc.pumping = true
	defer func() { sc.pumping = false }()
	for {
		progress := false
		for s, q := range sc.queues {
			for q.held == 0 && len(q.ops) > 0 {
				o := q.ops[0]
				if o.waitEv != 0 && !sc.ranLocked(o.waitEv, o.waitSeq) {
					break
				}
				r := cuda.Success
				if o.run != nil {
					sc.Unlock()
					r = o.run()
					sc.Lock()
				}
				q.ops = q.ops[1:]
				if r != cuda.Success {
					if _, ok := sc.errs[s]; !ok {
						sc.errs[s] = r
					}
				}
				if o.complete != nil {
					o.complete(r)
				}
				progress = true
				sc.cond.Broadcast()
			}
			if q.held == 0 && len(q.ops) == 0 {
				delete(sc.queues, s)
			}
		}
		if !progress && !sc.again {
			return
		}
		sc.again = false
	}
}

// ranLocked reports whether record seq of e has run (or e has no such
// pending record).
func (sc *sched) ranLocked(e cuda.Event, seq uint64) bool {
	st := sc.evs[e]
	if st == nil {
		return true
	}
	_, pending := st.outstanding[seq]
	return !pending
}

// recordLocked records e on s: at once, or behind s's queue. The caller
// holds d.mu for writing and has validated e and s; ev is e's state in
// d.mu.events.
func (d *Driver) recordLocked(e cuda.Event, ev *event, s cuda.Stream) {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	st := sc.evs[e]
	q := sc.queues[s]
	if q == nil {
		ev.recorded = true
		ev.at = time.Now()
		if st != nil {
			st.seq++ // a later record: earlier pending ones no longer decide completion
			st.err = cuda.Success
		}
		return
	}
	if st == nil {
		st = &evState{outstanding: make(map[uint64]struct{})}
		sc.evs[e] = st
	}
	st.seq++
	seq := st.seq
	st.outstanding[seq] = struct{}{}
	q.ops = append(q.ops, op{
		run: func() cuda.Result {
			d.mu.Lock()
			defer d.mu.Unlock()
			if ev, ok := d.mu.events[e]; ok {
				ev.recorded = true
				ev.at = time.Now()
			}
			return cuda.Success
		},
		complete: func(cuda.Result) {
			delete(st.outstanding, seq)
			if seq == st.seq {
				st.err = sc.errs[s]
			}
			if st.destroyed && len(st.outstanding) == 0 {
				delete(sc.evs, e)
			}
		},
	})
}

// eventDoneLocked reports whether e's latest record ran, and the failure
// of deferred work before it. The caller holds the sched lock.
func (sc *sched) eventDoneLocked(e cuda.Event) (bool, cuda.Result) {
	st := sc.evs[e]
	if st == nil {
		return true, cuda.Success
	}
	if _, pending := st.outstanding[st.seq]; pending {
		return false, cuda.Success
	}
	return true, st.err
}

// waitTargetLocked returns the record of e a stream wait issued now
// must wait for, or 0 when that record already ran.
func (sc *sched) waitTargetLocked(e cuda.Event) uint64 {
	st := sc.evs[e]
	if st == nil {
		return 0
	}
	if _, pending := st.outstanding[st.seq]; !pending {
		return 0
	}
	return st.seq
}

// streamWaitLocked makes s wait for e's latest record: nothing to do when
// it ran and s has no queue; else a wait op behind s's queue (a queue is
// made for s when it has none). The caller holds d.mu.
func (d *Driver) streamWaitLocked(s cuda.Stream, e cuda.Event) {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	target := sc.waitTargetLocked(e)
	q := sc.queues[s]
	if target == 0 && q == nil {
		return
	}
	if q == nil {
		q = &queue{}
		sc.queues[s] = q
	}
	q.ops = append(q.ops, op{waitEv: e, waitSeq: target})
}

// destroyEventLocked forgets e's record state once no deferred record of
// it is left. The caller holds d.mu.
func (d *Driver) destroyEventLocked(e cuda.Event) {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	if st := sc.evs[e]; st != nil {
		st.destroyed = true
		if len(st.outstanding) == 0 {
			delete(sc.evs, e)
		}
	}
}

// waitEvent blocks until e's latest record (as of the call) ran and
// returns the failure of deferred work before it. No driver lock may be
// held.
func (d *Driver) waitEvent(e cuda.Event) cuda.Result {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	st := sc.evs[e]
	if st == nil {
		return cuda.Success
	}
	seq := st.seq
	for {
		if _, pending := st.outstanding[seq]; !pending {
			break
		}
		sc.cond.Wait()
	}
	if seq == st.seq {
		return st.err
	}
	return cuda.Success
}

// waitStream blocks until s has no deferred work left and returns (and
// forgets) the first failure of its deferred work. No driver lock may be
// held.
func (d *Driver) waitStream(s cuda.Stream) cuda.Result {
	sc := &d.sched
	sc.Lock()
	defer sc.Unlock()
	for {
		q := sc.queues[s]
		if q == nil || len(q.ops) == 0 {
			break
		}
		sc.cond.Wait()
	}
	r := sc.errs[s]
	delete(sc.errs, s)
	return r
}

// deferCopiesLocked queues copies (validated by the caller, cloned here) on s
// when s has a queue, and reports whether it did.
func (d *Driver) deferCopiesLocked(dev cuda.Device, copies []cuda.Copy, s cuda.Stream) bool {
	if !d.queuedLocked(s) {
		return false
	}
	cs := slices.Clone(copies)
	return d.deferLocked(s, op{run: func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		for _, c := range cs {
			if r := d.copyLocked(dev, c); r != cuda.Success {
				return r
			}
		}
		return cuda.Success
	}})
}
