// Package pool is the provider side of kvfabric (DESIGN §3): it allocates
// the capacity this process provides — HOST_NUMA VMM chunks over the
// selected NUMA nodes (the EGM pool) or DEVICE VMM chunks on the provider's
// GPU (HBM, when the EGM pool is off) — maps them for every visible GPU,
// exports a handle per chunk and mounts every chunk as a master segment.
// Setup is transactional and teardown is retryable.
package pool

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/numa"
	"github.com/kvfabric/kvfabric/internal/segment"
)

var (
	// ErrClosed is returned by operations started after Close.
	ErrClosed = errors.New("pool: closed")
	// ErrUnknownSegment is returned by DevicePtr for a key the pool does not
	// own.
	ErrUnknownSegment = errors.New("pool: unknown segment")
	// ErrInvalid is wrapped by errors about the pool's inputs (Deps and
	// config values the pool itself checks).
	ErrInvalid = errors.New("pool: invalid argument")
)

// DefaultUnmountTimeout bounds one UnmountSegment call during Close or
// rollback, so that Close never blocks forever on an unreachable master.
const DefaultUnmountTimeout = 30 * time.Second

// Phase names a stage of setup or teardown for Progress reports.
type Phase string

// Phases, in the order setup and teardown run them.
const (
	PhaseAllocate Phase = "allocate" // cuMemCreate of every chunk
	PhaseMap      Phase = "map"      // reserve VA, map, set access
	PhaseExport   Phase = "export"   // export handles (and register fds)
	PhaseMount    Phase = "mount"    // mount segments in the master
	PhaseTeardown Phase = "teardown" // one report per chunk fully released
)

// Progress is one progress report: Done of Total chunks have passed Phase.
type Progress struct {
	Phase Phase
	Done  int
	Total int
	// Bytes is the capacity of the Done chunks.
	Bytes uint64
}

// Deps are the pool's collaborators.
type Deps struct {
	// Mounter publishes segments; required.
	Mounter Mounter
	// FDs serves exported POSIX fds; required when handles are POSIX fds
	// (handle_type posix_fd, or auto falling back to it); unused for
	// fabric handles.
	FDs FDRegistry
	// Logger receives setup decisions (handle type fallback, plan); nil
	// discards.
	Logger *slog.Logger
	// Progress, if set, is called synchronously after each chunk of each
	// phase (a CLI progress bar). It must not call into the Pool.
	Progress func(Progress)
	// Owner is the client id of this provider, part of every segment id;
	// required, without '/'.
	Owner string
	// UnmountTimeout bounds each UnmountSegment call; 0 means
	// DefaultUnmountTimeout.
	UnmountTimeout time.Duration
	// HostMemory reads the host's memory sizes, which bound a DRAM
	// global_segment_size; the zero value reads this host's /proc and /sys.
	HostMemory numa.HostMemory
}

// step is one resource a chunk holds. The order is the teardown order: a
// step is undone only once every step before it has been undone, so a chunk
// whose teardown failed keeps everything after the failure.
//
// The held bits are not a teardown.Record: setup sets them as it acquires
// resources (Remount and Nodes read them), and teardown takes each step
// across all chunks before the next, every chunk advancing on its own, so
// one chunk's failure holds back only that chunk. A Record runs one list
// for one owner.
type step uint8

const (
	stepMount    step = iota // mounted in the master
	stepRegister             // fd owned by the FDRegistry
	stepFD                   // exported fd owned by the pool (not yet registered)
	stepMap                  // VA range mapped to the allocation
	stepReserve              // VA range reserved
	stepCreate               // allocation handle owned
	numSteps
)

// chunk is one allocation = one exported range = one segment. Its fields
// after held are fixed once setup has passed the step that sets them.
type chunk struct {
	desc segment.Descriptor // ID, Generation, Tier, Location, Size; Handle after export
	h    cuda.AllocHandle
	ptr  cuda.DevicePtr
	fd   int
	held uint8 // bit per step held (guarded by Pool.mu)
}

