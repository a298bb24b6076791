package cabi

import (
	"encoding/json"
	"strings"
	"testing"
	"unsafe"
)

// TestRangesRemoveReplicas: the ABI's ranged get, batch remove, pattern
// removal and replica description decode their arrays and report per key.
func TestRangesRemoveReplicas(t *testing.T) {
	f := newFake(1 << 20)
	h := openFake(t, f)
	a := []byte("0123456789abcdef")
	keys := keysOf("a", "b", "missing")
	ptrs := []uint64{addr(a), addr(a)}
	lens := []uint64{16, 8}
	st := make([]int32, 3)
	if rc := BatchPut(h, 2, keys.p(), keys.l(), unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0,
		unsafe.Pointer(&st[0])); rc != StatusOK || st[0] != StatusOK || st[1] != StatusOK {
		t.Fatalf("BatchPut = %s %v", StatusName(rc), st)
	}

	// a: [4,+3) → dst[0:3], [10,+2) → dst[8:10]; b: [6,+4) is past its end;
	// missing: not found.
	dst := make([]byte, 16)
	dsts := []uint64{addr(dst), addr(dst) + 8, addr(dst) + 12, addr(dst)}
	srcs := []uint64{4, 10, 6, 0}
	rl := []uint64{3, 2, 4, 1}
	counts := []uint32{2, 1, 1}
	if rc := BatchGetRanges(h, 3, keys.p(), keys.l(), unsafe.Pointer(&dsts[0]), unsafe.Pointer(&srcs[0]), unsafe.Pointer(&rl[0]),
		unsafe.Pointer(&counts[0]), 0, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("BatchGetRanges = %s", StatusName(rc))
	}
	if st[0] != StatusOK || st[1] != StatusInvalidArgument || st[2] != StatusNotFound {
		t.Errorf("range statuses = %v", st)
	}
	if string(dst[0:3]) != "456" || string(dst[8:10]) != "ab" {
		t.Errorf("ranges copied %q", dst)
	}

	buf := make([]byte, 8)
	var need uint64
	if rc := Replicas(h, 3, keys.p(), keys.l(), unsafe.Pointer(&buf[0]), uint64(len(buf)), &need, unsafe.Pointer(&st[0])); rc != StatusBufferTooSmall || need <= 8 {
		t.Fatalf("Replicas into a small buffer = %s, need %d", StatusName(rc), need)
	}
	buf = make([]byte, need)
	if rc := Replicas(h, 3, keys.p(), keys.l(), unsafe.Pointer(&buf[0]), uint64(len(buf)), &need, unsafe.Pointer(&st[0])); rc != StatusOK {
		t.Fatalf("Replicas = %s", StatusName(rc))
	}
	var got []*struct {
		Size     uint64
		Replicas []struct{ Segment, Tier, Handle string }
	}
	if err := json.Unmarshal(buf[:need], &got); err != nil || len(got) != 3 || got[0] == nil || got[0].Size != 16 ||
		got[1].Size != 8 || got[2] != nil || got[0].Replicas[0].Tier != "dram" || got[0].Replicas[0].Handle != "posix_fd" {
		t.Fatalf("Replicas JSON %s (%v)", buf[:need], err)
	}
	if st[2] != StatusNotFound {
		t.Errorf("Replicas statuses %v", st)
	}

	rm := keysOf("a", "missing")
	if rc := BatchRemove(h, 2, rm.p(), rm.l(), false, unsafe.Pointer(&st[0])); rc != StatusOK || st[0] != StatusOK || st[1] != StatusNotFound {
		t.Errorf("BatchRemove = %s %v", StatusName(rc), st)
	}
	var n uint64
	bad := []byte("(")
	if rc := RemoveMatching(h, unsafe.Pointer(&bad[0]), 1, false, &n); rc != StatusInvalidArgument {
		t.Errorf("RemoveMatching bad pattern = %s", StatusName(rc))
	}
	pat := []byte("^b$")
	if rc := RemoveMatching(h, unsafe.Pointer(&pat[0]), uint64(len(pat)), false, &n); rc != StatusOK || n != 1 {
		t.Errorf("RemoveMatching = %s, %d removed", StatusName(rc), n)
	}
}

// TestPhases: kvfabric_phases reports what the Store's batches did — calls
// and keys of each kind, time in their phases — and a backend without a
// phase split is refused by name.
func TestPhases(t *testing.T) {
	h := openSim(t)
	m := registered(t, h, 64*1024)
	keys := keysOf("p0", "p1", "p2")
	ptrs := []uint64{addr(m.b), addr(m.b) + 4096, addr(m.b) + 8192}
	lens := []uint64{4096, 4096, 4096}
	st := make([]int32, 3)
	before := make([]uint64, PhaseValues)
	if rc := Phases(h, before); rc != StatusOK {
		t.Fatalf("Phases = %s: %s", StatusName(rc), LastError(h))
	}
	if rc := BatchPut(h, 3, keys.p(), keys.l(), unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0, 0, 0, nil, 0, 0,
		unsafe.Pointer(&st[0])); rc != StatusOK || st[0]|st[1]|st[2] != 0 {
		t.Fatalf("BatchPut = %s %v: %s", StatusName(rc), st, LastError(h))
	}
	nread := make([]uint64, 3)
	for range 2 {
		if rc := BatchGet(h, 3, keys.p(), keys.l(), unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&lens[0]), nil, 0,
			unsafe.Pointer(&nread[0]), unsafe.Pointer(&st[0])); rc != StatusOK || st[0]|st[1]|st[2] != 0 {
			t.Fatalf("BatchGet = %s %v: %s", StatusName(rc), st, LastError(h))
		}
	}
	after := make([]uint64, PhaseValues+2) // longer than needed: the rest is left alone
	after[PhaseValues], after[PhaseValues+1] = 7, 7
	if rc := Phases(h, after); rc != StatusOK {
		t.Fatalf("Phases = %s: %s", StatusName(rc), LastError(h))
	}
	d := make([]uint64, PhaseValues)
	for i := range d {
		d[i] = after[i] - before[i]
	}
	if d[0] != 1 || d[1] != 3 || d[9] != 2 || d[10] != 6 {
		t.Errorf("put calls/keys %d/%d, get calls/keys %d/%d: want 1/3 and 2/6", d[0], d[1], d[9], d[10])
	}
	for _, i := range []int{3, 5, 12, 14} { // meta and copy of each kind took time
		if d[i] == 0 {
			t.Errorf("value %d (meta or copy) is 0: %v", i, d)
		}
	}
	if after[PhaseValues] != 7 || after[PhaseValues+1] != 7 {
		t.Errorf("Phases wrote past %d values: %v", PhaseValues, after[PhaseValues:])
	}
	short := make([]uint64, 2) // a short array gets the first values
	if rc := Phases(h, short); rc != StatusOK || short[0] != after[0] || short[1] != after[1] {
		t.Errorf("Phases into 2 values = %s %v, want %v", StatusName(rc), short, after[:2])
	}

	hf := openFake(t, newFake(1<<20))
	if rc := Phases(hf, d); rc != StatusInvalidArgument || !strings.Contains(LastError(hf), "phase split") {
		t.Errorf("Phases of a store without a phase split = %s (%s)", StatusName(rc), LastError(hf))
	}
	if rc := Phases(-1, d); rc != StatusInvalidHandle {
		t.Errorf("Phases of an invalid handle = %s", StatusName(rc))
	}
}
