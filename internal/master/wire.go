package master

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

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

// wireOwner is a wireMessage whose decoded strings outlive the call: given
// a copy of the input that it may keep, it saves copying it again.
type wireOwner interface {
	// unmarshalOwned decodes all, which it may keep.
	unmarshalOwned(all string) error
}

// stringBytes returns the bytes of s, which must not be modified.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// The arrays of the requests the server decodes are pooled: the server
// frees a request once the Service has answered it (the Service keeps
// neither the arrays nor the strings in them). A pooled array holds the
// strings of the last message it carried until it is reused or the pool
// drops it at a GC.
var (
	keySlices  sync.Pool // *[]string
	reqSlices  sync.Pool // *[]PutStartReq
	refSlices  sync.Pool // *[]PutRef
	sizeSlices sync.Pool // *[]uint64
)

// pooled returns an empty slice from p, or one of capacity n.
func pooled[T any](p *sync.Pool, n int) []T {
	if v, ok := p.Get().(*[]T); ok {
		return (*v)[:0]
	}
	return make([]T, 0, n)
}

func unpool[T any](p *sync.Pool, s []T) {
	if cap(s) > 0 {
		s = s[:0]
		p.Put(&s)
	}
}

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
	if o, ok := m.(wireOwner); ok {
		// One copy, which the decoded strings share (data is freed after
		// this call). A Builder's memory is not zeroed before the copy.
		var all strings.Builder
		all.Grow(data.Len())
		for _, d := range data {
			all.Write(d.ReadOnlyData())
		}
		return o.unmarshalOwned(all.String())
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
	return appendStringChecked(b, num, s, false)
}

