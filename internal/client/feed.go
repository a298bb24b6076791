package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// fedBatch is the input side of a batch whose keys and buffers are given in
// pieces (Feed), in order, while the batch runs: a PutStream's or a
// GetStream's. The batch reads keys and bufs only below what a wait
// (await, awaitPart, settled) returned for: Feed writes the entries above
// under mu, so the wait orders the two.
//
// Feed, Abort and end are for one goroutine at a time; Abort may also come
// from the Store's Close and from ctx's end.
type fedBatch struct {
	what string // "put stream" or "get stream", in messages
	n    int
	ctx  context.Context
	keys []string   // filled up to fed
	bufs [][]Region // filled up to fed: a put's sources, a get's destinations

	mu    sync.Mutex
	cond  sync.Cond // signalled when fed grows, on an abort, and by a waiter's timer
	fed   int
	last  time.Time // of the start or the last Feed
	err   error     // why it was aborted
	ended bool
}

func (f *fedBatch) init(what string, ctx context.Context, n int) {
	f.what, f.ctx, f.n = what, ctx, n
	f.keys, f.bufs = make([]string, n), make([][]Region, n)
	f.last = time.Now()
	f.cond.L = &f.mu
}

// StreamFeedWait is how long a put or get stream's batch waits for the
// next Feed before it aborts the stream: far longer than converting a
// piece takes (~0.1 ms per 1000 keys), far shorter than a registration
// TTL (at least 1 s), whose heartbeat a put stream's wait may hold up.
const StreamFeedWait = 100 * time.Millisecond

// startFed runs batch on a goroutine of its own, which closes done when it
// returns. Until then the stream is known to Close, which aborts it; a
// stream started once Close has begun is not (its batch fails with
// ErrClosed). The end of ctx aborts the stream too.
func (s *Store) startFed(f *fedBatch, done chan struct{}, batch func()) {
	stop := context.AfterFunc(f.ctx, func() { f.Abort(fmt.Errorf("%s: %w", f.what, f.ctx.Err())) })
	s.gate.Lock()
	if s.gate.streams == nil {
		s.gate.streams = map[*fedBatch]struct{}{}
	}
	s.gate.streams[f] = struct{}{}
	s.gate.Unlock()
	go func() {
		defer close(done)
		defer stop()
		defer func() {
			s.gate.Lock()
			delete(s.gate.streams, f)
			s.gate.Unlock()
		}()
		batch()
	}()
}

// Feed gives the stream's next len(keys) keys and their buffers. It
// copies neither: keys and the regions must stay unchanged until End
// returns. An error (more keys than the stream's n, keys and buffers of
// different lengths, an aborted stream) feeds nothing.
func (f *fedBatch) Feed(keys []string, bufs [][]Region) error {
	if len(keys) != len(bufs) {
		return fmt.Errorf("%w: %s feed of %d keys but %d buffers", ErrInvalidArgument, f.what, len(keys), len(bufs))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.ended:
		return fmt.Errorf("%w: %s already ended", ErrInvalidArgument, f.what)
	case f.err != nil:
		return f.err
	case f.ctx.Err() != nil:
		// The context's AfterFunc aborts the stream too, but on a
		// goroutine of its own: a feed after the cancellation must not
		// slip in before it.
		f.abortLocked(fmt.Errorf("%s: %w", f.what, f.ctx.Err()))
		return f.err
	case f.fed+len(keys) > f.n:
		return fmt.Errorf("%w: %s of n=%d keys: %d fed, %d more given", ErrInvalidArgument, f.what, f.n, f.fed, len(keys))
	}
	copy(f.keys[f.fed:], keys)
	copy(f.bufs[f.fed:], bufs)
	f.fed += len(keys)
	f.last = time.Now()
	f.cond.Broadcast()
	return nil
}

// Abort aborts the stream with err if it is not fed in full yet; otherwise
// it does nothing. What an abort means is the stream's (PutStream,
// GetStream).
func (f *fedBatch) Abort(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abortLocked(err)
}

func (f *fedBatch) abortLocked(err error) {
	if f.fed == f.n || f.err != nil {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %s aborted", ErrInvalidArgument, f.what)
	}
	f.err = err
	f.cond.Broadcast()
}

// end marks the stream ended (no more feeds) and aborts it if it is not
// fed in full.
func (f *fedBatch) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended = true
		f.abortLocked(fmt.Errorf("%w: %s of n=%d keys ended after %d were fed", ErrInvalidArgument, f.what, f.n, f.fed))
	}
}

// await waits until the first hi keys are fed and returns nil, or the
// abort's error if the stream was aborted first.
func (f *fedBatch) await(hi int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitLocked(hi)
}

// awaitPart waits until the part of the batch that starts at lo may start:
// least keys of it are fed, or the rest of the batch. It returns the
// part's end — as many keys as are fed, up to most — or the abort's error.
func (f *fedBatch) awaitPart(lo, least, most int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.waitLocked(min(f.n, lo+least)); err != nil {
		return lo, err
	}
	return min(f.fed, lo+most), nil
}

// state reports whether the stream is fed in full, or the abort's error,
// without waiting.
func (f *fedBatch) state() (fed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fed == f.n, f.err
}

// settled waits until the stream is fed in full (nil) or aborted (the
// abort's error).
func (f *fedBatch) settled() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitLocked(f.n)
}

// waitLocked waits until hi keys are fed or the stream is aborted; it
// aborts it when StreamFeedWait passes without a Feed.
func (f *fedBatch) waitLocked(hi int) error {
	for f.fed < hi && f.err == nil {
		idle := time.Since(f.last)
		if idle >= StreamFeedWait {
			f.abortLocked(fmt.Errorf("%w: %s of n=%d keys: no feed for %v after %d keys",
				ErrInvalidArgument, f.what, f.n, idle.Round(time.Millisecond), f.fed))
			break
		}
		t := time.AfterFunc(StreamFeedWait-idle, func() {
			f.mu.Lock()
			f.cond.Broadcast()
			f.mu.Unlock()
		})
		f.cond.Wait()
		t.Stop()
	}
	return f.err
}
