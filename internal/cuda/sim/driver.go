// Package sim is a faithful CUDA driver simulator: a cuda.Driver backed by
// real process memory, with no cgo and no GPU.
//
// Every VMM allocation (cuMemCreate, DEVICE or HOST_NUMA) is a memfd of the
// allocation's size; cuMemAddressReserve is a real PROT_NONE reservation of
// the process's address space; cuMemMap maps the memfd over it with
// MAP_FIXED|MAP_SHARED. Device pointers are therefore real addresses, copies
// are real memmoves, and POSIX-fd exports are real fds that another process
// imports and maps — multi-process tests run byte-exact on a CPU. FABRIC
// handles resolve through a registry directory shared by the processes of
// one host.
//
// The simulator is strict where the real driver is: cuMemMap needs aligned,
// reserved, unmapped ranges; copies and kernel accesses must stay inside
// mapped ranges whose access was granted to the calling context's device
// (or inside cuMemAlloc buffers or registered host memory), so a copy
// through an unmapped or stale mapping fails instead of corrupting memory.
// It injects faults (Fault, Fail, FailAll, …), logs calls (Calls), and
// counts live objects (LiveObjects) so tests can assert zero leaks.
//
// Execution model: copies and kernels run synchronously, in enqueue order,
// inside the enqueuing call; events complete as soon as they are recorded
// and EventElapsedTime measures wall-clock time between the records. A test
// can hold a stream (HoldStream): its work then waits, as behind a long GPU
// copy, until the hold is released (hold.go).
package sim

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

var (
	_ cuda.Driver          = (*Driver)(nil)
	_ cuda.ObjectCounter   = (*Driver)(nil)
	_ cuda.KernelEmulator  = (*Driver)(nil)
	_ cuda.DeviceMemory    = (*Driver)(nil)
	_ cuda.AllocationSizer = (*Driver)(nil)
)

// driverSeq numbers the Drivers of a process; its value becomes part of
// every handle a Driver issues, so handles from different Drivers never
// collide.
var driverSeq atomic.Uint64

// Handle kinds occupy the top byte of handle values.
const (
	kindContext  = 0xC1
	kindAlloc    = 0xA1
	kindStream   = 0x51
	kindEvent    = 0xE1
	kindModule   = 0x3D
	kindFunction = 0xF1
)

// Driver is the simulated CUDA driver. All methods are safe for concurrent
// use. Copies and kernel launches hold the driver's address-space lock for
// reading while they touch memory, so an unmap or release cannot race them;
// a KernelFunc therefore must not call back into the Driver.
type Driver struct {
	cfg    Config // defaults applied; immutable
	tag    uint64 // bits 40..55 of every handle
	seq    atomic.Uint64
	closed atomic.Bool
	inj    injector
	sched  sched // held streams and their deferred work (hold.go)

	mu struct {
		// RWMutex guards everything below. Memory accesses (copies,
		// kernels) hold it for reading; everything that changes state
		// holds it for writing.
		sync.RWMutex
		ctxs      []ctxState // per device
		ctxDev    map[cuda.Context]cuda.Device
		allocs    map[cuda.AllocHandle]*alloc
		res       map[uint64]*reservation // by base address
		regions   []region                // sorted, non-overlapping accessible ranges
		devmem    map[cuda.DevicePtr]*devmem
		hostRegs  map[uintptr]*hostReg
		streams   map[cuda.Stream]*stream
		events    map[cuda.Event]*event
		modules   map[cuda.Module]*module
		funcs     map[cuda.Function]*function
		kernels   map[string]cuda.KernelFunc
		fdExports []fdExport
		fabric    map[string]*alloc // registered fabric exports by id
		used      map[cuda.Location]uint64
		// orphans counts context-scoped objects (streams, events,
		// modules, devmem) that were destroyed with their context
		// because the caller released the context without destroying
		// them: the real driver frees them too, but the caller leaked
		// them, so they stay counted.
		orphans cuda.Objects
	}
}

type ctxState struct {
	handle cuda.Context
	refs   int
}

