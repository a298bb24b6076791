package cabi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// Backend is the part of *client.Store the C ABI drives.
type Backend interface {
	Put(ctx context.Context, key string, src []client.Region, stream cuda.Stream, o client.PutOptions) error
	Get(ctx context.Context, key string, dst []client.Region, stream cuda.Stream) (uint64, error)
	BatchPut(ctx context.Context, keys []string, srcs [][]client.Region, stream cuda.Stream, o client.PutOptions) []error
	BatchGet(ctx context.Context, keys []string, dsts [][]client.Region, stream cuda.Stream) ([]uint64, []error)
	PutBytes(ctx context.Context, key string, data []byte, o client.PutOptions) error
	GetBytesInto(ctx context.Context, key string, dst []byte) (uint64, error)
	Exists(ctx context.Context, key string) (bool, error)
	BatchExists(ctx context.Context, keys []string, lease bool) ([]bool, error)
	Size(ctx context.Context, key string) (uint64, error)
	Remove(ctx context.Context, key string, force bool) error
	BatchRemove(ctx context.Context, keys []string, force bool) []error
	RemoveMatching(ctx context.Context, pattern string, force bool) (int, error)
	BatchGetRanges(ctx context.Context, keys []string, spans [][]client.Span, stream cuda.Stream) []error
	Replicas(ctx context.Context, keys []string) ([]client.ObjectInfo, []error)
	Acquire(ctx context.Context, keys []string) (*client.Views, error)
	Gather(ctx context.Context, keys []string, rows client.Rows, rowBytes uint64, dst client.Region, stream cuda.Stream) error
	RegisterBuffer(ptr uintptr, size uint64) error
	UnregisterBuffer(ctx context.Context, ptr uintptr) error
	Hostname() string
	// DriverName is "cuda" or "sim"; HandleType is "fabric", "posix_fd",
	// or "" for a pure consumer.
	DriverName() string
	HandleType() string
	Health(ctx context.Context) error
	Close() error
	CleanupPending() bool
}

// Put flags (kvfabric.h KVFABRIC_PUT_*).
const (
	// FlagPin keeps the object from eviction until removed.
	FlagPin uint32 = 1 << 0
	// FlagSoftPin makes the object evicted only after every unpinned one.
	FlagSoftPin uint32 = 1 << 1
	// FlagUpsert replaces an existing value (client.PutOptions.Upsert).
	FlagUpsert uint32 = 1 << 2
	// FlagKeepSoftPin keeps the replaced value's soft pin (with FlagUpsert).
	FlagKeepSoftPin uint32 = 1 << 3
	flagsKnown             = FlagPin | FlagSoftPin | FlagUpsert | FlagKeepSoftPin
)

// maxBatch bounds n in batch calls: a larger value is a caller bug (or a
// negative size_t), not a batch.
const maxBatch = 1 << 24

// Environment variables read by Open.
const (
	// EnvLog enables logging to stderr: debug, info, warn or error.
	EnvLog = "KVFABRIC_LOG"
)

var bg = context.Background()

// Open parses cfgJSON with config.FromJSON (the one schema and validation),
// opens a Store and returns its handle. On failure the message is recorded
// as the global last error (handle 0) and returned. When Open failed and
// could not release what it built, the status is StatusCleanupPending and h
// is a handle whose only use is Close (which retries the release).
func Open(cfgJSON []byte) (h int64, st int32, msg string) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("%w: %v", errPanic, r)
			setGlobalErr(err)
			h, st, msg = 0, StatusPanic, err.Error()
		}
	}()
	cfg, err := config.FromJSON(cfgJSON)
	if err == nil {
		var s Backend
		s, err = openStore(bg, cfg, logger())
		if err == nil {
			return register(s), StatusOK, ""
		}
		if s != nil {
			// Open failed and still holds resources: the handle's only
			// use is Close, which retries their release.
			h = register(s)
			msg = err.Error()
			if e, lerr := lookup(h); lerr == nil {
				e.setErr(err)
			}
			setGlobalErr(err)
			return h, StatusCleanupPending, msg
		}
	}
	setGlobalErr(err)
	return 0, statusOf(err), err.Error()
}

