package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// View is one object of a Views: where its bytes are in this process's
// device address space. Any kernel on the Store's GPU may read them
// (DRAM-tier replicas at link speed on every access); nobody may write
// them.
type View struct {
	Key  string
	Size uint64
	// Replicas are the object's replicas this process can read, the
	// preferred one first (the one Gather reads).
	Replicas []ViewReplica
	// Err is why this key has no view (ErrNotFound, ErrTransfer, ...);
	// the other fields are then empty.
	Err error
}

// ViewReplica is one replica of a View.
type ViewReplica struct {
	Addr    cuda.DevicePtr // the object's first byte, in this process
	Segment string
	Node    string
	Tier    segment.Tier
}

// Views are objects held in place: Store.Acquire returns them under read
// leases that the Store renews (one HoldLeases call for all views of the
// Store, every third of the lease TTL) until Release. While they are held,
// no object of theirs is evicted, removed by a plain Remove, or has its
// range reused (a forced Remove hides the key but keeps the bytes until
// Release), and the master shows them as held views.
//
// A view can be lost: when its provider's segment drains or is reported
// unreachable, the master stops renewing it (so that the segment can
// drain), and when the master cannot be reached for a whole lease TTL
// the lease lapses. Err reports it, by this process's clock, no later
// than the master may reuse the range. The mapping stays in place until
// Release; after a lapse the range may hold another object, exactly as
// for a get whose copy outlives its lease. So the caller checks Err after
// its reads, as Get does for its copies, before trusting what it read.
//
// Release must come after every kernel that reads the views has
// completed: it unmaps what nothing else in this process holds.
type Views struct {
	s    *Store
	objs []View
	// ids are the lease ids the views hold, one per key with a view.
	ids   []uint64
	cache *segCache // mapping references, released by Release

	mu struct {
		sync.Mutex
		expiry   time.Time // the leases' end unless renewed (timeNow's clock)
		lost     error     // the first renewal failure, wrapping ErrLeaseExpired
		released bool
		// objs is the gather object table for rows of objsRowBytes bytes
		// (objTable): built once, read-only after.
		objs         []transfer.GatherObj
		objsRowBytes uint64
	}
}

// Objects returns the views, positionally for the keys given to Acquire.
// The slice belongs to the Views; callers must not modify it.
func (v *Views) Objects() []View { return v.objs }

// ErrViewsReleased is returned by the methods of Views after Release.
var ErrViewsReleased = errors.New("client: views released")

// Err is nil while every view's lease is held. It is ErrLeaseExpired
// (wrapped, saying why) once a lease was not renewed or ran out, and
// ErrViewsReleased after Release.
func (v *Views) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.mu.released:
		return ErrViewsReleased
	case v.mu.lost != nil:
		return v.mu.lost
	case len(v.ids) > 0 && timeNow().After(v.mu.expiry):
		return fmt.Errorf("%w: views: not renewed since their leases ended %v ago (master unreachable?)",
			ErrLeaseExpired, timeNow().Sub(v.mu.expiry))
	}
	return nil
}

// Acquire holds keys in place: their replicas' addresses in this process,
// under read leases the Store renews until Release. Results are
// positional (Views.Objects); a key that cannot be held has View.Err set
// and the others are held. The error is for failures of the whole call;
// it then holds nothing.
//
// With a remote master it costs two round trips (GetReplicas, then
// HoldLeases registering the leases as views), against one for a get:
// views are for objects read many times, in place.
func (s *Store) Acquire(ctx context.Context, keys []string) (_ *Views, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	v, err := s.lease(ctx, keys)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			v.drop(ctx, false)
		}
	}()
	if len(v.ids) == 0 {
		return v, nil // nothing held: nothing to register or renew
	}
	sent := timeNow()
	res, err := s.m.HoldLeases(ctx, master.HoldReq{Client: s.clientID, Hold: v.ids})
	if err != nil {
		return nil, mapErr(fmt.Errorf("hold %d views: %w", len(v.ids), err))
	}
	// Keys whose hold failed (their lease ended meanwhile) lose their view;
	// the ones that succeeded are now views the master counts.
	var lost []uint64
	held := v.ids[:0:0]
	j := 0
	for i := range v.objs {
		o := &v.objs[i]
		if o.Err != nil {
			continue
		}
		id := v.ids[j]
		if herr := res.Errs[j]; herr != nil {
			o.Err = fmt.Errorf("%w: view of %q: %w", ErrLeaseExpired, o.Key, herr)
			o.Replicas, o.Size = nil, 0
			lost = append(lost, id)
		} else {
			held = append(held, id)
		}
		j++
	}
	v.ids = held
	s.releaseIDs(ctx, lost)
	v.mu.expiry = sent.Add(res.TTL)
	if err := s.keeper.add(s, v, res.TTL); err != nil {
		return nil, err
	}
	return v, nil
}

