//go:build cgo && linux

// shim.c: kvfabric's C shim over libcuda.so.1. See shim.h.
//
// Every entry point that needs a context takes it and makes it current inside
// this one C call, then restores whatever context the thread had before, so
// a goroutine migrating between OS threads always runs on the right context
// and a foreign thread (a C ABI caller) keeps its own current context.
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// cuGetProcAddress_v2 (CUDA >= 12.0) and the original cuGetProcAddress
// (CUDA 11.3..12.x, no symbolStatus).
typedef kvf_CUresult (*kvf_gpa_v2)(const char *, void **, int, kvf_cuuint64_t, int *);
typedef kvf_CUresult (*kvf_gpa_v1)(const char *, void **, int, kvf_cuuint64_t);

void *kvf_dlopen(const char *path, char *err, size_t errlen) {
	dlerror();
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
	}
	return lib;
}

typedef struct {
	void *gpa;
	int v2;
} kvf_gpa;

// kvf_lookup resolves sym at cudaVersion ver with legacy default-stream
// semantics. Returns 0, 1 (not found) or 2 (driver too old for ver's ABI).
static int kvf_lookup(kvf_gpa *g, const char *sym, int ver, void **out) {
	*out = NULL;
	kvf_CUresult r;
	int status = KVF_CU_GET_PROC_ADDRESS_SUCCESS;
	if (g->v2) {
		r = ((kvf_gpa_v2)g->gpa)(sym, out, ver, KVF_CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
	} else {
		r = ((kvf_gpa_v1)g->gpa)(sym, out, ver, KVF_CU_GET_PROC_ADDRESS_LEGACY_STREAM);
	}
	if (r != KVF_CUDA_SUCCESS || *out == NULL) {
		*out = NULL;
		return status == KVF_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? 2 : 1;
	}
	return 0;
}

// The version every required entry point is resolved at: the CUDA 12.0 ABI
// of each symbol (e.g. cuMemAlloc_v2, cuStreamDestroy_v2).
#define KVF_ABI 12000

int kvf_resolve(kvf_driver *d, void *lib, int batch_max, char *err, size_t errlen) {
	memset(d, 0, sizeof *d);
	d->lib = lib;
	kvf_gpa g = {0};
	dlerror();
	g.gpa = dlsym(lib, "cuGetProcAddress_v2");
	g.v2 = 1;
	if (g.gpa == NULL) {
		g.gpa = dlsym(lib, "cuGetProcAddress");
		g.v2 = 0;
	}
	if (g.gpa == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "no cuGetProcAddress_v2 or cuGetProcAddress in the driver library: %s",
		         e ? e : "not found");
		return -1;
	}

	struct {
		const char *name;
		void **slot;
	} req[] = {
#define KVF_REQ(f) {#f, (void **)&d->f}
		KVF_REQ(cuInit),
		KVF_REQ(cuDriverGetVersion),
		KVF_REQ(cuDeviceGet),
		KVF_REQ(cuDeviceGetCount),
		KVF_REQ(cuDeviceGetName),
		KVF_REQ(cuDeviceGetAttribute),
		KVF_REQ(cuDeviceTotalMem),
		KVF_REQ(cuDeviceCanAccessPeer),
		KVF_REQ(cuDevicePrimaryCtxRetain),
		KVF_REQ(cuDevicePrimaryCtxRelease),
		KVF_REQ(cuCtxGetCurrent),
		KVF_REQ(cuCtxSetCurrent),
		KVF_REQ(cuMemGetAllocationGranularity),
		KVF_REQ(cuMemCreate),
		KVF_REQ(cuMemRelease),
		KVF_REQ(cuMemAddressReserve),
		KVF_REQ(cuMemAddressFree),
		KVF_REQ(cuMemMap),
		KVF_REQ(cuMemUnmap),
		KVF_REQ(cuMemSetAccess),
		KVF_REQ(cuMemExportToShareableHandle),
		KVF_REQ(cuMemImportFromShareableHandle),
		KVF_REQ(cuMemAlloc),
		KVF_REQ(cuMemFree),
		KVF_REQ(cuMemHostRegister),
		KVF_REQ(cuMemHostUnregister),
		KVF_REQ(cuMemcpyHtoD),
		KVF_REQ(cuMemcpyDtoH),
		KVF_REQ(cuPointerGetAttribute),
		KVF_REQ(cuStreamCreate),
		KVF_REQ(cuStreamDestroy),
		KVF_REQ(cuStreamSynchronize),
		KVF_REQ(cuStreamWaitEvent),
		KVF_REQ(cuEventCreate),
		KVF_REQ(cuEventDestroy),
		KVF_REQ(cuEventRecord),
		KVF_REQ(cuEventSynchronize),
		KVF_REQ(cuEventQuery),
		KVF_REQ(cuEventElapsedTime),
		KVF_REQ(cuMemcpyAsync),
		KVF_REQ(cuModuleLoadData),
		KVF_REQ(cuModuleUnload),
		KVF_REQ(cuModuleGetFunction),
		KVF_REQ(cuLaunchKernel),
#undef KVF_REQ
	};
	for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
		int st = kvf_lookup(&g, req[i].name, KVF_ABI, req[i].slot);
		if (st != 0) {
			snprintf(err, errlen, "required entry point %s (CUDA %d.%d ABI) %s", req[i].name, KVF_ABI / 1000,
			         (KVF_ABI % 1000) / 10,
			         st == 2 ? "needs a newer driver" : "not found in the driver library");
			return -1;
		}
	}
	if (d->cuDriverGetVersion(&d->version) != KVF_CUDA_SUCCESS) {
		d->version = 0;
	}

	// cuMemcpyBatchAsync changed its ABI: CUDA 12.8 has a size_t *failIdx
	// before the stream, CUDA 13.0 (cuMemcpyBatchAsync_v2) does not. The
	// version we request decides which one we get, so request the newest
	// this driver has and remember which ABI that is.
	void *p = NULL;
	if (batch_max <= 0) batch_max = d->version;
	if (d->version >= 13000 && batch_max >= 13000 && kvf_lookup(&g, "cuMemcpyBatchAsync", 13000, &p) == 0) {
		d->cuMemcpyBatchAsync_13000 = p;
		d->batch_abi = KVF_BATCH_13000;
	} else if (d->version >= 12080 && batch_max >= 12080 && kvf_lookup(&g, "cuMemcpyBatchAsync", 12080, &p) == 0) {
		d->cuMemcpyBatchAsync_12080 = p;
		d->batch_abi = KVF_BATCH_12080;
	}
	return 0;
}

