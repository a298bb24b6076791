package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// PutStream is a BatchPut whose keys and buffers are given in pieces
// (Feed), in order, while the batch runs: its first chunk goes to the
// master and the GPU as soon as it is fed, so that a caller that must
// convert its arguments first (the C ABI's Python facade: ~0.1 µs per key
// of list conversion and decoding, 9–14 % of a 64 KiB batch on the H200)
// does so beside the copies instead of before them.
//
// All or nothing as far as the input goes: no put of a stream becomes
// visible before all n keys are fed, and a stream aborted (Abort, or End
// before all n were fed) revokes every put it started — its keys fail with
// the abort's error and nothing of it is left in the store. (Its PutStarts
// may have evicted other objects to make room, as any put may.) An upsert
// stream, whose PutStarts retire the old values, and a batch the Store
// splits over cores (BatchParts) start only once all n are fed.
//
// The batch waits for its feeder with the Store's registration fence held
// (Store.reg: a heartbeat's update of the registration waits for it), so a
// feeder that gives nothing for PutStreamFeedWait while the batch waits
// aborts the stream; so do the end of ctx and the Store's Close.
//
// Feed, Abort and End are for one goroutine at a time; End must be called
// once, and it releases the stream.
type PutStream struct {
	n    int
	ctx  context.Context
	keys []string   // filled up to fed
	srcs [][]Region // filled up to fed
	done chan struct{}
	errs []error // the batch's, once done is closed

	mu    sync.Mutex
	cond  sync.Cond // signalled when fed grows, on an abort, and by a waiter's timer
	fed   int
	last  time.Time // of BeginPut or the last Feed
	err   error     // why it was aborted
	ended bool
}

// PutStreamFeedWait is how long a PutStream's batch waits for the next
// Feed before it aborts the stream: far longer than converting a chunk
// takes (~0.1 ms per 1000 keys), far shorter than a registration TTL
// (at least 1 s), whose heartbeat the wait may hold up.
const PutStreamFeedWait = 100 * time.Millisecond

// BeginPut starts a BatchPut of n keys with options o, whose keys and
// buffers Feed gives (PutStream). Errors of the whole batch (a closed
// Store, bad options) are reported by End, for every key.
func (s *Store) BeginPut(ctx context.Context, n int, stream cuda.Stream, o PutOptions) (*PutStream, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: put stream of n=%d keys", ErrInvalidArgument, n)
	}
	p := &PutStream{n: n, ctx: ctx, keys: make([]string, n), srcs: make([][]Region, n), done: make(chan struct{}), last: time.Now()}
	p.cond.L = &p.mu
	stop := context.AfterFunc(ctx, func() { p.Abort(fmt.Errorf("put stream: %w", ctx.Err())) })
	// Known to Close until its batch returns (Close aborts it). A stream
	// begun once Close has started is not: its batch fails with ErrClosed.
	s.gate.Lock()
	if s.gate.streams == nil {
		s.gate.streams = map[*PutStream]struct{}{}
	}
	s.gate.streams[p] = struct{}{}
	s.gate.Unlock()
	go func() {
		defer close(p.done)
		defer stop()
		defer func() {
			s.gate.Lock()
			delete(s.gate.streams, p)
			s.gate.Unlock()
		}()
		p.errs = s.batchPut(ctx, p.keys, p.srcs, stream, o, p)
	}()
	return p, nil
}

// Feed gives the stream's next len(keys) keys and their buffers. It
// copies neither: keys and the regions must stay unchanged until End
// returns. An error (more keys than the stream's n, keys and srcs of
// different lengths, an aborted stream) feeds nothing.
func (p *PutStream) Feed(keys []string, srcs [][]Region) error {
	if len(keys) != len(srcs) {
		return fmt.Errorf("%w: put stream feed of %d keys but %d buffers", ErrInvalidArgument, len(keys), len(srcs))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.ended:
		return fmt.Errorf("%w: put stream already ended", ErrInvalidArgument)
	case p.err != nil:
		return p.err
	case p.ctx.Err() != nil:
		// The context's AfterFunc aborts the stream too, but on a
		// goroutine of its own: a feed after the cancellation must not
		// slip in before it.
		p.abortLocked(fmt.Errorf("put stream: %w", p.ctx.Err()))
		return p.err
	case p.fed+len(keys) > p.n:
		return fmt.Errorf("%w: put stream of n=%d keys: %d fed, %d more given", ErrInvalidArgument, p.n, p.fed, len(keys))
	}
	copy(p.keys[p.fed:], keys)
	copy(p.srcs[p.fed:], srcs)
	p.fed += len(keys)
	p.last = time.Now()
	p.cond.Broadcast()
	return nil
}

// Abort fails every key of the stream with err and revokes the puts it
// started, if it is not fed in full yet; otherwise it does nothing.
func (p *PutStream) Abort(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abortLocked(err)
}

func (p *PutStream) abortLocked(err error) {
	if p.fed == p.n || p.err != nil {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: put stream aborted", ErrInvalidArgument)
	}
	p.err = err
	p.cond.Broadcast()
}

// End waits for the batch and returns its per-key errors (as BatchPut's).
// A stream not fed in full is aborted first: its keys fail with
// ErrInvalidArgument and nothing of it is stored.
func (p *PutStream) End() []error {
	p.mu.Lock()
	if !p.ended {
		p.ended = true
		p.abortLocked(fmt.Errorf("%w: put stream of n=%d keys ended after %d were fed", ErrInvalidArgument, p.n, p.fed))
	}
	p.mu.Unlock()
	<-p.done
	return p.errs
}

// await waits until the first hi keys are fed and returns nil, or the
// abort's error if the stream was aborted first.
func (p *PutStream) await(hi int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitLocked(hi)
}

// state reports whether the stream is fed in full, or the abort's error,
// without waiting.
func (p *PutStream) state() (fed bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fed == p.n, p.err
}

// settled waits until the stream is fed in full (nil) or aborted (the
// abort's error).
func (p *PutStream) settled() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitLocked(p.n)
}

// waitLocked waits until hi keys are fed or the stream is aborted; it
// aborts it when PutStreamFeedWait passes without a Feed.
func (p *PutStream) waitLocked(hi int) error {
	for p.fed < hi && p.err == nil {
		idle := time.Since(p.last)
		if idle >= PutStreamFeedWait {
			p.abortLocked(fmt.Errorf("%w: put stream of n=%d keys: no feed for %v after %d keys (the batch waited with the registration fence held)",
				ErrInvalidArgument, p.n, idle.Round(time.Millisecond), p.fed))
			break
		}
		t := time.AfterFunc(PutStreamFeedWait-idle, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		p.cond.Wait()
		t.Stop()
	}
	return p.err
}