func logger() *slog.Logger {
	var lvl slog.Level
	switch strings.ToLower(os.Getenv(EnvLog)) {
	case "":
		return nil
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	default:
		lvl = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// Close tears down the Store behind h. The handle is released only when
// teardown succeeded; otherwise Close returns StatusCleanupPending, the
// handle stays valid (new operations fail with StatusClosed) and Close may
// be called again to retry what is left. Either way the Store's views
// handles are freed: the Store released their views first thing.
func Close(h int64) int32 {
	return call(h, func(e *entry) error {
		// Open put streams first: their batches would otherwise hold up
		// the Store's Close until their feeders stall out.
		e.streams.abortAll()
		err := e.store.Close()
		e.views.closeAll()
		if err != nil {
			return fmt.Errorf("%w: %w", client.ErrCleanupPending, err)
		}
		release(h, e)
		return nil
	})
}

// CleanupPending reports 1 when a Close of h failed and must be retried, 0
// when not, or a negative status.
func CleanupPending(h int64) int32 {
	var pending bool
	st := call(h, func(e *entry) error {
		pending = e.store.CleanupPending()
		return nil
	})
	if st != StatusOK {
		return st
	}
	if pending {
		return 1
	}
	return 0
}

// str copies the n bytes at p of the string argument what (a key, the
// preferred segments) into a Go string. NULL with n > 0 is a caller's bug,
// reported as ErrInvalidArgument rather than left to unsafe.Slice's panic.
func str(p unsafe.Pointer, n uint64, what string) (string, error) {
	if n == 0 {
		return "", nil
	}
	if p == nil {
		return "", fmt.Errorf("%w: %s is NULL with length %d", client.ErrInvalidArgument, what, n)
	}
	if n > math.MaxInt32 {
		return "", fmt.Errorf("%w: %s has length %d", client.ErrInvalidArgument, what, n)
	}
	return string(unsafe.Slice((*byte)(p), n)), nil
}

func putOptions(replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64) (client.PutOptions, error) {
	if replicas < 0 {
		return client.PutOptions{}, fmt.Errorf("%w: replicas=%d: must be >= 0", client.ErrInvalidArgument, replicas)
	}
	if flags&^flagsKnown != 0 {
		return client.PutOptions{}, fmt.Errorf("%w: flags=%#x: unknown bits %#x", client.ErrInvalidArgument, flags, flags&^flagsKnown)
	}
	pref, err := str(preferred, preferredLen, "preferred segments")
	if err != nil {
		return client.PutOptions{}, err
	}
	if softPinTTLms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return client.PutOptions{}, fmt.Errorf("%w: soft_pin_ttl_ms=%d: too large", client.ErrInvalidArgument, softPinTTLms)
	}
	o := client.PutOptions{Replicas: int(replicas), Pin: flags&FlagPin != 0, SoftPin: flags&FlagSoftPin != 0,
		SoftPinTTL: time.Duration(softPinTTLms) * time.Millisecond, Upsert: flags&FlagUpsert != 0, KeepSoftPin: flags&FlagKeepSoftPin != 0}
	for _, s := range strings.Split(pref, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.PreferredSegments = append(o.PreferredSegments, s)
		}
	}
	return o, nil
}

// regions builds one key's regions from parallel pointer/length arrays.
func regions(ptrs, lens []uint64) []client.Region {
	r := make([]client.Region, len(ptrs))
	for i := range ptrs {
		r[i] = client.Region{Ptr: uintptr(ptrs[i]), Len: lens[i]}
	}
	return r
}

// Put stores key from nparts regions (ptrs[i], lens[i]); the object is their
// concatenation. Copies are ordered after prior work on stream.
func Put(h int64, key unsafe.Pointer, keyLen uint64, ptrs, lens unsafe.Pointer, nparts uint32,
	stream uintptr, replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		o, err := putOptions(replicas, flags, preferred, preferredLen, softPinTTLms)
		if err != nil {
			return err
		}
		if nparts == 0 || ptrs == nil || lens == nil {
			return fmt.Errorf("%w: put needs at least one region", client.ErrInvalidArgument)
		}
		src := regions(unsafe.Slice((*uint64)(ptrs), nparts), unsafe.Slice((*uint64)(lens), nparts))
		return e.store.Put(bg, k, src, cuda.Stream(stream), o)
	})
}

// Get reads key into nparts regions (scatter in order) and stores the
// object's size in *nread.
func Get(h int64, key unsafe.Pointer, keyLen uint64, ptrs, lens unsafe.Pointer, nparts uint32,
	stream uintptr, nread *uint64) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		if nparts == 0 || ptrs == nil || lens == nil {
			return fmt.Errorf("%w: get needs at least one region", client.ErrInvalidArgument)
		}
		dst := regions(unsafe.Slice((*uint64)(ptrs), nparts), unsafe.Slice((*uint64)(lens), nparts))
		n, err := e.store.Get(bg, k, dst, cuda.Stream(stream))
		if nread != nil {
			*nread = n
		}
		return err
	})
}

