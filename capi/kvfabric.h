/*
 * kvfabric.h — the C ABI of kvfabric, a KV-cache store for LLM serving.
 *
 * Built from capi/ with `go build -buildmode=c-shared -o libkvfabric.so ./capi`.
 * This header is written by hand; it is the contract (the cgo-generated
 * libkvfabric.h is not installed).
 *
 * Model
 *   - kvfabric_open() returns an integer handle (> 0) for one Store; every
 *     other call takes it. Handles are never reused within a process.
 *   - Every call returns a status: 0 (KVFABRIC_OK) or a negative
 *     KVFABRIC_ERR_* code. Calls that answer yes/no return 1/0 instead of 0.
 *   - After a failure, kvfabric_last_error(handle, …) returns the message.
 *     Failures not attributable to an open handle (a failed open, an invalid
 *     handle) are recorded under handle 0. Concurrent failing calls on one
 *     handle may see each other's message; the status code is always exact.
 *   - No call panics or aborts: a Go panic becomes KVFABRIC_ERR_PANIC with
 *     the panic and stack in the last error.
 *   - All calls are thread-safe and may block (they do not hold any Python
 *     or other caller lock; ctypes releases the GIL around them).
 *   - Keys are byte strings given as (pointer, length); they need not be
 *     NUL-terminated. A NULL pointer with a non-zero length is
 *     KVFABRIC_ERR_INVALID_ARGUMENT. Array arguments are read only during
 *     the call.
 *
 * Buffers
 *   A region (pointer, length) is CUDA device memory, or host memory inside
 *   a range registered with kvfabric_register_buffer(). An object is the
 *   concatenation of the regions it was put from; a get scatters it over
 *   the given regions in order. kvfabric_put_bytes/kvfabric_get_bytes take
 *   any host memory (staged through the Store's own pinned buffer).
 *
 * Streams
 *   `stream` is a CUstream (0: the legacy default stream). Copies are
 *   enqueued on it after the caller's prior work (e.g. the kernel that wrote
 *   the tensor), with no CPU wait before submission; the blocking calls
 *   below return when their copies are complete.
 *
 * Processes
 *   One kvfabric library per process. The Go runtime inside it does not
 *   survive fork(): after loading the library, start workers with
 *   spawn/exec, never a bare fork.
 */
#ifndef KVFABRIC_H
#define KVFABRIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header. */
#define KVFABRIC_ABI_VERSION 2

/* ---- Status codes ------------------------------------------------------
 * Mooncake Store's numbers where Mooncake has the condition, so a
 * Mooncake-compatible binding passes them through; ours in the -3000 range.
 */
#define KVFABRIC_OK                      0
#define KVFABRIC_ERR_INTERNAL           (-1)    /* unexpected (Mooncake INTERNAL_ERROR) */
#define KVFABRIC_ERR_NO_SPACE           (-200)  /* no capacity left (Mooncake NO_AVAILABLE_HANDLE) */
#define KVFABRIC_ERR_INVALID_ARGUMENT   (-600)  /* bad argument (Mooncake INVALID_PARAMS) */
#define KVFABRIC_ERR_NOT_FOUND          (-704)  /* key not found (Mooncake OBJECT_NOT_FOUND) */
#define KVFABRIC_ERR_ALREADY_EXISTS     (-705)  /* key exists (Mooncake OBJECT_ALREADY_EXISTS) */
#define KVFABRIC_ERR_HAS_LEASE          (-706)  /* object leased by a reader (Mooncake OBJECT_HAS_LEASE) */
#define KVFABRIC_ERR_TRANSFER           (-800)  /* a copy failed (Mooncake TRANSFER_FAIL) */
#define KVFABRIC_ERR_RPC                (-900)  /* master unreachable (Mooncake RPC_FAIL) */
#define KVFABRIC_ERR_CONFIG             (-3001) /* configuration invalid; message names the key */
#define KVFABRIC_ERR_CLOSED             (-3002) /* the Store is closed or closing */
#define KVFABRIC_ERR_CLEANUP_PENDING    (-3003) /* close failed part-way; call kvfabric_close again */
#define KVFABRIC_ERR_BUFFER_TOO_SMALL   (-3004) /* destination smaller than the object */
#define KVFABRIC_ERR_NOT_REGISTERED     (-3005) /* host memory outside any registered buffer */
#define KVFABRIC_ERR_ALREADY_REGISTERED (-3006) /* buffer overlaps a registered one */
#define KVFABRIC_ERR_LEASE_EXPIRED      (-3007) /* the read lease ran out during the copy; retry */
#define KVFABRIC_ERR_INVALID_HANDLE     (-3008) /* handle not open (never opened, or closed); views handle not held (released) */
#define KVFABRIC_ERR_PANIC              (-3009) /* a bug; see kvfabric_last_error */
#define KVFABRIC_ERR_BUFFER_IN_USE      (-3010) /* copies using the buffer outlasted the unregister's wait */
#define KVFABRIC_ERR_PERMISSION         (-3011) /* the master refused: not authenticated, or not this caller's to do */

