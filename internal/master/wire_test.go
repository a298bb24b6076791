package master

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// The hand-coded messages of wire.go must read what the generated code
// writes and write what it reads. Each case below goes both ways: hand
// encoding → proto.Unmarshal, and proto.Marshal → hand decoding; the
// comparison is on the Service's types, through the generated-code
// conversions the server and client used before (convert.go, codes.go).

func wireDescs() []segment.Descriptor {
	d0 := desc("seg-0", "owner", "host", segment.TierDRAM, 1, 1<<40)
	d1 := desc("seg-1-with-a-longer-identifier", "owner", "host", segment.TierHBM, -1, 80<<30)
	d1.Handle = segment.Handle{Kind: segment.HandleFabric}
	for i := range d1.Handle.Fabric {
		d1.Handle.Fabric[i] = byte(i + 1)
	}
	return []segment.Descriptor{d0, d1, {ID: "empty-handle"}}
}

func wirePutStartReqs() []PutStartReq {
	long := make([]byte, 300) // a key longer than 127 bytes: two-byte lengths
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	return []PutStartReq{
		{Key: "k", Size: 4096, Placement: NoPlacement},
		{Key: string(long), Size: 1 << 40, Replicas: 3, Pin: true, Placement: Placement{Tier: segment.TierHBM, TierOnly: true,
			Client: "c1", Node: "n1", NUMANode: 1, Device: 7, Segments: []string{"a", "", "seg-0"}}},
		{Key: "ключ", Size: 1, Replicas: -5, SoftPin: true, SoftPinTTL: 1500 * time.Millisecond, Placement: Placement{}},
		{Key: "up", Size: 3, Upsert: true, KeepSoftPin: true, SoftPinTTL: -1, Placement: NoPlacement},
		{Key: "same", Size: 2, Placement: NoPlacement},
		{Key: "", Size: 0, Replicas: 1 << 40, Placement: NoPlacement},
	}
}

// clampedReqs is what the server sees of reqs (Replicas travels as int32).
func clampedReqs(reqs []PutStartReq) []PutStartReq {
	out := append([]PutStartReq(nil), reqs...)
	for i := range out {
		out[i].Replicas = int(int32(max(-1<<31, min(out[i].Replicas, 1<<31-1))))
	}
	return out
}

