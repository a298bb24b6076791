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
//   - the lease table (lease period id → slot): blocks of ids, one per
//     GetReplicas call (or 4096 of its leases), found by the id through
//     a shard's map, which its lock guards around one map operation; a
//     block's entries and count are atomics (leaseBlock);
//   - the lease wheel (Service.mu.leaseQ): always through queueLeaseLocked,
//     which takes readPath.wheel;
//   - counters: atomics (readPath.nextBlock, readPath.getBytes).
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
	nextBlock atomic.Uint64 // numbers the lease blocks (leaseBlock); starts at random
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
	// A lease period id is block<<(leaseBlockBits+leaseShardBits) |
	// offset<<leaseShardBits | shard: a block's number, the period's
	// entry in it and the shard whose map holds it. Block numbers start
	// below 2^40 at random (ids of an earlier master process do not name
	// this one's periods) and would take centuries to pass 2^46.
	leaseBlockBits = 12
	leaseBlockMax  = 1 << leaseBlockBits
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
	m  map[uint64]*leaseBlock // block number → block, while it has periods with unreleased leases
	_  [64 - 16]byte
}

// leaseBlock holds the lease periods one GetReplicas call began: entry i
// is the slot (+1) of the period with offset i, 0 once that period ended.
// Only the call writes entries (each once, before the id can be known to
// anyone); the end of a period clears its entry with a swap, so exactly one
// ender counts it. state is the number of periods not ended, plus
// blockSealed once the call has begun its last one: the block leaves its
// shard's map when state reaches blockSealed, at the last of those two
// events.
type leaseBlock struct {
	slots []atomic.Uint32
	state atomic.Int64
}

const blockSealed = 1 << 62

func (r *readPath) init() {
	for i := range r.leases {
		r.leases[i].m = map[uint64]*leaseBlock{}
	}
}

func leaseBlockNum(id uint64) uint64 { return id >> (leaseBlockBits + leaseShardBits) }
func leaseOffset(id uint64) uint64   { return id >> leaseShardBits & (leaseBlockMax - 1) }

// block returns the block of lease period id, or nil.
func (r *readPath) block(id uint64) *leaseBlock {
	sh := r.shard(id)
	sh.mu.Lock()
	b := sh.m[leaseBlockNum(id)]
	sh.mu.Unlock()
	return b
}

// openBlock starts a block of n (≤ leaseBlockMax) periods in shard sh
// (index si) and returns it with its number.
func (r *readPath) openBlock(si uint64, n int) (*leaseBlock, uint64) {
	b := &leaseBlock{slots: make([]atomic.Uint32, n)}
	num := r.nextBlock.Add(1)
	sh := &r.leases[si]
	sh.mu.Lock()
	sh.m[num] = b
	sh.mu.Unlock()
	return b, num
}

// sealBlock records that block num of shard si gets no more periods.
func (r *readPath) sealBlock(si, num uint64, b *leaseBlock) {
	if b.state.Add(blockSealed) == blockSealed {
		r.dropBlock(si, num)
	}
}

func (r *readPath) dropBlock(si, num uint64) {
	sh := &r.leases[si]
	sh.mu.Lock()
	delete(sh.m, num)
	sh.mu.Unlock()
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

// leaseSlot returns the slot of lease period id, while that period has
// unreleased leases.
func (r *readPath) leaseSlot(id uint64) (uint32, bool) {
	b := r.block(id)
	if b == nil || leaseOffset(id) >= uint64(len(b.slots)) {
		return 0, false
	}
	v := b.slots[leaseOffset(id)].Load()
	return v - 1, v != 0
}

// dropLease ends lease period id in the table (its leases were all
// released, or ended): its entry is cleared, and the block dropped when it
// was the block's last period and the block is sealed.
func (r *readPath) dropLease(id uint64) {
	b := r.block(id)
	if b == nil || leaseOffset(id) >= uint64(len(b.slots)) {
		return
	}
	if b.slots[leaseOffset(id)].Swap(0) != 0 && b.state.Add(-1) == blockSealed {
		r.dropBlock(id&(nLeaseShards-1), leaseBlockNum(id))
	}
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
		for _, b := range sh.m {
			n += int(b.state.Load() &^ blockSealed)
		}
		sh.mu.Unlock()
	}
	return n
}

// blocks returns the number of lease blocks in the table (for tests: a
// block whose periods have all ended and that is sealed must be gone).
func (r *readPath) blocks() int {
	n := 0
	for i := range r.leases {
		sh := &r.leases[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

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
