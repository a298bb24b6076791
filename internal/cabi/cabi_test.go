package cabi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
)

// withFake makes Open return f and restores the real opener afterwards.
func withFake(t *testing.T, f *fakeStore) {
	t.Helper()
	old := openStore
	openStore = func(context.Context, config.Config, *slog.Logger) (Backend, error) { return f, nil }
	t.Cleanup(func() { openStore = old })
}

func openFake(t *testing.T, f *fakeStore) int64 {
	t.Helper()
	withFake(t, f)
	h, st, msg := Open([]byte(`{"driver":"sim"}`))
	if st != StatusOK || h <= 0 {
		t.Fatalf("Open = %d, %s (%s)", h, StatusName(st), msg)
	}
	t.Cleanup(func() {
		if st := Close(h); st != StatusOK && st != StatusInvalidHandle {
			t.Errorf("Close = %s", StatusName(st))
		}
	})
	return h
}

// cKeys lays keys out as a C caller does: an array of char* and one of
// lengths.
type cKeys struct {
	ptrs []unsafe.Pointer
	lens []uint64
	hold [][]byte
}

func keysOf(keys ...string) *cKeys {
	c := &cKeys{}
	for _, k := range keys {
		b := []byte(k)
		c.hold = append(c.hold, b)
		var p unsafe.Pointer
		if len(b) > 0 {
			p = unsafe.Pointer(&b[0])
		}
		c.ptrs = append(c.ptrs, p)
		c.lens = append(c.lens, uint64(len(b)))
	}
	return c
}

func (c *cKeys) p() unsafe.Pointer { return unsafe.Pointer(&c.ptrs[0]) }
func (c *cKeys) l() unsafe.Pointer { return unsafe.Pointer(&c.lens[0]) }

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func keyArg(k string) (unsafe.Pointer, uint64) {
	b := []byte(k)
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), uint64(len(b))
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int32
	}{
		{nil, StatusOK},
		{fmt.Errorf("put %q: %w", "k", client.ErrNoSpace), StatusNoSpace},
		{client.ErrNotFound, StatusNotFound},
		{client.ErrAlreadyExists, StatusAlreadyExists},
		{client.ErrHasLease, StatusHasLease},
		{client.ErrLeaseExpired, StatusLeaseExpired},
		{client.ErrBufferTooSmall, StatusBufferTooSmall},
		{client.ErrInvalidArgument, StatusInvalidArgument},
		{client.ErrTransfer, StatusTransfer},
		{client.ErrRPC, StatusRPC},
		{context.DeadlineExceeded, StatusRPC},
		{client.ErrClosed, StatusClosed},
		{client.ErrNotRegistered, StatusNotRegistered},
		{client.ErrAlreadyRegistered, StatusAlreadyRegistered},
		// Views used after their release: their handle is not held.
		{client.ErrViewsReleased, StatusInvalidHandle},
		// An unregister whose wait for batches ran out: not an RPC failure.
		{fmt.Errorf("%w: 1 batch: %w", client.ErrBufferInUse, context.DeadlineExceeded), StatusBufferInUse},
		{fmt.Errorf("%w: RemoveAll with force needs the admin role", client.ErrPermission), StatusPermission},
		{fmt.Errorf("x: %w", config.ErrInvalid), StatusConfig},
		// Close wraps the step that failed; cleanup-pending wins.
		{fmt.Errorf("%w: %w", client.ErrCleanupPending, client.ErrTransfer), StatusCleanupPending},
		{errors.New("other"), StatusInternal},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			if got := statusOf(tt.err); got != tt.want {
				t.Errorf("statusOf = %s, want %s", StatusName(got), StatusName(tt.want))
			}
			if StatusName(tt.want) == "KVFABRIC_ERR_UNKNOWN" {
				t.Errorf("status %d has no name", tt.want)
			}
		})
	}
}

