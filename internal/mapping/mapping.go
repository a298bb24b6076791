// Package mapping is the consumer's cache of imported, mapped segments
// (DESIGN §4), keyed by allocation identity (segment id, generation) so that
// a provider that re-allocates a segment under the same id is never reached
// through the old mapping (Mooncake #2832).
//
// The first Acquire of a segment imports its allocation (a fabric handle
// from the descriptor, or a POSIX fd fetched from the provider's socket),
// reserves VA, maps it and grants the local GPUs access with one
// cuMemSetAccess. Later Acquires are one map lookup under a mutex. Mapped
// segments are reference counted: an entry is unmapped only with no
// reference, either when it is the least recently used one and the cache is
// over its bounds, or when it was invalidated.
package mapping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// Errors.
var (
	// ErrClosed is returned by Acquire after Close started.
	ErrClosed = errors.New("mapping: cache closed")
	// ErrFull is returned when mapping a segment would exceed MaxEntries or
	// MaxVA and every mapped segment is in use.
	ErrFull = errors.New("mapping: cache full of segments in use")
	// ErrBusy is returned by Close when references were not released in
	// time; a later Close retries.
	ErrBusy = errors.New("mapping: segments still referenced")
	// ErrDescriptorMismatch is returned when a descriptor disagrees with the
	// cached mapping of the same (id, generation) (e.g. its size).
	ErrDescriptorMismatch = errors.New("mapping: descriptor does not match the mapped allocation")
)

// DefaultMaxVA is the default bound on the VA of mapped segments: 4 TiB,
// a quarter of a GB200 NVL72 rack's Grace DRAM. Each mapping of a remote
// allocation keeps its provider's memory alive, so the bound also limits
// what one consumer can pin; a mapping evicted under it costs one re-import
// (~10 ms per GiB of HOST_NUMA memory on H200) at its next use.
const DefaultMaxVA = 4 << 40

// FetchFunc returns a POSIX fd for d's allocation; the cache closes it
// after importing.
type FetchFunc func(ctx context.Context, d segment.Descriptor) (fd int, err error)

// Options configures a Cache. The zero value is useful.
type Options struct {
	// MaxEntries bounds mapped segments (default 4096).
	MaxEntries int
	// MaxVA bounds the VA reserved for mapped segments, in bytes (default
	// DefaultMaxVA). Unreferenced mappings are unmapped, least recently
	// used first, to stay under it.
	MaxVA uint64
	// Fetch obtains POSIX fds; nil means Trust.Fetch on the descriptor's
	// Handle.SocketPath.
	Fetch FetchFunc
	// Trust is what the default Fetch accepts of a provider's fd server:
	// the directory its socket must lie in and the uids it may run as (see
	// fdx.Trust; the zero value trusts any path and this process's uid).
	Trust fdx.Trust
	// CloseTimeout bounds how long Close waits for references (default
	// 10s).
	CloseTimeout time.Duration
	// Logger receives imports, evictions and teardown failures; nil
	// discards.
	Logger *slog.Logger
}

// Stats are the cache's counters.
type Stats struct {
	Hits, Misses, Imports, Evictions, Invalidations uint64
	Entries                                         int
	VA                                              uint64
	// ImportTime is the total time successful imports took (fetch the
	// handle, import, reserve, map, grant access): ImportTime/Imports is
	// the cost a cached hit avoids.
	ImportTime time.Duration
}

// Cache maps segments for one consumer context. It is safe for concurrent
// use; all operations but the first use of a segment are a mutex-protected
// map lookup.
type Cache struct {
	drv    cuda.Driver
	cctx   cuda.Context
	access []cuda.AccessDesc // one batched grant for the local GPUs
	align  uint64            // VA alignment (the local device's granularity)
	opts   Options
	log    *slog.Logger

	mu struct {
		sync.Mutex
		// guards everything below and every entry's refs, state, lru links
		closed  bool
		entries map[segment.Key]*entry // live or loading, not invalidated
		lru     entry                  // sentinel of the list of unreferenced ready entries; lru.next is the oldest
		count   int                    // entries counted against MaxEntries (incl. loading, stale-but-referenced)
		va      uint64                 // VA reserved by those
		refs    int                    // references held in total
		drained chan struct{}          // closed when closed && refs == 0
		zombies []*entry               // entries whose teardown failed; Close retries
		stats   Stats
	}
	closeMu sync.Mutex // serialises Close
}

type entryState uint8

const (
	stateLoading entryState = iota
	stateReady
	stateFailed
	stateGone // unmapped or being unmapped
)

