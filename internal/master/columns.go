package master

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// GetReplicas and PutStart answer by column (pb.GetColumns,
// pb.PutStartColumns) when the request asks for it: each column is one
// packed field, of deltas where values follow one another, so a batch of
// similar results — a Store's batch, whose objects lie one after another
// in one segment, leased in one block — costs a byte or so per value and
// no field tag or length per item (a pb.GetResult costs ~45 bytes and a
// decoder's pass over six fields). The generated handlers (a server with
// interceptors) and masters that predate the fields answer with results,
// so a client reads either.

// Field numbers of pb.GetColumns and pb.PutStartColumns: the replicas'
// columns and the errors have the same numbers in both.
const (
	colSize    = 1 // gets: sint64 deltas
	colToken   = 1 // puts: fixed64
	colCount   = 2 // replicas per result
	colLeaseID = 3 // gets
	colHint    = 3 // puts
	colExpiry  = 4 // gets
	colTTL     = 5 // gets
	colSegment = 6
	colOffset  = 7
	colLength  = 8
	colErrors  = 9
	nPacked    = colLength // fields 1..nPacked are packed columns
)

// colEncoder collects one answer's columns before their lengths are
// known. Pooled (colEncoders).
type colEncoder struct {
	c        [colErrors + 1][]byte // [0] unused; [colErrors] the errors
	off, len uint64                // the last replica's end and length
}

var colEncoders sync.Pool // *colEncoder

// newColEncoder returns an encoder with room for n results of one
// replica each: a byte per value, eight per fixed64 (the tokens); a
// column grows only where deltas are large.
func newColEncoder(n int, fixed1 bool) *colEncoder {
	e, ok := colEncoders.Get().(*colEncoder)
	if !ok {
		e = new(colEncoder)
	}
	for f := 1; f <= nPacked; f++ {
		k := n
		switch {
		case fixed1 && f == colToken:
			k = 8 * n
		case fixed1 && (f == colExpiry || f == colTTL):
			continue // reserved in PutStartColumns
		}
		e.c[f] = slices.Grow(e.c[f], k)
	}
	return e
}

func (e *colEncoder) free() {
	for i := range e.c {
		e.c[i] = e.c[i][:0]
	}
	e.off, e.len = 0, 0
	colEncoders.Put(e)
}

// delta appends v to column f as the zigzag delta from *prev, and makes
// it *prev.
func (e *colEncoder) delta(f int, prev *uint64, v uint64) {
	d := protowire.EncodeZigZag(int64(v - *prev))
	*prev = v
	if d < 0x80 {
		e.c[f] = append(e.c[f], byte(d))
		return
	}
	e.c[f] = protowire.AppendVarint(e.c[f], d)
}

// replicas appends rs: their count, and each one's segment (numbered in
// t), offset (from the last replica's end) and length (from the last's).
func (e *colEncoder) replicas(t *descTable, rs []Replica) {
	e.c[colCount] = protowire.AppendVarint(e.c[colCount], uint64(len(rs)))
	for _, r := range rs {
		e.c[colSegment] = protowire.AppendVarint(e.c[colSegment], uint64(t.add(r.Segment)))
		end := e.off
		e.delta(colOffset, &end, r.Offset)
		e.delta(colLength, &e.len, r.Length)
		e.off = r.Offset + r.Length
	}
}

// fail appends result i's error (pb.IndexedError).
func (e *colEncoder) fail(i int, err error) error {
	m := beginMsg(&e.c[colErrors], colErrors)
	e.c[colErrors] = appendVarintNZ(e.c[colErrors], 1, uint64(i))
	var werr error
	if e.c[colErrors], werr = appendItemError(e.c[colErrors], 2, err); werr != nil {
		return werr
	}
	e.c[colErrors] = endMsg(e.c[colErrors], m)
	return nil
}

// body is the size of the columns' message.
func (e *colEncoder) body() int {
	n := len(e.c[colErrors])
	for f := 1; f <= nPacked; f++ {
		if k := len(e.c[f]); k > 0 {
			n += 1 + protowire.SizeVarint(uint64(k)) + k
		}
	}
	return n
}