// appendStringChecked is appendString of a string the caller has checked
// to be valid UTF-8 when checked is set.
func appendStringChecked(b []byte, num protowire.Number, s string, checked bool) ([]byte, error) {
	if !checked && !utf8.ValidString(s) {
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
	switch {
	case v == 0:
		return b
	case v < 0x80:
		return append(b, tag(num, protowire.VarintType), byte(v))
	}
	return protowire.AppendVarint(append(b, tag(num, protowire.VarintType)), v)
}

func appendFixed64NZ(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(append(b, tag(num, protowire.Fixed64Type)), v)
}

// appendPackedFixed64 appends vs as a packed repeated fixed64 field
// (nothing when empty).
func appendPackedFixed64(b []byte, num protowire.Number, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	b = protowire.AppendVarint(append(b, tag(num, protowire.BytesType)), uint64(8*len(vs)))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
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

// next decodes the field at the start of b into f and returns the rest.
func (f *field) next(b []byte) ([]byte, error) {
	// Fast path: a one-byte tag (field numbers 1 to 15) with a one-byte
	// varint or length, or a fixed64: nearly every field of the hot calls.
	if len(b) >= 2 && b[0] < 0x80 && b[0] >= 8 {
		num := protowire.Number(b[0] >> 3)
		switch typ := protowire.Type(b[0] & 7); typ {
		case protowire.VarintType:
			if b[1] < 0x80 {
				f.num, f.typ, f.v = num, typ, uint64(b[1])
				return b[2:], nil
			}
			if v, n := protowire.ConsumeVarint(b[1:]); n > 0 {
				f.num, f.typ, f.v = num, typ, v
				return b[1+n:], nil
			}
		case protowire.BytesType:
			if n := int(b[1]); n < 0x80 && 2+n <= len(b) {
				f.num, f.typ, f.p = num, typ, b[2:2+n]
				return b[2+n:], nil
			}
		case protowire.Fixed64Type:
			if len(b) >= 9 {
				f.num, f.typ, f.v = num, typ, binary.LittleEndian.Uint64(b[1:9])
				return b[9:], nil
			}
		}
	}
	return f.nextSlow(b)
}

func (f *field) nextSlow(b []byte) ([]byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return nil, protowire.ParseError(n)
	}
	// ConsumeTag accepts any field number >= 1; proto.Unmarshal rejects
	// numbers past the protobuf maximum as invalid wire data, and so do we
	// (found by FuzzWireDecode; the input is kept in testdata).
	if !num.IsValid() {
		return nil, fmt.Errorf("proto: invalid field number %d", num)
	}
	b = b[n:]
	*f = field{num: num, typ: typ}
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
		return nil, protowire.ParseError(n)
	}
	return b[n:], nil
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

// putStartRequest is pb.PutStartRequest as []PutStartReq and, when uni is
// set, a UniformPuts (its uniform field): the client encodes it, the
// server decodes it.
type putStartRequest struct {
	reqs []PutStartReq
	// uni: the request's uniform puts (pb.UniformPutStart), answered after
	// reqs. Encoding sends u when uni is set; decoding sets uni when the
	// field is present, u.Req being the decoded item (NoPlacement when it
	// carries none, as for an item).
	uni bool
	u   UniformPuts
	// columns: the caller reads PutStartColumns.
	columns bool
	// checked: the strings are known to be valid UTF-8 (the remote Client
	// checked them), so encoding does not check them again.
	checked bool
}

func (m *putStartRequest) wireSize() int {
	n := 0
	for i := range m.reqs {
		n += itemWireSize(&m.reqs[i])
	}
	if m.uni {
		n += 6 + itemWireSize(&m.u.Req) + 6 + 11*len(m.u.Sizes)
		for _, k := range m.u.Keys {
			n += 3 + len(k)
		}
	}
	return n
}

// itemWireSize bounds the encoded size of q as a PutStartItem.
func itemWireSize(q *PutStartReq) int {
	n := 3 + len(q.Key) + 11 + 11 + 2 + 2 + 3 + 11 + 2 + 6 + len(q.Placement.Client) + len(q.Placement.Node) + 22
	for _, s := range q.Placement.Segments {
		n += 3 + len(s)
	}
	return n
}

// samePlacement reports whether a and b encode the same (segment lists
// are compared by identity first: a batch's items usually share one).
func samePlacement(a, b *Placement) bool {
	if a.Tier != b.Tier || a.TierOnly != b.TierOnly || a.Client != b.Client || a.Node != b.Node ||
		a.NUMANode != b.NUMANode || a.Device != b.Device || len(a.Segments) != len(b.Segments) {
		return false
	}
	if len(a.Segments) == 0 || unsafe.SliceData(a.Segments) == unsafe.SliceData(b.Segments) {
		return true
	}
	for i := range a.Segments {
		if a.Segments[i] != b.Segments[i] {
			return false
		}
	}
	return true
}

func (m *putStartRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	// b[pl0:pl1] is the encoded placement of the item before, which the
	// items of a batch usually share: it is copied rather than encoded
	// again.
	pl0, pl1 := 0, 0
	for i := range m.reqs {
		q := &m.reqs[i]
		item := beginMsg(&b, 1)
		var pl []byte
		if i > 0 && samePlacement(&m.reqs[i-1].Placement, &q.Placement) {
			pl = b[pl0:pl1]
		}
		if b, pl0, pl1, err = appendItemFields(b, q, pl, m.checked); err != nil {
			return b, err
		}
		n := len(b)
		b = endMsg(b, item)
		// A long item moves right to make room for its length.
		pl0 += len(b) - n
		pl1 += len(b) - n
	}
	if m.uni {
		if b, err = m.appendUniform(b); err != nil {
			return b, err
		}
	}
	return appendBool(b, 3, m.columns), nil
}

// appendItemFields appends q's fields as a PutStartItem's, its placement
// copied from pl when pl is not nil, and returns where the placement's
// encoding is in b.
func appendItemFields(b []byte, q *PutStartReq, pl []byte, checked bool) (_ []byte, pl0, pl1 int, err error) {
	if q.Key != "" {
		if b, err = appendStringChecked(b, 1, q.Key, checked); err != nil {
			return b, 0, 0, err
		}
	}
	b = appendVarintNZ(b, 2, q.Size)
	b = appendVarintNZ(b, 3, int32Wire(int32(max(math.MinInt32, min(q.Replicas, math.MaxInt32)))))
	b = appendBool(b, 4, q.Pin)
	// Always sent: an absent placement means NoPlacement, an empty one
	// NUMA node 0 and device 0.
	pl0 = len(b)
	if pl != nil {
		b = append(b, pl...)
	} else if b, err = appendPlacement(b, &q.Placement, checked); err != nil {
		return b, 0, 0, err
	}
	pl1 = len(b)
	b = appendBool(b, 6, q.SoftPin)
	b = appendVarintNZ(b, 7, uint64(int64(q.SoftPinTTL)))
	b = appendBool(b, 8, q.Upsert)
	b = appendBool(b, 9, q.KeepSoftPin)
	return b, pl0, pl1, nil
}

// appendUniform appends m.u as field 2 (pb.UniformPutStart): the item
// once, then every key and the sizes packed. Its length is counted
// before the keys are written, so the large body is never shifted.
func (m *putStartRequest) appendUniform(b []byte) ([]byte, error) {
	tmpl := m.u.Req
	tmpl.Key, tmpl.Size = "", 0
	item, _, _, err := appendItemFields(make([]byte, 0, itemWireSize(&tmpl)), &tmpl, nil, m.checked)
	if err != nil {
		return b, err
	}
	keys, sizes := 0, 0
	for _, k := range m.u.Keys {
		keys += 1 + protowire.SizeBytes(len(k))
	}
	for _, v := range m.u.Sizes {
		sizes += protowire.SizeVarint(v)
	}
	n := 1 + protowire.SizeBytes(len(item)) + keys
	if len(m.u.Sizes) > 0 {
		n += 1 + protowire.SizeBytes(sizes)
	}
	b = protowire.AppendVarint(append(b, tag(2, protowire.BytesType)), uint64(n))
	b = protowire.AppendBytes(append(b, tag(1, protowire.BytesType)), item)
	for _, k := range m.u.Keys {
		// A repeated string is sent even when empty.
		if b, err = appendStringChecked(b, 2, k, m.checked); err != nil {
			return b, err
		}
	}
	if len(m.u.Sizes) > 0 {
		b = protowire.AppendVarint(append(b, tag(3, protowire.BytesType)), uint64(sizes))
		for _, v := range m.u.Sizes {
			b = protowire.AppendVarint(b, v)
		}
	}
	return b, nil
}

// appendPlacement appends p as field 5 of a PutStartItem.
func appendPlacement(b []byte, p *Placement, checked bool) ([]byte, error) {
	var err error
	pl := beginMsg(&b, 5)
	b = appendVarintNZ(b, 1, uint64(p.Tier))
	b = appendBool(b, 2, p.TierOnly)
	if p.Client != "" {
		if b, err = appendStringChecked(b, 3, p.Client, checked); err != nil {
			return b, err
		}
	}
	if p.Node != "" {
		if b, err = appendStringChecked(b, 4, p.Node, checked); err != nil {
			return b, err
		}
	}
	b = appendVarintNZ(b, 5, int32Wire(p.NUMANode))
	b = appendVarintNZ(b, 6, int32Wire(p.Device))
	for _, s := range p.Segments {
		if b, err = appendStringChecked(b, 7, s, checked); err != nil {
			return b, err
		}
	}
	return endMsg(b, pl), nil
}

func (m *putStartRequest) unmarshalWire(b []byte) error { return m.decode(b, string(b)) }

// unmarshalOwned: the Service copies keys into its arena, so the keys can
// share the one copy of the message.
func (m *putStartRequest) unmarshalOwned(all string) error { return m.decode(stringBytes(all), all) }

func (m *putStartRequest) free() {
	unpool(&reqSlices, m.reqs)
	unpool(&keySlices, m.u.Keys)
	unpool(&sizeSlices, m.u.Sizes)
	m.reqs, m.u = nil, UniformPuts{}
}

// decode decodes b, whose bytes all holds: keys are substrings of all.
func (m *putStartRequest) decode(b []byte, all string) error {
	base := b
	m.reqs = pooled[PutStartReq](&reqSlices, len(b)/64)
	// Items of a batch usually carry the same placement: decode it once.
	var lastPl []byte
	var last Placement
	uniPl := false // the uniform item's placement was decoded (a repeated item merges)
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			q := PutStartReq{Placement: NoPlacement}
			seenPl := false
			if err := decodeItem(&q, f.p, all, base, &lastPl, &last, &seenPl); err != nil {
				return err
			}
			m.reqs = append(m.reqs, q)
		case f.is(2, protowire.BytesType):
			// A repeated uniform field merges: each part is decoded (and
			// must be valid) on its own, its keys and sizes appended and
			// its item merged into the one before.
			if !m.uni {
				m.uni = true
				m.u = UniformPuts{Keys: pooled[string](&keySlices, len(f.p)/16), Sizes: pooled[uint64](&sizeSlices, len(f.p)/16),
					Req: PutStartReq{Placement: NoPlacement}}
			}
			if err := m.decodeUniform(f.p, all, base, &lastPl, &last, &uniPl); err != nil {
				return err
			}
		case f.is(3, protowire.VarintType):
			m.columns = f.v != 0
		}
	}
	return nil
}

