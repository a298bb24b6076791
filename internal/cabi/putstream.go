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
// (client.Store). A Backend without it gets bufferedPut.
type putStreamer interface {
	BeginPut(ctx context.Context, n int, stream cuda.Stream, o client.PutOptions) (*client.PutStream, error)
}

// putStream is what a put stream handle drives: client.PutStream or a
// bufferedPut. Feed and End are for one caller at a time; Abort may
// come from another (Close).
type putStream interface {
	Feed(keys []string, srcs [][]client.Region) error
	Abort(err error)
	End() []error
}

// buffered collects a stream's pieces for a Backend that cannot stream:
// the batch runs in one call at End (bufferedPut, bufferedGet).
type buffered struct {
	what string // "put stream" or "get stream"
	n    int

	mu   sync.Mutex
	keys []string
	bufs [][]client.Region
	err  error // why it was aborted
}

func (s *buffered) Feed(keys []string, bufs [][]client.Region) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(keys) != len(bufs):
		return fmt.Errorf("%w: %s feed of %d keys but %d buffers", client.ErrInvalidArgument, s.what, len(keys), len(bufs))
	case s.err != nil:
		return s.err
	case len(s.keys)+len(keys) > s.n:
		return fmt.Errorf("%w: %s of n=%d keys: %d fed, %d more given", client.ErrInvalidArgument, s.what, s.n, len(s.keys), len(keys))
	}
	s.keys = append(s.keys, keys...)
	s.bufs = append(s.bufs, bufs...)
	return nil
}

func (s *buffered) Abort(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && len(s.keys) < s.n {
		s.err = err
	}
}

// end returns what was fed, or (a stream not fed in full) the abort's
// error, with errs filled with it.
func (s *buffered) end() (keys []string, bufs [][]client.Region, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && len(s.keys) < s.n {
		s.err = fmt.Errorf("%w: %s of n=%d keys ended after %d were fed", client.ErrInvalidArgument, s.what, s.n, len(s.keys))
	}
	if s.err != nil {
		errs = make([]error, s.n)
		for i := range errs {
			errs[i] = s.err
		}
		return nil, nil, errs
	}
	return s.keys, s.bufs, nil
}

// bufferedPut is a put stream of a Backend that cannot stream: one
// BatchPut at End, all or nothing as client.PutStream is (a stream not fed
// in full stores nothing).
type bufferedPut struct {
	buffered
	b      Backend
	stream cuda.Stream
	o      client.PutOptions
}

func (s *bufferedPut) End() []error {
	keys, srcs, errs := s.end()
	if errs != nil {
		return errs
	}
	return s.b.BatchPut(bg, keys, srcs, s.stream, s.o)
}

// bufferedGet is a get stream of a Backend that cannot stream: one
// BatchGet at End. A stream not fed in full gets nothing (every key fails
// with the abort's error, as client.GetStream's keys not started do).
type bufferedGet struct {
	buffered
	b      Backend
	stream cuda.Stream
}

func (s *bufferedGet) End() ([]uint64, []error) {
	keys, dsts, errs := s.end()
	if errs != nil {
		return make([]uint64, s.n), errs
	}
	return s.b.BatchGet(bg, keys, dsts, s.stream)
}

// openStream is one stream handle's stream — a put stream or a get
// stream — and the keys it was fed, which End names in its per-key
// messages.
type openStream struct {
	put  putStream // one of put and get is set
	get  getStream
	n    int
	keys []string
}

// named returns the keys fed, and for those not fed (a stream ended
// early) a name that says so.
func (s *openStream) named() []string {
	keys := s.keys
	for len(keys) < s.n {
		keys = append(keys, fmt.Sprintf("#%d (not fed)", len(keys)))
	}
	return keys
}

func (s *openStream) what() string {
	if s.put != nil {
		return "put stream"
	}
	return "get stream"
}

func (s *openStream) feed(keys []string, bufs [][]client.Region) error {
	if s.put != nil {
		return s.put.Feed(keys, bufs)
	}
	return s.get.Feed(keys, bufs)
}

func (s *openStream) abort(err error) {
	if s.put != nil {
		s.put.Abort(err)
	} else {
		s.get.Abort(err)
	}
}

