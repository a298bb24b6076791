// shim.h declares kvfabric's C shim over the CUDA driver API (libcuda.so.1,
// loaded with dlopen) and the few driver types, structs and constants it
// needs. No CUDA header is needed to build it.
//
// Every driver type we declare carries a kvf_ prefix, so this header compiles
// next to the real <cuda.h>: testdata/layoutcheck.c includes both (with
// KVF_LAYOUT_CHECK defined) and checks sizes, field offsets and constant
// values against the driver ABI on a GPU machine.
#ifndef KVF_SHIM_H
#define KVF_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- Driver ABI: scalar types -------------------------------------------

typedef int kvf_CUresult;
typedef int kvf_CUdevice;
typedef unsigned long long kvf_CUdeviceptr;
typedef unsigned long long kvf_CUmemGenericAllocationHandle;
typedef void *kvf_CUcontext;
typedef void *kvf_CUstream;
typedef void *kvf_CUevent;
typedef void *kvf_CUmodule;
typedef void *kvf_CUfunction;
typedef uint64_t kvf_cuuint64_t;

// ---- Driver ABI: constants -----------------------------------------------

#define KVF_CUDA_SUCCESS 0
#define KVF_CUDA_ERROR_INVALID_VALUE 1
#define KVF_CUDA_ERROR_OUT_OF_MEMORY 2
#define KVF_CUDA_ERROR_NOT_READY 600
#define KVF_CUDA_ERROR_NOT_FOUND 500
#define KVF_CUDA_ERROR_NOT_SUPPORTED 801

#define KVF_CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define KVF_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define KVF_CU_MEM_HANDLE_TYPE_FABRIC 0x8
#define KVF_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1
#define KVF_CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE 0x1
#define KVF_CU_GET_PROC_ADDRESS_LEGACY_STREAM 0x1
#define KVF_CU_GET_PROC_ADDRESS_SUCCESS 0
#define KVF_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define KVF_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
#define KVF_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define KVF_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define KVF_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12

// ---- Driver ABI: structs -------------------------------------------------

// CUmemLocation.
typedef struct kvf_CUmemLocation {
	int type; // CUmemLocationType
	int id;
} kvf_CUmemLocation;

// CUmemAllocationProp (CUmemAllocationProp_v1).
typedef struct kvf_CUmemAllocationProp {
	int type;                          // CUmemAllocationType
	int requestedHandleTypes;          // CUmemAllocationHandleType
	kvf_CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} kvf_CUmemAllocationProp;

// CUmemAccessDesc (CUmemAccessDesc_v1).
typedef struct kvf_CUmemAccessDesc {
	kvf_CUmemLocation location;
	int flags; // CUmemAccess_flags
} kvf_CUmemAccessDesc;

// CUmemFabricHandle (CUmemFabricHandle_v1).
typedef struct kvf_CUmemFabricHandle {
	unsigned char data[64];
} kvf_CUmemFabricHandle;

// CUmemcpyAttributes (CUmemcpyAttributes_v1, CUDA >= 12.8).
typedef struct kvf_CUmemcpyAttributes {
	int srcAccessOrder; // CUmemcpySrcAccessOrder
	kvf_CUmemLocation srcLocHint;
	kvf_CUmemLocation dstLocHint;
	unsigned int flags; // CUmemcpyFlags
} kvf_CUmemcpyAttributes;

#ifndef KVF_LAYOUT_CHECK

// ---- The shim ------------------------------------------------------------

// kvf_copy has the layout of Go's cuda.Copy.
typedef struct kvf_copy {
	uint64_t dst, src, len;
} kvf_copy;

// Batch ABI of cuMemcpyBatchAsync as resolved.
enum {
	KVF_BATCH_NONE = 0,
	KVF_BATCH_12080 = 1, // (..., size_t numAttrs, size_t *failIdx, CUstream)
	KVF_BATCH_13000 = 2, // (..., size_t numAttrs, CUstream)
};

