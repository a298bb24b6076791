package master

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// GetReplicas answers by column (pb.GetColumns) when the request asks for
// it: each column is one packed field of deltas, so a batch of similar
// results — a Store's batch, whose objects lie one after another in one
// segment, leased in one block — costs about a byte per value and no field
// tag or length per item, where pb.GetResult costs ~50 bytes and a
// decoder's pass over six fields per key. The generated handler (a server
// with interceptors) and masters that predate the field answer with
// results, so a client reads either.

// Field numbers of pb.GetColumns.
const (
	colSize = iota + 1
	colReplicas
	colLeaseID
	colExpiry
	colTTL
	colSegment
	colOffset
	colLength
	colErrors
	nColumns = colLength // the packed ones
)

// columnBufs are one response's columns while they are encoded, before
// their lengths are known; pooled.
type columnBufs [colErrors + 1][]byte // [0] unused; [colErrors] the errors

var columnBufPool sync.Pool // *columnBufs

// appendDelta appends v as the zigzag delta from *prev and makes it *prev.
func appendDelta(b []byte, prev *uint64, v uint64) []byte {
	d := int64(v - *prev)
	*prev = v
	return protowire.AppendVarint(b, protowire.EncodeZigZag(d))
}

// unzig is the delta a zigzag varint v encodes, as a uint64 to add.
func unzig(v uint64) uint64 { return uint64(protowire.DecodeZigZag(v)) }

// columnsWireSize bounds the encoding of res as GetColumns, its field tag
// and length included.
func columnsWireSize(res []GetResult) int {
	n := 12 + 9*4
	for i := range res {
		n += 5 * 10
		if res[i].Err != nil {
			n += 128 + 16
		}
		n += 3 * 10 * len(res[i].Replicas)
	}
	return n
}

// appendGetColumns appends res as field num (pb.GetColumns), numbering
// the replicas' segments in t.
func appendGetColumns(b []byte, num protowire.Number, t *descTable, res []GetResult) ([]byte, error) {
	c, _ := columnBufPool.Get().(*columnBufs)
	if c == nil {
		c = new(columnBufs)
	}
	defer func() {
		for i := range c {
			c[i] = c[i][:0]
		}
		columnBufPool.Put(c)
	}()
	var size, id, expiry, ttl, off, length uint64
	var err error
	for i := range res {
		x := &res[i]
		if x.Err != nil {
			c[colSize] = appendDelta(c[colSize], &size, 0)
			c[colReplicas] = protowire.AppendVarint(c[colReplicas], 0)
			c[colLeaseID] = appendDelta(c[colLeaseID], &id, 0)
			c[colExpiry] = appendDelta(c[colExpiry], &expiry, 0)
			c[colTTL] = appendDelta(c[colTTL], &ttl, 0)
			m := beginMsg(&c[colErrors], colErrors)
			c[colErrors] = appendVarintNZ(c[colErrors], 1, uint64(i))
			if c[colErrors], err = appendItemError(c[colErrors], 2, x.Err); err != nil {
				return b, err
			}
			c[colErrors] = endMsg(c[colErrors], m)
			continue
		}
		c[colSize] = appendDelta(c[colSize], &size, x.Size)
		c[colReplicas] = protowire.AppendVarint(c[colReplicas], uint64(len(x.Replicas)))
		c[colLeaseID] = appendDelta(c[colLeaseID], &id, x.LeaseID)
		c[colExpiry] = appendDelta(c[colExpiry], &expiry, uint64(x.LeaseExpiry.UnixNano()))
		c[colTTL] = appendDelta(c[colTTL], &ttl, uint64(max(0, x.LeaseTTL)))
		for _, r := range x.Replicas {
			c[colSegment] = protowire.AppendVarint(c[colSegment], uint64(t.add(r.Segment)))
			end := off
			c[colOffset] = appendDelta(c[colOffset], &end, r.Offset)
			c[colLength] = appendDelta(c[colLength], &length, r.Length)
			off = r.Offset + r.Length
		}
	}
	body := len(c[colErrors])
	for f := colSize; f <= nColumns; f++ {
		if n := len(c[f]); n > 0 {
			body += 1 + protowire.SizeVarint(uint64(n)) + n
		}
	}
	b = append(b, tag(num, protowire.BytesType))
	b = protowire.AppendVarint(b, uint64(body))
	for f := colSize; f <= nColumns; f++ {
		if len(c[f]) > 0 {
			b = append(b, tag(protowire.Number(f), protowire.BytesType))
			b = protowire.AppendBytes(b, c[f])
		}
	}
	return append(b, c[colErrors]...), nil
}

