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
//
// No submission waits for another stream's work while holding the ring (issue
// #13 item 5): a launch takes a free slot, or one whose last launch has
// completed (a non-blocking event query); failing that, it waits — outside
// the ring's lock — for its own stream's oldest launch, which its batch is
// ordered behind anyway; when every slot belongs to other streams' launches
// in flight, the ring grows (Options.MaxRingSlots); only a ring that cannot
// grow makes a launch wait for another stream's work.
// Larger blocks go to the copy engines with one cuMemcpyBatchAsync call, or
// one MemcpyAsync crossing (a cuMemcpyAsync per block inside the shim) when
// the driver lacks it. The crossover default, 128 KiB
// (DefaultCopyEngineMinBytes), is where the copy engine catches up with the
// SM kernel on H200 (docs/decisions.md item 6, docs/perf/datapath.md).
//
// Gather copies selected fixed-size rows of many objects (token indices of
// KV-cache objects, for sparse attention) into one contiguous destination
// with the row-gather kernel kvf_gather_rows (kernels/gather_rows.cu): the
// object table — and host indices, when given — go through the same ring
// slots as the copy kernel's descriptors, one upload and one launch per
// slot's worth of objects.
package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

// ErrInvalidGather is wrapped by Gather's errors for a malformed Gather
// (the message names the field and its value); nothing is then enqueued.
var ErrInvalidGather = errors.New("transfer: invalid gather")

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
	// RingSlots is the number of descriptor slots allocated by New, and
	// the number added each time the ring grows (default 8). A stream
	// with RingSlots launches in flight waits for its oldest before its
	// next launch.
	RingSlots int
	// MaxRingSlots bounds the ring's growth: when every slot holds a
	// launch of another stream still in flight, the ring grows by
	// RingSlots slots rather than make the launch wait for other streams'
	// copies, up to this many slots (default max(64, RingSlots); each slot
	// is SlotDescs*24 bytes of pinned host memory plus as much device
	// memory).
	MaxRingSlots int
	// SlotDescs is the number of block descriptors per slot; a batch with
	// more small blocks is split into several launches (default 16384).
	// A slot is SlotDescs*24 bytes rounded up to 16; a Gather whose object
	// table (16 bytes per object, plus PerObj*8 bytes of host indices) does
	// not fit one slot is split into several launches too.
	SlotDescs int
	// TimeBatches records a timing event before every SubmitAsync batch's
	// work as well as after it, so that Handle.GPUTime reports how long the
	// GPU spent from reaching the batch to completing it: with batches
	// queued back to back, their sum against the wall time says whether
	// the GPU or the submitting side bounds a pipeline. Off by default
	// (two timing events per batch).
	TimeBatches bool
	// UploadTables makes every launch copy its slot's table to device
	// memory first. By default a gather's kernel reads its table (object
	// list and host indices) straight from the pinned host ring when the
	// device can use host pointers of registered memory
	// (CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM): one
	// GPU operation and one driver call less per gather (docs/perf/gather.md).
	// The copy kernel always uploads (its large tables DMA faster).
	UploadTables bool
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
	RingWaits      uint64 // launches that waited (outside the ring's lock) for a slot's last launch
	RingGrows      uint64 // times the ring grew because other streams' launches held every slot
	RingSlots      uint64 // slots now in the ring
	GatherLaunches uint64 // kvf_gather_rows launches
	GatherRows     uint64 // output rows gathered by them (out-of-range ones included)
}