/* kvfabric_put* flags */
#define KVFABRIC_PUT_PIN 0x1u /* keep from eviction until removed */
#define KVFABRIC_PUT_SOFT_PIN 0x2u /* evicted only after every unpinned object */
#define KVFABRIC_PUT_UPSERT 0x4u /* replace an existing value (leased old bytes stay for their readers) */
#define KVFABRIC_PUT_KEEP_SOFT_PIN 0x8u /* with UPSERT: keep the replaced value's soft pin and expiry */

/* KVFABRIC_ABI_VERSION of the loaded library. */
int32_t kvfabric_abi_version(void);

/* The release the library was built from, e.g. "0.1.0": the version of the
 * kvfabric binary (`kvfabric --version`) and of the Python package and
 * wheels built with it. A NUL-terminated string owned by the library, valid
 * for the life of the process; do not free it.
 * Added in 0.1.0 without a KVFABRIC_ABI_VERSION bump (adding a function
 * breaks no caller): look it up with dlsym when the library may be older. */
const char *kvfabric_version(void);

/* Opens a Store. config_json is a JSON object with the keys of kvfabric's
 * one configuration schema (docs: protocol, global_segment_size,
 * local_buffer_size, enable_egm_store_pool, egm_numa_nodes, max_mr_size,
 * master_server_addr, handle_type, driver, local_hostname, device, …);
 * unknown keys and invalid combinations are KVFABRIC_ERR_CONFIG.
 * On success *handle > 0. On failure the message is copied into errbuf
 * (NUL-terminated, truncated to errbuf_cap-1 bytes; errbuf may be NULL) and
 * is also kvfabric_last_error(0, …). If open failed and could not release
 * what it had built, it returns KVFABRIC_ERR_CLEANUP_PENDING with *handle set
 * to a handle whose only use is kvfabric_close (retry until it returns 0). */
int32_t kvfabric_open(const char *config_json, size_t config_len, int64_t *handle,
                      char *errbuf, size_t errbuf_cap);

/* Tears the Store down (unmount, unregister, unmap, release). Returns 0 and
 * frees the handle only when teardown completed. Otherwise returns
 * KVFABRIC_ERR_CLEANUP_PENDING: the handle stays valid, other calls on it
 * return KVFABRIC_ERR_CLOSED, and kvfabric_close may be called again; a
 * retry does only what is left. */
int32_t kvfabric_close(int64_t handle);

/* 1 when a close of handle failed and must be retried, 0 if not, or < 0. */
int32_t kvfabric_cleanup_pending(int64_t handle);

/* Copies the last error message of handle (0: the last error of a failed
 * open or of a call with an invalid handle) into buf, NUL-terminated and
 * truncated to cap-1 bytes (nothing is written when cap is 0). Returns the
 * message's full length in bytes, without the NUL; 0 when there is none. */
size_t kvfabric_last_error(int64_t handle, char *buf, size_t cap);

/* Puts key from nparts regions (ptrs[i], lens[i]); the object is their
 * concatenation. Copies are ordered on stream. replicas 0 means 1.
 * preferred: comma-separated segment ids tried first (may be NULL); a
 * client id (config key client_id) names every segment that client
 * provides.
 * soft_pin_ttl_ms > 0 (with KVFABRIC_PUT_SOFT_PIN): the soft pin ends that
 * many milliseconds after the put completes. */
int32_t kvfabric_put(int64_t handle, const char *key, size_t key_len,
                     const uint64_t *ptrs, const uint64_t *lens, uint32_t nparts,
                     uintptr_t stream, int32_t replicas, uint32_t flags,
                     const char *preferred, size_t preferred_len, uint64_t soft_pin_ttl_ms);

