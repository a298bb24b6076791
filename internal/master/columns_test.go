package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// colResult is what a generated-code reader of pb.GetColumns gets for one
// result (columnsFromPB): the reference the hand decoder is held to.
type colResult struct {
	err      error
	size     uint64
	expiry   time.Time
	ttl      time.Duration
	leaseID  uint64
	replicas []*pb.Replica
}

// columnsFromPB reads c as GetColumns documents it, plainly, for a call
// sent at sent: ok is false when the columns disagree with one another
// or with the nsegs descriptors of the response.
func columnsFromPB(c *pb.GetColumns, nsegs int, sent time.Time) (out []colResult, ok bool) {
	n := len(c.SizeDeltas)
	if len(c.ReplicaCounts) != n || len(c.LeaseIdDeltas) != n || len(c.LeaseExpiryUnixNsDeltas) != n || len(c.LeaseTtlNsDeltas) != n {
		return nil, false
	}
	total := 0
	for _, k := range c.ReplicaCounts {
		total += int(k)
	}
	if len(c.Segments) != total || len(c.OffsetDeltas) != total || len(c.LengthDeltas) != total {
		return nil, false
	}
	failed := map[int]error{}
	last := -1
	for _, e := range c.Errors {
		i := int(e.Index)
		err := fromItemError(e.Error)
		if i >= n || i <= last || c.ReplicaCounts[i] != 0 || err == nil {
			return nil, false
		}
		failed[i], last = err, i
	}
	for _, s := range c.Segments {
		if int(s) >= nsegs {
			return nil, false
		}
	}
	var size, id, expiry, ttl, end, length uint64
	r := 0
	for i := range n {
		size += uint64(c.SizeDeltas[i])
		id += uint64(c.LeaseIdDeltas[i])
		expiry += uint64(c.LeaseExpiryUnixNsDeltas[i])
		ttl += uint64(c.LeaseTtlNsDeltas[i])
		if err, bad := failed[i]; bad {
			out = append(out, colResult{err: err})
			continue
		}
		x := colResult{size: size, leaseID: id}
		if int64(ttl) > 0 {
			x.ttl = time.Duration(ttl)
			x.expiry = sent.Add(x.ttl)
		} else {
			x.expiry = unixNS(int64(expiry))
		}
		for range c.ReplicaCounts[i] {
			off := end + uint64(c.OffsetDeltas[r])
			length += uint64(c.LengthDeltas[r])
			x.replicas = append(x.replicas, &pb.Replica{Segment: c.Segments[r], Offset: off, Length: length})
			end = off + length
			r++
		}
		out = append(out, x)
	}
	return out, true
}

// putColumnsFromPB reads c as PutStartColumns documents it, plainly: ok
// is false when the columns disagree with one another or with the nsegs
// descriptors of the response.
func putColumnsFromPB(c *pb.PutStartColumns, nsegs int) (out []PutStartResult, replicas [][]*pb.Replica, ok bool) {
	n := len(c.Tokens)
	if len(c.ReplicaCounts) != n || len(c.HintDeltas) != n {
		return nil, nil, false
	}
	total := 0
	for _, k := range c.ReplicaCounts {
		total += int(k)
	}
	if len(c.Segments) != total || len(c.OffsetDeltas) != total || len(c.LengthDeltas) != total {
		return nil, nil, false
	}
	failed := map[int]error{}
	last := -1
	for _, e := range c.Errors {
		i := int(e.Index)
		err := fromItemError(e.Error)
		if i >= n || i <= last || err == nil {
			return nil, nil, false
		}
		failed[i], last = err, i
	}
	for _, s := range c.Segments {
		if int(s) >= nsegs {
			return nil, nil, false
		}
	}
	var hint, end, length uint64
	r := 0
	for i := range n {
		hint += uint64(c.HintDeltas[i])
		out = append(out, PutStartResult{Err: failed[i], Token: c.Tokens[i], Hint: uint32(hint)})
		var reps []*pb.Replica
		for range c.ReplicaCounts[i] {
			off := end + uint64(c.OffsetDeltas[r])
			length += uint64(c.LengthDeltas[r])
			reps = append(reps, &pb.Replica{Segment: c.Segments[r], Offset: off, Length: length})
			end = off + length
			r++
		}
		replicas = append(replicas, reps)
	}
	return out, replicas, true
}

