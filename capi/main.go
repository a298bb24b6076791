//go:build cgo && linux

// Command capi is kvfabric's C ABI, built as a shared library:
//
//	go build -buildmode=c-shared -o libkvfabric.so ./capi
//
// The contract is the hand-written kvfabric.h beside this file. Each export
// converts C types and calls one function of internal/cabi, where the logic
// (handles, status codes, last error, batch decoding) lives and is tested
// from Go. Every export also defers recoverStatus so no panic reaches C.
package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cabi"
)

func main() {}

func bytesOf(p *C.char, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n))
}

//export kvfabric_abi_version
func kvfabric_abi_version() C.int32_t { return cabi.ABIVersion }

// version is kvfabric_version's answer, allocated once and never freed: the
// header promises a string that lives as long as the process.
var version = C.CString(cabi.Version())

//export kvfabric_version
func kvfabric_version() *C.char { return version }

//export kvfabric_open
func kvfabric_open(cfg *C.char, cfgLen C.size_t, handle *C.int64_t, errbuf *C.char, errcap C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	h, s, msg := cabi.Open(bytesOf(cfg, cfgLen))
	if handle != nil {
		*handle = C.int64_t(h)
	}
	if buf := bytesOf(errbuf, errcap); len(buf) > 0 {
		n := copy(buf[:len(buf)-1], msg)
		buf[n] = 0
	}
	return C.int32_t(s)
}

//export kvfabric_close
func kvfabric_close(h C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Close(int64(h)))
}

//export kvfabric_cleanup_pending
func kvfabric_cleanup_pending(h C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.CleanupPending(int64(h)))
}

//export kvfabric_last_error
func kvfabric_last_error(h C.int64_t, buf *C.char, capacity C.size_t) (n C.size_t) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	return C.size_t(cabi.CopyLastError(int64(h), bytesOf(buf, capacity)))
}

//export kvfabric_put
func kvfabric_put(h C.int64_t, key *C.char, keyLen C.size_t, ptrs, lens *C.uint64_t, nparts C.uint32_t,
	stream C.uintptr_t, replicas C.int32_t, flags C.uint32_t, preferred *C.char, preferredLen C.size_t,
	softPinTTLms C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Put(int64(h), unsafe.Pointer(key), uint64(keyLen), unsafe.Pointer(ptrs), unsafe.Pointer(lens),
		uint32(nparts), uintptr(stream), int32(replicas), uint32(flags), unsafe.Pointer(preferred), uint64(preferredLen),
		uint64(softPinTTLms)))
}

//export kvfabric_get
func kvfabric_get(h C.int64_t, key *C.char, keyLen C.size_t, ptrs, lens *C.uint64_t, nparts C.uint32_t,
	stream C.uintptr_t, nread *C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Get(int64(h), unsafe.Pointer(key), uint64(keyLen), unsafe.Pointer(ptrs), unsafe.Pointer(lens),
		uint32(nparts), uintptr(stream), (*uint64)(unsafe.Pointer(nread))))
}

//export kvfabric_batch_put
func kvfabric_batch_put(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t, stream C.uintptr_t, replicas C.int32_t, flags C.uint32_t, preferred *C.char,
	preferredLen C.size_t, softPinTTLms C.uint64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchPut(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts), uintptr(stream), int32(replicas),
		uint32(flags), unsafe.Pointer(preferred), uint64(preferredLen), uint64(softPinTTLms), unsafe.Pointer(statuses)))
}

//export kvfabric_batch_get
func kvfabric_batch_get(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t, stream C.uintptr_t, nread *C.uint64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchGet(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts), uintptr(stream),
		unsafe.Pointer(nread), unsafe.Pointer(statuses)))
}

//export kvfabric_batch_put_packed
func kvfabric_batch_put_packed(h C.int64_t, n C.size_t, keys *C.char, keysLen C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t, stream C.uintptr_t, replicas C.int32_t, flags C.uint32_t, preferred *C.char,
	preferredLen C.size_t, softPinTTLms C.uint64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchPutPacked(int64(h), uint64(n), unsafe.Pointer(keys), uint64(keysLen),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts), uintptr(stream), int32(replicas),
		uint32(flags), unsafe.Pointer(preferred), uint64(preferredLen), uint64(softPinTTLms), unsafe.Pointer(statuses)))
}

