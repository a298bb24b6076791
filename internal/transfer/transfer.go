// Package transfer is kvfabric's batched GPU copy engine (DESIGN §4): a batch
// of (dst, src, len) copies between any memory one GPU can address — its
// HBM, mapped segments (HOST_NUMA DRAM, peer HBM) and registered host memory
// — enqueued on the caller's stream with no CPU staging and no CPU wait
// before submission.
//
// Routing: blocks smaller than Options.CopyEngineMinBytes go through the SM
// gather/scatter kernel kvf_copy_blocks (kernels/copy_blocks.cu): the batch's
// descriptors are written into a slot of a pinned host ring, uploaded to the
// slot's device buffer with one async copy and consumed by one kernel launch.
// Larger blocks go to the copy engines with one cuMemcpyBatchAsync call, or
// one MemcpyAsync crossing (a cuMemcpyAsync per block inside the shim) when
// the driver lacks it. The crossover default, 128 KiB
// (DefaultCopyEngineMinBytes), is where the copy engine catches up with the
// SM kernel on H200 (docs/decisions.md item 6, docs/perf/datapath.md).
package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/teardown"
	"github.com/kvfabric/kvfabric/kernels"
)

// ErrClosed is returned by Engine and Handle methods after Engine.Close.
var ErrClosed = errors.New("transfer: engine closed")

// ErrInvalidCopy is wrapped by Submit's errors for a malformed copy; the
// batch is then rejected before anything is enqueued.
var ErrInvalidCopy = errors.New("transfer: invalid copy")

// Route selects how copies are executed.
type Route int

// Routes. RouteAuto is the default; the others force one path for every
// block of a batch (benchmarks and tests).
const (
	RouteAuto      Route = iota // SM kernel below CopyEngineMinBytes, else copy engine
	RouteKernel                 // SM kernel for every block
	RouteCopyBatch              // one cuMemcpyBatchAsync (needs the capability)
	RouteCopyEach               // one cuMemcpyAsync per block, one crossing
)

func (r Route) String() string {
	switch r {
	case RouteAuto:
		return "auto"
	case RouteKernel:
		return "sm-kernel"
	case RouteCopyBatch:
		return "ce-batch"
	case RouteCopyEach:
		return "ce-per-copy"
	}
	return fmt.Sprintf("route(%d)", int(r))
}

// DefaultCopyEngineMinBytes is the default crossover block size, measured
// on H200 (driver 580, PCIe Gen5 host memory; docs/perf/datapath.md): the SM
// kernel gives 0.92-0.95 of the copy-engine ceiling at every size, while
// cuMemcpyBatchAsync gives 0.08 at 4 KiB, 0.65 at 16 KiB, 0.92-1.00 at
// 64 KiB and 0.96-1.00 from 128 KiB. From 128 KiB the copy engine wins in
// both directions (and leaves the SMs to the model).
const DefaultCopyEngineMinBytes = 128 << 10

// DefaultFewCopies is the default Options.FewCopies: one per-copy
// cuMemcpyAsync costs ~3 µs at 4 KiB on H200, a kernel launch with its
// descriptor upload ~8 µs more than one copy.
const DefaultFewCopies = 2

// Options configures an Engine. The zero value is useful.
type Options struct {
	// CopyEngineMinBytes: blocks of at least this many bytes go to the copy
	// engine; smaller ones to the SM kernel. 0 means
	// DefaultCopyEngineMinBytes (128 KiB).
	CopyEngineMinBytes uint64
	// Route forces one path; RouteAuto (the zero value) routes by size,
	// except that a batch of at most FewCopies copies goes to the copy
	// engine one cuMemcpyAsync each, on the caller's stream: for a single
	// small get or put that is the lowest latency (no descriptor upload and
	// launch, no side stream; 18 µs against 25 µs for one 4 KiB get on H200,
	// docs/perf/latency.md).
	Route Route
	// FewCopies: see Route; 0 disables it (the Store uses
	// DefaultFewCopies).
	FewCopies int
	// RingSlots is the number of descriptor slots, i.e. how many kernel
	// launches may be in flight before Submit waits for the oldest
	// (default 8).
	RingSlots int
	// SlotDescs is the number of block descriptors per slot; a batch with
	// more small blocks is split into several launches (default 16384).
	SlotDescs int
	// Logger receives construction and teardown messages; nil discards.
	Logger *slog.Logger
}