func encodeWire(t testing.TB, m wireMessage) []byte {
	t.Helper()
	b, err := m.appendWire(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWirePutStartRequest(t *testing.T) {
	reqs := wirePutStartReqs()
	want := clampedReqs(reqs)

	// Hand encoding → generated decoding → the old server conversion.
	var p pb.PutStartRequest
	if err := proto.Unmarshal(encodeWire(t, &putStartRequest{reqs: reqs}), &p); err != nil {
		t.Fatal(err)
	}
	if got := putStartReqsFromPB(&p); !reflect.DeepEqual(got, want) {
		t.Errorf("generated decoding:\n got %+v\nwant %+v", got, want)
	}

	// Generated encoding (the old client conversion) → hand decoding.
	for i := range reqs {
		q := &reqs[i]
		p.Items[i] = &pb.PutStartItem{Key: q.Key, Size: q.Size, Replicas: int32(want[i].Replicas), Pin: q.Pin, SoftPin: q.SoftPin,
			SoftPinTtlNs: int64(q.SoftPinTTL), Upsert: q.Upsert, KeepSoftPin: q.KeepSoftPin, Placement: placementToPB(&q.Placement)}
	}
	p.Items = append(p.Items, &pb.PutStartItem{Key: "no-placement", Size: 1}) // absent: NoPlacement
	want = append(want, PutStartReq{Key: "no-placement", Size: 1, Placement: NoPlacement})
	b, err := proto.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	var m putStartRequest
	if err := m.unmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.reqs, want) {
		t.Errorf("hand decoding:\n got %+v\nwant %+v", m.reqs, want)
	}
}

// wireUniform is a uniform batch with every field of its template set.
func wireUniform() UniformPuts {
	return UniformPuts{Keys: []string{"a", "", "ключ", strings.Repeat("k", 200)}, Sizes: []uint64{1, 0, 1 << 40, 300},
		Req: PutStartReq{Replicas: 2, Pin: true, SoftPin: true, SoftPinTTL: time.Second, Upsert: true,
			Placement: Placement{Tier: segment.TierHBM, TierOnly: true, Client: "c1", Node: "n1", NUMANode: -1, Device: 3, Segments: []string{"s0", ""}}}}
}

// sameUniform reports whether a and b hold the same puts (an empty slice
// and nil alike).
func sameUniform(a, b UniformPuts) bool {
	return len(a.Keys) == len(b.Keys) && len(a.Sizes) == len(b.Sizes) && reflect.DeepEqual(a.Req, b.Req) &&
		(len(a.Keys) == 0 || reflect.DeepEqual(a.Keys, b.Keys)) && (len(a.Sizes) == 0 || reflect.DeepEqual(a.Sizes, b.Sizes))
}

// TestWireUniformPutStart: the uniform field both ways against the
// generated code — items and uniform puts in one request, sizes packed or
// not, the field and its item sent in parts (protobuf merges them), an
// absent item (NoPlacement, as for an item without one).
func TestWireUniformPutStart(t *testing.T) {
	u := wireUniform()
	want := u
	want.Req.Key, want.Req.Size = "", 0
	u.Req.Key, u.Req.Size = "not sent", 99 // the template's own key and size are not used
	items := wirePutStartReqs()[:2]

	// Hand encoding → generated decoding.
	var p pb.PutStartRequest
	if err := proto.Unmarshal(encodeWire(t, &putStartRequest{reqs: items, uni: true, u: u}), &p); err != nil {
		t.Fatal(err)
	}
	if got := putStartReqsFromPB(&p); !reflect.DeepEqual(got, clampedReqs(items)) {
		t.Errorf("items:\n got %+v\nwant %+v", got, clampedReqs(items))
	}
	if got, ok := uniformFromPB(&p); !ok || !sameUniform(got, want) {
		t.Errorf("generated decoding:\n got %v %+v\nwant %+v", ok, got, want)
	}

	// Generated encoding → hand decoding.
	b, err := proto.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	var m putStartRequest
	if err := m.unmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if !m.uni || !sameUniform(m.u, want) || !reflect.DeepEqual(m.reqs, clampedReqs(items)) {
		t.Errorf("hand decoding:\n got %v %+v %+v\nwant %+v", m.uni, m.u, m.reqs, want)
	}

	// Sizes unpacked, the field in two parts, its item in two parts.
	item1 := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 2)
	item2 := protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 1)
	part1 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), item1)
	part1 = protowire.AppendString(protowire.AppendTag(part1, 2, protowire.BytesType), "x")
	part1 = protowire.AppendVarint(protowire.AppendTag(part1, 3, protowire.VarintType), 7)
	part2 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), item2)
	part2 = protowire.AppendString(protowire.AppendTag(part2, 2, protowire.BytesType), "y")
	part2 = protowire.AppendVarint(protowire.AppendTag(part2, 3, protowire.VarintType), 1<<33)
	b = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), part1)
	b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), part2)
	p = pb.PutStartRequest{}
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	gen, _ := uniformFromPB(&p)
	m = putStartRequest{}
	if err := m.unmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	merged := UniformPuts{Keys: []string{"x", "y"}, Sizes: []uint64{7, 1 << 33}, Req: PutStartReq{Replicas: 2, Pin: true, Placement: NoPlacement}}
	if !sameUniform(gen, merged) || !sameUniform(m.u, merged) {
		t.Errorf("parts merged:\n hand %+v\n generated %+v\n want %+v", m.u, gen, merged)
	}

	// An empty uniform field: present, no puts, no item.
	m = putStartRequest{}
	if err := m.unmarshalWire(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), nil)); err != nil {
		t.Fatal(err)
	}
	if !m.uni || len(m.u.Keys) != 0 || !reflect.DeepEqual(m.u.Req, PutStartReq{Placement: NoPlacement}) {
		t.Errorf("empty uniform field: %v %+v", m.uni, m.u)
	}
}

// TestWireResultErrorParts: a result's error sent in two parts is merged
// as proto.Unmarshal merges it, and refused as it refuses it when a part
// does not parse on its own (the hand decoder joined the parts and
// accepted such a split before).
func TestWireResultErrorParts(t *testing.T) {
	str := func(b []byte, num protowire.Number, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	code := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(codes.NotFound))
	for _, tc := range []struct {
		name         string
		part1, part2 []byte
	}{
		{"well formed", str(code, 2, "NOT_FOUND"), str(nil, 3, "key gone")},
		{"first part cut", []byte{0x12, 0x05, 'a', 'b'}, []byte{'c', 'd', 'e'}},
	} {
		res := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), tc.part1)
		res = protowire.AppendBytes(protowire.AppendTag(res, 1, protowire.BytesType), tc.part2)
		res = protowire.AppendFixed64(protowire.AppendTag(res, 2, protowire.Fixed64Type), 7)
		b := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), res)
		var p pb.PutStartResponse
		gerr := proto.Unmarshal(b, &p)
		m := resultsReply{descs: &descCache{}, puts: make([]PutStartResult, 0, 1)}
		herr := m.unmarshalWire(b)
		if (gerr == nil) != (herr == nil) {
			t.Errorf("%s: generated %v, hand %v", tc.name, gerr, herr)
			continue
		}
		if gerr == nil && (len(m.puts) != 1 || !sameErr(m.puts[0].Err, fromItemError(p.Results[0].Error))) {
			t.Errorf("%s: hand %+v, generated %v", tc.name, m.puts, p.Results[0].Error)
		}
	}
}

