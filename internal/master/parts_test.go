package master

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// withProcs runs fn with GOMAXPROCS n, so that large calls are split
// into parts on any machine.
func withProcs(t *testing.T, n int, fn func()) {
	t.Helper()
	old := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(old)
	fn()
}

// TestPartsEncodeSameBytes: an answer encoded in parts over cores is
// byte for byte the answer encoded in one pass (items in order, each
// replica naming its descriptor in the one table), errors included.
func TestPartsEncodeSameBytes(t *testing.T) {
	ds := make([]segment.Descriptor, 20) // past 16: the table's map
	for i := range ds {
		ds[i] = desc(fmt.Sprintf("seg-%d", i), "o", "h", segment.TierDRAM, 0, 1<<30)
	}
	const n = 5*partMin + 7
	puts := make([]PutStartResult, n)
	gets := make([]GetResult, n)
	for i := range n {
		r := []Replica{{&ds[i%len(ds)], uint64(i) << 12, 4096}, {&ds[(i*7)%len(ds)], uint64(i), 1}}
		puts[i] = PutStartResult{Token: uint64(i)*0x9e3779b97f4a7c15 + 1, Replicas: r, Hint: uint32(i)}
		gets[i] = GetResult{Size: uint64(i), Replicas: r, LeaseID: uint64(i) + 1, LeaseTTL: 5}
		if i%(partMin-1) == 0 {
			puts[i] = PutStartResult{Err: fmt.Errorf("%w: key %d", ErrNoSpace, i)}
			gets[i] = GetResult{Err: fmt.Errorf("%w: key %d", ErrNotFound, i)}
		}
	}
	withProcs(t, maxParts, func() {
		if p := partsFor(n); p != maxParts {
			t.Fatalf("partsFor(%d) = %d, want %d", n, p, maxParts)
		}
		// One pass: the table, then every result.
		ps := &putStartResponse{res: puts}
		ps.fill()
		one, err := ps.tab.appendWire(nil)
		if err != nil {
			t.Fatal(err)
		}
		if one, err = ps.appendResults(one, 0, n); err != nil {
			t.Fatal(err)
		}
		if got := encodeWire(t, &putStartResponse{res: puts}); !bytes.Equal(got, one) {
			t.Errorf("PutStart answer in parts: %d bytes differ from the one pass's %d", len(got), len(one))
		}
		gs := &getResponse{res: gets}
		gs.fill()
		one, err = gs.tab.appendWire(nil)
		if err != nil {
			t.Fatal(err)
		}
		if one, err = gs.appendResults(one, 0, n); err != nil {
			t.Fatal(err)
		}
		if got := encodeWire(t, &getResponse{res: gets}); !bytes.Equal(got, one) {
			t.Errorf("GetReplicas answer in parts: %d bytes differ from the one pass's %d", len(got), len(one))
		}
	})
}

// TestPartsPrepare: a large batch prepared in parts answers every
// request at its own position: a bad request fails itself (one at each
// part's edge), a good one has its token and its key's hash, and the
// replicas of all of them fit the answers' backing.
func TestPartsPrepare(t *testing.T) {
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	const n = 4*partMin + 3
	reqs := make([]PutStartReq, n)
	bad := map[int]bool{}
	for i := range reqs {
		reqs[i] = PutStartReq{Key: fmt.Sprintf("k%d", i), Size: 4096, Replicas: 1 + i%2, Placement: Placement{Client: "w", NUMANode: -1, Device: -1}}
		if i%partMin == 0 || i%partMin == partMin-1 || i == n-1 {
			reqs[i].Size = 0
			bad[i] = true
		}
	}
	withProcs(t, maxParts, func() {
		p, err := svc.PreparePutStart(reqs)
		if err != nil {
			t.Fatal(err)
		}
		nrep := 0
		for i := range reqs {
			switch {
			case bad[i] && p.out[i].Err == nil:
				t.Errorf("request %d (size 0) passed", i)
			case !bad[i] && p.out[i].Err != nil:
				t.Errorf("request %d: %v", i, p.out[i].Err)
			case !bad[i] && (p.tokens[i] == 0 || p.hashes[i] != svc.mu.objs.hash(reqs[i].Key)):
				t.Errorf("request %d: token %#x hash %#x", i, p.tokens[i], p.hashes[i])
			case bad[i] && (p.tokens[i] != 0 || p.hashes[i] != 0):
				t.Errorf("failed request %d has token %#x hash %#x", i, p.tokens[i], p.hashes[i])
			}
			if !bad[i] {
				nrep += reqs[i].Replicas
			}
		}
		if cap(p.backing) != nrep {
			t.Errorf("backing for %d replicas, want %d", cap(p.backing), nrep)
		}
	})
}