// batch is a decoded batch of keys and their regions.
type batch struct {
	keys    []string
	regions [][]client.Region
}

// decodeBatch reads n keys (keys[i] a char* of keyLens[i] bytes) and, when
// ptrs is not nil, their regions: key i has parts[i] consecutive entries of
// ptrs/lens (parts nil: one each).
func decodeBatch(n uint64, keys, keyLens, ptrs, lens, parts unsafe.Pointer) (batch, error) {
	ks, err := decodeKeys(n, keys, keyLens)
	if err != nil {
		return batch{}, err
	}
	return withRegions(ks, ptrs, lens, parts)
}

// decodeKeys reads n keys, keys[i] a char* of keyLens[i] bytes.
func decodeKeys(n uint64, keys, keyLens unsafe.Pointer) ([]string, error) {
	if n > maxBatch {
		return nil, fmt.Errorf("%w: batch of %d keys (max %d)", client.ErrInvalidArgument, n, maxBatch)
	}
	if n == 0 {
		return nil, nil
	}
	if keys == nil || keyLens == nil {
		return nil, fmt.Errorf("%w: keys and key lengths must not be NULL", client.ErrInvalidArgument)
	}
	kp := unsafe.Slice((*unsafe.Pointer)(keys), n)
	kl := unsafe.Slice((*uint64)(keyLens), n)
	// The keys' bytes are copied into one buffer, which the strings share
	// (never written after): one allocation per batch, not one per key.
	var size uint64
	for i := range kp {
		if kl[i] == 0 {
			continue
		}
		if kp[i] == nil {
			return nil, fmt.Errorf("key %d: %w: key is NULL with length %d", i, client.ErrInvalidArgument, kl[i])
		}
		if kl[i] > math.MaxInt32 || size+kl[i] > math.MaxInt32 {
			return nil, fmt.Errorf("key %d: %w: key has length %d (%d bytes of keys before it)", i, client.ErrInvalidArgument, kl[i], size)
		}
		size += kl[i]
	}
	buf := make([]byte, size)
	ks := make([]string, n)
	var at uint64
	for i := range ks {
		if k := kl[i]; k > 0 {
			copy(buf[at:at+k], unsafe.Slice((*byte)(kp[i]), k))
			ks[i] = unsafe.String(&buf[at], int(k))
			at += k
		}
	}
	return ks, nil
}

// decodePackedKeys reads n keys from the packed bytes of
// kvfabric_batch_put_packed: the keys in order, separated by single NUL
// bytes (no NUL after the last), size bytes in all. A count of keys other
// than n — a key holding a NUL byte, or a wrong n or size — rejects the
// batch: the keys cannot be told apart.
func decodePackedKeys(n uint64, packed unsafe.Pointer, size uint64) ([]string, error) {
	if n > maxBatch {
		return nil, fmt.Errorf("%w: batch of %d keys (max %d)", client.ErrInvalidArgument, n, maxBatch)
	}
	if n == 0 {
		if size != 0 {
			return nil, fmt.Errorf("%w: packed keys: %d bytes for a batch of 0 keys", client.ErrInvalidArgument, size)
		}
		return nil, nil
	}
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("%w: packed keys: %d bytes (max %d)", client.ErrInvalidArgument, size, math.MaxInt32)
	}
	if packed == nil && size > 0 {
		return nil, fmt.Errorf("%w: packed keys are NULL with length %d", client.ErrInvalidArgument, size)
	}
	// One copy, which the strings share (never written after).
	buf := make([]byte, size)
	if size > 0 {
		copy(buf, unsafe.Slice((*byte)(packed), size))
	}
	ks := make([]string, n)
	rest := buf
	for i := range ks {
		end := bytes.IndexByte(rest, 0)
		last := i == len(ks)-1
		switch {
		case !last && end < 0:
			return nil, fmt.Errorf("%w: packed keys: %d keys in %d bytes, n is %d", client.ErrInvalidArgument, i+1, size, n)
		case last && end >= 0:
			return nil, fmt.Errorf("%w: packed keys: more than %d keys in %d bytes (a key holds a NUL byte? pass it with kvfabric_batch_put)",
				client.ErrInvalidArgument, n, size)
		case last:
			end = len(rest)
		}
		if end > 0 {
			ks[i] = unsafe.String(&rest[0], end)
		}
		if !last {
			rest = rest[end+1:]
		}
	}
	return ks, nil
}