func TestWireKeysAndRefs(t *testing.T) {
	keys := []string{"a", "", "ключ", string(make([]byte, 200))}
	var g pb.GetReplicasRequest
	if err := proto.Unmarshal(encodeWire(t, &keysRequest{keys: keys}), &g); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Keys, keys) {
		t.Errorf("keys: generated decoding %q, want %q", g.Keys, keys)
	}
	var k keysRequest
	if err := k.unmarshalWire(mustMarshal(t, &pb.GetReplicasRequest{Keys: keys})); err != nil || !reflect.DeepEqual(k.keys, keys) {
		t.Errorf("keys: hand decoding %q (%v), want %q", k.keys, err, keys)
	}
	// The reader's client id (field 2) both ways.
	g = pb.GetReplicasRequest{}
	if err := proto.Unmarshal(encodeWire(t, &keysRequest{keys: keys, reader: "reader-1"}), &g); err != nil || g.ClientId != "reader-1" || !reflect.DeepEqual(g.Keys, keys) {
		t.Errorf("reader: generated decoding %q %q (%v)", g.ClientId, g.Keys, err)
	}
	k = keysRequest{}
	if err := k.unmarshalWire(mustMarshal(t, &pb.GetReplicasRequest{Keys: keys, ClientId: "reader-1"})); err != nil || k.reader != "reader-1" || !reflect.DeepEqual(k.keys, keys) {
		t.Errorf("reader: hand decoding %q %q (%v)", k.reader, k.keys, err)
	}
	// Carried lease releases (field 3, packed fixed64) both ways, and
	// unpacked as a peer may send them.
	ids := []uint64{1, 1<<64 - 1, 0x0123456789abcdef}
	g = pb.GetReplicasRequest{}
	if err := proto.Unmarshal(encodeWire(t, &keysRequest{keys: keys, release: ids}), &g); err != nil || !reflect.DeepEqual(g.ReleaseLeaseIds, ids) || !reflect.DeepEqual(g.Keys, keys) {
		t.Errorf("release: generated decoding %x %q (%v)", g.ReleaseLeaseIds, g.Keys, err)
	}
	k = keysRequest{}
	if err := k.unmarshalWire(mustMarshal(t, &pb.GetReplicasRequest{Keys: keys, ReleaseLeaseIds: ids})); err != nil || !reflect.DeepEqual(k.release, ids) || !reflect.DeepEqual(k.keys, keys) {
		t.Errorf("release: hand decoding %x %q (%v)", k.release, k.keys, err)
	}
	var unpacked []byte
	for _, id := range ids {
		unpacked = protowire.AppendFixed64(protowire.AppendTag(unpacked, 3, protowire.Fixed64Type), id)
	}
	k = keysRequest{}
	if err := k.unmarshalWire(unpacked); err != nil || !reflect.DeepEqual(k.release, ids) {
		t.Errorf("release, unpacked: hand decoding %x (%v)", k.release, err)
	}
	if b := encodeWire(t, &keysRequest{keys: keys}); !bytes.Equal(b, mustMarshal(t, &pb.GetReplicasRequest{Keys: keys})) {
		t.Errorf("no releases: the request is not the one without field 3")
	}

	refs := []PutRef{{Key: "a", Token: 1, Hint: 7}, {Key: "", Token: 0}, {Key: "b", Token: 1<<64 - 1, Hint: 1<<32 - 1}}
	var e pb.PutEndRequest
	if err := proto.Unmarshal(encodeWire(t, &putRefsRequest{puts: refs}), &e); err != nil {
		t.Fatal(err)
	}
	if got := putRefsFromPB(&e); !reflect.DeepEqual(got, refs) {
		t.Errorf("refs: generated decoding %v, want %v", got, refs)
	}
	e.Puts = nil
	for _, r := range refs {
		e.Puts = append(e.Puts, &pb.PutRef{Key: r.Key, Token: r.Token, Hint: r.Hint})
	}
	var r putRefsRequest
	if err := r.unmarshalWire(mustMarshal(t, &e)); err != nil || !reflect.DeepEqual(r.puts, refs) {
		t.Errorf("refs: hand decoding %v (%v), want %v", r.puts, err, refs)
	}
}