type entry struct {
	c     *Cache
	key   segment.Key
	size  uint64
	state entryState
	stale bool // invalidated: unmapped once refs reach 0
	refs  int
	ready chan struct{} // closed when loading ends
	err   error         // load error, valid after ready is closed

	prev, next *entry // LRU links while refs == 0 and ready

	// Driver objects; each is zero once released.
	handle   cuda.AllocHandle
	base     cuda.DevicePtr
	reserved uint64
	mapped   bool
}

// New returns a cache that imports into cctx and grants read-write access
// to devices (the consumer's local GPUs). It queries the first device's
// allocation granularity for VA alignment.
func New(drv cuda.Driver, cctx cuda.Context, devices []cuda.Device, opts Options) (*Cache, error) {
	if len(devices) == 0 {
		return nil, errors.New("mapping: no devices to grant access to")
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 4096
	}
	if opts.MaxVA == 0 {
		opts.MaxVA = DefaultMaxVA
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 10 * time.Second
	}
	if opts.Fetch == nil {
		opts.Fetch = func(ctx context.Context, d segment.Descriptor) (int, error) {
			return opts.Trust.Fetch(ctx, d.Handle.SocketPath, d.Key())
		}
	}
	c := &Cache{drv: drv, cctx: cctx, opts: opts, log: opts.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	for _, dev := range devices {
		c.access = append(c.access, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(dev)}, Flags: cuda.AccessReadWrite})
	}
	g, err := drv.MemGetAllocationGranularity(cctx, cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(devices[0])}}, cuda.GranularityMinimum)
	if err != nil {
		return nil, fmt.Errorf("mapping: granularity of device %d: %w", devices[0], err)
	}
	c.align = g
	c.mu.entries = make(map[segment.Key]*entry)
	c.mu.lru.next, c.mu.lru.prev = &c.mu.lru, &c.mu.lru
	return c, nil
}

// Mapping is one reference to a mapped segment: Base is where the segment's
// byte 0 is mapped in the consumer's context. Release it exactly once when
// the copies that use it have completed (not merely been enqueued).
type Mapping struct {
	Base cuda.DevicePtr
	Size uint64
	e    *entry
}

// Addr returns the device address of [off, off+n) inside the segment, or an
// error if the range does not fit.
func (m Mapping) Addr(off, n uint64) (cuda.DevicePtr, error) {
	if off > m.Size || n > m.Size-off {
		return 0, fmt.Errorf("mapping: range [%d, +%d) outside segment %v of %d bytes", off, n, m.e.key, m.Size)
	}
	return m.Base + cuda.DevicePtr(off), nil
}

// Release drops the reference. The last reference of an invalidated entry
// unmaps it (in the caller's goroutine).
func (m Mapping) Release() {
	if m.e == nil {
		return
	}
	m.e.c.release(m.e)
}

// Acquire returns a reference to d's mapping, importing and mapping it on
// first use. Concurrent first uses of one key import once; the others wait
// (bounded by ctx). A descriptor's generation selects the mapping: a cached
// mapping of another generation of the same id is never returned, and it is
// unmapped once this generation has been imported and the old one is
// unreferenced.
func (c *Cache) Acquire(ctx context.Context, d segment.Descriptor) (Mapping, error) {
	k := segment.Key{ID: d.ID, Generation: d.Generation}
	for {
		c.mu.Lock()
		if c.mu.closed {
			c.mu.Unlock()
			return Mapping{}, ErrClosed
		}
		if e, ok := c.mu.entries[k]; ok {
			if e.size != d.Size {
				c.mu.Unlock()
				return Mapping{}, fmt.Errorf("%w: segment %v: descriptor size %d, mapped %d", ErrDescriptorMismatch, k, d.Size, e.size)
			}
			c.refLocked(e)
			if e.state == stateReady {
				c.mu.stats.Hits++
				c.mu.Unlock()
				return Mapping{Base: e.base, Size: e.size, e: e}, nil
			}
			c.mu.Unlock()
			m, retry, err := c.wait(ctx, e)
			if retry {
				continue
			}
			return m, err
		}
		c.mu.stats.Misses++
		if err := d.Validate(); err != nil {
			c.mu.Unlock()
			return Mapping{}, fmt.Errorf("mapping: %w", err)
		}
		victims, err := c.admitLocked(d.Size)
		if err != nil {
			c.mu.Unlock()
			c.teardownAll(victims)
			return Mapping{}, err
		}
		e := &entry{c: c, key: k, size: d.Size, ready: make(chan struct{})}
		c.mu.entries[k] = e
		c.refLocked(e)
		c.mu.Unlock()
		c.teardownAll(victims)
		return c.load(ctx, e, d)
	}
}