// New returns a simulated driver for cfg.
func New(cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	d := &Driver{cfg: cfg, tag: (driverSeq.Add(1) & 0xffff) << 40}
	d.inj.init()
	d.sched.init()
	d.mu.ctxs = make([]ctxState, cfg.GPUs)
	d.mu.ctxDev = make(map[cuda.Context]cuda.Device)
	d.mu.allocs = make(map[cuda.AllocHandle]*alloc)
	d.mu.res = make(map[uint64]*reservation)
	d.mu.devmem = make(map[cuda.DevicePtr]*devmem)
	d.mu.hostRegs = make(map[uintptr]*hostReg)
	d.mu.streams = make(map[cuda.Stream]*stream)
	d.mu.events = make(map[cuda.Event]*event)
	d.mu.modules = make(map[cuda.Module]*module)
	d.mu.funcs = make(map[cuda.Function]*function)
	d.mu.kernels = make(map[string]cuda.KernelFunc)
	d.mu.fabric = make(map[string]*alloc)
	d.mu.used = make(map[cuda.Location]uint64)
	d.mu.orphans = make(cuda.Objects)
	return d, nil
}

// Config returns the driver's configuration with defaults applied.
func (d *Driver) Config() Config { return d.cfg }

// newHandle returns a fresh handle value of a kind.
func (d *Driver) newHandle(kind uint64) uint64 {
	return kind<<56 | d.tag | d.seq.Add(1)
}

// opNames maps Driver methods to the driver entry points they stand for;
// they become the Op of returned *cuda.Error values.
var opNames = map[string]string{
	"Close":                       "sim.Close",
	"DriverVersion":               "cuDriverGetVersion",
	"DeviceCount":                 "cuDeviceGetCount",
	"DeviceName":                  "cuDeviceGetName",
	"DeviceAttribute":             "cuDeviceGetAttribute",
	"DeviceTotalMem":              "cuDeviceTotalMem",
	"CanAccessPeer":               "cuDeviceCanAccessPeer",
	"PrimaryCtxRetain":            "cuDevicePrimaryCtxRetain",
	"PrimaryCtxRelease":           "cuDevicePrimaryCtxRelease",
	"MemGetAllocationGranularity": "cuMemGetAllocationGranularity",
	"MemCreate":                   "cuMemCreate",
	"MemRelease":                  "cuMemRelease",
	"MemAddressReserve":           "cuMemAddressReserve",
	"MemAddressFree":              "cuMemAddressFree",
	"MemMap":                      "cuMemMap",
	"MemUnmap":                    "cuMemUnmap",
	"MemSetAccess":                "cuMemSetAccess",
	"MemExportToFD":               "cuMemExportToShareableHandle",
	"MemExportToFabric":           "cuMemExportToShareableHandle",
	"MemImportFromFD":             "cuMemImportFromShareableHandle",
	"MemImportFromFabric":         "cuMemImportFromShareableHandle",
	"MemAlloc":                    "cuMemAlloc",
	"MemFree":                     "cuMemFree",
	"MemHostRegister":             "cuMemHostRegister",
	"MemHostUnregister":           "cuMemHostUnregister",
	"PointerMemoryTypes":          "cuPointerGetAttribute",
	"PointerRanges":               "cuPointerGetAttribute",
	"MemcpyHtoD":                  "cuMemcpyHtoD",
	"MemcpyDtoH":                  "cuMemcpyDtoH",
	"StreamCreate":                "cuStreamCreate",
	"StreamDestroy":               "cuStreamDestroy",
	"StreamSynchronize":           "cuStreamSynchronize",
	"StreamWaitEvent":             "cuStreamWaitEvent",
	"EventCreate":                 "cuEventCreate",
	"EventDestroy":                "cuEventDestroy",
	"EventRecord":                 "cuEventRecord",
	"EventSynchronize":            "cuEventSynchronize",
	"EventQuery":                  "cuEventQuery",
	"EventElapsedTime":            "cuEventElapsedTime",
	"MemcpyAsync":                 "cuMemcpyAsync",
	"MemcpyBatchAsync":            "cuMemcpyBatchAsync",
	"ModuleLoadData":              "cuModuleLoadData",
	"ModuleUnload":                "cuModuleUnload",
	"ModuleGetFunction":           "cuModuleGetFunction",
	"LaunchKernel":                "cuLaunchKernel",
}

