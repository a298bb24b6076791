package cuda

// Driver is the CUDA driver API as kvfabric uses it. Two implementations
// exist: the real one (Open, cgo builds only) and the simulator (package sim).
//
// Context rule: every method that needs a current CUDA context takes the
// Context explicitly and the implementation makes it current inside the same
// call (for the real driver: inside the same C call), because goroutines
// migrate between OS threads and CUDA's current context is per thread.
//
// Batch rule: methods that take slices ([]Copy, []AccessDesc, []DevicePtr)
// cross into the driver once per call, never once per element.
//
// Errors are *Error values (errors.Is(err, cuda.ErrorNotPermitted) works).
// All methods are safe for concurrent use.
type Driver interface {
	// Name is "cuda" for the real driver and "sim" for the simulator.
	Name() string
	// Capabilities reports the optional entry points that were resolved.
	Capabilities() Capabilities
	// Close releases the implementation's own resources (not the caller's
	// objects). The real driver never dlcloses libcuda.
	Close() error

	// DriverVersion is cuDriverGetVersion (e.g. 13000 for CUDA 13.0).
	DriverVersion() (int, error)
	// DeviceCount is cuDeviceGetCount.
	DeviceCount() (int, error)
	// DeviceName is cuDeviceGetName.
	DeviceName(dev Device) (string, error)
	// DeviceAttribute is cuDeviceGetAttribute.
	DeviceAttribute(dev Device, attr Attribute) (int, error)
	// CanAccessPeer is cuDeviceCanAccessPeer.
	CanAccessPeer(dev, peer Device) (bool, error)

	// PrimaryCtxRetain is cuDevicePrimaryCtxRetain; every successful call
	// must be paired with PrimaryCtxRelease.
	PrimaryCtxRetain(dev Device) (Context, error)
	// PrimaryCtxRelease is cuDevicePrimaryCtxRelease.
	PrimaryCtxRelease(dev Device) error

	// MemGetAllocationGranularity is cuMemGetAllocationGranularity for a
	// pinned allocation with prop.
	MemGetAllocationGranularity(ctx Context, prop AllocProp, opt GranularityOption) (uint64, error)
	// MemCreate is cuMemCreate of a pinned allocation.
	MemCreate(ctx Context, size uint64, prop AllocProp) (AllocHandle, error)
	// MemRelease is cuMemRelease.
	MemRelease(ctx Context, h AllocHandle) error
	// MemAddressReserve is cuMemAddressReserve (addr hint 0, flags 0).
	MemAddressReserve(ctx Context, size, alignment uint64) (DevicePtr, error)
	// MemAddressFree is cuMemAddressFree.
	MemAddressFree(ctx Context, ptr DevicePtr, size uint64) error
	// MemMap is cuMemMap (offset into the allocation, flags 0).
	MemMap(ctx Context, ptr DevicePtr, size, offset uint64, h AllocHandle) error
	// MemUnmap is cuMemUnmap.
	MemUnmap(ctx Context, ptr DevicePtr, size uint64) error
	// MemSetAccess is one cuMemSetAccess call for all descs.
	MemSetAccess(ctx Context, ptr DevicePtr, size uint64, descs []AccessDesc) error

	// MemExportToFD is cuMemExportToShareableHandle with
	// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR. The caller owns the fd.
	MemExportToFD(ctx Context, h AllocHandle) (int, error)
	// MemExportToFabric is cuMemExportToShareableHandle with
	// CU_MEM_HANDLE_TYPE_FABRIC.
	MemExportToFabric(ctx Context, h AllocHandle) (FabricHandle, error)
	// MemImportFromFD is cuMemImportFromShareableHandle for a POSIX fd. The
	// fd stays owned by the caller; the returned handle must be released
	// with MemRelease.
	MemImportFromFD(ctx Context, fd int) (AllocHandle, error)
	// MemImportFromFabric is cuMemImportFromShareableHandle for a fabric
	// handle; the returned handle must be released with MemRelease.
	MemImportFromFabric(ctx Context, fh FabricHandle) (AllocHandle, error)

	// MemAlloc is cuMemAlloc (plain device memory: consumer buffers, tests).
	MemAlloc(ctx Context, size uint64) (DevicePtr, error)
	// MemFree is cuMemFree.
	MemFree(ctx Context, ptr DevicePtr) error
	// MemHostRegister is cuMemHostRegister of [p, p+size).
	MemHostRegister(ctx Context, p uintptr, size uint64, flags uint32) error
	// MemHostUnregister is cuMemHostUnregister.
	MemHostUnregister(ctx Context, p uintptr) error
	// PointerMemoryTypes sets out[i] to the memory type of ptrs[i]:
	// cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) for every
	// pointer, in one crossing into the driver, with ctx current (the query
	// fails with CUDA_ERROR_INVALID_CONTEXT when no context is current). A
	// pointer the driver does not know (CUDA_ERROR_INVALID_VALUE) yields
	// MemoryTypeUnregistered, not an error; any other failure is an error
	// naming the pointer's index. len(out) must equal len(ptrs).
	PointerMemoryTypes(ctx Context, ptrs []DevicePtr, out []MemoryType) error
	// PointerRanges sets out[i] to the allocation that holds ptrs[i]:
	// cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR and
	// _RANGE_SIZE) for every pointer, in one crossing, with ctx current. A
	// pointer the driver does not know (CUDA_ERROR_INVALID_VALUE) yields
	// the zero AddrRange, not an error; any other failure is an error
	// naming the pointer's index. len(out) must equal len(ptrs). The Store
	// merges copies that continue one another only inside one such range.
	PointerRanges(ctx Context, ptrs []DevicePtr, out []AddrRange) error
	// MemcpyHtoD is a synchronous cuMemcpyHtoD (setup and verification only,
	// never on the data path).
	MemcpyHtoD(ctx Context, dst DevicePtr, src []byte) error
	// MemcpyDtoH is a synchronous cuMemcpyDtoH (setup and verification only).
	MemcpyDtoH(ctx Context, dst []byte, src DevicePtr) error

	// StreamCreate is cuStreamCreate.
	StreamCreate(ctx Context, flags uint32) (Stream, error)
	// StreamDestroy is cuStreamDestroy.
	StreamDestroy(ctx Context, s Stream) error
	// StreamSynchronize is cuStreamSynchronize.
	StreamSynchronize(ctx Context, s Stream) error
	// StreamWaitEvent is cuStreamWaitEvent (flags 0).
	StreamWaitEvent(ctx Context, s Stream, e Event) error
	// EventCreate is cuEventCreate.
	EventCreate(ctx Context, flags uint32) (Event, error)
	// EventDestroy is cuEventDestroy.
	EventDestroy(ctx Context, e Event) error
	// EventRecord is cuEventRecord.
	EventRecord(ctx Context, e Event, s Stream) error
	// EventSynchronize is cuEventSynchronize.
	EventSynchronize(ctx Context, e Event) error
	// EventQuery is cuEventQuery: true when complete, false when
	// CUDA_ERROR_NOT_READY.
	EventQuery(ctx Context, e Event) (bool, error)
	// EventElapsedTime is cuEventElapsedTime in milliseconds.
	EventElapsedTime(ctx Context, start, end Event) (float32, error)

	// MemcpyAsync enqueues one cuMemcpyAsync per copy, in order, on s, in a
	// single crossing into the driver.
	MemcpyAsync(ctx Context, copies []Copy, s Stream) error
	// MemcpyBatchAsync is cuMemcpyBatchAsync for all copies (stream-ordered
	// source access). Returns ErrorNotSupported when the capability is absent.
	MemcpyBatchAsync(ctx Context, copies []Copy, s Stream) error

	// ModuleLoadData is cuModuleLoadData of a PTX or cubin image.
	ModuleLoadData(ctx Context, image []byte) (Module, error)
	// ModuleUnload is cuModuleUnload.
	ModuleUnload(ctx Context, m Module) error
	// ModuleGetFunction is cuModuleGetFunction.
	ModuleGetFunction(ctx Context, m Module, name string) (Function, error)
	// LaunchKernel is cuLaunchKernel. Each element of params holds the bytes
	// of one kernel parameter (e.g. 8 little-endian bytes for a pointer).
	LaunchKernel(ctx Context, f Function, grid, block Dim3, sharedMem uint32, s Stream, params [][]byte) error
}
