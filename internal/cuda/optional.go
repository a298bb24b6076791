package cuda

// Optional Driver capabilities, in the style of database/sql/driver: callers
// type-assert a Driver to these interfaces and must work (or say clearly that
// they cannot) when an implementation lacks one.

// Object kinds counted by ObjectCounter.
const (
	ObjContext      = "context"      // retained primary contexts
	ObjAllocation   = "allocation"   // cuMemCreate handles not yet released
	ObjImport       = "import"       // imported handles not yet released
	ObjReservation  = "reservation"  // VA ranges not yet freed
	ObjMapping      = "mapping"      // mapped ranges not yet unmapped
	ObjExport       = "export"       // exported POSIX fds still open / fabric handles still registered
	ObjRegistration = "registration" // host registrations
	ObjDeviceMem    = "devmem"       // cuMemAlloc buffers
	ObjStream       = "stream"
	ObjEvent        = "event"
	ObjModule       = "module"
)

// Objects maps an object kind (Obj*) to its live count.
type Objects map[string]int

// Total is the number of live objects of every kind.
func (o Objects) Total() int {
	n := 0
	for _, v := range o {
		n += v
	}
	return n
}

// ObjectCounter is implemented by drivers that count the objects created
// through them and not yet destroyed. The simulator always implements it;
// the real driver counts what passes through it (not what other libraries in
// the process create). Absent: leak checks are skipped, never faked.
type ObjectCounter interface {
	LiveObjects() Objects
}

// KernelFunc emulates one kernel launch on a simulated device. params are
// the launch's parameter bytes as given to LaunchKernel; mem checks that a
// range is device-accessible to the launching context and returns its bytes.
type KernelFunc func(grid, block Dim3, params [][]byte, mem func(ptr DevicePtr, n uint64) ([]byte, error)) error

// KernelEmulator is implemented by the simulator: a package that ships a PTX
// kernel registers a Go function with the same semantics under the kernel's
// entry name, so ModuleGetFunction finds it and LaunchKernel runs it in
// stream order. The real driver does not implement it.
type KernelEmulator interface {
	RegisterKernel(name string, fn KernelFunc)
}

// DeviceMemory is implemented by drivers that report a device's memory
// (cuDeviceTotalMem): the real driver and the simulator. The provider pool
// refuses an HBM global_segment_size larger than it before planning.
// Absent: the pool cannot bound the request by the device and relies on
// its chunk limit and on cuMemCreate failing.
type DeviceMemory interface {
	DeviceTotalMem(dev Device) (uint64, error)
}

// AllocationSizer is implemented by drivers that can tell the size of an
// allocation handle, created or imported. The simulator implements it. The
// real driver does not: CUDA has no query for the size of an imported
// handle (cuMemGetAllocationPropertiesFromHandle carries none), so callers
// that must check a claimed size map exactly that many bytes at offset 0,
// which cuMemMap refuses when it runs past the allocation's end
// (CUDA_ERROR_NOT_SUPPORTED on H200, driver 580).
type AllocationSizer interface {
	// MemAllocationSize returns the size in bytes of allocation h.
	MemAllocationSize(ctx Context, h AllocHandle) (uint64, error)
}