func (c *chunk) has(s step) bool { return c.held&(1<<s) != 0 }
func (c *chunk) set(s step)      { c.held |= 1 << s }
func (c *chunk) clear(s step)    { c.held &^= 1 << s }

// ready reports whether s may be undone: no earlier step is still held.
func (c *chunk) ready(s step) bool { return c.has(s) && c.held&(1<<s-1) == 0 }

// Pool is a provider's capacity: a set of mounted segments.
//
// A Pool is safe for concurrent use. Open and Close serialize driver and
// master work; accessors take a short lock. After Close starts, DevicePtr
// fails with ErrClosed.
type Pool struct {
	drv     cuda.Driver
	deps    Deps
	log     *slog.Logger
	dev     cuda.Device
	tier    segment.Tier
	handle  cuda.HandleType
	layout  Layout
	byKey   map[segment.Key]*chunk // fixed after Open
	closing atomic.Bool

	mu struct {
		sync.Mutex
		// guards the fields below, every chunk's held bits, and serializes
		// setup and teardown.
		chunks  []*chunk
		ctx     cuda.Context
		ctxHeld bool               // primary context of dev retained
		strays  []cuda.AllocHandle // probe allocations whose release failed
		pending bool               // the last teardown failed
	}
}

// Open allocates, maps, exports and mounts the capacity cfg describes and
// returns the pool once every segment is mounted.
//
// Setup order: validate → select locations (NUMA nodes or the device) →
// bound the size by their memory (checkHostMemory, checkDeviceMemory) →
// handle type → query granularities → plan → create all allocations →
// reserve + map + one batched access grant per chunk for every visible GPU
// → export (fabric handle into the descriptor, or POSIX fd into
// deps.FDs) → mount every segment. Any failure unwinds everything done so
// far, in reverse (see Close). If the unwinding itself fails, the error is
// an *UnwindError that still owns what remains and can retry.
//
// cfg.GlobalSegmentSize == 0 (a pure consumer) gives an empty pool that
// touches neither the driver nor the master.
func Open(ctx context.Context, drv cuda.Driver, cfg config.Config, deps Deps) (_ *Pool, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if drv == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalid)
	}
	if deps.Mounter == nil {
		return nil, fmt.Errorf("%w: Deps.Mounter is nil", ErrInvalid)
	}
	if deps.Owner == "" || strings.ContainsAny(deps.Owner, "/\x00\n") {
		return nil, fmt.Errorf("%w: owner %q: want a non-empty client id without '/'", ErrInvalid, deps.Owner)
	}
	if strings.ContainsAny(cfg.LocalHostname, "/\x00\n") {
		return nil, fmt.Errorf("%w: local_hostname=%q: must not contain '/'", ErrInvalid, cfg.LocalHostname)
	}
	if cfg.HandleType == config.HandlePosixFD && deps.FDs == nil {
		return nil, fmt.Errorf("%w: handle_type=posix_fd needs Deps.FDs", ErrInvalid)
	}
	if deps.UnmountTimeout <= 0 {
		deps.UnmountTimeout = DefaultUnmountTimeout
	}
	p := &Pool{drv: drv, deps: deps, log: deps.Logger, dev: cuda.Device(cfg.Device), byKey: map[segment.Key]*chunk{}}
	if p.log == nil {
		p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p.tier = segment.TierHBM
	if cfg.EGMEnabled() {
		p.tier = segment.TierDRAM
	}
	if cfg.GlobalSegmentSize == 0 {
		return p, nil
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if err == nil {
			return
		}
		p.closing.Store(true)
		if uerr := p.teardownLocked(); uerr != nil {
			p.mu.pending = true
			err = &UnwindError{Err: err, Unwind: uerr, p: p}
		}
	}()
	if err := p.setupLocked(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pool) setupLocked(ctx context.Context, cfg config.Config) error {
	drv := p.drv
	ndev, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("pool: count devices: %w", err)
	}
	if cfg.Device >= ndev {
		return fmt.Errorf("%w: device=%d: only %d GPUs visible", ErrInvalid, cfg.Device, ndev)
	}
	cctx, err := drv.PrimaryCtxRetain(p.dev)
	if err != nil {
		return fmt.Errorf("pool: retain primary context of device %d: %w", p.dev, err)
	}
	p.mu.ctx, p.mu.ctxHeld = cctx, true

	// Locations, handle type, granularities: every query uses exactly the
	// properties the allocations will use.
	var locs []Location
	var access []cuda.AccessDesc
	if cfg.EGMEnabled() {
		ids := cfg.EGMNUMANodes
		explicit := ids != nil
		if !explicit {
			if ids, err = numa.Auto(drv); err != nil {
				return fmt.Errorf("pool: egm_numa_nodes=auto: %w", err)
			}
		}
		if err := checkHostMemory(p.deps.HostMemory, cfg.GlobalSegmentSize); err != nil {
			return err
		}
		if p.handle, err = p.resolveHandleLocked(cfg.HandleType, numa.Prop(ids[0], 0)); err != nil {
			if errors.Is(err, cuda.ErrorInvalidValue) { // the driver does not know the node
				err = fmt.Errorf("%w: %w", numa.ErrNodeUnavailable, err)
			}
			return fmt.Errorf("pool: egm_numa_nodes=%s: node %d: %w", cfg.NUMANodesString(), ids[0], err)
		}
		nodes, err := numa.Check(drv, cctx, ids, p.handle, explicit, p.addStrayLocked)
		if err != nil {
			return fmt.Errorf("pool: egm_numa_nodes=%s: %w", cfg.NUMANodesString(), err)
		}
		for _, n := range nodes {
			locs = append(locs, Location{Tier: segment.TierDRAM, ID: int32(n.ID), Granularity: n.Granularity})
		}
		// Every visible GPU copies to and from the pool. The host access
		// grant lets the provider's CPU touch its own chunks (verification,
		// doctor); the lab H200 (driver 580, CUDA 13.0) accepts HOST_NUMA
		// access descriptors in the same cuMemSetAccess call
		// (../shared/device/probe-1.cu), and per-node descriptors are added
		// per chunk in mapLocked.
		for d := range ndev {
			access = append(access, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(d)}, Flags: cuda.AccessReadWrite})
		}
	} else {
		if err := p.checkDeviceMemory(cfg.GlobalSegmentSize); err != nil {
			return err
		}
		prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(p.dev)}}
		if p.handle, err = p.resolveHandleLocked(cfg.HandleType, prop); err != nil {
			return fmt.Errorf("pool: device %d: %w", p.dev, err)
		}
		prop.HandleTypes = p.handle
		g, err := drv.MemGetAllocationGranularity(cctx, prop, cuda.GranularityRecommended)
		if err != nil {
			return fmt.Errorf("pool: device %d granularity (%s handles): %w", p.dev, p.handle, err)
		}
		locs = []Location{{Tier: segment.TierHBM, ID: int32(p.dev), Granularity: g}}
		access = append(access, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(p.dev)}, Flags: cuda.AccessReadWrite})
		for d := range ndev {
			if cuda.Device(d) == p.dev {
				continue
			}
			ok, err := drv.CanAccessPeer(cuda.Device(d), p.dev)
			if err != nil {
				return fmt.Errorf("pool: can device %d access device %d: %w", d, p.dev, err)
			}
			if ok {
				access = append(access, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(d)}, Flags: cuda.AccessReadWrite})
			}
		}
	}
	if p.handle == cuda.HandlePosixFD && p.deps.FDs == nil {
		return fmt.Errorf("%w: POSIX fd handles need Deps.FDs (handle_type=%s)", ErrInvalid, cfg.HandleType)
	}

	if p.layout, err = Plan(cfg.GlobalSegmentSize, cfg.MaxMRSize, locs); err != nil {
		return err
	}
	p.log.Info("pool: plan", "tier", p.tier, "handle", p.handle, "plan", p.layout.String())

	// Build the chunks (no driver calls yet).
	for _, n := range p.layout.Nodes {
		for i, size := range n.Chunks {
			gen, err := p.newGeneration()
			if err != nil {
				return err
			}
			c := &chunk{fd: -1, desc: segment.Descriptor{
				ID:         fmt.Sprintf("%s/%s/%s%d/%d", cfg.LocalHostname, p.deps.Owner, p.tier, n.Location.ID, i),
				Generation: gen,
				Node:       cfg.LocalHostname,
				Owner:      p.deps.Owner,
				Tier:       p.tier,
				Location:   n.Location.ID,
				Size:       size,
			}}
			p.mu.chunks = append(p.mu.chunks, c)
			p.byKey[c.desc.Key()] = c
		}
	}
	chunks := p.mu.chunks
	total := len(chunks)
	var bytes uint64
	report := func(ph Phase, i int, c *chunk) {
		if i == 0 {
			bytes = 0
		}
		bytes += c.desc.Size
		if p.deps.Progress != nil {
			p.deps.Progress(Progress{Phase: ph, Done: i + 1, Total: total, Bytes: bytes})
		}
	}

	// Create every allocation first: running out of memory fails before
	// anything is mapped or published.
	for i, c := range chunks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pool: allocate: %w", err)
		}
		h, err := drv.MemCreate(cctx, c.desc.Size, p.prop(c.desc.Location))
		if err != nil {
			hint := ""
			if p.handle == cuda.HandleFabric && errors.Is(err, cuda.ErrorNotPermitted) {
				hint = " (FABRIC handles need an IMEX channel; use handle_type=auto or posix_fd)"
			}
			return fmt.Errorf("pool: allocate %s (%s on %s%d)%s: %w", c.desc.ID, config.FormatSize(c.desc.Size), p.tier, c.desc.Location, hint, err)
		}
		c.h = h
		c.set(stepCreate)
		report(PhaseAllocate, i, c)
	}
	for i, c := range chunks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pool: map: %w", err)
		}
		if err := p.mapLocked(c, access); err != nil {
			return err
		}
		report(PhaseMap, i, c)
	}
	for i, c := range chunks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pool: export: %w", err)
		}
		if err := p.exportLocked(c); err != nil {
			return err
		}
		report(PhaseExport, i, c)
	}
	for i, c := range chunks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pool: mount: %w", err)
		}
		if err := c.desc.Validate(); err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		if err := p.deps.Mounter.MountSegment(ctx, c.desc); err != nil {
			return fmt.Errorf("pool: mount %s: %w", c.desc.Key(), err)
		}
		c.set(stepMount)
		report(PhaseMount, i, c)
	}
	return nil
}