// wireColumnPuts: PutStart results of every shape a column must carry.
func wireColumnPuts() []PutStartResult {
	ds := wireDescs()
	return []PutStartResult{
		{Err: fmt.Errorf("x: %w", ErrAlreadyExists)},
		{Token: 7, Replicas: []Replica{{&ds[0], 0, 4096}}, Hint: 9},
		{Token: 1<<64 - 1, Replicas: []Replica{{&ds[0], 4096, 4096}}, Hint: 10},
		{Token: 3, Replicas: []Replica{{&ds[1], 1 << 40, 64}, {&ds[2], 0, 1<<64 - 1}}, Hint: 1<<32 - 1},
		{Err: fmt.Errorf("%w: quota", ErrQuota), Token: 5, Replicas: []Replica{{&ds[0], 8, 8}}, Hint: 2},
		{Token: 0, Replicas: nil},
	}
}

// TestWirePutColumns: a PutStart answer by column carries every result as
// results would (a failed one keeps its other fields), to a
// generated-code reader and to the Client's hand decoder.
func TestWirePutColumns(t *testing.T) {
	puts := wireColumnPuts()
	check := func(t *testing.T, got []PutStartResult, reps func(i int) []Replica) {
		t.Helper()
		if len(got) != len(puts) {
			t.Fatalf("%d results, want %d", len(got), len(puts))
		}
		for i, w := range puts {
			if x := got[i]; !sameSentinel(x.Err, w.Err) || x.Token != w.Token || x.Hint != w.Hint {
				t.Errorf("result %d: %+v; sent %+v", i, x, w)
			}
			checkReplicas(t, i, reps(i), w.Replicas)
		}
	}
	b := encodeWire(t, &putStartResponse{res: puts, columns: true})
	var p pb.PutStartResponse
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Results) != 0 || p.Columns == nil {
		t.Fatalf("generated decoding: %d results, columns %v", len(p.Results), p.Columns != nil)
	}
	ref, reps, ok := putColumnsFromPB(p.Columns, len(p.Segments))
	if !ok {
		t.Fatalf("columns do not agree: %v", p.Columns)
	}
	check(t, ref, func(i int) []Replica { return pbReplicas(p.Segments, reps[i]) })
	m := resultsReply{descs: &descCache{}}
	if err := m.unmarshalWire(b); err != nil || m.malformed != nil || !m.columns {
		t.Fatalf("hand decoding: %v, malformed %v, columns %v", err, m.malformed, m.columns)
	}
	check(t, m.puts, func(i int) []Replica { return m.puts[i].Replicas })

	// Malformed columns: no results, and the reference reading agrees.
	for name, edit := range map[string]func(*pb.PutStartColumns){
		"short hints":         func(c *pb.PutStartColumns) { c.HintDeltas = c.HintDeltas[1:] },
		"count past replicas": func(c *pb.PutStartColumns) { c.ReplicaCounts[5] = 1 },
		"unknown segment":     func(c *pb.PutStartColumns) { c.Segments[0] = 9 },
		"error past results":  func(c *pb.PutStartColumns) { c.Errors[1].Index = 6 },
		"errors out of order": func(c *pb.PutStartColumns) {
			c.Errors[0], c.Errors[1] = c.Errors[1], c.Errors[0]
		},
	} {
		q := proto.Clone(&p).(*pb.PutStartResponse)
		edit(q.Columns)
		if _, _, ok := putColumnsFromPB(q.Columns, len(q.Segments)); ok {
			t.Fatalf("%s: reference reading accepts it", name)
		}
		m := resultsReply{descs: &descCache{}}
		if err := m.unmarshalWire(mustMarshal(t, q)); err != nil || m.malformed == nil || len(m.puts) != 0 {
			t.Errorf("%s: hand decoding %v, malformed %v, %d results", name, err, m.malformed, len(m.puts))
		}
	}
	// PutStartColumns' reserved fields 4 and 5 are unknown fields: skipped
	// unread, as proto.Unmarshal skips them, whatever their bytes.
	for _, f := range []protowire.Number{4, 5} {
		junk := protowire.AppendBytes(protowire.AppendTag(nil, f, protowire.BytesType), []byte{0xff, 0xff})
		b := append(mustMarshal(t, &p), protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), junk)...)
		if err := proto.Unmarshal(b, &pb.PutStartResponse{}); err != nil {
			t.Fatalf("field %d: generated decoding: %v", f, err)
		}
		m := resultsReply{descs: &descCache{}}
		if err := m.unmarshalWire(b); err != nil || m.malformed != nil || len(m.puts) != len(puts) {
			t.Fatalf("field %d: hand decoding %v, malformed %v, %d results", f, err, m.malformed, len(m.puts))
		}
	}
	// A packed fixed64 column of a length not a multiple of 8 does not
	// decode, as with proto.Unmarshal.
	bad := protowire.AppendTag(nil, 3, protowire.BytesType)
	bad = protowire.AppendBytes(bad, protowire.AppendBytes(protowire.AppendTag(nil, colToken, protowire.BytesType), make([]byte, 7)))
	if err := proto.Unmarshal(bad, &pb.PutStartResponse{}); err == nil {
		t.Fatal("generated decoding accepts 7 bytes of fixed64")
	}
	if err := (&resultsReply{descs: &descCache{}}).unmarshalWire(bad); err == nil {
		t.Fatal("hand decoding accepts 7 bytes of fixed64")
	}
}