func TestOpenConfigErrors(t *testing.T) {
	withFake(t, newFake(1<<20))
	tests := []struct {
		name, json, wantKey string
	}{
		{"not json", `{`, "JSON"},
		{"unknown key", `{"bogus":1}`, `"bogus"`},
		{"bad protocol", `{"protocol":"carrier-pigeon"}`, "protocol"},
		{"egm needs nvlink", `{"enable_egm_store_pool":true,"protocol":"tcp","global_segment_size":"1GiB"}`, "protocol"},
		{"egm needs capacity", `{"enable_egm_store_pool":true}`, "global_segment_size"},
		{"egm no local buffer", `{"enable_egm_store_pool":true,"global_segment_size":"1GiB","local_buffer_size":"16MiB"}`, "local_buffer_size"},
		{"numa duplicate", `{"egm_numa_nodes":"0,0"}`, "egm_numa_nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := OpenHandles()
			h, st, msg := Open([]byte(tt.json))
			if st != StatusConfig || h != 0 {
				t.Fatalf("Open = %d, %s; want KVFABRIC_ERR_CONFIG", h, StatusName(st))
			}
			if !strings.Contains(msg, tt.wantKey) {
				t.Errorf("message %q does not name %s", msg, tt.wantKey)
			}
			if LastError(0) != msg {
				t.Errorf("LastError(0) = %q, want %q", LastError(0), msg)
			}
			if OpenHandles() != before {
				t.Errorf("a failed Open left a handle")
			}
		})
	}
}

func TestPutBatchParts(t *testing.T) {
	f := newFake(1 << 20)
	h := openFake(t, f)
	a, b := []byte("hello, "), []byte("world")
	ptrs := []uint64{addr(a), addr(b)}
	lens := []uint64{uint64(len(a)), uint64(len(b))}
	k, kl := keyArg("k1")
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 2, 0x1234, 0, FlagPin, nil, 0, 0); st != StatusOK {
		t.Fatalf("Put = %s: %s", StatusName(st), LastError(h))
	}
	if f.mu.lastStream != 0x1234 {
		t.Errorf("stream = %#x, want 0x1234", f.mu.lastStream)
	}
	// Scatter into 3 + 9 bytes.
	d1, d2 := make([]byte, 3), make([]byte, 9)
	dp := []uint64{addr(d1), addr(d2)}
	dl := []uint64{3, 9}
	var n uint64
	if st := Get(h, k, kl, unsafe.Pointer(&dp[0]), unsafe.Pointer(&dl[0]), 2, 0, &n); st != StatusOK {
		t.Fatalf("Get = %s: %s", StatusName(st), LastError(h))
	}
	if got := string(d1) + string(d2[:n-3]); n != 12 || got != "hello, world" {
		t.Errorf("Get = %d %q", n, got)
	}
	// Too small, missing, duplicate.
	if st := Get(h, k, kl, unsafe.Pointer(&dp[0]), unsafe.Pointer(&dl[0]), 1, 0, &n); st != StatusBufferTooSmall {
		t.Errorf("small Get = %s", StatusName(st))
	}
	m, ml := keyArg("missing")
	if st := Get(h, m, ml, unsafe.Pointer(&dp[0]), unsafe.Pointer(&dl[0]), 2, 0, &n); st != StatusNotFound {
		t.Errorf("missing Get = %s", StatusName(st))
	}
	if !strings.Contains(LastError(h), "not found") {
		t.Errorf("LastError = %q", LastError(h))
	}
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 2, 0, 0, 0, nil, 0, 0); st != StatusAlreadyExists {
		t.Errorf("duplicate Put = %s", StatusName(st))
	}
	if st := Put(h, k, kl, nil, nil, 0, 0, 0, 0, nil, 0, 0); st != StatusInvalidArgument {
		t.Errorf("Put without regions = %s", StatusName(st))
	}
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 2, 0, -1, 0, nil, 0, 0); st != StatusInvalidArgument {
		t.Errorf("Put replicas=-1 = %s", StatusName(st))
	}
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 2, 0, 0, 0x80, nil, 0, 0); st != StatusInvalidArgument {
		t.Errorf("Put flags=0x80 = %s", StatusName(st))
	}
	var size uint64
	if st := Size(h, k, kl, &size); st != StatusOK || size != 12 {
		t.Errorf("Size = %s %d", StatusName(st), size)
	}
	if st := Exists(h, k, kl); st != 1 {
		t.Errorf("Exists = %d", st)
	}
	if st := Remove(h, k, kl, false); st != StatusOK {
		t.Errorf("Remove = %s", StatusName(st))
	}
	if st := Exists(h, k, kl); st != 0 {
		t.Errorf("Exists after Remove = %d", st)
	}
	if st := Remove(h, k, kl, false); st != StatusNotFound {
		t.Errorf("second Remove = %s", StatusName(st))
	}
}