// wait waits for another goroutine's load of e. retry is true when that
// load failed only because of the loader's context and ours is still live.
func (c *Cache) wait(ctx context.Context, e *entry) (m Mapping, retry bool, err error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		c.release(e)
		return Mapping{}, false, fmt.Errorf("mapping: wait for segment %v: %w", e.key, ctx.Err())
	}
	if e.err != nil {
		c.release(e)
		if (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) && ctx.Err() == nil {
			return Mapping{}, true, nil
		}
		return Mapping{}, false, e.err
	}
	return Mapping{Base: e.base, Size: e.size, e: e}, false, nil
}

// refLocked takes a reference on e, removing it from the LRU list.
func (c *Cache) refLocked(e *entry) {
	if e.refs == 0 && e.next != nil {
		e.prev.next, e.next.prev = e.next, e.prev
		e.prev, e.next = nil, nil
	}
	e.refs++
	c.mu.refs++
}

func (c *Cache) release(e *entry) {
	c.mu.Lock()
	if e.refs <= 0 {
		c.mu.Unlock()
		c.log.Error("mapping: Release without a reference (double release?)", "segment", e.key.String())
		return
	}
	e.refs--
	c.mu.refs--
	if c.mu.closed && c.mu.refs == 0 && c.mu.drained != nil {
		close(c.mu.drained)
		c.mu.drained = nil
	}
	var gone *entry
	if e.refs == 0 {
		switch {
		case e.state == stateReady && (e.stale || c.mu.closed):
			gone = e
			c.forgetLocked(e)
		case e.state == stateReady:
			// Most recently used: append at the tail.
			e.prev, e.next = c.mu.lru.prev, &c.mu.lru
			c.mu.lru.prev.next = e
			c.mu.lru.prev = e
		}
	}
	c.mu.Unlock()
	if gone != nil {
		c.teardown(gone)
	}
}

// forgetLocked removes e from the maps and the accounting and marks it
// gone; the caller tears it down outside the lock.
func (c *Cache) forgetLocked(e *entry) {
	if c.mu.entries[e.key] == e {
		delete(c.mu.entries, e.key)
	}
	if e.next != nil {
		e.prev.next, e.next.prev = e.next, e.prev
		e.prev, e.next = nil, nil
	}
	if e.state != stateGone {
		c.mu.count--
		c.mu.va -= e.reservedSize(c.align)
	}
	e.state = stateGone
}

func (e *entry) reservedSize(align uint64) uint64 { return (e.size + align - 1) / align * align }

// admitLocked makes room for one more entry of size bytes, choosing
// unreferenced entries from the LRU head; it returns them for teardown.
func (c *Cache) admitLocked(size uint64) ([]*entry, error) {
	need := (size + c.align - 1) / c.align * c.align
	var victims []*entry
	over := func() bool {
		return c.mu.count+1 > c.opts.MaxEntries || (c.opts.MaxVA > 0 && c.mu.va+need > c.opts.MaxVA)
	}
	for over() {
		v := c.mu.lru.next
		if v == &c.mu.lru {
			return victims, fmt.Errorf("%w: %d segments, %d bytes of VA mapped (limits %d, %d); cannot map %d more bytes",
				ErrFull, c.mu.count, c.mu.va, c.opts.MaxEntries, c.opts.MaxVA, need)
		}
		c.forgetLocked(v)
		c.mu.stats.Evictions++
		victims = append(victims, v)
	}
	c.mu.count++
	c.mu.va += need
	return victims, nil
}

// load imports and maps e (whose creator holds one reference) and publishes
// the result to waiters.
func (c *Cache) load(ctx context.Context, e *entry, d segment.Descriptor) (Mapping, error) {
	start := time.Now()
	err := c.importMap(ctx, e, d)
	c.mu.Lock()
	var stale []*entry
	if err != nil {
		e.err = fmt.Errorf("mapping: map segment %v: %w", e.key, err)
		c.forgetLocked(e)
		e.state = stateFailed
		e.refs-- // the creator's; waiters drop theirs in wait
		c.mu.refs--
		if c.mu.closed && c.mu.refs == 0 && c.mu.drained != nil {
			close(c.mu.drained)
			c.mu.drained = nil
		}
	} else {
		e.state = stateReady
		c.mu.stats.Imports++
		c.mu.stats.ImportTime += time.Since(start)
		// Invalidated while loading: its holders may use it; the last
		// Release unmaps it. Otherwise this generation exists, so every
		// other generation of the id is stale.
		if !e.stale {
			for k, o := range c.mu.entries {
				if k.ID == e.key.ID && o != e {
					stale = c.invalidateLocked(o, stale)
				}
			}
		}
	}
	close(e.ready)
	c.mu.Unlock()
	c.teardownAll(stale)
	if err != nil {
		return Mapping{}, e.err
	}
	c.log.Debug("mapping: segment mapped", "segment", e.key.String(), "size", e.size, "base", fmt.Sprintf("%#x", e.base), "took", time.Since(start))
	return Mapping{Base: e.base, Size: e.size, e: e}, nil
}