// wireColumnGets: results of every shape a column must carry — failed
// ones between others, several replicas on several segments, values that
// wrap around when taken as deltas, a lease TTL and an absolute expiry.
func wireColumnGets() []GetResult {
	ds := wireDescs()
	expiry := time.Unix(0, 1_700_000_000_123_456_789)
	return []GetResult{
		{Err: fmt.Errorf("%w: key %q", ErrNotFound, "first")},
		{Size: 4096, Replicas: []Replica{{&ds[0], 8192, 4096}}, LeaseExpiry: expiry, LeaseTTL: time.Second, LeaseID: 1 << 40},
		{Size: 4096, Replicas: []Replica{{&ds[0], 12288, 4096}}, LeaseExpiry: expiry, LeaseTTL: time.Second, LeaseID: 1<<40 + 16},
		{Size: 1<<64 - 1, Replicas: []Replica{{&ds[1], 1<<64 - 64, 64}, {&ds[0], 0, 1 << 63}, {&ds[2], 5, 0}}, LeaseExpiry: expiry, LeaseID: 1<<64 - 1},
		{Err: fmt.Errorf("%w: key %q: all replicas draining", ErrNotFound, "d")},
		{Err: fmt.Errorf("%w: key %q", ErrNotFound, "adjacent")},
		{Size: 0, LeaseExpiry: time.Unix(0, -5), LeaseID: 0},
		{Size: 17, Replicas: []Replica{{&ds[1], 3, 17}}, LeaseExpiry: expiry, LeaseTTL: 2 * time.Second, LeaseID: 3},
	}
}