func TestBatch(t *testing.T) {
	f := newFake(100)
	h := openFake(t, f)
	// Three keys: k0 in one part, k1 in two parts, k2 too big for the store.
	src := bytes.Repeat([]byte("x"), 128)
	copy(src, "0123456789")
	keys := keysOf("k0", "k1", "k2")
	ptrs := []uint64{addr(src), addr(src) + 4, addr(src) + 6, addr(src)}
	lens := []uint64{4, 2, 4, 128}
	parts := []uint32{1, 2, 1}
	st := make([]int32, 3)
	if rc := BatchPut(h, 3, keys.p(), keys.l(), unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]),
		unsafe.Pointer(&parts[0]), 7, 0, 0, nil, 0, 0, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchPut = %s", StatusName(rc))
	}
	if st[0] != StatusOK || st[1] != StatusOK || st[2] != StatusNoSpace {
		t.Errorf("statuses = %v", st)
	}
	if !strings.Contains(LastError(h), `"k2"`) {
		t.Errorf("LastError = %q, want it to name k2", LastError(h))
	}
	ex := make([]int32, 3)
	if rc := BatchExists(h, 3, keys.p(), keys.l(), false, unsafe.Pointer(&ex[0])); rc != StatusOK || ex[0] != 1 || ex[1] != 1 || ex[2] != 0 {
		t.Errorf("BatchExists = %s %v", StatusName(rc), ex)
	}

	dst := make([]byte, 32)
	gp := []uint64{addr(dst), addr(dst) + 8, addr(dst) + 16}
	gl := []uint64{8, 8, 8}
	nread := make([]uint64, 3)
	if rc := BatchGet(h, 3, keys.p(), keys.l(), unsafe.Pointer(&gp[0]), unsafe.Pointer(&gl[0]), nil, 0,
		unsafe.Pointer(&nread[0]), unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchGet = %s", StatusName(rc))
	}
	if st[0] != StatusOK || st[1] != StatusOK || st[2] != StatusNotFound {
		t.Errorf("statuses = %v", st)
	}
	if nread[0] != 4 || nread[1] != 6 || string(dst[:4]) != "0123" || string(dst[8:14]) != "456789" {
		t.Errorf("BatchGet = %v %q", nread, dst)
	}

	// A rejected batch writes its status to every element.
	if rc := BatchGet(h, 3, keys.p(), keys.l(), nil, nil, nil, 0, nil, unsafe.Pointer(&st[0])); rc != StatusInvalidArgument ||
		st[0] != rc || st[2] != rc {
		t.Errorf("BatchGet without regions = %s %v", StatusName(rc), st)
	}
	if rc := BatchPut(999999, 3, keys.p(), keys.l(), unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0,
		unsafe.Pointer(&st[0])); rc != StatusInvalidHandle || st[1] != rc {
		t.Errorf("BatchPut on a bad handle = %s %v", StatusName(rc), st)
	}
	if rc := BatchPut(h, 0, nil, nil, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0, nil); rc != StatusOK {
		t.Errorf("empty BatchPut = %s", StatusName(rc))
	}
	var removed uint64
	if rc := RemoveAll(h, false, &removed); rc != StatusOK || removed != 2 {
		t.Errorf("RemoveAll = %s %d", StatusName(rc), removed)
	}
}

