package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// isTransport reports a failure to reach the master (as opposed to an answer).
func isTransport(err error) bool {
	// FromError finds a status anywhere in err's chain. (FromError of a nil
	// error is OK: unwrapping first made every bare status error, such as
	// the Unavailable of a master that is down, an Internal error.)
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// Put stores key from src (the concatenation of its regions) if it does not
// exist yet (put-if-absent: ErrAlreadyExists otherwise). The copies are
// enqueued on stream after the caller's work and Put returns once they are
// complete and the object is visible. A region the GPU cannot reach
// (unregistered pageable host memory) is ErrNotRegistered.
func (s *Store) Put(ctx context.Context, key string, src []Region, stream cuda.Stream, o PutOptions) error {
	return s.BatchPut(ctx, []string{key}, [][]Region{src}, stream, o)[0]
}

// Get copies key into dst (filled in order) and returns the object's size.
// ErrBufferTooSmall when dst is smaller than the object; ErrLeaseExpired when
// the read lease ran out before the copy finished (the bytes may be torn);
// ErrNotRegistered when a region of dst is unregistered pageable host memory.
func (s *Store) Get(ctx context.Context, key string, dst []Region, stream cuda.Stream) (uint64, error) {
	n, errs := s.BatchGet(ctx, []string{key}, [][]Region{dst}, stream)
	return n[0], errs[0]
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func total(rs []Region) uint64 {
	var n uint64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// checkRegions validates one object's regions as arguments: present,
// non-empty, non-null, not wrapping. Whether the memory is reachable by the
// GPU is checkBuffers' job.
func (s *Store) checkRegions(key string, rs []Region) error {
	if len(rs) == 0 {
		return fmt.Errorf("%w: key %q: no buffer", ErrInvalidArgument, key)
	}
	for i, r := range rs {
		if r.Len == 0 {
			return fmt.Errorf("%w: key %q: region %d has length 0", ErrInvalidArgument, key, i)
		}
		if r.Ptr == 0 {
			return fmt.Errorf("%w: key %q: region %d has a null pointer", ErrInvalidArgument, key, i)
		}
		if uint64(r.Ptr)+r.Len < uint64(r.Ptr) {
			return fmt.Errorf("%w: key %q: region %d [%#x, +%d) wraps", ErrInvalidArgument, key, i, r.Ptr, r.Len)
		}
	}
	return nil
}

// checkBuffers sets errs[i] for every key whose regions are invalid
// (checkRegions) or not memory the GPU can reach, and leaves the others
// nil. A region inside one registered buffer is fine as is. Any other region
// is asked about — its first and last byte, all regions of the call in one
// PointerMemoryTypes call (a get part's, a put pipeline chunk's), none at
// all when every region is registered —
// and fails its key with ErrNotRegistered when the driver does not know
// either end: that is pageable host memory (or no memory), which the copy
// engines refuse and the SM copy kernel would fault on, poisoning the CUDA
// context for the whole process. Device, unified and page-locked host
// memory pass. Nothing is enqueued for a failed key.
//
// It returns the registered buffers the batch's regions touch, each held
// (one use per call) so that UnregisterBuffer waits for the batch: the
// caller passes them to release once its copies are complete or failed. A
// region in a buffer that is being unregistered fails its key with
// ErrNotRegistered. The parts of a split get each check their own keys.
func (s *Store) checkBuffers(keys []string, bufs [][]Region, errs []error) (held []*registration) {
	type probe struct{ key, region int }
	var (
		ptrs []cuda.DevicePtr // two per probe: first and last byte
		who  []probe
	)
	// last is the registered buffer the previous region lay within, and
	// byRegion[j] the one region j of an earlier key lay within: held
	// already, so not unregistered meanwhile. Registrations do not
	// overlap, so a region within one touches no other — the common cases
	// cost no search and no lock: a KV cache that is one registered buffer
	// (last), and vLLM's paged cache, one registered tensor per layer and
	// key, region j in tensor j (byRegion). The parts of a split batch
	// check their keys at once.
	var (
		last     *registration
		byRegion []*registration
	)
	for i, k := range keys {
		if errs[i] = s.checkRegions(k, bufs[i]); errs[i] != nil {
			continue
		}
		n0 := len(who)
		for j, r := range bufs[i] {
			if within(last, r) {
				continue
			}
			if j < len(byRegion) && within(byRegion[j], r) {
				last = byRegion[j]
				continue
			}
			s.mu.Lock()
			inside, err := s.holdLocked(r.Ptr, r.Len, &held)
			s.mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("key %q: region %d: %w", k, j, err)
				who, ptrs = who[:n0], ptrs[:2*n0]
				break
			}
			if inside != nil {
				last = inside
				if len(bufs[i]) > 1 && j < maxByRegion {
					if j >= len(byRegion) {
						byRegion = append(byRegion, make([]*registration, j+1-len(byRegion))...)
					}
					byRegion[j] = inside
				}
				continue
			}
			ptrs = append(ptrs, cuda.DevicePtr(r.Ptr), cuda.DevicePtr(uint64(r.Ptr)+r.Len-1))
			who = append(who, probe{i, j})
		}
	}
	if len(ptrs) == 0 {
		return held
	}
	types := make([]cuda.MemoryType, len(ptrs))
	if err := s.drv.PointerMemoryTypes(s.cctx, ptrs, types); err != nil {
		err = fmt.Errorf("%w: classify %d buffer addresses: %w", ErrTransfer, len(ptrs), err)
		for _, w := range who {
			errs[w.key] = err
		}
		return held
	}
	for n, w := range who {
		if errs[w.key] != nil {
			continue // an earlier region of the key failed already
		}
		for e := 2 * n; e < 2*n+2; e++ {
			if types[e] == cuda.MemoryTypeUnregistered {
				r := bufs[w.key][w.region]
				errs[w.key] = fmt.Errorf("%w: key %q: region %d [%#x, +%d): address %#x is not device, page-locked host or registered memory (pageable host memory must be registered with RegisterBuffer)",
					ErrNotRegistered, keys[w.key], w.region, r.Ptr, r.Len, uint64(ptrs[e]))
				break
			}
		}
	}
	return held
}

// maxByRegion bounds checkBuffers' byRegion: the regions of a key past it
// are looked up (2 × 128 layers fit).
const maxByRegion = 256

// within reports whether r lies inside the registered buffer reg (nil: no).
func within(reg *registration, r Region) bool {
	return reg != nil && uint64(r.Ptr) >= reg.ptr && uint64(r.Ptr)+r.Len <= reg.ptr+reg.size
}

// mapped is a resolved segment: its base address in this process and how
// to release the reference.
type mapped struct {
	base    cuda.DevicePtr
	release func()
}

// segCache is the segments one batch (or one Views) resolved: each mapping
// reference is taken once and released by release. Consecutive keys mostly
// lie in the same segment, so the last descriptor resolved is checked
// first (descriptors are immutable and shared: the same pointer is the same
// segment) before the map.
type segCache struct {
	m        map[segment.Key]mapped
	last     *segment.Descriptor
	lastBase cuda.DevicePtr
}

func newSegCache() *segCache { return &segCache{m: map[segment.Key]mapped{}} }

// release drops every reference the cache took.
func (c *segCache) release() {
	for _, m := range c.m {
		m.release()
	}
	clear(c.m)
	c.last = nil
}

// lastRange is the mapping of the segment the last resolve found (the zero
// range before any).
func (c *segCache) lastRange() cuda.AddrRange {
	if c.last == nil {
		return cuda.AddrRange{}
	}
	return cuda.AddrRange{Start: c.lastBase, Size: c.last.Size}
}

// resolve returns the address of rep's first byte in this process, after
// checking that its n bytes lie inside the segment: the provider's own
// mapping for its own segments, else the mapping cache (importing on first
// use). A range past the segment's end (a malformed master answer) would
// copy through whatever is mapped after it.
func (s *Store) resolve(ctx context.Context, rep master.Replica, n uint64, cache *segCache) (cuda.DevicePtr, error) {
	d := rep.Segment
	if d == nil || rep.Offset > d.Size || n > d.Size-rep.Offset {
		var size uint64
		if d != nil {
			size = d.Size
		}
		return 0, fmt.Errorf("%w: replica [%d, +%d) outside its segment of %d bytes", ErrTransfer, rep.Offset, n, size)
	}
	if d == cache.last {
		return cache.lastBase + cuda.DevicePtr(rep.Offset), nil
	}
	base, err := s.resolveSegment(ctx, d, cache.m)
	if err != nil {
		return 0, err
	}
	cache.last, cache.lastBase = d, base
	return base + cuda.DevicePtr(rep.Offset), nil
}

// resolveSegment returns the base address of d in this process.
func (s *Store) resolveSegment(ctx context.Context, d *segment.Descriptor, cache map[segment.Key]mapped) (cuda.DevicePtr, error) {
	k := d.Key()
	if m, ok := cache[k]; ok {
		return m.base, nil
	}
	if s.pool != nil {
		if p, err := s.pool.DevicePtr(k); err == nil {
			cache[k] = mapped{base: p, release: func() {}}
			return p, nil
		}
	}
	m, err := s.maps.Acquire(ctx, *d)
	if err != nil {
		if providerGone(err) {
			s.reportUnreachable(ctx, k, err)
		}
		return 0, fmt.Errorf("%w: map segment %s: %w", ErrTransfer, k, err)
	}
	cache[k] = mapped{base: m.Base, release: m.Release}
	return m.Base, nil
}

// appendCopies appends the copies between the regions and the contiguous
// range [base, base+total) in direction put (regions → range) or get.
func appendCopies(cs []cuda.Copy, rs []Region, base cuda.DevicePtr, put bool) []cuda.Copy {
	off := uint64(0)
	for _, r := range rs {
		c := cuda.Copy{Len: r.Len}
		if put {
			c.Src, c.Dst = cuda.DevicePtr(r.Ptr), base+cuda.DevicePtr(off)
		} else {
			c.Src, c.Dst = base+cuda.DevicePtr(off), cuda.DevicePtr(r.Ptr)
		}
		cs = append(cs, c)
		off += r.Len
	}
	return cs
}

func (s *Store) placement() master.Placement {
	p := master.NoPlacement
	p.Client = s.clientID
	p.Node = s.cfg.LocalHostname
	p.NUMANode = s.numa
	p.Device = int32(s.cfg.Device)
	return p
}

// BatchPut puts N objects with one master round trip to start them, one
// transfer batch for all their bytes, and one round trip to end them.
// Results are positional.
func (s *Store) BatchPut(ctx context.Context, keys []string, srcs [][]Region, stream cuda.Stream, o PutOptions) []error {
	return s.batchPut(ctx, keys, srcs, stream, o, nil)
}

// batchPut is BatchPut; with feed (a PutStream's) keys and srcs are filled
// as feed is fed, and nothing is read from them before feed says so.
func (s *Store) batchPut(ctx context.Context, keys []string, srcs [][]Region, stream cuda.Stream, o PutOptions, feed *PutStream) []error {
	errs := make([]error, len(keys))
	if len(srcs) != len(keys) {
		return fill(errs, fmt.Errorf("%w: %d keys but %d buffers", ErrInvalidArgument, len(keys), len(srcs)))
	}
	if err := s.enter(); err != nil {
		return fill(errs, err)
	}
	defer s.exit()
	if o.Replicas < 0 || o.Replicas > master.MaxReplicas {
		return fill(errs, fmt.Errorf("%w: replicas=%d (want 0..%d)", ErrInvalidArgument, o.Replicas, master.MaxReplicas))
	}
	place := s.placement()
	place.Segments = o.PreferredSegments
	ph := s.phases.put.begin(len(keys))
	// The buffers' holds, released once every copy is complete or failed:
	// the batch's (a split batch) or its pipeline's (lazy).
	var held []*registration
	var lazy *lazyPuts
	release := func() {
		s.release(held)
		held = nil
		if lazy != nil {
			s.release(lazy.held)
			lazy.held = nil
		}
	}
	defer release()
	s.reg.RLock()
	inc := s.reg.incarnation
	s.reg.RUnlock()
	if feed != nil && (o.Upsert || s.batchParts(s.putParts, len(keys)) > 1) {
		// An upsert retires the old value at its PutStart, and a split
		// batch needs every key first: neither starts before the whole
		// batch is fed (PutStream).
		if err := feed.await(len(keys)); err != nil {
			return fill(errs, err)
		}
		feed = nil
	}
	// Keys whose regions go to the copy engines are pipelined in chunks
	// of those regions (chunkerFor). A put stream's buffers are not known
	// before they are fed (Feed writes them as the pipeline runs): its
	// chunks count keys.
	ce := 0
	if feed == nil {
		_, ce = regionStats(srcs, s.cfg.CopyEngineMinBytes)
	}
	if s.batchParts(s.putParts, len(keys)) == 1 {
		// One pipeline checks its keys and builds their requests chunk by
		// chunk (lazyPuts), so the first chunk's master call and copies
		// do not wait for the whole batch's: on the H200 building them
		// took ~0.08 µs per key before any copy, 5 % of a 4096-key batch
		// of 64 KiB objects, and checking a batch's buffers ahead of its
		// split took 0.18–0.27 ms (gets, docs/perf/logs-2026-12-02-s12/runG).
		lazy = &lazyPuts{s: s, keys: keys, srcs: srcs, errs: errs, o: &o, place: place, feed: feed}
		s.putPart(ctx, keys, srcs, lazy, stream, inc, errs, true, feed, ce)
	} else {
		held = s.checkBuffers(keys, srcs, errs)
		ph.lap(&s.phases.put.check)
		// A large batch split over cores, as a get's (batchGet), needs
		// every request first (splitPuts: runs of consecutive keys, and
		// equal keys in one part).
		reqs, idx := s.allPutReqs(keys, srcs, errs, &o, place)
		var wg sync.WaitGroup
		for _, part := range splitPuts(reqs, idx, s.batchParts(s.putParts, len(reqs))) {
			part.tmpl = o.req("", 0, place)
			wg.Go(func() { s.putPart(ctx, keys, srcs, &part, stream, inc, errs, false, nil, ce) })
		}
		wg.Wait()
	}
	ph = phaseTimer{last: time.Now()} // the parts timed themselves
	release()
	ph.lap(&s.phases.put.copy)
	return errs
}

// allPutReqs is putReqs of a whole batch, into slices of the batch's size
// made once. A request is ~136 bytes with pointers: growing the slices by
// append copied each request several times, under write barriers, before
// any part of a split batch started — 250–275 ns per key on the dev VM
// against 55–63 sized (4096 keys; docs/perf/logs-2026-12-05-s24/devvm).
func (s *Store) allPutReqs(keys []string, srcs [][]Region, errs []error, o *PutOptions, place master.Placement) ([]master.PutStartReq, []int) {
	return s.putReqs(keys, srcs, errs, 0, o, place, make([]master.PutStartReq, 0, len(keys)), make([]int, 0, len(keys)))
}

// putReqs appends to reqs the put requests of keys (the batch's keys from
// position base on) whose errs are nil, and their positions to idx; a key
// that cannot be stored gets its error instead.
func (s *Store) putReqs(keys []string, srcs [][]Region, errs []error, base int, o *PutOptions, place master.Placement,
	reqs []master.PutStartReq, idx []int) ([]master.PutStartReq, []int) {
	for i, k := range keys {
		if errs[i] != nil {
			continue
		}
		sk, err := s.storedKey(k)
		if err != nil {
			errs[i] = err
			continue
		}
		reqs = append(reqs, o.req(sk, total(srcs[i]), place))
		idx = append(idx, base+i)
	}
	return reqs, idx
}

// putSource yields a part's puts to its pipeline (putPart) chunk by chunk.
type putSource interface {
	// next yields the requests of up to n more keys and those keys'
	// positions in the batch (fewer when some fail their checks; none
	// when the source is done).
	next(n int) (reqs []master.PutStartReq, idx []int, done bool)
	// rest fails with err (in errs, the batch's) every key it has not
	// yielded yet.
	rest(errs []error, err error)
	// more reports whether it has keys not yielded yet.
	more() bool
	// left is the number of keys not yielded yet.
	left() int
}

// uniformSource is a putSource whose puts share one request but for their
// key and size, as a Store's batch puts do: it also yields them as keys
// and sizes, for a master that takes them so (master.UniformPuts).
type uniformSource interface {
	putSource
	// nextUniform is next as the stored keys and sizes of the puts.
	nextUniform(n int) (keys []string, sizes []uint64, idx []int, done bool)
	// template is the request the puts share, its Key and Size unset.
	template() master.PutStartReq
}

// lazyPuts checks a batch's keys (checkBuffers) and builds their requests
// as its pipeline asks for them. The caller releases held once every copy
// of the batch is complete or failed.
type lazyPuts struct {
	s     *Store
	keys  []string
	srcs  [][]Region
	errs  []error
	o     *PutOptions
	place master.Placement
	pos   int // keys before it were yielded
	held  []*registration
	// feed, if not nil, is the PutStream that fills keys and srcs: a
	// chunk is read only once it is fed.
	feed *PutStream
}

// fed waits until the keys before hi are fed; false (and every key not
// yielded failed) when the stream was aborted first.
func (l *lazyPuts) fed(hi int) bool {
	if l.feed == nil {
		return true
	}
	if err := l.feed.await(hi); err != nil {
		l.rest(l.errs, err)
		return false
	}
	return true
}

func (l *lazyPuts) next(n int) ([]master.PutStartReq, []int, bool) {
	lo, hi := l.pos, min(l.pos+n, len(l.keys))
	if lo == hi || !l.fed(hi) {
		return nil, nil, true
	}
	l.pos = hi
	l.held = append(l.held, l.s.checkBuffers(l.keys[lo:hi], l.srcs[lo:hi], l.errs[lo:hi])...)
	reqs, idx := l.s.putReqs(l.keys[lo:hi], l.srcs[lo:hi], l.errs[lo:hi], lo, l.o, l.place,
		make([]master.PutStartReq, 0, hi-lo), make([]int, 0, hi-lo))
	return reqs, idx, false
}

// nextUniform is next for a master that prepares uniform batches
// (master.UniformPuts): the stored keys and sizes of up to n more keys
// and their positions, no requests. A chunk of a tenant-less Store whose
// keys all pass their checks is a window of the batch's own keys slice.
func (l *lazyPuts) nextUniform(n int) (keys []string, sizes []uint64, idx []int, done bool) {
	lo, hi := l.pos, min(l.pos+n, len(l.keys))
	if lo == hi || !l.fed(hi) {
		return nil, nil, nil, true
	}
	l.pos = hi
	l.held = append(l.held, l.s.checkBuffers(l.keys[lo:hi], l.srcs[lo:hi], l.errs[lo:hi])...)
	sizes, idx = make([]uint64, 0, hi-lo), make([]int, 0, hi-lo)
	same := l.s.cfg.Tenant == "" // stored keys are the keys
	for i := lo; i < hi; i++ {
		if l.errs[i] == nil {
			if _, l.errs[i] = l.s.storedKey(l.keys[i]); l.errs[i] == nil {
				sizes, idx = append(sizes, total(l.srcs[i])), append(idx, i)
				continue
			}
		}
		same = false
	}
	if same {
		return l.keys[lo:hi], sizes, idx, false
	}
	keys = make([]string, len(idx))
	for j, i := range idx {
		keys[j], _ = l.s.storedKey(l.keys[i])
	}
	return keys, sizes, idx, false
}

func (l *lazyPuts) template() master.PutStartReq { return l.o.req("", 0, l.place) }

func (l *lazyPuts) more() bool { return l.pos < len(l.keys) }

func (l *lazyPuts) left() int { return len(l.keys) - l.pos }

func (l *lazyPuts) rest(errs []error, err error) {
	for i := l.pos; i < len(l.keys); i++ {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	l.pos = len(l.keys)
}

// aheadSource yields a put source's chunks, in the chunker's sizes, one
// ahead when asked: fill builds the next chunk's requests (checking its
// keys) while the pipeline waits for the master's answer to the chunk
// before, so that building them is not in series with the master calls
// (0.12–0.17 µs per key of 4–16 KiB puts on the H200, which the master's
// PutStart otherwise waited for).
type aheadSource struct {
	src putSource
	ch  *chunker
	// prep, if not nil, prepares each chunk's PutStart as it is built
	// (an embedded master: master.Preparer), so that the validation and
	// the rest of a call that needs no lock run here, beside the master's
	// work on the chunk before, not on the master's serial path.
	prep master.Preparer
	// uni, if not nil (and prep is), starts each chunk of a uniformSource
	// as master.UniformPuts: no request built per key, and a remote
	// master's call carries one request and two arrays.
	uni   master.UniformPutStarter
	c     putReqs
	idx   []int
	done  bool
	ready bool // c, idx and done are the next chunk's
}

// fill builds the next chunk, if it is not built yet.
func (a *aheadSource) fill() {
	if a.ready {
		return
	}
	a.ready = true
	a.c = putReqs{}
	if u, ok := a.src.(uniformSource); ok && (a.prep != nil || a.uni != nil) {
		// No request built: the master gets the chunk as its keys and
		// sizes and the batch's one request template.
		var sizes []uint64
		a.c.keys, sizes, a.idx, a.done = u.nextUniform(a.ch.take())
		if len(a.c.keys) == 0 {
			return
		}
		tmpl := u.template()
		if a.prep == nil {
			a.c.sizes, a.c.tmpl = sizes, tmpl
			return
		}
		var err error
		if a.c.pre, err = a.prep.PrepareUniformPutStart(master.UniformPuts{Keys: a.c.keys, Sizes: sizes, Req: tmpl}); err != nil {
			// (A closed Store's master.) The chunk's call goes out
			// unprepared, as requests, and fails with the same error.
			reqs, _ := master.UniformPuts{Keys: a.c.keys, Sizes: sizes, Req: tmpl}.AppendRequests(nil) // as long as each other
			a.c = putReqs{reqs: reqs}
		}
		return
	}
	a.c.reqs, a.idx, a.done = a.src.next(a.ch.take())
	if a.prep != nil && len(a.c.reqs) > 0 {
		// On error (a closed Store's master) the chunk's call goes
		// out unprepared and fails with the same error.
		a.c.pre, _ = a.prep.PreparePutStart(a.c.reqs)
	}
}

// next yields the next chunk (putSource.next) and its prepared PutStart,
// or nil.
func (a *aheadSource) next() (putReqs, []int, bool) {
	a.fill()
	a.ready = false
	return a.c, a.idx, a.done
}

// putReqs are one chunk's PutStart requests and, if the master prepared
// them (aheadSource.prep), their PreparedPuts. A uniform chunk (prepared
// as master.UniformPuts, or to be started so: aheadSource.uni) has keys
// and no reqs.
type putReqs struct {
	reqs []master.PutStartReq
	keys []string // when reqs is nil: the uniform chunk's stored keys
	pre  *master.PreparedPuts
	// A uniform chunk not prepared: its sizes and request template.
	sizes []uint64
	tmpl  master.PutStartReq
}

// len is the number of puts of the chunk.
func (r *putReqs) len() int {
	if r.reqs != nil {
		return len(r.reqs)
	}
	return len(r.keys)
}

// key returns the stored key of put j.
func (r *putReqs) key(j int) string {
	if r.reqs != nil {
		return r.reqs[j].Key
	}
	return r.keys[j]
}

// more reports whether a chunk is built ahead or the source has more keys.
func (a *aheadSource) more() bool { return a.ready && !a.done || a.src.more() }

// rest fails with err every key not yielded by next, those of a chunk
// built ahead included (putSource.rest).
func (a *aheadSource) rest(errs []error, err error) {
	if a.ready {
		for _, i := range a.idx {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		a.ready = false
	}
	a.src.rest(errs, err)
}

// putBatchPart is one part of a split BatchPut: its requests and their
// keys' positions in the batch.
type putBatchPart struct {
	reqs []master.PutStartReq
	idx  []int
	pos  int // requests before it were yielded
	// tmpl is the request every one of reqs is but for its key and size.
	tmpl master.PutStartReq
}

var _ uniformSource = (*putBatchPart)(nil)

func (p *putBatchPart) nextUniform(n int) ([]string, []uint64, []int, bool) {
	reqs, idx, done := p.next(n)
	keys, sizes := make([]string, len(reqs)), make([]uint64, len(reqs))
	for j := range reqs {
		keys[j], sizes[j] = reqs[j].Key, reqs[j].Size
	}
	return keys, sizes, idx, done
}

func (p *putBatchPart) template() master.PutStartReq { return p.tmpl }

func (p *putBatchPart) next(n int) ([]master.PutStartReq, []int, bool) {
	lo, hi := p.pos, min(p.pos+n, len(p.reqs))
	p.pos = hi
	return p.reqs[lo:hi], p.idx[lo:hi], lo == hi
}

func (p *putBatchPart) more() bool { return p.pos < len(p.reqs) }

func (p *putBatchPart) left() int { return len(p.reqs) - p.pos }

func (p *putBatchPart) rest(errs []error, err error) {
	for _, i := range p.idx[p.pos:] {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	p.pos = len(p.reqs)
}

// splitPuts deals reqs (at positions idx) into n parts for a split
// BatchPut. Each part is a run of consecutive requests, as a get's parts
// are: keys whose buffers follow one another are put by one pipeline,
// placed one after another and copied in merged runs, and read back so.
// (A split by key hash kept a key beside the one before it only one time
// in n: a remote put of 64 KiB objects merged 0.25 of its copies against an
// embedded one's 0.98, docs/perf/logs-2026-12-05-s22.) A key named twice
// must go to one part, which keeps its batch order: what a batch that
// names a key twice does is what it did in one pipeline. When a key
// repeats, the batch is dealt by key hash instead (splitByKey).
func splitPuts(reqs []master.PutStartReq, idx []int, n int) []putBatchPart {
	if n <= 1 {
		return []putBatchPart{{reqs: reqs, idx: idx}}
	}
	if repeatsKey(reqs) {
		return splitByKey(reqs, idx, n)
	}
	parts := make([]putBatchPart, n)
	for p := range parts {
		lo, hi := p*len(reqs)/n, (p+1)*len(reqs)/n
		parts[p].reqs, parts[p].idx = reqs[lo:hi:hi], idx[lo:hi:hi]
	}
	return parts
}

// repeatsKey reports whether two of reqs name the same key.
func repeatsKey(reqs []master.PutStartReq) bool {
	seen := make(map[string]struct{}, len(reqs))
	for i := range reqs {
		if _, ok := seen[reqs[i].Key]; ok {
			return true
		}
		seen[reqs[i].Key] = struct{}{}
	}
	return false
}

// splitByKey deals reqs (at positions idx) into n parts by a hash of their
// stored keys, keeping their order within each part.
func splitByKey(reqs []master.PutStartReq, idx []int, n int) []putBatchPart {
	parts := make([]putBatchPart, n)
	for p := range parts {
		parts[p].reqs = make([]master.PutStartReq, 0, len(reqs)/n+len(reqs)/(4*n)+1)
		parts[p].idx = make([]int, 0, cap(parts[p].reqs))
	}
	seed := partSeed
	for j := range reqs {
		p := maphash.String(seed, reqs[j].Key) % uint64(n)
		parts[p].reqs = append(parts[p].reqs, reqs[j])
		parts[p].idx = append(parts[p].idx, idx[j])
	}
	return parts
}

// partSeed hashes keys to the parts of a split BatchPut.
var partSeed = maphash.MakeSeed()

// putPart runs the pipelined put of src's keys (their sources checked and
// held) as registration incarnation inc. It writes errs at the keys'
// positions only: parts of one batch run concurrently. With only (the
// batch's only pipeline) its PutEnds may go to an ender goroutine
// (putPipe.endOldest); the parts of a split batch already overlap one
// another's PutEnds, and an ender each only adds calls contending for the
// master (H200: 4-part remote puts of 256 KiB–1 MiB lost 1–2 % with them,
// of 16 KiB in a full store 15–25 %). ce is the number of each key's
// regions that go to the copy engines (chunkerFor).
func (s *Store) putPart(ctx context.Context, keys []string, srcs [][]Region, src putSource, stream cuda.Stream, inc uint64, errs []error, only bool, feed *PutStream, ce int) {
	ph := phaseTimer{last: time.Now()}
	cache := newSegCache()
	defer cache.release()
	runs := s.copyRuns(true)
	defer func() { s.mergedCopies.Add(runs.merged) }()
	p := putPipe{s: s, ctx: ctx, stream: stream, keys: keys, errs: errs, handOff: only, feed: feed}
	p.startTimeline()
	// The fence (see Store.reg): taken before the first chunk's copies are
	// enqueued and held until the last chunk's are complete; each chunk
	// checks it (registration valid, its put deadline not passed) just
	// before enqueuing.
	fenced := false
	defer func() {
		if fenced {
			s.reg.RUnlock()
		}
	}()
	// The next chunk's PutStart runs (prefetch) while this one is resolved,
	// submitted and the previous one ended. A prefetch still running when
	// the loop stops is waited for and the puts it started are revoked
	// (their keys were failed with the rest: nothing was enqueued for
	// them).
	// Those prefetches run on the pipeline's metaWorker (handoff.go),
	// stopped once the last one is taken.
	var next chan putMeta
	var nreqs putReqs
	var nidx []int
	var w *metaWorker
	defer func() {
		defer w.stop()
		if next == nil {
			return
		}
		m := <-next
		var refs []master.PutRef
		for j, r := range m.res {
			if r.Err == nil {
				refs = append(refs, r.Ref(nreqs.key(j)))
			}
		}
		if len(refs) > 0 {
			s.revoke(ctx, refs)
		}
	}()
	ch := s.chunkerFor(ce)
	ahead := &aheadSource{src: src, ch: &ch, prep: s.prep, uni: s.uniform}
	reqs, idx, done := ahead.next()
	ph.lap(&s.phases.put.check)
	// The first chunk's call runs here: a batch of one chunk (a single
	// put) makes no goroutine hand-off. A longer one starts its worker
	// first, so that it is running by the time of the first prefetch.
	// A batch of two chunks makes no hand-off either: its second call
	// runs here once the first chunk's copies are enqueued, while they
	// run (chunker.lastFits).
	inline := ch.lastFits(src.left())
	if !done && ahead.more() && !inline {
		w = startMetaWorker(&s.spin, &s.workers)
		if s.embedded {
			p.w = w
		}
	}
	m := s.putStart(ctx, reqs)
	later := false // nreqs' call is to be made here (inline)
	for !done {
		if next != nil {
			// The chunk after next is built while the master answers
			// next, so that its PutStart goes out the moment the answer
			// is in.
			ahead.fill()
			ph.lap(&s.phases.put.check)
			m = awaitMeta(&s.spin, w, next)
			next = nil
			reqs, idx = nreqs, nidx
		} else if later {
			m, later = s.putStart(ctx, nreqs), false
			reqs, idx = nreqs, nidx
		}
		ph.lap(&s.phases.put.meta)
		if m.err == nil {
			nreqs, nidx, done = ahead.next()
			ph.lap(&s.phases.put.check)
			switch {
			case done:
			case inline:
				later = true
			default:
				next = s.prefetchPutStart(ctx, w, nreqs)
			}
		}
		sent, res, err := m.sent, m.res, m.err
		if err != nil {
			err = mapErr(fmt.Errorf("put start: %w", err))
			p.failFrom(idx, err)
			ahead.rest(errs, err)
			break
		}
		c := putChunk{copies: make([]cuda.Copy, 0, len(res)), refs: make([]master.PutRef, 0, len(res)), idx: make([]int, 0, len(res))}
		if p.anchor != 0 {
			c.asked, c.answered, c.received = m.asked.Sub(p.t0), m.answered.Sub(p.t0), time.Since(p.t0)
		}
		for j, r := range res {
			i := idx[j]
			if r.Err != nil {
				errs[i] = mapErr(fmt.Errorf("put %q: %w", keys[i], r.Err))
				continue
			}
			ref := r.Ref(reqs.key(j))
			var rerr error
			mk := runs.mark(c.copies)
			for _, rep := range r.Replicas {
				addr, err := s.resolve(ctx, rep, total(srcs[i]), cache)
				if err != nil {
					rerr = err
					break
				}
				n0 := len(c.copies)
				c.copies = runs.add(appendCopies(c.copies, srcs[i], addr, true), n0, cache.lastRange())
			}
			if rerr != nil {
				c.copies = runs.undo(c.copies, mk)
				errs[i] = fmt.Errorf("put %q: %w", keys[i], rerr)
				s.revoke(ctx, []master.PutRef{ref})
				continue
			}
			c.refs = append(c.refs, ref)
			c.idx = append(c.idx, i)
			if len(c.idx) == 1 {
				c.copies = growFor(c.copies, len(res))
			}
		}
		ph.lap(&s.phases.put.resolve)
		if len(c.refs) == 0 {
			continue
		}
		if !fenced {
			s.reg.RLock()
			fenced = true
		}
		if err := s.writableRLocked(inc, sent); err != nil {
			p.fail(c, err)
			p.failFrom(nidx, err) // the prefetched chunk's (revoked on return)
			ahead.rest(errs, err)
			break
		}
		if !p.submit(c) {
			p.failFrom(nidx, p.err)
			ahead.rest(errs, p.err)
			break
		}
		ph.lap(&s.phases.put.copy)
	}
	p.finish() // the last chunk: wait, end
	p.endTimeline()
	ph.lap(&s.phases.put.copy)
}

// chunker cuts a batch into pipelined chunks: the metadata of chunk k+1 is
// fetched and resolved while chunk k's copies run. The first chunk is an
// eighth of pipeChunk and each next one twice the last, up to pipeChunk:
// the first copy starts after a small chunk's master call instead of a
// full one's (which nothing overlaps), and the later chunks are large
// enough to keep the calls per batch few.
//
// Where a batch's keys each have several regions that go to the copy
// engines (vLLM's layout: 64 "layer" regions of 64 KiB or more a key), a
// chunk counts those regions, not keys (chunkerFor): cuMemcpyBatchAsync
// takes 0.3–0.8 µs of the host's time per copy before the batch's first
// copy starts (H100 hosts, docs/perf/store.md, thirtieth round), so a first
// chunk of 64 such keys — 4096 copies — held the link idle for 1–3 ms, and
// a part of 16 keys ran as one chunk, its copies enqueued before any ran.
// Copies to the SM kernel cost the host a descriptor each, so keys of
// small regions keep chunks of keys.
type chunker struct{ size, max int }

// chunkerFor is the chunker of a pipeline whose keys have ce regions each
// (on average) that go to the copy engines: its chunks hold about as many
// such regions as chunker's hold keys, and at least one key.
func (s *Store) chunkerFor(ce int) chunker {
	c, ce := s.pipeChunk(), max(ce, 1)
	return chunker{size: max(c/8/ce, 1), max: max(c/ce, 1)}
}

// regionStats counts the regions of a batch's buffers in one pass:
// regions, a key of none counting as one (a get's split: batchGet), and
// ce, those of at least minBytes — the ones a copy plan sends to the copy
// engines — per key, rounded down (chunkerFor).
func regionStats(bufs [][]Region, minBytes uint64) (regions, ce int) {
	if len(bufs) == 0 {
		return 0, 0
	}
	n := 0
	for _, b := range bufs {
		regions += max(1, len(b))
		for _, r := range b {
			if r.Len >= minBytes {
				n++
			}
		}
	}
	return regions, n / len(bufs)
}

// take returns the size of the next chunk.
func (c *chunker) take() int {
	n := c.size
	c.size = min(2*c.size, c.max)
	return n
}

// lastFits reports whether the left keys, those after the first chunk,
// fit in the next chunk: a batch of two chunks. Such a batch makes its
// second master call on the pipeline's goroutine, after the first chunk's
// copies are enqueued — the call still runs beside those copies — instead
// of on a worker goroutine, whose start costs more than the call it would
// overlap with the first chunk's resolving: the worker waits in the
// pipeline's P's runnext slot until that goroutine blocks or another P
// takes it (handoff.go; on the dev VM a 128-key get took 162–185 µs with a
// worker, 63–67 without).
func (c *chunker) lastFits(left int) bool { return left <= c.size }

// next returns the end of the chunk that starts at lo, of n keys.
func (c *chunker) next(lo, n int) int {
	hi := min(lo+c.size, n)
	c.size = min(2*c.size, c.max)
	return hi
}

// pipeChunk is the largest number of keys of a batch that go to the master
// and the transfer engine at a time.
func (s *Store) pipeChunk() int {
	if s.chunk > 0 {
		return s.chunk
	}
	return DefaultPipelineChunk
}

// DefaultPipelineChunk is the default Options.PipelineChunk.
const DefaultPipelineChunk = 512

// putChunk is one chunk of a BatchPut whose copies were (or are to be)
// enqueued: its puts and their keys' positions.
type putChunk struct {
	copies    []cuda.Copy
	refs      []master.PutRef
	idx       []int
	h         *transfer.Handle
	submitted time.Duration // with a timeline: when its copies were submitted
	// With a timeline: when its PutStart began and returned, and when the
	// loop took the answer.
	asked, answered, received time.Duration
}

// pipeDepth is how many chunks of one batch may be enqueued on the GPU at
// once. The caller ends (or finishes) the oldest chunk only when this many
// are in flight, so while it waits for a master answer, resolves a chunk or
// ends the oldest one the GPU still has the chunks after it queued: a late
// master answer or a slow wake-up does not leave the link idle.
const pipeDepth = 3

// putPipe runs a BatchPut's chunks: up to pipeDepth in flight, the oldest
// ended (PutEnd) while the later ones copy.
type putPipe struct {
	s      *Store
	ctx    context.Context
	stream cuda.Stream
	keys   []string
	errs   []error
	queue  []putChunk // enqueued, oldest first
	err    error      // the failure that stopped the pipeline
	// ends hands chunks whose copies are complete to the ender goroutine,
	// which ends their puts in order; nil until the pipeline has a chunk
	// to end while more may follow (ended closes when the ender is done).
	ends    chan putChunk
	ended   chan struct{}
	handOff bool // its PutEnds may run off the loop (putPart's only)
	// w, when set (an embedded master), ends the chunks instead of an
	// ender: the worker that runs the pipeline's PutStarts runs its
	// PutEnds between them (endsQueued: some are queued). The master's
	// lock is then taken by one goroutine of the pipeline, not two: with
	// an ender the H200 host's master held it 0.52–0.61 µs per 4–16 KiB
	// put of the 0.60–0.73 a put took, and each of the two waited for the
	// other, 0.06–0.08 (PutStart) and 0.16–0.20 µs (PutEnd) per key
	// (docs/perf/logs-2026-12-02-s12/runB).
	w          *metaWorker
	endsQueued bool
	// broken is a copy failure: the stream was drained, and no chunk
	// enqueued after it is trusted (their puts are revoked).
	broken error
	// With Options.TimeCopies: the event the chunks' GPU spans count
	// from, when the pipeline started, and its chunks so far.
	anchor   cuda.Event
	t0       time.Time
	timeline []ChunkTime
	// feed, if not nil, is the PutStream the batch comes from: no chunk is
	// ended before the whole batch is fed, and if the stream is aborted
	// every chunk is revoked instead — an aborted stream leaves nothing
	// visible (PutStream).
	feed *PutStream
	// held are the stream's chunks whose copies are complete, oldest
	// first, waiting for the stream to be fed in full to be ended.
	held []putChunk
}

// startTimeline begins the pipeline's timeline (Options.TimeCopies): an
// anchor event on its stream now. Without an anchor (an error recording
// it) the pipeline runs untimed.
func (p *putPipe) startTimeline() {
	if !p.s.timeCopies {
		return
	}
	if a, err := p.s.xfer.Anchor(p.stream); err == nil {
		p.anchor, p.t0 = a, time.Now()
	}
}

// endTimeline publishes the pipeline's timeline (Store.LastPutTimeline)
// and gives its anchor back; every chunk has finished.
func (p *putPipe) endTimeline() {
	if p.anchor == 0 {
		return
	}
	p.s.xfer.ReleaseAnchor(p.anchor)
	p.anchor = 0
	p.s.putTimeline.Lock()
	p.s.putTimeline.chunks = p.timeline
	p.s.putTimeline.Unlock()
}

// submit enqueues c's copies and then, with pipeDepth chunks in flight,
// ends the oldest. On a failure everything enqueued is drained first, the
// puts concerned are revoked and false is returned.
func (p *putPipe) submit(c putChunk) bool {
	h, err := p.s.xfer.SubmitAsyncWith(p.stream, c.copies, transfer.SubmitOptions{Anchor: p.anchor})
	if p.anchor != 0 {
		c.submitted = time.Since(p.t0)
	}
	if err != nil {
		p.err = fmt.Errorf("%w: put of %d objects: %w", ErrTransfer, len(c.refs), err)
		p.s.drain(p.stream)
		p.fail(c, p.err)
		p.finish()
		return false
	}
	c.h = h
	p.queue = append(p.queue, c)
	for len(p.queue) >= pipeDepth {
		p.endOldest(true)
	}
	if p.broken != nil { // an earlier chunk's copies failed: end the rest
		p.finish()
		return false
	}
	return true
}

// finish waits for the ender, then for every chunk in flight and ends its
// puts: when it returns, every put the pipeline started is ended or
// revoked. The last chunks are ended inline, after the ender's (which
// keeps their order): a hand-off of them would add a wake-up to the
// batch's tail. It may be called again.
func (p *putPipe) finish() {
	if p.ends != nil {
		close(p.ends)
		<-p.ended
		p.ends = nil
	}
	if p.endsQueued {
		// The worker runs its calls in order: once this one has run, so
		// have the PutEnds queued before it.
		done := make(chan struct{})
		p.w.call(func() { close(done) })
		spinRecv(&p.s.spin, done)
		p.endsQueued = false
	}
	for len(p.queue) > 0 {
		p.endOldest(false)
	}
	if len(p.held) > 0 {
		// A stream's chunks, copied before it was fed in full: ended
		// once it is, revoked if it is aborted instead.
		if err := p.feed.settled(); err != nil {
			p.failHeld(err)
		} else {
			for _, c := range p.held {
				p.end(c)
			}
			p.held = nil
		}
	}
}

// failHeld revokes the held chunks' puts (putPipe.held) and fails their
// keys with err.
func (p *putPipe) failHeld(err error) {
	for _, c := range p.held {
		p.fail(c, err)
	}
	p.held = nil
}

// endOldest waits for the oldest chunk in flight and ends its puts — or,
// when its copies or an earlier chunk's failed, drains the stream and
// revokes them. With more (later chunks may follow) and handOff the PutEnd
// goes to the pipeline's worker (p.w) or else to the ender goroutine,
// started for it, so that the caller's loop resolves and submits the next
// chunks meanwhile instead of waiting for the master (with an embedded one
// PutEnd was 0.25–0.32 µs per key of a 4 KiB put's 1.0–1.3 µs on the H200,
// in series with the rest). A pipeline of only a few chunks (a single put
// among them) ends them inline: no hand-off.
func (p *putPipe) endOldest(more bool) {
	c := p.queue[0]
	p.queue = p.queue[1:]
	t0 := time.Now()
	err := c.h.Wait()
	since(&p.s.phases.put.wait, t0)
	p.s.phases.put.gpu.Add(int64(c.h.GPUTime()))
	if p.anchor != 0 {
		st, end := c.h.GPUSpan()
		p.timeline = append(p.timeline, ChunkTime{Keys: len(c.refs), Asked: c.asked, Answered: c.answered, Received: c.received, Submitted: c.submitted, Waited: time.Since(p.t0), GPUStart: st, GPUFinish: end})
	}
	if err != nil && p.broken == nil {
		p.broken = fmt.Errorf("%w: put of %d objects: %w", ErrTransfer, len(c.refs), err)
		p.err = p.broken
		p.s.drain(p.stream)
	}
	if p.broken != nil {
		p.fail(c, p.broken)
		return
	}
	if p.feed != nil {
		// A stream's chunk is ended only once the stream is fed in full;
		// until then its copies are complete and it waits in held, so
		// that the pipeline goes on copying the chunks fed meanwhile.
		fed, err := p.feed.state()
		if err != nil {
			p.failHeld(err)
			p.fail(c, err)
			return
		}
		if !fed {
			p.held = append(p.held, c)
			return
		}
		for _, h := range p.held {
			p.endDone(h, more)
		}
		p.held = nil
	}
	p.endDone(c, more)
}

// endDone ends c's puts, whose copies are complete: on the pipeline's
// worker or ender when more chunks may follow (endOldest), else inline.
func (p *putPipe) endDone(c putChunk, more bool) {
	if more && p.handOff && p.w != nil {
		p.w.call(func() { p.end(c) })
		p.endsQueued = true
		return
	}
	if more && p.handOff && p.ends == nil {
		p.ends, p.ended = make(chan putChunk, pipeDepth), make(chan struct{})
		go p.ender()
	}
	if p.ends != nil {
		p.ends <- c // in order after the chunks before it
		return
	}
	p.end(c)
}

// ender ends the puts of the chunks handed to it, in order, until ends is
// closed. It writes errs only at its chunks' positions.
func (p *putPipe) ender() {
	defer close(p.ended)
	for c := range p.ends {
		p.end(c)
	}
}

// end makes c's puts visible (PutEnd); its copies are complete.
// When the caller's context ended first, the puts PutEnd failed are
// revoked (revoke does not take the cancellation): their ranges are free at
// once instead of reserved past the put timeout.
func (p *putPipe) end(c putChunk) {
	t0 := time.Now()
	var gaveUp []master.PutRef
	for j, e := range p.s.m.PutEnd(p.ctx, c.refs) {
		if e != nil {
			p.errs[c.idx[j]] = putEndErr(p.keys[c.idx[j]], e)
			if p.ctx.Err() != nil {
				gaveUp = append(gaveUp, c.refs[j])
			}
		}
	}
	if len(gaveUp) > 0 {
		p.s.revoke(p.ctx, gaveUp)
	}
	since(&p.s.phases.put.end, t0)
}

// fail revokes c's puts (their copies are complete or were never
// enqueued) and fails their keys with err.
func (p *putPipe) fail(c putChunk, err error) {
	for _, i := range c.idx {
		p.errs[i] = err
	}
	p.s.revoke(p.ctx, c.refs)
}

// failFrom fails the keys at positions idx that were not started.
func (p *putPipe) failFrom(idx []int, err error) {
	for _, i := range idx {
		if p.errs[i] == nil {
			p.errs[i] = err
		}
	}
}

// drain waits for everything enqueued on stream, after a failure, so that
// nothing this call enqueued runs after it returns (callers free their
// buffers on that promise). A failure here is logged: the copies' own
// error is what the caller gets.
func (s *Store) drain(stream cuda.Stream) {
	if err := s.drv.StreamSynchronize(s.cctx, stream); err != nil {
		s.log.Warn("kvfabric: wait for a failed batch's stream", "err", err)
	}
}

// revoke abandons puts; a failure is left to the master's put timeout.
func (s *Store) revoke(ctx context.Context, refs []master.PutRef) {
	for j, e := range s.m.PutRevoke(context.WithoutCancel(ctx), refs) {
		// Not found: revoked or timed out already. Wrong state: ended
		// (a PutEnd the master ran although its caller gave up).
		if e != nil && !errors.Is(e, master.ErrNotFound) && !errors.Is(e, master.ErrWrongState) {
			s.log.Warn("kvfabric put revoke failed; the master's put timeout reclaims it", "key", refs[j].Key, "err", e)
		}
	}
}

// lookup is the master's GetReplicas, carrying the lease releases queued
// meanwhile to a remote master (releaser.take): a get ends the leases of
// earlier ones. An embedded master's releases stay on the releaser's
// goroutine: a carry would add their work to the get, and spares no round
// trip.
func (s *Store) lookup(ctx context.Context, keys []string) ([]master.GetResult, error) {
	if s.embedded {
		return s.m.GetReplicas(ctx, keys)
	}
	c := s.rel.take()
	if c == nil {
		return s.m.GetReplicas(ctx, keys)
	}
	res, err := s.m.GetReplicas(master.WithReleases(ctx, c), keys)
	s.rel.carried(err)
	return res, err
}

// releaseLeases ends the read leases res granted (their copies are
// complete), in the background (releaser). A failure only delays
// reclaiming: the leases then end at their TTL.
func (s *Store) releaseLeases(ctx context.Context, res []master.GetResult) {
	var ids []uint64
	for i := range res {
		if res[i].Err == nil && res[i].LeaseID != 0 {
			ids = append(ids, res[i].LeaseID)
		}
	}
	s.releaseIDs(ctx, ids)
}

// releaseIDs ends read leases in the background (releaser), or now when
// the releaser does not run.
func (s *Store) releaseIDs(ctx context.Context, ids []uint64) {
	if len(ids) > 0 && !s.rel.queue(ids) {
		s.releaseNow(ctx, ids)
	}
}

// releaseNow sends lease releases to the master.
func (s *Store) releaseNow(ctx context.Context, ids []uint64) {
	if err := s.m.ReleaseLeases(context.WithoutCancel(ctx), ids); err != nil {
		s.log.Debug("kvfabric lease release failed; the leases end at their TTL", "leases", len(ids), "err", err)
	}
}

// providerGone reports an import failure that means the segment's provider
// is not there: its fd-exchange socket refuses connections or is gone, or
// it does not know the segment.
func providerGone(err error) bool {
	return errors.Is(err, fdx.ErrUnknownSegment) ||
		errors.Is(err, fdx.ErrUnavailable) && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT))
}

// reportUnreachable tells the master that segment k's provider could not be
// reached, so that it stops placing puts there at once instead of at the
// provider's TTL. Best effort: the TTL still catches it.
func (s *Store) reportUnreachable(ctx context.Context, k segment.Key, cause error) {
	if err := s.m.ReportUnreachable(context.WithoutCancel(ctx), s.clientID, k, cause.Error()); err != nil &&
		!errors.Is(err, master.ErrUnknownSegment) && !errors.Is(err, master.ErrGenerationMismatch) {
		s.log.Warn("kvfabric could not report an unreachable provider", "segment", k.String(), "err", err)
	}
}

// pickReplica prefers a DRAM replica on this GPU's NUMA node, then any DRAM
// replica on this host, then HBM on this device, then the first.
func (s *Store) pickReplica(reps []master.Replica) master.Replica {
	best, bestScore := reps[0], -1
	for _, r := range reps {
		d := r.Segment
		score := 0
		sameHost := d.Node == s.cfg.LocalHostname
		switch {
		case d.Tier == segment.TierDRAM && sameHost && s.numa >= 0 && d.Location == s.numa:
			score = 4
		case d.Tier == segment.TierDRAM && sameHost:
			score = 3
		case d.Tier == segment.TierHBM && sameHost && d.Location == int32(s.cfg.Device):
			score = 2
		case sameHost:
			score = 1
		}
		if score > bestScore {
			best, bestScore = r, score
		}
	}
	return best
}

// BatchGet gets N objects with one master round trip and one transfer
// batch. Results are positional: sizes[i] is the object's size when errs[i]
// is nil.
func (s *Store) BatchGet(ctx context.Context, keys []string, dsts [][]Region, stream cuda.Stream) ([]uint64, []error) {
	sizes := make([]uint64, len(keys))
	errs := s.batchGet(ctx, keys, dsts, stream, sizes, func(i int, size uint64, base cuda.DevicePtr, copies []cuda.Copy) ([]cuda.Copy, error) {
		have := total(dsts[i])
		if have < size {
			return copies, fmt.Errorf("%w: get %q: object is %d bytes, buffer %d", ErrBufferTooSmall, keys[i], size, have)
		}
		rs := dsts[i]
		if have > size { // the object fills only the first of the regions
			rs = clip(rs, size)
		}
		return appendCopies(copies, rs, base, false), nil
	})
	return sizes, errs
}

// growFor makes room in cs, which holds the copies of a chunk's first
// object, for each of the chunk's objects copies as many. A chunk's
// copies start with room for one copy per object; an object scattered
// over many regions (vLLM's layout: a block of every layer's K and V
// cache, 56–64 regions) otherwise regrew the slice ~6 times a chunk
// (BenchmarkMultiRegion on the dev VM, 64-byte regions: puts 76–81 ns a
// region before, 64–67 after; docs/perf/logs-2026-12-06-s32/devvm).
func growFor(cs []cuda.Copy, objects int) []cuda.Copy {
	if want := len(cs) * objects; len(cs) > 1 && cap(cs) < want {
		return slices.Grow(cs, want-len(cs))
	}
	return cs
}

// copyPlan appends the copies that read key i (size bytes, at base in this
// process) to copies, or fails the key.
type copyPlan func(i int, size uint64, base cuda.DevicePtr, copies []cuda.Copy) ([]cuda.Copy, error)

// batchGet is BatchGet and BatchGetRanges: dsts[i] are key i's destination
// regions (checked and held as buffers), plan builds its copies. sizes, when
// not nil, gets each object's size for the keys that succeed.
func (s *Store) batchGet(ctx context.Context, keys []string, dsts [][]Region, stream cuda.Stream, sizes []uint64, plan copyPlan) []error {
	errs := make([]error, len(keys))
	if len(dsts) != len(keys) {
		return fill(errs, fmt.Errorf("%w: %d keys but %d buffers", ErrInvalidArgument, len(keys), len(dsts)))
	}
	if err := s.enter(); err != nil {
		return fill(errs, err)
	}
	defer s.exit()
	s.phases.get.begin(len(keys)) // the parts time themselves
	// Every lease granted is released once the copies are complete (or
	// failed) and the mappings released: objects removed meanwhile are
	// freed at once.
	var leases []uint64
	defer func() { s.releaseIDs(ctx, leases) }()
	// A large batch is split over cores: each part checks its keys and
	// runs its own pipeline (master calls, resolution, submission on the
	// caller's stream), so the per-key work of this process and of the
	// master's read path runs on several cores at once. The caller runs
	// the first part itself. (Checking the whole batch before the split
	// took 0.18–0.27 ms of a 4096-key batch on the H200 host, before any
	// part started, and the last part spawned started 21–104 µs after the
	// others: docs/perf/logs-2026-12-02-s12/runG.) A key counts once
	// per region: a few keys of many regions each (vLLM's layout) are as
	// much work as many keys of one — a copy each to resolve and enqueue,
	// and on the copy engines 0.3–0.8 µs of the host's time per block
	// before a batch starts (docs/perf/store.md, session 32).
	// One pass over the regions gives both counts: the split's and the
	// chunks' (chunkerFor).
	regions, ce := regionStats(dsts, s.cfg.GetCopyEngineMinBytes)
	n := max(1, min(s.batchParts(s.parts, regions), len(keys)))
	if n == 1 {
		leases = s.getRange(ctx, keys, dsts, 0, len(keys), stream, sizes, plan, errs, ce)
		return errs
	}
	parts := make([][]uint64, n)
	var wg sync.WaitGroup
	for p := 1; p < n; p++ {
		lo, hi := p*len(keys)/n, (p+1)*len(keys)/n
		wg.Go(func() { parts[p] = s.getRange(ctx, keys, dsts, lo, hi, stream, sizes, plan, errs, ce) })
	}
	parts[0] = s.getRange(ctx, keys, dsts, 0, len(keys)/n, stream, sizes, plan, errs, ce)
	wg.Wait()
	leases = slices.Concat(parts...)
	return errs
}

// getRange runs the part of a batch get of keys[lo:hi]: it checks and
// holds their destinations (released once its copies are complete or
// failed), maps their names and gets them (getPart). It writes errs and
// sizes in [lo, hi) only, and returns the lease ids it was granted. ce is
// the batch's regions per key that go to the copy engines (chunkerFor).
func (s *Store) getRange(ctx context.Context, keys []string, dsts [][]Region, lo, hi int, stream cuda.Stream, sizes []uint64, plan copyPlan, errs []error, ce int) []uint64 {
	ph := phaseTimer{last: time.Now()}
	held := s.checkBuffers(keys[lo:hi], dsts[lo:hi], errs[lo:hi])
	defer func() { s.release(held) }()
	q := make([]string, 0, hi-lo)
	idx := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		if errs[i] != nil {
			continue
		}
		sk, err := s.storedKey(keys[i])
		if err != nil {
			errs[i] = err
			continue
		}
		q = append(q, sk)
		idx = append(idx, i)
	}
	ph.lap(&s.phases.get.check)
	if len(q) == 0 {
		return nil
	}
	return s.getPart(ctx, keys, q, idx, stream, sizes, plan, errs, ce)
}

// batchParts returns how many parts a batch put or get of n keys is split
// into: at most parts (Options.BatchParts, resolved for puts or gets), each
// of at least minPartKeys keys (a get's keys counted once per region:
// batchGet).
func (s *Store) batchParts(parts, n int) int {
	return max(1, min(parts, n/s.minPartKeys()))
}

// minPartKeys is the smallest part of a split batch. With a remote master
// every call is a round trip, which parts overlap, so parts of half a
// pipeline chunk pay (H200 run 10: remote 256 KiB put 0.79-0.85 -> 0.86-0.87,
// get 0.89-0.93 -> 0.93); with an embedded one a call costs only its work,
// and parts pay from two chunks (at 256 KiB the small parts cost embedded
// gets 1-2 %).
func (s *Store) minPartKeys() int {
	if s.embedded {
		return 2 * s.pipeChunk()
	}
	return max(1, s.pipeChunk()/2)
}

// getPart runs the pipelined get of the stored keys q (the batch's keys
// idx, whose destinations are checked and held) and returns the lease ids
// it was granted, for the caller to release. It writes errs and sizes at
// idx only: parts of one batch run concurrently. ce is the number of each
// key's regions that go to the copy engines (chunkerFor).
func (s *Store) getPart(ctx context.Context, keys, q []string, idx []int, stream cuda.Stream, sizes []uint64, plan copyPlan, errs []error, ce int) (leases []uint64) {
	ph := phaseTimer{last: time.Now()}
	leases = make([]uint64, 0, len(q))
	cache := newSegCache()
	defer cache.release()
	runs := s.copyRuns(false)
	defer func() { s.mergedCopies.Add(runs.merged) }()
	g := getPipe{s: s, stream: stream, sizes: sizes, errs: errs, leases: make([]keyLease, 0, len(q))}
	// The master call of the next chunk runs (prefetch) while this one is
	// resolved and submitted: three stages overlap — the master, this
	// goroutine, the GPU. A prefetch still running when the loop stops is
	// waited for and its leases go with the others (deferred after the
	// cache's release, so it runs first).
	var next chan getMeta
	var w *metaWorker // runs the prefetches (handoff.go)
	defer func() {
		defer w.stop()
		if next != nil {
			leases = appendLeases(leases, (<-next).res)
		}
	}()
	ch := s.chunkerFor(ce)
	hi := ch.next(0, len(q))
	// The first chunk's call runs here: a batch of one chunk (a single
	// get) makes no goroutine hand-off. A longer one starts its worker
	// first, so that it is running by the time of the first prefetch.
	// A batch of two chunks makes no hand-off either: its second call
	// runs here once the first chunk's copies are enqueued, while they
	// run (chunker.lastFits).
	inline := ch.lastFits(len(q) - hi)
	if hi < len(q) && !inline {
		w = startMetaWorker(&s.spin, &s.workers)
	}
	m := s.getReplicas(ctx, q[:hi])
	var later []string
	for lo := 0; lo < len(q); {
		if next != nil {
			m = awaitMeta(&s.spin, w, next)
			next = nil
		} else if later != nil {
			m, later = s.getReplicas(ctx, later), nil
		}
		nhi := hi
		if m.err == nil && hi < len(q) {
			nhi = ch.next(hi, len(q))
			if inline {
				later = q[hi:nhi]
			} else {
				next = s.prefetchReplicas(ctx, w, q[hi:nhi])
			}
		}
		ph.lap(&s.phases.get.meta)
		res, err := m.res, m.err
		if err != nil {
			g.failFrom(idx[lo:], mapErr(fmt.Errorf("get replicas: %w", err)))
			break
		}
		leases = appendLeases(leases, res)
		c := getChunk{copies: make([]cuda.Copy, 0, len(res)), idx: make([]int, 0, len(res))}
		for j, r := range res {
			i := idx[lo+j]
			if r.Err != nil {
				errs[i] = mapErr(fmt.Errorf("get %q: %w", keys[i], r.Err))
				continue
			}
			if len(r.Replicas) == 0 {
				errs[i] = fmt.Errorf("%w: get %q: no complete replica", ErrNotFound, keys[i])
				continue
			}
			rep := s.pickReplica(r.Replicas)
			addr, err := s.resolve(ctx, rep, r.Size, cache)
			if err != nil {
				errs[i] = fmt.Errorf("get %q: %w", keys[i], err)
				continue
			}
			n0 := len(c.copies)
			if c.copies, err = plan(i, r.Size, addr, c.copies); err != nil {
				c.copies = c.copies[:n0]
				errs[i] = err
				continue
			}
			c.copies = runs.add(c.copies, n0, cache.lastRange())
			if sizes != nil {
				sizes[i] = r.Size
			}
			g.leases = append(g.leases, keyLease{i, r.LeaseExpiry})
			c.idx = append(c.idx, i)
			if len(c.idx) == 1 {
				c.copies = growFor(c.copies, len(res))
			}
		}
		ph.lap(&s.phases.get.resolve)
		if len(c.idx) > 0 && !g.submit(c) {
			g.failFrom(idx[hi:], g.err)
			break
		}
		ph.lap(&s.phases.get.copy)
		lo, hi = hi, nhi
	}
	g.finish()
	ph.lap(&s.phases.get.copy)
	// Only the keys whose own lease ended before their copy finished may
	// have torn bytes (checked once, after the part's last copy: stricter
	// for the earlier chunks).
	now := timeNow()
	for _, l := range g.leases {
		if errs[l.i] == nil && now.After(l.expiry) {
			errs[l.i] = fmt.Errorf("%w: get %q: lease ended %v before the copy finished", ErrLeaseExpired, keys[l.i], now.Sub(l.expiry))
		}
	}
	return leases
}

// putMeta is the answer of one chunk's PutStart, and when it was sent (the
// put deadline counts from then).
type putMeta struct {
	sent time.Time
	res  []master.PutStartResult
	err  error
	// asked and answered bound the PutStart call (zero without one).
	asked, answered time.Time
}

// prefetchPutStart starts reqs' puts on w (another goroutine). The answer
// arrives on the returned channel, which never blocks the sender: the
// caller must receive it (and end or revoke every put it started).
func (s *Store) prefetchPutStart(ctx context.Context, w *metaWorker, reqs putReqs) chan putMeta {
	ch := make(chan putMeta, 1)
	w.call(func() { ch <- s.putStart(ctx, reqs) })
	return ch
}

// putStart starts reqs' puts (none: no call).
func (s *Store) putStart(ctx context.Context, reqs putReqs) putMeta {
	sent := timeNow()
	if reqs.len() == 0 {
		return putMeta{sent: sent}
	}
	t0 := time.Now()
	var res []master.PutStartResult
	var err error
	switch {
	case reqs.pre != nil:
		res, err = s.prep.PutStartPrepared(ctx, reqs.pre)
	case reqs.reqs == nil:
		res, err = s.uniform.PutStartUniform(ctx, master.UniformPuts{Keys: reqs.keys, Sizes: reqs.sizes, Req: reqs.tmpl})
	default:
		res, err = s.m.PutStart(ctx, reqs.reqs)
	}
	t1 := time.Now()
	s.phases.put.master.Add(int64(t1.Sub(t0)))
	return putMeta{sent: sent, res: res, err: err, asked: t0, answered: t1}
}

// getMeta is the answer of one chunk's GetReplicas.
type getMeta struct {
	res []master.GetResult
	err error
}

// prefetchReplicas asks the master for keys' replicas on w (another goroutine),
// named as the reader (only replicas this process can import). The answer
// arrives on the returned channel, which never blocks the sender: the
// caller must receive it (the leases it grants are the caller's to
// release).
func (s *Store) prefetchReplicas(ctx context.Context, w *metaWorker, keys []string) chan getMeta {
	ch := make(chan getMeta, 1)
	w.call(func() { ch <- s.getReplicas(ctx, keys) })
	return ch
}

// getReplicas asks the master for keys' replicas, named as the reader.
func (s *Store) getReplicas(ctx context.Context, keys []string) getMeta {
	t0 := time.Now()
	res, err := s.lookup(master.WithReader(ctx, s.clientID), keys)
	since(&s.phases.get.master, t0)
	return getMeta{res, err}
}

// appendLeases appends the lease ids res granted.
func appendLeases(ids []uint64, res []master.GetResult) []uint64 {
	for j := range res {
		if res[j].Err == nil && res[j].LeaseID != 0 {
			ids = append(ids, res[j].LeaseID)
		}
	}
	return ids
}

// keyLease is the read lease a key of a batch got.
type keyLease struct {
	i      int
	expiry time.Time
}

// getChunk is one chunk of a batch get: its copies and its keys' positions.
type getChunk struct {
	copies []cuda.Copy
	idx    []int
	h      *transfer.Handle
}

// getPipe runs a batch get's chunks, up to pipeDepth in flight.
type getPipe struct {
	s      *Store
	stream cuda.Stream
	sizes  []uint64
	errs   []error
	leases []keyLease
	queue  []getChunk // enqueued, oldest first
	err    error      // the failure that stopped the pipeline
	// broken is a copy failure: the stream was drained, and no chunk
	// enqueued after it is trusted (its keys fail).
	broken error
}

// submit enqueues c's copies, then, with pipeDepth chunks in flight, waits
// for the oldest. On a failure everything enqueued is drained first and
// false is returned.
func (g *getPipe) submit(c getChunk) bool {
	h, err := g.s.xfer.SubmitAsyncWith(g.stream, c.copies, transfer.SubmitOptions{CopyEngineMinBytes: g.s.cfg.GetCopyEngineMinBytes})
	if err != nil {
		g.err = fmt.Errorf("%w: get of %d objects: %w", ErrTransfer, len(c.idx), err)
		g.s.drain(g.stream)
		g.fail(c, g.err)
		g.finish()
		return false
	}
	c.h = h
	g.queue = append(g.queue, c)
	for len(g.queue) >= pipeDepth {
		g.waitOldest()
	}
	if g.broken != nil {
		g.finish()
		return false
	}
	return true
}

// finish waits for every chunk in flight.
func (g *getPipe) finish() {
	for len(g.queue) > 0 {
		g.waitOldest()
	}
}

// waitOldest waits for the oldest chunk in flight; when its copies or an
// earlier chunk's failed, the stream is drained and its keys fail.
func (g *getPipe) waitOldest() {
	c := g.queue[0]
	g.queue = g.queue[1:]
	t0 := time.Now()
	err := c.h.Wait()
	since(&g.s.phases.get.wait, t0)
	g.s.phases.get.gpu.Add(int64(c.h.GPUTime()))
	if err != nil && g.broken == nil {
		g.broken = fmt.Errorf("%w: get of %d objects: %w", ErrTransfer, len(c.idx), err)
		g.err = g.broken
		g.s.drain(g.stream)
	}
	if g.broken != nil {
		g.fail(c, g.broken)
	}
}

func (g *getPipe) fail(c getChunk, err error) {
	for _, i := range c.idx {
		g.errs[i] = err
		if g.sizes != nil {
			g.sizes[i] = 0
		}
	}
}

func (g *getPipe) failFrom(idx []int, err error) {
	for _, i := range idx {
		if g.errs[i] == nil {
			g.errs[i] = err
		}
	}
}

// clip limits regions to n bytes in total, in a new slice: BatchGet calls
// it only for buffers larger than the object, not for the usual exact fit
// (before, a key of many regions got a heap-allocated copy of them).
func clip(rs []Region, n uint64) []Region {
	out := make([]Region, 0, len(rs))
	for _, r := range rs {
		if n == 0 {
			break
		}
		l := min(r.Len, n)
		out = append(out, Region{Ptr: r.Ptr, Len: l})
		n -= l
	}
	return out
}

// Exists reports whether key is visible.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	r, err := s.BatchExists(ctx, []string{key}, false)
	if err != nil {
		return false, err
	}
	return r[0], nil
}

// BatchExists reports, positionally, whether keys are visible. With lease,
// each visible key gets a read lease (the master's lease TTL, ended by
// expiry) as Mooncake's exist check grants: a caller that saw a key can
// read it before it is evicted or removed without force.
func (s *Store) BatchExists(ctx context.Context, keys []string, lease bool) ([]bool, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	sks, err := s.storedKeys(keys)
	if err != nil {
		return nil, err
	}
	r, err := s.m.Exists(ctx, sks, lease)
	return r, mapErr(err)
}

// Size returns the size of a visible object (granting a short read lease).
func (s *Store) Size(ctx context.Context, key string) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	sk, err := s.storedKey(key)
	if err != nil {
		return 0, err
	}
	res, err := s.lookup(ctx, []string{sk})
	if err != nil {
		return 0, mapErr(err)
	}
	s.releaseLeases(ctx, res)
	if res[0].Err != nil {
		return 0, mapErr(fmt.Errorf("size %q: %w", key, res[0].Err))
	}
	return res[0].Size, nil
}