// Engine executes copy batches on one device's context.
//
// An Engine is safe for concurrent use: goroutines may submit on different
// streams at once. They share the descriptor ring only to pick a slot (a
// short lock, never held across a wait or an enqueue), and a launch never
// waits for another stream's work while the ring can grow. Close waits for
// calls in progress.
type Engine struct {
	drv   cuda.Driver
	ctx   cuda.Context
	dev   cuda.Device
	opts  Options
	batch bool // cuMemcpyBatchAsync available
	// hostTables: gather kernels read their slot's table in the pinned
	// host ring (registered device-mapped) instead of a device copy.
	hostTables bool
	log        *slog.Logger

	mod cuda.Module   // kvf_copy_blocks's
	fn  cuda.Function // kvf_copy_blocks

	gatherMod cuda.Module   // kvf_gather_rows's
	gatherFn  cuda.Function // kvf_gather_rows

	slotSize uint64 // bytes per slot

	// life: submissions hold it for reading; Close for writing.
	life   sync.RWMutex
	closed bool // guarded by life

	ring struct {
		sync.Mutex
		// guards everything below, and the state, stream and seq of every
		// slot
		chunks  []*chunk // allocations of slots, in order; Close frees them
		slots   []*slot  // every usable slot of every chunk
		next    int      // where the search for a free slot starts (the oldest launch, round robin)
		seq     uint64   // launches so far: orders slots by their last launch
		max     int      // the most slots the ring may have; lowered when growing fails
		growing bool     // a submitter is allocating a chunk (outside the lock)
		changed *sync.Cond
	}

	events struct {
		sync.Mutex
		// guards free and all
		free [2][]cuda.Event // by timed: created with timing disabled (0) or enabled (1)
		all  map[cuda.Event]struct{}
	}

	stats struct {
		kernelLaunches, kernelBlocks atomic.Uint64
		batchCalls, batchBlocks      atomic.Uint64
		eachCalls, eachBlocks        atomic.Uint64
		ringWaits, ringGrows         atomic.Uint64
		gatherLaunches, gatherRows   atomic.Uint64
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

// chunk is one allocation of descriptor slots: an mmap'ed host range
// registered with the driver, its device copy, and one event per slot.
// Each field is zeroed once released, so a retried Close releases only the
// rest.
type chunk struct {
	host    []byte         // outside the Go heap: the driver DMAs from it
	hostReg bool           // host is registered with the driver
	dev     cuda.DevicePtr // device copy of host
	evs     []cuda.Event   // the slots' fences; 0 once destroyed
}

// slotState is where a slot is in its cycle.
type slotState uint8

const (
	slotFree     slotState = iota // no launch reads it
	slotOwned                     // a submitter writes it and enqueues its launch, or waits for its last launch
	slotInflight                  // its last launch is fenced by ev and may still run
	slotBroken                    // its last use could not be fenced; never reused
)

// slot is one launch's descriptor table (kvf_copy_blocks descriptors, or
// kvf_gather_rows's object table and host indices). The submitter that owns
// it (slotOwned) uses the table and the launch arguments without the ring's
// lock; state, stream and seq are guarded by the ring's lock.
type slot struct {
	idx   int            // position in the ring, for messages
	table []byte         // host descriptors (a window of its chunk's host range)
	addr  uintptr        // address of table
	dev   cuda.DevicePtr // device copy of table; 16-byte aligned
	ev    cuda.Event     // recorded after the slot's last launch

	state  slotState
	stream cuda.Stream // stream of the last launch
	seq    uint64      // ring.seq of the last launch

	// upload and the parameters are reused per launch (no allocation per
	// batch); params[i] are windows of pbuf.
	upload [1]cuda.Copy
	pbuf   [kernels.GatherParamBytes]byte
	params [kernels.GatherParamCount][]byte
}

// New loads the copy and row-gather kernels into ctx (a context of device
// dev) and allocates the descriptor ring. With a driver that implements
// cuda.KernelEmulator (the simulator) it first registers the kernels' Go
// emulations, so the same upload-and-launch path runs there.
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
	if opts.MaxRingSlots <= 0 {
		opts.MaxRingSlots = max(64, opts.RingSlots)
	}
	if opts.MaxRingSlots < opts.RingSlots {
		return nil, fmt.Errorf("transfer: MaxRingSlots %d is below RingSlots %d", opts.MaxRingSlots, opts.RingSlots)
	}
	if opts.MaxRingSlots > 1024 || opts.SlotDescs > 1<<22 {
		return nil, fmt.Errorf("transfer: ring of %d slots x %d descriptors is too large", opts.MaxRingSlots, opts.SlotDescs)
	}
	e := &Engine{drv: drv, ctx: ctx, dev: dev, opts: opts, batch: drv.Capabilities().MemcpyBatchAsync, log: opts.Logger}
	if !opts.UploadTables {
		v, err := drv.DeviceAttribute(dev, cuda.AttrCanUseHostPointerForRegisteredMem)
		if err != nil {
			return nil, fmt.Errorf("transfer: query whether device %d can use host pointers of registered memory: %w", dev, err)
		}
		e.hostTables = v == 1
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if opts.Route == RouteCopyBatch && !e.batch {
		return nil, fmt.Errorf("transfer: route %v: driver %s lacks cuMemcpyBatchAsync: %w", opts.Route, drv.Name(),
			&cuda.Error{Op: "cuMemcpyBatchAsync", Result: cuda.ErrorNotSupported})
	}
	e.events.all = make(map[cuda.Event]struct{})
	e.ring.changed = sync.NewCond(&e.ring.Mutex)
	e.ring.max = opts.MaxRingSlots
	defer func() {
		if err != nil {
			if cerr := e.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("transfer: unwinding New: %w", cerr))
			}
		}
	}()

	if em, ok := drv.(cuda.KernelEmulator); ok {
		em.RegisterKernel(kernels.CopyBlocksEntry, kernels.EmulateCopyBlocks)
		em.RegisterKernel(kernels.GatherRowsEntry, kernels.EmulateGatherRows)
	}
	if e.mod, e.fn, err = loadKernel(drv, ctx, kernels.CopyBlocksPTX, kernels.CopyBlocksEntry); err != nil {
		return nil, err
	}
	if e.gatherMod, e.gatherFn, err = loadKernel(drv, ctx, kernels.GatherRowsPTX, kernels.GatherRowsEntry); err != nil {
		return nil, err
	}

	// 16-byte multiples keep every slot's device copy 16-byte aligned (the
	// chunk's allocation is): the gather kernel's object table and indices
	// start on 16-byte boundaries.
	e.slotSize = (uint64(opts.SlotDescs)*kernels.CopyDescSize + 15) &^ 15
	if err = e.grow(); err != nil {
		return nil, err
	}
	e.log.Debug("transfer engine ready", "device", int(dev), "driver", drv.Name(),
		"memcpy_batch_async", e.batch, "copy_engine_min_bytes", opts.CopyEngineMinBytes,
		"route", opts.Route.String(), "ring_slots", opts.RingSlots, "max_ring_slots", opts.MaxRingSlots, "slot_descs", opts.SlotDescs)
	return e, nil
}

