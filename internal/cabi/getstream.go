package cabi

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// A get stream (kvfabric_get_stream_*) is a batch get whose keys and
// destinations come in pieces while the parts fed first already copy
// (client.GetStream): the caller converts its next piece beside the copies
// instead of converting the whole batch before the call. Get streams share
// the put streams' table and numbering (streamsTable).

// getStreamer is a Backend that runs a batch get fed in pieces
// (client.Store). A Backend without it gets bufferedGet.
type getStreamer interface {
	BeginGet(ctx context.Context, n int, stream cuda.Stream) (*client.GetStream, error)
}

// getStream is what a get stream handle drives: client.GetStream or a
// bufferedGet. Feed and End are for one caller at a time; Abort may come
// from another (Close).
type getStream interface {
	Feed(keys []string, dsts [][]client.Region) error
	Abort(err error)
	End() ([]uint64, []error)
}

// GetStreamBegin begins a get stream of n keys on stream and writes its
// handle to out.
func GetStreamBegin(h int64, n uint64, stream uintptr, out *int64) int32 {
	return call(h, func(e *entry) error {
		if out == nil {
			return fmt.Errorf("%w: get stream begin: out is NULL", client.ErrInvalidArgument)
		}
		if n > maxBatch {
			return fmt.Errorf("%w: get stream of n=%d keys (max %d)", client.ErrInvalidArgument, n, maxBatch)
		}
		var s getStream
		if gs, ok := e.store.(getStreamer); ok {
			var err error
			if s, err = gs.BeginGet(bg, int(n), cuda.Stream(stream)); err != nil {
				return err
			}
		} else {
			s = &bufferedGet{buffered: buffered{what: "get stream", n: int(n)}, b: e.store, stream: cuda.Stream(stream)}
		}
		id, err := e.streams.add(&openStream{get: s, n: int(n), keys: make([]string, 0, n)})
		if err != nil {
			s.Abort(err)
			s.End()
			return err
		}
		*out = id
		return nil
	})
}

// GetStreamFeed feeds a get stream its next n keys (decoded as BatchGet's)
// and their destination regions. A feed the library refuses feeds
// nothing: the stream stays as it was, and the caller may feed again or
// end it.
func GetStreamFeed(h, id int64, n uint64, keys, keyLens, ptrs, lens, parts unsafe.Pointer) int32 {
	return streamFeed(h, id, false, func() ([]string, error) { return decodeKeys(n, keys, keyLens) }, ptrs, lens, parts)
}

// GetStreamFeedPacked is GetStreamFeed with the keys packed as for
// BatchGetPacked.
func GetStreamFeedPacked(h, id int64, n uint64, packed unsafe.Pointer, size uint64, ptrs, lens, parts unsafe.Pointer) int32 {
	return streamFeed(h, id, false, func() ([]string, error) { return decodePackedKeys(n, packed, size) }, ptrs, lens, parts)
}

// GetStreamAbort aborts a get stream not fed in full yet: it starts no
// more parts, and End fails every key not started.
func GetStreamAbort(h, id int64) int32 {
	return streamAbort(h, id, false)
}

// GetStreamEnd waits for a get stream's batch, writes each key's size read
// to nread and its status to statuses (n entries each, either may be
// NULL) and releases the stream handle. A stream not fed in full is
// aborted first. Return value as BatchGet's.
func GetStreamEnd(h, id int64, nread, statuses unsafe.Pointer) int32 {
	var ran bool
	var n int
	st := call(h, func(e *entry) error {
		s, err := e.streams.take(h, id, false)
		if err != nil {
			return err
		}
		n = s.n
		sizes, errs := s.get.End()
		if len(errs) != s.n || len(sizes) != s.n {
			return fmt.Errorf("cabi: store returned %d sizes, %d results for a stream of %d keys", len(sizes), len(errs), s.n)
		}
		if nread != nil && n > 0 {
			copy(unsafe.Slice((*uint64)(nread), n), sizes)
		}
		ran = true
		return perKey(s.named(), errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, uint64(n), st)
	return st
}
