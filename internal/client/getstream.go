package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// GetStream is a BatchGet whose keys and destinations are given in pieces
// (Feed), in order, while the batch runs: each part of the batch (what
// BatchGet splits over cores) starts as soon as its keys are fed, so that a
// caller that must convert its arguments first (the C ABI's Python facade)
// converts the later pieces while the first parts copy instead of before
// any copy.
//
// A part is at least as many keys as a split BatchGet's smallest part (or
// the rest of the batch) and at most a BatchParts-th of the batch; parts
// run concurrently and each reports its own keys as BatchGet does.
//
// An aborted stream (Abort, End before all n were fed, a feeder that gives
// nothing for StreamFeedWait while the batch waits for it, the end of ctx,
// the Store's Close) starts no more parts. The parts already started finish
// and report their keys; every other key fails with the abort's error, and
// nothing was written to its destination.
//
// Feed, Abort and End are for one goroutine at a time; End must be called
// once, and it releases the stream.
type GetStream struct {
	fedBatch
	done  chan struct{}
	sizes []uint64 // the batch's, once done is closed
	errs  []error
}

// BeginGet starts a BatchGet of n keys whose keys and destinations Feed
// gives (GetStream). Errors of the whole batch (a closed Store) are
// reported by End, for every key.
func (s *Store) BeginGet(ctx context.Context, n int, stream cuda.Stream) (*GetStream, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: get stream of n=%d keys", ErrInvalidArgument, n)
	}
	g := &GetStream{done: make(chan struct{}), sizes: make([]uint64, n), errs: make([]error, n)}
	g.init("get stream", ctx, n)
	s.startFed(&g.fedBatch, g.done, func() { s.streamGet(ctx, g, stream) })
	return g, nil
}

// End waits for the batch and returns its sizes and per-key errors (as
// BatchGet's). A stream not fed in full is aborted first: its keys not
// started fail with ErrInvalidArgument.
func (g *GetStream) End() ([]uint64, []error) {
	g.end()
	<-g.done
	return g.sizes, g.errs
}

// streamGet runs g's batch: a part (getRange, as BatchGet's) starts on a
// goroutine of its own as soon as its keys are fed; an abort fails the
// keys not started.
func (s *Store) streamGet(ctx context.Context, g *GetStream, stream cuda.Stream) {
	if err := s.enter(); err != nil {
		fill(g.errs, err)
		return
	}
	defer s.exit()
	s.phases.get.begin(g.n) // the parts time themselves
	least := s.minPartKeys()
	most := max(least, (g.n+s.parts-1)/s.parts)
	plan := wholePlan(g.keys, g.bufs)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []uint64 // every part's, released once all are done (as batchGet's)
	)
	for lo := 0; lo < g.n; {
		hi, err := g.awaitPart(lo, least, most)
		if err != nil {
			fill(g.errs[lo:], err) // no part reads or writes these
			break
		}
		start := lo // lo moves on below
		wg.Go(func() {
			l := s.getRange(ctx, g.keys, g.bufs, start, hi, stream, g.sizes, plan, g.errs)
			mu.Lock()
			leases = append(leases, l...)
			mu.Unlock()
		})
		lo = hi
	}
	wg.Wait()
	s.releaseIDs(ctx, leases)
}