// getColumns is a decoded pb.GetColumns before it becomes results: the
// packed columns' values (packed or not on the wire, in order of
// appearance), and the errors by index. Pooled.
type getColumns struct {
	v    [nColumns + 1][]uint64 // [0] unused
	errs []indexedError
}

type indexedError struct {
	index uint64
	err   error // nil: code OK
}

var getColumnsPool sync.Pool // *getColumns

// decode merges the encoded GetColumns b into c (b need not outlive it).
func (c *getColumns) decode(b []byte) error {
	for len(b) > 0 {
		var f field
		rest, err := f.next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num >= colSize && f.num <= nColumns && f.typ == protowire.VarintType:
			c.v[f.num] = append(c.v[f.num], f.v)
		case f.num >= colSize && f.num <= nColumns && f.typ == protowire.BytesType:
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

func (c *getColumns) free() {
	for i := range c.v {
		c.v[i] = c.v[i][:0]
	}
	c.errs = c.errs[:0]
	getColumnsPool.Put(c)
}

// getsFromColumns appends the results c holds to m.gets. A response whose
// columns disagree (lengths, counts, indices) or name a segment it does
// not hold is malformed: m.malformed says why and no result is appended.
func (m *resultsReply) getsFromColumns(c *getColumns) error {
	malformed := func(format string, args ...any) error {
		m.malformed = fmt.Errorf("master: malformed response: columns: "+format, args...)
		return nil
	}
	if len(m.gets) > 0 {
		return malformed("sent beside %d results", len(m.gets))
	}
	n := len(c.v[colSize])
	for f := colReplicas; f <= colTTL; f++ {
		if len(c.v[f]) != n {
			return malformed("column %d has %d entries for %d results", f, len(c.v[f]), n)
		}
	}
	reps := 0
	for _, k := range c.v[colReplicas] {
		reps += int(uint32(k)) // at most 2^32 · n: no overflow
	}
	for f := colSegment; f <= colLength; f++ {
		if len(c.v[f]) != reps {
			return malformed("column %d has %d entries for %d replicas", f, len(c.v[f]), reps)
		}
	}
	for j, e := range c.errs {
		switch {
		case e.index >= uint64(n):
			return malformed("error of result %d of %d", e.index, n)
		case j > 0 && e.index <= c.errs[j-1].index:
			return malformed("errors out of order (%d after %d)", e.index, c.errs[j-1].index)
		case c.v[colReplicas][e.index] != 0:
			return malformed("failed result %d has replicas", e.index)
		case e.err == nil:
			return malformed("error of result %d has code OK", e.index)
		}
	}
	for _, s := range c.v[colSegment] {
		if uint64(uint32(s)) >= uint64(len(m.segs)) {
			return malformed("replica names segment %d of %d", s, len(m.segs))
		}
	}
	if cap(m.backing)-len(m.backing) < reps {
		m.backing = make([]Replica, 0, reps)
	}
	var size, id, expiry, ttl, off, length uint64
	r, next := 0, 0
	base := len(m.gets)
	m.gets = slices.Grow(m.gets, n)[:base+n]
	for i := range n {
		size += unzig(c.v[colSize][i])
		id += unzig(c.v[colLeaseID][i])
		expiry += unzig(c.v[colExpiry][i])
		ttl += unzig(c.v[colTTL][i])
		k := int(uint32(c.v[colReplicas][i]))
		g := &m.gets[base+i] // every field is set: the slice may hold old results
		if next < len(c.errs) && c.errs[next].index == uint64(i) {
			*g = GetResult{Err: c.errs[next].err}
			next++
			continue
		}
		start := len(m.backing)
		for range k {
			off += unzig(c.v[colOffset][r])
			length += unzig(c.v[colLength][r])
			m.backing = append(m.backing, Replica{Segment: m.segs[uint32(c.v[colSegment][r])], Offset: off, Length: length})
			off += length
			r++
		}
		g.Err, g.Size, g.LeaseID, g.Replicas = nil, size, id, nil
		if k > 0 {
			g.Replicas = m.backing[start:len(m.backing):len(m.backing)]
		}
		if lt := int64(ttl); lt > 0 {
			if lt != m.ttl {
				m.ttl, m.expiry = lt, m.sent.Add(time.Duration(lt))
			}
			g.LeaseTTL, g.LeaseExpiry = time.Duration(lt), m.expiry
		} else {
			g.LeaseTTL, g.LeaseExpiry = 0, unixNS(int64(expiry))
		}
	}
	return nil
}
