package cabi

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
)

// packedArg is the (pointer, size) of kvfabric_batch_put_packed's keys.
func packedArg(b []byte) (unsafe.Pointer, uint64) {
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), uint64(len(b))
}

func TestDecodePackedKeys(t *testing.T) {
	ok := []struct {
		n      uint64
		packed string
		want   []string
	}{
		{0, "", nil},
		{1, "abc", []string{"abc"}},
		{3, "a\x00bb\x00ccc", []string{"a", "bb", "ccc"}},
		// Empty keys decode as empty (the Store fails them per key, as it
		// does for a zero length in kvfabric_batch_put).
		{2, "a\x00", []string{"a", ""}},
		{3, "\x00\x00", []string{"", "", ""}},
		{1, "", []string{""}},
		{2, "ключ\x00鍵", []string{"ключ", "鍵"}},
	}
	for _, tt := range ok {
		t.Run(fmt.Sprintf("%d/%q", tt.n, tt.packed), func(t *testing.T) {
			b := []byte(tt.packed)
			p, size := packedArg(b)
			got, err := decodePackedKeys(tt.n, p, size)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("decodePackedKeys = %q, %v; want %q", got, err, tt.want)
			}
			// The keys are copies: the caller may reuse its buffer at once.
			for i := range b {
				b[i] = 'X'
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("keys changed with the caller's buffer: %q", got)
			}
		})
	}
	bad := []struct {
		n      uint64
		packed string
		nilPtr bool
		want   string
	}{
		{3, "a\x00b", false, "2 keys in 3 bytes, n is 3"},
		{1, "a\x00b", false, "more than 1 keys in 3 bytes"},
		{2, "a\x00b\x00", false, "more than 2 keys in 4 bytes"},
		{0, "ab", false, "2 bytes for a batch of 0 keys"},
		{2, "ab", true, "NULL with length 2"},
		{maxBatch + 1, "a", false, fmt.Sprintf("batch of %d keys", maxBatch+1)},
	}
	for _, tt := range bad {
		t.Run(fmt.Sprintf("bad/%d/%q", tt.n, tt.packed), func(t *testing.T) {
			p, size := packedArg([]byte(tt.packed))
			if tt.nilPtr {
				p = nil
			}
			got, err := decodePackedKeys(tt.n, p, size)
			if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodePackedKeys = %q, %v; want ErrInvalidArgument containing %q", got, err, tt.want)
			}
		})
	}
}

// Packed keys decode to what the same keys decode to as arrays.
func TestDecodePackedKeysMatchesArrays(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		keys := make([]string, 1+r.IntN(64))
		for i := range keys {
			k := make([]byte, r.IntN(12))
			for j := range k {
				k[j] = byte(1 + r.IntN(255)) // any byte but NUL
			}
			keys[i] = string(k)
		}
		joined := []byte(strings.Join(keys, "\x00"))
		p, size := packedArg(joined)
		got, err := decodePackedKeys(uint64(len(keys)), p, size)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		c := keysOf(keys...)
		want, err := decodeKeys(uint64(len(keys)), c.p(), c.l())
		if err != nil || !slices.Equal(got, want) || !slices.Equal(got, keys) {
			t.Fatalf("round %d: packed %q, arrays %q (%v), keys %q", round, got, want, err, keys)
		}
	}
}