// kvf_driver is one resolved function table. It holds no Go pointers; Go
// allocates it and passes it to every shim call.
typedef struct kvf_driver {
	void *lib;
	int version;   // cuDriverGetVersion
	int batch_abi; // KVF_BATCH_*

	kvf_CUresult (*cuInit)(unsigned int);
	kvf_CUresult (*cuDriverGetVersion)(int *);
	kvf_CUresult (*cuDeviceGet)(kvf_CUdevice *, int);
	kvf_CUresult (*cuDeviceGetCount)(int *);
	kvf_CUresult (*cuDeviceGetName)(char *, int, kvf_CUdevice);
	kvf_CUresult (*cuDeviceGetAttribute)(int *, int, kvf_CUdevice);
	kvf_CUresult (*cuDeviceTotalMem)(size_t *, kvf_CUdevice); // cuDeviceTotalMem_v2
	kvf_CUresult (*cuDeviceCanAccessPeer)(int *, kvf_CUdevice, kvf_CUdevice);
	kvf_CUresult (*cuDevicePrimaryCtxRetain)(kvf_CUcontext *, kvf_CUdevice);
	kvf_CUresult (*cuDevicePrimaryCtxRelease)(kvf_CUdevice);
	kvf_CUresult (*cuCtxGetCurrent)(kvf_CUcontext *);
	kvf_CUresult (*cuCtxSetCurrent)(kvf_CUcontext);

	kvf_CUresult (*cuMemGetAllocationGranularity)(size_t *, const kvf_CUmemAllocationProp *, int);
	kvf_CUresult (*cuMemCreate)(kvf_CUmemGenericAllocationHandle *, size_t, const kvf_CUmemAllocationProp *, unsigned long long);
	kvf_CUresult (*cuMemRelease)(kvf_CUmemGenericAllocationHandle);
	kvf_CUresult (*cuMemAddressReserve)(kvf_CUdeviceptr *, size_t, size_t, kvf_CUdeviceptr, unsigned long long);
	kvf_CUresult (*cuMemAddressFree)(kvf_CUdeviceptr, size_t);
	kvf_CUresult (*cuMemMap)(kvf_CUdeviceptr, size_t, size_t, kvf_CUmemGenericAllocationHandle, unsigned long long);
	kvf_CUresult (*cuMemUnmap)(kvf_CUdeviceptr, size_t);
	kvf_CUresult (*cuMemSetAccess)(kvf_CUdeviceptr, size_t, const kvf_CUmemAccessDesc *, size_t);
	kvf_CUresult (*cuMemExportToShareableHandle)(void *, kvf_CUmemGenericAllocationHandle, int, unsigned long long);
	kvf_CUresult (*cuMemImportFromShareableHandle)(kvf_CUmemGenericAllocationHandle *, void *, int);

	kvf_CUresult (*cuMemAlloc)(kvf_CUdeviceptr *, size_t);
	kvf_CUresult (*cuMemFree)(kvf_CUdeviceptr);
	kvf_CUresult (*cuMemHostRegister)(void *, size_t, unsigned int);
	kvf_CUresult (*cuMemHostUnregister)(void *);
	kvf_CUresult (*cuMemcpyHtoD)(kvf_CUdeviceptr, const void *, size_t);
	kvf_CUresult (*cuMemcpyDtoH)(void *, kvf_CUdeviceptr, size_t);
	kvf_CUresult (*cuPointerGetAttribute)(void *, int, kvf_CUdeviceptr);

	kvf_CUresult (*cuStreamCreate)(kvf_CUstream *, unsigned int);
	kvf_CUresult (*cuStreamDestroy)(kvf_CUstream);
	kvf_CUresult (*cuStreamSynchronize)(kvf_CUstream);
	kvf_CUresult (*cuStreamWaitEvent)(kvf_CUstream, kvf_CUevent, unsigned int);
	kvf_CUresult (*cuEventCreate)(kvf_CUevent *, unsigned int);
	kvf_CUresult (*cuEventDestroy)(kvf_CUevent);
	kvf_CUresult (*cuEventRecord)(kvf_CUevent, kvf_CUstream);
	kvf_CUresult (*cuEventSynchronize)(kvf_CUevent);
	kvf_CUresult (*cuEventQuery)(kvf_CUevent);
	kvf_CUresult (*cuEventElapsedTime)(float *, kvf_CUevent, kvf_CUevent);

	kvf_CUresult (*cuMemcpyAsync)(kvf_CUdeviceptr, kvf_CUdeviceptr, size_t, kvf_CUstream);
	// Exactly one of the two is set, per batch_abi.
	kvf_CUresult (*cuMemcpyBatchAsync_12080)(kvf_CUdeviceptr *, kvf_CUdeviceptr *, size_t *, size_t,
	                                         kvf_CUmemcpyAttributes *, size_t *, size_t, size_t *, kvf_CUstream);
	kvf_CUresult (*cuMemcpyBatchAsync_13000)(kvf_CUdeviceptr *, kvf_CUdeviceptr *, size_t *, size_t,
	                                         kvf_CUmemcpyAttributes *, size_t *, size_t, kvf_CUstream);

	kvf_CUresult (*cuModuleLoadData)(kvf_CUmodule *, const void *);
	kvf_CUresult (*cuModuleUnload)(kvf_CUmodule);
	kvf_CUresult (*cuModuleGetFunction)(kvf_CUfunction *, kvf_CUmodule, const char *);
	kvf_CUresult (*cuLaunchKernel)(kvf_CUfunction, unsigned int, unsigned int, unsigned int,
	                               unsigned int, unsigned int, unsigned int, unsigned int,
	                               kvf_CUstream, void **, void **);
} kvf_driver;