func putRefsFromPB(p *pb.PutEndRequest) []PutRef {
	var out []PutRef
	for _, r := range p.Puts {
		out = append(out, PutRef{Key: r.Key, Token: r.Token, Hint: r.Hint})
	}
	return out
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wireErrs() []error {
	errs := []error{nil}
	for _, w := range wireCodes {
		errs = append(errs, fmt.Errorf("ctx %q: %w", "k\xff", w.err), nil)
	}
	return append(errs, errors.New("no sentinel"))
}

// sameErr: both nil, or the same message and sentinel.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error() && errors.Unwrap(a) == errors.Unwrap(b) && fmt.Sprintf("%T", a) == fmt.Sprintf("%T", b)
}

func TestWireItemErrors(t *testing.T) {
	errs := wireErrs()
	// Hand encoding → generated decoding → fromItemError.
	var p pb.PutEndResponse
	if err := proto.Unmarshal(encodeWire(t, &itemErrorList{errs: errs}), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Errors) != len(errs) {
		t.Fatalf("%d errors, want %d", len(p.Errors), len(errs))
	}
	var want []error
	for i, e := range p.Errors {
		got := fromItemError(e)
		want = append(want, got)
		if (got == nil) != (errs[i] == nil) || errs[i] != nil && !errors.Is(got, errors.Unwrap(errs[i])) && errors.Unwrap(errs[i]) != nil {
			t.Errorf("item %d: %v, sent %v", i, got, errs[i])
		}
	}
	// The old server encoding (nil elements) → hand decoding.
	p.Errors = nil
	for _, e := range errs {
		p.Errors = append(p.Errors, toItemError(e))
	}
	var m itemErrorList
	if err := m.unmarshalWire(mustMarshal(t, &p)); err != nil {
		t.Fatal(err)
	}
	if len(m.errs) != len(want) {
		t.Fatalf("%d errors, want %d", len(m.errs), len(want))
	}
	for i := range want {
		if !sameErr(m.errs[i], want[i]) {
			t.Errorf("item %d: hand %v, generated %v", i, m.errs[i], want[i])
		}
	}
}