// wireSize is the size of the columns as a message field (numbers below
// 16).
func (e *colEncoder) wireSize() int {
	n := e.body()
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// appendTo appends the columns as message field num.
func (e *colEncoder) appendTo(b []byte, num protowire.Number) []byte {
	body := e.body()
	b = append(b, tag(num, protowire.BytesType))
	b = protowire.AppendVarint(b, uint64(body))
	for f := 1; f <= nPacked; f++ {
		if len(e.c[f]) > 0 {
			b = append(b, tag(protowire.Number(f), protowire.BytesType))
			b = protowire.AppendBytes(b, e.c[f])
		}
	}
	return append(b, e.c[colErrors]...)
}

// An answer by column is encoded before its size is asked (wireSize),
// so the size is exact: a loose bound put a 448-512-key PutStart answer
// in gRPC's 1 MiB buffer class, which took 17-37 % more time per key
// than by result (docs/decisions.md, 31).

// getColumns encodes res as pb.GetColumns, numbering the replicas'
// segments in t. A failed result's entries are 0, and it has no replica.
// The caller frees the encoder.
func getColumns(t *descTable, res []GetResult) (*colEncoder, error) {
	e := newColEncoder(len(res), false)
	var size, id, expiry, ttl uint64
	for i := range res {
		x := &res[i]
		if x.Err != nil {
			e.delta(colSize, &size, 0)
			e.delta(colLeaseID, &id, 0)
			e.delta(colExpiry, &expiry, 0)
			e.delta(colTTL, &ttl, 0)
			e.replicas(t, nil)
			if err := e.fail(i, x.Err); err != nil {
				e.free()
				return nil, err
			}
			continue
		}
		e.delta(colSize, &size, x.Size)
		e.delta(colLeaseID, &id, x.LeaseID)
		e.delta(colExpiry, &expiry, uint64(x.LeaseExpiry.UnixNano()))
		e.delta(colTTL, &ttl, uint64(max(0, x.LeaseTTL)))
		e.replicas(t, x.Replicas)
	}
	return e, nil
}

// putColumns encodes res as pb.PutStartColumns, numbering the replicas'
// segments in t. A failed result keeps its other fields, as
// pb.PutStartResult does. The caller frees the encoder.
func putColumns(t *descTable, res []PutStartResult) (*colEncoder, error) {
	e := newColEncoder(len(res), true)
	var hint uint64
	for i := range res {
		x := &res[i]
		e.c[colToken] = binary.LittleEndian.AppendUint64(e.c[colToken], x.Token)
		e.delta(colHint, &hint, uint64(x.Hint))
		e.replicas(t, x.Replicas)
		if x.Err != nil {
			if err := e.fail(i, x.Err); err != nil {
				e.free()
				return nil, err
			}
		}
	}
	return e, nil
}

// columns is a decoded pb.GetColumns or pb.PutStartColumns before it
// becomes results: each column's values (packed or not on the wire, in
// order of appearance), and the errors by index. Pooled (colDecoders).
type columns struct {
	v    [nPacked + 1][]uint64 // [0] unused
	errs []indexedError
	// fixed1: field 1 is fixed64 (PutStartColumns.tokens), not a varint.
	fixed1 bool
}

type indexedError struct {
	index uint64
	err   error // nil: code OK
}

var colDecoders sync.Pool // *columns

func newColumns(fixed1 bool) *columns {
	c, ok := colDecoders.Get().(*columns)
	if !ok {
		c = new(columns)
	}
	c.fixed1 = fixed1
	return c
}

func (c *columns) free() {
	for i := range c.v {
		c.v[i] = c.v[i][:0]
	}
	c.errs = c.errs[:0]
	colDecoders.Put(c)
}

// decode merges the encoded columns b into c (b need not outlive it).
func (c *columns) decode(b []byte) error {
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		packed := f.num >= 1 && f.num <= nPacked
		if c.fixed1 && (f.num == colExpiry || f.num == colTTL) {
			packed = false // reserved in PutStartColumns: unknown, skipped unread
		}
		fixed := packed && f.num == 1 && c.fixed1
		switch {
		case fixed && f.typ == protowire.Fixed64Type, packed && !fixed && f.typ == protowire.VarintType:
			c.v[f.num] = append(c.v[f.num], f.v)
		case fixed && f.typ == protowire.BytesType:
			if len(f.p)%8 != 0 {
				return fmt.Errorf("packed fixed64 field %d of %d bytes, not a multiple of 8", f.num, len(f.p))
			}
			for p := f.p; len(p) > 0; p = p[8:] {
				c.v[1] = append(c.v[1], binary.LittleEndian.Uint64(p))
			}
		case packed && f.typ == protowire.BytesType:
			vs := slices.Grow(c.v[f.num], len(f.p)) // at least a byte per value
			for p := f.p; len(p) > 0; {
				if p[0] < 0x80 { // most deltas of a batch
					vs = append(vs, uint64(p[0]))
					p = p[1:]
					continue
				}
				v, n := protowire.ConsumeVarint(p)
				if n < 0 {
					return protowire.ParseError(n)
				}
				vs = append(vs, v)
				p = p[n:]
			}
			c.v[f.num] = vs
		case f.is(colErrors, protowire.BytesType):
			var e indexedError
			var msg []byte // the ItemError, its parts merged
			for p := f.p; len(p) > 0; {
				var g field
				rest, err := g.next(p)
				if err != nil {
					return err
				}
				p = rest
				switch {
				case g.is(1, protowire.VarintType):
					e.index = uint64(uint32(g.v))
				case g.is(2, protowire.BytesType):
					if err := wellFormed(g.p); err != nil {
						return err
					}
					msg = append(msg[:len(msg):len(msg)], g.p...)
				}
			}
			if e.err, err = decodeItemError(msg); err != nil {
				return err
			}
			c.errs = append(c.errs, e)
		}
	}
	return nil
}

// The per-result columns of each answer, the replica counts among them.
var (
	getPerResult = []int{colSize, colCount, colLeaseID, colExpiry, colTTL}
	putPerResult = []int{colToken, colCount, colHint}
)

