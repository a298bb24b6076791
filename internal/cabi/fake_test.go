package cabi

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// fakeStore is an in-memory Backend whose regions are process addresses,
// like the simulator's device pointers. It exists to test the ABI layer
// (decoding, status mapping, handle lifecycle, panics) in isolation.
type fakeStore struct {
	mu struct {
		sync.Mutex
		objs       map[string][]byte
		used       uint64
		closed     bool
		closeFails int // Close fails this many more times
		pending    bool
		lastStream cuda.Stream
		heapCopies int // GetBytes calls: objects copied into the Go heap
	}
	capacity uint64
	panicOn  string // key that makes Put panic
}

var _ Backend = (*fakeStore)(nil)

func newFake(capacity uint64) *fakeStore {
	f := &fakeStore{capacity: capacity}
	f.mu.objs = map[string][]byte{}
	return f
}

func mem(r client.Region) []byte {
	if r.Len == 0 {
		return nil
	}
	// Region pointers are process addresses here, as in the simulator.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&r.Ptr))
	return unsafe.Slice((*byte)(p), r.Len)
}

func (f *fakeStore) check(key string) error {
	if f.mu.closed {
		return client.ErrClosed
	}
	if key == "" {
		return client.ErrInvalidArgument
	}
	return nil
}

func (f *fakeStore) Put(_ context.Context, key string, src []client.Region, s cuda.Stream, _ client.PutOptions) error {
	if key == f.panicOn {
		panic("fake: boom")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.lastStream = s
	if err := f.check(key); err != nil {
		return err
	}
	if _, ok := f.mu.objs[key]; ok {
		return client.ErrAlreadyExists
	}
	var b []byte
	for _, r := range src {
		b = append(b, mem(r)...)
	}
	if f.mu.used+uint64(len(b)) > f.capacity {
		return client.ErrNoSpace
	}
	f.mu.used += uint64(len(b))
	f.mu.objs[key] = b
	return nil
}

func (f *fakeStore) Get(_ context.Context, key string, dst []client.Region, s cuda.Stream) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.lastStream = s
	if err := f.check(key); err != nil {
		return 0, err
	}
	b, ok := f.mu.objs[key]
	if !ok {
		return 0, client.ErrNotFound
	}
	var total uint64
	for _, r := range dst {
		total += r.Len
	}
	if total < uint64(len(b)) {
		return uint64(len(b)), client.ErrBufferTooSmall
	}
	rest := b
	for _, r := range dst {
		rest = rest[copy(mem(r), rest):]
	}
	return uint64(len(b)), nil
}

func (f *fakeStore) BatchPut(ctx context.Context, keys []string, srcs [][]client.Region, s cuda.Stream, o client.PutOptions) []error {
	errs := make([]error, len(keys))
	for i := range keys {
		errs[i] = f.Put(ctx, keys[i], srcs[i], s, o)
	}
	return errs
}

func (f *fakeStore) BatchGet(ctx context.Context, keys []string, dsts [][]client.Region, s cuda.Stream) ([]uint64, []error) {
	n := make([]uint64, len(keys))
	errs := make([]error, len(keys))
	for i := range keys {
		n[i], errs[i] = f.Get(ctx, keys[i], dsts[i], s)
	}
	return n, errs
}

func (f *fakeStore) PutBytes(ctx context.Context, key string, data []byte, o client.PutOptions) error {
	return f.Put(ctx, key, []client.Region{{Ptr: uintptr(unsafe.Pointer(unsafe.SliceData(data))), Len: uint64(len(data))}}, 0, o)
}

func (f *fakeStore) GetBytes(_ context.Context, key string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(key); err != nil {
		return nil, err
	}
	b, ok := f.mu.objs[key]
	if !ok {
		return nil, client.ErrNotFound
	}
	f.mu.heapCopies++
	return append([]byte(nil), b...), nil
}

// GetBytesInto checks the size before copying, like client.Store's.
func (f *fakeStore) GetBytesInto(_ context.Context, key string, dst []byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(key); err != nil {
		return 0, err
	}
	b, ok := f.mu.objs[key]
	if !ok {
		return 0, client.ErrNotFound
	}
	if len(b) > len(dst) {
		return uint64(len(b)), client.ErrBufferTooSmall
	}
	return uint64(copy(dst, b)), nil
}