// ---- context handling ----------------------------------------------------

typedef struct {
	kvf_CUcontext prev;
	int swapped;
} kvf_ctxsave;

static kvf_CUresult kvf_enter(kvf_driver *d, kvf_CUcontext ctx, kvf_ctxsave *s) {
	s->prev = NULL;
	s->swapped = 0;
	if (ctx == NULL) {
		return KVF_CUDA_SUCCESS;
	}
	kvf_CUresult r = d->cuCtxGetCurrent(&s->prev);
	if (r != KVF_CUDA_SUCCESS) {
		return r;
	}
	if (s->prev == ctx) {
		return KVF_CUDA_SUCCESS;
	}
	r = d->cuCtxSetCurrent(ctx);
	if (r == KVF_CUDA_SUCCESS) {
		s->swapped = 1;
	}
	return r;
}

static void kvf_leave(kvf_driver *d, kvf_ctxsave *s) {
	if (s->swapped) {
		d->cuCtxSetCurrent(s->prev);
	}
}

// KVF_CTX runs expr with ctx current and returns its result.
#define KVF_CTX(d, ctx, expr)                         \
	do {                                              \
		kvf_ctxsave s_;                               \
		kvf_CUresult r_ = kvf_enter((d), (kvf_CUcontext)(ctx), &s_); \
		if (r_ != KVF_CUDA_SUCCESS) return r_;        \
		r_ = (expr);                                  \
		kvf_leave((d), &s_);                          \
		return r_;                                    \
	} while (0)

// ---- no context ------------------------------------------------------------

kvf_CUresult kvf_init(kvf_driver *d) { return d->cuInit(0); }

kvf_CUresult kvf_device_count(kvf_driver *d, int *n) { return d->cuDeviceGetCount(n); }

kvf_CUresult kvf_device_name(kvf_driver *d, int ordinal, char *name, int len) {
	kvf_CUdevice dev;
	kvf_CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	return d->cuDeviceGetName(name, len, dev);
}

kvf_CUresult kvf_device_attribute(kvf_driver *d, int ordinal, int attr, int *v) {
	kvf_CUdevice dev;
	kvf_CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	return d->cuDeviceGetAttribute(v, attr, dev);
}