// kvf_dlopen loads the library at path (RTLD_NOW|RTLD_LOCAL) and returns its
// handle, or NULL with the dlerror text in err. The handle is never closed.
void *kvf_dlopen(const char *path, char *err, size_t errlen);

// kvf_resolve fills d from the library handle lib. batch_max caps the
// cuMemcpyBatchAsync ABI requested (0: the newest the driver has; 12080:
// the CUDA 12.8 one). It returns 0, or -1 with a message naming the missing
// symbol in err. cuInit is not called.
int kvf_resolve(kvf_driver *d, void *lib, int batch_max, char *err, size_t errlen);

// Calls without a context.
kvf_CUresult kvf_init(kvf_driver *d);
kvf_CUresult kvf_device_count(kvf_driver *d, int *n);
kvf_CUresult kvf_device_name(kvf_driver *d, int ordinal, char *name, int len);
kvf_CUresult kvf_device_attribute(kvf_driver *d, int ordinal, int attr, int *v);
kvf_CUresult kvf_device_total_mem(kvf_driver *d, int ordinal, uint64_t *bytes);
kvf_CUresult kvf_can_access_peer(kvf_driver *d, int ordinal, int peer, int *v);
kvf_CUresult kvf_primary_ctx_retain(kvf_driver *d, int ordinal, uintptr_t *ctx);
kvf_CUresult kvf_primary_ctx_release(kvf_driver *d, int ordinal);

// Calls that make ctx current (and restore the thread's previous context)
// around the operation, in one C call. A NULL ctx uses the current one.
kvf_CUresult kvf_mem_granularity(kvf_driver *d, uintptr_t ctx, int loctype, int locid, int htypes, int opt, size_t *g);
kvf_CUresult kvf_mem_create(kvf_driver *d, uintptr_t ctx, size_t size, int loctype, int locid, int htypes,
                            kvf_CUmemGenericAllocationHandle *h);
kvf_CUresult kvf_mem_release(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h);
kvf_CUresult kvf_mem_address_reserve(kvf_driver *d, uintptr_t ctx, size_t size, size_t align, kvf_CUdeviceptr *p);
kvf_CUresult kvf_mem_address_free(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size);
kvf_CUresult kvf_mem_map(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size, size_t off,
                         kvf_CUmemGenericAllocationHandle h);
kvf_CUresult kvf_mem_unmap(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size);
kvf_CUresult kvf_mem_set_access(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size,
                                const kvf_CUmemAccessDesc *descs, size_t n);
kvf_CUresult kvf_mem_export_fd(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h, int *fd);
kvf_CUresult kvf_mem_export_fabric(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h,
                                   kvf_CUmemFabricHandle *fh);
kvf_CUresult kvf_mem_import_fd(kvf_driver *d, uintptr_t ctx, int fd, kvf_CUmemGenericAllocationHandle *h);
kvf_CUresult kvf_mem_import_fabric(kvf_driver *d, uintptr_t ctx, const kvf_CUmemFabricHandle *fh,
                                   kvf_CUmemGenericAllocationHandle *h);