// loadKernel loads a PTX image into ctx and resolves its entry. On failure
// after the load, the module is returned too, for Close to unload.
func loadKernel(drv cuda.Driver, ctx cuda.Context, ptx []byte, entry string) (cuda.Module, cuda.Function, error) {
	mod, err := drv.ModuleLoadData(ctx, ptx)
	if err != nil {
		return 0, 0, fmt.Errorf("transfer: load %s PTX: %w", entry, err)
	}
	fn, err := drv.ModuleGetFunction(ctx, mod, entry)
	if err != nil {
		return mod, 0, fmt.Errorf("transfer: get function %s: %w", entry, err)
	}
	return mod, fn, nil
}

// grow allocates a chunk of RingSlots slots and adds them to the ring. The
// caller does not hold the ring's lock (the allocation takes a while: the
// driver pins the host range); New calls it for the first chunk, a launch
// that found every slot busy with other streams for the next. A chunk
// that fails half-way is released at once; what cannot be released stays
// recorded for Close.
func (e *Engine) grow() (err error) {
	n := e.opts.RingSlots
	c := &chunk{}
	e.ring.Lock()
	e.ring.chunks = append(e.ring.chunks, c)
	e.ring.Unlock()
	defer func() {
		if err == nil {
			return
		}
		e.ring.Lock()
		defer e.ring.Unlock()
		if ferr := e.freeChunkLocked(c); ferr != nil {
			err = errors.Join(err, fmt.Errorf("transfer: release the half-built descriptor slots (left for Close): %w", ferr))
			return
		}
		e.ring.chunks = slices.DeleteFunc(e.ring.chunks, func(x *chunk) bool { return x == c })
	}()
	bytes := e.slotSize * uint64(n)
	page := uint64(syscall.Getpagesize())
	bytes = (bytes + page - 1) &^ (page - 1)
	// Outside the Go heap: the driver pins it and DMAs from it while the Go
	// runtime knows nothing about the copy.
	host, err := syscall.Mmap(-1, 0, int(bytes), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("transfer: mmap %d-byte descriptor ring: %w", bytes, err)
	}
	c.host = host
	addr := uintptr(unsafe.Pointer(&host[0]))
	flags := uint32(0)
	if e.hostTables {
		flags = cuda.HostRegisterDevMap // kernels read gather tables in place
	}
	if err := e.drv.MemHostRegister(e.ctx, addr, bytes, flags); err != nil {
		return fmt.Errorf("transfer: register %d-byte descriptor ring: %w", bytes, err)
	}
	c.hostReg = true
	if c.dev, err = e.drv.MemAlloc(e.ctx, bytes); err != nil {
		c.dev = 0
		return fmt.Errorf("transfer: allocate %d-byte device descriptor ring: %w", bytes, err)
	}
	slots := make([]*slot, n)
	for i := range slots {
		ev, err := e.drv.EventCreate(e.ctx, cuda.EventDisableTiming)
		if err != nil {
			return fmt.Errorf("transfer: create ring event %d: %w", i, err)
		}
		c.evs = append(c.evs, ev)
		off := uint64(i) * e.slotSize
		slots[i] = &slot{table: host[off : off+e.slotSize], addr: addr + uintptr(off), dev: c.dev + cuda.DevicePtr(off), ev: ev}
	}
	e.ring.Lock()
	for _, sl := range slots {
		sl.idx = len(e.ring.slots)
		e.ring.slots = append(e.ring.slots, sl)
	}
	e.ring.Unlock()
	return nil
}

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
		RingGrows:      e.stats.ringGrows.Load(),
		RingSlots:      uint64(e.ringSize()),
		GatherLaunches: e.stats.gatherLaunches.Load(),
		GatherRows:     e.stats.gatherRows.Load(),
	}
}

