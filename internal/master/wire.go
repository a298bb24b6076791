package master

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wireCodec falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// The hot calls (PutStart, PutEnd, PutRevoke, GetReplicas) are encoded and
// decoded by hand, straight between the Service's types and the protobuf
// wire format of api/kvfabric/v1: the bytes on the wire are the same as the
// generated code's, so either side may be a generated-code peer. The
// generated code allocates one Go object per repeated element (per item,
// placement, replica and item error) and the conversion to the Service's
// types copies it all again; by hand, a batch costs a few allocations
// whatever its size (see docs/perf/master.md).
//
// Decoding follows protobuf's rules: fields in any order, unknown fields
// and known fields of the wrong wire type are skipped, the last value of a
// scalar wins, a message field that repeats is merged, strings must be
// valid UTF-8. wire_test.go checks both directions against the generated
// code, and fuzzes the decoders against proto.Unmarshal.

// wireMessage is a message the codec encodes and decodes by hand. A type
// implements the directions it is used in; the other returns errWireDir.
type wireMessage interface {
	// wireSize is a size hint for the encoding (exact or an upper bound is
	// best; any value works).
	wireSize() int
	appendWire(b []byte) ([]byte, error)
	// unmarshalWire decodes b, which is only valid during the call.
	unmarshalWire(b []byte) error
}

var errWireDir = errors.New("master: wire message used in the wrong direction")

// wireCodec is the gRPC codec of the master's client and server: the hand
// encoding for wireMessages, the standard protobuf codec for everything
// else. Its name is "proto", so the content type is unchanged.
type wireCodec struct{ std encoding.CodecV2 }

var codec = wireCodec{std: encoding.GetCodecV2("proto")}

func (wireCodec) Name() string { return "proto" }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(wireMessage)
	if !ok {
		return c.std.Marshal(v)
	}
	n := m.wireSize()
	if mem.IsBelowBufferPoolingThreshold(n) {
		b, err := m.appendWire(make([]byte, 0, n))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	b, err := m.appendWire((*buf)[:0])
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = b // may have grown past the hint: the pool files it by capacity
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// decodeTarget is the server handlers' decode target (see
// invalidOnDecodeError): Unmarshal decodes into v and keeps the error in
// err instead of returning it.
type decodeTarget struct {
	v   any
	err error
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if t, ok := v.(*decodeTarget); ok {
		t.err = c.Unmarshal(data, t.v)
		return nil
	}
	m, ok := v.(wireMessage)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return m.unmarshalWire(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.unmarshalWire(buf.ReadOnlyData())
}

// ---- encoding helpers ----

// Tags of the fields used here: field numbers below 16 encode in one byte.
func tag(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

var errInvalidUTF8 = errors.New("master: wire: string field contains invalid UTF-8")

func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return b, errInvalidUTF8
	}
	b = append(b, tag(num, protowire.BytesType))
	return protowire.AppendString(b, s), nil
}

// appendStringNZ appends a non-empty string field (proto3 omits "").
func appendStringNZ(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	return appendString(b, num, s)
}

func appendVarintNZ(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(append(b, tag(num, protowire.VarintType)), v)
}

func appendFixed64NZ(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(append(b, tag(num, protowire.Fixed64Type)), v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(b, tag(num, protowire.VarintType), 1)
}

// int32 fields are varints of the sign-extended 64-bit value.
func int32Wire(v int32) uint64 { return uint64(int64(v)) }

// beginMsg starts a length-delimited field; endMsg writes its length. The
// length byte is reserved; a body of 128 bytes or more is shifted right.
func beginMsg(b *[]byte, num protowire.Number) int {
	*b = append(*b, tag(num, protowire.BytesType), 0)
	return len(*b)
}

func endMsg(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	k := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, k-1)...)
	copy(b[start-1+k:], b[start:start+n])
	protowire.AppendVarint(b[:start-1], uint64(n))
	return b
}

// ---- decoding helpers ----

