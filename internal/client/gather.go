package client

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// Rows selects the rows a gather copies from each object (an object of n
// bytes has n / rowBytes rows; trailing bytes are not addressable). Give
// exactly one of Host and Device.
type Rows struct {
	// Host lists each object's row indices (positionally for the keys;
	// lists may differ in length). Every index is checked before anything
	// is enqueued.
	Host [][]uint64
	// Device holds PerKey indices per object in device memory, row-major
	// [keys][PerKey], ElemBytes (4: int32, 8: int64) each — as a GPU
	// top-k writes them, read by the kernel in stream order. An index out
	// of range (negative ones included) zero-fills its output row and adds
	// 1 to the uint32 at BadRows when BadRows is not 0.
	Device    cuda.DevicePtr
	PerKey    int
	ElemBytes int
	BadRows   cuda.DevicePtr
}

// count is the number of output rows; it validates the shape against n
// objects.
func (r *Rows) count(n int) (uint64, error) {
	switch {
	case r.Host != nil && r.Device != 0:
		return 0, fmt.Errorf("%w: gather: rows: both Host and Device given", ErrInvalidArgument)
	case r.Host != nil:
		if len(r.Host) != n {
			return 0, fmt.Errorf("%w: gather: rows.Host has %d lists for %d keys", ErrInvalidArgument, len(r.Host), n)
		}
		var total uint64
		for _, h := range r.Host {
			total += uint64(len(h))
		}
		return total, nil
	case r.Device != 0:
		if r.PerKey <= 0 {
			return 0, fmt.Errorf("%w: gather: rows.PerKey %d must be positive", ErrInvalidArgument, r.PerKey)
		}
		if r.ElemBytes != 4 && r.ElemBytes != 8 {
			return 0, fmt.Errorf("%w: gather: rows.ElemBytes %d must be 4 (int32) or 8 (int64)", ErrInvalidArgument, r.ElemBytes)
		}
		return uint64(n) * uint64(r.PerKey), nil
	}
	return 0, fmt.Errorf("%w: gather: rows: neither Host nor Device given", ErrInvalidArgument)
}

// plan builds the engine's gather of rows (rowBytes each) of v's objects
// into dst, checking every argument; ok is false when there is nothing to
// copy.
func (v *Views) plan(rows Rows, rowBytes uint64, dst Region) (g transfer.Gather, ok bool, err error) {
	if rowBytes == 0 {
		return g, false, fmt.Errorf("%w: gather: row bytes is 0", ErrInvalidArgument)
	}
	n, err := rows.count(len(v.objs))
	if err != nil {
		return g, false, err
	}
	hi, need := bits.Mul64(n, rowBytes)
	if hi != 0 {
		return g, false, fmt.Errorf("%w: gather: %d rows of %d bytes overflow", ErrInvalidArgument, n, rowBytes)
	}
	if dst.Ptr == 0 {
		return g, false, fmt.Errorf("%w: gather: destination is a null pointer", ErrInvalidArgument)
	}
	if dst.Len < need {
		return g, false, fmt.Errorf("%w: gather: %d rows of %d bytes need %d bytes, destination has %d", ErrBufferTooSmall, n, rowBytes, need, dst.Len)
	}
	for _, o := range v.objs {
		if o.Err != nil {
			return g, false, fmt.Errorf("gather: key %q: %w", o.Key, o.Err)
		}
	}
	if n == 0 {
		return g, false, nil
	}
	g = transfer.Gather{RowBytes: rowBytes, Dst: cuda.DevicePtr(dst.Ptr)}
	if rows.Device != 0 {
		g.Device, g.IdxBytes, g.PerObj, g.Bad = rows.Device, rows.ElemBytes, rows.PerKey, rows.BadRows
		g.Objs = v.objTable(rowBytes)
		return g, true, nil
	}
	// Host indices: checked here, naming the key and the position, in the
	// same pass that flattens them.
	uniform := true
	for _, h := range rows.Host {
		uniform = uniform && len(h) == len(rows.Host[0])
	}
	g.Host = make([]uint64, n)
	next := 0
	for i, h := range rows.Host {
		lim := v.objs[i].Size / rowBytes
		for j, r := range h {
			if r >= lim {
				return g, false, fmt.Errorf("%w: gather: rows.Host[%d][%d] = %d: key %q has %d rows of %d bytes",
					ErrInvalidArgument, i, j, r, v.objs[i].Key, lim, rowBytes)
			}
			g.Host[next] = r
			next++
		}
	}
	if uniform {
		// One table entry per object, PerObj rows each.
		g.PerObj = len(rows.Host[0])
		g.Objs = v.objTable(rowBytes)
		return g, true, nil
	}
	// Ragged: one table entry per output row.
	g.PerObj = 1
	g.Objs = make([]transfer.GatherObj, 0, n)
	for i, h := range rows.Host {
		o := transfer.GatherObj{Base: v.objs[i].Replicas[0].Addr, Rows: v.objs[i].Size / rowBytes}
		for range h {
			g.Objs = append(g.Objs, o)
		}
	}
	return g, true, nil
}

