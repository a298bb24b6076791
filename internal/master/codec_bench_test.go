package master

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// Codec benchmarks (issue 13 item 3): the whole codec work of one
// GetReplicas or PutStart call of 4096 keys, without the network and
// without the Service — client encodes the request, server decodes it,
// server encodes the Service's answer, client decodes it into the
// Client's results — for two codecs:
//
//   - hand: wire.go, as the server and the remote Client use it;
//   - proto: grpc's standard codec (proto.Marshal/Unmarshal) with the
//     conversions between the generated messages and the Service's types
//     (what the server's generated handlers do, and the remote Client did
//     before wire.go).
//
// Generated fast-path code (vtprotobuf, with and without its pools and
// unsafe decoding) was measured here against the hand codec and not kept:
// see docs/decisions.md (20) and docs/perf/wire-codec.md, which name the
// commit to check out to run those paths again.
//
// Each encoded message reaches the decoder in 16 KiB pieces, as the
// transport hands it over (one HTTP/2 DATA frame per piece), so decoders
// pay for joining them as they do in a server.

const codecKeys = 4096

type codecFixture struct {
	reader string
	keys   []string
	reqs   []PutStartReq
	descs  []segment.Descriptor
	gets   []GetResult      // what the Service answers for keys
	puts   []PutStartResult // what the Service answers for reqs
}

// newCodecFixture returns 4096 keys of 46 and 51 bytes, each object with one
// replica on one of 4 segments (the descriptor table is shared by the
// items, as the protocol does), sizes of a KV block, one placement for all
// puts (as client.Store sends).
func newCodecFixture() *codecFixture { return codecFixtureOf(false) }

// codecFixtureOf returns newCodecFixture's keys; with adjoining, their
// objects lie one after another in one segment and their leases are one
// block's, as a Store's batch put together is answered.
func codecFixtureOf(adjoining bool) *codecFixture {
	f := &codecFixture{reader: "vllm-worker-3"}
	for i := range 4 {
		d := desc(fmt.Sprintf("gpu-node-%02d/egm-numa%d-chunk-%d", 16+i, i%2, i), "provider-"+fmt.Sprint(16+i),
			fmt.Sprintf("gpu-node-%02d", 16+i), segment.TierDRAM, int32(i%2), 512<<30)
		f.descs = append(f.descs, d)
	}
	pl := Placement{Client: f.reader, Node: "gpu-node-17", NUMANode: 1, Device: 3}
	expiry := time.Now().Add(time.Second)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range codecKeys {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var k string
		if i%2 == 0 {
			k = fmt.Sprintf("ns-7/llama-3.1-70b/tp8-r3/blk-%016x", x)
		} else {
			k = fmt.Sprintf("tenant-42/mixtral-8x22b/tp4-r1/blk-%016x", x)
		}
		f.keys = append(f.keys, k)
		size := uint64(512 << 10)
		r := Replica{Segment: &f.descs[i%4], Offset: uint64(i) * size * 37 % (512 << 30), Length: size}
		lease, hint := x^0x5555, uint32(x>>40)
		if adjoining {
			r = Replica{Segment: &f.descs[0], Offset: uint64(i) * size, Length: size}
			lease, hint = 1<<30+uint64(i)<<4, uint32(1000+i)
		}
		f.reqs = append(f.reqs, PutStartReq{Key: k, Size: size, Placement: pl})
		f.gets = append(f.gets, GetResult{Size: size, Replicas: []Replica{r}, LeaseExpiry: expiry,
			LeaseTTL: time.Second, LeaseID: lease})
		f.puts = append(f.puts, PutStartResult{Token: x ^ 0xaaaa, Replicas: []Replica{r}, Hint: hint})
	}
	return f
}