const threadsPerCTA = 256

// Stats counts an Engine's work since New.
type Stats struct {
	KernelLaunches uint64 // kvf_copy_blocks launches
	KernelBlocks   uint64 // blocks copied by the kernel
	BatchCalls     uint64 // cuMemcpyBatchAsync calls
	BatchBlocks    uint64 // blocks copied by them
	EachCalls      uint64 // MemcpyAsync crossings (one cuMemcpyAsync per block)
	EachBlocks     uint64 // blocks copied by them
	RingWaits      uint64 // submissions that waited for a ring slot
}

// Engine executes copy batches on one device's context.
//
// An Engine is safe for concurrent use: goroutines may submit on different
// streams at once (submissions of small blocks are serialised on the
// descriptor ring for the few microseconds they take to enqueue). Close
// waits for calls in progress.
type Engine struct {
	drv   cuda.Driver
	ctx   cuda.Context
	dev   cuda.Device
	opts  Options
	batch bool // cuMemcpyBatchAsync available
	log   *slog.Logger

	mod cuda.Module
	fn  cuda.Function

	host     []byte         // mmap'ed ring of descriptor slots, registered with the driver
	hostReg  bool           // host is registered
	devBuf   cuda.DevicePtr // device copy of the ring
	slotSize uint64         // bytes per slot

	// life: submissions hold it for reading; Close for writing.
	life   sync.RWMutex
	closed bool // guarded by life

	ring struct {
		sync.Mutex
		// guards slots and next
		slots []slot
		next  int
	}

	events struct {
		sync.Mutex
		// guards free and all
		free []cuda.Event
		all  map[cuda.Event]struct{}
	}

	stats struct {
		kernelLaunches, kernelBlocks atomic.Uint64
		batchCalls, batchBlocks      atomic.Uint64
		eachCalls, eachBlocks        atomic.Uint64
		ringWaits                    atomic.Uint64
	}

	// side carries cuMemcpyBatchAsync work submitted on a default stream
	// (see batchCopy); created on first use.
	side struct {
		sync.Mutex
		// guards s
		s cuda.Stream
	}

	closeMu sync.Mutex      // serialises Close
	done    teardown.Record // guarded by closeMu: Close steps that succeeded
}

type slot struct {
	// upload and params are reused per launch (no allocation per batch).
	upload   [1]cuda.Copy
	p0       [8]byte
	p1       [4]byte
	params   [2][]byte
	ev       cuda.Event
	inflight bool // ev was recorded after the slot's last use
	broken   bool // its last use could not be fenced; never reused
}

