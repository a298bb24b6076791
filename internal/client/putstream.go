package client

import (
	"context"
	"fmt"

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
// feeder that gives nothing for StreamFeedWait while the batch waits
// aborts the stream; so do the end of ctx and the Store's Close.
//
// Feed, Abort and End are for one goroutine at a time; End must be called
// once, and it releases the stream.
type PutStream struct {
	fedBatch
	done chan struct{}
	errs []error // the batch's, once done is closed
}

// BeginPut starts a BatchPut of n keys with options o, whose keys and
// buffers Feed gives (PutStream). Errors of the whole batch (a closed
// Store, bad options) are reported by End, for every key.
func (s *Store) BeginPut(ctx context.Context, n int, stream cuda.Stream, o PutOptions) (*PutStream, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: put stream of n=%d keys", ErrInvalidArgument, n)
	}
	p := &PutStream{done: make(chan struct{})}
	p.init("put stream", ctx, n)
	s.startFed(&p.fedBatch, p.done, func() { p.errs = s.batchPut(ctx, p.keys, p.bufs, stream, o, p) })
	return p, nil
}

// End waits for the batch and returns its per-key errors (as BatchPut's).
// A stream not fed in full is aborted first: its keys fail with
// ErrInvalidArgument and nothing of it is stored.
func (p *PutStream) End() []error {
	p.end()
	<-p.done
	return p.errs
}