func TestWireResults(t *testing.T) {
	ds := wireDescs()
	reps := []Replica{{&ds[0], 0, 4096}, {&ds[1], 1 << 40, 64}, {&ds[0], 8192, 4096}, {&ds[2], 0, 0}}
	puts := []PutStartResult{
		{Token: 7, Replicas: reps[:1], Hint: 1},
		{Err: fmt.Errorf("x: %w", ErrAlreadyExists)},
		{Token: 1<<64 - 1, Replicas: reps[1:], Hint: 1<<32 - 1},
		{Token: 0, Replicas: nil},
	}
	expiry := time.Unix(0, 1_700_000_000_123_456_789)
	gets := []GetResult{
		{Size: 4096, Replicas: reps[2:3], LeaseExpiry: expiry},
		{Err: fmt.Errorf("%w: key %q", ErrNotFound, "k")},
		{Size: 1 << 40, Replicas: reps, LeaseExpiry: expiry},
	}

	t.Run("PutStart", func(t *testing.T) {
		// Hand encoding → generated decoding.
		var p pb.PutStartResponse
		if err := proto.Unmarshal(encodeWire(t, &putStartResponse{res: puts}), &p); err != nil {
			t.Fatal(err)
		}
		for i, x := range p.Results {
			if !sameSentinel(fromItemError(x.Error), puts[i].Err) || x.Token != puts[i].Token || x.Hint != puts[i].Hint {
				t.Errorf("result %d: %v, token %d, hint %d; sent %+v", i, fromItemError(x.Error), x.Token, x.Hint, puts[i])
			}
			checkReplicas(t, i, pbReplicas(p.Segments, x.Replicas), puts[i].Replicas)
		}
		// The old server encoding → hand decoding.
		var tab segTable
		p.Results = nil
		for _, x := range puts {
			p.Results = append(p.Results, &pb.PutStartResult{Error: toItemError(x.Err), Token: x.Token, Replicas: tab.replicas(x.Replicas), Hint: x.Hint})
		}
		p.Segments = tab.list
		m := resultsReply{descs: &descCache{}}
		if err := m.unmarshalWire(mustMarshal(t, &p)); err != nil || m.malformed != nil {
			t.Fatal(err, m.malformed)
		}
		if len(m.puts) != len(puts) {
			t.Fatalf("%d results, want %d", len(m.puts), len(puts))
		}
		for i := range puts {
			x := &m.puts[i]
			if !sameSentinel(x.Err, puts[i].Err) || x.Token != puts[i].Token || x.Hint != puts[i].Hint {
				t.Errorf("result %d: %v, token %d, hint %d; sent %+v", i, x.Err, x.Token, x.Hint, puts[i])
			}
			checkReplicas(t, i, x.Replicas, puts[i].Replicas)
		}
	})

	t.Run("GetReplicas", func(t *testing.T) {
		var p pb.GetReplicasResponse
		if err := proto.Unmarshal(encodeWire(t, &getResponse{res: gets}), &p); err != nil || p.LeasesReleased {
			t.Fatal(err, p.LeasesReleased)
		}
		var r pb.GetReplicasResponse
		if err := proto.Unmarshal(encodeWire(t, &getResponse{res: gets, released: true}), &r); err != nil || !r.LeasesReleased || len(r.Results) != len(gets) {
			t.Fatalf("leases_released: generated decoding %v, %d results (%v)", r.LeasesReleased, len(r.Results), err)
		}
		for _, released := range []bool{false, true} {
			m := resultsReply{get: true, descs: &descCache{}}
			r.LeasesReleased = released
			if err := m.unmarshalWire(mustMarshal(t, &r)); err != nil || m.released != released || len(m.gets) != len(gets) {
				t.Errorf("leases_released %v: hand decoding %v, %d results (%v)", released, m.released, len(m.gets), err)
			}
		}
		for i, x := range p.Results {
			g := gets[i]
			if !sameSentinel(fromItemError(x.Error), g.Err) || g.Err == nil && (x.Size != g.Size || !unixNS(x.LeaseExpiryUnixNs).Equal(g.LeaseExpiry)) {
				t.Errorf("result %d: %+v; sent %+v", i, x, g)
			}
			if g.Err == nil {
				checkReplicas(t, i, pbReplicas(p.Segments, x.Replicas), g.Replicas)
			}
		}
		var tab segTable
		p.Results = nil
		for _, x := range gets {
			r := &pb.GetResult{Error: toItemError(x.Err)}
			if x.Err == nil {
				r.Size, r.Replicas, r.LeaseExpiryUnixNs = x.Size, tab.replicas(x.Replicas), x.LeaseExpiry.UnixNano()
			}
			p.Results = append(p.Results, r)
		}
		p.Segments = tab.list
		cache := &descCache{}
		for range 2 { // the second time from the cache
			m := resultsReply{get: true, descs: cache}
			if err := m.unmarshalWire(mustMarshal(t, &p)); err != nil || m.malformed != nil {
				t.Fatal(err, m.malformed)
			}
			if len(m.gets) != len(gets) {
				t.Fatalf("%d results, want %d", len(m.gets), len(gets))
			}
			for i, g := range gets {
				x := &m.gets[i]
				if !sameSentinel(x.Err, g.Err) || g.Err == nil && (x.Size != g.Size || !x.LeaseExpiry.Equal(g.LeaseExpiry)) {
					t.Errorf("result %d: %+v; sent %+v", i, x, g)
				}
				if g.Err == nil {
					checkReplicas(t, i, x.Replicas, g.Replicas)
				}
			}
			for i := 1; i < len(m.segs); i++ {
				if m.segs[i] == m.segs[0] {
					t.Errorf("descriptor table: entries 0 and %d are one descriptor", i)
				}
			}
		}
	})
}

func sameSentinel(got, sent error) bool {
	if got == nil || sent == nil {
		return got == nil && sent == nil
	}
	s, _ := classify(sent)
	g, _ := classify(got)
	return s == g && got.Error() == sent.Error()
}

func pbReplicas(segs []*pb.SegmentDescriptor, rs []*pb.Replica) []Replica {
	var out []Replica
	for _, r := range rs {
		d := descFromPB(segs[r.Segment])
		out = append(out, Replica{&d, r.Offset, r.Length})
	}
	return out
}

func checkReplicas(t *testing.T, i int, got, want []Replica) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("result %d: %d replicas, want %d", i, len(got), len(want))
		return
	}
	for j := range got {
		if *got[j].Segment != *want[j].Segment || got[j].Offset != want[j].Offset || got[j].Length != want[j].Length {
			t.Errorf("result %d replica %d: %+v %+v, want %+v %+v", i, j, *got[j].Segment, got[j], *want[j].Segment, want[j])
		}
	}
}