func (e *Engine) ringSize() int {
	e.ring.Lock()
	defer e.ring.Unlock()
	return len(e.ring.slots)
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
	return e.submitLocked(s, copies, 0)
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
	if err := e.submitLocked(s, copies, 0); err != nil {
		if !errors.Is(err, ErrInvalidCopy) {
			err = drain(err)
		}
		return err
	}
	ev, err := e.getEvent(false)
	if err != nil {
		return drain(err)
	}
	defer e.putEvent(ev, false)
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
	return e.SubmitAsyncWith(s, copies, SubmitOptions{})
}

// SubmitOptions adjust one submission.
type SubmitOptions struct {
	// CopyEngineMinBytes replaces Options.CopyEngineMinBytes for this
	// batch's routing (RouteAuto only); 0 keeps it. The crossover depends
	// on the direction: on H200 reads into HBM gain from the copy engine at
	// 64 KiB, writes from it only at 128 KiB (docs/perf/store.md).
	CopyEngineMinBytes uint64
	// Anchor, with Options.TimeBatches, is an event from Anchor: the
	// Handle's GPUSpan is then measured from it.
	Anchor cuda.Event
}

// Anchor records a timing event on s for SubmitOptions.Anchor (with
// Options.TimeBatches), from which batches' GPUSpans are measured. The
// caller gives it back with ReleaseAnchor once every Handle submitted with
// it has finished.
func (e *Engine) Anchor(s cuda.Stream) (cuda.Event, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return 0, ErrClosed
	}
	return e.recordEvent(s, true, "anchor")
}

// ReleaseAnchor returns an event from Anchor to the pool.
func (e *Engine) ReleaseAnchor(ev cuda.Event) { e.putEvent(ev, true) }

// SubmitAsyncWith is SubmitAsync with o applied to this batch.
func (e *Engine) SubmitAsyncWith(s cuda.Stream, copies []cuda.Copy, o SubmitOptions) (*Handle, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	var start cuda.Event
	if e.opts.TimeBatches {
		var err error
		if start, err = e.recordEvent(s, true, "start"); err != nil {
			return nil, err
		}
	}
	err := e.submitLocked(s, copies, o.CopyEngineMinBytes)
	var h *Handle
	if err == nil {
		h, err = e.handleLocked(s, start != 0)
	}
	if err != nil {
		if start != 0 {
			e.putEvent(start, true)
		}
		return nil, err
	}
	h.start = start
	if start != 0 {
		h.anchor = o.Anchor
	}
	return h, nil
}

// handleLocked records a completion event on s (timed: one that keeps
// time) and returns its Handle; the caller holds life.
func (e *Engine) handleLocked(s cuda.Stream, timed bool) (*Handle, error) {
	ev, err := e.recordEvent(s, timed, "completion")
	if err != nil {
		return nil, err
	}
	return &Handle{e: e, ev: ev, timed: timed}, nil
}

// recordEvent records a pooled event (timed: one that keeps time) on s.
func (e *Engine) recordEvent(s cuda.Stream, timed bool, what string) (cuda.Event, error) {
	ev, err := e.getEvent(timed)
	if err != nil {
		return 0, err
	}
	if err := e.drv.EventRecord(e.ctx, ev, s); err != nil {
		e.putEvent(ev, timed)
		return 0, fmt.Errorf("transfer: record %s event: %w", what, err)
	}
	return ev, nil
}

// Handle is the completion of one SubmitAsync or GatherAsync batch. Its
// methods are safe for concurrent use.
type Handle struct {
	e  *Engine
	mu sync.Mutex
	// guarded by mu:
	ev       cuda.Event
	timed    bool       // ev keeps time (Options.TimeBatches)
	start    cuda.Event // recorded before the batch's work; 0 unless timed
	anchor   cuda.Event // SubmitOptions.Anchor of a timed batch; 0 when none
	gpu      time.Duration
	span     [2]time.Duration // GPU start and end, from anchor
	finished bool
	err      error
}