// lease gets keys' replicas under plain read leases and resolves their
// addresses (importing segments as needed); the caller owns the result
// (drop releases it). Keys that fail have View.Err set.
func (s *Store) lease(ctx context.Context, keys []string) (*Views, error) {
	v := &Views{s: s, objs: make([]View, len(keys)), cache: newSegCache()}
	q := make([]string, 0, len(keys))
	idx := make([]int, 0, len(keys))
	for i, k := range keys {
		v.objs[i].Key = k
		sk, err := s.storedKey(k)
		if err != nil {
			v.objs[i].Err = err
			continue
		}
		q = append(q, sk)
		idx = append(idx, i)
	}
	v.mu.expiry = timeNow().Add(time.Hour) // replaced below by the leases' expiry
	first := true
	chunk := s.pipeChunk()
	for lo := 0; lo < len(q); lo += chunk {
		hi := min(lo+chunk, len(q))
		res, err := s.lookup(master.WithReader(ctx, s.clientID), q[lo:hi])
		if err != nil {
			v.drop(ctx, false)
			return nil, mapErr(fmt.Errorf("get replicas: %w", err))
		}
		for j, r := range res {
			o := &v.objs[idx[lo+j]]
			if r.Err != nil {
				o.Err = mapErr(fmt.Errorf("view of %q: %w", o.Key, r.Err))
				continue
			}
			if r.LeaseID != 0 {
				if first || r.LeaseExpiry.Before(v.mu.expiry) {
					v.mu.expiry, first = r.LeaseExpiry, false
				}
			}
			reps := slices.Clone(r.Replicas)
			if len(reps) > 1 { // the preferred replica first
				best := s.pickReplica(reps)
				slices.SortStableFunc(reps, func(a, b master.Replica) int {
					switch {
					case a == best:
						return -1
					case b == best:
						return 1
					}
					return 0
				})
			}
			var rerr error
			for _, rep := range reps {
				addr, err := s.resolve(ctx, rep, r.Size, v.cache)
				if err != nil {
					rerr = err
					continue
				}
				o.Replicas = append(o.Replicas, ViewReplica{Addr: addr, Segment: rep.Segment.ID, Node: rep.Segment.Node, Tier: rep.Segment.Tier})
			}
			if len(o.Replicas) == 0 {
				if rerr == nil {
					rerr = fmt.Errorf("%w: no replica", ErrNotFound)
				}
				o.Err = fmt.Errorf("view of %q: %w", o.Key, rerr)
				if r.LeaseID != 0 {
					s.releaseIDs(ctx, []uint64{r.LeaseID})
				}
				continue
			}
			o.Size = r.Size
			v.ids = append(v.ids, r.LeaseID)
		}
	}
	return v, nil
}

// drop ends v's leases — as views when asViews, else as plain read leases
// — and releases its mappings. The caller ensures nothing reads them.
func (v *Views) drop(ctx context.Context, asViews bool) {
	s := v.s
	if len(v.ids) > 0 {
		if asViews {
			if _, err := s.m.HoldLeases(context.WithoutCancel(ctx), master.HoldReq{Client: s.clientID, Release: v.ids}); err != nil {
				s.log.Debug("kvfabric view release failed; the leases end at their TTL", "views", len(v.ids), "err", err)
			}
		} else {
			s.releaseIDs(ctx, v.ids)
		}
	}
	v.cache.release()
	v.cache = nil
}