// resolveHandleLocked turns handle_type into the handle types every
// allocation requests. auto probes FABRIC once with one granule at prop's
// location: CUDA_ERROR_NOT_PERMITTED (no IMEX channel, as on the lab H200s)
// or CUDA_ERROR_NOT_SUPPORTED falls back to POSIX fds, and says so.
func (p *Pool) resolveHandleLocked(mode string, prop cuda.AllocProp) (cuda.HandleType, error) {
	switch mode {
	case config.HandlePosixFD:
		return cuda.HandlePosixFD, nil
	case config.HandleFabric:
		return cuda.HandleFabric, nil
	}
	prop.HandleTypes = cuda.HandleFabric
	fallback := func(op string, err error) (cuda.HandleType, error) {
		if errors.Is(err, cuda.ErrorNotPermitted) || errors.Is(err, cuda.ErrorNotSupported) {
			p.log.Info("pool: handle_type=auto: FABRIC handles unavailable, falling back to posix_fd",
				"probe", op, "location", fmt.Sprintf("%s %d", prop.Location.Type, prop.Location.ID), "err", err)
			return cuda.HandlePosixFD, nil
		}
		return 0, fmt.Errorf("handle_type=auto: FABRIC probe: %s: %w", op, err)
	}
	g, err := p.drv.MemGetAllocationGranularity(p.mu.ctx, prop, cuda.GranularityRecommended)
	if err != nil {
		return fallback("granularity query", err)
	}
	h, err := p.drv.MemCreate(p.mu.ctx, g, prop)
	if err != nil {
		return fallback("allocation", err)
	}
	if err := p.drv.MemRelease(p.mu.ctx, h); err != nil {
		p.addStrayLocked(h)
		return 0, fmt.Errorf("handle_type=auto: release FABRIC probe allocation: %w", err)
	}
	p.log.Info("pool: handle_type=auto: using FABRIC handles")
	return cuda.HandleFabric, nil
}