// Remove deletes key; a leased object is ErrHasLease unless force.
func (s *Store) Remove(ctx context.Context, key string, force bool) error {
	return s.BatchRemove(ctx, []string{key}, force)[0]
}

// BatchRemove deletes keys; results are positional.
func (s *Store) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	if err := s.enter(); err != nil {
		return fill(errs, err)
	}
	defer s.exit()
	sks := make([]string, 0, len(keys))
	idx := make([]int, 0, len(keys))
	for i, k := range keys {
		sk, err := s.storedKey(k)
		if err != nil {
			errs[i] = err
			continue
		}
		sks = append(sks, sk)
		idx = append(idx, i)
	}
	if len(sks) == 0 {
		return errs
	}
	s.rel.flush(ctx) // this Store's own finished reads do not hold the keys
	for j, e := range s.m.Remove(ctx, sks, force) {
		if i := idx[j]; e != nil {
			errs[i] = mapErr(fmt.Errorf("remove %q: %w", keys[i], e))
		}
	}
	return errs
}

// RemoveAll removes every visible object of the Store's tenant (leased
// ones only with force) and returns how many.
func (s *Store) RemoveAll(ctx context.Context, force bool) (int, error) {
	return s.RemoveMatching(ctx, "", force)
}

// RemoveMatching removes every visible object of the Store's tenant whose
// key matches pattern (RE2 syntax, unanchored as regexp.MatchString; ""
// matches all; leased objects only with force) and returns how many. A bad
// pattern is ErrInvalidArgument.
func (s *Store) RemoveMatching(ctx context.Context, pattern string, force bool) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	s.rel.flush(ctx)
	n, err := s.m.RemoveAll(ctx, master.Filter{Tenant: s.cfg.Tenant, Pattern: pattern}, force)
	return n, mapErr(err)
}