func TestBatchPacked(t *testing.T) {
	f := newFake(100)
	h := openFake(t, f)
	// As TestBatch: k0 in one part, k1 in two, k2 too big for the store.
	src := bytes.Repeat([]byte("x"), 128)
	copy(src, "0123456789")
	keys := []byte("k0\x00k1\x00k2")
	kp, ks := packedArg(keys)
	ptrs := []uint64{addr(src), addr(src) + 4, addr(src) + 6, addr(src)}
	lens := []uint64{4, 2, 4, 128}
	parts := []uint32{1, 2, 1}
	st := make([]int32, 3)
	if rc := BatchPutPacked(h, 3, kp, ks, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]),
		unsafe.Pointer(&parts[0]), 7, 0, 0, nil, 0, 0, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchPutPacked = %s", StatusName(rc))
	}
	if st[0] != StatusOK || st[1] != StatusOK || st[2] != StatusNoSpace {
		t.Errorf("statuses = %v", st)
	}
	if !strings.Contains(LastError(h), `"k2"`) {
		t.Errorf("LastError = %q, want it to name k2", LastError(h))
	}
	dst := make([]byte, 32)
	gp := []uint64{addr(dst), addr(dst) + 8, addr(dst) + 16}
	gl := []uint64{8, 8, 8}
	nread := make([]uint64, 3)
	if rc := BatchGetPacked(h, 3, kp, ks, unsafe.Pointer(&gp[0]), unsafe.Pointer(&gl[0]), nil, 0,
		unsafe.Pointer(&nread[0]), unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchGetPacked = %s", StatusName(rc))
	}
	if st[0] != StatusOK || st[1] != StatusOK || st[2] != StatusNotFound {
		t.Errorf("statuses = %v", st)
	}
	if nread[0] != 4 || nread[1] != 6 || string(dst[:4]) != "0123" || string(dst[8:14]) != "456789" {
		t.Errorf("BatchGetPacked = %v %q", nread, dst)
	}

	// Keys that do not split into n: the whole batch is refused, every
	// status says so, and nothing is stored.
	two := []byte("k3\x00k4\x00k5")
	tp, ts := packedArg(two)
	st = []int32{1, 1, 1}
	if rc := BatchPutPacked(h, 2, tp, ts, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0,
		unsafe.Pointer(&st[0])); rc != StatusInvalidArgument || st[0] != rc || st[1] != rc || st[2] != 1 {
		t.Errorf("BatchPutPacked of 3 keys as 2 = %s %v", StatusName(rc), st)
	}
	if !strings.Contains(LastError(h), "more than 2 keys") {
		t.Errorf("LastError = %q", LastError(h))
	}
	probe := keysOf("k3", "k4", "k5")
	ex := make([]int32, 3)
	if rc := BatchExists(h, 3, probe.p(), probe.l(), false, unsafe.Pointer(&ex[0])); rc != StatusOK || ex[0] != 0 || ex[1] != 0 || ex[2] != 0 {
		t.Errorf("BatchExists after the refused batch = %s %v", StatusName(rc), ex)
	}
	st4 := make([]int32, 4) // statuses has n entries
	if rc := BatchGetPacked(h, 4, tp, ts, unsafe.Pointer(&gp[0]), unsafe.Pointer(&gl[0]), nil, 0, nil,
		unsafe.Pointer(&st4[0])); rc != StatusInvalidArgument || st4[3] != rc {
		t.Errorf("BatchGetPacked of 3 keys as 4 = %s %v", StatusName(rc), st4)
	}
	if rc := BatchGetPacked(h, 3, kp, ks, nil, nil, nil, 0, nil, unsafe.Pointer(&st[0])); rc != StatusInvalidArgument || st[2] != rc {
		t.Errorf("BatchGetPacked without regions = %s %v", StatusName(rc), st)
	}
	// A handle that is not open (never, or no longer): refused whole.
	st = []int32{1, 1, 1}
	if rc := BatchPutPacked(999999, 3, kp, ks, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0,
		unsafe.Pointer(&st[0])); rc != StatusInvalidHandle || st[0] != rc || st[2] != rc {
		t.Errorf("BatchPutPacked on a bad handle = %s %v", StatusName(rc), st)
	}
	if rc := BatchPutPacked(h, 0, nil, 0, unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0, nil); rc != StatusOK {
		t.Errorf("empty BatchPutPacked = %s", StatusName(rc))
	}
	var removed uint64
	if rc := RemoveAll(h, false, &removed); rc != StatusOK || removed != 2 {
		t.Errorf("RemoveAll = %s %d", StatusName(rc), removed)
	}
	if rc := Close(h); rc != StatusOK {
		t.Fatalf("Close = %s", StatusName(rc))
	}
	if rc := BatchGetPacked(h, 3, kp, ks, unsafe.Pointer(&gp[0]), unsafe.Pointer(&gl[0]), nil, 0, nil,
		unsafe.Pointer(&st[0])); rc != StatusInvalidHandle || st[1] != rc {
		t.Errorf("BatchGetPacked after Close = %s %v", StatusName(rc), st)
	}
}
