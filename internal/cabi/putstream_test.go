package cabi

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
)

// streamObjs are n objects of size bytes in registered memory of h (or in
// plain memory, for a fake Store), their keys and a destination for each.
type streamObjs struct {
	keys       []string
	ptrs, lens []uint64
	dsts       []uint64
	want, got  [][]byte
}

func newStreamObjs(t *testing.T, take func(int) []byte, prefix string, n, size int) *streamObjs {
	t.Helper()
	o := &streamObjs{}
	rng := rand.New(rand.NewPCG(uint64(n), 9))
	for i := range n {
		src := take(size)
		for j := range src {
			src[j] = byte(rng.Uint32())
		}
		dst := take(size)
		o.keys = append(o.keys, fmt.Sprintf("%s/%d", prefix, i))
		o.ptrs, o.lens, o.dsts = append(o.ptrs, addr(src)), append(o.lens, uint64(size)), append(o.dsts, addr(dst))
		o.want, o.got = append(o.want, src), append(o.got, dst)
	}
	return o
}

func begin(t *testing.T, h int64, n int, flags uint32) int64 {
	t.Helper()
	var s int64
	if rc := PutStreamBegin(h, uint64(n), 0, 0, flags, nil, 0, 0, &s); rc != StatusOK || s <= 0 {
		t.Fatalf("PutStreamBegin = %s, handle %d: %s", StatusName(rc), s, LastError(h))
	}
	return s
}

// feed feeds keys [lo, hi) of o, packed or as arrays.
func (o *streamObjs) feed(h, s int64, lo, hi int, packed bool) int32 {
	n := uint64(hi - lo)
	if packed {
		b := []byte(strings.Join(o.keys[lo:hi], "\x00"))
		kp, ks := packedArg(b)
		return PutStreamFeedPacked(h, s, n, kp, ks, unsafe.Pointer(&o.ptrs[lo]), unsafe.Pointer(&o.lens[lo]), nil)
	}
	c := keysOf(o.keys[lo:hi]...)
	return PutStreamFeed(h, s, n, c.p(), c.l(), unsafe.Pointer(&o.ptrs[lo]), unsafe.Pointer(&o.lens[lo]), nil)
}

func (o *streamObjs) feedAll(t *testing.T, h, s int64, lo, hi, step int) {
	t.Helper()
	for i := 0; lo < hi; i++ {
		e := min(lo+step, hi)
		if rc := o.feed(h, s, lo, e, i%2 == 0); rc != StatusOK {
			t.Fatalf("feed [%d, %d) = %s: %s", lo, e, StatusName(rc), LastError(h))
		}
		lo = e
	}
}

// exist counts how many of o's keys exist.
func (o *streamObjs) exist(t *testing.T, h int64) int {
	t.Helper()
	c := keysOf(o.keys...)
	ex := make([]int32, len(o.keys))
	if rc := BatchExists(h, uint64(len(o.keys)), c.p(), c.l(), false, unsafe.Pointer(&ex[0])); rc != StatusOK {
		t.Fatalf("BatchExists = %s: %s", StatusName(rc), LastError(h))
	}
	n := 0
	for _, e := range ex {
		n += int(e)
	}
	return n
}

// wantStored gets every key of o back and compares its bytes.
func (o *streamObjs) wantStored(t *testing.T, h int64) {
	t.Helper()
	c := keysOf(o.keys...)
	st := make([]int32, len(o.keys))
	if rc := BatchGet(h, uint64(len(o.keys)), c.p(), c.l(), unsafe.Pointer(&o.dsts[0]), unsafe.Pointer(&o.lens[0]), nil, 0,
		nil, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchGet = %s: %s", StatusName(rc), LastError(h))
	}
	for i := range o.keys {
		if st[i] != StatusOK || !bytes.Equal(o.got[i], o.want[i]) {
			t.Fatalf("get %s = %s, equal %v", o.keys[i], StatusName(st[i]), bytes.Equal(o.got[i], o.want[i]))
		}
	}
}

func wantStatuses(t *testing.T, what string, st []int32, want int32) {
	t.Helper()
	for i, s := range st {
		if s != want {
			t.Fatalf("%s: status of key %d = %s; want %s", what, i, StatusName(s), StatusName(want))
		}
	}
}