// FuzzWireDecode: on any input, each hand decoder accepts exactly what
// proto.Unmarshal accepts into the generated message, and decodes the
// same content.
func FuzzWireDecode(f *testing.F) {
	ds := wireDescs()
	reps := []Replica{{&ds[0], 0, 4096}, {&ds[1], 1 << 40, 64}}
	for _, m := range []wireMessage{
		&putStartRequest{reqs: wirePutStartReqs()},
		&putStartRequest{reqs: wirePutStartReqs()[:2], uni: true, u: wireUniform()},
		&putRefsRequest{puts: []PutRef{{Key: "a", Token: 1}, {Key: "b", Token: 2}}},
		&keysRequest{keys: []string{"a", "b"}, reader: "r"},
		&keysRequest{keys: []string{"a"}, release: []uint64{7, 1 << 63}},
		&itemErrorList{errs: wireErrs()},
		&putStartResponse{res: []PutStartResult{{Token: 1, Replicas: reps}, {Err: ErrNoSpace}}},
		&getResponse{res: []GetResult{{Size: 1, Replicas: reps}, {Err: ErrNotFound}}},
		&getResponse{res: []GetResult{{Size: 1, Replicas: reps}}, released: true},
		&keysRequest{keys: []string{"a"}, columns: true},
		&getResponse{res: wireColumnGets(), released: true, columns: true},
		&getResponse{res: []GetResult{{Size: 1, Replicas: reps}, {Err: ErrNotFound}}, columns: true},
		&putStartRequest{reqs: wirePutStartReqs()[:1], columns: true},
		&putStartResponse{res: wireColumnPuts(), columns: true},
	} {
		b := encodeWire(f, m)
		for kind := range 6 {
			f.Add(uint8(kind), b)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		switch kind % 6 {
		case 0:
			var p pb.PutStartRequest
			var m putStartRequest
			if agree(t, proto.Unmarshal(b, &p), m.unmarshalWire(b)) {
				if want := putStartReqsFromPB(&p); len(want) != len(m.reqs) || len(want) > 0 && !reflect.DeepEqual(want, m.reqs) {
					t.Errorf("hand %+v, generated %+v", m.reqs, want)
				}
				if u, uni := uniformFromPB(&p); uni != m.uni || !sameUniform(u, m.u) {
					t.Errorf("uniform: hand %v %+v, generated %v %+v", m.uni, m.u, uni, u)
				}
				if p.Columns != m.columns {
					t.Errorf("columns: hand %v, generated %v", m.columns, p.Columns)
				}
			}
		case 1:
			var p pb.PutEndRequest
			var m putRefsRequest
			if agree(t, proto.Unmarshal(b, &p), m.unmarshalWire(b)) {
				if want := putRefsFromPB(&p); len(want) != len(m.puts) || len(want) > 0 && !reflect.DeepEqual(want, m.puts) {
					t.Errorf("hand %v, generated %v", m.puts, want)
				}
			}
		case 2:
			var p pb.GetReplicasRequest
			var m keysRequest
			if agree(t, proto.Unmarshal(b, &p), m.unmarshalWire(b)) {
				if len(p.Keys) != len(m.keys) || len(m.keys) > 0 && !reflect.DeepEqual(p.Keys, m.keys) || p.ClientId != m.reader {
					t.Errorf("hand %q %q, generated %q %q", m.keys, m.reader, p.Keys, p.ClientId)
				}
				if len(p.ReleaseLeaseIds) != len(m.release) || len(m.release) > 0 && !reflect.DeepEqual(p.ReleaseLeaseIds, m.release) {
					t.Errorf("release: hand %x, generated %x", m.release, p.ReleaseLeaseIds)
				}
				if p.Columns != m.columns {
					t.Errorf("columns: hand %v, generated %v", m.columns, p.Columns)
				}
			}
		case 3:
			var p pb.PutEndResponse
			var m itemErrorList
			if agree(t, proto.Unmarshal(b, &p), m.unmarshalWire(b)) {
				if len(p.Errors) != len(m.errs) {
					t.Fatalf("hand %d errors, generated %d", len(m.errs), len(p.Errors))
				}
				for i, e := range p.Errors {
					if !sameErr(m.errs[i], fromItemError(e)) {
						t.Errorf("item %d: hand %v, generated %v", i, m.errs[i], fromItemError(e))
					}
				}
			}
		case 4, 5:
			get := kind%6 == 5
			var p proto.Message = &pb.PutStartResponse{}
			if get {
				p = &pb.GetReplicasResponse{}
			}
			sent := time.Unix(1_700_000_000, 0)
			m := resultsReply{get: get, descs: &descCache{}, sent: sent}
			if !agree(t, proto.Unmarshal(b, p), m.unmarshalWire(b)) {
				return
			}
			// What the Client returned when it decoded with the generated
			// code: per result its error, and its other fields unless a
			// GetReplicas result failed; a replica naming a descriptor
			// the response lacks makes the response malformed.
			type res struct {
				err      error
				token    uint64
				hint     uint32
				size     uint64
				expiry   time.Time
				ttl      time.Duration
				leaseID  uint64
				replicas []*pb.Replica
			}
			var want []res
			var segs []*pb.SegmentDescriptor
			if get {
				g := p.(*pb.GetReplicasResponse)
				if g.LeasesReleased != m.released {
					t.Errorf("leases_released: hand %v, generated %v", m.released, g.LeasesReleased)
				}
				segs = g.Segments
				if g.Columns != nil {
					// By column (GetColumns): held to the reference
					// reading; columns that disagree, or come beside
					// results, make the response malformed.
					ref, ok := columnsFromPB(g.Columns, len(segs), sent)
					if !ok || len(g.Results) > 0 {
						if m.malformed == nil || len(m.gets) != len(g.Results) {
							t.Fatalf("columns: hand malformed %v with %d results, generated %v with %d results", m.malformed, len(m.gets), !ok, len(g.Results))
						}
						return
					}
					for _, x := range ref {
						want = append(want, res{err: x.err, size: x.size, expiry: x.expiry, ttl: x.ttl, leaseID: x.leaseID, replicas: x.replicas})
					}
				}
				for _, x := range g.Results {
					r := res{err: fromItemError(x.Error)}
					if r.err == nil {
						r.size, r.leaseID, r.replicas = x.Size, x.LeaseId, x.Replicas
						if x.LeaseTtlNs > 0 {
							r.ttl = time.Duration(x.LeaseTtlNs)
							r.expiry = sent.Add(r.ttl)
						} else {
							r.expiry = unixNS(x.LeaseExpiryUnixNs)
						}
					}
					want = append(want, r)
				}
			} else {
				g := p.(*pb.PutStartResponse)
				segs = g.Segments
				if g.Columns != nil {
					ref, reps, ok := putColumnsFromPB(g.Columns, len(segs))
					if !ok || len(g.Results) > 0 {
						if m.malformed == nil || len(m.puts) != len(g.Results) {
							t.Fatalf("columns: hand malformed %v with %d results, generated %v with %d results", m.malformed, len(m.puts), !ok, len(g.Results))
						}
						return
					}
					for i, x := range ref {
						want = append(want, res{err: x.Err, token: x.Token, hint: x.Hint, replicas: reps[i]})
					}
				}
				for _, x := range g.Results {
					want = append(want, res{err: fromItemError(x.Error), token: x.Token, hint: x.Hint, replicas: x.Replicas})
				}
			}
			if len(segs) != len(m.segs) || len(want) != m.results() {
				t.Fatalf("hand %d segments %d results, generated %d and %d", len(m.segs), m.results(), len(segs), len(want))
			}
			// Descriptors are interned by (id, generation), as before
			// the hand decoding: a later one with the same key is the first.
			for i, s := range segs {
				if d := descFromPB(s); d.Key() != m.segs[i].Key() {
					t.Fatalf("segment %d: hand %+v, generated %+v", i, *m.segs[i], d)
				}
			}
			malformed := false
			for i, w := range want {
				var reps []Replica
				if get {
					x := &m.gets[i]
					if !sameErr(x.Err, w.err) || x.Size != w.size || !x.LeaseExpiry.Equal(w.expiry) || x.LeaseTTL != w.ttl || x.LeaseID != w.leaseID {
						t.Errorf("result %d: hand %+v, generated %+v", i, *x, w)
						continue
					}
					reps = x.Replicas
				} else {
					x := &m.puts[i]
					if !sameErr(x.Err, w.err) || x.Token != w.token || x.Hint != w.hint {
						t.Errorf("result %d: hand %+v, generated %+v", i, *x, w)
						continue
					}
					reps = x.Replicas
				}
				if len(reps) != len(w.replicas) {
					t.Errorf("result %d: hand %d replicas, generated %d", i, len(reps), len(w.replicas))
					continue
				}
				for j, r := range w.replicas {
					h := reps[j]
					if h.Offset != r.Offset || h.Length != r.Length {
						t.Errorf("result %d replica %d: hand %+v, generated %v", i, j, h, r)
					}
					if int(r.Segment) >= len(segs) {
						malformed = true
					} else if h.Segment != m.segs[r.Segment] {
						t.Errorf("result %d replica %d: hand segment %p, want entry %d", i, j, h.Segment, r.Segment)
					}
				}
			}
			if malformed != (m.malformed != nil) {
				t.Errorf("malformed: hand %v, generated %v", m.malformed, malformed)
			}
		}
	})
}

