// layoutcheck.c compares kvfabric's own declarations of the CUDA driver ABI
// with the real <cuda.h>. It runs on a GPU machine (scripts/device-batch.sh):
//
//   gcc -std=gnu11 -I/usr/local/cuda/include -o layoutcheck internal/cuda/testdata/layoutcheck.c && ./layoutcheck
//
// It checks sizeof/offsetof of every struct shim.h declares, every KVF_*
// constant in shim.h, and every integer constant of internal/cuda/types.go
// and errors.go (the GOCONST lines; TestLayoutCheckListsEveryGoConstant keeps
// that list complete and its values equal to the Go source). Exit status 1
// on any mismatch.
#define KVF_LAYOUT_CHECK 1
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>

#include "../shim.h"

static int checks, fails;

static void eq(const char *what, long long ours, long long theirs) {
	checks++;
	int ok = ours == theirs;
	if (!ok) fails++;
	printf("%-4s %-78s ours %-8lld cuda.h %-8lld\n", ok ? "ok" : "FAIL", what, ours, theirs);
}

#define SIZE(ours, theirs) eq("sizeof " #ours " == " #theirs, (long long)sizeof(ours), (long long)sizeof(theirs))
#define OFF(ours, theirs, f) eq("offsetof " #theirs "." #f, (long long)offsetof(ours, f), (long long)offsetof(theirs, f))
#define CCONST(ours, theirs) eq(#ours " == " #theirs, (long long)(ours), (long long)(theirs))
// GOCONST(GoName, go value, cuda.h name): a constant of package cuda.
#define GOCONST(goname, goval, theirs) eq("go " #goname " == " #theirs, (long long)(goval), (long long)(theirs))