// GPUTime is, with Options.TimeBatches, the time from the GPU reaching the
// batch (its stream's earlier work done) to the batch's completion, once
// Wait or Done reported it complete without error; 0 otherwise.
func (h *Handle) GPUTime() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gpu
}

// GPUSpan is, for a batch submitted with SubmitOptions.Anchor and
// Options.TimeBatches, when the GPU reached the batch and when it completed
// it, measured from the anchor, once Wait or Done reported it complete
// without error; zeros otherwise.
func (h *Handle) GPUSpan() (start, end time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.span[0], h.span[1]
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
	if h.start != 0 {
		// Timing is a measurement, not the batch's result: a failure to
		// read it leaves GPUTime 0.
		if err == nil {
			h.gpu = h.elapsed(h.start, h.ev)
			if h.anchor != 0 {
				h.span = [2]time.Duration{h.elapsed(h.anchor, h.start), h.elapsed(h.anchor, h.ev)}
			}
		}
		h.e.putEvent(h.start, true)
		h.start = 0
	}
	h.e.putEvent(h.ev, h.timed)
}

// elapsed is the time between two completed timing events (0 when the
// driver cannot tell).
func (h *Handle) elapsed(from, to cuda.Event) time.Duration {
	ms, err := h.e.drv.EventElapsedTime(h.e.ctx, from, to)
	if err != nil {
		return 0
	}
	return time.Duration(float64(ms) * float64(time.Millisecond))
}

// getEvent returns a pooled event — one that keeps time when timed —
// creating one if none is free.
func (e *Engine) getEvent(timed bool) (cuda.Event, error) {
	k := b2i(timed)
	e.events.Lock()
	if n := len(e.events.free[k]); n > 0 {
		ev := e.events.free[k][n-1]
		e.events.free[k] = e.events.free[k][:n-1]
		e.events.Unlock()
		return ev, nil
	}
	e.events.Unlock()
	flags := cuda.EventDisableTiming
	if timed {
		flags = cuda.EventDefault
	}
	ev, err := e.drv.EventCreate(e.ctx, flags)
	if err != nil {
		return 0, fmt.Errorf("transfer: create completion event: %w", err)
	}
	e.events.Lock()
	e.events.all[ev] = struct{}{}
	e.events.Unlock()
	return ev, nil
}