// withRegions adds to keys their regions when ptrs is not nil: key i has
// parts[i] consecutive entries of ptrs/lens (parts nil: one each).
func withRegions(keys []string, ptrs, lens, parts unsafe.Pointer) (batch, error) {
	b := batch{keys: keys}
	n := uint64(len(keys))
	if n == 0 || ptrs == nil && lens == nil {
		return b, nil
	}
	if ptrs == nil || lens == nil {
		return batch{}, fmt.Errorf("%w: pointers and lengths must both be given", client.ErrInvalidArgument)
	}
	b.regions = make([][]client.Region, n)
	if parts == nil { // one region each
		all := regions(unsafe.Slice((*uint64)(ptrs), n), unsafe.Slice((*uint64)(lens), n))
		for i := range b.regions {
			b.regions[i] = all[i : i+1 : i+1]
		}
		return b, nil
	}
	pc := unsafe.Slice((*uint32)(parts), n)
	var total uint64
	for _, c := range pc {
		total += uint64(c)
	}
	if total > maxBatch*64 {
		return batch{}, fmt.Errorf("%w: %d regions in one batch", client.ErrInvalidArgument, total)
	}
	all := regions(unsafe.Slice((*uint64)(ptrs), total), unsafe.Slice((*uint64)(lens), total))
	var off uint64
	for i, c := range pc {
		b.regions[i] = all[off : off+uint64(c) : off+uint64(c)]
		off += uint64(c)
	}
	return b, nil
}

// fill sets every element of the n statuses at out to st.
func fill(out unsafe.Pointer, n uint64, st int32) {
	if out == nil || n == 0 || n > maxBatch {
		return
	}
	s := unsafe.Slice((*int32)(out), n)
	for i := range s {
		s[i] = st
	}
}

// perKey writes per-key statuses to out and returns the first error, which
// becomes the handle's last error (prefixed with the key).
func perKey(keys []string, errs []error, out unsafe.Pointer) error {
	if len(errs) != len(keys) {
		return fmt.Errorf("cabi: store returned %d results for %d keys", len(errs), len(keys))
	}
	var s []int32
	if out != nil {
		s = unsafe.Slice((*int32)(out), len(keys))
	}
	var first error
	for i, err := range errs {
		if s != nil {
			s[i] = statusOf(err)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("key %q: %w", keys[i], err)
		}
	}
	return first
}

// BatchPut puts n keys in one crossing. statuses (n int32s) receives each
// key's status. The return value is StatusOK when the batch ran (even if
// some keys failed: see statuses), or the status that rejected the whole
// batch, in which case every element of statuses is set to it.
func BatchPut(h int64, n uint64, keys, keyLens, ptrs, lens, parts unsafe.Pointer,
	stream uintptr, replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64,
	statuses unsafe.Pointer) int32 {
	return batchPut(h, n, func() ([]string, error) { return decodeKeys(n, keys, keyLens) }, ptrs, lens, parts,
		stream, replicas, flags, preferred, preferredLen, softPinTTLms, statuses)
}

// BatchPutPacked is BatchPut with the keys packed into one buffer of size
// bytes, separated by single NUL bytes (decodePackedKeys).
func BatchPutPacked(h int64, n uint64, packed unsafe.Pointer, size uint64, ptrs, lens, parts unsafe.Pointer,
	stream uintptr, replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64,
	statuses unsafe.Pointer) int32 {
	return batchPut(h, n, func() ([]string, error) { return decodePackedKeys(n, packed, size) }, ptrs, lens, parts,
		stream, replicas, flags, preferred, preferredLen, softPinTTLms, statuses)
}