// field is one decoded field: its number and type, and its value (v for
// varint and fixed, p for length-delimited).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	p   []byte
}

// next decodes the field at the start of b and returns the rest.
func next(b []byte) (field, []byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	// ConsumeTag accepts any field number >= 1; proto.Unmarshal rejects
	// numbers past the protobuf maximum as invalid wire data, and so do we
	// (found by FuzzWireDecode; the input is kept in testdata).
	if !num.IsValid() {
		return field{}, nil, fmt.Errorf("proto: invalid field number %d", num)
	}
	b = b[n:]
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		f.v, n = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		f.p, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	return f, b[n:], nil
}

// is reports whether f is field num of type typ (a known field of another
// type is skipped, like an unknown one).
func (f *field) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// str returns f's bytes as a new string, checking UTF-8.
func (f *field) str() (string, error) {
	if !utf8.Valid(f.p) {
		return "", errInvalidUTF8
	}
	return string(f.p), nil
}

// sub returns f's bytes as a substring of all, which holds a copy of the
// whole message starting at base (one allocation per message for strings
// that are not kept past the call).
func (f *field) sub(all string, base []byte) (string, error) {
	if !utf8.Valid(f.p) {
		return "", errInvalidUTF8
	}
	if len(f.p) == 0 {
		return "", nil
	}
	off := cap(base) - cap(f.p)
	return all[off : off+len(f.p)], nil
}

// ---- PutStart ----

// putStartRequest is pb.PutStartRequest as []PutStartReq: the client
// encodes it, the server decodes it.
type putStartRequest struct{ reqs []PutStartReq }

func (m *putStartRequest) wireSize() int {
	n := 0
	for i := range m.reqs {
		q := &m.reqs[i]
		n += 3 + len(q.Key) + 11 + 11 + 2 + 2 + 3 + 11 + 2 + 6 + len(q.Placement.Client) + len(q.Placement.Node) + 22
		for _, s := range q.Placement.Segments {
			n += 3 + len(s)
		}
	}
	return n
}

func (m *putStartRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	for i := range m.reqs {
		q := &m.reqs[i]
		item := beginMsg(&b, 1)
		if b, err = appendStringNZ(b, 1, q.Key); err != nil {
			return b, err
		}
		b = appendVarintNZ(b, 2, q.Size)
		b = appendVarintNZ(b, 3, int32Wire(int32(max(math.MinInt32, min(q.Replicas, math.MaxInt32)))))
		b = appendBool(b, 4, q.Pin)
		// Always sent: an absent placement means NoPlacement, an empty one
		// NUMA node 0 and device 0.
		pl := beginMsg(&b, 5)
		p := &q.Placement
		b = appendVarintNZ(b, 1, uint64(p.Tier))
		b = appendBool(b, 2, p.TierOnly)
		if b, err = appendStringNZ(b, 3, p.Client); err != nil {
			return b, err
		}
		if b, err = appendStringNZ(b, 4, p.Node); err != nil {
			return b, err
		}
		b = appendVarintNZ(b, 5, int32Wire(p.NUMANode))
		b = appendVarintNZ(b, 6, int32Wire(p.Device))
		for _, s := range p.Segments {
			if b, err = appendString(b, 7, s); err != nil {
				return b, err
			}
		}
		b = endMsg(b, pl)
		b = appendBool(b, 6, q.SoftPin)
		b = appendVarintNZ(b, 7, uint64(int64(q.SoftPinTTL)))
		b = appendBool(b, 8, q.Upsert)
		b = appendBool(b, 9, q.KeepSoftPin)
		b = endMsg(b, item)
	}
	return b, nil
}