/* Gets key into nparts regions, scattered in order; *nread receives the
 * object's size. Regions smaller in total than the object give
 * KVFABRIC_ERR_BUFFER_TOO_SMALL. */
int32_t kvfabric_get(int64_t handle, const char *key, size_t key_len,
                     const uint64_t *ptrs, const uint64_t *lens, uint32_t nparts,
                     uintptr_t stream, uint64_t *nread);

/* Batch put of n keys in one call. keys[i] has key_lens[i] bytes. Key i
 * owns parts[i] consecutive entries of ptrs/lens (parts NULL: one each).
 * statuses (n entries) receives each key's status. Returns 0 when the batch
 * ran (per-key results in statuses; the first failing key's message is the
 * last error), or the code that rejected the whole batch, which is then also
 * written to every element of statuses. */
int32_t kvfabric_batch_put(int64_t handle, size_t n, const char *const *keys,
                           const size_t *key_lens, const uint64_t *ptrs,
                           const uint64_t *lens, const uint32_t *parts,
                           uintptr_t stream, int32_t replicas, uint32_t flags,
                           const char *preferred, size_t preferred_len,
                           uint64_t soft_pin_ttl_ms, int32_t *statuses);

/* Batch get, laid out as kvfabric_batch_put; nread (n entries, may be
 * NULL) receives each object's size. Return value as kvfabric_batch_put. */
int32_t kvfabric_batch_get(int64_t handle, size_t n, const char *const *keys,
                           const size_t *key_lens, const uint64_t *ptrs,
                           const uint64_t *lens, const uint32_t *parts,
                           uintptr_t stream, uint64_t *nread, int32_t *statuses);

/* kvfabric_batch_put and kvfabric_batch_get with the n keys packed into one
 * buffer: keys holds them in order, separated by single NUL bytes (none
 * after the last), keys_len bytes in all. A caller in an interpreted
 * language builds this with one join instead of a loop over the keys (the
 * Python package does). A key holding a NUL byte cannot be passed this way:
 * a count of keys other than n rejects the whole batch with
 * KVFABRIC_ERR_INVALID_ARGUMENT. Added after 0.1.0 without a
 * KVFABRIC_ABI_VERSION bump: look the symbols up. */
int32_t kvfabric_batch_put_packed(int64_t handle, size_t n, const char *keys, size_t keys_len,
                                  const uint64_t *ptrs, const uint64_t *lens, const uint32_t *parts,
                                  uintptr_t stream, int32_t replicas, uint32_t flags,
                                  const char *preferred, size_t preferred_len,
                                  uint64_t soft_pin_ttl_ms, int32_t *statuses);
int32_t kvfabric_batch_get_packed(int64_t handle, size_t n, const char *keys, size_t keys_len,
                                  const uint64_t *ptrs, const uint64_t *lens, const uint32_t *parts,
                                  uintptr_t stream, uint64_t *nread, int32_t *statuses);

/* A put stream: kvfabric_batch_put whose keys and buffers are given in
 * pieces, in order, while its first pieces already copy, so that a caller
 * that must convert its arguments (an interpreter's lists) converts the
 * next piece beside the copies instead of the whole batch before them.
 * begin takes the batch's n and options (as kvfabric_batch_put) and writes
 * the stream's handle to *out; each feed gives the next keys (n_feed of
 * them, laid out as kvfabric_batch_put or, _packed, as
 * kvfabric_batch_put_packed) and their regions, copied before it returns.
 * A refused feed feeds nothing and leaves the stream as it was. end waits
 * for the batch, writes each key's status to statuses (the stream's n
 * entries, may be NULL), releases the stream handle and returns as
 * kvfabric_batch_put.
 * All or nothing as to the input: no object of a stream becomes visible
 * before all n keys are fed, and a stream aborted (kvfabric_put_stream_abort,
 * end before all n are fed, a feeder silent for 100 ms while the batch waits
 * for it, or kvfabric_close) fails every key and stores nothing of it. An
 * upsert stream starts once it is fed in full. One thread at a time per
 * stream; abort may come from any thread. Every begun stream must be ended.
 * Added after 0.1.0 without a KVFABRIC_ABI_VERSION bump: look the symbols up. */
