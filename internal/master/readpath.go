package master

import (
	"context"
	"sync"
	"sync/atomic"
)

// The read path: GetReplicas and ReleaseLeases run under the Service's lock
// shared (Service.mu.RLock), so the gets and lease releases of many callers
// — the chunks of a large batch spread over cores, several engines — run
// in parallel. Everything else takes the lock exclusively, as before.
//
// What a shared holder may change, and how:
//
//   - the lease fields of a visible object or zombie (object.stamp,
//     leaseUntil, leaseID, aux and the flagLeaseQueued bit): only with the
//     object's stripe (readPath.stripe) held. An exclusive holder changes
//     them without it: it excludes every shared holder;
//   - the lease table (lease period id → slot): through leaseSlot,
//     setLease and dropLease, which hold the id's shard around the one map
//     operation;
//   - the lease wheel (Service.mu.leaseQ): always through queueLeaseLocked,
//     which takes readPath.wheel;
//   - counters: atomics (readPath.nextLease, readPath.getBytes).
//
// A shared holder holds at most one stripe at a time (heldStripe), and
// while it does takes only the innermost locks — a shard, the wheel —
// which are held around one map or slice operation and never while
// taking another lock: the read path cannot deadlock, and no call waits
// for more than one such operation of another.
//
// Nothing else: no object changes state, no allocator block, index entry,
// segment or client changes. A shared holder that must free an object (a
// zombie whose last lease it released) collects it and frees it after
// taking the lock exclusively (ReleaseLeases).
type readPath struct {
	stripes   [nStripes]paddedMutex
	leases    [nLeaseShards]leaseShard
	wheel     sync.Mutex    // guards Service.mu.leaseQ for shared holders
	nextLease atomic.Uint64 // lease period ids are nextLease<<leaseShardBits | shard
	calls     atomic.Uint64 // picks each GetReplicas call's lease shard
	getBytes  atomic.Uint64 // bytes of objects leased to readers (flowCounters)
	sink      atomic.Uint64 // takes the loads of the batch finders' prefetches (once per call)
}

const (
	nStripes = 256
	// stripeSpan consecutive slots share a stripe: a batch's objects,
	// mostly consecutive slots, then take few stripes, and concurrent
	// batches rarely the same ones — a stripe's line stays on one core.
	stripeSpan     = 64
	leaseShardBits = 6
	nLeaseShards   = 1 << leaseShardBits
)

// paddedMutex is a mutex on a cache line of its own: the stripes of
// objects read on different cores do not share lines.
type paddedMutex struct {
	sync.Mutex
	_ [64 - 8]byte
}

// leaseShard is one shard of the lease table.
type leaseShard struct {
	mu sync.Mutex
	m  map[uint64]uint32 // lease period id → slot, while it has unreleased leases
	_  [64 - 16]byte
}

func (r *readPath) init() {
	for i := range r.leases {
		r.leases[i].m = map[uint64]uint32{}
	}
}

// stripe returns the mutex that guards slot's lease fields for shared
// holders of the Service's lock.
func (r *readPath) stripe(slot uint32) *sync.Mutex {
	return &r.stripes[slot/stripeSpan%nStripes].Mutex
}

// shard returns the lease table's shard of period id: its low bits, which
// name the shard of the GetReplicas call that began the period (see
// leaseGrant) — a call's inserts, and the release of its leases, stay in
// one shard's lines.
func (r *readPath) shard(id uint64) *leaseShard { return &r.leases[id&(nLeaseShards-1)] }

// leaseSlot returns the slot of lease period id.
func (r *readPath) leaseSlot(id uint64) (uint32, bool) {
	sh := r.shard(id)
	sh.mu.Lock()
	slot, ok := sh.m[id]
	sh.mu.Unlock()
	return slot, ok
}

func (r *readPath) setLease(id uint64, slot uint32) {
	sh := r.shard(id)
	sh.mu.Lock()
	sh.m[id] = slot
	sh.mu.Unlock()
}

func (r *readPath) dropLease(id uint64) {
	sh := r.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

// heldStripe is the stripe one read-path call holds: consecutive objects
// mostly share one, which is then locked once for all of them. Not safe
// for concurrent use.
type heldStripe struct{ mu *sync.Mutex }

// lock makes mu the stripe held, first releasing the one held if another.
func (h *heldStripe) lock(mu *sync.Mutex) {
	if h.mu == mu {
		return
	}
	if h.mu != nil {
		h.mu.Unlock()
	}
	mu.Lock()
	h.mu = mu
}

// unlock releases the stripe held, if any.
func (h *heldStripe) unlock() {
	if h.mu != nil {
		h.mu.Unlock()
		h.mu = nil
	}
}

// leasesHeld returns the number of lease periods with unreleased leases.
func (r *readPath) leasesHeld() int {
	n := 0
	for i := range r.leases {
		sh := &r.leases[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// leasesHeldLocked returns the number of lease periods with unreleased
// leases.
func (s *Service) leasesHeldLocked() int { return s.rd.leasesHeld() }

// rlock takes the Service's lock shared unless the Service is closed or ctx
// is done.
func (s *Service) rlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}