// decodeUniform decodes b, one part of the uniform field (its bytes are in
// all, which starts at base), into m.u.
func (m *putStartRequest) decodeUniform(b []byte, all string, base []byte, lastPl *[]byte, last *Placement, seenPl *bool) error {
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			if err := decodeItem(&m.u.Req, f.p, all, base, lastPl, last, seenPl); err != nil {
				return err
			}
		case f.is(2, protowire.BytesType):
			k, err := f.sub(all, base)
			if err != nil {
				return err
			}
			m.u.Keys = append(m.u.Keys, k)
		case f.is(3, protowire.VarintType):
			m.u.Sizes = append(m.u.Sizes, f.v)
		case f.is(3, protowire.BytesType): // packed
			for p := f.p; len(p) > 0; {
				v, n := protowire.ConsumeVarint(p)
				if n < 0 {
					return protowire.ParseError(n)
				}
				m.u.Sizes, p = append(m.u.Sizes, v), p[n:]
			}
		}
	}
	return nil
}

// decodeItem merges the encoded PutStartItem b, whose bytes are in all
// (starting at base), into q. *lastPl and *last are the placement decoded
// last and its encoding: an equal encoding is not decoded again. *seenPl
// says whether q's placement was decoded (by an earlier part of the same
// item): a first one replaces q's default, a later one merges into it.
func decodeItem(q *PutStartReq, b []byte, all string, base []byte, lastPl *[]byte, last *Placement, seenPl *bool) error {
	for len(b) > 0 {
		var g field
		rest, err := g.next(b)
		if err != nil {
			return err
		}
		b = rest
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
			if !*seenPl && *lastPl != nil && bytes.Equal(g.p, *lastPl) {
				q.Placement = *last
			} else {
				if !*seenPl {
					q.Placement = Placement{}
				}
				if err := decodePlacement(&q.Placement, g.p); err != nil {
					return err
				}
				if !*seenPl {
					// Clipped: a merge into a shared copy must not append in place.
					*lastPl, *last = g.p, q.Placement
					last.Segments = last.Segments[:len(last.Segments):len(last.Segments)]
					q.Placement.Segments = last.Segments
				}
			}
			*seenPl = true
		}
	}
	return nil
}