// frames splits an encoded message into the 16 KiB pieces a receiver gets
// from the transport (no copy).
func frames(bs mem.BufferSlice) mem.BufferSlice {
	var b []byte
	if len(bs) == 1 {
		b = bs[0].ReadOnlyData()
	} else {
		b = bs.Materialize()
	}
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

// codecPath is one codec's whole round trip of a call.
type codecPath struct {
	name string
	get  func(*codecFixture, *codecClient) ([]GetResult, int, error)
	put  func(*codecFixture, *codecClient) ([]PutStartResult, int, error)
}

// codecClient is the client's state kept between calls (descriptor
// interning).
type codecClient struct {
	descs descCache                           // hand
	byKey map[segment.Key]*segment.Descriptor // generated
}

func newCodecClient() *codecClient {
	return &codecClient{byKey: map[segment.Key]*segment.Descriptor{}}
}

var codecPaths = []codecPath{
	{"hand", handGet, handPut},
	// PutStart's puts as uniform puts (a Store's batch puts go so).
	{"hand-uniform", handGet, handPutUniform},
	// Answered by column (pb.GetColumns, pb.PutStartColumns); puts as
	// uniform puts.
	{"hand-columns", handGetColumns, handPutUniformColumns},
	{"proto", func(f *codecFixture, c *codecClient) ([]GetResult, int, error) { return genGet(f, c, stdCodec) },
		func(f *codecFixture, c *codecClient) ([]PutStartResult, int, error) { return genPut(f, c, stdCodec) }},
}

var stdCodec = encoding.GetCodecV2("proto")

// ---- hand ----

func handGet(f *codecFixture, c *codecClient) ([]GetResult, int, error) {
	return handGetAs(f, c, false)
}

func handGetColumns(f *codecFixture, c *codecClient) ([]GetResult, int, error) {
	return handGetAs(f, c, true)
}

func handGetAs(f *codecFixture, c *codecClient, columns bool) ([]GetResult, int, error) {
	sent := time.Now()
	req, err := codec.Marshal(&keysRequest{keys: f.keys, reader: f.reader, columns: columns, checked: true})
	if err != nil {
		return nil, 0, err
	}
	wire := req.Len()
	in := new(keysRequest)
	err = codec.Unmarshal(frames(req), in)
	req.Free()
	if err != nil {
		return nil, 0, err
	}
	if len(in.keys) != len(f.gets) || in.reader != f.reader || in.columns != columns {
		return nil, 0, fmt.Errorf("server decoded %d keys", len(in.keys))
	}
	in.free() // the Service has answered
	resp, err := codec.Marshal(&getResponse{res: f.gets, columns: columns})
	if err != nil {
		return nil, 0, err
	}
	wire += resp.Len()
	m := resultsReply{get: true, descs: &c.descs, gets: make([]GetResult, 0, len(f.keys)), sent: sent}
	err = codec.Unmarshal(frames(resp), &m)
	resp.Free()
	if err == nil {
		err = m.malformed
	}
	return m.gets, wire, err
}

func handPut(f *codecFixture, c *codecClient) ([]PutStartResult, int, error) {
	return handPutMsg(f, c, &putStartRequest{reqs: f.reqs, checked: true})
}

func handPutUniform(f *codecFixture, c *codecClient) ([]PutStartResult, int, error) {
	return handPutMsg(f, c, &putStartRequest{uni: true, u: f.uniform(), checked: true})
}

func handPutUniformColumns(f *codecFixture, c *codecClient) ([]PutStartResult, int, error) {
	return handPutMsg(f, c, &putStartRequest{uni: true, u: f.uniform(), columns: true, checked: true})
}

// uniform returns f.reqs as uniform puts.
func (f *codecFixture) uniform() UniformPuts {
	u := UniformPuts{Keys: f.keys, Sizes: make([]uint64, len(f.reqs)), Req: f.reqs[0]}
	for i := range f.reqs {
		u.Sizes[i] = f.reqs[i].Size
	}
	return u
}

// handPutMsg is a PutStart of out's puts (f.reqs as items or uniform puts)
// through the hand codec.
func handPutMsg(f *codecFixture, c *codecClient, out *putStartRequest) ([]PutStartResult, int, error) {
	req, err := codec.Marshal(out)
	if err != nil {
		return nil, 0, err
	}
	wire := req.Len()
	in := new(putStartRequest)
	err = codec.Unmarshal(frames(req), in)
	req.Free()
	if err != nil {
		return nil, 0, err
	}
	if n := len(in.reqs) + len(in.u.Keys); n != len(f.puts) {
		return nil, 0, fmt.Errorf("server decoded %d puts", n)
	}
	in.free() // the Service has answered
	resp, err := codec.Marshal(&putStartResponse{res: f.puts, columns: out.columns})
	if err != nil {
		return nil, 0, err
	}
	wire += resp.Len()
	m := resultsReply{descs: &c.descs, puts: make([]PutStartResult, 0, len(f.reqs))}
	err = codec.Unmarshal(frames(resp), &m)
	resp.Free()
	if err == nil {
		err = m.malformed
	}
	return m.puts, wire, err
}

// ---- generated code ----

// genGet is GetReplicas through generated messages: the client's request
// as remote.go built it before wire.go, the server's conversion of
// grpcService.GetReplicas, the client's conversion back.
func genGet(f *codecFixture, c *codecClient, cd encoding.CodecV2) ([]GetResult, int, error) {
	sent := time.Now()
	req, err := cd.Marshal(&pb.GetReplicasRequest{Keys: f.keys, ClientId: f.reader})
	if err != nil {
		return nil, 0, err
	}
	wire := req.Len()
	in := &pb.GetReplicasRequest{}
	err = cd.Unmarshal(frames(req), in)
	req.Free()
	if err != nil {
		return nil, 0, err
	}
	if len(in.Keys) != len(f.gets) || in.ClientId != f.reader {
		return nil, 0, fmt.Errorf("server decoded %d keys", len(in.Keys))
	}
	resp, err := cd.Marshal(getToPB(f.gets))
	if err != nil {
		return nil, 0, err
	}
	wire += resp.Len()
	got := &pb.GetReplicasResponse{}
	err = cd.Unmarshal(frames(resp), got)
	resp.Free()
	if err != nil {
		return nil, 0, err
	}
	res, err := getFromPB(got, c, sent)
	return res, wire, err
}

// intern returns the client's descriptors for a response's table.
func (c *codecClient) intern(segs []*pb.SegmentDescriptor) []*segment.Descriptor {
	out := make([]*segment.Descriptor, len(segs))
	for i, s := range segs {
		k := segment.Key{ID: s.Id, Generation: s.Generation}
		d, ok := c.byKey[k]
		if !ok {
			nd := descFromPB(s)
			d = &nd
			c.byKey[segment.Key{ID: nd.ID, Generation: nd.Generation}] = d
		}
		out[i] = d
	}
	return out
}

// getFromPB is the remote Client's conversion of a generated response.
func getFromPB(p *pb.GetReplicasResponse, c *codecClient, sent time.Time) ([]GetResult, error) {
	segs := c.intern(p.Segments)
	out := make([]GetResult, len(p.Results))
	n := 0
	for _, x := range p.Results {
		n += len(x.Replicas)
	}
	backing := make([]Replica, 0, n)
	for i, x := range p.Results {
		if out[i].Err = fromItemError(x.Error); out[i].Err != nil {
			continue
		}
		out[i].Size, out[i].LeaseID = x.Size, x.LeaseId
		if x.LeaseTtlNs > 0 {
			out[i].LeaseTTL = time.Duration(x.LeaseTtlNs)
			out[i].LeaseExpiry = sent.Add(out[i].LeaseTTL)
		} else {
			out[i].LeaseExpiry = unixNS(x.LeaseExpiryUnixNs)
		}
		start := len(backing)
		for _, r := range x.Replicas {
			if int(r.Segment) >= len(segs) {
				return nil, fmt.Errorf("master: malformed response: replica names segment %d of %d", r.Segment, len(segs))
			}
			backing = append(backing, Replica{Segment: segs[r.Segment], Offset: r.Offset, Length: r.Length})
		}
		out[i].Replicas = backing[start:len(backing):len(backing)]
	}
	return out, nil
}

// genPut is PutStart through generated messages (see genGet).
func genPut(f *codecFixture, c *codecClient, cd encoding.CodecV2) ([]PutStartResult, int, error) {
	req, err := cd.Marshal(putStartToPB(f.reqs))
	if err != nil {
		return nil, 0, err
	}
	wire := req.Len()
	in := &pb.PutStartRequest{}
	err = cd.Unmarshal(frames(req), in)
	req.Free()
	if err != nil {
		return nil, 0, err
	}
	if reqs := putStartReqsFromPB(in); len(reqs) != len(f.puts) {
		return nil, 0, fmt.Errorf("server decoded %d items", len(reqs))
	}
	resp, err := cd.Marshal(putToPB(f.puts))
	if err != nil {
		return nil, 0, err
	}
	wire += resp.Len()
	got := &pb.PutStartResponse{}
	err = cd.Unmarshal(frames(resp), got)
	resp.Free()
	if err != nil {
		return nil, 0, err
	}
	res, err := putFromPB(got, c)
	return res, wire, err
}

// putStartToPB is the remote Client's request before wire.go.
func putStartToPB(reqs []PutStartReq) *pb.PutStartRequest {
	backing := make([]pb.PutStartItem, len(reqs))
	out := &pb.PutStartRequest{Items: make([]*pb.PutStartItem, len(reqs))}
	for i := range reqs {
		q := &reqs[i]
		it := &backing[i]
		*it = pb.PutStartItem{Key: q.Key, Size: q.Size, Replicas: int32(q.Replicas), Pin: q.Pin, SoftPin: q.SoftPin,
			SoftPinTtlNs: int64(q.SoftPinTTL), Upsert: q.Upsert, KeepSoftPin: q.KeepSoftPin, Placement: placementToPB(&q.Placement)}
		out.Items[i] = it
	}
	return out
}

func putFromPB(p *pb.PutStartResponse, c *codecClient) ([]PutStartResult, error) {
	segs := c.intern(p.Segments)
	out := make([]PutStartResult, len(p.Results))
	n := 0
	for _, x := range p.Results {
		n += len(x.Replicas)
	}
	backing := make([]Replica, 0, n)
	for i, x := range p.Results {
		out[i].Err, out[i].Token, out[i].Hint = fromItemError(x.Error), x.Token, x.Hint
		start := len(backing)
		for _, r := range x.Replicas {
			if int(r.Segment) >= len(segs) {
				return nil, fmt.Errorf("master: malformed response: replica names segment %d of %d", r.Segment, len(segs))
			}
			backing = append(backing, Replica{Segment: segs[r.Segment], Offset: r.Offset, Length: r.Length})
		}
		if len(backing) > start {
			out[i].Replicas = backing[start:len(backing):len(backing)]
		}
	}
	return out, nil
}

// TestCodecPaths: every benchmarked codec path delivers the Service's
// answers to the client intact (the benchmarks below only count them).
func TestCodecPaths(t *testing.T) {
	for _, layout := range codecLayouts {
		f := codecFixtureOf(layout == "adjoining")
		for _, p := range codecPaths {
			t.Run(p.name+"/"+layout, func(t *testing.T) {
				c := newCodecClient()
				for range 2 { // the second time with warm pools and caches
					gets, _, err := p.get(f, c)
					if err != nil {
						t.Fatal(err)
					}
					checkCodecGets(t, gets, f.gets)
					puts, _, err := p.put(f, c)
					if err != nil {
						t.Fatal(err)
					}
					checkCodecPuts(t, puts, f.puts)
				}
			})
		}
	}
}

// codecLayouts: where the answers' objects lie (codecFixtureOf).
var codecLayouts = []string{"scattered", "adjoining"}

func checkCodecGets(t *testing.T, got, want []GetResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if g.Err != nil || g.Size != w.Size || g.LeaseID != w.LeaseID || g.LeaseTTL != w.LeaseTTL {
			t.Fatalf("result %d: %+v, want %+v", i, *g, *w)
		}
		checkReplicas(t, i, g.Replicas, w.Replicas)
	}
}