// closedError is returned by every method after Close: it matches both
// cuda.ErrClosed and cuda.ErrorDeinitialized.
type closedError struct{ e *cuda.Error }

func (c *closedError) Error() string   { return c.e.Error() + ": " + cuda.ErrClosed.Error() }
func (c *closedError) Unwrap() []error { return []error{cuda.ErrClosed, c.e} }

// call runs one Driver method: it counts and logs the call, applies
// injected faults (before body, so a failed call changes nothing), and
// turns body's result into an error.
func (d *Driver) call(method string, args func() string, body func() cuda.Result) error {
	closed := d.closed.Load()
	ord, code := d.inj.enter(method, closed)
	injected := code != cuda.Success
	if closed {
		code = cuda.ErrorDeinitialized
	} else if !injected {
		code = body()
	}
	d.inj.record(Call{Method: method, Ordinal: ord, Args: args(), Result: code, Injected: injected})
	if code == cuda.Success {
		return nil
	}
	e := &cuda.Error{Op: opNames[method], Result: code}
	if closed {
		return &closedError{e}
	}
	return e
}

func noArgs() string { return "" }

// Name reports "sim".
func (d *Driver) Name() string { return "sim" }

// Capabilities reports cuMemcpyBatchAsync unless the Config removed it or
// its DriverVersion predates 12.8.
func (d *Driver) Capabilities() cuda.Capabilities {
	return cuda.Capabilities{MemcpyBatchAsync: d.batchSupported()}
}

func (d *Driver) batchSupported() bool {
	return !d.cfg.NoMemcpyBatch && d.cfg.DriverVersion >= memcpyBatchMinVersion
}

// Close makes every later call fail with cuda.ErrClosed (and
// CUDA_ERROR_DEINITIALIZED) and withdraws this driver's fabric exports from
// the registry. It frees none of the caller's objects: they stay counted by
// LiveObjects. Close is idempotent.
func (d *Driver) Close() error {
	if d.closed.Load() {
		return nil
	}
	return d.call("Close", noArgs, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.closed.Swap(true) {
			return cuda.Success
		}
		for id := range d.mu.fabric {
			d.unpublishFabricLocked(id)
		}
		return cuda.Success
	})
}

// DriverVersion reports Config.DriverVersion.
func (d *Driver) DriverVersion() (int, error) {
	v := 0
	err := d.call("DriverVersion", noArgs, func() cuda.Result {
		v = d.cfg.DriverVersion
		return cuda.Success
	})
	return v, err
}

// DeviceCount reports Config.GPUs.
func (d *Driver) DeviceCount() (int, error) {
	n := 0
	err := d.call("DeviceCount", noArgs, func() cuda.Result {
		n = d.cfg.GPUs
		return cuda.Success
	})
	return n, err
}

func (d *Driver) validDevice(dev cuda.Device) bool {
	return dev >= 0 && int(dev) < d.cfg.GPUs
}

// DeviceName is "kvfabric-sim GPU <dev>".
func (d *Driver) DeviceName(dev cuda.Device) (string, error) {
	var name string
	err := d.call("DeviceName", func() string { return fmt.Sprintf("dev=%d", dev) }, func() cuda.Result {
		if !d.validDevice(dev) {
			return cuda.ErrorInvalidDevice
		}
		name = fmt.Sprintf("kvfabric-sim GPU %d", dev)
		return cuda.Success
	})
	return name, err
}

// DefaultDeviceMemory is what DeviceTotalMem reports for a device without
// a DeviceCapacity: 140 GiB, about an H200's 143771 MiB.
const DefaultDeviceMemory = 140 << 30

// DeviceTotalMem implements cuda.DeviceMemory: the device's DeviceCapacity,
// or DefaultDeviceMemory when it has none.
func (d *Driver) DeviceTotalMem(dev cuda.Device) (uint64, error) {
	var n uint64
	err := d.call("DeviceTotalMem", func() string { return fmt.Sprintf("dev=%d", dev) }, func() cuda.Result {
		if !d.validDevice(dev) {
			return cuda.ErrorInvalidDevice
		}
		n = d.cfg.DeviceCapacity[int(dev)]
		if n == 0 {
			n = DefaultDeviceMemory
		}
		return cuda.Success
	})
	return n, err
}