func (m *putStartRequest) unmarshalWire(b []byte) error {
	// The Service copies keys into its arena, so the keys can share one
	// copy of the message.
	all := string(b)
	base := b
	n := 0
	for r := b; len(r) > 0; {
		f, rest, err := next(r)
		if err != nil {
			return err
		}
		if f.is(1, protowire.BytesType) {
			n++
		}
		r = rest
	}
	m.reqs = make([]PutStartReq, 0, n)
	// Items of a batch usually carry the same placement: decode it once.
	var lastPl []byte
	var last Placement
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		if !f.is(1, protowire.BytesType) {
			continue
		}
		q := PutStartReq{Placement: NoPlacement}
		seenPl := false
		for it := f.p; len(it) > 0; {
			g, rest, err := next(it)
			if err != nil {
				return err
			}
			it = rest
			switch {
			case g.is(1, protowire.BytesType):
				if q.Key, err = g.sub(all, base); err != nil {
					return err
				}
			case g.is(2, protowire.VarintType):
				q.Size = g.v
			case g.is(3, protowire.VarintType):
				q.Replicas = int(int32(g.v))
			case g.is(4, protowire.VarintType):
				q.Pin = g.v != 0
			case g.is(6, protowire.VarintType):
				q.SoftPin = g.v != 0
			case g.is(7, protowire.VarintType):
				q.SoftPinTTL = time.Duration(int64(g.v))
			case g.is(8, protowire.VarintType):
				q.Upsert = g.v != 0
			case g.is(9, protowire.VarintType):
				q.KeepSoftPin = g.v != 0
			case g.is(5, protowire.BytesType):
				if !seenPl && lastPl != nil && bytes.Equal(g.p, lastPl) {
					q.Placement = last
				} else {
					if !seenPl {
						q.Placement = Placement{}
					}
					if err := decodePlacement(&q.Placement, g.p); err != nil {
						return err
					}
					if !seenPl {
						// Clipped: a merge into a shared copy must not append in place.
						lastPl, last = g.p, q.Placement
						last.Segments = last.Segments[:len(last.Segments):len(last.Segments)]
						q.Placement.Segments = last.Segments
					}
				}
				seenPl = true
			}
		}
		m.reqs = append(m.reqs, q)
	}
	return nil
}

// decodePlacement merges the encoded placement b into p.
func decodePlacement(p *Placement, b []byte) error {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.VarintType):
			p.Tier = clampTier(int32(f.v))
		case f.is(2, protowire.VarintType):
			p.TierOnly = f.v != 0
		case f.is(3, protowire.BytesType):
			if p.Client, err = f.str(); err != nil {
				return err
			}
		case f.is(4, protowire.BytesType):
			if p.Node, err = f.str(); err != nil {
				return err
			}
		case f.is(5, protowire.VarintType):
			p.NUMANode = int32(f.v)
		case f.is(6, protowire.VarintType):
			p.Device = int32(f.v)
		case f.is(7, protowire.BytesType):
			s, err := f.str()
			if err != nil {
				return err
			}
			p.Segments = append(p.Segments, s)
		}
	}
	return nil
}

// descTable numbers the distinct descriptors of a response.
type descTable struct {
	list []*segment.Descriptor
	idx  map[*segment.Descriptor]uint32 // once list is long
}

func (t *descTable) add(d *segment.Descriptor) uint32 {
	if t.idx == nil {
		for i, x := range t.list {
			if x == d {
				return uint32(i)
			}
		}
		if len(t.list) >= 16 {
			t.idx = make(map[*segment.Descriptor]uint32, 2*len(t.list))
			for i, x := range t.list {
				t.idx[x] = uint32(i)
			}
		}
	} else if i, ok := t.idx[d]; ok {
		return i
	}
	i := uint32(len(t.list))
	t.list = append(t.list, d)
	if t.idx != nil {
		t.idx[d] = i
	}
	return i
}

func (t *descTable) wireSize() int {
	n := 0
	for _, d := range t.list {
		n += 3 + 3 + len(d.ID) + 9 + 3 + len(d.Node) + 3 + len(d.Owner) + 3 + 11 + 11 + 3 + 3 + 66 + 3 + len(d.Handle.SocketPath)
	}
	return n
}