//export kvfabric_batch_get_packed
func kvfabric_batch_get_packed(h C.int64_t, n C.size_t, keys *C.char, keysLen C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t, stream C.uintptr_t, nread *C.uint64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchGetPacked(int64(h), uint64(n), unsafe.Pointer(keys), uint64(keysLen),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts), uintptr(stream),
		unsafe.Pointer(nread), unsafe.Pointer(statuses)))
}

//export kvfabric_put_stream_begin
func kvfabric_put_stream_begin(h C.int64_t, n C.size_t, stream C.uintptr_t, replicas C.int32_t, flags C.uint32_t,
	preferred *C.char, preferredLen C.size_t, softPinTTLms C.uint64_t, out *C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutStreamBegin(int64(h), uint64(n), uintptr(stream), int32(replicas), uint32(flags),
		unsafe.Pointer(preferred), uint64(preferredLen), uint64(softPinTTLms), (*int64)(unsafe.Pointer(out))))
}

//export kvfabric_put_stream_feed
func kvfabric_put_stream_feed(h, ps C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutStreamFeed(int64(h), int64(ps), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts)))
}

//export kvfabric_put_stream_feed_packed
func kvfabric_put_stream_feed_packed(h, ps C.int64_t, n C.size_t, keys *C.char, keysLen C.size_t, ptrs, lens *C.uint64_t,
	parts *C.uint32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutStreamFeedPacked(int64(h), int64(ps), uint64(n), unsafe.Pointer(keys), uint64(keysLen),
		unsafe.Pointer(ptrs), unsafe.Pointer(lens), unsafe.Pointer(parts)))
}

//export kvfabric_put_stream_abort
func kvfabric_put_stream_abort(h, ps C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutStreamAbort(int64(h), int64(ps)))
}

//export kvfabric_put_stream_end
func kvfabric_put_stream_end(h, ps C.int64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutStreamEnd(int64(h), int64(ps), unsafe.Pointer(statuses)))
}

//export kvfabric_put_bytes
func kvfabric_put_bytes(h C.int64_t, key *C.char, keyLen C.size_t, data unsafe.Pointer, n C.uint64_t,
	replicas C.int32_t, flags C.uint32_t, preferred *C.char, preferredLen C.size_t, softPinTTLms C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.PutBytes(int64(h), unsafe.Pointer(key), uint64(keyLen), data, uint64(n),
		int32(replicas), uint32(flags), unsafe.Pointer(preferred), uint64(preferredLen), uint64(softPinTTLms)))
}

//export kvfabric_get_bytes
func kvfabric_get_bytes(h C.int64_t, key *C.char, keyLen C.size_t, buf unsafe.Pointer, bufCap C.uint64_t,
	size *C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.GetBytes(int64(h), unsafe.Pointer(key), uint64(keyLen), buf, uint64(bufCap),
		(*uint64)(unsafe.Pointer(size))))
}

//export kvfabric_exists
func kvfabric_exists(h C.int64_t, key *C.char, keyLen C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Exists(int64(h), unsafe.Pointer(key), uint64(keyLen)))
}

//export kvfabric_batch_exists
func kvfabric_batch_exists(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, lease C.int32_t, out *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchExists(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		lease != 0, unsafe.Pointer(out)))
}

//export kvfabric_batch_remove
func kvfabric_batch_remove(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, force C.int32_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchRemove(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens), force != 0,
		unsafe.Pointer(statuses)))
}

//export kvfabric_remove_matching
func kvfabric_remove_matching(h C.int64_t, pattern *C.char, patternLen C.size_t, force C.int32_t, removed *C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.RemoveMatching(int64(h), unsafe.Pointer(pattern), uint64(patternLen), force != 0,
		(*uint64)(unsafe.Pointer(removed))))
}

//export kvfabric_batch_get_ranges
func kvfabric_batch_get_ranges(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, dsts, srcs, lens *C.uint64_t,
	counts *C.uint32_t, stream C.uintptr_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.BatchGetRanges(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(dsts), unsafe.Pointer(srcs), unsafe.Pointer(lens), unsafe.Pointer(counts), uintptr(stream),
		unsafe.Pointer(statuses)))
}

//export kvfabric_replicas
func kvfabric_replicas(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, buf *C.char, bufCap C.size_t,
	needed *C.uint64_t, statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Replicas(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(buf), uint64(bufCap), (*uint64)(unsafe.Pointer(needed)), unsafe.Pointer(statuses)))
}

//export kvfabric_acquire
func kvfabric_acquire(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, views *C.int64_t, addrs, sizes *C.uint64_t,
	statuses *C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Acquire(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		(*int64)(unsafe.Pointer(views)), unsafe.Pointer(addrs), unsafe.Pointer(sizes), unsafe.Pointer(statuses)))
}