// Attribute values the simulator answers beyond the ones kvfabric declares.
const (
	attrMaxThreadsPerBlock       = 1
	attrMaxSharedMemoryPerBlock  = 8
	attrMultiprocessorCount      = 16
	attrUnifiedAddressing        = 41
	attrComputeCapabilityMajor   = 75
	attrComputeCapabilityMinor   = 76
	attrMax                      = 160 // beyond CU_DEVICE_ATTRIBUTE_MAX of CUDA 13.0
	simMaxThreadsPerBlock        = 1024
	simMaxSharedMemoryPerBlock   = 48 << 10
	simMultiprocessorCount       = 132
	simComputeCapabilityMajor    = 9
	simComputeCapabilityMinor    = 0
	cuDeviceNUMAConfigNone       = 0
	cuDeviceNUMAIDNone           = -1
	hostRegisterIOMemory         = 0x4
	hostRegisterReadOnly         = 0x8
	hostRegisterValidFlags       = cuda.HostRegisterPortable | cuda.HostRegisterDevMap | hostRegisterIOMemory | hostRegisterReadOnly
	defaultMaxDynamicSharedBytes = simMaxSharedMemoryPerBlock
)

// DeviceAttribute answers like an H200 that supports VMM, POSIX fds and
// (as an attribute) FABRIC, with HOST_NUMA_ID from the Config and no
// multi-node IPC. Attributes the simulator does not model read as 0;
// values outside the attribute enum fail with CUDA_ERROR_INVALID_VALUE.
func (d *Driver) DeviceAttribute(dev cuda.Device, attr cuda.Attribute) (int, error) {
	v := 0
	err := d.call("DeviceAttribute", func() string { return fmt.Sprintf("dev=%d attr=%d", dev, attr) }, func() cuda.Result {
		if !d.validDevice(dev) {
			return cuda.ErrorInvalidDevice
		}
		switch attr {
		case cuda.AttrVirtualMemoryManagementSupported,
			cuda.AttrHandleTypePosixFDSupported,
			cuda.AttrHandleTypeFabricSupported, // supported even when not permitted, as on H200
			cuda.AttrHostNUMAVirtualMemoryManagementSupport,
			cuda.AttrCanUseHostPointerForRegisteredMem, // kernels read registered host memory (accessibleLocked)
			attrUnifiedAddressing:
			v = 1
		case cuda.AttrHostNUMAMultinodeIPCSupported:
			v = 0
		case cuda.AttrHostNUMAID:
			v = d.cfg.HostNUMA[dev]
		case cuda.AttrNUMAConfig:
			v = cuDeviceNUMAConfigNone
		case cuda.AttrNUMAID:
			v = cuDeviceNUMAIDNone
		case attrMaxThreadsPerBlock:
			v = simMaxThreadsPerBlock
		case attrMaxSharedMemoryPerBlock:
			v = simMaxSharedMemoryPerBlock
		case attrMultiprocessorCount:
			v = simMultiprocessorCount
		case attrComputeCapabilityMajor:
			v = simComputeCapabilityMajor
		case attrComputeCapabilityMinor:
			v = simComputeCapabilityMinor
		default:
			if attr <= 0 || attr >= attrMax {
				return cuda.ErrorInvalidValue
			}
		}
		return cuda.Success
	})
	return v, err
}

// CanAccessPeer is true for two different valid devices (and, like the
// real driver, false for a device and itself).
func (d *Driver) CanAccessPeer(dev, peer cuda.Device) (bool, error) {
	ok := false
	err := d.call("CanAccessPeer", func() string { return fmt.Sprintf("dev=%d peer=%d", dev, peer) }, func() cuda.Result {
		if !d.validDevice(dev) || !d.validDevice(peer) {
			return cuda.ErrorInvalidDevice
		}
		ok = dev != peer
		return cuda.Success
	})
	return ok, err
}