// appendDescs appends the table as field 1 (SegmentDescriptor), as descToPB
// and the generated code would.
func (t *descTable) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, d := range t.list {
		m := beginMsg(&b, 1)
		if b, err = appendStringNZ(b, 1, d.ID); err != nil {
			return b, err
		}
		b = appendFixed64NZ(b, 2, d.Generation)
		if b, err = appendStringNZ(b, 3, d.Node); err != nil {
			return b, err
		}
		if b, err = appendStringNZ(b, 4, d.Owner); err != nil {
			return b, err
		}
		b = appendVarintNZ(b, 5, uint64(d.Tier))
		b = appendVarintNZ(b, 6, int32Wire(d.Location))
		b = appendVarintNZ(b, 7, d.Size)
		h := beginMsg(&b, 8) // descToPB always sets the handle
		b = appendVarintNZ(b, 1, uint64(d.Handle.Kind))
		if d.Handle.Fabric != ([64]byte{}) {
			b = append(b, tag(2, protowire.BytesType))
			b = protowire.AppendBytes(b, d.Handle.Fabric[:])
		}
		if b, err = appendStringNZ(b, 3, d.Handle.SocketPath); err != nil {
			return b, err
		}
		b = endMsg(b, h)
		b = endMsg(b, m)
	}
	return b, nil
}

func appendReplicas(b []byte, num protowire.Number, t *descTable, rs []Replica) []byte {
	for _, r := range rs {
		m := beginMsg(&b, num)
		b = appendVarintNZ(b, 1, uint64(t.add(r.Segment)))
		b = appendVarintNZ(b, 2, r.Offset)
		b = appendVarintNZ(b, 3, r.Length)
		b = endMsg(b, m)
	}
	return b
}

func appendItemError(b []byte, num protowire.Number, err error) ([]byte, error) {
	code, reason := classify(err)
	msg := err.Error()
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "\uFFFD")
	}
	m := beginMsg(&b, num)
	b = appendVarintNZ(b, 1, uint64(code))
	b, e := appendStringNZ(b, 2, reason)
	if e != nil {
		return b, e
	}
	if b, e = appendStringNZ(b, 3, msg); e != nil {
		return b, e
	}
	return endMsg(b, m), nil
}

// putStartResponse is pb.PutStartResponse from the Service's results (the
// server encodes it).
type putStartResponse struct {
	res  []PutStartResult
	tab  descTable
	scan bool // tab filled
}

func (m *putStartResponse) fill() {
	if !m.scan {
		for i := range m.res {
			for _, r := range m.res[i].Replicas {
				m.tab.add(r.Segment)
			}
		}
		m.scan = true
	}
}

func (m *putStartResponse) wireSize() int {
	m.fill()
	n := m.tab.wireSize()
	for i := range m.res {
		n += 3 + 9 + 40*len(m.res[i].Replicas)
		if m.res[i].Err != nil {
			n += 128
		}
	}
	return n
}

func (m *putStartResponse) appendWire(b []byte) ([]byte, error) {
	m.fill()
	b, err := m.tab.appendWire(b)
	if err != nil {
		return b, err
	}
	for i := range m.res {
		x := &m.res[i]
		r := beginMsg(&b, 2)
		if x.Err != nil {
			if b, err = appendItemError(b, 1, x.Err); err != nil {
				return b, err
			}
		}
		b = appendFixed64NZ(b, 2, x.Token)
		b = appendReplicas(b, 3, &m.tab, x.Replicas)
		b = endMsg(b, r)
	}
	return b, nil
}

func (*putStartResponse) unmarshalWire([]byte) error { return errWireDir }

// getResponse is pb.GetReplicasResponse from the Service's results (the
// server encodes it).
type getResponse struct {
	res  []GetResult
	tab  descTable
	scan bool
}

func (m *getResponse) fill() {
	if !m.scan {
		for i := range m.res {
			if m.res[i].Err == nil {
				for _, r := range m.res[i].Replicas {
					m.tab.add(r.Segment)
				}
			}
		}
		m.scan = true
	}
}