int32_t kvfabric_put_stream_begin(int64_t handle, size_t n, uintptr_t stream, int32_t replicas,
                                  uint32_t flags, const char *preferred, size_t preferred_len,
                                  uint64_t soft_pin_ttl_ms, int64_t *out);
int32_t kvfabric_put_stream_feed(int64_t handle, int64_t put_stream, size_t n_feed,
                                 const char *const *keys, const size_t *key_lens,
                                 const uint64_t *ptrs, const uint64_t *lens, const uint32_t *parts);
int32_t kvfabric_put_stream_feed_packed(int64_t handle, int64_t put_stream, size_t n_feed,
                                        const char *keys, size_t keys_len, const uint64_t *ptrs,
                                        const uint64_t *lens, const uint32_t *parts);
int32_t kvfabric_put_stream_abort(int64_t handle, int64_t put_stream);
int32_t kvfabric_put_stream_end(int64_t handle, int64_t put_stream, int32_t *statuses);

/* Puts n bytes of any host memory (staged; no registration needed). */
int32_t kvfabric_put_bytes(int64_t handle, const char *key, size_t key_len,
                           const void *data, uint64_t n, int32_t replicas, uint32_t flags,
                           const char *preferred, size_t preferred_len, uint64_t soft_pin_ttl_ms);

/* Copies key's bytes into host memory buf of buf_cap bytes; *size receives
 * the object's size, also when the result is KVFABRIC_ERR_BUFFER_TOO_SMALL.
 * The size is known before anything is copied: a buffer that is too small
 * costs no copy (buf may be NULL with buf_cap 0 to ask for the size). */
int32_t kvfabric_get_bytes(int64_t handle, const char *key, size_t key_len,
                           void *buf, uint64_t buf_cap, uint64_t *size);

/* 1 when key exists, 0 when not, or < 0. */
int32_t kvfabric_exists(int64_t handle, const char *key, size_t key_len);

/* out (n entries) receives 1/0 per key. On failure every element of out is
 * the returned code. lease != 0 grants every existing key a read lease
 * (the master's lease TTL, ended by expiry), as Mooncake's exist does. */
int32_t kvfabric_batch_exists(int64_t handle, size_t n, const char *const *keys,
                              const size_t *key_lens, int32_t lease, int32_t *out);

/* *size receives key's size in bytes. */
int32_t kvfabric_size(int64_t handle, const char *key, size_t key_len, uint64_t *size);

/* Removes key; force != 0 removes it even while leased. */
int32_t kvfabric_remove(int64_t handle, const char *key, size_t key_len, int32_t force);

/* Removes every object (force != 0: leased ones too); *removed receives
 * the count (may be NULL). */
int32_t kvfabric_remove_all(int64_t handle, int32_t force, uint64_t *removed);

/* Removes n keys (force != 0: leased ones too); statuses (n entries)
 * receives each key's status. Return value as kvfabric_batch_put. */
int32_t kvfabric_batch_remove(int64_t handle, size_t n, const char *const *keys,
                              const size_t *key_lens, int32_t force, int32_t *statuses);

/* Removes every object whose key matches pattern (RE2 syntax, unanchored;
 * pattern_len 0 matches all), force as kvfabric_remove_all; *removed
 * receives the count (may be NULL). A bad pattern is
 * KVFABRIC_ERR_INVALID_ARGUMENT. */
int32_t kvfabric_remove_matching(int64_t handle, const char *pattern, size_t pattern_len,
                                 int32_t force, uint64_t *removed);

/* Copies ranges of n objects with one master round trip and one transfer
 * batch: key i has counts[i] consecutive entries of dsts/srcs/lens, each
 * copying lens[j] bytes of the object from offset srcs[j] to dsts[j]
 * (device or registered host memory). A range past the object's end fails
 * its key with KVFABRIC_ERR_INVALID_ARGUMENT. statuses (n entries)
 * receives each key's status. Return value as kvfabric_batch_put. */
int32_t kvfabric_batch_get_ranges(int64_t handle, size_t n, const char *const *keys,
                                  const size_t *key_lens, const uint64_t *dsts,
                                  const uint64_t *srcs, const uint64_t *lens,
                                  const uint32_t *counts, uintptr_t stream, int32_t *statuses);