// agree fails unless both decoders accept or both reject; it reports
// whether both accepted.
func agree(t *testing.T, generated, hand error) bool {
	t.Helper()
	if (generated == nil) != (hand == nil) {
		t.Fatalf("generated decoding: %v; hand decoding: %v", generated, hand)
	}
	return generated == nil
}

// TestWireInterceptor: with an interceptor the server uses the generated
// handlers (interceptors see generated messages), and the hand-coded
// client reads their answers.
func TestWireInterceptor(t *testing.T) {
	svc, pl, d := oneSegmentService(t)
	ctx := context.Background()
	var seen []string
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := req.(proto.Message); !ok {
			t.Errorf("%s: interceptor got %T", info.FullMethod, req)
		}
		seen = append(seen, info.FullMethod)
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(svc, nil, grpc.UnaryInterceptor(icpt))
	go srv.Serve(lis, nil)
	defer srv.Shutdown(ctx)
	c, err := Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 10, Placement: pl}, {Key: "k", Size: 10, Placement: pl}})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, ErrAlreadyExists) || len(res[0].Replicas) != 1 || *res[0].Replicas[0].Segment != d {
		t.Fatalf("PutStart: %+v, %v", res, err)
	}
	if errs := c.PutEnd(ctx, []PutRef{{Key: "k", Token: res[0].Token}, {Key: "x", Token: 1}}); errs[0] != nil || !errors.Is(errs[1], ErrNotFound) {
		t.Fatalf("PutEnd: %v", errs)
	}
	got, err := c.GetReplicas(ctx, []string{"k", "x"})
	if err != nil || got[0].Err != nil || got[0].Size != 10 || !errors.Is(got[1].Err, ErrNotFound) {
		t.Fatalf("GetReplicas: %+v, %v", got, err)
	}
	if len(seen) != 3 {
		t.Errorf("interceptor saw %q", seen)
	}
}