int main(void) {
	printf("cuda.h CUDA_VERSION %d\n", CUDA_VERSION);

	// Scalar types.
	SIZE(kvf_CUresult, CUresult);
	SIZE(kvf_CUdevice, CUdevice);
	SIZE(kvf_CUdeviceptr, CUdeviceptr);
	SIZE(kvf_CUmemGenericAllocationHandle, CUmemGenericAllocationHandle);
	SIZE(kvf_CUcontext, CUcontext);
	SIZE(kvf_CUstream, CUstream);
	SIZE(kvf_CUevent, CUevent);
	SIZE(kvf_CUmodule, CUmodule);
	SIZE(kvf_CUfunction, CUfunction);
	SIZE(kvf_cuuint64_t, cuuint64_t);

	// Structs.
	SIZE(kvf_CUmemLocation, CUmemLocation);
	OFF(kvf_CUmemLocation, CUmemLocation, type);
	OFF(kvf_CUmemLocation, CUmemLocation, id);

	SIZE(kvf_CUmemAllocationProp, CUmemAllocationProp);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, type);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, requestedHandleTypes);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, location);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, location.type);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, location.id);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, allocFlags);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, allocFlags.compressionType);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, allocFlags.usage);
	OFF(kvf_CUmemAllocationProp, CUmemAllocationProp, allocFlags.reserved);
	{
		CUmemAllocationProp p;
		kvf_CUmemAllocationProp q;
		SIZE(q.allocFlags, p.allocFlags);
		SIZE(q.allocFlags.reserved, p.allocFlags.reserved);
	}

	SIZE(kvf_CUmemAccessDesc, CUmemAccessDesc);
	OFF(kvf_CUmemAccessDesc, CUmemAccessDesc, location);
	OFF(kvf_CUmemAccessDesc, CUmemAccessDesc, flags);

	SIZE(kvf_CUmemFabricHandle, CUmemFabricHandle);
	OFF(kvf_CUmemFabricHandle, CUmemFabricHandle, data);

	SIZE(kvf_CUmemcpyAttributes, CUmemcpyAttributes);
	OFF(kvf_CUmemcpyAttributes, CUmemcpyAttributes, srcAccessOrder);
	OFF(kvf_CUmemcpyAttributes, CUmemcpyAttributes, srcLocHint);
	OFF(kvf_CUmemcpyAttributes, CUmemcpyAttributes, dstLocHint);
	OFF(kvf_CUmemcpyAttributes, CUmemcpyAttributes, flags);
	SIZE(kvf_CUmemcpyAttributes, CUmemcpyAttributes_v1);

	// shim.h constants.
	CCONST(KVF_CUDA_SUCCESS, CUDA_SUCCESS);
	CCONST(KVF_CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
	CCONST(KVF_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
	CCONST(KVF_CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
	CCONST(KVF_CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
	CCONST(KVF_CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
	CCONST(KVF_CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
	CCONST(KVF_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CCONST(KVF_CU_MEM_HANDLE_TYPE_FABRIC, CU_MEM_HANDLE_TYPE_FABRIC);
	CCONST(KVF_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
	CCONST(KVF_CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE, CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE);
	CCONST(KVF_CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
	CCONST(KVF_CU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS);
	CCONST(KVF_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	CCONST(KVF_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CCONST(KVF_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
	CCONST(KVF_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
	CCONST(KVF_CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_SIZE);
	SIZE(unsigned int, CUmemorytype); // Go's MemoryType is a uint32

	// Go constants (types.go).
	GOCONST(LocationInvalid, 0, CU_MEM_LOCATION_TYPE_INVALID);
	GOCONST(LocationDevice, 1, CU_MEM_LOCATION_TYPE_DEVICE);
	GOCONST(LocationHost, 2, CU_MEM_LOCATION_TYPE_HOST);
	GOCONST(LocationHostNUMA, 3, CU_MEM_LOCATION_TYPE_HOST_NUMA);
	GOCONST(LocationHostNUMACurrent, 4, CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
	GOCONST(HandleNone, 0x0, CU_MEM_HANDLE_TYPE_NONE);
	GOCONST(HandlePosixFD, 0x1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	GOCONST(HandleWin32, 0x2, CU_MEM_HANDLE_TYPE_WIN32);
	GOCONST(HandleWin32KM, 0x4, CU_MEM_HANDLE_TYPE_WIN32_KMT);
	GOCONST(HandleFabric, 0x8, CU_MEM_HANDLE_TYPE_FABRIC);
	GOCONST(GranularityMinimum, 0, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	GOCONST(GranularityRecommended, 1, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	GOCONST(AccessNone, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	GOCONST(AccessRead, 1, CU_MEM_ACCESS_FLAGS_PROT_READ);
	GOCONST(AccessReadWrite, 3, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	GOCONST(AttrCanUseHostPointerForRegisteredMem, 91, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM);
	GOCONST(AttrVirtualMemoryManagementSupported, 102, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
	GOCONST(AttrHandleTypePosixFDSupported, 103, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
	GOCONST(AttrHandleTypeFabricSupported, 128, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED);
	GOCONST(AttrNUMAConfig, 130, CU_DEVICE_ATTRIBUTE_NUMA_CONFIG);
	GOCONST(AttrNUMAID, 131, CU_DEVICE_ATTRIBUTE_NUMA_ID);
	GOCONST(AttrHostNUMAID, 134, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID);
	GOCONST(AttrHostNUMAVirtualMemoryManagementSupport, 141, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
	GOCONST(AttrHostNUMAMultinodeIPCSupported, 143, CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED);
	GOCONST(StreamDefault, 0x0, CU_STREAM_DEFAULT);
	GOCONST(StreamNonBlocking, 0x1, CU_STREAM_NON_BLOCKING);
	GOCONST(EventDefault, 0x0, CU_EVENT_DEFAULT);
	GOCONST(EventBlockingSync, 0x1, CU_EVENT_BLOCKING_SYNC);
	GOCONST(EventDisableTiming, 0x2, CU_EVENT_DISABLE_TIMING);
	GOCONST(HostRegisterPortable, 0x1, CU_MEMHOSTREGISTER_PORTABLE);
	GOCONST(HostRegisterDevMap, 0x2, CU_MEMHOSTREGISTER_DEVICEMAP);
	// MemoryTypeUnregistered is kvfabric's own 0 (cuda.h has no CUmemorytype
	// 0; the driver answers CUDA_ERROR_INVALID_VALUE instead): compared
	// with itself so the completeness test still sees it listed.
	GOCONST(MemoryTypeUnregistered, 0, 0);
	GOCONST(MemoryTypeHost, 1, CU_MEMORYTYPE_HOST);
	GOCONST(MemoryTypeDevice, 2, CU_MEMORYTYPE_DEVICE);
	GOCONST(MemoryTypeArray, 3, CU_MEMORYTYPE_ARRAY);
	GOCONST(MemoryTypeUnified, 4, CU_MEMORYTYPE_UNIFIED);

	// Go constants (errors.go).
	GOCONST(Success, 0, CUDA_SUCCESS);
	GOCONST(ErrorInvalidValue, 1, CUDA_ERROR_INVALID_VALUE);
	GOCONST(ErrorOutOfMemory, 2, CUDA_ERROR_OUT_OF_MEMORY);
	GOCONST(ErrorNotInitialized, 3, CUDA_ERROR_NOT_INITIALIZED);
	GOCONST(ErrorDeinitialized, 4, CUDA_ERROR_DEINITIALIZED);
	GOCONST(ErrorNoDevice, 100, CUDA_ERROR_NO_DEVICE);
	GOCONST(ErrorInvalidDevice, 101, CUDA_ERROR_INVALID_DEVICE);
	GOCONST(ErrorDeviceNotLicensed, 102, CUDA_ERROR_DEVICE_NOT_LICENSED);
	GOCONST(ErrorInvalidImage, 200, CUDA_ERROR_INVALID_IMAGE);
	GOCONST(ErrorInvalidContext, 201, CUDA_ERROR_INVALID_CONTEXT);
	GOCONST(ErrorMapFailed, 205, CUDA_ERROR_MAP_FAILED);
	GOCONST(ErrorUnmapFailed, 206, CUDA_ERROR_UNMAP_FAILED);
	GOCONST(ErrorAlreadyMapped, 208, CUDA_ERROR_ALREADY_MAPPED);
	GOCONST(ErrorNoBinaryForGPU, 209, CUDA_ERROR_NO_BINARY_FOR_GPU);
	GOCONST(ErrorNotMapped, 211, CUDA_ERROR_NOT_MAPPED);
	GOCONST(ErrorInvalidPTX, 218, CUDA_ERROR_INVALID_PTX);
	GOCONST(ErrorUnsupportedPTX, 222, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
	GOCONST(ErrorInvalidSource, 300, CUDA_ERROR_INVALID_SOURCE);
	GOCONST(ErrorFileNotFound, 301, CUDA_ERROR_FILE_NOT_FOUND);
	GOCONST(ErrorOperatingSystem, 304, CUDA_ERROR_OPERATING_SYSTEM);
	GOCONST(ErrorInvalidHandle, 400, CUDA_ERROR_INVALID_HANDLE);
	GOCONST(ErrorIllegalState, 401, CUDA_ERROR_ILLEGAL_STATE);
	GOCONST(ErrorNotFound, 500, CUDA_ERROR_NOT_FOUND);
	GOCONST(ErrorNotReady, 600, CUDA_ERROR_NOT_READY);
	GOCONST(ErrorIllegalAddress, 700, CUDA_ERROR_ILLEGAL_ADDRESS);
	GOCONST(ErrorLaunchOutOfRes, 701, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
	GOCONST(ErrorLaunchFailed, 719, CUDA_ERROR_LAUNCH_FAILED);
	GOCONST(ErrorHostMemoryAlready, 712, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	GOCONST(ErrorHostMemoryNotReg, 713, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	GOCONST(ErrorNotPermitted, 800, CUDA_ERROR_NOT_PERMITTED);
	GOCONST(ErrorNotSupported, 801, CUDA_ERROR_NOT_SUPPORTED);
	GOCONST(ErrorSystemNotReady, 802, CUDA_ERROR_SYSTEM_NOT_READY);
	GOCONST(ErrorSystemDriverMism, 803, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
	GOCONST(ErrorCompatNotSupported, 804, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);
	GOCONST(ErrorStreamCaptureUnsup, 900, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	GOCONST(ErrorUnknown, 999, CUDA_ERROR_UNKNOWN);

	printf("layoutcheck: %d checks, %d mismatches\n", checks, fails);
	return fails ? 1 : 0;
}
