// Package cuda is kvfabric's seam to the CUDA driver API.
//
// It declares the driver types and constants kvfabric uses (their values are
// the driver ABI, so no CUDA headers are needed to build), the Driver
// interface that every other package programs against, and — in cgo builds on
// Linux — the real implementation, which dlopens libcuda.so.1. The simulator
// in package sim implements the same interface without a GPU.
package cuda

// Device is a CUDA device ordinal (CUdevice on every driver we support).
type Device int32

// Context is an opaque CUcontext. The zero value is no context.
type Context uintptr

// DevicePtr is a CUdeviceptr: an address in the unified virtual address space.
type DevicePtr uint64

// AllocHandle is a CUmemGenericAllocationHandle returned by cuMemCreate or an
// import.
type AllocHandle uint64

// Stream is an opaque CUstream. The zero value is the legacy default stream.
type Stream uintptr

// Event is an opaque CUevent.
type Event uintptr

// Module is an opaque CUmodule.
type Module uintptr

// Function is an opaque CUfunction.
type Function uintptr

// LocationType mirrors CUmemLocationType.
type LocationType int32

// CUmemLocationType values.
const (
	LocationInvalid         LocationType = 0
	LocationDevice          LocationType = 1
	LocationHost            LocationType = 2
	LocationHostNUMA        LocationType = 3
	LocationHostNUMACurrent LocationType = 4
)

func (t LocationType) String() string {
	switch t {
	case LocationDevice:
		return "DEVICE"
	case LocationHost:
		return "HOST"
	case LocationHostNUMA:
		return "HOST_NUMA"
	case LocationHostNUMACurrent:
		return "HOST_NUMA_CURRENT"
	}
	return "INVALID"
}

// Location mirrors CUmemLocation.
type Location struct {
	Type LocationType
	ID   int32
}

// HandleType mirrors CUmemAllocationHandleType. It is a bit mask: an
// allocation may request several exportable handle types.
type HandleType uint32

// CUmemAllocationHandleType values.
const (
	HandleNone    HandleType = 0x0
	HandlePosixFD HandleType = 0x1
	HandleWin32   HandleType = 0x2
	HandleWin32KM HandleType = 0x4
	HandleFabric  HandleType = 0x8
)

func (h HandleType) String() string {
	switch h {
	case HandleNone:
		return "none"
	case HandlePosixFD:
		return "posix_fd"
	case HandleFabric:
		return "fabric"
	case HandlePosixFD | HandleFabric:
		return "posix_fd|fabric"
	}
	return "handle_type(" + itoa(int64(h)) + ")"
}

// FabricHandle is a CUmemFabricHandle: 64 opaque bytes that any node of the
// NVLink domain can import.
type FabricHandle [64]byte

// AllocProp is the subset of CUmemAllocationProp kvfabric sets. Type is always
// CU_MEM_ALLOCATION_TYPE_PINNED.
type AllocProp struct {
	Location    Location
	HandleTypes HandleType
}

// GranularityOption mirrors CUmemAllocationGranularity_flags.
type GranularityOption int32

// CUmemAllocationGranularity_flags values.
const (
	GranularityMinimum     GranularityOption = 0
	GranularityRecommended GranularityOption = 1
)

// AccessFlags mirrors CUmemAccess_flags.
type AccessFlags int32

// CUmemAccess_flags values.
const (
	AccessNone      AccessFlags = 0
	AccessRead      AccessFlags = 1
	AccessReadWrite AccessFlags = 3
)

// AccessDesc mirrors CUmemAccessDesc.
type AccessDesc struct {
	Location Location
	Flags    AccessFlags
}

// Attribute mirrors CUdevice_attribute (values from the CUDA 12.x/13.0 ABI).
type Attribute int32

// The device attributes kvfabric reads.
const (
	AttrCanUseHostPointerForRegisteredMem      Attribute = 91
	AttrVirtualMemoryManagementSupported       Attribute = 102
	AttrHandleTypePosixFDSupported             Attribute = 103
	AttrHandleTypeFabricSupported              Attribute = 128
	AttrNUMAConfig                             Attribute = 130
	AttrNUMAID                                 Attribute = 131
	AttrHostNUMAID                             Attribute = 134
	AttrHostNUMAVirtualMemoryManagementSupport Attribute = 141
	AttrHostNUMAMultinodeIPCSupported          Attribute = 143
)

// Stream and event creation flags.
const (
	StreamDefault        uint32 = 0x0
	StreamNonBlocking    uint32 = 0x1
	EventDefault         uint32 = 0x0
	EventBlockingSync    uint32 = 0x1
	EventDisableTiming   uint32 = 0x2
	HostRegisterPortable uint32 = 0x1
	HostRegisterDevMap   uint32 = 0x2
)

// AddrRange is the address range of the allocation (cuMemAlloc buffer,
// VMM mapping, registered or page-locked host range) that holds a pointer,
// as PointerRanges reports it; Size 0 means the driver knows no allocation
// there.
type AddrRange struct {
	Start DevicePtr
	Size  uint64
}

// Contains reports whether [p, p+n) lies inside r.
func (r AddrRange) Contains(p DevicePtr, n uint64) bool {
	return r.Size > 0 && p >= r.Start && uint64(p-r.Start) <= r.Size && n <= r.Size-uint64(p-r.Start)
}

// MemoryType is what the driver says about an address: the CUmemorytype
// that cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) reports
// (values 1..4 are that enum's ABI), or MemoryTypeUnregistered, kvfabric's
// own 0, for an address the driver does not know (it answered
// CUDA_ERROR_INVALID_VALUE: pageable host memory never registered, or no
// memory at all). Only Unregistered memory is unsafe to hand to a copy.
type MemoryType uint32

// MemoryType values.
const (
	// MemoryTypeUnregistered is no CUmemorytype value (cuda.h has no 0):
	// the driver does not know the address.
	MemoryTypeUnregistered MemoryType = 0
	MemoryTypeHost         MemoryType = 1 // page-locked host memory (cuMemHostRegister, cuMemHostAlloc)
	MemoryTypeDevice       MemoryType = 2 // device memory (cuMemAlloc, VMM mappings of DEVICE allocations)
	MemoryTypeArray        MemoryType = 3
	MemoryTypeUnified      MemoryType = 4
)

func (m MemoryType) String() string {
	switch m {
	case MemoryTypeUnregistered:
		return "unregistered"
	case MemoryTypeHost:
		return "host"
	case MemoryTypeDevice:
		return "device"
	case MemoryTypeArray:
		return "array"
	case MemoryTypeUnified:
		return "unified"
	}
	return "memory_type(" + itoa(int64(m)) + ")"
}

// Copy is one element of a copy batch: Len bytes from Src to Dst. Both are
// addresses in the unified address space (device memory, mapped VMM ranges,
// or registered host memory).
type Copy struct {
	Dst DevicePtr
	Src DevicePtr
	Len uint64
}

// Dim3 is a grid or block shape for LaunchKernel.
type Dim3 struct{ X, Y, Z uint32 }

// Capabilities reports optional driver entry points. An absent capability
// means the corresponding method returns an *Error with ResultNotSupported.
type Capabilities struct {
	// MemcpyBatchAsync is cuMemcpyBatchAsync (driver >= 12.8).
	MemcpyBatchAsync bool
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [24]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