func TestBytes(t *testing.T) {
	h := openFake(t, newFake(1<<20))
	data := []byte("some bytes")
	k, kl := keyArg("b")
	if st := PutBytes(h, k, kl, unsafe.Pointer(&data[0]), uint64(len(data)), 0, 0, nil, 0, 0); st != StatusOK {
		t.Fatalf("PutBytes = %s", StatusName(st))
	}
	small := make([]byte, 4)
	var size uint64
	if st := GetBytes(h, k, kl, unsafe.Pointer(&small[0]), 4, &size); st != StatusBufferTooSmall || size != 10 {
		t.Errorf("GetBytes small = %s %d", StatusName(st), size)
	}
	buf := make([]byte, 10)
	if st := GetBytes(h, k, kl, unsafe.Pointer(&buf[0]), 10, &size); st != StatusOK || string(buf) != "some bytes" {
		t.Errorf("GetBytes = %s %q", StatusName(st), buf)
	}
	name := make([]byte, 5)
	var n uint64
	if st := Hostname(h, name, &n); st != StatusOK || n != 8 || string(name) != "fake\x00" {
		t.Errorf("Hostname = %s %d %q (want truncated, NUL-terminated)", StatusName(st), n, name)
	}
}

// TestGetBytesSizeFirst: kvfabric_get_bytes learns the object's size before
// copying anything, so a buffer that is too small costs no copy of the
// object into the Go heap, and one that fits receives it directly.
func TestGetBytesSizeFirst(t *testing.T) {
	f := newFake(1 << 20)
	h := openFake(t, f)
	data := []byte("some bytes")
	k, kl := keyArg("b")
	if st := PutBytes(h, k, kl, unsafe.Pointer(&data[0]), uint64(len(data)), 0, 0, nil, 0, 0); st != StatusOK {
		t.Fatalf("PutBytes = %s", StatusName(st))
	}
	small := []byte("....")
	var size uint64
	if st := GetBytes(h, k, kl, unsafe.Pointer(&small[0]), 4, &size); st != StatusBufferTooSmall || size != 10 {
		t.Errorf("GetBytes into 4 bytes = %s, size %d; want KVFABRIC_ERR_BUFFER_TOO_SMALL, 10", StatusName(st), size)
	}
	if string(small) != "...." {
		t.Errorf("a too-small buffer was written: %q", small)
	}
	size = 0
	if st := GetBytes(h, k, kl, nil, 0, &size); st != StatusBufferTooSmall || size != 10 {
		t.Errorf("GetBytes(NULL, 0) = %s, size %d; want KVFABRIC_ERR_BUFFER_TOO_SMALL, 10", StatusName(st), size)
	}
	buf := make([]byte, 16)
	if st := GetBytes(h, k, kl, unsafe.Pointer(&buf[0]), 16, &size); st != StatusOK || size != 10 || string(buf[:10]) != "some bytes" {
		t.Errorf("GetBytes = %s, size %d, %q", StatusName(st), size, buf)
	}
	f.mu.Lock()
	heap := f.mu.heapCopies
	f.mu.Unlock()
	if heap != 0 {
		t.Errorf("GetBytes copied the object into the Go heap %d times, want 0", heap)
	}
	if st := GetBytes(h, k, kl, nil, 16, &size); st != StatusInvalidArgument {
		t.Errorf("GetBytes(NULL, 16) = %s, want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(st))
	}
}

// TestNullKey: a NULL key (or preferred-segments string) with a non-zero
// length is KVFABRIC_ERR_INVALID_ARGUMENT naming the argument, in every call
// that takes one, never a panic.
func TestNullKey(t *testing.T) {
	h := openFake(t, newFake(1<<20))
	data := []byte("v")
	ptrs, lens := []uint64{addr(data)}, []uint64{1}
	p, l := unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0])
	var n uint64
	k, kl := keyArg("k")
	st := make([]int32, 1)
	nullKeys := &cKeys{ptrs: []unsafe.Pointer{nil}, lens: []uint64{3}}
	for _, tc := range []struct {
		name string
		call func() int32
		what string
	}{
		{"put", func() int32 { return Put(h, nil, 3, p, l, 1, 0, 0, 0, nil, 0, 0) }, "key"},
		{"put preferred", func() int32 { return Put(h, k, kl, p, l, 1, 0, 0, 0, nil, 5, 0) }, "preferred"},
		{"get", func() int32 { return Get(h, nil, 3, p, l, 1, 0, &n) }, "key"},
		{"put_bytes", func() int32 { return PutBytes(h, nil, 3, unsafe.Pointer(&data[0]), 1, 0, 0, nil, 0, 0) }, "key"},
		{"put_bytes preferred", func() int32 { return PutBytes(h, k, kl, unsafe.Pointer(&data[0]), 1, 0, 0, nil, 2, 0) }, "preferred"},
		{"get_bytes", func() int32 { return GetBytes(h, nil, 3, unsafe.Pointer(&data[0]), 1, &n) }, "key"},
		{"exists", func() int32 { return Exists(h, nil, 3) }, "key"},
		{"size", func() int32 { return Size(h, nil, 3, &n) }, "key"},
		{"remove", func() int32 { return Remove(h, nil, 3, true) }, "key"},
		{"batch_put", func() int32 {
			return BatchPut(h, 1, nullKeys.p(), nullKeys.l(), p, l, nil, 0, 0, 0, nil, 0, 0, unsafe.Pointer(&st[0]))
		}, "key 0"},
		{"batch_put preferred", func() int32 {
			ks := keysOf("k")
			return BatchPut(h, 1, ks.p(), ks.l(), p, l, nil, 0, 0, 0, nil, 4, 0, unsafe.Pointer(&st[0]))
		}, "preferred"},
		{"batch_get", func() int32 {
			return BatchGet(h, 1, nullKeys.p(), nullKeys.l(), p, l, nil, 0, nil, unsafe.Pointer(&st[0]))
		}, "key 0"},
		{"batch_exists", func() int32 { return BatchExists(h, 1, nullKeys.p(), nullKeys.l(), false, unsafe.Pointer(&st[0])) }, "key 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.call(); got != StatusInvalidArgument {
				t.Fatalf("status %s (%s), want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(got), LastError(h))
			}
			if msg := LastError(h); !strings.Contains(msg, tc.what) || !strings.Contains(msg, "NULL") {
				t.Errorf("last error %q does not say that %s is NULL", msg, tc.what)
			}
		})
	}
	// NULL with length 0 is the empty key (the store's to judge), not an
	// ABI error.
	if got := Exists(h, nil, 0); got != StatusInvalidArgument || strings.Contains(LastError(h), "NULL") {
		t.Errorf("Exists(NULL, 0) = %s, %q; want the store's invalid-key error", StatusName(got), LastError(h))
	}
}