//export kvfabric_views_check
func kvfabric_views_check(h, views C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.ViewsCheck(int64(h), int64(views)))
}

//export kvfabric_views_release
func kvfabric_views_release(h, views C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.ViewsRelease(int64(h), int64(views)))
}

//export kvfabric_views_gather
func kvfabric_views_gather(h, views C.int64_t, hostRows, hostCounts *C.uint64_t, devRows C.uint64_t, perKey, elemBytes C.uint32_t,
	bad, rowBytes, dst, dstLen C.uint64_t, stream C.uintptr_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.ViewsGather(int64(h), int64(views), unsafe.Pointer(hostRows), unsafe.Pointer(hostCounts),
		uint64(devRows), uint32(perKey), uint32(elemBytes), uint64(bad), uint64(rowBytes), uint64(dst), uint64(dstLen),
		uintptr(stream)))
}

//export kvfabric_gather
func kvfabric_gather(h C.int64_t, n C.size_t, keys **C.char, keyLens *C.size_t, hostRows, hostCounts *C.uint64_t,
	devRows C.uint64_t, perKey, elemBytes C.uint32_t, bad, rowBytes, dst, dstLen C.uint64_t, stream C.uintptr_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Gather(int64(h), uint64(n), unsafe.Pointer(keys), unsafe.Pointer(keyLens),
		unsafe.Pointer(hostRows), unsafe.Pointer(hostCounts), uint64(devRows), uint32(perKey), uint32(elemBytes),
		uint64(bad), uint64(rowBytes), uint64(dst), uint64(dstLen), uintptr(stream)))
}

//export kvfabric_size
func kvfabric_size(h C.int64_t, key *C.char, keyLen C.size_t, size *C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Size(int64(h), unsafe.Pointer(key), uint64(keyLen), (*uint64)(unsafe.Pointer(size))))
}

//export kvfabric_remove
func kvfabric_remove(h C.int64_t, key *C.char, keyLen C.size_t, force C.int32_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Remove(int64(h), unsafe.Pointer(key), uint64(keyLen), force != 0))
}

//export kvfabric_remove_all
func kvfabric_remove_all(h C.int64_t, force C.int32_t, removed *C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.RemoveAll(int64(h), force != 0, (*uint64)(unsafe.Pointer(removed))))
}

//export kvfabric_register_buffer
func kvfabric_register_buffer(h C.int64_t, ptr C.uintptr_t, size C.uint64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.RegisterBuffer(int64(h), uintptr(ptr), uint64(size)))
}

//export kvfabric_unregister_buffer
func kvfabric_unregister_buffer(h C.int64_t, ptr C.uintptr_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.UnregisterBuffer(int64(h), uintptr(ptr)))
}

//export kvfabric_hostname
func kvfabric_hostname(h C.int64_t, buf *C.char, capacity C.size_t, n *C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Hostname(int64(h), bytesOf(buf, capacity), (*uint64)(unsafe.Pointer(n))))
}

//export kvfabric_driver
func kvfabric_driver(h C.int64_t, buf *C.char, capacity C.size_t, n *C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.DriverName(int64(h), bytesOf(buf, capacity), (*uint64)(unsafe.Pointer(n))))
}

//export kvfabric_handle_type
func kvfabric_handle_type(h C.int64_t, buf *C.char, capacity C.size_t, n *C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.HandleType(int64(h), bytesOf(buf, capacity), (*uint64)(unsafe.Pointer(n))))
}

//export kvfabric_phases
func kvfabric_phases(h C.int64_t, out *C.uint64_t, n C.size_t) (st C.int32_t) {
	defer recoverStatus(&st)
	var vals []uint64
	if out != nil && n > 0 {
		vals = unsafe.Slice((*uint64)(unsafe.Pointer(out)), int(min(n, cabi.PhaseValues)))
	}
	return C.int32_t(cabi.Phases(int64(h), vals))
}

//export kvfabric_health
func kvfabric_health(h C.int64_t) (st C.int32_t) {
	defer recoverStatus(&st)
	return C.int32_t(cabi.Health(int64(h)))
}

// recoverStatus is deferred by every export: a panic in this layer becomes
// KVFABRIC_ERR_PANIC instead of crashing the host process.
func recoverStatus(st *C.int32_t) {
	if r := recover(); r != nil {
		*st = C.int32_t(cabi.Panicked(r))
	}
}
