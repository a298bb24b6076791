package sim

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// stream is a cuStreamCreate stream. Work runs synchronously at enqueue, so
// a stream only counts what was enqueued on it.
type stream struct {
	ctx   cuda.Context
	flags uint32
	ops   atomic.Int64 // copies and launches enqueued
}

// event is a cuEventCreate event; recording completes it at once.
type event struct {
	ctx      cuda.Context
	flags    uint32
	recorded bool
	at       time.Time
}

const validStreamFlags = cuda.StreamNonBlocking
const validEventFlags = cuda.EventBlockingSync | cuda.EventDisableTiming | 0x4 // | CU_EVENT_INTERPROCESS

// streamOKLocked checks that s is the legacy default stream or a live
// stream of ctx.
func (d *Driver) streamOKLocked(ctx cuda.Context, s cuda.Stream) cuda.Result {
	if s == 0 {
		return cuda.Success
	}
	st, ok := d.mu.streams[s]
	if !ok || st.ctx != ctx {
		return cuda.ErrorInvalidHandle
	}
	return cuda.Success
}

func (d *Driver) countOpsLocked(s cuda.Stream, n int) {
	if st, ok := d.mu.streams[s]; ok {
		st.ops.Add(int64(n))
	}
}

// StreamOps reports how many copies and kernel launches were enqueued on s
// (0 for unknown streams and the legacy default stream).
func (d *Driver) StreamOps(s cuda.Stream) int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if st, ok := d.mu.streams[s]; ok {
		return st.ops.Load()
	}
	return 0
}

// StreamCreate creates a stream in ctx.
func (d *Driver) StreamCreate(ctx cuda.Context, flags uint32) (cuda.Stream, error) {
	var s cuda.Stream
	err := d.call("StreamCreate", func() string { return fmt.Sprintf("ctx=%#x flags=%#x", ctx, flags) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if flags&^validStreamFlags != 0 {
			return cuda.ErrorInvalidValue
		}
		s = cuda.Stream(d.newHandle(kindStream))
		d.mu.streams[s] = &stream{ctx: ctx, flags: flags}
		return cuda.Success
	})
	return s, err
}

// StreamDestroy destroys a stream of ctx.
func (d *Driver) StreamDestroy(ctx cuda.Context, s cuda.Stream) error {
	return d.call("StreamDestroy", func() string { return fmt.Sprintf("ctx=%#x stream=%#x", ctx, s) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if s == 0 {
			return cuda.ErrorInvalidHandle
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		delete(d.mu.streams, s)
		return cuda.Success
	})
}

// StreamSynchronize returns at once unless s is held or has deferred work
// (HoldStream): then it waits for that work and reports its first failure.
func (d *Driver) StreamSynchronize(ctx cuda.Context, s cuda.Stream) error {
	return d.call("StreamSynchronize", func() string { return fmt.Sprintf("ctx=%#x stream=%#x", ctx, s) }, func() cuda.Result {
		d.mu.RLock()
		_, r := d.ctxDeviceLocked(ctx)
		if r == cuda.Success {
			r = d.streamOKLocked(ctx, s)
		}
		d.mu.RUnlock()
		if r != cuda.Success {
			return r
		}
		return d.waitStream(s)
	})
}

// StreamWaitEvent validates s and e. The wait is satisfied at once unless
// e's latest record is deferred behind a held stream, or s has deferred
// work: then s's later work waits behind it.
func (d *Driver) StreamWaitEvent(ctx cuda.Context, s cuda.Stream, e cuda.Event) error {
	return d.call("StreamWaitEvent", func() string { return fmt.Sprintf("ctx=%#x stream=%#x event=%#x", ctx, s, e) }, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		// Cross-context waits are legal in CUDA: any live event will do.
		if _, ok := d.mu.events[e]; !ok {
			return cuda.ErrorInvalidHandle
		}
		d.streamWaitLocked(s, e)
		return cuda.Success
	})
}