// check returns why c is not n results with perResult columns (one entry
// per result in each), or "" when it is; reps is the number of replicas.
// A failed result must have no replica when bare.
func (c *columns) check(perResult []int, nsegs int, bare bool) (n, reps int, why string) {
	n = len(c.v[perResult[0]])
	for _, f := range perResult[1:] {
		if len(c.v[f]) != n {
			return 0, 0, fmt.Sprintf("column %d has %d entries for %d results", f, len(c.v[f]), n)
		}
	}
	for _, k := range c.v[colCount] {
		reps += int(uint32(k)) // at most 2^32 · n: no overflow
	}
	for f := colSegment; f <= colLength; f++ {
		if len(c.v[f]) != reps {
			return 0, 0, fmt.Sprintf("column %d has %d entries for %d replicas", f, len(c.v[f]), reps)
		}
	}
	for j, e := range c.errs {
		switch {
		case e.index >= uint64(n):
			return 0, 0, fmt.Sprintf("error of result %d of %d", e.index, n)
		case j > 0 && e.index <= c.errs[j-1].index:
			return 0, 0, fmt.Sprintf("errors out of order (%d after %d)", e.index, c.errs[j-1].index)
		case bare && c.v[colCount][e.index] != 0:
			return 0, 0, fmt.Sprintf("failed result %d has replicas", e.index)
		case e.err == nil:
			return 0, 0, fmt.Sprintf("error of result %d has code OK", e.index)
		}
	}
	for _, s := range c.v[colSegment] {
		if uint64(uint32(s)) >= uint64(nsegs) {
			return 0, 0, fmt.Sprintf("replica names segment %d of %d", uint32(s), nsegs)
		}
	}
	return n, reps, ""
}

// unzig is the delta a zigzag varint v encodes, as a uint64 to add.
func unzig(v uint64) uint64 { return uint64(protowire.DecodeZigZag(v)) }

// colReader walks the replica columns of checked columns.
type colReader struct {
	c        *columns
	r        int    // the next replica
	off, len uint64 // the last replica's end and length
}

// replicas appends result i's replicas to m.backing and returns them
// (nil when none).
func (d *colReader) replicas(m *resultsReply, i int) []Replica {
	k := int(uint32(d.c.v[colCount][i]))
	if k == 0 {
		return nil
	}
	start := len(m.backing)
	for range k {
		d.off += unzig(d.c.v[colOffset][d.r])
		d.len += unzig(d.c.v[colLength][d.r])
		m.backing = append(m.backing, Replica{Segment: m.segs[uint32(d.c.v[colSegment][d.r])], Offset: d.off, Length: d.len})
		d.off += d.len
		d.r++
	}
	return m.backing[start:len(m.backing):len(m.backing)]
}

// fromColumns appends the results c holds to m.gets or m.puts. A response
// whose columns disagree (lengths, counts, indices) or name a segment it
// does not hold is malformed: m.malformed says why and no result is
// appended.
func (m *resultsReply) fromColumns(c *columns) {
	m.columns = true
	perResult := putPerResult
	if m.get {
		perResult = getPerResult
	}
	n, reps, why := c.check(perResult, len(m.segs), m.get)
	if got := m.results(); why == "" && got > 0 {
		why = fmt.Sprintf("sent beside %d results", got)
	}
	if why != "" {
		m.malformed = fmt.Errorf("master: malformed response: columns: %s", why)
		return
	}
	if cap(m.backing)-len(m.backing) < reps {
		m.backing = make([]Replica, 0, reps)
	}
	d := colReader{c: c}
	next := 0 // the next failed result
	failed := func(i int) error {
		if next < len(c.errs) && c.errs[next].index == uint64(i) {
			next++
			return c.errs[next-1].err
		}
		return nil
	}
	// Each result is written in place, every field set: the slices may
	// hold old results past their length.
	if !m.get {
		m.puts = slices.Grow(m.puts, n)[:n]
		var hint uint64
		for i := range n {
			hint += unzig(c.v[colHint][i])
			m.puts[i] = PutStartResult{Err: failed(i), Token: c.v[colToken][i], Hint: uint32(hint), Replicas: d.replicas(m, i)}
		}
		return
	}
	m.gets = slices.Grow(m.gets, n)[:n]
	var size, id, expiry, ttl uint64
	for i := range n {
		size += unzig(c.v[colSize][i])
		id += unzig(c.v[colLeaseID][i])
		expiry += unzig(c.v[colExpiry][i])
		ttl += unzig(c.v[colTTL][i])
		g := &m.gets[i]
		if err := failed(i); err != nil {
			*g = GetResult{Err: err}
			continue
		}
		g.Err, g.Size, g.LeaseID, g.Replicas = nil, size, id, d.replicas(m, i)
		if lt := int64(ttl); lt > 0 {
			if lt != m.ttl {
				m.ttl, m.expiry = lt, m.sent.Add(time.Duration(lt))
			}
			g.LeaseTTL, g.LeaseExpiry = time.Duration(lt), m.expiry
		} else {
			g.LeaseTTL, g.LeaseExpiry = 0, unixNS(int64(expiry))
		}
	}
}
