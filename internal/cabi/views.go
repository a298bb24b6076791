package cabi

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// viewsTable maps a Store handle's views handles to their Views (issue
// 15). It is safe for concurrent use.
type viewsTable struct {
	mu     sync.Mutex // guards m and closed
	m      map[int64]*client.Views
	closed bool // the Store's Close ran: no views are added any more
}

// nextViews numbers views handles across every Store of the process:
// positive and never reused, so a stale views handle can reach neither
// other views nor another Store's.
var nextViews atomic.Int64

// add registers v and returns its handle. After closeAll it releases v
// and fails with ErrClosed: an Acquire that raced with Close must not
// leave views that nothing can release.
func (t *viewsTable) add(v *client.Views) (int64, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		v.Release()
		return 0, fmt.Errorf("%w: acquire: the store was closed meanwhile", client.ErrClosed)
	}
	if t.m == nil {
		t.m = map[int64]*client.Views{}
	}
	id := nextViews.Add(1)
	t.m[id] = v
	t.mu.Unlock()
	return id, nil
}

func invalidViews(h, id int64) error {
	return fmt.Errorf("%w: views %d of store %d (released, closed with the store, or never acquired there)",
		errInvalidHandle, id, h)
}

// get returns the Views behind id.
func (t *viewsTable) get(h, id int64) (*client.Views, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[id]
	if !ok {
		return nil, invalidViews(h, id)
	}
	return v, nil
}

// take removes id and returns its Views.
func (t *viewsTable) take(h, id int64) (*client.Views, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[id]
	if !ok {
		return nil, invalidViews(h, id)
	}
	delete(t.m, id)
	return v, nil
}

// closeAll empties the table for good and releases what it held. The
// Store's Close has released them already (Views.Release is idempotent);
// this frees the handles.
func (t *viewsTable) closeAll() {
	t.mu.Lock()
	held := t.m
	t.m, t.closed = nil, true
	t.mu.Unlock()
	for _, v := range held {
		v.Release()
	}
}

// Acquire holds n keys in place (client.Store.Acquire) and stores a views
// handle in *views; per key, addrs receives the preferred replica's
// address in this process (0 for a key without a view), sizes the
// object's size and statuses the key's status (each may be NULL). Return
// value as for BatchPut; when the call ran, *views is a handle to release
// with ViewsRelease even if every key failed, else it is 0.
func Acquire(h int64, n uint64, keys, keyLens unsafe.Pointer, views *int64, addrs, sizes, statuses unsafe.Pointer) int32 {
	var ran bool
	st := call(h, func(e *entry) error {
		if views == nil {
			return fmt.Errorf("%w: acquire: views is NULL", client.ErrInvalidArgument)
		}
		*views = 0
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil {
			return err
		}
		v, err := e.store.Acquire(bg, b.keys)
		if err != nil {
			return err
		}
		objs := v.Objects()
		if len(objs) != len(b.keys) {
			v.Release()
			return fmt.Errorf("cabi: store returned %d views for %d keys", len(objs), len(b.keys))
		}
		id, err := e.views.add(v)
		if err != nil {
			return err
		}
		*views = id
		var a, s []uint64
		if addrs != nil && n > 0 {
			a = unsafe.Slice((*uint64)(addrs), n)
		}
		if sizes != nil && n > 0 {
			s = unsafe.Slice((*uint64)(sizes), n)
		}
		errs := make([]error, len(objs))
		for i, o := range objs {
			errs[i] = o.Err
			if a != nil {
				a[i] = 0
				if o.Err == nil {
					a[i] = uint64(o.Replicas[0].Addr)
				}
			}
			if s != nil {
				s[i] = o.Size
			}
		}
		ran = true
		return perKey(b.keys, errs, statuses)
	})
	if ran {
		return StatusOK
	}
	fill(statuses, n, st)
	return st
}

// ViewsCheck returns the status of the views' Err: StatusOK while every
// view is held, StatusLeaseExpired once one was lost (the last error says
// why), StatusInvalidHandle for views that are not held (released, or
// closed with the Store).
func ViewsCheck(h, views int64) int32 {
	return call(h, func(e *entry) error {
		v, err := e.views.get(h, views)
		if err != nil {
			return err
		}
		return v.Err()
	})
}

// ViewsRelease releases the views and frees their handle; every kernel
// that reads them must have completed. A second release of the handle is
// StatusInvalidHandle.
func ViewsRelease(h, views int64) int32 {
	return call(h, func(e *entry) error {
		v, err := e.views.take(h, views)
		if err != nil {
			return err
		}
		v.Release()
		return nil
	})
}