func TestPanicBecomesStatus(t *testing.T) {
	f := newFake(1 << 20)
	f.panicOn = "bomb"
	h := openFake(t, f)
	data := []byte("x")
	k, kl := keyArg("bomb")
	ptrs, lens := []uint64{addr(data)}, []uint64{1}
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 1, 0, 0, 0, nil, 0, 0); st != StatusPanic {
		t.Fatalf("Put = %s, want KVFABRIC_ERR_PANIC", StatusName(st))
	}
	if !strings.Contains(LastError(h), "fake: boom") {
		t.Errorf("LastError = %q", LastError(h))
	}
	// The handle still works.
	k, kl = keyArg("fine")
	if st := Put(h, k, kl, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), 1, 0, 0, 0, nil, 0, 0); st != StatusOK {
		t.Errorf("Put after panic = %s", StatusName(st))
	}
	if st := Panicked("capi"); st != StatusPanic || !strings.Contains(LastError(0), "capi") {
		t.Errorf("Panicked = %s, %q", StatusName(st), LastError(0))
	}
}

func TestCloseRetry(t *testing.T) {
	f := newFake(1 << 20)
	f.mu.closeFails = 2
	h := openFake(t, f)
	for i := range 2 {
		if st := Close(h); st != StatusCleanupPending {
			t.Fatalf("Close #%d = %s", i, StatusName(st))
		}
		if CleanupPending(h) != 1 {
			t.Errorf("CleanupPending = %d", CleanupPending(h))
		}
		if !strings.Contains(LastError(h), "unmap failed") {
			t.Errorf("LastError = %q", LastError(h))
		}
		k, kl := keyArg("k")
		if st := Exists(h, k, kl); st != StatusClosed {
			t.Errorf("Exists while cleanup pending = %s", StatusName(st))
		}
	}
	before := OpenHandles()
	if st := Close(h); st != StatusOK {
		t.Fatalf("third Close = %s", StatusName(st))
	}
	if OpenHandles() != before-1 {
		t.Errorf("handle not released")
	}
	if st := Close(h); st != StatusInvalidHandle {
		t.Errorf("Close of a released handle = %s", StatusName(st))
	}
	if st := Health(h); st != StatusInvalidHandle || !strings.Contains(LastError(0), "invalid handle") {
		t.Errorf("Health = %s, %q", StatusName(st), LastError(0))
	}
}