func (m *getResponse) wireSize() int {
	m.fill()
	n := m.tab.wireSize()
	for i := range m.res {
		n += 3 + 11 + 11 + 11 + 9 + 40*len(m.res[i].Replicas) // size, expiry, TTL, lease id
		if m.res[i].Err != nil {
			n += 128
		}
	}
	return n
}

func (m *getResponse) appendWire(b []byte) ([]byte, error) {
	m.fill()
	b, err := m.tab.appendWire(b)
	if err != nil {
		return b, err
	}
	for i := range m.res {
		x := &m.res[i]
		r := beginMsg(&b, 2)
		if x.Err != nil {
			if b, err = appendItemError(b, 1, x.Err); err != nil {
				return b, err
			}
		} else {
			b = appendVarintNZ(b, 2, x.Size)
			b = appendReplicas(b, 3, &m.tab, x.Replicas)
			b = appendVarintNZ(b, 4, uint64(x.LeaseExpiry.UnixNano()))
			b = appendVarintNZ(b, 5, uint64(max(0, x.LeaseTTL)))
			b = appendFixed64NZ(b, 6, x.LeaseID)
		}
		b = endMsg(b, r)
	}
	return b, nil
}

func (*getResponse) unmarshalWire([]byte) error { return errWireDir }

// ---- PutEnd, PutRevoke ----

// putRefsRequest is pb.PutEndRequest and pb.PutRevokeRequest. Decoded keys
// share one string per message: the Service does not keep them.
type putRefsRequest struct{ puts []PutRef }

func (m *putRefsRequest) wireSize() int {
	n := 0
	for _, p := range m.puts {
		n += 2 + 3 + len(p.Key) + 9
	}
	return n
}

func (m *putRefsRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, p := range m.puts {
		r := beginMsg(&b, 1)
		if b, err = appendStringNZ(b, 1, p.Key); err != nil {
			return b, err
		}
		b = appendFixed64NZ(b, 2, p.Token)
		b = endMsg(b, r)
	}
	return b, nil
}

func (m *putRefsRequest) unmarshalWire(b []byte) error {
	all := string(b)
	base := b
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		if !f.is(1, protowire.BytesType) {
			continue
		}
		var p PutRef
		for it := f.p; len(it) > 0; {
			g, rest, err := next(it)
			if err != nil {
				return err
			}
			it = rest
			switch {
			case g.is(1, protowire.BytesType):
				if p.Key, err = g.sub(all, base); err != nil {
					return err
				}
			case g.is(2, protowire.Fixed64Type):
				p.Token = g.v
			}
		}
		m.puts = append(m.puts, p)
	}
	return nil
}

// itemErrorList is pb.PutEndResponse, pb.PutRevokeResponse and
// pb.RemoveResponse: field 1, one ItemError per item, empty for success.
type itemErrorList struct{ errs []error }

func (m *itemErrorList) wireSize() int {
	n := 2 * len(m.errs)
	for _, e := range m.errs {
		if e != nil {
			n += 128
		}
	}
	return n
}

func (m *itemErrorList) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, e := range m.errs {
		if e == nil {
			b = append(b, tag(1, protowire.BytesType), 0)
		} else if b, err = appendItemError(b, 1, e); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (m *itemErrorList) unmarshalWire(b []byte) error {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		if f.is(1, protowire.BytesType) {
			e, err := decodeItemError(f.p)
			if err != nil {
				return err
			}
			m.errs = append(m.errs, e)
		}
	}
	return nil
}

// decodeItemError decodes an ItemError into the error fromItemError
// returns: nil for success (code 0).
func decodeItemError(b []byte) (error, error) {
	var code uint64
	var reason, msg []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		switch {
		case f.is(1, protowire.VarintType):
			code = f.v
		case f.is(2, protowire.BytesType), f.is(3, protowire.BytesType):
			// Every occurrence must be valid UTF-8, not only the last one
			// that wins, as proto.Unmarshal checks.
			if !utf8.Valid(f.p) {
				return nil, errInvalidUTF8
			}
			if f.num == 2 {
				reason = f.p
			} else {
				msg = f.p
			}
		}
	}
	if uint32(code) == 0 {
		return nil, nil
	}
	return fromItemError(&pb.ItemError{Code: uint32(code), Reason: string(reason), Message: string(msg)}), nil
}