/* Describes where n keys' objects live, as a JSON array written to buf
 * (not NUL-terminated): per key null (see statuses) or {"size": N,
 * "replicas": [{"segment", "node", "owner", "tier" ("dram"|"hbm"),
 * "location", "handle" ("posix_fd"|"fabric"), "offset", "length"}]}.
 * *needed receives the JSON's length; when it exceeds buf_cap the result
 * is KVFABRIC_ERR_BUFFER_TOO_SMALL and nothing is written: call again. */
int32_t kvfabric_replicas(int64_t handle, size_t n, const char *const *keys,
                          const size_t *key_lens, char *buf, size_t buf_cap,
                          uint64_t *needed, int32_t *statuses);

/* ---- Views and gather (direct access, issue 15; added after 0.1.0) -----
 * Added without a KVFABRIC_ABI_VERSION bump (adding functions breaks no
 * caller): look them up with dlsym when the library may be older.
 *
 * A views handle (> 0, never reused within a process) stands for objects
 * held in place: while held, each object stays where it is (not evicted,
 * not removed by a plain remove, its range not reused) and any kernel on
 * the Store's GPU may read it at the address kvfabric_acquire gave —
 * nobody may write it. The Store renews the views' leases until
 * kvfabric_views_release. kvfabric_close releases every views handle of
 * the Store (also when it returns KVFABRIC_ERR_CLEANUP_PENDING); an unknown
 * or released views handle is KVFABRIC_ERR_INVALID_HANDLE.
 *
 * A view can be lost (its provider's segment drains or is reported
 * unreachable, or the master was unreachable for a whole lease TTL); the
 * mapping stays until release, but after a lapse the range may hold
 * another object. So check the views (kvfabric_views_check) after the
 * reads, before trusting what was read.
 *
 * Gathers copy fixed-size rows: an object of N bytes has N / row_bytes
 * rows (trailing bytes are not addressable). Output rows are in key
 * order — every selected row of the first key, then the second's, … —
 * into [dst, dst+dst_len), device memory (or page-locked or registered
 * host memory) of at least rows x row_bytes bytes, not overlapping the
 * objects. Rows are selected by exactly one of:
 *   - host indices: host_counts (one entry per key) and host_rows (all
 *     keys' indices concatenated, host_counts[i] for key i; may be NULL
 *     when they sum to 0); dev_rows, per_key, elem_bytes and bad are 0.
 *     Every index is checked before anything is enqueued: one that is
 *     not below its object's row count is KVFABRIC_ERR_INVALID_ARGUMENT
 *     naming key and position. Lists may differ in length.
 *   - device indices: dev_rows, the device address of per_key (> 0)
 *     indices per key, row-major [keys][per_key], elem_bytes (4: int32,
 *     8: int64) each, read by the kernel in stream order (as a GPU top-k
 *     writes them); host_rows and host_counts are NULL. An index out of
 *     range (negative ones included) zero-fills its output row and adds 1
 *     to the uint32 at bad when bad is not 0 (device memory the caller
 *     zeroed).
 * Bad arguments are KVFABRIC_ERR_INVALID_ARGUMENT (a destination too
 * small: KVFABRIC_ERR_BUFFER_TOO_SMALL), with a last error naming the
 * argument, and nothing is enqueued.
 */

/* Holds n keys in place. *views receives a views handle (always when the
 * call returns 0, even if every key failed: release it), addrs[i] the
 * address of key i's preferred replica in this process (0 for a key that
 * failed), sizes[i] its size in bytes, statuses[i] its status (the first
 * failing key's message is the last error). addrs, sizes and statuses may
 * be NULL; views may not. Returns 0 when the call ran, or the code that
 * rejected it (then *views is 0 and every element of statuses is the
 * code). With a remote master it costs two round trips (a get: one). */
int32_t kvfabric_acquire(int64_t handle, size_t n, const char *const *keys,
                         const size_t *key_lens, int64_t *views, uint64_t *addrs,
                         uint64_t *sizes, int32_t *statuses);

/* 0 while every view of views is held; KVFABRIC_ERR_LEASE_EXPIRED once
 * one was lost (the last error says why; what was read since may not be
 * the object's bytes); KVFABRIC_ERR_INVALID_HANDLE when views is not
 * held (released, or closed with the Store). */
int32_t kvfabric_views_check(int64_t handle, int64_t views);

/* Releases views and frees the handle. Every kernel reading the views
 * (and every gather from them) must have completed: the mappings that
 * nothing else holds are unmapped. Releasing a released handle is
 * KVFABRIC_ERR_INVALID_HANDLE. */