func (p *Pool) addStrayLocked(h cuda.AllocHandle) { p.mu.strays = append(p.mu.strays, h) }

func (p *Pool) prop(loc int32) cuda.AllocProp {
	if p.tier == segment.TierDRAM {
		return numa.Prop(int(loc), p.handle)
	}
	return cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationDevice, ID: loc}, HandleTypes: p.handle}
}

// mapLocked reserves VA for c, maps it and grants access in one
// cuMemSetAccess call.
func (p *Pool) mapLocked(c *chunk, access []cuda.AccessDesc) error {
	drv, cctx := p.drv, p.mu.ctx
	ptr, err := drv.MemAddressReserve(cctx, c.desc.Size, p.layout.Alignment)
	if err != nil {
		return fmt.Errorf("pool: reserve VA for %s: %w", c.desc.ID, err)
	}
	c.ptr = ptr
	c.set(stepReserve)
	if err := drv.MemMap(cctx, ptr, c.desc.Size, 0, c.h); err != nil {
		return fmt.Errorf("pool: map %s: %w", c.desc.ID, err)
	}
	c.set(stepMap)
	descs := access
	if p.tier == segment.TierDRAM {
		descs = append(slices.Clip(access), cuda.AccessDesc{
			Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: c.desc.Location}, Flags: cuda.AccessReadWrite})
	}
	if err := drv.MemSetAccess(cctx, ptr, c.desc.Size, descs); err != nil {
		return fmt.Errorf("pool: set access to %s for %d locations: %w", c.desc.ID, len(descs), err)
	}
	return nil
}