// eventLocked returns a live event of ctx.
func (d *Driver) eventLocked(ctx cuda.Context, e cuda.Event) (*event, cuda.Result) {
	ev, ok := d.mu.events[e]
	if !ok || ev.ctx != ctx {
		return nil, cuda.ErrorInvalidHandle
	}
	return ev, cuda.Success
}

// EventCreate creates an event in ctx.
func (d *Driver) EventCreate(ctx cuda.Context, flags uint32) (cuda.Event, error) {
	var e cuda.Event
	err := d.call("EventCreate", func() string { return fmt.Sprintf("ctx=%#x flags=%#x", ctx, flags) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if flags&^validEventFlags != 0 {
			return cuda.ErrorInvalidValue
		}
		e = cuda.Event(d.newHandle(kindEvent))
		d.mu.events[e] = &event{ctx: ctx, flags: flags}
		return cuda.Success
	})
	return e, err
}

// EventDestroy destroys an event of ctx.
func (d *Driver) EventDestroy(ctx cuda.Context, e cuda.Event) error {
	return d.call("EventDestroy", func() string { return fmt.Sprintf("ctx=%#x event=%#x", ctx, e) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if _, r := d.eventLocked(ctx, e); r != cuda.Success {
			return r
		}
		delete(d.mu.events, e)
		d.destroyEventLocked(e)
		return cuda.Success
	})
}

// EventRecord records e on s; it completes at once (or, on a held stream,
// when the work before it ran) and keeps the wall clock time for
// EventElapsedTime.
func (d *Driver) EventRecord(ctx cuda.Context, e cuda.Event, s cuda.Stream) error {
	return d.call("EventRecord", func() string { return fmt.Sprintf("ctx=%#x event=%#x stream=%#x", ctx, e, s) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		ev, r := d.eventLocked(ctx, e)
		if r != cuda.Success {
			return r
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		d.recordLocked(e, ev, s)
		return cuda.Success
	})
}

// EventSynchronize returns at once for a complete event; for one recorded
// behind a held stream it waits until that record ran.
func (d *Driver) EventSynchronize(ctx cuda.Context, e cuda.Event) error {
	return d.call("EventSynchronize", func() string { return fmt.Sprintf("ctx=%#x event=%#x", ctx, e) }, func() cuda.Result {
		d.mu.RLock()
		_, r := d.ctxDeviceLocked(ctx)
		if r == cuda.Success {
			_, r = d.eventLocked(ctx, e)
		}
		d.mu.RUnlock()
		if r != cuda.Success {
			return r
		}
		return d.waitEvent(e)
	})
}

// EventQuery is true for a live event whose latest record ran (as in CUDA,
// an event never recorded is complete too); false while that record waits
// behind a held stream.
func (d *Driver) EventQuery(ctx cuda.Context, e cuda.Event) (bool, error) {
	done := false
	err := d.call("EventQuery", func() string { return fmt.Sprintf("ctx=%#x event=%#x", ctx, e) }, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if _, r := d.eventLocked(ctx, e); r != cuda.Success {
			return r
		}
		d.sched.Lock()
		defer d.sched.Unlock()
		ok, r := d.sched.eventDoneLocked(e)
		done = ok
		return r
	})
	return done, err
}

// EventElapsedTime is the wall-clock time in milliseconds between the
// records of start and end. Both must be recorded and created without
// CU_EVENT_DISABLE_TIMING, else CUDA_ERROR_INVALID_HANDLE.
func (d *Driver) EventElapsedTime(ctx cuda.Context, start, end cuda.Event) (float32, error) {
	var ms float32
	err := d.call("EventElapsedTime", func() string { return fmt.Sprintf("ctx=%#x start=%#x end=%#x", ctx, start, end) }, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, r := d.eventLocked(ctx, start)
		if r != cuda.Success {
			return r
		}
		b, r := d.eventLocked(ctx, end)
		if r != cuda.Success {
			return r
		}
		if !a.recorded || !b.recorded || a.flags&cuda.EventDisableTiming != 0 || b.flags&cuda.EventDisableTiming != 0 {
			return cuda.ErrorInvalidHandle
		}
		ms = float32(b.at.Sub(a.at).Seconds() * 1e3)
		return cuda.Success
	})
	return ms, err
}