// importMap creates e's driver objects; on failure it releases exactly the
// ones it created.
func (c *Cache) importMap(ctx context.Context, e *entry, d segment.Descriptor) (err error) {
	defer func() {
		if err != nil {
			if terr := c.destroy(e); terr != nil {
				err = errors.Join(err, fmt.Errorf("releasing the partial mapping: %w", terr))
				c.zombie(e)
			}
		}
	}()
	switch d.Handle.Kind {
	case segment.HandleFabric:
		if e.handle, err = c.drv.MemImportFromFabric(c.cctx, cuda.FabricHandle(d.Handle.Fabric)); err != nil {
			return fmt.Errorf("import fabric handle: %w", err)
		}
	case segment.HandlePosixFD:
		fd, ferr := c.opts.Fetch(ctx, d)
		if ferr != nil {
			return fmt.Errorf("fetch fd: %w", ferr)
		}
		e.handle, err = c.drv.MemImportFromFD(c.cctx, fd)
		closeFD(fd) // imported or not, the fd is no longer needed
		if err != nil {
			return fmt.Errorf("import fd: %w", err)
		}
	default:
		return fmt.Errorf("handle kind %v", d.Handle.Kind)
	}
	// The descriptor's size comes from the master (whoever mounted the
	// segment); the allocation is what the handle names. Copies trust the
	// former, so it must be the latter before anything is mapped: a larger
	// claim would let copies run past the allocation. A driver that cannot
	// tell the size still refuses the map below when the allocation is
	// smaller (cuMemMap of offset 0 and the claimed size).
	if sz, ok := c.drv.(cuda.AllocationSizer); ok {
		n, err := sz.MemAllocationSize(c.cctx, e.handle)
		if err != nil {
			return fmt.Errorf("size of the imported allocation: %w", err)
		}
		if n != e.size {
			return fmt.Errorf("%w: descriptor size %d, imported allocation %d bytes", ErrDescriptorMismatch, e.size, n)
		}
	}
	size := e.reservedSize(c.align)
	if e.base, err = c.drv.MemAddressReserve(c.cctx, size, c.align); err != nil {
		return fmt.Errorf("reserve %d bytes of VA: %w", size, err)
	}
	e.reserved = size
	if err = c.drv.MemMap(c.cctx, e.base, e.size, 0, e.handle); err != nil {
		// Driver 580 (H200) answers NOT_SUPPORTED for a range past the
		// allocation's end or not a multiple of its granularity.
		if errors.Is(err, cuda.ErrorNotSupported) || errors.Is(err, cuda.ErrorInvalidValue) {
			return fmt.Errorf("%w: the driver refused to map the descriptor's %d bytes of the imported allocation (smaller, or not a multiple of its granularity): %w",
				ErrDescriptorMismatch, e.size, err)
		}
		return fmt.Errorf("map %d bytes at %#x: %w", e.size, e.base, err)
	}
	e.mapped = true
	if err = c.drv.MemSetAccess(c.cctx, e.base, e.size, c.access); err != nil {
		return fmt.Errorf("grant access to %d devices: %w", len(c.access), err)
	}
	return nil
}

// destroy releases e's driver objects in reverse order of creation,
// forgetting each one that is released, so a retry does only what is left.
func (c *Cache) destroy(e *entry) error {
	var errs []error
	if e.mapped {
		if err := c.drv.MemUnmap(c.cctx, e.base, e.size); err != nil {
			errs = append(errs, fmt.Errorf("unmap %#x: %w", e.base, err))
		} else {
			e.mapped = false
		}
	}
	if e.reserved != 0 && !e.mapped {
		if err := c.drv.MemAddressFree(c.cctx, e.base, e.reserved); err != nil {
			errs = append(errs, fmt.Errorf("free VA %#x: %w", e.base, err))
		} else {
			e.reserved = 0
		}
	}
	if e.handle != 0 {
		if err := c.drv.MemRelease(c.cctx, e.handle); err != nil {
			errs = append(errs, fmt.Errorf("release handle: %w", err))
		} else {
			e.handle = 0
		}
	}
	return errors.Join(errs...)
}