// Gather copies the selected rows of the views' objects into dst, output
// rows in key order (all rows of the first key, then the second's, ...),
// with one SM-kernel launch (or one per descriptor slot's worth of
// objects) enqueued on stream after the work already on it. It returns
// once enqueued: the caller synchronizes stream before reading dst, and
// then checks Err — a lease lost before the kernel finished means dst may
// hold bytes of a segment that was draining (never another object's;
// see Views). dst must be device memory (or page-locked/registered host
// memory) of at least rows × rowBytes bytes, not overlapping the objects.
// Bad input fails with ErrInvalidArgument (or ErrBufferTooSmall), naming
// the argument, before anything is enqueued.
func (v *Views) Gather(rows Rows, rowBytes uint64, dst Region, stream cuda.Stream) error {
	if err := v.Err(); err != nil {
		return err
	}
	s := v.s
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	g, ok, err := v.plan(rows, rowBytes, dst)
	if err != nil || !ok {
		return err
	}
	errs := []error{nil}
	held := s.checkBuffers([]string{"gather destination"}, [][]Region{{dst}}, errs)
	// The caller owns dst for the asynchronous copy, as for any
	// stream-ordered call: the registration is held only while enqueueing.
	defer s.release(held)
	if errs[0] != nil {
		return errs[0]
	}
	if err := s.xfer.Gather(stream, g); err != nil {
		return fmt.Errorf("%w: gather of %d objects: %w", ErrTransfer, len(v.objs), err)
	}
	return nil
}

// Gather copies the selected rows of keys' objects into dst (see
// Views.Gather for rows, order and dst) under read leases of its own, and
// returns once the copy is complete: a one-shot Acquire, Gather, Release.
// The kernel is enqueued on stream after the work already on it. A key
// that is missing fails the call (ErrNotFound) before anything is copied;
// ErrLeaseExpired means a lease ended before the kernel finished.
func (s *Store) Gather(ctx context.Context, keys []string, rows Rows, rowBytes uint64, dst Region, stream cuda.Stream) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if _, err := rows.count(len(keys)); err != nil {
		return err
	}
	v, err := s.lease(ctx, keys)
	if err != nil {
		return err
	}
	// Last: the leases end once nothing reads the objects.
	defer v.drop(ctx, false)
	g, ok, err := v.plan(rows, rowBytes, dst)
	if err != nil || !ok {
		return err
	}
	errs := []error{nil}
	held := s.checkBuffers([]string{"gather destination"}, [][]Region{{dst}}, errs)
	defer s.release(held)
	if errs[0] != nil {
		return errs[0]
	}
	h, err := s.xfer.GatherAsync(stream, g)
	if err != nil {
		s.drain(stream) // part of it may be enqueued
		return fmt.Errorf("%w: gather of %d objects: %w", ErrTransfer, len(keys), err)
	}
	if err := h.Wait(); err != nil {
		return fmt.Errorf("%w: gather of %d objects: %w", ErrTransfer, len(keys), err)
	}
	v.mu.Lock()
	expiry := v.mu.expiry
	v.mu.Unlock()
	if now := timeNow(); now.After(expiry) {
		return fmt.Errorf("%w: gather: a lease ended %v before the copy finished", ErrLeaseExpired, now.Sub(expiry))
	}
	return nil
}

// objTable is the gather's object table for rows of rowBytes bytes (the
// preferred replica of every view), built on the first gather with that
// row size and reused: a step's gathers allocate no table. The engine
// only reads it. Every view must be present (plan checks).
func (v *Views) objTable(rowBytes uint64) []transfer.GatherObj {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mu.objs == nil || v.mu.objsRowBytes != rowBytes {
		objs := make([]transfer.GatherObj, len(v.objs))
		for i, o := range v.objs {
			objs[i] = transfer.GatherObj{Base: o.Replicas[0].Addr, Rows: o.Size / rowBytes}
		}
		v.mu.objs, v.mu.objsRowBytes = objs, rowBytes
	}
	return v.mu.objs
}