// testPutStream runs the ABI's put stream against the Store behind h:
// fed in pieces (packed and arrays), aborted, refused feeds, bad handles.
func testPutStream(t *testing.T, h int64, take func(int) []byte) {
	o := newStreamObjs(t, take, "ps", 37, 4096)
	n := len(o.keys)

	s := begin(t, h, n, 0)
	o.feedAll(t, h, s, 0, n, 5)
	st := make([]int32, n)
	if rc := PutStreamEnd(h, s, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("PutStreamEnd = %s: %s", StatusName(rc), LastError(h))
	}
	wantStatuses(t, "a stream fed in full", st, StatusOK)
	o.wantStored(t, h)
	if rc := PutStreamEnd(h, s, nil); rc != StatusInvalidHandle || !strings.Contains(LastError(h), fmt.Sprintf("put stream %d", s)) {
		t.Errorf("PutStreamEnd of an ended stream = %s (%s); want KVFABRIC_ERR_INVALID_HANDLE naming it", StatusName(rc), LastError(h))
	}
	var removed uint64
	if rc := RemoveAll(h, true, &removed); rc != StatusOK || removed != uint64(n) {
		t.Fatalf("RemoveAll = %s, %d", StatusName(rc), removed)
	}

	// A refused feed (keys that split into more than its n; n past the
	// stream's) feeds nothing: the stream goes on from where it was.
	s = begin(t, h, n, 0)
	o.feedAll(t, h, s, 0, 10, 10)
	b := []byte(strings.Join(o.keys[10:13], "\x00"))
	kp, ks := packedArg(b)
	if rc := PutStreamFeedPacked(h, s, 2, kp, ks, unsafe.Pointer(&o.ptrs[10]), unsafe.Pointer(&o.lens[10]), nil); rc != StatusInvalidArgument {
		t.Errorf("feed of 3 packed keys as 2 = %s; want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(rc))
	}
	big := newStreamObjs(t, take, "big", n, 64)
	if rc := big.feed(h, s, 0, n, true); rc != StatusInvalidArgument || !strings.Contains(LastError(h), "10 fed") {
		t.Errorf("feed past the stream's n = %s (%s); want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(rc), LastError(h))
	}
	if rc := PutStreamFeed(h, s, 1, nil, nil, nil, nil, nil); rc != StatusInvalidArgument {
		t.Errorf("feed of NULL keys = %s; want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(rc))
	}
	o.feedAll(t, h, s, 10, n, 9)
	if rc := PutStreamEnd(h, s, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("PutStreamEnd = %s: %s", StatusName(rc), LastError(h))
	}
	wantStatuses(t, "a stream after refused feeds", st, StatusOK)
	o.wantStored(t, h)
	if rc := RemoveAll(h, true, &removed); rc != StatusOK || removed != uint64(n) {
		t.Fatalf("RemoveAll = %s, %d", StatusName(rc), removed)
	}

	// Aborted, or ended before it is fed in full: every key fails, none
	// is stored.
	for _, abort := range []bool{true, false} {
		s = begin(t, h, n, 0)
		o.feedAll(t, h, s, 0, 30, 6)
		if abort {
			if rc := PutStreamAbort(h, s); rc != StatusOK {
				t.Fatalf("PutStreamAbort = %s", StatusName(rc))
			}
			if rc := o.feed(h, s, 30, n, true); rc != StatusInvalidArgument {
				t.Errorf("feed after abort = %s; want KVFABRIC_ERR_INVALID_ARGUMENT", StatusName(rc))
			}
		}
		if rc := PutStreamEnd(h, s, unsafe.Pointer(&st[0])); rc != StatusOK {
			t.Fatalf("PutStreamEnd = %s: %s", StatusName(rc), LastError(h))
		}
		wantStatuses(t, fmt.Sprintf("a stream stopped (abort %v)", abort), st, StatusInvalidArgument)
		if k := o.exist(t, h); k != 0 {
			t.Fatalf("%d keys of a stopped stream exist (abort %v); want none", k, abort)
		}
	}

	// Bad arguments and handles.
	var id int64
	if rc := PutStreamBegin(h, 1, 0, -1, 0, nil, 0, 0, &id); rc != StatusInvalidArgument || id != 0 {
		t.Errorf("PutStreamBegin with replicas=-1 = %s, handle %d", StatusName(rc), id)
	}
	if rc := PutStreamBegin(h, 1, 0, 0, 0, nil, 0, 0, nil); rc != StatusInvalidArgument {
		t.Errorf("PutStreamBegin with out NULL = %s", StatusName(rc))
	}
	if rc := PutStreamBegin(h, maxBatch+1, 0, 0, 0, nil, 0, 0, &id); rc != StatusInvalidArgument {
		t.Errorf("PutStreamBegin of n=%d = %s", maxBatch+1, StatusName(rc))
	}
	if rc := PutStreamAbort(h, 12345678); rc != StatusInvalidHandle {
		t.Errorf("PutStreamAbort of a stream never begun = %s", StatusName(rc))
	}
	if rc := PutStreamBegin(999999, 1, 0, 0, 0, nil, 0, 0, &id); rc != StatusInvalidHandle {
		t.Errorf("PutStreamBegin on a bad handle = %s", StatusName(rc))
	}

	// Close with a stream open aborts it at once: nothing of it stays,
	// and the stream is gone with the Store.
	s = begin(t, h, n, 0)
	o.feedAll(t, h, s, 0, 20, 4)
	t0 := time.Now()
	if rc := Close(h); rc != StatusOK {
		t.Fatalf("Close with a stream open = %s: %s", StatusName(rc), LastError(h))
	}
	if d := time.Since(t0); d > client.PutStreamFeedWait {
		t.Errorf("Close with a stream open took %v; want it aborted at once, not stalled out (%v)", d, client.PutStreamFeedWait)
	}
	if rc := PutStreamEnd(h, s, unsafe.Pointer(&st[0])); rc != StatusInvalidHandle {
		t.Errorf("PutStreamEnd after Close = %s; want KVFABRIC_ERR_INVALID_HANDLE", StatusName(rc))
	}
}

// TestPutStreamSim: the put stream of a Store on the simulator
// (client.PutStream behind the ABI).
func TestPutStreamSim(t *testing.T) {
	h := openSim(t)
	m := registered(t, h, 1<<20)
	testPutStream(t, h, m.take)
}

// TestPutStreamBuffered: the put stream of a Backend that cannot stream
// (bufferedStream): the same results, all or nothing.
func TestPutStreamBuffered(t *testing.T) {
	h := openFake(t, newFake(1<<20))
	testPutStream(t, h, func(n int) []byte { return make([]byte, n) })
}