kvf_CUresult kvf_mem_alloc(kvf_driver *d, uintptr_t ctx, size_t size, kvf_CUdeviceptr *p);
kvf_CUresult kvf_mem_free(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p);
kvf_CUresult kvf_mem_host_register(kvf_driver *d, uintptr_t ctx, uintptr_t p, size_t size, unsigned int flags);
kvf_CUresult kvf_mem_host_unregister(kvf_driver *d, uintptr_t ctx, uintptr_t p);
kvf_CUresult kvf_memcpy_htod(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr dst, const void *src, size_t n);
kvf_CUresult kvf_memcpy_dtoh(kvf_driver *d, uintptr_t ctx, void *dst, kvf_CUdeviceptr src, size_t n);
// kvf_pointer_memory_types sets types[i] to the CUmemorytype of ptrs[i]
// (cuPointerGetAttribute, CU_POINTER_ATTRIBUTE_MEMORY_TYPE), or 0 where the
// driver answers CUDA_ERROR_INVALID_VALUE (an address it does not know). On
// any other failure *failed is the index of the failing pointer.
kvf_CUresult kvf_pointer_memory_types(kvf_driver *d, uintptr_t ctx, const kvf_CUdeviceptr *ptrs, unsigned int *types,
                                      size_t n, size_t *failed);
// kvf_pointer_ranges sets ranges[2i] and ranges[2i+1] to the start and size
// of the allocation that holds ptrs[i] (cuPointerGetAttribute,
// CU_POINTER_ATTRIBUTE_RANGE_START_ADDR and _RANGE_SIZE), or both to 0
// where the driver answers CUDA_ERROR_INVALID_VALUE. On any other failure
// *failed is the index of the failing pointer.
kvf_CUresult kvf_pointer_ranges(kvf_driver *d, uintptr_t ctx, const kvf_CUdeviceptr *ptrs, unsigned long long *ranges,
                                size_t n, size_t *failed);

kvf_CUresult kvf_stream_create(kvf_driver *d, uintptr_t ctx, unsigned int flags, uintptr_t *s);
kvf_CUresult kvf_stream_destroy(kvf_driver *d, uintptr_t ctx, uintptr_t s);
kvf_CUresult kvf_stream_synchronize(kvf_driver *d, uintptr_t ctx, uintptr_t s);
kvf_CUresult kvf_stream_wait_event(kvf_driver *d, uintptr_t ctx, uintptr_t s, uintptr_t e);
kvf_CUresult kvf_event_create(kvf_driver *d, uintptr_t ctx, unsigned int flags, uintptr_t *e);
kvf_CUresult kvf_event_destroy(kvf_driver *d, uintptr_t ctx, uintptr_t e);
kvf_CUresult kvf_event_record(kvf_driver *d, uintptr_t ctx, uintptr_t e, uintptr_t s);
kvf_CUresult kvf_event_synchronize(kvf_driver *d, uintptr_t ctx, uintptr_t e);
kvf_CUresult kvf_event_query(kvf_driver *d, uintptr_t ctx, uintptr_t e);
kvf_CUresult kvf_event_elapsed(kvf_driver *d, uintptr_t ctx, uintptr_t a, uintptr_t b, float *ms);

// kvf_memcpy_async enqueues one cuMemcpyAsync per copy; on failure *failed
// is the index of the failing copy.
kvf_CUresult kvf_memcpy_async(kvf_driver *d, uintptr_t ctx, const kvf_copy *c, size_t n, uintptr_t s,
                              size_t *failed);
// kvf_memcpy_batch_async is one cuMemcpyBatchAsync with a single attribute
// (stream-ordered source access, prefer overlap with compute).
kvf_CUresult kvf_memcpy_batch_async(kvf_driver *d, uintptr_t ctx, const kvf_copy *c, size_t n, uintptr_t s);

kvf_CUresult kvf_module_load_data(kvf_driver *d, uintptr_t ctx, const void *image, size_t len, uintptr_t *m);
kvf_CUresult kvf_module_unload(kvf_driver *d, uintptr_t ctx, uintptr_t m);
kvf_CUresult kvf_module_get_function(kvf_driver *d, uintptr_t ctx, uintptr_t m, const char *name,
                                     uintptr_t *f);
// kvf_launch_kernel copies the n parameters (param i is
// buf[offs[i] .. offs[i]+lens[i])) into C memory, builds the void* array and
// launches.
kvf_CUresult kvf_launch_kernel(kvf_driver *d, uintptr_t ctx, uintptr_t f, const unsigned int dims[6],
                               unsigned int shmem, uintptr_t s, const unsigned char *buf, const uint64_t *offs,
                               const uint64_t *lens, size_t n);

#endif // KVF_LAYOUT_CHECK

#ifdef __cplusplus
}
#endif

#endif // KVF_SHIM_H