func closeFD(fd int) { syscall.Close(fd) }

func (c *Cache) zombie(e *entry) {
	c.mu.Lock()
	c.mu.zombies = append(c.mu.zombies, e)
	c.mu.Unlock()
}

// teardown unmaps an entry that left the maps; a failure keeps it for Close.
func (c *Cache) teardown(e *entry) {
	if err := c.destroy(e); err != nil {
		c.log.Warn("mapping: unmapping segment failed; Close will retry", "segment", e.key.String(), "err", err)
		c.zombie(e)
	}
}

func (c *Cache) teardownAll(es []*entry) {
	for _, e := range es {
		c.teardown(e)
	}
}

// invalidateLocked marks e stale and removes it from the lookup maps; an
// unreferenced e is appended to out for teardown.
func (c *Cache) invalidateLocked(e *entry, out []*entry) []*entry {
	if e.stale || e.state == stateGone {
		return out
	}
	e.stale = true
	c.mu.stats.Invalidations++
	if c.mu.entries[e.key] == e {
		delete(c.mu.entries, e.key)
	}
	if e.refs == 0 && e.state == stateReady {
		c.forgetLocked(e)
		out = append(out, e)
	}
	// Referenced (or still loading) entries are torn down by their last
	// Release; they stay counted against the bounds until then.
	return out
}

// Invalidate drops every mapping of segment id (all generations), e.g. when
// the segment is unmounted. Referenced mappings stay valid for their holders
// and are unmapped at their last Release; new Acquires import afresh.
func (c *Cache) Invalidate(id string) {
	c.mu.Lock()
	var out []*entry
	for k, e := range c.mu.entries {
		if k.ID == id {
			out = c.invalidateLocked(e, out)
		}
	}
	c.mu.Unlock()
	c.teardownAll(out)
}

// Retain drops every mapping whose allocation keep rejects (segments the
// master no longer has), as InvalidateKey would, and returns how many it
// dropped. keep is called under the cache's lock and must not call back
// into the Cache.
func (c *Cache) Retain(keep func(segment.Key) bool) int {
	c.mu.Lock()
	var out []*entry
	n := 0
	for k, e := range c.mu.entries {
		if !keep(k) {
			out = c.invalidateLocked(e, out)
			n++
		}
	}
	c.mu.Unlock()
	c.teardownAll(out)
	return n
}

// InvalidateKey drops the mapping of one allocation.
func (c *Cache) InvalidateKey(k segment.Key) {
	c.mu.Lock()
	var out []*entry
	if e, ok := c.mu.entries[k]; ok {
		out = c.invalidateLocked(e, out)
	}
	c.mu.Unlock()
	c.teardownAll(out)
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.mu.stats
	s.Entries, s.VA = c.mu.count, c.mu.va
	return s
}

// Close unmaps every segment. In order:
//
//  1. new Acquires fail with ErrClosed;
//  2. Close waits up to Options.CloseTimeout for every reference (and
//     every load in progress) to be released — each Release then unmaps its
//     entry at once;
//  3. every unreferenced entry is unmapped, VA freed, handle released;
//  4. entries whose earlier teardown failed are retried.
//
// If references remain, Close returns ErrBusy after step 2 without
// unmapping them (never under a copy); a later Close retries. Close returns
// nil once everything is released; calling it again then is a no-op.
func (c *Cache) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	c.mu.Lock()
	c.mu.closed = true
	var wait chan struct{}
	if c.mu.refs > 0 {
		if c.mu.drained == nil {
			c.mu.drained = make(chan struct{})
		}
		wait = c.mu.drained
	}
	c.mu.Unlock()
	var errs []error
	if wait != nil {
		t := time.NewTimer(c.opts.CloseTimeout)
		select {
		case <-wait:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	var out []*entry
	for _, e := range c.mu.entries {
		if e.refs == 0 && e.state == stateReady {
			c.forgetLocked(e)
			out = append(out, e)
		}
	}
	busy, refs := len(c.mu.entries), c.mu.refs
	zombies := c.mu.zombies
	c.mu.zombies = nil
	c.mu.Unlock()
	for _, e := range append(out, zombies...) {
		if err := c.destroy(e); err != nil {
			errs = append(errs, fmt.Errorf("mapping: unmap segment %v: %w", e.key, err))
			c.zombie(e)
		}
	}
	if refs > 0 {
		errs = append(errs, fmt.Errorf("%w: %d references on %d segments after %v", ErrBusy, refs, busy, c.opts.CloseTimeout))
	}
	return errors.Join(errs...)
}