// exportLocked exports c's allocation: a fabric handle goes into the
// descriptor; a POSIX fd goes to the FDRegistry, which owns it from then on.
func (p *Pool) exportLocked(c *chunk) error {
	if p.handle == cuda.HandleFabric {
		fh, err := p.drv.MemExportToFabric(p.mu.ctx, c.h)
		if err != nil {
			return fmt.Errorf("pool: export %s as fabric handle: %w", c.desc.ID, err)
		}
		c.desc.Handle = segment.Handle{Kind: segment.HandleFabric, Fabric: fh}
		return nil
	}
	fd, err := p.drv.MemExportToFD(p.mu.ctx, c.h)
	if err != nil {
		return fmt.Errorf("pool: export %s as POSIX fd: %w", c.desc.ID, err)
	}
	c.fd = fd
	c.set(stepFD)
	if err := p.deps.FDs.Register(c.desc.Key(), fd); err != nil {
		return fmt.Errorf("pool: register fd of %s: %w", c.desc.Key(), err)
	}
	c.clear(stepFD)
	c.set(stepRegister)
	c.desc.Handle = segment.Handle{Kind: segment.HandlePosixFD, SocketPath: p.deps.FDs.SocketPath()}
	return nil
}

// newGeneration returns a random non-zero generation not used by another
// chunk of this pool.
func (p *Pool) newGeneration() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("pool: random generation: %w", err)
		}
		g := binary.LittleEndian.Uint64(b[:])
		if g == 0 {
			continue
		}
		dup := false
		for _, c := range p.mu.chunks {
			dup = dup || c.desc.Generation == g
		}
		if !dup {
			return g, nil
		}
	}
}

// Close tears the pool down. Teardown order, per chunk, each step only once
// every earlier step of that chunk is done:
//
//  1. unmount the segment from the master (consumers stop getting it);
//  2. unregister its POSIX fd from the FDRegistry (which closes it), or
//     close an fd that was exported but never registered;
//  3. unmap the VA range;
//  4. free the VA reservation;
//  5. release the allocation.
//
// Then probe allocations left over from a failed setup are released and the
// primary context is released. Each step runs over all chunks (in reverse
// creation order) before the next step starts.
//
// Every chunk records which steps succeeded. A failed step keeps the chunk's
// remaining resources owned by the pool; the next Close retries exactly the
// remaining steps and never repeats a succeeded one. Close is idempotent:
// it returns the errors.Join of this attempt's failures, and nil once
// everything is released (every later call then returns nil at once).
// CleanupPending reports a failed teardown. After Close starts, DevicePtr
// fails with ErrClosed. Each unmount is bounded by Deps.UnmountTimeout.
func (p *Pool) Close() error {
	p.closing.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.teardownLocked()
	p.mu.pending = err != nil
	return err
}

