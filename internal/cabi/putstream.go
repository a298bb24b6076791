package cabi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// A put stream (kvfabric_put_stream_*) is a batch put whose keys and
// buffers come in pieces while its first pieces already copy
// (client.PutStream): the caller converts its next piece beside the
// copies instead of converting the whole batch before the call.

// putStreamer is a Backend that runs a batch put fed in pieces
// (client.Store). A Backend without it gets bufferedStream.
type putStreamer interface {
	BeginPut(ctx context.Context, n int, stream cuda.Stream, o client.PutOptions) (*client.PutStream, error)
}

// putStream is what a stream handle drives: client.PutStream or a
// bufferedStream. Feed and End are for one caller at a time; Abort may
// come from another (Close).
type putStream interface {
	Feed(keys []string, srcs [][]client.Region) error
	Abort(err error)
	End() []error
}

// bufferedStream is a put stream of a Backend that cannot stream: it
// collects the pieces and puts them in one BatchPut at End, all or nothing
// as client.PutStream is (a stream not fed in full stores nothing).
type bufferedStream struct {
	b      Backend
	n      int
	stream cuda.Stream
	o      client.PutOptions

	mu   sync.Mutex
	keys []string
	srcs [][]client.Region
	err  error // why it was aborted
}

func (s *bufferedStream) Feed(keys []string, srcs [][]client.Region) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(keys) != len(srcs):
		return fmt.Errorf("%w: put stream feed of %d keys but %d buffers", client.ErrInvalidArgument, len(keys), len(srcs))
	case s.err != nil:
		return s.err
	case len(s.keys)+len(keys) > s.n:
		return fmt.Errorf("%w: put stream of n=%d keys: %d fed, %d more given", client.ErrInvalidArgument, s.n, len(s.keys), len(keys))
	}
	s.keys = append(s.keys, keys...)
	s.srcs = append(s.srcs, srcs...)
	return nil
}

func (s *bufferedStream) Abort(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && len(s.keys) < s.n {
		s.err = err
	}
}

func (s *bufferedStream) End() []error {
	s.mu.Lock()
	if s.err == nil && len(s.keys) < s.n {
		s.err = fmt.Errorf("%w: put stream of n=%d keys ended after %d were fed", client.ErrInvalidArgument, s.n, len(s.keys))
	}
	err, keys, srcs := s.err, s.keys, s.srcs
	s.mu.Unlock()
	if err != nil {
		errs := make([]error, s.n)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return s.b.BatchPut(bg, keys, srcs, s.stream, s.o)
}

// openStream is one stream handle's stream and the keys it was fed, which
// End names in its per-key messages.
type openStream struct {
	s    putStream
	n    int
	keys []string
}

// streamsTable maps a Store handle's stream handles to their streams. It
// is safe for concurrent use.
type streamsTable struct {
	mu     sync.Mutex // guards m and closed
	m      map[int64]*openStream
	closed bool // the Store's Close ran: no streams are added any more
}

// nextStream numbers stream handles across every Store of the process:
// positive and never reused.
var nextStream atomic.Int64

func (t *streamsTable) add(s *openStream) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, fmt.Errorf("%w: put stream: the store was closed meanwhile", client.ErrClosed)
	}
	if t.m == nil {
		t.m = map[int64]*openStream{}
	}
	id := nextStream.Add(1)
	t.m[id] = s
	return id, nil
}

func invalidStream(h, id int64) error {
	return fmt.Errorf("%w: put stream %d of store %d (ended, or never begun there)", errInvalidHandle, id, h)
}

func (t *streamsTable) get(h, id int64) (*openStream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		return nil, invalidStream(h, id)
	}
	return s, nil
}

func (t *streamsTable) take(h, id int64) (*openStream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		return nil, invalidStream(h, id)
	}
	delete(t.m, id)
	return s, nil
}

// abortAll aborts every open stream (the Store is closing: its batches
// must not wait for feeds that may never come) and refuses new ones. The
// streams stay in the table for their End.
func (t *streamsTable) abortAll() {
	t.mu.Lock()
	t.closed = true
	open := make([]putStream, 0, len(t.m))
	for _, s := range t.m {
		open = append(open, s.s)
	}
	t.mu.Unlock()
	for _, s := range open {
		s.Abort(fmt.Errorf("%w: put stream: the store is closing", client.ErrClosed))
	}
}