func checkCodecPuts(t *testing.T, got, want []PutStartResult) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Err != nil || got[i].Token != want[i].Token || got[i].Hint != want[i].Hint {
			t.Fatalf("result %d: %+v, want %+v", i, got[i], want[i])
		}
		checkReplicas(t, i, got[i].Replicas, want[i].Replicas)
	}
}

// BenchmarkCodec measures one call's codec work at 4096 keys (see the top
// of this file). ns/key is ns/op over the keys, cpu-ns/key the CPU time
// of the process (GC included) over the keys; wireB/key the bytes of
// request and response.
func BenchmarkCodec(b *testing.B) {
	for _, rpc := range []string{"GetReplicas", "PutStart"} {
		for _, layout := range codecLayouts {
			f := codecFixtureOf(layout == "adjoining")
			for _, p := range codecPaths {
				b.Run(fmt.Sprintf("rpc=%s/codec=%s/layout=%s/keys=%d", rpc, p.name, layout, codecKeys), func(b *testing.B) {
					c := newCodecClient()
					b.ReportAllocs()
					wire := 0
					cpu := -cpuTime()
					for b.Loop() {
						var n int
						var err error
						if rpc == "GetReplicas" {
							var res []GetResult
							res, n, err = p.get(f, c)
							if err == nil && len(res) != codecKeys {
								err = fmt.Errorf("%d results", len(res))
							}
						} else {
							var res []PutStartResult
							res, n, err = p.put(f, c)
							if err == nil && len(res) != codecKeys {
								err = fmt.Errorf("%d results", len(res))
							}
						}
						if err != nil {
							b.Fatal(err)
						}
						wire = n
					}
					cpu += cpuTime()
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/codecKeys, "ns/key")
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/codecKeys, "cpu-ns/key")
					b.ReportMetric(float64(wire)/codecKeys, "wireB/key")
				})
			}
		}
	}
}