// Remount publishes every mounted segment to the master again, for a
// provider whose registration expired (the master unmounted its segments
// and dropped the objects on them) and that registered again. The memory
// and the descriptors — generations included — are unchanged; mounting a
// segment the master still has is a no-op there. It returns the errors of
// the segments it could not mount (a later Remount retries them). After
// Close starts it returns ErrClosed.
func (p *Pool) Remount(ctx context.Context) error {
	if p.closing.Load() {
		return ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing.Load() {
		return ErrClosed
	}
	var errs []error
	for _, c := range p.mu.chunks {
		if !c.has(stepMount) {
			continue
		}
		if err := p.deps.Mounter.MountSegment(ctx, c.desc); err != nil {
			errs = append(errs, fmt.Errorf("pool: remount %s: %w", c.desc.Key(), err))
		}
	}
	return errors.Join(errs...)
}

// CleanupPending reports whether the last Close (or the unwinding of a
// failed Open) failed and left resources that a later Close will retry.
func (p *Pool) CleanupPending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.pending
}

func (p *Pool) teardownLocked() error {
	var errs []error
	chunks := p.mu.chunks
	each := func(s step, undo func(c *chunk) error) {
		for i := len(chunks) - 1; i >= 0; i-- {
			c := chunks[i]
			if !c.ready(s) {
				continue
			}
			if err := undo(c); err != nil {
				errs = append(errs, err)
				continue
			}
			c.clear(s)
		}
	}
	each(stepMount, func(c *chunk) error {
		ctx, cancel := context.WithTimeout(context.Background(), p.deps.UnmountTimeout)
		defer cancel()
		if err := p.deps.Mounter.UnmountSegment(ctx, c.desc.Key()); err != nil {
			return fmt.Errorf("pool: unmount %s: %w", c.desc.Key(), err)
		}
		return nil
	})
	each(stepRegister, func(c *chunk) error {
		if err := p.deps.FDs.Unregister(c.desc.Key()); err != nil {
			return fmt.Errorf("pool: unregister fd of %s: %w", c.desc.Key(), err)
		}
		c.fd = -1
		return nil
	})
	for i := len(chunks) - 1; i >= 0; i-- {
		// close(2) is not retried even when it fails: Linux releases the
		// descriptor before reporting the error, so a retry could close a
		// reused number.
		if c := chunks[i]; c.ready(stepFD) {
			if err := syscall.Close(c.fd); err != nil {
				errs = append(errs, fmt.Errorf("pool: close exported fd %d of %s: %w", c.fd, c.desc.ID, err))
			}
			c.fd = -1
			c.clear(stepFD)
		}
	}
	each(stepMap, func(c *chunk) error {
		if err := p.drv.MemUnmap(p.mu.ctx, c.ptr, c.desc.Size); err != nil {
			return fmt.Errorf("pool: unmap %s: %w", c.desc.ID, err)
		}
		return nil
	})
	each(stepReserve, func(c *chunk) error {
		if err := p.drv.MemAddressFree(p.mu.ctx, c.ptr, c.desc.Size); err != nil {
			return fmt.Errorf("pool: free VA of %s: %w", c.desc.ID, err)
		}
		return nil
	})
	released, bytes := 0, uint64(0)
	each(stepCreate, func(c *chunk) error {
		if err := p.drv.MemRelease(p.mu.ctx, c.h); err != nil {
			return fmt.Errorf("pool: release %s: %w", c.desc.ID, err)
		}
		released++
		bytes += c.desc.Size
		if p.deps.Progress != nil {
			p.deps.Progress(Progress{Phase: PhaseTeardown, Done: released, Total: len(chunks), Bytes: bytes})
		}
		return nil
	})
	strays := p.mu.strays[:0]
	for _, h := range p.mu.strays {
		if err := p.drv.MemRelease(p.mu.ctx, h); err != nil {
			errs = append(errs, fmt.Errorf("pool: release probe allocation: %w", err))
			strays = append(strays, h)
		}
	}
	p.mu.strays = strays
	if p.mu.ctxHeld && p.allReleasedLocked() {
		if err := p.drv.PrimaryCtxRelease(p.dev); err != nil {
			errs = append(errs, fmt.Errorf("pool: release primary context of device %d: %w", p.dev, err))
		} else {
			p.mu.ctxHeld = false
		}
	}
	return errors.Join(errs...)
}