// PutStreamBegin begins a put stream of n keys with the options of
// BatchPut and writes its handle to out.
func PutStreamBegin(h int64, n uint64, stream uintptr, replicas int32, flags uint32, preferred unsafe.Pointer,
	preferredLen, softPinTTLms uint64, out *int64) int32 {
	return call(h, func(e *entry) error {
		if out == nil {
			return fmt.Errorf("%w: put stream begin: out is NULL", client.ErrInvalidArgument)
		}
		if n > maxBatch {
			return fmt.Errorf("%w: put stream of n=%d keys (max %d)", client.ErrInvalidArgument, n, maxBatch)
		}
		o, err := putOptions(replicas, flags, preferred, preferredLen, softPinTTLms)
		if err != nil {
			return err
		}
		var s putStream
		if ps, ok := e.store.(putStreamer); ok {
			if s, err = ps.BeginPut(bg, int(n), cuda.Stream(stream), o); err != nil {
				return err
			}
		} else {
			s = &bufferedStream{b: e.store, n: int(n), stream: cuda.Stream(stream), o: o}
		}
		id, err := e.streams.add(&openStream{s: s, n: int(n), keys: make([]string, 0, n)})
		if err != nil {
			s.Abort(err)
			s.End()
			return err
		}
		*out = id
		return nil
	})
}

// PutStreamFeed feeds a stream its next n keys (decoded as BatchPut's) and
// their regions. A feed the library refuses feeds nothing: the stream
// stays as it was, and the caller may feed again or end it.
func PutStreamFeed(h, id int64, n uint64, keys, keyLens, ptrs, lens, parts unsafe.Pointer) int32 {
	return putStreamFeed(h, id, func() ([]string, error) { return decodeKeys(n, keys, keyLens) }, ptrs, lens, parts)
}

// PutStreamFeedPacked is PutStreamFeed with the keys packed as for
// BatchPutPacked.
func PutStreamFeedPacked(h, id int64, n uint64, packed unsafe.Pointer, size uint64, ptrs, lens, parts unsafe.Pointer) int32 {
	return putStreamFeed(h, id, func() ([]string, error) { return decodePackedKeys(n, packed, size) }, ptrs, lens, parts)
}

func putStreamFeed(h, id int64, keys func() ([]string, error), ptrs, lens, parts unsafe.Pointer) int32 {
	return call(h, func(e *entry) error {
		s, err := e.streams.get(h, id)
		if err != nil {
			return err
		}
		ks, err := keys()
		if err != nil {
			return err
		}
		if len(ks) > 0 && (ptrs == nil || lens == nil) {
			return fmt.Errorf("%w: put stream feed needs pointers and lengths", client.ErrInvalidArgument)
		}
		b, err := withRegions(ks, ptrs, lens, parts)
		if err != nil {
			return err
		}
		if err := s.s.Feed(b.keys, b.regions); err != nil {
			return err
		}
		s.keys = append(s.keys, b.keys...)
		return nil
	})
}

// PutStreamAbort aborts a stream not fed in full yet: End then fails
// every key and nothing of the stream is stored.
func PutStreamAbort(h, id int64) int32 {
	return call(h, func(e *entry) error {
		s, err := e.streams.get(h, id)
		if err != nil {
			return err
		}
		s.s.Abort(fmt.Errorf("%w: put stream aborted by the caller", client.ErrInvalidArgument))
		return nil
	})
}

// PutStreamEnd waits for a stream's batch, writes each key's status to
// statuses (n int32s, may be NULL) and releases the stream handle. A
// stream not fed in full is aborted first. Return value as BatchPut's.
func PutStreamEnd(h, id int64, statuses unsafe.Pointer) int32 {
	var ran bool
	var n int
	st := call(h, func(e *entry) error {
		s, err := e.streams.take(h, id)
		if err != nil {
			return err
		}
		n = s.n
		errs := s.s.End()
		if len(errs) != s.n {
			return fmt.Errorf("cabi: store returned %d results for a stream of %d keys", len(errs), s.n)
		}
		ran = true
		keys := s.keys
		for len(keys) < s.n { // a stream ended early: its keys not fed are unnamed
			keys = append(keys, fmt.Sprintf("#%d (not fed)", len(keys)))
		}
		return perKey(keys, errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, uint64(n), st)
	return st
}