kvf_CUresult kvf_device_total_mem(kvf_driver *d, int ordinal, uint64_t *bytes) {
	kvf_CUdevice dev;
	kvf_CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	size_t n = 0;
	r = d->cuDeviceTotalMem(&n, dev);
	*bytes = n;
	return r;
}

kvf_CUresult kvf_can_access_peer(kvf_driver *d, int ordinal, int peer, int *v) {
	kvf_CUdevice a, b;
	kvf_CUresult r = d->cuDeviceGet(&a, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	r = d->cuDeviceGet(&b, peer);
	if (r != KVF_CUDA_SUCCESS) return r;
	return d->cuDeviceCanAccessPeer(v, a, b);
}

kvf_CUresult kvf_primary_ctx_retain(kvf_driver *d, int ordinal, uintptr_t *ctx) {
	kvf_CUdevice dev;
	kvf_CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	return d->cuDevicePrimaryCtxRetain((kvf_CUcontext *)ctx, dev);
}

kvf_CUresult kvf_primary_ctx_release(kvf_driver *d, int ordinal) {
	kvf_CUdevice dev;
	kvf_CUresult r = d->cuDeviceGet(&dev, ordinal);
	if (r != KVF_CUDA_SUCCESS) return r;
	return d->cuDevicePrimaryCtxRelease(dev);
}

// ---- VMM -------------------------------------------------------------------

static void kvf_prop(kvf_CUmemAllocationProp *p, int loctype, int locid, int htypes) {
	memset(p, 0, sizeof *p);
	p->type = KVF_CU_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = htypes;
	p->location.type = loctype;
	p->location.id = locid;
}

kvf_CUresult kvf_mem_granularity(kvf_driver *d, uintptr_t ctx, int loctype, int locid, int htypes, int opt,
                                 size_t *g) {
	kvf_CUmemAllocationProp p;
	kvf_prop(&p, loctype, locid, htypes);
	KVF_CTX(d, ctx, d->cuMemGetAllocationGranularity(g, &p, opt));
}

kvf_CUresult kvf_mem_create(kvf_driver *d, uintptr_t ctx, size_t size, int loctype, int locid, int htypes,
                            kvf_CUmemGenericAllocationHandle *h) {
	kvf_CUmemAllocationProp p;
	kvf_prop(&p, loctype, locid, htypes);
	KVF_CTX(d, ctx, d->cuMemCreate(h, size, &p, 0));
}

kvf_CUresult kvf_mem_release(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h) {
	KVF_CTX(d, ctx, d->cuMemRelease(h));
}

kvf_CUresult kvf_mem_address_reserve(kvf_driver *d, uintptr_t ctx, size_t size, size_t align, kvf_CUdeviceptr *p) {
	KVF_CTX(d, ctx, d->cuMemAddressReserve(p, size, align, 0, 0));
}

kvf_CUresult kvf_mem_address_free(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size) {
	KVF_CTX(d, ctx, d->cuMemAddressFree(p, size));
}

kvf_CUresult kvf_mem_map(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size, size_t off,
                         kvf_CUmemGenericAllocationHandle h) {
	KVF_CTX(d, ctx, d->cuMemMap(p, size, off, h, 0));
}

kvf_CUresult kvf_mem_unmap(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size) {
	KVF_CTX(d, ctx, d->cuMemUnmap(p, size));
}

kvf_CUresult kvf_mem_set_access(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p, size_t size,
                                const kvf_CUmemAccessDesc *descs, size_t n) {
	KVF_CTX(d, ctx, d->cuMemSetAccess(p, size, descs, n));
}

kvf_CUresult kvf_mem_export_fd(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h, int *fd) {
	*fd = -1;
	KVF_CTX(d, ctx, d->cuMemExportToShareableHandle(fd, h, KVF_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
}

kvf_CUresult kvf_mem_export_fabric(kvf_driver *d, uintptr_t ctx, kvf_CUmemGenericAllocationHandle h,
                                   kvf_CUmemFabricHandle *fh) {
	KVF_CTX(d, ctx, d->cuMemExportToShareableHandle(fh, h, KVF_CU_MEM_HANDLE_TYPE_FABRIC, 0));
}

kvf_CUresult kvf_mem_import_fd(kvf_driver *d, uintptr_t ctx, int fd, kvf_CUmemGenericAllocationHandle *h) {
	// For POSIX fds the "handle" is the fd value itself, cast to a pointer.
	KVF_CTX(d, ctx,
	        d->cuMemImportFromShareableHandle(h, (void *)(uintptr_t)fd, KVF_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
}

kvf_CUresult kvf_mem_import_fabric(kvf_driver *d, uintptr_t ctx, const kvf_CUmemFabricHandle *fh,
                                   kvf_CUmemGenericAllocationHandle *h) {
	kvf_CUmemFabricHandle copy = *fh;
	KVF_CTX(d, ctx, d->cuMemImportFromShareableHandle(h, &copy, KVF_CU_MEM_HANDLE_TYPE_FABRIC));
}

// ---- plain memory ------------------------------------------------------------

kvf_CUresult kvf_mem_alloc(kvf_driver *d, uintptr_t ctx, size_t size, kvf_CUdeviceptr *p) {
	KVF_CTX(d, ctx, d->cuMemAlloc(p, size));
}

kvf_CUresult kvf_mem_free(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr p) { KVF_CTX(d, ctx, d->cuMemFree(p)); }

kvf_CUresult kvf_mem_host_register(kvf_driver *d, uintptr_t ctx, uintptr_t p, size_t size, unsigned int flags) {
	KVF_CTX(d, ctx, d->cuMemHostRegister((void *)p, size, flags));
}

kvf_CUresult kvf_mem_host_unregister(kvf_driver *d, uintptr_t ctx, uintptr_t p) {
	KVF_CTX(d, ctx, d->cuMemHostUnregister((void *)p));
}

kvf_CUresult kvf_memcpy_htod(kvf_driver *d, uintptr_t ctx, kvf_CUdeviceptr dst, const void *src, size_t n) {
	KVF_CTX(d, ctx, d->cuMemcpyHtoD(dst, src, n));
}

kvf_CUresult kvf_memcpy_dtoh(kvf_driver *d, uintptr_t ctx, void *dst, kvf_CUdeviceptr src, size_t n) {
	KVF_CTX(d, ctx, d->cuMemcpyDtoH(dst, src, n));
}

static kvf_CUresult kvf_memtypes(kvf_driver *d, const kvf_CUdeviceptr *ptrs, unsigned int *types, size_t n,
                                 size_t *failed) {
	for (size_t i = 0; i < n; i++) {
		// CUmemorytype is an enum: read it into an int, never straight into
		// the caller's array (whose element size is the Go side's choice).
		int t = 0;
		kvf_CUresult r = d->cuPointerGetAttribute(&t, KVF_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptrs[i]);
		if (r == KVF_CUDA_ERROR_INVALID_VALUE) {
			t = 0; // not allocated, mapped or registered through CUDA
		} else if (r != KVF_CUDA_SUCCESS) {
			*failed = i;
			return r;
		}
		types[i] = (unsigned int)t;
	}
	return KVF_CUDA_SUCCESS;
}

kvf_CUresult kvf_pointer_memory_types(kvf_driver *d, uintptr_t ctx, const kvf_CUdeviceptr *ptrs, unsigned int *types,
                                      size_t n, size_t *failed) {
	*failed = 0;
	KVF_CTX(d, ctx, kvf_memtypes(d, ptrs, types, n, failed));
}

static kvf_CUresult kvf_ranges(kvf_driver *d, const kvf_CUdeviceptr *ptrs, unsigned long long *ranges, size_t n,
                               size_t *failed) {
	for (size_t i = 0; i < n; i++) {
		kvf_CUdeviceptr start = 0;
		size_t size = 0;
		kvf_CUresult r = d->cuPointerGetAttribute(&start, KVF_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptrs[i]);
		if (r == KVF_CUDA_SUCCESS) {
			r = d->cuPointerGetAttribute(&size, KVF_CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptrs[i]);
		}
		if (r == KVF_CUDA_ERROR_INVALID_VALUE) {
			start = 0; // not allocated, mapped or registered through CUDA
			size = 0;
		} else if (r != KVF_CUDA_SUCCESS) {
			*failed = i;
			return r;
		}
		ranges[2 * i] = (unsigned long long)start;
		ranges[2 * i + 1] = (unsigned long long)size;
	}
	return KVF_CUDA_SUCCESS;
}

kvf_CUresult kvf_pointer_ranges(kvf_driver *d, uintptr_t ctx, const kvf_CUdeviceptr *ptrs, unsigned long long *ranges,
                                size_t n, size_t *failed) {
	*failed = 0;
	KVF_CTX(d, ctx, kvf_ranges(d, ptrs, ranges, n, failed));
}

// ---- streams and events ------------------------------------------------------

kvf_CUresult kvf_stream_create(kvf_driver *d, uintptr_t ctx, unsigned int flags, uintptr_t *s) {
	KVF_CTX(d, ctx, d->cuStreamCreate((kvf_CUstream *)s, flags));
}

kvf_CUresult kvf_stream_destroy(kvf_driver *d, uintptr_t ctx, uintptr_t s) {
	KVF_CTX(d, ctx, d->cuStreamDestroy((kvf_CUstream)s));
}

kvf_CUresult kvf_stream_synchronize(kvf_driver *d, uintptr_t ctx, uintptr_t s) {
	KVF_CTX(d, ctx, d->cuStreamSynchronize((kvf_CUstream)s));
}

kvf_CUresult kvf_stream_wait_event(kvf_driver *d, uintptr_t ctx, uintptr_t s, uintptr_t e) {
	KVF_CTX(d, ctx, d->cuStreamWaitEvent((kvf_CUstream)s, (kvf_CUevent)e, 0));
}

kvf_CUresult kvf_event_create(kvf_driver *d, uintptr_t ctx, unsigned int flags, uintptr_t *e) {
	KVF_CTX(d, ctx, d->cuEventCreate((kvf_CUevent *)e, flags));
}

kvf_CUresult kvf_event_destroy(kvf_driver *d, uintptr_t ctx, uintptr_t e) {
	KVF_CTX(d, ctx, d->cuEventDestroy((kvf_CUevent)e));
}

kvf_CUresult kvf_event_record(kvf_driver *d, uintptr_t ctx, uintptr_t e, uintptr_t s) {
	KVF_CTX(d, ctx, d->cuEventRecord((kvf_CUevent)e, (kvf_CUstream)s));
}

kvf_CUresult kvf_event_synchronize(kvf_driver *d, uintptr_t ctx, uintptr_t e) {
	KVF_CTX(d, ctx, d->cuEventSynchronize((kvf_CUevent)e));
}

kvf_CUresult kvf_event_query(kvf_driver *d, uintptr_t ctx, uintptr_t e) { KVF_CTX(d, ctx, d->cuEventQuery((kvf_CUevent)e)); }

kvf_CUresult kvf_event_elapsed(kvf_driver *d, uintptr_t ctx, uintptr_t a, uintptr_t b, float *ms) {
	KVF_CTX(d, ctx, d->cuEventElapsedTime(ms, (kvf_CUevent)a, (kvf_CUevent)b));
}

// ---- copies --------------------------------------------------------------------

static kvf_CUresult kvf_memcpy_loop(kvf_driver *d, const kvf_copy *c, size_t n, uintptr_t s, size_t *failed) {
	for (size_t i = 0; i < n; i++) {
		kvf_CUresult r = d->cuMemcpyAsync(c[i].dst, c[i].src, c[i].len, (kvf_CUstream)s);
		if (r != KVF_CUDA_SUCCESS) {
			*failed = i;
			return r;
		}
	}
	return KVF_CUDA_SUCCESS;
}

kvf_CUresult kvf_memcpy_async(kvf_driver *d, uintptr_t ctx, const kvf_copy *c, size_t n, uintptr_t s,
                              size_t *failed) {
	*failed = 0;
	KVF_CTX(d, ctx, kvf_memcpy_loop(d, c, n, s, failed));
}

static kvf_CUresult kvf_batch(kvf_driver *d, const kvf_copy *c, size_t n, uintptr_t s) {
	if (d->batch_abi == KVF_BATCH_NONE) return KVF_CUDA_ERROR_NOT_SUPPORTED;
	if (n == 0) return KVF_CUDA_SUCCESS;
	// The driver wants three parallel arrays; build them in C memory.
	kvf_CUdeviceptr *arr = malloc(3 * n * sizeof(kvf_CUdeviceptr));
	if (arr == NULL) return KVF_CUDA_ERROR_OUT_OF_MEMORY;
	kvf_CUdeviceptr *dsts = arr, *srcs = arr + n;
	size_t *sizes = (size_t *)(arr + 2 * n);
	for (size_t i = 0; i < n; i++) {
		dsts[i] = c[i].dst;
		srcs[i] = c[i].src;
		sizes[i] = (size_t)c[i].len;
	}
	// One attribute for all copies. Location hints stay zero (INVALID):
	// they only matter for managed memory, which kvfabric does not copy.
	kvf_CUmemcpyAttributes attr;
	memset(&attr, 0, sizeof attr);
	attr.srcAccessOrder = KVF_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	attr.flags = KVF_CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
	size_t attrIdx = 0;
	kvf_CUresult r;
	if (d->batch_abi == KVF_BATCH_13000) {
		r = d->cuMemcpyBatchAsync_13000(dsts, srcs, sizes, n, &attr, &attrIdx, 1, (kvf_CUstream)s);
	} else {
		size_t failIdx = 0;
		r = d->cuMemcpyBatchAsync_12080(dsts, srcs, sizes, n, &attr, &attrIdx, 1, &failIdx, (kvf_CUstream)s);
	}
	free(arr);
	return r;
}

kvf_CUresult kvf_memcpy_batch_async(kvf_driver *d, uintptr_t ctx, const kvf_copy *c, size_t n, uintptr_t s) {
	KVF_CTX(d, ctx, kvf_batch(d, c, n, s));
}

// ---- modules and kernels -------------------------------------------------------

static kvf_CUresult kvf_load(kvf_driver *d, const void *image, size_t len, uintptr_t *m) {
	// PTX must be NUL-terminated; a cubin does not mind the extra byte.
	char *buf = malloc(len + 1);
	if (buf == NULL) return KVF_CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(buf, image, len);
	buf[len] = 0;
	kvf_CUresult r = d->cuModuleLoadData((kvf_CUmodule *)m, buf);
	free(buf);
	return r;
}

kvf_CUresult kvf_module_load_data(kvf_driver *d, uintptr_t ctx, const void *image, size_t len, uintptr_t *m) {
	KVF_CTX(d, ctx, kvf_load(d, image, len, m));
}

kvf_CUresult kvf_module_unload(kvf_driver *d, uintptr_t ctx, uintptr_t m) {
	KVF_CTX(d, ctx, d->cuModuleUnload((kvf_CUmodule)m));
}

kvf_CUresult kvf_module_get_function(kvf_driver *d, uintptr_t ctx, uintptr_t m, const char *name,
                                     uintptr_t *f) {
	KVF_CTX(d, ctx, d->cuModuleGetFunction((kvf_CUfunction *)f, (kvf_CUmodule)m, name));
}

static kvf_CUresult kvf_launch(kvf_driver *d, uintptr_t f, const unsigned int dims[6], unsigned int shmem,
                               uintptr_t s, const unsigned char *buf, const uint64_t *offs, const uint64_t *lens,
                               size_t n) {
	// C copies of each parameter, each 16-byte aligned, plus the void* array.
	size_t total = 0;
	for (size_t i = 0; i < n; i++) total += (lens[i] + 15) & ~(size_t)15;
	void **ptrs = NULL;
	unsigned char *copy = NULL;
	if (n > 0) {
		ptrs = malloc(n * sizeof(void *));
		copy = aligned_alloc(16, total > 0 ? total : 16);
		if (ptrs == NULL || copy == NULL) {
			free(ptrs);
			free(copy);
			return KVF_CUDA_ERROR_OUT_OF_MEMORY;
		}
		size_t at = 0;
		for (size_t i = 0; i < n; i++) {
			memcpy(copy + at, buf + offs[i], lens[i]);
			ptrs[i] = copy + at;
			at += (lens[i] + 15) & ~(size_t)15;
		}
	}
	// cuLaunchKernel copies the parameter values before it returns.
	kvf_CUresult r = d->cuLaunchKernel((kvf_CUfunction)f, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], shmem, (kvf_CUstream)s, ptrs, NULL);
	free(ptrs);
	free(copy);
	return r;
}

kvf_CUresult kvf_launch_kernel(kvf_driver *d, uintptr_t ctx, uintptr_t f, const unsigned int dims[6],
                               unsigned int shmem, uintptr_t s, const unsigned char *buf, const uint64_t *offs,
                               const uint64_t *lens, size_t n) {
	KVF_CTX(d, ctx, kvf_launch(d, f, dims, shmem, s, buf, offs, lens, n));
}