// New loads the copy kernel into ctx (a context of device dev) and
// allocates the descriptor ring. With a driver that implements
// cuda.KernelEmulator (the simulator) it first registers the kernel's Go
// emulation, so the same upload-and-launch path runs there.
func New(drv cuda.Driver, ctx cuda.Context, dev cuda.Device, opts Options) (_ *Engine, err error) {
	if opts.CopyEngineMinBytes == 0 {
		opts.CopyEngineMinBytes = DefaultCopyEngineMinBytes
	}
	if opts.RingSlots <= 0 {
		opts.RingSlots = 8
	}
	if opts.SlotDescs <= 0 {
		opts.SlotDescs = 16384
	}
	if opts.Route < RouteAuto || opts.Route > RouteCopyEach {
		return nil, fmt.Errorf("transfer: route %d is not a Route", opts.Route)
	}
	if opts.RingSlots > 1024 || opts.SlotDescs > 1<<22 {
		return nil, fmt.Errorf("transfer: ring of %d slots x %d descriptors is too large", opts.RingSlots, opts.SlotDescs)
	}
	e := &Engine{drv: drv, ctx: ctx, dev: dev, opts: opts, batch: drv.Capabilities().MemcpyBatchAsync, log: opts.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if opts.Route == RouteCopyBatch && !e.batch {
		return nil, fmt.Errorf("transfer: route %v: driver %s lacks cuMemcpyBatchAsync: %w", opts.Route, drv.Name(),
			&cuda.Error{Op: "cuMemcpyBatchAsync", Result: cuda.ErrorNotSupported})
	}
	e.events.all = make(map[cuda.Event]struct{})
	defer func() {
		if err != nil {
			if cerr := e.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("transfer: unwinding New: %w", cerr))
			}
		}
	}()

	if em, ok := drv.(cuda.KernelEmulator); ok {
		em.RegisterKernel(kernels.CopyBlocksEntry, kernels.EmulateCopyBlocks)
	}
	if e.mod, err = drv.ModuleLoadData(ctx, kernels.CopyBlocksPTX); err != nil {
		return nil, fmt.Errorf("transfer: load %s PTX: %w", kernels.CopyBlocksEntry, err)
	}
	if e.fn, err = drv.ModuleGetFunction(ctx, e.mod, kernels.CopyBlocksEntry); err != nil {
		return nil, fmt.Errorf("transfer: get function %s: %w", kernels.CopyBlocksEntry, err)
	}

	e.slotSize = uint64(opts.SlotDescs) * kernels.CopyDescSize
	ringBytes := e.slotSize * uint64(opts.RingSlots)
	page := uint64(syscall.Getpagesize())
	ringBytes = (ringBytes + page - 1) &^ (page - 1)
	// Outside the Go heap: the driver pins it and DMAs from it while the Go
	// runtime knows nothing about the copy.
	if e.host, err = syscall.Mmap(-1, 0, int(ringBytes), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS); err != nil {
		e.host = nil
		return nil, fmt.Errorf("transfer: mmap %d-byte descriptor ring: %w", ringBytes, err)
	}
	if err = drv.MemHostRegister(ctx, e.hostAddr(), ringBytes, 0); err != nil {
		return nil, fmt.Errorf("transfer: register %d-byte descriptor ring: %w", ringBytes, err)
	}
	e.hostReg = true
	if e.devBuf, err = drv.MemAlloc(ctx, ringBytes); err != nil {
		return nil, fmt.Errorf("transfer: allocate %d-byte device descriptor ring: %w", ringBytes, err)
	}
	e.ring.slots = make([]slot, opts.RingSlots)
	for i := range e.ring.slots {
		ev, err := drv.EventCreate(ctx, cuda.EventDisableTiming)
		if err != nil {
			return nil, fmt.Errorf("transfer: create ring event %d: %w", i, err)
		}
		e.ring.slots[i].ev = ev
	}
	e.log.Debug("transfer engine ready", "device", int(dev), "driver", drv.Name(),
		"memcpy_batch_async", e.batch, "copy_engine_min_bytes", opts.CopyEngineMinBytes,
		"route", opts.Route.String(), "ring_slots", opts.RingSlots, "slot_descs", opts.SlotDescs)
	return e, nil
}

func (e *Engine) hostAddr() uintptr { return uintptr(unsafe.Pointer(&e.host[0])) }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		KernelLaunches: e.stats.kernelLaunches.Load(),
		KernelBlocks:   e.stats.kernelBlocks.Load(),
		BatchCalls:     e.stats.batchCalls.Load(),
		BatchBlocks:    e.stats.batchBlocks.Load(),
		EachCalls:      e.stats.eachCalls.Load(),
		EachBlocks:     e.stats.eachBlocks.Load(),
		RingWaits:      e.stats.ringWaits.Load(),
	}
}