func (p *Pool) allReleasedLocked() bool {
	for _, c := range p.mu.chunks {
		if c.held != 0 {
			return false
		}
	}
	return len(p.mu.strays) == 0
}

// Segments returns the descriptors of the pool's segments, in plan order
// (locations by id, chunks by index). They are fixed after Open.
func (p *Pool) Segments() []segment.Descriptor {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]segment.Descriptor, len(p.mu.chunks))
	for i, c := range p.mu.chunks {
		out[i] = c.desc
	}
	return out
}

// Plan returns the capacity plan the pool was built from (the zero Layout
// for an empty pool).
func (p *Pool) Plan() Layout { return p.layout }

// Tier is the pool's memory tier (DRAM for the EGM pool, HBM otherwise).
func (p *Pool) Tier() segment.Tier { return p.tier }

// HandleType is the handle type every chunk was allocated with (after
// handle_type=auto resolution; HandleNone for an empty pool).
func (p *Pool) HandleType() cuda.HandleType { return p.handle }

// NodeSummary describes one location of the pool.
type NodeSummary struct {
	Tier        segment.Tier
	Location    int32 // host NUMA id or device ordinal
	Granularity uint64
	Bytes       uint64 // planned capacity
	Chunks      int
	Mounted     int // chunks currently mounted
	Held        int // chunks still holding any resource
}

// Nodes summarizes the pool per location, in plan order.
func (p *Pool) Nodes() []NodeSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]NodeSummary, len(p.layout.Nodes))
	for i, n := range p.layout.Nodes {
		out[i] = NodeSummary{Tier: n.Location.Tier, Location: n.Location.ID, Granularity: n.Location.Granularity,
			Bytes: n.Bytes, Chunks: len(n.Chunks)}
		for _, c := range p.mu.chunks {
			if c.desc.Location != n.Location.ID {
				continue
			}
			if c.has(stepMount) {
				out[i].Mounted++
			}
			if c.held != 0 {
				out[i].Held++
			}
		}
	}
	return out
}

// DevicePtr returns the address at which k's chunk is mapped in this
// process, for a provider that is also a consumer and copies into its own
// segments without importing them. The range [ptr, ptr+size) is accessible
// to every GPU the pool granted access to until Close starts; callers must
// finish their copies before calling Close.
func (p *Pool) DevicePtr(k segment.Key) (cuda.DevicePtr, error) {
	if p.closing.Load() {
		return 0, ErrClosed
	}
	c, ok := p.byKey[k]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrUnknownSegment, k)
	}
	return c.ptr, nil
}

// UnwindError is returned by Open when setup failed (Err) and unwinding it
// failed too (Unwind): the resources that could not be released are still
// owned and Retry releases them.
type UnwindError struct {
	Err    error // the setup failure
	Unwind error // what unwinding could not undo
	p      *Pool
}

func (e *UnwindError) Error() string {
	return fmt.Sprintf("%v (cleanup pending: %v)", e.Err, e.Unwind)
}

// Unwrap returns both errors, so errors.Is matches either.
func (e *UnwindError) Unwrap() []error { return []error{e.Err, e.Unwind} }

// Retry retries the unwinding (as Pool.Close): nil once all is released.
func (e *UnwindError) Retry() error { return e.p.Close() }

// CleanupPending reports whether resources are still held.
func (e *UnwindError) CleanupPending() bool { return e.p.CleanupPending() }