// decodePlacement merges the encoded placement b into p.
func decodePlacement(p *Placement, b []byte) error {
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
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
	res     []PutStartResult
	columns bool // answer as PutStartColumns (the request asked)
	tab     descTable
	scan    bool // tab filled
	cols    colAnswer
}

// colAnswer is a response's columns, encoded by whichever of wireSize and
// appendWire comes first (columns.go).
type colAnswer struct {
	enc *colEncoder
	err error
}

// encode encodes the columns once, with f.
func (a *colAnswer) encode(f func() (*colEncoder, error)) {
	if a.enc == nil && a.err == nil {
		a.enc, a.err = f()
	}
}

// appendTo appends the columns as field num and frees them.
func (a *colAnswer) appendTo(b []byte, num protowire.Number) ([]byte, error) {
	if a.err != nil {
		return b, a.err
	}
	b = a.enc.appendTo(b, num)
	a.enc.free()
	a.enc, a.err = nil, errWireDir // encoded once
	return b, nil
}

func (a *colAnswer) wireSize() int {
	if a.enc == nil {
		return 0
	}
	return a.enc.wireSize()
}

func (m *putStartResponse) encodeColumns() {
	m.fill()
	m.cols.encode(func() (*colEncoder, error) { return putColumns(&m.tab, m.res) })
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
	if m.columns {
		m.encodeColumns()
		return m.tab.wireSize() + m.cols.wireSize()
	}
	n := m.tab.wireSize()
	for i := range m.res {
		n += 3 + 9 + 6 + 40*len(m.res[i].Replicas)
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
	if m.columns {
		m.encodeColumns()
		return m.cols.appendTo(b, 3)
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
		b = appendVarintNZ(b, 4, uint64(x.Hint))
		b = endMsg(b, r)
	}
	return b, nil
}

func (*putStartResponse) unmarshalWire([]byte) error { return errWireDir }

// getResponse is pb.GetReplicasResponse from the Service's results (the
// server encodes it).
type getResponse struct {
	res      []GetResult
	released bool // leases_released
	columns  bool // answer as GetColumns (the request asked)
	tab      descTable
	scan     bool
	cols     colAnswer
}

func (m *getResponse) encodeColumns() {
	m.fill()
	m.cols.encode(func() (*colEncoder, error) { return getColumns(&m.tab, m.res) })
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
	if m.columns {
		m.encodeColumns()
		return m.tab.wireSize() + 2 + m.cols.wireSize()
	}
	n := m.tab.wireSize() + 2
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
	if m.columns {
		m.encodeColumns()
		if b, err = m.cols.appendTo(b, 4); err != nil {
			return b, err
		}
		return appendBool(b, 3, m.released), nil
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
	return appendBool(b, 3, m.released), nil
}

func (*getResponse) unmarshalWire([]byte) error { return errWireDir }

// ---- PutEnd, PutRevoke ----

// putRefsRequest is pb.PutEndRequest and pb.PutRevokeRequest. Decoded keys
// share one string per message: the Service does not keep them.
type putRefsRequest struct {
	puts []PutRef
	// checked: the keys are known to be valid UTF-8.
	checked bool
}

func (m *putRefsRequest) wireSize() int {
	n := 0
	for _, p := range m.puts {
		n += 2 + 3 + len(p.Key) + 9 + 6
	}
	return n
}

func (m *putRefsRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, p := range m.puts {
		r := beginMsg(&b, 1)
		if p.Key != "" {
			if b, err = appendStringChecked(b, 1, p.Key, m.checked); err != nil {
				return b, err
			}
		}
		b = appendFixed64NZ(b, 2, p.Token)
		b = appendVarintNZ(b, 3, uint64(p.Hint))
		b = endMsg(b, r)
	}
	return b, nil
}

func (m *putRefsRequest) unmarshalWire(b []byte) error    { return m.decode(b, string(b)) }
func (m *putRefsRequest) unmarshalOwned(all string) error { return m.decode(stringBytes(all), all) }

func (m *putRefsRequest) free() {
	unpool(&refSlices, m.puts)
	m.puts = nil
}

// decode decodes b, whose bytes all holds: keys are substrings of all.
func (m *putRefsRequest) decode(b []byte, all string) error {
	base := b
	m.puts = pooled[PutRef](&refSlices, len(b)/32)
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		if !f.is(1, protowire.BytesType) {
			continue
		}
		var p PutRef
		for it := f.p; len(it) > 0; {
			var g field
			rest, err := g.next(it)
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
			case g.is(3, protowire.VarintType):
				p.Hint = uint32(g.v)
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
		var f field
		rest, err := f.next(b)
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

// wellFormed reports whether b parses as a sequence of fields (their
// values are not interpreted).
func wellFormed(b []byte) error {
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// decodeItemError decodes an ItemError into the error fromItemError
// returns: nil for success (code 0).
func decodeItemError(b []byte) (error, error) {
	var code uint64
	var reason, msg []byte
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
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
	keys    []string
	reader  string   // client_id
	release []uint64 // release_lease_ids (ReleaseCarry)
	columns bool     // the caller reads GetColumns
	// checked: the keys are known to be valid UTF-8 (the remote Client
	// checked them), so encoding does not check them again.
	checked bool
}

func (m *keysRequest) wireSize() int {
	n := 3 + len(m.reader) + 6 + 8*len(m.release)
	for _, k := range m.keys {
		n += 3 + len(k)
	}
	return n
}

func (m *keysRequest) appendWire(b []byte) ([]byte, error) {
	var err error
	for _, k := range m.keys {
		if b, err = appendStringChecked(b, 1, k, m.checked); err != nil {
			return b, err
		}
	}
	if b, err = appendStringNZ(b, 2, m.reader); err != nil {
		return b, err
	}
	b = appendPackedFixed64(b, 3, m.release)
	return appendBool(b, 4, m.columns), nil
}

func (m *keysRequest) unmarshalWire(b []byte) error    { return m.decode(b, string(b)) }
func (m *keysRequest) unmarshalOwned(all string) error { return m.decode(stringBytes(all), all) }

func (m *keysRequest) free() {
	unpool(&keySlices, m.keys)
	m.keys = nil
}

// decode decodes b, whose bytes all holds: keys are substrings of all.
func (m *keysRequest) decode(b []byte, all string) error {
	base := b
	m.keys = pooled[string](&keySlices, len(b)/32)
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
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
		case f.is(3, protowire.Fixed64Type):
			m.release = append(m.release, f.v)
		case f.is(3, protowire.BytesType): // packed
			if len(f.p)%8 != 0 {
				return fmt.Errorf("packed release_lease_ids of %d bytes, not a multiple of 8", len(f.p))
			}
			for p := f.p; len(p) > 0; p = p[8:] {
				m.release = append(m.release, binary.LittleEndian.Uint64(p))
			}
		case f.is(4, protowire.VarintType):
			m.columns = f.v != 0
		}
	}
	return nil
}

// ---- client side of PutStart and GetReplicas responses ----

// resultsReply is pb.PutStartResponse (get false) or pb.GetReplicasResponse
// (get true) as the client reads it: straight into the Client's results,
// appended to puts or gets (give them the capacity of the items sent),
// with descriptors interned in descs.
type resultsReply struct {
	get   bool
	descs *descCache
	// sent is when the call was sent: a lease ends at sent plus its TTL
	// in this process's clock.
	sent time.Time
	puts []PutStartResult
	gets []GetResult
	// malformed is set when a replica names a descriptor the response
	// does not hold (decoding itself succeeds, as proto.Unmarshal would).
	malformed error
	// released is GetReplicasResponse.leases_released.
	released bool
	// columns: the results came by column (the response's columns field).
	columns bool

	segs    []*segment.Descriptor
	backing []Replica     // the results' replicas, in order
	late    []lateReplica // replicas read before the descriptor they name
	ttl     int64         // the last lease TTL read, and sent plus it
	expiry  time.Time
}

// lateReplica is replica rep of result res, whose descriptor seg had not
// been read yet (a peer may send the table after the results).
type lateReplica struct {
	res, rep int
	seg      uint32
}

func (*resultsReply) wireSize() int                       { return 0 }
func (*resultsReply) appendWire(b []byte) ([]byte, error) { return b, errWireDir }

// results reports how many results were read.
func (m *resultsReply) results() int {
	if m.get {
		return len(m.gets)
	}
	return len(m.puts)
}

func (m *resultsReply) unmarshalWire(b []byte) error {
	if n := max(cap(m.gets), cap(m.puts)); cap(m.backing) == 0 && n > 0 {
		m.backing = make([]Replica, 0, n) // one replica per item is usual
	}
	var cols *columns // the response's columns field, merged
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
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
		case m.get && f.is(3, protowire.VarintType):
			m.released = f.v != 0
		case m.get && f.is(4, protowire.BytesType), !m.get && f.is(3, protowire.BytesType):
			if cols == nil {
				cols = newColumns(!m.get)
				defer cols.free()
			}
			if err := cols.decode(f.p); err != nil {
				return err
			}
		}
	}
	if cols != nil {
		m.fromColumns(cols)
		return nil
	}
	for _, l := range m.late {
		if int(l.seg) >= len(m.segs) {
			if m.malformed == nil {
				m.malformed = fmt.Errorf("master: malformed response: replica names segment %d of %d", l.seg, len(m.segs))
			}
			continue
		}
		if m.get {
			m.gets[l.res].Replicas[l.rep].Segment = m.segs[l.seg]
		} else {
			m.puts[l.res].Replicas[l.rep].Segment = m.segs[l.seg]
		}
	}
	return nil
}

// result decodes one PutStartResult or GetResult and appends it.
func (m *resultsReply) result(b []byte) error {
	var (
		errMsg                []byte
		token, size, leaseID  uint64
		leaseExpiry, leaseTTL int64
		hint                  uint32
	)
	res, start, late := m.results(), len(m.backing), len(m.late)
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.is(1, protowire.BytesType):
			// A repeated message field merges: decode the concatenation
			// of its parts, each of which proto.Unmarshal parses on its
			// own, so each must be well formed on its own.
			if err := wellFormed(f.p); err != nil {
				return err
			}
			errMsg = append(errMsg[:len(errMsg):len(errMsg)], f.p...)
		case !m.get && f.is(2, protowire.Fixed64Type):
			token = f.v
		case m.get && f.is(2, protowire.VarintType):
			size = f.v
		case f.is(3, protowire.BytesType):
			var r Replica
			var seg uint32
			for p := f.p; len(p) > 0; {
				var g field
				rest, err := g.next(p)
				if err != nil {
					return err
				}
				p = rest
				switch {
				case g.is(1, protowire.VarintType):
					seg = uint32(g.v)
				case g.is(2, protowire.VarintType):
					r.Offset = g.v
				case g.is(3, protowire.VarintType):
					r.Length = g.v
				}
			}
			if int(seg) < len(m.segs) {
				r.Segment = m.segs[seg]
			} else {
				m.late = append(m.late, lateReplica{res: res, rep: len(m.backing) - start, seg: seg})
			}
			m.backing = append(m.backing, r)
		case !m.get && f.is(4, protowire.VarintType):
			hint = uint32(f.v)
		case m.get && f.is(4, protowire.VarintType):
			leaseExpiry = int64(f.v)
		case m.get && f.is(5, protowire.VarintType):
			leaseTTL = int64(f.v)
		case m.get && f.is(6, protowire.Fixed64Type):
			leaseID = f.v
		}
	}
	var itemErr error
	if errMsg != nil {
		var err error
		if itemErr, err = decodeItemError(errMsg); err != nil {
			return err
		}
	}
	var reps []Replica
	if len(m.backing) > start {
		reps = m.backing[start:len(m.backing):len(m.backing)]
	}
	if !m.get {
		m.puts = append(m.puts, PutStartResult{Err: itemErr, Token: token, Replicas: reps, Hint: hint})
		return nil
	}
	if itemErr != nil {
		m.backing, m.late = m.backing[:start], m.late[:late]
		m.gets = append(m.gets, GetResult{Err: itemErr})
		return nil
	}
	m.gets = append(m.gets, GetResult{})
	g := &m.gets[len(m.gets)-1]
	g.Size, g.Replicas, g.LeaseID = size, reps, leaseID
	// The lease in this process's clock: the send time plus the lease's
	// length (never later than the master's own deadline, whatever the
	// clock skew). Older masters send only the absolute expiry.
	if leaseTTL > 0 {
		if leaseTTL != m.ttl {
			m.ttl, m.expiry = leaseTTL, m.sent.Add(time.Duration(leaseTTL))
		}
		g.LeaseTTL, g.LeaseExpiry = time.Duration(leaseTTL), m.expiry
	} else {
		g.LeaseExpiry = unixNS(leaseExpiry)
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