func (f *fakeStore) Exists(_ context.Context, key string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(key); err != nil {
		return false, err
	}
	_, ok := f.mu.objs[key]
	return ok, nil
}

func (f *fakeStore) BatchExists(ctx context.Context, keys []string, _ bool) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		var err error
		if out[i], err = f.Exists(ctx, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (f *fakeStore) Size(_ context.Context, key string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(key); err != nil {
		return 0, err
	}
	b, ok := f.mu.objs[key]
	if !ok {
		return 0, client.ErrNotFound
	}
	return uint64(len(b)), nil
}

func (f *fakeStore) Remove(_ context.Context, key string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(key); err != nil {
		return err
	}
	b, ok := f.mu.objs[key]
	if !ok {
		return client.ErrNotFound
	}
	f.mu.used -= uint64(len(b))
	delete(f.mu.objs, key)
	return nil
}

func (f *fakeStore) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	for i, k := range keys {
		errs[i] = f.Remove(ctx, k, force)
	}
	return errs
}

func (f *fakeStore) BatchGetRanges(_ context.Context, keys []string, spans [][]client.Span, _ cuda.Stream) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := make([]error, len(keys))
	for i, k := range keys {
		if errs[i] = f.check(k); errs[i] != nil {
			continue
		}
		b, ok := f.mu.objs[k]
		if !ok {
			errs[i] = client.ErrNotFound
			continue
		}
		for _, s := range spans[i] {
			if s.Src > uint64(len(b)) || s.Dst.Len > uint64(len(b))-s.Src {
				errs[i] = client.ErrInvalidArgument
				break
			}
			copy(mem(s.Dst), b[s.Src:])
		}
	}
	return errs
}

func (f *fakeStore) Replicas(_ context.Context, keys []string) ([]client.ObjectInfo, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]client.ObjectInfo, len(keys))
	errs := make([]error, len(keys))
	for i, k := range keys {
		b, ok := f.mu.objs[k]
		if !ok {
			errs[i] = client.ErrNotFound
			continue
		}
		out[i] = client.ObjectInfo{Size: uint64(len(b)), Replicas: []client.ReplicaInfo{{
			Segment: &segment.Descriptor{ID: "fakehost/fake/tier1/0", Node: "fakehost", Owner: "fake", Tier: segment.TierDRAM,
				Handle: segment.Handle{Kind: segment.HandlePosixFD}}, Length: uint64(len(b))}}}
	}
	return out, errs
}

func (f *fakeStore) RemoveMatching(_ context.Context, pattern string, _ bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return 0, client.ErrClosed
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, client.ErrInvalidArgument
	}
	n := 0
	for k, b := range f.mu.objs {
		if re.MatchString(k) {
			f.mu.used -= uint64(len(b))
			delete(f.mu.objs, k)
			n++
		}
	}
	return n, nil
}

// Acquire and Gather are not faked: client.Views has no public
// constructor, so the ABI's views are tested on a simulator Store
// (views_test.go).
func (f *fakeStore) Acquire(context.Context, []string) (*client.Views, error) {
	return nil, fmt.Errorf("%w: fake: no views", client.ErrInvalidArgument)
}

func (f *fakeStore) Gather(context.Context, []string, client.Rows, uint64, client.Region, cuda.Stream) error {
	return fmt.Errorf("%w: fake: no gather", client.ErrInvalidArgument)
}

func (f *fakeStore) RegisterBuffer(uintptr, uint64) error            { return nil }
func (f *fakeStore) UnregisterBuffer(context.Context, uintptr) error { return client.ErrNotRegistered }
func (f *fakeStore) Hostname() string                                { return "fakehost" }
func (f *fakeStore) DriverName() string                              { return "sim" }
func (f *fakeStore) HandleType() string                              { return "posix_fd" }
func (f *fakeStore) Health(context.Context) error                    { return nil }

func (f *fakeStore) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.closed = true
	if f.mu.closeFails > 0 {
		f.mu.closeFails--
		f.mu.pending = true
		return errors.New("fake: unmap failed")
	}
	f.mu.pending = false
	return nil
}

func (f *fakeStore) CleanupPending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.pending
}