// ---- GetReplicas ----

// keysRequest is pb.GetReplicasRequest. Decoded keys share one string per
// message: the Service does not keep them.
type keysRequest struct {
	keys   []string
	reader string // client_id
}

func (m *keysRequest) wireSize() int {
	n := 3 + len(m.reader)
	for _, k := range m.keys {
		n += 3 + len(k)
	}
	return n
}

func (m *keysRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, k := range m.keys {
		if b, err = appendString(b, 1, k); err != nil {
			return b, err
		}
	}
	return appendStringNZ(b, 2, m.reader)
}

func (m *keysRequest) unmarshalWire(b []byte) error {
	all := string(b)
	base := b
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			k, err := f.sub(all, base)
			if err != nil {
				return err
			}
			m.keys = append(m.keys, k)
		case f.is(2, protowire.BytesType):
			r, err := f.sub(all, base)
			if err != nil {
				return err
			}
			m.reader = strings.Clone(r) // kept in the context past the message
		}
	}
	return nil
}

// ---- client side of PutStart and GetReplicas responses ----

// wireReplica is a Replica as sent: an index into the descriptor table.
type wireReplica struct {
	seg          uint32
	offset, size uint64
}

// wireResult is one PutStartResult or GetResult as sent.
type wireResult struct {
	err     error
	token   uint64 // PutStart
	size    uint64 // GetReplicas
	lease   int64  // GetReplicas: expiry, master clock (unix ns)
	ttl     int64  // GetReplicas: lease left when sent (ns)
	leaseID uint64 // GetReplicas
	lo, hi  int    // replicas[lo:hi]
}

// resultsReply is pb.PutStartResponse (get false) or pb.GetReplicasResponse
// (get true) as the client reads it: descriptors interned in descs.
type resultsReply struct {
	get      bool
	descs    *descCache
	segs     []*segment.Descriptor
	results  []wireResult
	replicas []wireReplica
}

func (*resultsReply) wireSize() int                       { return 0 }
func (*resultsReply) appendWire(b []byte) ([]byte, error) { return b, errWireDir }

func (m *resultsReply) unmarshalWire(b []byte) error {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			d, err := m.descs.get(f.p)
			if err != nil {
				return err
			}
			m.segs = append(m.segs, d)
		case f.is(2, protowire.BytesType):
			if err := m.result(f.p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *resultsReply) result(b []byte) error {
	x := wireResult{lo: len(m.replicas)}
	var errMsg []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			// A repeated message field merges: decode the concatenation.
			errMsg = append(errMsg[:len(errMsg):len(errMsg)], f.p...)
		case !m.get && f.is(2, protowire.Fixed64Type):
			x.token = f.v
		case m.get && f.is(2, protowire.VarintType):
			x.size = f.v
		case f.is(3, protowire.BytesType):
			var r wireReplica
			for p := f.p; len(p) > 0; {
				g, rest, err := next(p)
				if err != nil {
					return err
				}
				p = rest
				switch {
				case g.is(1, protowire.VarintType):
					r.seg = uint32(g.v)
				case g.is(2, protowire.VarintType):
					r.offset = g.v
				case g.is(3, protowire.VarintType):
					r.size = g.v
				}
			}
			m.replicas = append(m.replicas, r)
		case m.get && f.is(4, protowire.VarintType):
			x.lease = int64(f.v)
		case m.get && f.is(5, protowire.VarintType):
			x.ttl = int64(f.v)
		case m.get && f.is(6, protowire.Fixed64Type):
			x.leaseID = f.v
		}
	}
	if errMsg != nil {
		var err error
		if x.err, err = decodeItemError(errMsg); err != nil {
			return err
		}
	}
	x.hi = len(m.replicas)
	m.results = append(m.results, x)
	return nil
}