// PrimaryCtxRetain retains dev's primary context, creating it on the first
// retain. The same Context is returned until the last release; a context
// created after that is a new Context value.
func (d *Driver) PrimaryCtxRetain(dev cuda.Device) (cuda.Context, error) {
	var ctx cuda.Context
	err := d.call("PrimaryCtxRetain", func() string { return fmt.Sprintf("dev=%d", dev) }, func() cuda.Result {
		if !d.validDevice(dev) {
			return cuda.ErrorInvalidDevice
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		c := &d.mu.ctxs[dev]
		if c.refs == 0 {
			c.handle = cuda.Context(d.newHandle(kindContext))
			d.mu.ctxDev[c.handle] = dev
		}
		c.refs++
		ctx = c.handle
		return cuda.Success
	})
	return ctx, err
}

// PrimaryCtxRelease releases dev's primary context. The last release
// destroys the context and, as in CUDA, the streams, events, modules and
// cuMemAlloc buffers created in it; those the caller had not destroyed
// stay counted by LiveObjects as leaks. VMM allocations, reservations and
// mappings are not context-scoped and survive. Releasing a context that is
// not retained fails with CUDA_ERROR_INVALID_CONTEXT.
func (d *Driver) PrimaryCtxRelease(dev cuda.Device) error {
	return d.call("PrimaryCtxRelease", func() string { return fmt.Sprintf("dev=%d", dev) }, func() cuda.Result {
		if !d.validDevice(dev) {
			return cuda.ErrorInvalidDevice
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		c := &d.mu.ctxs[dev]
		if c.refs == 0 {
			return cuda.ErrorInvalidContext
		}
		c.refs--
		if c.refs == 0 {
			d.destroyContextLocked(c.handle)
			delete(d.mu.ctxDev, c.handle)
			c.handle = 0
		}
		return cuda.Success
	})
}

// destroyContextLocked frees the context-scoped objects of ctx and counts
// them as orphans.
func (d *Driver) destroyContextLocked(ctx cuda.Context) {
	for h, s := range d.mu.streams {
		if s.ctx == ctx {
			delete(d.mu.streams, h)
			d.mu.orphans[cuda.ObjStream]++
		}
	}
	for h, e := range d.mu.events {
		if e.ctx == ctx {
			delete(d.mu.events, h)
			d.mu.orphans[cuda.ObjEvent]++
		}
	}
	for h, m := range d.mu.modules {
		if m.ctx == ctx {
			d.unloadModuleLocked(h, m)
			d.mu.orphans[cuda.ObjModule]++
		}
	}
	for p, m := range d.mu.devmem {
		if m.ctx == ctx {
			d.freeDevmemLocked(p, m)
			d.mu.orphans[cuda.ObjDeviceMem]++
		}
	}
}

// ctxDeviceLocked returns the device of a live context.
func (d *Driver) ctxDeviceLocked(ctx cuda.Context) (cuda.Device, cuda.Result) {
	dev, ok := d.mu.ctxDev[ctx]
	if !ok {
		return 0, cuda.ErrorInvalidContext
	}
	return dev, cuda.Success
}

// LiveObjects counts the objects created through d and not yet destroyed,
// by kind (cuda.Obj*). An exported POSIX fd counts while that fd number
// still refers to the exported memfd; a fabric export counts until its
// allocation is released. Kinds with no live objects are omitted.
func (d *Driver) LiveObjects() cuda.Objects {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := make(cuda.Objects)
	add := func(kind string, n int) {
		if n > 0 {
			o[kind] += n
		}
	}
	for _, c := range d.mu.ctxs {
		add(cuda.ObjContext, c.refs)
	}
	for _, a := range d.mu.allocs {
		if a.imported {
			add(cuda.ObjImport, 1)
		} else {
			add(cuda.ObjAllocation, 1)
		}
	}
	add(cuda.ObjReservation, len(d.mu.res))
	for _, r := range d.mu.regions {
		if r.m != nil {
			add(cuda.ObjMapping, 1)
		}
	}
	d.pruneFDExportsLocked()
	add(cuda.ObjExport, len(d.mu.fdExports)+len(d.mu.fabric))
	add(cuda.ObjRegistration, len(d.mu.hostRegs))
	add(cuda.ObjDeviceMem, len(d.mu.devmem))
	add(cuda.ObjStream, len(d.mu.streams))
	add(cuda.ObjEvent, len(d.mu.events))
	add(cuda.ObjModule, len(d.mu.modules))
	for k, n := range d.mu.orphans {
		add(k, n)
	}
	return o
}

var pageSize = uint64(os.Getpagesize())