func (e *Engine) putEvent(ev cuda.Event, timed bool) {
	k := b2i(timed)
	e.events.Lock()
	e.events.free[k] = append(e.events.free[k], ev)
	e.events.Unlock()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// submitLocked validates, routes (blocks of at least ceMin bytes to the
// copy engine; 0 means Options.CopyEngineMinBytes) and enqueues; the caller
// holds life.
func (e *Engine) submitLocked(s cuda.Stream, copies []cuda.Copy, ceMin uint64) error {
	if ceMin == 0 {
		ceMin = e.opts.CopyEngineMinBytes
	}
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
			if c.Len > 0 && c.Len < ceMin {
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
				if c.Len < ceMin {
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
	fork, err := e.getEvent(false)
	if err != nil {
		return err
	}
	defer e.putEvent(fork, false)
	join, err := e.getEvent(false)
	if err != nil {
		return err
	}
	defer e.putEvent(join, false)
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
	for len(cs) > 0 {
		n := min(len(cs), e.opts.SlotDescs)
		sl, err := e.acquireSlot(s)
		if err != nil {
			return err
		}
		if err := e.kernelLaunch(sl, s, cs[:n]); err != nil {
			return err
		}
		cs = cs[n:]
	}
	return nil
}

// acquireSlot returns a slot for a launch on s, owned by the caller until
// launch gives it back. In order of preference: a free slot, or one whose
// last launch completed (non-blocking queries, oldest launch first); the
// oldest slot of s's own launches, waited for (s's next launch runs after
// it anyway); a new chunk of slots, when every slot holds other streams'
// launches; at the size limit, the oldest slot of any stream, waited for.
// Every wait is outside the ring's lock.
func (e *Engine) acquireSlot(s cuda.Stream) (*slot, error) {
	e.ring.Lock()
	for {
		sl, err := e.freeSlotLocked()
		if err != nil || sl != nil {
			e.ring.Unlock()
			return sl, err
		}
		if own := e.oldestLocked(s, true); own != nil {
			return e.waitSlotUnlock(own)
		}
		if e.ring.growing {
			e.ring.changed.Wait()
			continue
		}
		if len(e.ring.slots) < e.ring.max {
			e.ring.growing = true
			e.ring.Unlock()
			err := e.grow()
			e.ring.Lock()
			e.ring.growing = false
			e.ring.changed.Broadcast()
			if err != nil {
				// Waiting for other streams beats failing the copy; stop
				// trying to grow (the size limit is now the ring's size).
				e.ring.max = len(e.ring.slots)
				e.log.Warn("transfer: descriptor ring cannot grow; launches may wait for other streams' copies",
					"slots", len(e.ring.slots), "err", err)
			} else {
				e.stats.ringGrows.Add(1)
			}
			continue
		}
		if old := e.oldestLocked(s, false); old != nil {
			return e.waitSlotUnlock(old)
		}
		if !e.anyOwnedLocked() {
			e.ring.Unlock()
			return nil, fmt.Errorf("transfer: every descriptor slot is unusable after earlier driver failures")
		}
		// Every slot is owned by a submitter that is enqueueing or waiting
		// for its own slot: it gives one back soon.
		e.ring.changed.Wait()
	}
}

// freeSlotLocked takes a free slot or one whose last launch completed,
// searching from the oldest launch, and marks it owned; nil when there is
// none. A failed event query is returned (the slot stays in flight).
func (e *Engine) freeSlotLocked() (*slot, error) {
	n := len(e.ring.slots)
	for k := range n {
		i := (e.ring.next + k) % n
		sl := e.ring.slots[i]
		switch sl.state {
		case slotFree:
		case slotInflight:
			done, err := e.drv.EventQuery(e.ctx, sl.ev)
			if err != nil {
				return nil, fmt.Errorf("transfer: query descriptor slot %d: %w", sl.idx, err)
			}
			if !done {
				continue
			}
		default:
			continue
		}
		sl.state = slotOwned
		e.ring.next = (i + 1) % n
		return sl, nil
	}
	return nil, nil
}

// oldestLocked returns the in-flight slot with the oldest launch — on
// stream s only when own — or nil.
func (e *Engine) oldestLocked(s cuda.Stream, own bool) *slot {
	var best *slot
	for _, sl := range e.ring.slots {
		if sl.state != slotInflight || (own && sl.stream != s) {
			continue
		}
		if best == nil || sl.seq < best.seq {
			best = sl
		}
	}
	return best
}

func (e *Engine) anyOwnedLocked() bool {
	for _, sl := range e.ring.slots {
		if sl.state == slotOwned {
			return true
		}
	}
	return false
}

// waitSlotUnlock takes the in-flight slot sl, releases the ring's lock
// (held by the caller) and waits for sl's last launch. On failure the slot
// goes back in flight, to be queried or waited for again.
func (e *Engine) waitSlotUnlock(sl *slot) (*slot, error) {
	sl.state = slotOwned
	e.ring.Unlock()
	e.stats.ringWaits.Add(1)
	err := e.drv.EventSynchronize(e.ctx, sl.ev)
	if err == nil {
		return sl, nil
	}
	e.ring.Lock()
	sl.state = slotInflight
	e.ring.changed.Broadcast()
	e.ring.Unlock()
	return nil, fmt.Errorf("transfer: wait for descriptor slot %d: %w", sl.idx, err)
}

// kernelLaunch writes cs into the caller's slot sl and launches the copy
// kernel on it (see launch).
func (e *Engine) kernelLaunch(sl *slot, s cuda.Stream, cs []cuda.Copy) error {
	table := sl.table[:uint64(len(cs))*kernels.CopyDescSize]
	var maxLen uint64
	for j, c := range cs {
		kernels.PutCopyDesc(table[j*kernels.CopyDescSize:], c)
		maxLen = max(maxLen, c.Len)
	}
	grid, block := launchShape(len(cs), maxLen)
	// kernels.CopyBlocksParams, without allocating.
	sl.params[0], sl.params[1] = sl.pbuf[0:8:8], sl.pbuf[8:12:12]
	binary.LittleEndian.PutUint64(sl.params[0], uint64(sl.dev))
	binary.LittleEndian.PutUint32(sl.params[1], uint32(len(cs)))
	err := e.launch(sl, s, launchSpec{
		fn: e.fn, entry: kernels.CopyBlocksEntry, items: len(cs), unit: "blocks",
		table: uint64(len(table)), grid: grid, block: block, params: sl.params[:2],
	})
	if err != nil {
		return err
	}
	e.stats.kernelLaunches.Add(1)
	e.stats.kernelBlocks.Add(uint64(len(cs)))
	return nil
}

// launchSpec is one kernel launch over a ring slot.
type launchSpec struct {
	fn          cuda.Function
	entry       string // the kernel's name, for messages
	items       int    // what the launch copies, for messages ...
	unit        string // ... and its unit ("blocks", "rows")
	table       uint64 // bytes of the slot's table the kernel reads
	direct      bool   // the kernel reads the table in host memory: no upload
	grid, block cuda.Dim3
	params      [][]byte
}

// launch enqueues on s the upload of the first l.table bytes of the
// caller's slot sl (already written) to its device copy and the kernel
// launch l, fences the slot and gives it back to the ring: in flight when
// fenced; free when nothing that reads it was enqueued or s drained; else
// retired. Every kernel that reads a slot launches through here.
func (e *Engine) launch(sl *slot, s cuda.Stream, l launchSpec) error {
	state := slotFree
	defer func() {
		e.ring.Lock()
		sl.state = state
		if state == slotInflight {
			e.ring.seq++
			sl.stream, sl.seq = s, e.ring.seq
		}
		e.ring.changed.Broadcast()
		e.ring.Unlock()
	}()
	if !l.direct {
		sl.upload[0] = cuda.Copy{Dst: sl.dev, Src: cuda.DevicePtr(sl.addr), Len: l.table}
		if err := e.drv.MemcpyAsync(e.ctx, sl.upload[:], s); err != nil {
			// Nothing was enqueued that reads the slot.
			return fmt.Errorf("transfer: upload the %d-byte table of %s for %d %s: %w", l.table, l.entry, l.items, l.unit, err)
		}
	}
	lerr := e.drv.LaunchKernel(e.ctx, l.fn, l.grid, l.block, 0, s, l.params)
	// Fence the slot whatever happened: the upload or the kernel reads it
	// (a failed launch may still have been enqueued).
	if rerr := e.drv.EventRecord(e.ctx, sl.ev, s); rerr != nil {
		if serr := e.drv.StreamSynchronize(e.ctx, s); serr != nil {
			state = slotBroken
			e.log.Warn("transfer: descriptor slot retired: its last use cannot be fenced",
				"slot", sl.idx, "record_err", rerr, "sync_err", serr)
		}
		if lerr == nil {
			lerr = fmt.Errorf("transfer: fence descriptor slot: %w", rerr)
		}
	} else {
		state = slotInflight
	}
	if lerr != nil {
		return fmt.Errorf("transfer: launch %s for %d %s: %w", l.entry, l.items, l.unit, lerr)
	}
	return nil
}

// launchShape: grid.x CTAs stride over the n descriptors; when there are
// fewer than wantCTAs, grid.y splits each block into slices of at least
// minKernelSlice bytes (of the largest block), so that a launch of few
// blocks still spreads over enough CTAs to keep the link busy. The put
// pipeline's first chunks are such launches (64, 128, 256 blocks): with
// 64 KiB slices, a chunk of 64 blocks of 64 KiB ran on 64 CTAs at ~32 GB/s
// on H200, where many CTAs reach the SM path's 52.5 (docs/perf/datapath.md).
func launchShape(n int, maxLen uint64) (grid, block cuda.Dim3) {
	const wantCTAs = 2048
	x := uint32(min(n, 1<<20))
	y := uint32(1)
	if n < wantCTAs {
		y = uint32(min(maxLen/minKernelSlice, uint64((wantCTAs+n-1)/n), 65535))
		y = max(y, 1)
	}
	return cuda.Dim3{X: x, Y: y, Z: 1}, cuda.Dim3{X: threadsPerCTA, Y: 1, Z: 1}
}

// minKernelSlice is the smallest slice of a block one CTA of the copy
// kernel is given: one iteration of the kernel's unrolled main loop
// (threadsPerCTA threads × 4 loads in flight × 16 bytes); a smaller slice
// would run in its one-load-at-a-time tail loop. Which slice pays best for
// small launches is to be measured (docs/perf/datapath.md, session 19).
const minKernelSlice = 16 << 10

// Close releases the engine's driver objects. In order:
//
//  1. new calls fail with ErrClosed; calls in progress are waited for;
//  2. launches still reading the descriptor ring are waited for;
//  3. the side stream (default-stream batch copies) is synchronized and
//     destroyed; ring and completion events are destroyed (handles not yet
//     waited for then report ErrClosed);
//  4. the device descriptor buffer is freed;
//  5. the host ring is unregistered, then unmapped;
//  6. the copy kernel's module is unloaded;
//  7. the gather kernel's module is unloaded.
//
// Close is idempotent: a retry redoes only failed steps; it returns nil once
// every step has succeeded. When step 2 fails, steps 3-7 wait for a retry:
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
		teardown.Step{Name: "transfer: unload module", Needs: []string{drained}, Do: e.unloadModule(&e.mod)},
		teardown.Step{Name: "transfer: unload gather module", Needs: []string{drained}, Do: e.unloadModule(&e.gatherMod)},
	)
}

// drainRing waits for the launches still reading the descriptor ring
// (Close step 2; closeMu held). A slot that drained is not waited for
// again.
func (e *Engine) drainRing() error {
	e.ring.Lock()
	defer e.ring.Unlock()
	var errs []error
	for _, sl := range e.ring.slots {
		if sl.state != slotInflight {
			continue
		}
		if err := e.drv.EventSynchronize(e.ctx, sl.ev); err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", sl.idx, err))
			continue
		}
		sl.state = slotFree
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
	for _, c := range e.ring.chunks {
		errs = append(errs, e.destroyChunkEventsLocked(c))
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
	e.events.free = [2][]cuda.Event{}
	e.events.Unlock()
	return errors.Join(errs...)
}

func (e *Engine) destroyChunkEventsLocked(c *chunk) error {
	var errs []error
	for i, ev := range c.evs {
		if ev == 0 {
			continue
		}
		if err := e.drv.EventDestroy(e.ctx, ev); err != nil {
			errs = append(errs, fmt.Errorf("ring event %d: %w", i, err))
			continue
		}
		c.evs[i] = 0
	}
	return errors.Join(errs...)
}

// freeDevBuf frees the device descriptor rings (Close step 4; closeMu held).
func (e *Engine) freeDevBuf() error {
	e.ring.Lock()
	defer e.ring.Unlock()
	var errs []error
	for _, c := range e.ring.chunks {
		errs = append(errs, e.freeChunkDevLocked(c))
	}
	return errors.Join(errs...)
}

func (e *Engine) freeChunkDevLocked(c *chunk) error {
	if c.dev == 0 {
		return nil
	}
	if err := e.drv.MemFree(e.ctx, c.dev); err != nil {
		return err
	}
	c.dev = 0
	return nil
}

// unregisterHost unregisters the host descriptor rings from the driver
// (Close step 5; closeMu held).
func (e *Engine) unregisterHost() error {
	e.ring.Lock()
	defer e.ring.Unlock()
	var errs []error
	for _, c := range e.ring.chunks {
		errs = append(errs, e.unregisterChunkLocked(c))
	}
	return errors.Join(errs...)
}

func (e *Engine) unregisterChunkLocked(c *chunk) error {
	if !c.hostReg {
		return nil
	}
	if err := e.drv.MemHostUnregister(e.ctx, uintptr(unsafe.Pointer(&c.host[0]))); err != nil {
		return err
	}
	c.hostReg = false
	return nil
}

// unmapHost unmaps the host descriptor rings (Close step 5; closeMu held).
func (e *Engine) unmapHost() error {
	e.ring.Lock()
	defer e.ring.Unlock()
	var errs []error
	for _, c := range e.ring.chunks {
		errs = append(errs, unmapChunk(c))
	}
	return errors.Join(errs...)
}

func unmapChunk(c *chunk) error {
	if c.host == nil {
		return nil
	}
	if c.hostReg {
		return errors.New("host descriptor ring is still registered")
	}
	if err := syscall.Munmap(c.host); err != nil {
		return err
	}
	c.host = nil
	return nil
}

// freeChunkLocked releases a chunk none of whose slots was ever used (a
// growth that failed half-way), in Close's order.
func (e *Engine) freeChunkLocked(c *chunk) error {
	if err := errors.Join(e.destroyChunkEventsLocked(c), e.freeChunkDevLocked(c)); err != nil {
		return err
	}
	if err := e.unregisterChunkLocked(c); err != nil {
		return err
	}
	return unmapChunk(c)
}

// unloadModule returns the step that unloads *m, a kernel's module, and
// forgets it (Close steps 6 and 7; closeMu held).
func (e *Engine) unloadModule(m *cuda.Module) func() error {
	return func() error {
		if *m == 0 {
			return nil
		}
		if err := e.drv.ModuleUnload(e.ctx, *m); err != nil {
			return err
		}
		*m = 0
		return nil
	}
}