// TestWireResultsLateTable: a peer may send the descriptor table after the
// results (protobuf allows any field order); replicas read before their
// descriptor are resolved at the end, and one naming a descriptor the
// response lacks makes the response malformed, not the decoding fail.
func TestWireResultsLateTable(t *testing.T) {
	ds := wireDescs()
	results := &pb.GetReplicasResponse{Results: []*pb.GetResult{
		{Size: 1, Replicas: []*pb.Replica{{Segment: 1, Offset: 8, Length: 16}, {Segment: 0, Offset: 0, Length: 16}}, LeaseTtlNs: 5},
		{Error: toItemError(ErrNotFound), Replicas: []*pb.Replica{{Segment: 7}}}, // dropped with the failed result
	}}
	table := &pb.GetReplicasResponse{Segments: []*pb.SegmentDescriptor{descToPB(&ds[0]), descToPB(&ds[1])}}
	b := append(mustMarshal(t, results), mustMarshal(t, table)...)
	m := resultsReply{get: true, descs: &descCache{}}
	if err := m.unmarshalWire(b); err != nil || m.malformed != nil {
		t.Fatal(err, m.malformed)
	}
	if len(m.gets) != 2 || !errors.Is(m.gets[1].Err, ErrNotFound) || m.gets[1].Replicas != nil {
		t.Fatalf("results %+v", m.gets)
	}
	checkReplicas(t, 0, m.gets[0].Replicas, []Replica{{&ds[1], 8, 16}, {&ds[0], 0, 16}})

	// The same for PutStart, whose failed results keep their replicas: a
	// replica naming descriptor 7 of 2 is malformed.
	puts := &pb.PutStartResponse{Results: []*pb.PutStartResult{{Token: 3, Replicas: []*pb.Replica{{Segment: 1}}}, {Error: toItemError(ErrNoSpace), Replicas: []*pb.Replica{{Segment: 7}}}}}
	b = append(mustMarshal(t, puts), mustMarshal(t, table)...)
	m = resultsReply{descs: &descCache{}}
	if err := m.unmarshalWire(b); err != nil {
		t.Fatal(err)
	}
	if m.malformed == nil || len(m.puts) != 2 || m.puts[0].Replicas[0].Segment.Key() != ds[1].Key() {
		t.Fatalf("malformed %v, results %+v", m.malformed, m.puts)
	}
}
