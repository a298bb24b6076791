package cabi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
)

// openSim opens a Store on the simulator with an embedded master (an EGM
// provider of 16 MiB) through the ABI, and closes it at the end of the
// test unless the test did.
func openSim(t *testing.T) int64 {
	t.Helper()
	// Not t.TempDir: a Unix socket's path must stay under 108 bytes.
	sockets, err := os.MkdirTemp("", "kvf-cabi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	h, st, msg := Open(fmt.Appendf(nil, `{"driver":"sim","protocol":"nvlink","master_server_addr":"embedded",
		"enable_egm_store_pool":true,"global_segment_size":"16MiB","local_buffer_size":0,"lease_ttl":"2s",
		"local_hostname":"cabi-views","socket_dir":%q}`, sockets))
	if st != StatusOK {
		t.Fatalf("Open = %s (%s)", StatusName(st), msg)
	}
	t.Cleanup(func() {
		if st := Close(h); st != StatusOK && st != StatusInvalidHandle {
			t.Errorf("Close = %s: %s", StatusName(st), LastError(h))
		}
	})
	return h
}

// hostMem is a registered host buffer standing in for device memory (the
// simulator's GPU reaches registered host memory, as a real one does).
type hostMem struct {
	b   []byte
	off int
}

func registered(t *testing.T, h int64, n int) *hostMem {
	t.Helper()
	m := &hostMem{b: make([]byte, n)}
	p := uintptr(unsafe.Pointer(&m.b[0]))
	if st := RegisterBuffer(h, p, uint64(n)); st != StatusOK {
		t.Fatalf("RegisterBuffer = %s: %s", StatusName(st), LastError(h))
	}
	t.Cleanup(func() {
		UnregisterBuffer(h, p) // fails harmlessly once the Store is closed
		runtime.KeepAlive(m.b)
	})
	return m
}

// take returns the next n bytes of m, 64-byte aligned.
func (m *hostMem) take(n int) []byte {
	s := m.b[m.off : m.off+n : m.off+n]
	m.off += (n + 63) &^ 63
	return s
}

// at is the n bytes at a process address (the simulator's device
// addresses are process addresses). The pointer is read through memory so
// that vet sees no uintptr-to-pointer conversion.
func at(p uint64, n uint64) []byte {
	ptr := uintptr(p)
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&ptr))), n)
}

// putObjects puts keys[i] with rows[i] rows of rowBytes random bytes (and
// a few trailing bytes that are not a row) and returns the values, read
// back with full gets.
func putObjects(t *testing.T, h int64, keys []string, rows []int, rowBytes int) [][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(15, 2))
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		v := make([]byte, rows[i]*rowBytes+rng.IntN(rowBytes))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		kp, kl := keyArg(k)
		if st := PutBytes(h, kp, kl, unsafe.Pointer(&v[0]), uint64(len(v)), 0, 0, nil, 0, 0); st != StatusOK {
			t.Fatalf("PutBytes %q = %s: %s", k, StatusName(st), LastError(h))
		}
		got := make([]byte, len(v))
		var n uint64
		if st := GetBytes(h, kp, kl, unsafe.Pointer(&got[0]), uint64(len(got)), &n); st != StatusOK || !bytes.Equal(got, v) {
			t.Fatalf("GetBytes %q = %s", k, StatusName(st))
		}
		vals[i] = got
	}
	return vals
}

// selected is the reference gather: rows sel[i] of vals[i], in order;
// an index out of range is a zero row.
func selected(vals [][]byte, sel [][]int64, rowBytes int) []byte {
	var out []byte
	for i, rs := range sel {
		for _, r := range rs {
			if r < 0 || int(r) >= len(vals[i])/rowBytes {
				out = append(out, make([]byte, rowBytes)...)
				continue
			}
			out = append(out, vals[i][int(r)*rowBytes:][:rowBytes]...)
		}
	}
	return out
}

// hostRows flattens sel as kvfabric_*gather take host indices.
func hostRows(sel [][]int64) (rows, counts []uint64) {
	for _, rs := range sel {
		counts = append(counts, uint64(len(rs)))
		for _, r := range rs {
			rows = append(rows, uint64(r))
		}
	}
	return rows, counts
}

// poisoned reports whether every byte of b is still the tests' 0xEE.
func poisoned(b []byte) bool {
	for _, c := range b {
		if c != 0xEE {
			return false
		}
	}
	return true
}

func ptrOf[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// TestAcquireViews: kvfabric_acquire holds keys (per key the preferred
// replica's address, the size, a status, the first failure's message as
// the last error); the bytes at the addresses are the objects'; held
// objects refuse a plain remove; check is OK while held; after release
// the handle is invalid for every views call and a plain remove succeeds.
func TestAcquireViews(t *testing.T) {
	h := openSim(t)
	keys := []string{"a", "b"}
	vals := putObjects(t, h, keys, []int{10, 3}, 32)

	ks := keysOf("a", "missing", "b")
	var views int64
	addrs := []uint64{7, 7, 7}
	sizes := make([]uint64, 3)
	st := make([]int32, 3)
	if rc := Acquire(h, 3, ks.p(), ks.l(), &views, unsafe.Pointer(&addrs[0]), unsafe.Pointer(&sizes[0]), unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("Acquire = %s: %s", StatusName(rc), LastError(h))
	}
	if views <= 0 {
		t.Fatalf("views handle %d", views)
	}
	if st[0] != StatusOK || st[1] != StatusNotFound || st[2] != StatusOK {
		t.Errorf("statuses %v, want OK, NOT_FOUND, OK", st)
	}
	if msg := LastError(h); !strings.Contains(msg, `"missing"`) {
		t.Errorf("last error %q does not name the missing key", msg)
	}
	if addrs[1] != 0 || sizes[1] != 0 {
		t.Errorf("missing key: addr %#x, size %d; want 0, 0", addrs[1], sizes[1])
	}
	for i, j := range []int{0, 2} {
		if sizes[j] != uint64(len(vals[i])) || addrs[j] == 0 {
			t.Fatalf("key %q: addr %#x size %d, want a view of %d bytes", keys[i], addrs[j], sizes[j], len(vals[i]))
		}
		if got := at(addrs[j], sizes[j]); !bytes.Equal(got, vals[i]) {
			t.Errorf("key %q: the bytes at its view differ from a full get", keys[i])
		}
	}
	if rc := ViewsCheck(h, views); rc != StatusOK {
		t.Errorf("ViewsCheck = %s: %s", StatusName(rc), LastError(h))
	}
	ka, kal := keyArg("a")
	if rc := Remove(h, ka, kal, false); rc != StatusHasLease {
		t.Errorf("plain Remove of a held key = %s, want KVFABRIC_ERR_HAS_LEASE", StatusName(rc))
	}

	if rc := ViewsRelease(h, views); rc != StatusOK {
		t.Fatalf("ViewsRelease = %s: %s", StatusName(rc), LastError(h))
	}
	rows, counts := hostRows([][]int64{{0}, {}, {0}})
	dst := registered(t, h, 4096).take(64)
	for name, call := range map[string]func() int32{
		"check":   func() int32 { return ViewsCheck(h, views) },
		"release": func() int32 { return ViewsRelease(h, views) },
		"gather": func() int32 {
			return ViewsGather(h, views, ptrOf(rows), ptrOf(counts), 0, 0, 0, 0, 32, addr(dst), 64, 0)
		},
	} {
		if rc := call(); rc != StatusInvalidHandle {
			t.Errorf("%s after release = %s, want KVFABRIC_ERR_INVALID_HANDLE", name, StatusName(rc))
		} else if msg := LastError(h); !strings.Contains(msg, fmt.Sprintf("views %d", views)) {
			t.Errorf("%s after release: last error %q does not name the views handle", name, msg)
		}
	}
	if rc := Remove(h, ka, kal, false); rc != StatusOK {
		t.Errorf("plain Remove after release = %s: %s", StatusName(rc), LastError(h))
	}

	// A views handle belongs to its Store: another Store's handle does not
	// reach it, and views of no keys are still a handle to release.
	var empty int64
	if rc := Acquire(h, 0, nil, nil, &empty, nil, nil, nil); rc != StatusOK || empty <= 0 || empty == views {
		t.Fatalf("Acquire of no keys = %s, handle %d", StatusName(rc), empty)
	}
	if rc := ViewsCheck(h, empty); rc != StatusOK {
		t.Errorf("ViewsCheck(no keys) = %s", StatusName(rc))
	}
	if rc := ViewsRelease(h, empty); rc != StatusOK {
		t.Errorf("ViewsRelease(no keys) = %s", StatusName(rc))
	}
}

// TestGatherABI: kvfabric_views_gather and kvfabric_gather copy exactly
// the selected rows — host indices uniform and ragged, device int32 and
// int64 indices with out-of-range rows zeroed and counted — byte-exact
// against the objects read with full gets.
func TestGatherABI(t *testing.T) {
	const rowBytes = 48
	h := openSim(t)
	keys := []string{"o0", "o1", "o2"}
	vals := putObjects(t, h, keys, []int{40, 7, 100}, rowBytes)
	ks := keysOf(keys...)
	var views int64
	st := make([]int32, 3)
	if rc := Acquire(h, 3, ks.p(), ks.l(), &views, nil, nil, unsafe.Pointer(&st[0])); rc != StatusOK || st[0]|st[1]|st[2] != 0 {
		t.Fatalf("Acquire = %s %v: %s", StatusName(rc), st, LastError(h))
	}
	defer ViewsRelease(h, views)

	mem := registered(t, h, 1<<20)
	const cap = 32 * rowBytes
	dst := mem.take(cap)
	idx := mem.take(3 * 4 * 8)
	bad := mem.take(4)
	run := func(t *testing.T, gather func() int32, want []byte) {
		t.Helper()
		for i := range dst {
			dst[i] = 0xEE
		}
		if rc := gather(); rc != StatusOK {
			t.Fatalf("gather = %s: %s", StatusName(rc), LastError(h))
		}
		if !bytes.Equal(dst[:len(want)], want) {
			t.Errorf("gathered rows differ from the rows of full gets")
		}
		if !poisoned(dst[len(want):]) {
			t.Errorf("gather wrote past its %d bytes", len(want))
		}
	}
	for _, tc := range []struct {
		name string
		sel  [][]int64
	}{
		{"host uniform", [][]int64{{0, 39, 5, 5}, {6, 0, 1, 2}, {99, 50, 0, 1}}},
		{"host ragged", [][]int64{{3}, {}, {1, 2, 98, 7, 7}}},
	} {
		rows, counts := hostRows(tc.sel)
		want := selected(vals, tc.sel, rowBytes)
		t.Run("views/"+tc.name, func(t *testing.T) {
			run(t, func() int32 {
				return ViewsGather(h, views, ptrOf(rows), ptrOf(counts), 0, 0, 0, 0, rowBytes, addr(dst), cap, 0)
			}, want)
		})
		t.Run("one-shot/"+tc.name, func(t *testing.T) {
			run(t, func() int32 {
				return Gather(h, 3, ks.p(), ks.l(), ptrOf(rows), ptrOf(counts), 0, 0, 0, 0, rowBytes, addr(dst), cap, 0)
			}, want)
		})
	}
	// Device indices [3][4]: -1 and 7 (o1 has 7 rows) and 1000 are out of
	// range: zero rows, counted.
	sel := [][]int64{{0, 39, -1, 2}, {6, 7, 0, 3}, {99, 1000, 4, 0}}
	want := selected(vals, sel, rowBytes)
	for _, elem := range []uint32{4, 8} {
		for i, rs := range sel {
			for j, r := range rs {
				o := (i*4 + j) * int(elem)
				if elem == 4 {
					binary.LittleEndian.PutUint32(idx[o:], uint32(int32(r)))
				} else {
					binary.LittleEndian.PutUint64(idx[o:], uint64(r))
				}
			}
		}
		for _, oneShot := range []bool{false, true} {
			t.Run(fmt.Sprintf("device int%d one-shot=%v", elem*8, oneShot), func(t *testing.T) {
				binary.LittleEndian.PutUint32(bad, 0)
				run(t, func() int32 {
					if oneShot {
						return Gather(h, 3, ks.p(), ks.l(), nil, nil, addr(idx), 4, elem, addr(bad), rowBytes, addr(dst), cap, 0)
					}
					return ViewsGather(h, views, nil, nil, addr(idx), 4, elem, addr(bad), rowBytes, addr(dst), cap, 0)
				}, want)
				if n := binary.LittleEndian.Uint32(bad); n != 3 {
					t.Errorf("out-of-range counter = %d, want 3", n)
				}
			})
		}
	}
	if rc := ViewsCheck(h, views); rc != StatusOK {
		t.Errorf("ViewsCheck after the gathers = %s: %s", StatusName(rc), LastError(h))
	}
}

// TestGatherBadInput: bad arguments to the gathers and to acquire are a
// status and a last error naming the argument, and change nothing (the
// destination keeps its bytes).
func TestGatherBadInput(t *testing.T) {
	const rowBytes = 16
	h := openSim(t)
	putObjects(t, h, []string{"x", "y"}, []int{4, 2}, rowBytes)
	ks := keysOf("x", "y")
	var views int64
	if rc := Acquire(h, 2, ks.p(), ks.l(), &views, nil, nil, nil); rc != StatusOK {
		t.Fatalf("Acquire = %s: %s", StatusName(rc), LastError(h))
	}
	defer ViewsRelease(h, views)
	var failed int64
	fk := keysOf("x", "nope")
	if rc := Acquire(h, 2, fk.p(), fk.l(), &failed, nil, nil, nil); rc != StatusOK {
		t.Fatalf("Acquire = %s: %s", StatusName(rc), LastError(h))
	}
	defer ViewsRelease(h, failed)

	mem := registered(t, h, 1<<16)
	dst := mem.take(256)
	idx := mem.take(16)
	rows, counts := []uint64{0, 1, 1}, []uint64{2, 1}
	pr, pc := ptrOf(rows), ptrOf(counts)
	d := addr(dst)
	outOfRange := []uint64{0, 2}
	nullKeys := &cKeys{ptrs: []unsafe.Pointer{nil, nil}, lens: []uint64{1, 1}}
	unreg := make([]byte, 256)
	for _, tc := range []struct {
		name string
		call func() int32
		want int32
		what string // in the last error
	}{
		{"unknown views", func() int32 { return ViewsGather(h, 999999, pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidHandle, "views 999999"},
		{"unknown store", func() int32 { return ViewsGather(-3, views, pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidHandle, "invalid handle -3"},
		{"no rows", func() int32 { return ViewsGather(h, views, nil, nil, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "host_counts"},
		{"host_rows NULL", func() int32 { return ViewsGather(h, views, nil, pc, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "host_rows is NULL"},
		{"host and device", func() int32 { return ViewsGather(h, views, pr, pc, addr(idx), 2, 4, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "dev_rows"},
		{"per_key on host", func() int32 { return ViewsGather(h, views, pr, pc, 0, 2, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "per_key=2"},
		{"bad on host", func() int32 { return ViewsGather(h, views, pr, pc, 0, 0, 0, addr(idx), rowBytes, d, 256, 0) }, StatusInvalidArgument, "bad="},
		{"index out of range", func() int32 {
			return ViewsGather(h, views, ptrOf(outOfRange), ptrOf([]uint64{0, 2}), 0, 0, 0, 0, rowBytes, d, 256, 0)
		}, StatusInvalidArgument, "rows.Host[1][1] = 2"},
		{"row_bytes 0", func() int32 { return ViewsGather(h, views, pr, pc, 0, 0, 0, 0, 0, d, 256, 0) }, StatusInvalidArgument, "row bytes is 0"},
		{"dst NULL", func() int32 { return ViewsGather(h, views, pr, pc, 0, 0, 0, 0, rowBytes, 0, 256, 0) }, StatusInvalidArgument, "destination is a null pointer"},
		{"dst too small", func() int32 { return ViewsGather(h, views, pr, pc, 0, 0, 0, 0, rowBytes, d, 47, 0) }, StatusBufferTooSmall, "need 48 bytes"},
		{"dst unregistered", func() int32 {
			return ViewsGather(h, views, pr, pc, 0, 0, 0, 0, rowBytes, addr(unreg), 256, 0)
		}, StatusNotRegistered, "gather destination"},
		{"elem_bytes 3", func() int32 { return ViewsGather(h, views, nil, nil, addr(idx), 2, 3, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "ElemBytes 3"},
		{"per_key 0", func() int32 { return ViewsGather(h, views, nil, nil, addr(idx), 0, 4, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "PerKey 0"},
		{"a failed key", func() int32 { return ViewsGather(h, failed, pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusNotFound, `"nope"`},
		{"one-shot missing key", func() int32 {
			return Gather(h, 2, fk.p(), fk.l(), pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0)
		}, StatusNotFound, `"nope"`},
		{"one-shot keys NULL", func() int32 { return Gather(h, 2, nil, nil, pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "keys"},
		{"one-shot key NULL", func() int32 {
			return Gather(h, 2, nullKeys.p(), nullKeys.l(), pr, pc, 0, 0, 0, 0, rowBytes, d, 256, 0)
		}, StatusInvalidArgument, "key 0"},
		{"one-shot no rows", func() int32 { return Gather(h, 2, ks.p(), ks.l(), nil, nil, 0, 0, 0, 0, rowBytes, d, 256, 0) }, StatusInvalidArgument, "host_counts"},
		{"one-shot index out of range", func() int32 {
			return Gather(h, 2, ks.p(), ks.l(), ptrOf(outOfRange), ptrOf([]uint64{0, 2}), 0, 0, 0, 0, rowBytes, d, 256, 0)
		}, StatusInvalidArgument, "rows.Host[1][1] = 2"},
		{"acquire views NULL", func() int32 { return Acquire(h, 2, ks.p(), ks.l(), nil, nil, nil, nil) }, StatusInvalidArgument, "views is NULL"},
		{"acquire keys NULL", func() int32 {
			var v int64
			return Acquire(h, 2, nil, nil, &v, nil, nil, nil)
		}, StatusInvalidArgument, "keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range dst {
				dst[i] = 0xEE
			}
			got := tc.call()
			if got != tc.want {
				t.Fatalf("status %s (%s), want %s", StatusName(got), LastError(h), StatusName(tc.want))
			}
			msg := LastError(h)
			if got == StatusInvalidHandle && strings.Contains(tc.name, "store") {
				msg = LastError(0)
			}
			if !strings.Contains(msg, tc.what) {
				t.Errorf("last error %q does not name %q", msg, tc.what)
			}
			if !poisoned(dst) {
				t.Errorf("the destination was written")
			}
		})
	}
	// A rejected acquire writes its status to every key and no handle.
	v := int64(-1)
	st := []int32{1, 1}
	if rc := Acquire(h, 2, nullKeys.p(), nullKeys.l(), &v, nil, nil, unsafe.Pointer(&st[0])); rc != StatusInvalidArgument ||
		v != 0 || st[0] != rc || st[1] != rc {
		t.Errorf("rejected Acquire = %s, handle %d, statuses %v", StatusName(rc), v, st)
	}
}

// TestViewsAfterClose: closing the Store frees its views handles — after
// a Close that succeeded (the store handle is gone) and after one that
// failed part-way (the store handle stays for the retry, its views do
// not) — and an Acquire that registers its views after the Close releases
// them instead.
func TestViewsAfterClose(t *testing.T) {
	acquire := func(t *testing.T, h int64, keys ...string) int64 {
		t.Helper()
		ks := keysOf(keys...)
		var v int64
		if rc := Acquire(h, uint64(len(keys)), ks.p(), ks.l(), &v, nil, nil, nil); rc != StatusOK {
			t.Fatalf("Acquire = %s: %s", StatusName(rc), LastError(h))
		}
		return v
	}
	t.Run("closed", func(t *testing.T) {
		h := openSim(t)
		putObjects(t, h, []string{"k"}, []int{2}, 8)
		v := acquire(t, h, "k")
		if rc := Close(h); rc != StatusOK {
			t.Fatalf("Close with views held = %s: %s", StatusName(rc), LastError(h))
		}
		for name, rc := range map[string]int32{"check": ViewsCheck(h, v), "release": ViewsRelease(h, v)} {
			if rc != StatusInvalidHandle {
				t.Errorf("%s after Close = %s, want KVFABRIC_ERR_INVALID_HANDLE", name, StatusName(rc))
			}
		}
	})
	t.Run("cleanup pending", func(t *testing.T) {
		t.Setenv(EnvTestFaults, `[{"method":"MemUnmap","nth":1,"code":999}]`)
		h := openSim(t)
		putObjects(t, h, []string{"k"}, []int{2}, 8)
		v := acquire(t, h, "k")
		if rc := Close(h); rc != StatusCleanupPending {
			t.Fatalf("Close with a failing unmap = %s, want KVFABRIC_ERR_CLEANUP_PENDING", StatusName(rc))
		}
		if rc := ViewsCheck(h, v); rc != StatusInvalidHandle || !strings.Contains(LastError(h), fmt.Sprintf("views %d", v)) {
			t.Errorf("check after a failed Close = %s (%s), want KVFABRIC_ERR_INVALID_HANDLE naming the views", StatusName(rc), LastError(h))
		}
		var w int64
		ks := keysOf("k")
		if rc := Acquire(h, 1, ks.p(), ks.l(), &w, nil, nil, nil); rc != StatusClosed || w != 0 {
			t.Errorf("Acquire after a failed Close = %s, handle %d", StatusName(rc), w)
		}
		if rc := Close(h); rc != StatusOK {
			t.Fatalf("Close retry = %s: %s", StatusName(rc), LastError(h))
		}
	})
	t.Run("acquire racing close", func(t *testing.T) {
		h := openSim(t)
		putObjects(t, h, []string{"k"}, []int{2}, 8)
		e, err := lookup(h)
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.store.Acquire(bg, []string{"k"})
		if err != nil {
			t.Fatal(err)
		}
		e.views.closeAll() // as Close does, before this Acquire registers
		if _, err := e.views.add(v); !errors.Is(err, client.ErrClosed) {
			t.Errorf("add after closeAll = %v, want ErrClosed", err)
		}
		if err := v.Err(); !errors.Is(err, client.ErrViewsReleased) {
			t.Errorf("views registered after closeAll: Err = %v, want ErrViewsReleased (released)", err)
		}
	})
}