// replicas resolves x's replicas into backing.
func (m *resultsReply) resolve(x *wireResult, backing []Replica) ([]Replica, []Replica, error) {
	start := len(backing)
	for _, r := range m.replicas[x.lo:x.hi] {
		if int(r.seg) >= len(m.segs) {
			return nil, backing, fmt.Errorf("master: malformed response: replica names segment %d of %d", r.seg, len(m.segs))
		}
		backing = append(backing, Replica{Segment: m.segs[r.seg], Offset: r.offset, Length: r.size})
	}
	return backing[start:len(backing):len(backing)], backing, nil
}

// putStartResults fills out (one entry per item of the call) from m: the
// j-th result answers item at(send, j).
func (m *resultsReply) putStartResults(out []PutStartResult, send []int) error {
	var backing []Replica
	for j := range m.results {
		x := &m.results[j]
		i := at(send, j)
		out[i].Err = x.err
		out[i].Token = x.token
		if x.hi > x.lo {
			if backing == nil {
				backing = make([]Replica, 0, len(m.replicas))
			}
			var err error
			if out[i].Replicas, backing, err = m.resolve(x, backing); err != nil {
				return err
			}
		}
	}
	return nil
}

// getResults fills out (one entry per key of the call) from m: the j-th
// result answers key at(send, j). sent is when the call was sent.
func (m *resultsReply) getResults(out []GetResult, send []int, sent time.Time) error {
	var backing []Replica
	for j := range m.results {
		x := &m.results[j]
		i := at(send, j)
		if out[i].Err = x.err; out[i].Err != nil {
			continue
		}
		if backing == nil {
			backing = make([]Replica, 0, len(m.replicas))
		}
		out[i].Size = x.size
		out[i].LeaseID = x.leaseID
		// The lease in this process's clock: the send time plus the lease's
		// length (never later than the master's own deadline, whatever the
		// clock skew). Older masters send only the absolute expiry.
		if x.ttl > 0 {
			out[i].LeaseTTL = time.Duration(x.ttl)
			out[i].LeaseExpiry = sent.Add(out[i].LeaseTTL)
		} else {
			out[i].LeaseExpiry = unixNS(x.lease)
		}
		var err error
		if out[i].Replicas, backing, err = m.resolve(x, backing); err != nil {
			return err
		}
	}
	return nil
}

// descCache interns the descriptors a remote Client receives: replicas of
// the same segment share one *segment.Descriptor, as with the embedded
// Client. A descriptor never changes for its (id, generation), and a
// server encodes it the same way each time, so the encoded bytes find it
// without decoding.
type descCache struct {
	mu struct {
		sync.RWMutex
		byWire map[string]*segment.Descriptor // encoded form → descriptor
		byKey  map[segment.Key]*segment.Descriptor
	}
}

// descCacheMax bounds the cache: it is cleared when it grows past this
// (segments are remounted with new generations over a long run).
const descCacheMax = 1 << 12

func (c *descCache) get(wire []byte) (*segment.Descriptor, error) {
	c.mu.RLock()
	d, ok := c.mu.byWire[string(wire)]
	c.mu.RUnlock()
	if ok {
		return d, nil
	}
	var p pb.SegmentDescriptor
	if err := proto.Unmarshal(wire, &p); err != nil {
		return nil, err
	}
	nd := descFromPB(&p)
	k := nd.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.byWire) >= descCacheMax || c.mu.byWire == nil {
		c.mu.byWire = map[string]*segment.Descriptor{}
		c.mu.byKey = map[segment.Key]*segment.Descriptor{}
	}
	if d, ok = c.mu.byKey[k]; !ok {
		d = &nd
		c.mu.byKey[k] = d
	}
	c.mu.byWire[string(wire)] = d
	return d, nil
}
