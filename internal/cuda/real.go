//go:build cgo && linux

package cuda

/*
#cgo CFLAGS: -std=gnu11 -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The shim reads Go slices of these types in place; their layouts must be
// the C ones (a mismatch fails to compile).
var (
	_ [unsafe.Sizeof(Copy{})]byte                     = [C.sizeof_kvf_copy]byte{}
	_ [unsafe.Sizeof(AccessDesc{})]byte               = [C.sizeof_kvf_CUmemAccessDesc]byte{}
	_ [unsafe.Offsetof(AccessDesc{}.Flags)]byte       = [unsafe.Offsetof(C.kvf_CUmemAccessDesc{}.flags)]byte{}
	_ [unsafe.Offsetof(Location{}.ID)]byte            = [unsafe.Offsetof(C.kvf_CUmemLocation{}.id)]byte{}
	_ [unsafe.Sizeof(FabricHandle{})]byte             = [C.sizeof_kvf_CUmemFabricHandle]byte{}
	_ [unsafe.Sizeof(Location{})]byte                 = [C.sizeof_kvf_CUmemLocation]byte{}
	_ [unsafe.Sizeof(AllocHandle(0))]byte             = [C.sizeof_kvf_CUmemGenericAllocationHandle]byte{}
	_ [unsafe.Sizeof(DevicePtr(0))]byte               = [C.sizeof_kvf_CUdeviceptr]byte{}
	_ [unsafe.Offsetof(Copy{}.Len)]byte               = [unsafe.Offsetof(C.kvf_copy{}.len)]byte{}
	_ [unsafe.Sizeof(AddrRange{})]byte                = [2 * C.sizeof_ulonglong]byte{}
	_ [unsafe.Offsetof(AddrRange{}.Size)]byte         = [C.sizeof_ulonglong]byte{}
	_ [unsafe.Sizeof(C.kvf_CUmemcpyAttributes{})]byte = [24]byte{}
	_ [unsafe.Sizeof(MemoryType(0))]byte              = [C.sizeof_uint]byte{}
)

// libs holds the dlopen handle of every library path opened in this process.
// A library is dlopened once and never dlclosed: CUDA does not support
// unloading, and handles of other Drivers may still be in use.
var libs struct {
	sync.Mutex
	m map[string]unsafe.Pointer // guarded by the mutex
}

func dlopen(path string) (unsafe.Pointer, error) {
	libs.Lock()
	defer libs.Unlock()
	if h, ok := libs.m[path]; ok {
		return h, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ebuf [1024]C.char
	h := C.kvf_dlopen(cpath, &ebuf[0], C.size_t(len(ebuf)))
	if h == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoDriver, C.GoString(&ebuf[0]))
	}
	if libs.m == nil {
		libs.m = make(map[string]unsafe.Pointer)
	}
	libs.m[path] = h
	return h, nil
}

// Open loads the CUDA driver (Options.LibPath, else $KVFABRIC_LIBCUDA, else
// libcuda.so.1), resolves its entry points through cuGetProcAddress at
// pinned ABI versions into a table owned by the returned Driver, and calls
// cuInit(0).
//
// Errors: ErrNoDriver (wrapped, with the dlerror text or the name of the
// missing required entry point) when the library is unusable; an *Error for
// cuInit (e.g. CUDA_ERROR_NO_DEVICE). Optional entry points that are missing
// show up in Capabilities instead.
func Open(opts Options) (Driver, error) {
	path := opts.LibPath
	if path == "" {
		path = os.Getenv(LibPathEnv)
	}
	if path == "" {
		path = DefaultLibPath
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	lib, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	d := &realDriver{tab: new(C.kvf_driver), path: path}
	var ebuf [512]C.char
	if C.kvf_resolve(d.tab, lib, C.int(opts.BatchABI), &ebuf[0], C.size_t(len(ebuf))) != 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrNoDriver, path, C.GoString(&ebuf[0]))
	}
	if r := C.kvf_init(d.tab); r != 0 {
		return nil, fmt.Errorf("cuda: %s: %w", path, &Error{Op: "cuInit", Result: Result(r)})
	}
	d.caps = Capabilities{MemcpyBatchAsync: d.tab.batch_abi != C.KVF_BATCH_NONE}
	d.live.init()
	log.Info("cuda driver loaded", "lib", path, "version", int(d.tab.version),
		"memcpy_batch_async", d.caps.MemcpyBatchAsync, "batch_abi", int(d.tab.batch_abi))
	return d, nil
}

// realDriver is the Driver over libcuda. It is safe for concurrent use: the
// function table is written once in Open and only read afterwards; the
// object tracker has its own lock.
type realDriver struct {
	tab    *C.kvf_driver // Go memory holding C pointers only; read-only after Open
	path   string
	caps   Capabilities
	closed atomic.Bool
	live   tracker
}

var (
	_ Driver        = (*realDriver)(nil)
	_ ObjectCounter = (*realDriver)(nil)
	_ DeviceMemory  = (*realDriver)(nil)
)

func (d *realDriver) Name() string               { return "cuda" }
func (d *realDriver) Capabilities() Capabilities { return d.caps }

// Close marks the Driver closed: later calls return ErrClosed. It frees
// nothing that an in-flight call uses (the function table is garbage
// collected, libcuda is never dlclosed), so it does not wait for them. It
// does not release the caller's CUDA objects. Close is idempotent.
func (d *realDriver) Close() error {
	d.closed.Store(true)
	return nil
}

// LiveObjects counts the objects created through this Driver and not yet
// destroyed through it. Exported POSIX fds and fabric handles are owned by
// the caller once returned and are not counted.
func (d *realDriver) LiveObjects() Objects { return d.live.snapshot() }

func cr(op string, r C.kvf_CUresult) error { return Check(op, Result(r)) }

func (d *realDriver) DriverVersion() (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	return int(d.tab.version), nil
}

func (d *realDriver) DeviceCount() (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var n C.int
	if err := cr("cuDeviceGetCount", C.kvf_device_count(d.tab, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (d *realDriver) DeviceName(dev Device) (string, error) {
	if d.closed.Load() {
		return "", ErrClosed
	}
	var buf [256]C.char
	if err := cr("cuDeviceGetName", C.kvf_device_name(d.tab, C.int(dev), &buf[0], C.int(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (d *realDriver) DeviceAttribute(dev Device, attr Attribute) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var v C.int
	if err := cr("cuDeviceGetAttribute", C.kvf_device_attribute(d.tab, C.int(dev), C.int(attr), &v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceTotalMem implements DeviceMemory (cuDeviceTotalMem_v2).
func (d *realDriver) DeviceTotalMem(dev Device) (uint64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var n C.uint64_t
	if err := cr("cuDeviceTotalMem", C.kvf_device_total_mem(d.tab, C.int(dev), &n)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

func (d *realDriver) CanAccessPeer(dev, peer Device) (bool, error) {
	if d.closed.Load() {
		return false, ErrClosed
	}
	var v C.int
	if err := cr("cuDeviceCanAccessPeer", C.kvf_can_access_peer(d.tab, C.int(dev), C.int(peer), &v)); err != nil {
		return false, err
	}
	return v != 0, nil
}

func (d *realDriver) PrimaryCtxRetain(dev Device) (Context, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var c C.uintptr_t
	if err := cr("cuDevicePrimaryCtxRetain", C.kvf_primary_ctx_retain(d.tab, C.int(dev), &c)); err != nil {
		return 0, err
	}
	d.live.add(kContext, uint64(dev))
	return Context(c), nil
}

func (d *realDriver) PrimaryCtxRelease(dev Device) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuDevicePrimaryCtxRelease", C.kvf_primary_ctx_release(d.tab, C.int(dev))); err != nil {
		return err
	}
	d.live.remove(kContext, uint64(dev))
	return nil
}

func (d *realDriver) MemGetAllocationGranularity(ctx Context, prop AllocProp, opt GranularityOption) (uint64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var g C.size_t
	r := C.kvf_mem_granularity(d.tab, C.uintptr_t(ctx), C.int(prop.Location.Type), C.int(prop.Location.ID),
		C.int(prop.HandleTypes), C.int(opt), &g)
	if err := cr("cuMemGetAllocationGranularity", r); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

func (d *realDriver) MemCreate(ctx Context, size uint64, prop AllocProp) (AllocHandle, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var h C.kvf_CUmemGenericAllocationHandle
	r := C.kvf_mem_create(d.tab, C.uintptr_t(ctx), C.size_t(size), C.int(prop.Location.Type),
		C.int(prop.Location.ID), C.int(prop.HandleTypes), &h)
	if err := cr("cuMemCreate", r); err != nil {
		return 0, err
	}
	d.live.add(kAlloc, uint64(h))
	return AllocHandle(h), nil
}

func (d *realDriver) MemRelease(ctx Context, h AllocHandle) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemRelease", C.kvf_mem_release(d.tab, C.uintptr_t(ctx), C.kvf_CUmemGenericAllocationHandle(h))); err != nil {
		return err
	}
	if !d.live.remove(kAlloc, uint64(h)) {
		d.live.remove(kImport, uint64(h))
	}
	return nil
}

func (d *realDriver) MemAddressReserve(ctx Context, size, alignment uint64) (DevicePtr, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var p C.kvf_CUdeviceptr
	if err := cr("cuMemAddressReserve", C.kvf_mem_address_reserve(d.tab, C.uintptr_t(ctx), C.size_t(size), C.size_t(alignment), &p)); err != nil {
		return 0, err
	}
	d.live.add(kReservation, uint64(p))
	return DevicePtr(p), nil
}

func (d *realDriver) MemAddressFree(ctx Context, ptr DevicePtr, size uint64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemAddressFree", C.kvf_mem_address_free(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(ptr), C.size_t(size))); err != nil {
		return err
	}
	d.live.remove(kReservation, uint64(ptr))
	return nil
}

func (d *realDriver) MemMap(ctx Context, ptr DevicePtr, size, offset uint64, h AllocHandle) error {
	if d.closed.Load() {
		return ErrClosed
	}
	r := C.kvf_mem_map(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(ptr), C.size_t(size), C.size_t(offset),
		C.kvf_CUmemGenericAllocationHandle(h))
	if err := cr("cuMemMap", r); err != nil {
		return err
	}
	d.live.add(kMapping, uint64(ptr))
	return nil
}

func (d *realDriver) MemUnmap(ctx Context, ptr DevicePtr, size uint64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemUnmap", C.kvf_mem_unmap(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(ptr), C.size_t(size))); err != nil {
		return err
	}
	d.live.removeRange(kMapping, uint64(ptr), size)
	return nil
}

func (d *realDriver) MemSetAccess(ctx Context, ptr DevicePtr, size uint64, descs []AccessDesc) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if len(descs) == 0 {
		return &Error{Op: "cuMemSetAccess", Result: ErrorInvalidValue}
	}
	// descs has the layout of CUmemAccessDesc[] (checked at compile time);
	// the driver reads it during the call only.
	r := C.kvf_mem_set_access(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(ptr), C.size_t(size),
		(*C.kvf_CUmemAccessDesc)(unsafe.Pointer(&descs[0])), C.size_t(len(descs)))
	return cr("cuMemSetAccess", r)
}

func (d *realDriver) MemExportToFD(ctx Context, h AllocHandle) (int, error) {
	if d.closed.Load() {
		return -1, ErrClosed
	}
	var fd C.int
	if err := cr("cuMemExportToShareableHandle", C.kvf_mem_export_fd(d.tab, C.uintptr_t(ctx), C.kvf_CUmemGenericAllocationHandle(h), &fd)); err != nil {
		return -1, err
	}
	return int(fd), nil
}

func (d *realDriver) MemExportToFabric(ctx Context, h AllocHandle) (FabricHandle, error) {
	var fh FabricHandle
	if d.closed.Load() {
		return fh, ErrClosed
	}
	var c C.kvf_CUmemFabricHandle
	if err := cr("cuMemExportToShareableHandle", C.kvf_mem_export_fabric(d.tab, C.uintptr_t(ctx), C.kvf_CUmemGenericAllocationHandle(h), &c)); err != nil {
		return fh, err
	}
	for i := range fh {
		fh[i] = byte(c.data[i])
	}
	return fh, nil
}

func (d *realDriver) MemImportFromFD(ctx Context, fd int) (AllocHandle, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var h C.kvf_CUmemGenericAllocationHandle
	if err := cr("cuMemImportFromShareableHandle", C.kvf_mem_import_fd(d.tab, C.uintptr_t(ctx), C.int(fd), &h)); err != nil {
		return 0, err
	}
	d.live.add(kImport, uint64(h))
	return AllocHandle(h), nil
}

func (d *realDriver) MemImportFromFabric(ctx Context, fh FabricHandle) (AllocHandle, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var c C.kvf_CUmemFabricHandle
	for i := range fh {
		c.data[i] = C.uchar(fh[i])
	}
	var h C.kvf_CUmemGenericAllocationHandle
	if err := cr("cuMemImportFromShareableHandle", C.kvf_mem_import_fabric(d.tab, C.uintptr_t(ctx), &c, &h)); err != nil {
		return 0, err
	}
	d.live.add(kImport, uint64(h))
	return AllocHandle(h), nil
}

func (d *realDriver) MemAlloc(ctx Context, size uint64) (DevicePtr, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var p C.kvf_CUdeviceptr
	if err := cr("cuMemAlloc", C.kvf_mem_alloc(d.tab, C.uintptr_t(ctx), C.size_t(size), &p)); err != nil {
		return 0, err
	}
	d.live.add(kDevMem, uint64(p))
	return DevicePtr(p), nil
}

func (d *realDriver) MemFree(ctx Context, ptr DevicePtr) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemFree", C.kvf_mem_free(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(ptr))); err != nil {
		return err
	}
	d.live.remove(kDevMem, uint64(ptr))
	return nil
}

func (d *realDriver) MemHostRegister(ctx Context, p uintptr, size uint64, flags uint32) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemHostRegister", C.kvf_mem_host_register(d.tab, C.uintptr_t(ctx), C.uintptr_t(p), C.size_t(size), C.uint(flags))); err != nil {
		return err
	}
	d.live.add(kRegistration, uint64(p))
	return nil
}

func (d *realDriver) MemHostUnregister(ctx Context, p uintptr) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuMemHostUnregister", C.kvf_mem_host_unregister(d.tab, C.uintptr_t(ctx), C.uintptr_t(p))); err != nil {
		return err
	}
	d.live.remove(kRegistration, uint64(p))
	return nil
}

func (d *realDriver) PointerMemoryTypes(ctx Context, ptrs []DevicePtr, out []MemoryType) error {
	// out has the layout of unsigned int[] (checked at compile time).
	return d.pointerQuery(ptrs, len(out), func(failed *C.size_t) C.kvf_CUresult {
		return C.kvf_pointer_memory_types(d.tab, C.uintptr_t(ctx), (*C.kvf_CUdeviceptr)(unsafe.Pointer(&ptrs[0])),
			(*C.uint)(unsafe.Pointer(&out[0])), C.size_t(len(ptrs)), failed)
	})
}

func (d *realDriver) PointerRanges(ctx Context, ptrs []DevicePtr, out []AddrRange) error {
	// out has the layout of unsigned long long[2*len] (checked at compile
	// time).
	return d.pointerQuery(ptrs, len(out), func(failed *C.size_t) C.kvf_CUresult {
		return C.kvf_pointer_ranges(d.tab, C.uintptr_t(ctx), (*C.kvf_CUdeviceptr)(unsafe.Pointer(&ptrs[0])),
			(*C.ulonglong)(unsafe.Pointer(&out[0])), C.size_t(len(ptrs)), failed)
	})
}

// pointerQuery makes one cuPointerGetAttribute batch (call) over ptrs,
// whose answers fill nout results: closed, mismatched and empty batches
// are answered here; call's failing index names the pointer. ptrs and the
// results are pointer-free and used during the call only.
func (d *realDriver) pointerQuery(ptrs []DevicePtr, nout int, call func(failed *C.size_t) C.kvf_CUresult) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if nout != len(ptrs) {
		return fmt.Errorf("%d pointers, %d results: %w", len(ptrs), nout, &Error{Op: "cuPointerGetAttribute", Result: ErrorInvalidValue})
	}
	if len(ptrs) == 0 {
		return nil
	}
	var failed C.size_t
	if err := cr("cuPointerGetAttribute", call(&failed)); err != nil {
		return fmt.Errorf("pointer %d (%#x) of %d: %w", int(failed), uint64(ptrs[failed]), len(ptrs), err)
	}
	return nil
}

func (d *realDriver) MemcpyHtoD(ctx Context, dst DevicePtr, src []byte) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if len(src) == 0 {
		return nil
	}
	return cr("cuMemcpyHtoD", C.kvf_memcpy_htod(d.tab, C.uintptr_t(ctx), C.kvf_CUdeviceptr(dst),
		unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

func (d *realDriver) MemcpyDtoH(ctx Context, dst []byte, src DevicePtr) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if len(dst) == 0 {
		return nil
	}
	return cr("cuMemcpyDtoH", C.kvf_memcpy_dtoh(d.tab, C.uintptr_t(ctx), unsafe.Pointer(&dst[0]),
		C.kvf_CUdeviceptr(src), C.size_t(len(dst))))
}

func (d *realDriver) StreamCreate(ctx Context, flags uint32) (Stream, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var s C.uintptr_t
	if err := cr("cuStreamCreate", C.kvf_stream_create(d.tab, C.uintptr_t(ctx), C.uint(flags), &s)); err != nil {
		return 0, err
	}
	d.live.add(kStream, uint64(s))
	return Stream(s), nil
}

func (d *realDriver) StreamDestroy(ctx Context, s Stream) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuStreamDestroy", C.kvf_stream_destroy(d.tab, C.uintptr_t(ctx), C.uintptr_t(s))); err != nil {
		return err
	}
	d.live.remove(kStream, uint64(s))
	return nil
}

func (d *realDriver) StreamSynchronize(ctx Context, s Stream) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return cr("cuStreamSynchronize", C.kvf_stream_synchronize(d.tab, C.uintptr_t(ctx), C.uintptr_t(s)))
}

func (d *realDriver) StreamWaitEvent(ctx Context, s Stream, e Event) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return cr("cuStreamWaitEvent", C.kvf_stream_wait_event(d.tab, C.uintptr_t(ctx), C.uintptr_t(s), C.uintptr_t(e)))
}

func (d *realDriver) EventCreate(ctx Context, flags uint32) (Event, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var e C.uintptr_t
	if err := cr("cuEventCreate", C.kvf_event_create(d.tab, C.uintptr_t(ctx), C.uint(flags), &e)); err != nil {
		return 0, err
	}
	d.live.add(kEvent, uint64(e))
	return Event(e), nil
}

func (d *realDriver) EventDestroy(ctx Context, e Event) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuEventDestroy", C.kvf_event_destroy(d.tab, C.uintptr_t(ctx), C.uintptr_t(e))); err != nil {
		return err
	}
	d.live.remove(kEvent, uint64(e))
	return nil
}

func (d *realDriver) EventRecord(ctx Context, e Event, s Stream) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return cr("cuEventRecord", C.kvf_event_record(d.tab, C.uintptr_t(ctx), C.uintptr_t(e), C.uintptr_t(s)))
}

func (d *realDriver) EventSynchronize(ctx Context, e Event) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return cr("cuEventSynchronize", C.kvf_event_synchronize(d.tab, C.uintptr_t(ctx), C.uintptr_t(e)))
}

func (d *realDriver) EventQuery(ctx Context, e Event) (bool, error) {
	if d.closed.Load() {
		return false, ErrClosed
	}
	r := C.kvf_event_query(d.tab, C.uintptr_t(ctx), C.uintptr_t(e))
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	if err := cr("cuEventQuery", r); err != nil {
		return false, err
	}
	return true, nil
}

func (d *realDriver) EventElapsedTime(ctx Context, start, end Event) (float32, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	var ms C.float
	if err := cr("cuEventElapsedTime", C.kvf_event_elapsed(d.tab, C.uintptr_t(ctx), C.uintptr_t(start), C.uintptr_t(end), &ms)); err != nil {
		return 0, err
	}
	return float32(ms), nil
}

func (d *realDriver) MemcpyAsync(ctx Context, copies []Copy, s Stream) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if len(copies) == 0 {
		return nil
	}
	var failed C.size_t
	// copies has the layout of kvf_copy[] (checked at compile time) and is
	// read during the call only.
	r := C.kvf_memcpy_async(d.tab, C.uintptr_t(ctx), (*C.kvf_copy)(unsafe.Pointer(&copies[0])),
		C.size_t(len(copies)), C.uintptr_t(s), &failed)
	if err := cr("cuMemcpyAsync", r); err != nil {
		return fmt.Errorf("copy %d of %d: %w", int(failed), len(copies), err)
	}
	return nil
}

func (d *realDriver) MemcpyBatchAsync(ctx Context, copies []Copy, s Stream) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if !d.caps.MemcpyBatchAsync {
		return &Error{Op: "cuMemcpyBatchAsync", Result: ErrorNotSupported}
	}
	if len(copies) == 0 {
		return nil
	}
	r := C.kvf_memcpy_batch_async(d.tab, C.uintptr_t(ctx), (*C.kvf_copy)(unsafe.Pointer(&copies[0])),
		C.size_t(len(copies)), C.uintptr_t(s))
	return cr("cuMemcpyBatchAsync", r)
}

func (d *realDriver) ModuleLoadData(ctx Context, image []byte) (Module, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if len(image) == 0 {
		return 0, &Error{Op: "cuModuleLoadData", Result: ErrorInvalidValue}
	}
	var m C.uintptr_t
	if err := cr("cuModuleLoadData", C.kvf_module_load_data(d.tab, C.uintptr_t(ctx), unsafe.Pointer(&image[0]), C.size_t(len(image)), &m)); err != nil {
		return 0, err
	}
	d.live.add(kModule, uint64(m))
	return Module(m), nil
}

func (d *realDriver) ModuleUnload(ctx Context, m Module) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := cr("cuModuleUnload", C.kvf_module_unload(d.tab, C.uintptr_t(ctx), C.uintptr_t(m))); err != nil {
		return err
	}
	d.live.remove(kModule, uint64(m))
	return nil
}

func (d *realDriver) ModuleGetFunction(ctx Context, m Module, name string) (Function, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	if err := cr("cuModuleGetFunction", C.kvf_module_get_function(d.tab, C.uintptr_t(ctx), C.uintptr_t(m), cname, &f)); err != nil {
		return 0, err
	}
	return Function(f), nil
}

func (d *realDriver) LaunchKernel(ctx Context, f Function, grid, block Dim3, sharedMem uint32, s Stream, params [][]byte) error {
	if d.closed.Load() {
		return ErrClosed
	}
	// Flatten params into pointer-free Go memory; the shim copies each one
	// into C memory and builds the void* array there.
	total := 0
	for _, p := range params {
		total += len(p)
	}
	buf := make([]byte, 0, total+1)
	offs := make([]uint64, len(params)+1)
	lens := make([]uint64, len(params)+1)
	for i, p := range params {
		offs[i] = uint64(len(buf))
		lens[i] = uint64(len(p))
		buf = append(buf, p...)
	}
	buf = append(buf, 0) // never empty, so &buf[0] is valid
	dims := [6]C.uint{C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z)}
	r := C.kvf_launch_kernel(d.tab, C.uintptr_t(ctx), C.uintptr_t(f), &dims[0], C.uint(sharedMem), C.uintptr_t(s),
		(*C.uchar)(unsafe.Pointer(&buf[0])), (*C.uint64_t)(unsafe.Pointer(&offs[0])),
		(*C.uint64_t)(unsafe.Pointer(&lens[0])), C.size_t(len(params)))
	return cr("cuLaunchKernel", r)
}