int32_t kvfabric_views_release(int64_t handle, int64_t views);

/* Enqueues a gather of rows of the views' objects (see above; the views'
 * keys in acquire order, host_counts with one entry per key) on stream
 * after the work already on it, with one kernel launch (or one per
 * descriptor slot's worth of objects), and returns once it is enqueued.
 * Synchronize stream before reading dst, then check the views. A key of
 * the views that failed at acquire fails the gather (its status). */
int32_t kvfabric_views_gather(int64_t handle, int64_t views, const uint64_t *host_rows,
                              const uint64_t *host_counts, uint64_t dev_rows, uint32_t per_key,
                              uint32_t elem_bytes, uint64_t bad, uint64_t row_bytes,
                              uint64_t dst, uint64_t dst_len, uintptr_t stream);

/* One-shot gather of rows of n keys' objects into dst (rows as above),
 * under read leases of its own: acquire, gather, wait, release. Enqueued
 * on stream after the work already on it; returns when the copy is
 * complete. A missing key fails the call (KVFABRIC_ERR_NOT_FOUND, naming
 * it) before anything is copied; KVFABRIC_ERR_LEASE_EXPIRED means a lease
 * ended before the copy finished. */
int32_t kvfabric_gather(int64_t handle, size_t n, const char *const *keys,
                        const size_t *key_lens, const uint64_t *host_rows,
                        const uint64_t *host_counts, uint64_t dev_rows, uint32_t per_key,
                        uint32_t elem_bytes, uint64_t bad, uint64_t row_bytes,
                        uint64_t dst, uint64_t dst_len, uintptr_t stream);

/* Registers [ptr, ptr+size): host memory (registered with the driver so
 * GPU copies reach it) or CUDA device memory (recorded). Later regions may
 * point anywhere inside it. */
int32_t kvfabric_register_buffer(int64_t handle, uintptr_t ptr, uint64_t size);

/* Unregisters the buffer registered at ptr. Puts and gets using the buffer
 * hold it until their copies are complete; this call waits for them (new
 * ones are refused with KVFABRIC_ERR_NOT_REGISTERED meanwhile), so once it
 * returns 0 the memory may be freed. If they are still running after 30 s it
 * returns KVFABRIC_ERR_BUFFER_IN_USE (the last error names the buffer and
 * how many batches use it) and the buffer stays registered: do not free
 * the memory then; retry later. */
int32_t kvfabric_unregister_buffer(int64_t handle, uintptr_t ptr);

/* Copies the Store's host identity into buf (NUL-terminated, truncated to
 * cap-1 bytes); *len receives its full length. */
int32_t kvfabric_hostname(int64_t handle, char *buf, size_t cap, size_t *len);

/* Copies the name of the CUDA driver the Store runs on into buf like
 * kvfabric_hostname: "cuda" (the real driver) or "sim" (the simulator). */
int32_t kvfabric_driver(int64_t handle, char *buf, size_t cap, size_t *len);

/* Copies how the capacity the Store provides is exported into buf like
 * kvfabric_hostname: "fabric" or "posix_fd" (handle_type=auto resolved), or
 * "" (*len 0) for a pure consumer. */
int32_t kvfabric_handle_type(int64_t handle, char *buf, size_t cap, size_t *len);

/* Where the Store's batch calls spent their time since it opened: writes
 * the first min(n, KVFABRIC_PHASE_VALUES) of these uint64 values to out —
 * for kvfabric_batch_put and then for kvfabric_batch_get (single puts and
 * gets count as batches of one): calls, keys, and the nanoseconds of check
 * (buffer classification), meta (waiting for the master), resolve
 * (replicas to addresses), copy (enqueue and completion), and, overlapping
 * those, master (inside the master's calls, on whichever thread), wait
 * (blocked on copies) and end (PutEnd; puts only). Take two snapshots and
 * subtract them. Added after 0.1.0 (ABI 2): look the symbol up. */
#define KVFABRIC_PHASE_VALUES 18
int32_t kvfabric_phases(int64_t handle, uint64_t *out, size_t n);

/* 0 when the Store is healthy (master reachable, own segments mounted). */
int32_t kvfabric_health(int64_t handle);

#ifdef __cplusplus
}
#endif

#endif /* KVFABRIC_H */
