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
//   - the lease table (lease id → period and slot): blocks of ids, one
//     per GetReplicas call (or 4096 of its leases), found by the id
//     through a shard's map, which its lock guards around one map
//     operation; a block's entries and count are atomics (leaseBlock);
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

// ReleaseCarry is read leases a GetReplicas call carries to the master
// (WithReleases): a client whose earlier gets' copies are complete has
// their leases ended by its next get, after that get's lookup, instead of
// by a ReleaseLeases call of their own beside it (which shares the
// connection, the master and the CPUs with the get, and lengthened the
// slowest gets). Released reports that the master ended them, as
// ReleaseLeases would; false (the call failed, or a master that predates
// the field ignored them) leaves their release to the caller — a lease
// counts once however often it is released, so sending them again is
// safe.
type ReleaseCarry struct {
	IDs      []uint64
	Released bool
}

// done reports c.Released; false for a nil c.
func (c *ReleaseCarry) done() bool { return c != nil && c.Released }

type releasesKey struct{}

// WithReleases returns ctx carrying c to the next GetReplicas (every Client
// carries it: the embedded one ends the leases itself, the remote one
// sends them with the request). c.Released is set by that call; c is the
// caller's again once the call returns (a Client and its wrappers keep
// neither c nor c.IDs past it).
func WithReleases(ctx context.Context, c *ReleaseCarry) context.Context {
	return context.WithValue(ctx, releasesKey{}, c)
}

// ReleasesFrom is the ReleaseCarry WithReleases put in ctx, or nil (for
// Clients and their wrappers).
func ReleasesFrom(ctx context.Context) *ReleaseCarry {
	c, _ := ctx.Value(releasesKey{}).(*ReleaseCarry)
	return c
}