func batchPut(h int64, n uint64, keys func() ([]string, error), ptrs, lens, parts unsafe.Pointer,
	stream uintptr, replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64,
	statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		o, err := putOptions(replicas, flags, preferred, preferredLen, softPinTTLms)
		if err != nil {
			return err
		}
		if ptrs == nil || lens == nil {
			return fmt.Errorf("%w: batch put needs pointers and lengths", client.ErrInvalidArgument)
		}
		ks, err := keys()
		if err != nil {
			return err
		}
		b, err := withRegions(ks, ptrs, lens, parts)
		if err != nil {
			return err
		}
		if n == 0 {
			ran = true
			return nil
		}
		errs := e.store.BatchPut(bg, b.keys, b.regions, cuda.Stream(stream), o)
		if len(errs) == len(b.keys) {
			ran = true
		}
		return perKey(b.keys, errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// BatchGet gets n keys in one crossing into their regions; nread (n
// uint64s) receives each object's size, statuses each key's status. Return
// value as for BatchPut.
func BatchGet(h int64, n uint64, keys, keyLens, ptrs, lens, parts unsafe.Pointer,
	stream uintptr, nread, statuses unsafe.Pointer) int32 {
	return batchGet(h, n, func() ([]string, error) { return decodeKeys(n, keys, keyLens) }, ptrs, lens, parts,
		stream, nread, statuses)
}

// BatchGetPacked is BatchGet with the keys packed as for BatchPutPacked.
func BatchGetPacked(h int64, n uint64, packed unsafe.Pointer, size uint64, ptrs, lens, parts unsafe.Pointer,
	stream uintptr, nread, statuses unsafe.Pointer) int32 {
	return batchGet(h, n, func() ([]string, error) { return decodePackedKeys(n, packed, size) }, ptrs, lens, parts,
		stream, nread, statuses)
}

func batchGet(h int64, n uint64, keys func() ([]string, error), ptrs, lens, parts unsafe.Pointer,
	stream uintptr, nread, statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		if ptrs == nil || lens == nil {
			return fmt.Errorf("%w: batch get needs pointers and lengths", client.ErrInvalidArgument)
		}
		ks, err := keys()
		if err != nil {
			return err
		}
		b, err := withRegions(ks, ptrs, lens, parts)
		if err != nil {
			return err
		}
		if n == 0 {
			ran = true
			return nil
		}
		sizes, errs := e.store.BatchGet(bg, b.keys, b.regions, cuda.Stream(stream))
		if len(errs) != len(b.keys) || len(sizes) != len(b.keys) {
			return fmt.Errorf("cabi: store returned %d sizes, %d results for %d keys", len(sizes), len(errs), len(b.keys))
		}
		if nread != nil {
			copy(unsafe.Slice((*uint64)(nread), n), sizes)
		}
		ran = true
		return perKey(b.keys, errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// PutBytes stores n bytes of host memory at data (any host memory; the
// Store stages it through its own pinned buffer).
func PutBytes(h int64, key unsafe.Pointer, keyLen uint64, data unsafe.Pointer, n uint64,
	replicas int32, flags uint32, preferred unsafe.Pointer, preferredLen, softPinTTLms uint64) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		o, err := putOptions(replicas, flags, preferred, preferredLen, softPinTTLms)
		if err != nil {
			return err
		}
		if data == nil && n != 0 {
			return fmt.Errorf("%w: data is NULL", client.ErrInvalidArgument)
		}
		var b []byte
		if n != 0 {
			b = unsafe.Slice((*byte)(data), n)
		}
		return e.store.PutBytes(bg, k, b, o)
	})
}

// GetBytes copies key's bytes into host memory buf of capacity bufCap and
// stores the object's size in *size. The Store learns the size before it
// copies: a buffer smaller than the object gives StatusBufferTooSmall with
// *size set (so a caller can retry), and nothing is copied or allocated.
func GetBytes(h int64, key unsafe.Pointer, keyLen uint64, buf unsafe.Pointer, bufCap uint64, size *uint64) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		if buf == nil && bufCap != 0 {
			return fmt.Errorf("%w: buf is NULL with capacity %d", client.ErrInvalidArgument, bufCap)
		}
		var dst []byte
		if bufCap != 0 {
			// No object is larger than the address space left after buf;
			// clamping keeps unsafe.Slice from panicking on a bogus
			// capacity (a negative size_t).
			n := min(bufCap, uint64(math.MaxInt), uint64(^uintptr(0)-uintptr(buf)))
			dst = unsafe.Slice((*byte)(buf), n)
		}
		n, err := e.store.GetBytesInto(bg, k, dst)
		if size != nil {
			*size = n
		}
		return err
	})
}

// Exists returns 1 when key exists, 0 when not, or a negative status.
func Exists(h int64, key unsafe.Pointer, keyLen uint64) int32 {
	var ok bool
	st := call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		ok, err = e.store.Exists(bg, k)
		return err
	})
	if st != StatusOK {
		return st
	}
	if ok {
		return 1
	}
	return 0
}