// Release ends the views: their leases end at the master and their
// mappings are released. Every kernel reading them must have completed.
// Release is idempotent; after it, Err is ErrViewsReleased.
func (v *Views) Release() {
	v.mu.Lock()
	if v.mu.released {
		v.mu.Unlock()
		return
	}
	v.mu.released = true
	v.mu.Unlock()
	v.s.keeper.remove(v)
	v.drop(context.Background(), true)
}

// viewKeeper renews the leases of a Store's held Views: one HoldLeases call
// for all of them every third of the lease TTL.
//
// Ownership: the first Acquire starts the goroutine; the Store's teardown
// stops it (stop) and releases the views still held. After stop, add
// fails with ErrClosed.
type viewKeeper struct {
	mu struct {
		sync.Mutex
		held    map[*Views]struct{}
		period  time.Duration
		running bool
		stopped bool
	}
	quit chan struct{}
	done chan struct{}
}

// add starts keeping v's leases (and the goroutine, on first use).
func (k *viewKeeper) add(s *Store, v *Views, ttl time.Duration) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mu.stopped {
		return ErrClosed
	}
	if k.mu.held == nil {
		k.mu.held = map[*Views]struct{}{}
	}
	k.mu.held[v] = struct{}{}
	k.mu.period = max(ttl/3, time.Millisecond)
	if !k.mu.running {
		k.mu.running = true
		k.quit, k.done = make(chan struct{}), make(chan struct{})
		go k.run(s)
	}
	return nil
}

func (k *viewKeeper) remove(v *Views) {
	k.mu.Lock()
	delete(k.mu.held, v)
	k.mu.Unlock()
}

func (k *viewKeeper) run(s *Store) {
	defer close(k.done)
	for {
		k.mu.Lock()
		period := k.mu.period
		k.mu.Unlock()
		t := time.NewTimer(period)
		select {
		case <-k.quit:
			t.Stop()
			return
		case <-t.C:
		}
		k.renew(s)
	}
}

// renew renews every held view's lease in one call.
func (k *viewKeeper) renew(s *Store) {
	k.mu.Lock()
	views := make([]*Views, 0, len(k.mu.held))
	for v := range k.mu.held {
		views = append(views, v)
	}
	k.mu.Unlock()
	var ids []uint64
	seen := map[uint64]bool{}
	for _, v := range views {
		for _, id := range v.ids {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	sent := timeNow()
	res, err := s.m.HoldLeases(context.Background(), master.HoldReq{Client: s.clientID, Renew: ids})
	if err != nil {
		// Retried at the next period; the views report the lapse (Err)
		// once their leases have ended.
		s.log.Warn("kvfabric could not renew view leases", "views", len(views), "leases", len(ids), "err", err)
		return
	}
	failed := map[uint64]error{}
	for i, e := range res.Errs {
		if e != nil {
			failed[ids[i]] = e
		}
	}
	expiry := sent.Add(res.TTL)
	for _, v := range views {
		v.mu.Lock()
		for _, id := range v.ids {
			if e, ok := failed[id]; ok && v.mu.lost == nil {
				v.mu.lost = fmt.Errorf("%w: view lease %d not renewed: %w", ErrLeaseExpired, id, e)
			}
		}
		if v.mu.lost == nil {
			v.mu.expiry = expiry
		}
		v.mu.Unlock()
	}
	if len(failed) > 0 {
		s.log.Warn("kvfabric view leases lost", "leases", len(failed))
	}
}

// stop ends the goroutine and returns the views still held (teardown
// releases them). Idempotent.
func (k *viewKeeper) stop() []*Views {
	k.mu.Lock()
	k.mu.stopped = true
	running := k.mu.running
	k.mu.running = false
	held := make([]*Views, 0, len(k.mu.held))
	for v := range k.mu.held {
		held = append(held, v)
	}
	k.mu.Unlock()
	if running {
		close(k.quit)
		<-k.done
	}
	return held
}