// Submit enqueues copies on stream s after the work already on it and
// returns without waiting for them. Zero-length copies are skipped.
// Copies in one batch must not overlap each other's destinations.
//
// A malformed copy (null address, address range overflow) rejects the whole
// batch with ErrInvalidCopy before anything is enqueued. A driver error
// during enqueueing returns the error with part of the batch possibly
// enqueued: the destinations' contents are then unspecified, and the engine
// stays usable.
func (e *Engine) Submit(s cuda.Stream, copies []cuda.Copy) error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return e.submitLocked(s, copies)
}

// Do submits copies on s, then waits for them (and everything before them
// on s) with an event of its own. When submission fails after part of the
// batch was enqueued, or the completion event cannot be had, Do still waits
// for s before returning the error, so that nothing Do enqueued runs after
// it returns (callers release the buffers on that promise).
func (e *Engine) Do(s cuda.Stream, copies []cuda.Copy) error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return ErrClosed
	}
	drain := func(err error) error {
		if serr := e.drv.StreamSynchronize(e.ctx, s); serr != nil {
			err = errors.Join(err, fmt.Errorf("transfer: wait for the enqueued part of the batch: %w", serr))
		}
		return err
	}
	if err := e.submitLocked(s, copies); err != nil {
		if !errors.Is(err, ErrInvalidCopy) {
			err = drain(err)
		}
		return err
	}
	ev, err := e.getEvent()
	if err != nil {
		return drain(err)
	}
	defer e.putEvent(ev)
	if err := e.drv.EventRecord(e.ctx, ev, s); err != nil {
		return drain(fmt.Errorf("transfer: record completion event: %w", err))
	}
	if err := e.drv.EventSynchronize(e.ctx, ev); err != nil {
		return fmt.Errorf("transfer: wait for batch: %w", err)
	}
	return nil
}

// SubmitAsync submits copies on s and returns a Handle whose Wait or Done
// reports their completion. The handle's event returns to the engine once
// completion has been observed; a handle never waited for keeps its event
// until Close.
func (e *Engine) SubmitAsync(s cuda.Stream, copies []cuda.Copy) (*Handle, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	if err := e.submitLocked(s, copies); err != nil {
		return nil, err
	}
	ev, err := e.getEvent()
	if err != nil {
		return nil, err
	}
	if err := e.drv.EventRecord(e.ctx, ev, s); err != nil {
		e.putEvent(ev)
		return nil, fmt.Errorf("transfer: record completion event: %w", err)
	}
	return &Handle{e: e, ev: ev}, nil
}

// Handle is the completion of one SubmitAsync batch. Its methods are safe
// for concurrent use.
type Handle struct {
	e  *Engine
	mu sync.Mutex
	// guarded by mu:
	ev       cuda.Event
	finished bool
	err      error
}

// Wait blocks until the batch (and the stream's earlier work) completed.
func (h *Handle) Wait() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return h.err
	}
	h.e.life.RLock()
	defer h.e.life.RUnlock()
	if h.e.closed {
		return ErrClosed
	}
	if err := h.e.drv.EventSynchronize(h.e.ctx, h.ev); err != nil {
		h.finishLocked(fmt.Errorf("transfer: wait for batch: %w", err))
	} else {
		h.finishLocked(nil)
	}
	return h.err
}

// Done reports without blocking whether the batch completed, and its error.
func (h *Handle) Done() (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return true, h.err
	}
	h.e.life.RLock()
	defer h.e.life.RUnlock()
	if h.e.closed {
		return true, ErrClosed
	}
	ok, err := h.e.drv.EventQuery(h.e.ctx, h.ev)
	switch {
	case err != nil:
		h.finishLocked(fmt.Errorf("transfer: query batch: %w", err))
	case ok:
		h.finishLocked(nil)
	default:
		return false, nil
	}
	return true, h.err
}

func (h *Handle) finishLocked(err error) {
	h.finished, h.err = true, err
	h.e.putEvent(h.ev)
}