const (
	nStripes = 256
	// stripeSpan consecutive slots share a stripe: a batch's objects,
	// mostly consecutive slots, then take few stripes, and concurrent
	// batches rarely the same ones — a stripe's line stays on one core.
	stripeSpan     = 64
	leaseShardBits = 6
	nLeaseShards   = 1 << leaseShardBits
	// A lease id is block<<(leaseBlockBits+leaseShardBits) |
	// offset<<leaseShardBits | shard: a block's number, the lease's
	// entry in it and the shard whose map holds it. Block numbers start
	// below 2^40 at random (ids of an earlier master process do not name
	// this one's leases) and would take centuries to pass 2^46; they are
	// never reused, so neither is an id.
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

// leaseBlock holds the read leases one GetReplicas call granted, one
// entry per lease — every reader has its own, also when it joins a period
// other readers hold: entry i (the lease with offset i) is the period it
// belongs to (the id of the lease that began the period; 0 once released)
// and its object's slot. Only the call writes entries (each once, before
// the id can be known to anyone); a release clears the period with a swap,
// so a lease is released once however often its id is named, and only a
// release that cleared it counts it on the object
// (Service.releaseLeaseLocked). state is the number of entries
// not released, plus blockSealed and the number granted once the call is
// done (the call counts them then, not per lease): the block leaves its
// shard's map when state reaches blockSealed — its last lease released —
// or, with leases not released (a reader that crashed), when the reaper
// finds until passed (readPath.sweep): their periods have ended by then,
// or were renewed by later leases that hold them.
type leaseBlock struct {
	entries []leaseEntry
	state   atomic.Int64
	// until is when the block's leases expire, extended by renewals of
	// any of them (views, Service.renewLeaseLocked). Written by the call
	// before it publishes the block and by exclusive holders of the
	// Service's lock; read by exclusive holders.
	until int64
	// owner is the principal the leases were granted to ("" without
	// authentication): only it, or an admin, may release or renew them.
	owner string
	// one is the entry of a one-key call (entries then is one[:]): a block
	// is one allocation for single gets.
	one [1]leaseEntry
}

// leaseEntry is one lease of a leaseBlock.
type leaseEntry struct {
	period atomic.Uint64
	slot   uint32
}

const blockSealed = 1 << 62

func (r *readPath) init() {
	for i := range r.leases {
		r.leases[i].m = map[uint64]*leaseBlock{}
	}
}

func leaseBlockNum(id uint64) uint64 { return id >> (leaseBlockBits + leaseShardBits) }
func leaseOffset(id uint64) uint64   { return id >> leaseShardBits & (leaseBlockMax - 1) }

// block returns the block of lease id, or nil.
func (r *readPath) block(id uint64) *leaseBlock {
	sh := r.shard(id)
	sh.mu.Lock()
	b := sh.m[leaseBlockNum(id)]
	sh.mu.Unlock()
	return b
}

// openBlock starts a block of n (≤ leaseBlockMax) leases of owner that
// expire at until in shard sh (index si) and returns it with its number.
func (r *readPath) openBlock(si uint64, n int, until int64, owner string) (*leaseBlock, uint64) {
	b := &leaseBlock{until: until, owner: owner}
	if n == 1 {
		b.entries = b.one[:]
	} else {
		b.entries = make([]leaseEntry, n)
	}
	num := r.nextBlock.Add(1)
	sh := &r.leases[si]
	sh.mu.Lock()
	sh.m[num] = b
	sh.mu.Unlock()
	return b, num
}

// sealBlock records that block num of shard si gets no more leases, and
// that it was granted n.
func (r *readPath) sealBlock(si, num uint64, b *leaseBlock, n int) {
	if b.state.Add(blockSealed+int64(n)) == blockSealed {
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

// shard returns the lease table's shard of lease id: its low bits, which
// name the shard of the GetReplicas call that granted it (see leaseGrant)
// — a call's inserts, and the release of its leases, stay in one shard's
// lines.
func (r *readPath) shard(id uint64) *leaseShard { return &r.leases[id&(nLeaseShards-1)] }

// lease returns the block of lease id and the id's entry in it, while the
// lease is in the table (not released, its block not swept).
func (r *readPath) lease(id uint64) (b *leaseBlock, off uint64, ok bool) {
	b = r.block(id)
	if b == nil || leaseOffset(id) >= uint64(len(b.entries)) || b.entries[leaseOffset(id)].period.Load() == 0 {
		return nil, 0, false
	}
	return b, leaseOffset(id), true
}

// leaseLookup remembers, for one caller's hold of the Service's lock, the
// block of the last lease it took: a batch's ids come in runs of one
// block (one GetReplicas call's leases), so the shard's lock and map are
// visited once per run instead of once per id. Within the hold a block
// leaves the table only by take of its last lease — sweep needs the lock
// exclusively — and then every entry of it is cleared, so a remembered
// block that left answers as a missing one does; block numbers are never
// reused.
type leaseLookup struct {
	key uint64 // the id's shard and block bits, +1; 0: none yet
	b   *leaseBlock
}

// leaseBlockKey is id without its offset bits: the same for every lease of
// one block.
func leaseBlockKey(id uint64) uint64 { return id &^ (uint64(leaseBlockMax-1) << leaseShardBits) }

// block returns the block of lease id (readPath.block), remembered.
func (l *leaseLookup) block(r *readPath, id uint64) *leaseBlock {
	if k := leaseBlockKey(id) + 1; k != l.key {
		l.key, l.b = k, r.block(id)
	}
	return l.b
}

// take releases lease id in the table, once: it returns the lease's period
// and slot if this call cleared its entry, and drops the block when that
// was its last lease and it is sealed. Only a caller that may act as the
// block's owner can take a lease. look remembers blocks across the
// caller's takes (leaseLookup).
func (r *readPath) take(id uint64, who caller, look *leaseLookup) (period uint64, slot uint32, ok bool) {
	b := look.block(r, id)
	if b == nil || leaseOffset(id) >= uint64(len(b.entries)) || (b.owner != "" && !who.mayActAs(b.owner)) {
		return 0, 0, false
	}
	e := &b.entries[leaseOffset(id)]
	if period = e.period.Swap(0); period == 0 {
		return 0, 0, false
	}
	slot = e.slot // written before the entry's period (Swap sees that store)
	if b.state.Add(-1) == blockSealed {
		r.dropBlock(id&(nLeaseShards-1), leaseBlockNum(id))
	}
	return period, slot, true
}

// sweep drops the blocks whose leases all expired by now without being
// released (their readers crashed, or lost the master): their entries name
// periods that ended, or that later leases hold — such a period counts
// them still, so it ends at its expiry rather than at a release. The
// caller holds the Service's lock exclusively (no call is filling a block).
func (r *readPath) sweep(now int64) {
	for i := range r.leases {
		sh := &r.leases[i]
		sh.mu.Lock()
		for num, b := range sh.m {
			if b.until <= now {
				delete(sh.m, num)
			}
		}
		sh.mu.Unlock()
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

// leasesHeld returns the number of read leases not released (an expired
// one counts until the reaper's next pass).
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
// sealed block whose leases were all released, or expired before the last
// sweep, must be gone).
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