// TestWireGetColumns: a GetReplicas answer by column carries every result
// as results would — to a generated-code reader following GetColumns'
// documentation and to the Client's hand decoder — in fewer bytes.
func TestWireGetColumns(t *testing.T) {
	gets := wireColumnGets()
	sent := time.Unix(1_700_000_000, 0)
	check := func(t *testing.T, got []colResult) {
		t.Helper()
		if len(got) != len(gets) {
			t.Fatalf("%d results, want %d", len(got), len(gets))
		}
		for i, g := range gets {
			x := got[i]
			want := g.LeaseExpiry
			if g.LeaseTTL > 0 {
				want = sent.Add(g.LeaseTTL)
			}
			if !sameSentinel(x.err, g.Err) || g.Err == nil && (x.size != g.Size || x.leaseID != g.LeaseID || x.ttl != g.LeaseTTL || !x.expiry.Equal(want)) {
				t.Errorf("result %d: %+v; sent %+v", i, x, g)
			}
		}
	}
	b := encodeWire(t, &getResponse{res: gets, released: true, columns: true})
	var p pb.GetReplicasResponse
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Results) != 0 || p.Columns == nil || !p.LeasesReleased {
		t.Fatalf("generated decoding: %d results, columns %v, leases_released %v", len(p.Results), p.Columns != nil, p.LeasesReleased)
	}
	ref, ok := columnsFromPB(p.Columns, len(p.Segments), sent)
	if !ok {
		t.Fatalf("columns do not agree: %v", p.Columns)
	}
	check(t, ref)
	for i, x := range ref {
		if gets[i].Err == nil {
			checkReplicas(t, i, pbReplicas(p.Segments, x.replicas), gets[i].Replicas)
		}
	}

	m := resultsReply{get: true, descs: &descCache{}, sent: sent}
	if err := m.unmarshalWire(b); err != nil || m.malformed != nil || !m.columns || !m.released {
		t.Fatalf("hand decoding: %v, malformed %v, columns %v, released %v", err, m.malformed, m.columns, m.released)
	}
	var hand []colResult
	for _, x := range m.gets {
		hand = append(hand, colResult{err: x.Err, size: x.Size, expiry: x.LeaseExpiry, ttl: x.LeaseTTL, leaseID: x.LeaseID})
	}
	check(t, hand)
	for i, g := range gets {
		if g.Err == nil {
			checkReplicas(t, i, m.gets[i].Replicas, g.Replicas)
		} else if m.gets[i].Replicas != nil {
			t.Errorf("failed result %d has replicas %v", i, m.gets[i].Replicas)
		}
	}

	// A Store's batch: objects one after another in one segment, leases
	// of one block. By column it costs a few bytes per key.
	ds := wireDescs()
	batch := make([]GetResult, 4096)
	for i := range batch {
		batch[i] = GetResult{Size: 65536, Replicas: []Replica{{&ds[0], uint64(i) * 65536, 65536}}, LeaseExpiry: sent, LeaseTTL: time.Second, LeaseID: uint64(1<<20 + 16*i)}
	}
	rows := len(encodeWire(t, &getResponse{res: batch}))
	cols := len(encodeWire(t, &getResponse{res: batch, columns: true}))
	if cols*4 > rows {
		t.Errorf("a batch by column is %d bytes, by result %d", cols, rows)
	}
	t.Logf("4096 adjoining results: %d bytes by result, %d by column", rows, cols)
}