// getEvent returns a pooled completion event, creating one if none is free.
func (e *Engine) getEvent() (cuda.Event, error) {
	e.events.Lock()
	if n := len(e.events.free); n > 0 {
		ev := e.events.free[n-1]
		e.events.free = e.events.free[:n-1]
		e.events.Unlock()
		return ev, nil
	}
	e.events.Unlock()
	ev, err := e.drv.EventCreate(e.ctx, cuda.EventDisableTiming)
	if err != nil {
		return 0, fmt.Errorf("transfer: create completion event: %w", err)
	}
	e.events.Lock()
	e.events.all[ev] = struct{}{}
	e.events.Unlock()
	return ev, nil
}

func (e *Engine) putEvent(ev cuda.Event) {
	e.events.Lock()
	e.events.free = append(e.events.free, ev)
	e.events.Unlock()
}

// submitLocked validates, routes and enqueues; the caller holds life.
func (e *Engine) submitLocked(s cuda.Stream, copies []cuda.Copy) error {
	var small, large []cuda.Copy
	for i, c := range copies {
		if c.Len == 0 {
			continue
		}
		if c.Dst == 0 || c.Src == 0 || uint64(c.Dst)+c.Len < uint64(c.Dst) || uint64(c.Src)+c.Len < uint64(c.Src) {
			return fmt.Errorf("%w: copy %d of %d: dst %#x src %#x len %d", ErrInvalidCopy, i, len(copies), c.Dst, c.Src, c.Len)
		}
	}
	switch e.opts.Route {
	case RouteKernel:
		small = copies
	case RouteCopyBatch, RouteCopyEach:
		large = copies
	default:
		if len(copies) <= e.opts.FewCopies {
			return e.copyEach(s, nonEmpty(copies))
		}
		// Common cases without allocating: all small or all large.
		nSmall := 0
		for _, c := range copies {
			if c.Len > 0 && c.Len < e.opts.CopyEngineMinBytes {
				nSmall++
			}
		}
		switch nSmall {
		case 0:
			large = copies
		case len(copies):
			small = copies
		default:
			small = make([]cuda.Copy, 0, nSmall)
			large = make([]cuda.Copy, 0, len(copies)-nSmall)
			for _, c := range copies {
				if c.Len < e.opts.CopyEngineMinBytes {
					small = append(small, c)
				} else {
					large = append(large, c)
				}
			}
		}
	}
	// The copy engines first: they run while the kernel's descriptors upload.
	if err := e.copyEngine(s, nonEmpty(large)); err != nil {
		return err
	}
	return e.kernel(s, nonEmpty(small))
}