func TestCopyLastError(t *testing.T) {
	setGlobalErr(errors.New("0123456789"))
	buf := make([]byte, 4)
	if n := CopyLastError(0, buf); n != 10 || string(buf) != "012\x00" {
		t.Errorf("CopyLastError = %d %q", n, buf)
	}
	if n := CopyLastError(0, nil); n != 10 {
		t.Errorf("CopyLastError(nil) = %d", n)
	}
}

func TestFaultDriver(t *testing.T) {
	cfg := config.Defaults()
	cfg.Driver = config.DriverSim
	t.Setenv(EnvTestFaults, "")
	if d, err := faultDriver(cfg); d != nil || err != nil {
		t.Fatalf("unset: %v %v", d, err)
	}
	t.Setenv(EnvTestFaults, `[{"method":"MemUnmap","nth":1,"code":999}]`)
	d, err := faultDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.MemUnmap(0, 0, 0); err == nil || !strings.Contains(err.Error(), "UNKNOWN") {
		t.Errorf("MemUnmap = %v, want the injected CUDA_ERROR_UNKNOWN", err)
	}
	for _, bad := range []string{`[{"method":"MemUnmap","nth":0,"code":999}]`, `[{"nth":1}]`, `{`, `[{"when":1}]`} {
		t.Setenv(EnvTestFaults, bad)
		if _, err := faultDriver(cfg); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: err = %v, want config.ErrInvalid", bad, err)
		}
	}
	cfg.Driver = config.DriverCUDA
	if _, err := faultDriver(cfg); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("driver=cuda: err = %v", err)
	}
}

// TestDriverAndHandleType: the Store's driver and resolved handle type
// reach C callers (issue 11: store.driver, store.handle_type in Python).
func TestDriverAndHandleType(t *testing.T) {
	h := openFake(t, newFake(1<<20))
	buf := make([]byte, 16)
	var n uint64
	if st := DriverName(h, buf, &n); st != StatusOK || n != 3 || string(buf[:4]) != "sim\x00" {
		t.Errorf("DriverName = %s %d %q", StatusName(st), n, buf)
	}
	if st := HandleType(h, buf, &n); st != StatusOK || n != 8 || string(buf[:9]) != "posix_fd\x00" {
		t.Errorf("HandleType = %s %d %q", StatusName(st), n, buf)
	}
	if st := HandleType(h, buf[:3], &n); st != StatusOK || n != 8 || string(buf[:3]) != "po\x00" {
		t.Errorf("HandleType truncated = %s %d %q", StatusName(st), n, buf[:3])
	}
	if st := DriverName(-5, buf, &n); st != StatusInvalidHandle {
		t.Errorf("DriverName(bad handle) = %s", StatusName(st))
	}
}