// BatchExists writes 1 or 0 per key into out (n int32s); on failure every
// element is the returned status. lease grants each existing key a read
// lease (client.Store.BatchExists).
func BatchExists(h int64, n uint64, keys, keyLens unsafe.Pointer, lease bool, out unsafe.Pointer) int32 {
	st := call(h, func(e *entry) error {
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil || n == 0 {
			return err
		}
		ex, err := e.store.BatchExists(bg, b.keys, lease)
		if err != nil {
			return err
		}
		if len(ex) != len(b.keys) {
			return fmt.Errorf("cabi: store returned %d results for %d keys", len(ex), len(b.keys))
		}
		if out != nil {
			s := unsafe.Slice((*int32)(out), n)
			for i, v := range ex {
				s[i] = 0
				if v {
					s[i] = 1
				}
			}
		}
		return nil
	})
	if st != StatusOK {
		fill(out, n, st)
	}
	return st
}

// Size stores key's size in *size.
func Size(h int64, key unsafe.Pointer, keyLen uint64, size *uint64) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		n, err := e.store.Size(bg, k)
		if err == nil && size != nil {
			*size = n
		}
		return err
	})
}

// Remove removes key; force removes it even when it holds a lease.
func Remove(h int64, key unsafe.Pointer, keyLen uint64, force bool) int32 {
	return call(h, func(e *entry) error {
		k, err := str(key, keyLen, "key")
		if err != nil {
			return err
		}
		return e.store.Remove(bg, k, force)
	})
}

// RemoveAll removes every object of the handle's tenant (force: leased ones
// too) and stores the count in *removed.
func RemoveAll(h int64, force bool, removed *uint64) int32 {
	return RemoveMatching(h, nil, 0, force, removed)
}

// RemoveMatching removes the objects of the handle's tenant whose keys
// match the RE2 pattern (unanchored; empty: all) and stores the count in
// *removed.
func RemoveMatching(h int64, pattern unsafe.Pointer, patternLen uint64, force bool, removed *uint64) int32 {
	return call(h, func(e *entry) error {
		var p string
		if patternLen > 0 {
			var err error
			if p, err = str(pattern, patternLen, "pattern"); err != nil {
				return err
			}
		}
		n, err := e.store.RemoveMatching(bg, p, force)
		if removed != nil {
			*removed = uint64(max(n, 0))
		}
		return err
	})
}

// RegisterBuffer registers [ptr, ptr+size): host memory (registered with the
// driver) or device memory (recorded).
func RegisterBuffer(h int64, ptr uintptr, size uint64) int32 {
	return call(h, func(e *entry) error { return e.store.RegisterBuffer(ptr, size) })
}

// UnregisterBuffer undoes RegisterBuffer(ptr, …), waiting (bounded by
// client.UnregisterTimeout) for the batches that use the buffer; when they
// outlast it the status is StatusBufferInUse and the buffer stays
// registered.
func UnregisterBuffer(h int64, ptr uintptr) int32 {
	return call(h, func(e *entry) error { return e.store.UnregisterBuffer(bg, ptr) })
}

// Hostname copies the Store's hostname into buf (NUL-terminated, truncated)
// and stores its full length in *n.
func Hostname(h int64, buf []byte, n *uint64) int32 {
	return call(h, func(e *entry) error { copyString(e.store.Hostname(), buf, n); return nil })
}

// DriverName copies the name of the Store's CUDA driver ("cuda" or "sim")
// into buf like Hostname.
func DriverName(h int64, buf []byte, n *uint64) int32 {
	return call(h, func(e *entry) error { copyString(e.store.DriverName(), buf, n); return nil })
}

// HandleType copies how the Store's provided segments are exported
// ("fabric" or "posix_fd"; "" for a pure consumer) into buf like Hostname.
func HandleType(h int64, buf []byte, n *uint64) int32 {
	return call(h, func(e *entry) error { copyString(e.store.HandleType(), buf, n); return nil })
}

// copyString copies s into buf (NUL-terminated, truncated) and stores its
// full length in *n.
func copyString(s string, buf []byte, n *uint64) {
	if n != nil {
		*n = uint64(len(s))
	}
	if len(buf) > 0 {
		k := copy(buf[:len(buf)-1], s)
		buf[k] = 0
	}
}

// Health checks the Store (master reachable, segments mounted).
func Health(h int64) int32 {
	return call(h, func(e *entry) error { return e.store.Health(bg) })
}