// TestWireGetColumnsMalformed: columns that disagree with one another or
// with the descriptor table make the response malformed (no results),
// as the reference reading says; decoding itself succeeds, as
// proto.Unmarshal's does.
func TestWireGetColumnsMalformed(t *testing.T) {
	ds := wireDescs()
	good := func() *pb.GetReplicasResponse {
		return &pb.GetReplicasResponse{
			Segments: []*pb.SegmentDescriptor{descToPB(&ds[0])},
			Columns: &pb.GetColumns{
				SizeDeltas: []int64{8, 0}, ReplicaCounts: []uint32{1, 0}, LeaseIdDeltas: []int64{1, 1},
				LeaseExpiryUnixNsDeltas: []int64{0, 0}, LeaseTtlNsDeltas: []int64{5, 0},
				Segments: []uint32{0}, OffsetDeltas: []int64{64}, LengthDeltas: []int64{8},
				Errors: []*pb.IndexedError{{Index: 1, Error: toItemError(ErrNotFound)}},
			},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*pb.GetReplicasResponse)
	}{
		{"none", func(*pb.GetReplicasResponse) {}},
		{"short per-result column", func(p *pb.GetReplicasResponse) { p.Columns.LeaseTtlNsDeltas = p.Columns.LeaseTtlNsDeltas[:1] }},
		{"replica count past the replicas", func(p *pb.GetReplicasResponse) { p.Columns.ReplicaCounts[0] = 2 }},
		{"short per-replica column", func(p *pb.GetReplicasResponse) { p.Columns.LengthDeltas = nil }},
		{"unknown segment", func(p *pb.GetReplicasResponse) { p.Columns.Segments[0] = 1 }},
		{"error past the results", func(p *pb.GetReplicasResponse) { p.Columns.Errors[0].Index = 2 }},
		{"failed result with a replica", func(p *pb.GetReplicasResponse) { p.Columns.Errors[0].Index = 0 }},
		{"errors out of order", func(p *pb.GetReplicasResponse) {
			p.Columns.Errors = append(p.Columns.Errors, &pb.IndexedError{Index: 1, Error: toItemError(ErrNotFound)})
		}},
		{"error of code OK", func(p *pb.GetReplicasResponse) { p.Columns.Errors[0].Error = nil }},
		{"results beside columns", func(p *pb.GetReplicasResponse) { p.Results = []*pb.GetResult{{Size: 1}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good()
			tc.edit(p)
			want := tc.name == "none"
			if _, ok := columnsFromPB(p.Columns, len(p.Segments), time.Now()); ok != want && len(p.Results) == 0 {
				t.Fatalf("reference reading: ok %v", ok)
			}
			m := resultsReply{get: true, descs: &descCache{}}
			if err := m.unmarshalWire(mustMarshal(t, p)); err != nil {
				t.Fatal(err)
			}
			if (m.malformed == nil) != want {
				t.Fatalf("malformed: %v", m.malformed)
			}
			if want && (len(m.gets) != 2 || m.gets[0].Size != 8 || m.gets[0].Replicas[0].Offset != 64 || !errors.Is(m.gets[1].Err, ErrNotFound)) {
				t.Fatalf("results %+v", m.gets)
			}
		})
	}

	// Columns may come unpacked, split and in any order, as protobuf
	// allows: the values of one column are read in order of appearance.
	var b []byte
	b = protowire.AppendTag(b, colLength, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(8))
	for _, f := range []protowire.Number{colSize, colSize} {
		b = protowire.AppendTag(b, f, protowire.BytesType)
		b = protowire.AppendBytes(b, protowire.AppendVarint(nil, protowire.EncodeZigZag(4)))
	}
	for j, f := range []protowire.Number{colCount, colCount, colLeaseID, colLeaseID, colExpiry, colExpiry, colTTL, colTTL, colSegment, colOffset} {
		v := uint64(0)
		if j == 0 {
			v = 1 // result 0's one replica
		}
		b = protowire.AppendTag(b, f, protowire.VarintType)
		b = protowire.AppendVarint(b, v)
	}
	b = protowire.AppendTag(b, colCount, protowire.VarintType) // a third count: 3 entries for 2 results
	b = protowire.AppendVarint(b, 0)
	var resp []byte
	resp = protowire.AppendTag(resp, 4, protowire.BytesType)
	resp = protowire.AppendBytes(resp, b[:len(b)-2])
	resp = append(mustMarshal(t, &pb.GetReplicasResponse{Segments: []*pb.SegmentDescriptor{descToPB(&ds[0])}}), resp...)
	m := resultsReply{get: true, descs: &descCache{}}
	if err := m.unmarshalWire(resp); err != nil || m.malformed != nil {
		t.Fatal(err, m.malformed)
	}
	if len(m.gets) != 2 || m.gets[0].Size != 4 || m.gets[1].Size != 8 || len(m.gets[0].Replicas) != 1 || m.gets[0].Replicas[0].Length != 8 || m.gets[1].Replicas != nil {
		t.Fatalf("results %+v", m.gets)
	}
	// The split column message: the second part's count makes 3 for 2.
	resp = append(resp, protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), b[len(b)-2:])...)
	m = resultsReply{get: true, descs: &descCache{}}
	if err := m.unmarshalWire(resp); err != nil || m.malformed == nil {
		t.Fatal(err, m.malformed)
	}
}