// nonEmpty drops zero-length copies (rarely present; no allocation otherwise).
func nonEmpty(cs []cuda.Copy) []cuda.Copy {
	for i, c := range cs {
		if c.Len == 0 {
			out := append([]cuda.Copy(nil), cs[:i]...)
			for _, c := range cs[i+1:] {
				if c.Len > 0 {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return cs
}

func (e *Engine) copyEngine(s cuda.Stream, cs []cuda.Copy) error {
	if len(cs) == 0 {
		return nil
	}
	if e.batch && e.opts.Route != RouteCopyEach {
		if err := e.batchCopy(s, cs); err != nil {
			return fmt.Errorf("transfer: batch copy of %d blocks: %w", len(cs), err)
		}
		e.stats.batchCalls.Add(1)
		e.stats.batchBlocks.Add(uint64(len(cs)))
		return nil
	}
	return e.copyEach(s, cs)
}

// copyEach enqueues one cuMemcpyAsync per copy on s (one cgo crossing).
func (e *Engine) copyEach(s cuda.Stream, cs []cuda.Copy) error {
	if len(cs) == 0 {
		return nil
	}
	if err := e.drv.MemcpyAsync(e.ctx, cs, s); err != nil {
		return fmt.Errorf("transfer: per-block copy of %d blocks: %w", len(cs), err)
	}
	e.stats.eachCalls.Add(1)
	e.stats.eachBlocks.Add(uint64(len(cs)))
	return nil
}

// isDefaultStream reports the stream handles that name a default stream:
// NULL (the legacy stream unless the thread uses per-thread default
// streams), CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2).
func isDefaultStream(s cuda.Stream) bool { return s <= 2 }

// batchCopy enqueues one cuMemcpyBatchAsync for cs, ordered on s.
//
// cuMemcpyBatchAsync rejects a default stream with CUDA_ERROR_INVALID_VALUE
// (seen with driver 580 / CUDA 13.0 on H200; the driver documentation says
// the legacy stream is not supported). PyTorch's default current stream is
// that stream, so for a default s the batch runs on the engine's side stream
// inside an event fork/join: s → record → side waits → batch → record →
// s waits. The caller's ordering is unchanged and the CPU never waits.
func (e *Engine) batchCopy(s cuda.Stream, cs []cuda.Copy) error {
	if !isDefaultStream(s) {
		return e.drv.MemcpyBatchAsync(e.ctx, cs, s)
	}
	e.side.Lock()
	defer e.side.Unlock()
	if e.side.s == 0 {
		side, err := e.drv.StreamCreate(e.ctx, cuda.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("create side stream: %w", err)
		}
		e.side.s = side
	}
	fork, err := e.getEvent()
	if err != nil {
		return err
	}
	defer e.putEvent(fork)
	join, err := e.getEvent()
	if err != nil {
		return err
	}
	defer e.putEvent(join)
	if err := e.drv.EventRecord(e.ctx, fork, s); err != nil {
		return fmt.Errorf("fork from default stream: %w", err)
	}
	if err := e.drv.StreamWaitEvent(e.ctx, e.side.s, fork); err != nil {
		return fmt.Errorf("fork from default stream: %w", err)
	}
	if err := e.drv.MemcpyBatchAsync(e.ctx, cs, e.side.s); err != nil {
		return err
	}
	// Join: s must not run ahead of the copies whatever happens below.
	if err := e.drv.EventRecord(e.ctx, join, e.side.s); err != nil {
		return fmt.Errorf("join into default stream: %w (copies are enqueued on the side stream)", err)
	}
	if err := e.drv.StreamWaitEvent(e.ctx, s, join); err != nil {
		return fmt.Errorf("join into default stream: %w (copies are enqueued on the side stream)", err)
	}
	return nil
}

// kernel enqueues cs through the SM kernel, one launch per ring slot's worth
// of descriptors.
func (e *Engine) kernel(s cuda.Stream, cs []cuda.Copy) error {
	if len(cs) == 0 {
		return nil
	}
	e.ring.Lock()
	defer e.ring.Unlock()
	for len(cs) > 0 {
		n := min(len(cs), e.opts.SlotDescs)
		if err := e.launchLocked(s, cs[:n]); err != nil {
			return err
		}
		cs = cs[n:]
	}
	return nil
}

// acquireSlotLocked returns the index of the next reusable slot, waiting for
// the oldest launch when the ring is full.
func (e *Engine) acquireSlotLocked() (int, error) {
	slots := e.ring.slots
	for range slots {
		i := e.ring.next
		e.ring.next = (e.ring.next + 1) % len(slots)
		sl := &slots[i]
		if sl.broken {
			continue
		}
		if !sl.inflight {
			return i, nil
		}
		done, err := e.drv.EventQuery(e.ctx, sl.ev)
		if err == nil && !done {
			e.stats.ringWaits.Add(1)
			err = e.drv.EventSynchronize(e.ctx, sl.ev)
		}
		if err != nil {
			return 0, fmt.Errorf("transfer: wait for descriptor slot %d: %w", i, err)
		}
		sl.inflight = false
		return i, nil
	}
	return 0, fmt.Errorf("transfer: every descriptor slot is unusable after earlier driver failures")
}

func (e *Engine) launchLocked(s cuda.Stream, cs []cuda.Copy) error {
	i, err := e.acquireSlotLocked()
	if err != nil {
		return err
	}
	sl := &e.ring.slots[i]
	off := uint64(i) * e.slotSize
	table := e.host[off : off+uint64(len(cs))*kernels.CopyDescSize]
	var maxLen uint64
	for j, c := range cs {
		kernels.PutCopyDesc(table[j*kernels.CopyDescSize:], c)
		maxLen = max(maxLen, c.Len)
	}
	devTable := e.devBuf + cuda.DevicePtr(off)
	sl.upload[0] = cuda.Copy{Dst: devTable, Src: cuda.DevicePtr(e.hostAddr() + uintptr(off)), Len: uint64(len(table))}
	if err := e.drv.MemcpyAsync(e.ctx, sl.upload[:], s); err != nil {
		// Nothing was enqueued that reads the slot.
		return fmt.Errorf("transfer: upload %d block descriptors: %w", len(cs), err)
	}
	grid, block := launchShape(len(cs), maxLen)
	binary.LittleEndian.PutUint64(sl.p0[:], uint64(devTable)) // kernels.CopyBlocksParams, without allocating
	binary.LittleEndian.PutUint32(sl.p1[:], uint32(len(cs)))
	sl.params = [2][]byte{sl.p0[:], sl.p1[:]}
	lerr := e.drv.LaunchKernel(e.ctx, e.fn, grid, block, 0, s, sl.params[:])
	// Fence the slot whatever happened: the upload reads it.
	if rerr := e.drv.EventRecord(e.ctx, sl.ev, s); rerr != nil {
		if serr := e.drv.StreamSynchronize(e.ctx, s); serr != nil {
			sl.broken = true
			e.log.Warn("transfer: descriptor slot retired: its last use cannot be fenced",
				"slot", i, "record_err", rerr, "sync_err", serr)
		}
		if lerr == nil {
			lerr = fmt.Errorf("transfer: fence descriptor slot: %w", rerr)
		}
	} else {
		sl.inflight = true
	}
	if lerr != nil {
		return fmt.Errorf("transfer: launch %s for %d blocks: %w", kernels.CopyBlocksEntry, len(cs), lerr)
	}
	e.stats.kernelLaunches.Add(1)
	e.stats.kernelBlocks.Add(uint64(len(cs)))
	return nil
}

// launchShape: grid.x CTAs stride over the n descriptors; when there are
// few, grid.y splits each block into ~64 KiB slices so that large blocks
// still spread over many SMs.
func launchShape(n int, maxLen uint64) (grid, block cuda.Dim3) {
	const slice = 64 << 10
	const wantCTAs = 2048
	x := uint32(min(n, 1<<20))
	y := uint32(1)
	if n < wantCTAs {
		y = uint32(min((maxLen+slice-1)/slice, uint64(wantCTAs/n), 65535))
		y = max(y, 1)
	}
	return cuda.Dim3{X: x, Y: y, Z: 1}, cuda.Dim3{X: threadsPerCTA, Y: 1, Z: 1}
}

// Close releases the engine's driver objects. In order:
//
//  1. new calls fail with ErrClosed; calls in progress are waited for;
//  2. launches still reading the descriptor ring are waited for;
//  3. the side stream (default-stream batch copies) is synchronized and
//     destroyed; ring and completion events are destroyed (handles not yet
//     waited for then report ErrClosed);
//  4. the device descriptor buffer is freed;
//  5. the host ring is unregistered, then unmapped;
//  6. the module is unloaded.
//
// Close is idempotent: a retry redoes only failed steps; it returns nil once
// every step has succeeded. When step 2 fails, steps 3-6 wait for a retry:
// a launch may still read the ring (and its slot event is what a retry waits
// on). It does not synchronize the callers' streams.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	e.life.Lock()
	e.closed = true
	e.life.Unlock()

	const drained, hostReg = "transfer: drain descriptor ring", "transfer: unregister host descriptor ring"
	return e.done.Run(
		teardown.Step{Name: drained, Do: e.drainRing},
		teardown.Step{Name: "transfer: destroy side stream", Needs: []string{drained}, Do: e.destroySide},
		teardown.Step{Name: "transfer: destroy events", Needs: []string{drained}, Do: e.destroyEvents},
		teardown.Step{Name: "transfer: free device descriptor ring", Needs: []string{drained}, Do: e.freeDevBuf},
		teardown.Step{Name: hostReg, Needs: []string{drained}, Do: e.unregisterHost},
		teardown.Step{Name: "transfer: unmap host descriptor ring", Needs: []string{hostReg}, Do: e.unmapHost},
		teardown.Step{Name: "transfer: unload module", Needs: []string{drained}, Do: e.unloadModule},
	)
}

// drainRing waits for the launches still reading the descriptor ring
// (Close step 2; closeMu held). A slot that drained is not waited for
// again.
func (e *Engine) drainRing() error {
	e.ring.Lock()
	defer e.ring.Unlock()
	var errs []error
	for i := range e.ring.slots {
		sl := &e.ring.slots[i]
		if !sl.inflight {
			continue
		}
		if err := e.drv.EventSynchronize(e.ctx, sl.ev); err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		sl.inflight = false
	}
	return errors.Join(errs...)
}

// destroySide synchronizes and destroys the side stream (Close step 3;
// closeMu held).
func (e *Engine) destroySide() error {
	e.side.Lock()
	defer e.side.Unlock()
	if e.side.s == 0 {
		return nil
	}
	if err := e.drv.StreamSynchronize(e.ctx, e.side.s); err != nil {
		return fmt.Errorf("synchronize: %w", err)
	}
	if err := e.drv.StreamDestroy(e.ctx, e.side.s); err != nil {
		return err
	}
	e.side.s = 0
	return nil
}

// destroyEvents destroys the ring and completion events (Close step 3;
// closeMu held). An event that was destroyed is forgotten, so a retry
// destroys only the rest.
func (e *Engine) destroyEvents() error {
	var errs []error
	e.ring.Lock()
	for i := range e.ring.slots {
		sl := &e.ring.slots[i]
		if sl.ev == 0 {
			continue
		}
		if err := e.drv.EventDestroy(e.ctx, sl.ev); err != nil {
			errs = append(errs, fmt.Errorf("ring event %d: %w", i, err))
			continue
		}
		sl.ev = 0
	}
	e.ring.Unlock()
	e.events.Lock()
	for ev := range e.events.all {
		if err := e.drv.EventDestroy(e.ctx, ev); err != nil {
			errs = append(errs, fmt.Errorf("completion event: %w", err))
			continue
		}
		delete(e.events.all, ev)
	}
	e.events.free = nil
	e.events.Unlock()
	return errors.Join(errs...)
}

// freeDevBuf frees the device descriptor ring (Close step 4; closeMu held).
func (e *Engine) freeDevBuf() error {
	if e.devBuf == 0 {
		return nil
	}
	if err := e.drv.MemFree(e.ctx, e.devBuf); err != nil {
		return err
	}
	e.devBuf = 0
	return nil
}

// unregisterHost unregisters the host descriptor ring from the driver
// (Close step 5; closeMu held).
func (e *Engine) unregisterHost() error {
	if !e.hostReg {
		return nil
	}
	if err := e.drv.MemHostUnregister(e.ctx, e.hostAddr()); err != nil {
		return err
	}
	e.hostReg = false
	return nil
}

// unmapHost unmaps the host descriptor ring (Close step 5; closeMu held).
func (e *Engine) unmapHost() error {
	if e.host == nil {
		return nil
	}
	if err := syscall.Munmap(e.host); err != nil {
		return err
	}
	e.host = nil
	return nil
}

// unloadModule unloads the copy kernel's module (Close step 6; closeMu
// held).
func (e *Engine) unloadModule() error {
	if e.mod == 0 {
		return nil
	}
	if err := e.drv.ModuleUnload(e.ctx, e.mod); err != nil {
		return err
	}
	e.mod = 0
	return nil
}