// maxRows bounds the host row indices of one gather.
const maxRows = maxBatch * 64

// decodeRows reads the row selection of a gather over n keys: host
// indices (hostCounts[i] of hostRows per key, consecutively) when devRows
// is 0, else device indices at devRows (perKey per key, elemBytes each,
// out-of-range rows counted at bad when it is not 0).
func decodeRows(n uint64, hostRows, hostCounts unsafe.Pointer, devRows uint64, perKey, elemBytes uint32, bad uint64) (client.Rows, error) {
	if devRows != 0 {
		if hostRows != nil || hostCounts != nil {
			return client.Rows{}, fmt.Errorf("%w: gather: host_rows/host_counts and dev_rows are both given (want one)", client.ErrInvalidArgument)
		}
		return client.Rows{Device: cuda.DevicePtr(devRows), PerKey: int(perKey), ElemBytes: int(elemBytes), BadRows: cuda.DevicePtr(bad)}, nil
	}
	if perKey != 0 || elemBytes != 0 || bad != 0 {
		return client.Rows{}, fmt.Errorf("%w: gather: per_key=%d, elem_bytes=%d, bad=%#x are for dev_rows, which is 0",
			client.ErrInvalidArgument, perKey, elemBytes, bad)
	}
	if n > maxBatch {
		return client.Rows{}, fmt.Errorf("%w: gather of %d keys (max %d)", client.ErrInvalidArgument, n, maxBatch)
	}
	host := make([][]uint64, n)
	if n == 0 {
		return client.Rows{Host: host}, nil
	}
	if hostCounts == nil {
		return client.Rows{}, fmt.Errorf("%w: gather: host_counts is NULL and dev_rows is 0 (give host or device row indices)", client.ErrInvalidArgument)
	}
	counts := unsafe.Slice((*uint64)(hostCounts), n)
	var total uint64
	for i, c := range counts {
		if c > maxRows || total+c > maxRows {
			return client.Rows{}, fmt.Errorf("%w: gather: host_counts[%d] = %d: more than %d rows in one gather", client.ErrInvalidArgument, i, c, uint64(maxRows))
		}
		total += c
	}
	if total == 0 {
		return client.Rows{Host: host}, nil
	}
	if hostRows == nil {
		return client.Rows{}, fmt.Errorf("%w: gather: host_rows is NULL with %d rows in host_counts", client.ErrInvalidArgument, total)
	}
	all := unsafe.Slice((*uint64)(hostRows), total)
	var off uint64
	for i, c := range counts {
		host[i] = all[off : off+c : off+c]
		off += c
	}
	return client.Rows{Host: host}, nil
}

// ViewsGather enqueues a gather of rows of the views' objects into
// [dst, dst+dstLen) on stream (client.Views.Gather) and returns once it is
// enqueued; rows as decodeRows reads them.
func ViewsGather(h, views int64, hostRows, hostCounts unsafe.Pointer, devRows uint64, perKey, elemBytes uint32, bad,
	rowBytes, dst, dstLen uint64, stream uintptr) int32 {
	return call(h, func(e *entry) error {
		v, err := e.views.get(h, views)
		if err != nil {
			return err
		}
		rows, err := decodeRows(uint64(len(v.Objects())), hostRows, hostCounts, devRows, perKey, elemBytes, bad)
		if err != nil {
			return err
		}
		return v.Gather(rows, rowBytes, client.Region{Ptr: uintptr(dst), Len: dstLen}, cuda.Stream(stream))
	})
}

// Gather copies rows of n keys' objects into [dst, dst+dstLen) under
// leases of its own and returns once the copy is complete
// (client.Store.Gather); rows as decodeRows reads them.
func Gather(h int64, n uint64, keys, keyLens, hostRows, hostCounts unsafe.Pointer, devRows uint64, perKey, elemBytes uint32,
	bad, rowBytes, dst, dstLen uint64, stream uintptr) int32 {
	return call(h, func(e *entry) error {
		b, err := decodeBatch(n, keys, keyLens, nil, nil, nil)
		if err != nil {
			return err
		}
		rows, err := decodeRows(n, hostRows, hostCounts, devRows, perKey, elemBytes, bad)
		if err != nil {
			return err
		}
		if b.keys == nil {
			b.keys = []string{}
		}
		return e.store.Gather(bg, b.keys, rows, rowBytes, client.Region{Ptr: uintptr(dst), Len: dstLen}, cuda.Stream(stream))
	})
}