// streamsTable maps a Store handle's stream handles (put and get streams,
// numbered alike) to their streams. It is safe for concurrent use.
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
		return 0, fmt.Errorf("%w: %s: the store was closed meanwhile", client.ErrClosed, s.what())
	}
	if t.m == nil {
		t.m = map[int64]*openStream{}
	}
	id := nextStream.Add(1)
	t.m[id] = s
	return id, nil
}

func invalidStream(what string, h, id int64) error {
	return fmt.Errorf("%w: %s %d of store %d (ended, or never begun there)", errInvalidHandle, what, id, h)
}

// get returns stream id of store h if it is a put stream (put) or a get
// stream (!put); take does so and removes it from the table.
func (t *streamsTable) get(h, id int64, put bool) (*openStream, error) {
	return t.lookup(h, id, put, false)
}

func (t *streamsTable) take(h, id int64, put bool) (*openStream, error) {
	return t.lookup(h, id, put, true)
}

func (t *streamsTable) lookup(h, id int64, put, take bool) (*openStream, error) {
	what := "get stream"
	if put {
		what = "put stream"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	switch {
	case !ok:
		return nil, invalidStream(what, h, id)
	case (s.put != nil) != put:
		return nil, fmt.Errorf("%w: %s %d of store %d is a %s", errInvalidHandle, what, id, h, s.what())
	}
	if take {
		delete(t.m, id)
	}
	return s, nil
}

// abortAll aborts every open stream (the Store is closing: its batches
// must not wait for feeds that may never come) and refuses new ones. The
// streams stay in the table for their End.
func (t *streamsTable) abortAll() {
	t.mu.Lock()
	t.closed = true
	open := make([]*openStream, 0, len(t.m))
	for _, s := range t.m {
		open = append(open, s)
	}
	t.mu.Unlock()
	for _, s := range open {
		s.abort(fmt.Errorf("%w: %s: the store is closing", client.ErrClosed, s.what()))
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
			s = &bufferedPut{buffered: buffered{what: "put stream", n: int(n)}, b: e.store, stream: cuda.Stream(stream), o: o}
		}
		id, err := e.streams.add(&openStream{put: s, n: int(n), keys: make([]string, 0, n)})
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
	return streamFeed(h, id, true, func() ([]string, error) { return decodeKeys(n, keys, keyLens) }, ptrs, lens, parts)
}

// PutStreamFeedPacked is PutStreamFeed with the keys packed as for
// BatchPutPacked.
func PutStreamFeedPacked(h, id int64, n uint64, packed unsafe.Pointer, size uint64, ptrs, lens, parts unsafe.Pointer) int32 {
	return streamFeed(h, id, true, func() ([]string, error) { return decodePackedKeys(n, packed, size) }, ptrs, lens, parts)
}

// streamFeed feeds put stream (put) or get stream id its next keys and
// regions.
func streamFeed(h, id int64, put bool, keys func() ([]string, error), ptrs, lens, parts unsafe.Pointer) int32 {
	return call(h, func(e *entry) error {
		s, err := e.streams.get(h, id, put)
		if err != nil {
			return err
		}
		ks, err := keys()
		if err != nil {
			return err
		}
		if len(ks) > 0 && (ptrs == nil || lens == nil) {
			return fmt.Errorf("%w: %s feed needs pointers and lengths", client.ErrInvalidArgument, s.what())
		}
		b, err := withRegions(ks, ptrs, lens, parts)
		if err != nil {
			return err
		}
		if err := s.feed(b.keys, b.regions); err != nil {
			return err
		}
		s.keys = append(s.keys, b.keys...)
		return nil
	})
}

// PutStreamAbort aborts a stream not fed in full yet: End then fails
// every key and nothing of the stream is stored.
func PutStreamAbort(h, id int64) int32 {
	return streamAbort(h, id, true)
}

func streamAbort(h, id int64, put bool) int32 {
	return call(h, func(e *entry) error {
		s, err := e.streams.get(h, id, put)
		if err != nil {
			return err
		}
		s.abort(fmt.Errorf("%w: %s aborted by the caller", client.ErrInvalidArgument, s.what()))
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
		s, err := e.streams.take(h, id, true)
		if err != nil {
			return err
		}
		n = s.n
		errs := s.put.End()
		if len(errs) != s.n {
			return fmt.Errorf("cabi: store returned %d results for a stream of %d keys", len(errs), s.n)
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