// TestColumnsOverTheWire: a remote Client asks for columns on both
// transports and reads them (TransportStats.Columns counts them); one
// that asks for results, and a server whose generated handlers answer
// (an interceptor is set), give the same results by result. Each case
// starts puts as items and as uniform puts (one of them failing), ends
// them, and reads them back beside missing keys.
func TestColumnsOverTheWire(t *testing.T) {
	ctx := context.Background()
	svc, pl, d := oneSegmentService(t)
	if _, err := NewEmbedded(svc).PutStart(ctx, []PutStartReq{{Key: "taken", Size: 64, Placement: pl}}); err != nil {
		t.Fatal(err)
	}

	serve := func(t *testing.T, icpt bool) fastServed {
		if !icpt {
			return serveFast(t, NewServer(svc, nil), nil)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}
		srv := NewServer(svc, nil, grpc.UnaryInterceptor(pass))
		go srv.Serve(lis, nil)
		t.Cleanup(func() { srv.Shutdown(ctx) })
		return fastServed{srv: srv, addr: lis.Addr().String()}
	}
	var all []string
	for _, tc := range []struct {
		name            string
		fast, icpt, off bool
		columns         bool
	}{
		{name: "grpc", columns: true},
		{name: "fast", fast: true, columns: true},
		{name: "grpc results asked", off: true},
		{name: "fast results asked", fast: true, off: true},
		{name: "generated handler", icpt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := serve(t, tc.icpt)
			var r *remote
			if tc.fast {
				r = dialFast(t, fs, FastPath{})
			} else {
				c, err := Dial(ctx, fs.addr)
				if err != nil {
					t.Fatal(err)
				}
				r = c.(*remote)
			}
			defer r.Close()
			r.noColumns = tc.off
			var c Client = r

			var keys []string
			var reqs []PutStartReq
			uni := UniformPuts{Req: PutStartReq{Placement: pl}}
			for i := range 200 {
				k := fmt.Sprintf("%s/k%03d", tc.name, i)
				keys = append(keys, k)
				if i < 100 {
					reqs = append(reqs, PutStartReq{Key: k, Size: uint64(512 + i), Placement: pl})
				} else {
					uni.Keys, uni.Sizes = append(uni.Keys, k), append(uni.Sizes, uint64(4096+i))
				}
			}
			uni.Keys[50] = "taken" // fails: a put of it is in progress
			var refs []PutRef
			for call, start := range []func() ([]PutStartResult, error){
				func() ([]PutStartResult, error) { return c.PutStart(ctx, reqs) },
				func() ([]PutStartResult, error) { return r.PutStartUniform(ctx, uni) },
			} {
				res, err := start()
				if err != nil {
					t.Fatal(err)
				}
				for j, x := range res {
					if x.Err != nil {
						if !errors.Is(x.Err, ErrAlreadyExists) {
							t.Fatalf("PutStart: %v", x.Err)
						}
						continue
					}
					if x.Token == 0 || x.Hint == 0 || len(x.Replicas) != 1 || *x.Replicas[0].Segment != d {
						t.Fatalf("PutStart result %+v", x)
					}
					refs = append(refs, x.Ref(keys[100*call+j]))
				}
			}
			if len(refs) != 199 {
				t.Fatalf("%d puts started, want 199", len(refs))
			}
			keys = append(keys[:150], keys[151:]...) // the failed one
			endRefs(t, ctx, c, refs)
			all = append(all, keys...)

			ask := append([]string{"missing"}, keys...)
			ask = append(ask, "", "missing-too")
			got, err := c.GetReplicas(ctx, ask)
			if err != nil {
				t.Fatal(err)
			}
			want, err := svc.GetReplicas(ctx, ask)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
			for i := range want {
				g, w := got[i], want[i]
				if !sameSentinel(g.Err, w.Err) || g.Size != w.Size || g.LeaseTTL != w.LeaseTTL || (g.Err == nil) != (g.LeaseID != 0) {
					t.Fatalf("result %d (%q): %+v, want %+v", i, ask[i], g, w)
				}
				checkReplicas(t, i, g.Replicas, w.Replicas)
			}
			st := r.Transports()
			if wantCols := map[bool]uint64{true: 3}[tc.columns]; st.Columns != wantCols {
				t.Errorf("%d answers by column, want %d", st.Columns, wantCols)
			}
			if tc.fast && (st.Fast == 0 || st.GRPC != 0) {
				t.Errorf("fast path not used: %+v", st)
			}
			// Every lease the two lookups granted ends.
			var ids []uint64
			for i := range got {
				if got[i].Err == nil {
					ids = append(ids, got[i].LeaseID, want[i].LeaseID)
				}
			}
			if err := c.ReleaseLeases(ctx, ids); err != nil {
				t.Fatal(err)
			}
		})
	}
	if errs := svc.Remove(ctx, all, false); errors.Join(errs...) != nil {
		t.Fatalf("remove after every lease ended: %v", errors.Join(errs...))
	}
	if st, err := svc.Stats(ctx); err != nil || st.Objects != 0 || st.PendingPuts != 1 {
		t.Fatalf("%d objects, %d pending puts left, want 0 and 1 (%v)", st.Objects, st.PendingPuts, err)
	}
}

// oneSegmentService returns a Service (closed when the test ends) with one
// client "c" on host "h" and its 1 GiB DRAM segment, and the placement
// that client's puts use.
func oneSegmentService(t *testing.T) (*Service, Placement, segment.Descriptor) {
	t.Helper()
	svc, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	ctx := context.Background()
	reg, err := svc.RegisterClient(ctx, ClientInfo{ID: "c", Node: "h", NUMANode: -1, Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	d := desc("s", reg.ID, "h", segment.TierDRAM, 0, 1<<30)
	if err := svc.MountSegment(ctx, d); err != nil {
		t.Fatal(err)
	}
	return svc, Placement{Client: reg.ID, NUMANode: -1, Device: -1}, d
}
