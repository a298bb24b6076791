// Package master is kvfabric's metadata service (DESIGN §5): mounted
// segments and their offset allocators, objects and their replicas, put and
// read leases, byte-based eviction and client liveness. It never touches the
// data.
//
// Service is the core, in plain Go types. Clients reach it through the
// Client interface: NewEmbedded in the same process, or Dial to a Server
// (`kvfabric master`) over gRPC.
package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvfabric/kvfabric/internal/alloc"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// Object states.
const (
	stateFree    uint8 = iota // slot unused
	statePending              // PutStart done, not visible
	stateVisible              // PutEnd done
	stateZombie               // removed by force while leased; freed when the lease ends
	// stateTimedOut is a put past its timeout whose writer is still
	// registered: invisible and without a key in the index (the key is free
	// for a new put), its bytes reserved until the writer ends or revokes it
	// (after its copies) or its registration ends. A slow writer's range is
	// never handed to a new owner while it may still write.
	stateTimedOut
)

// Object flags.
const (
	flagPinned uint8 = 1 << iota
	flagLeaseQueued
	flagSoftPinned // evicted only when no unpinned object can be
	flagSoftPinTTL // the soft pin expires: Service.mu.softUntil has when
	// flagExistLease: an exist check leased the object until stamp +
	// LeaseTTL (Exists with lease); no reader's copy depends on it.
	flagExistLease
)

// inlineReps replicas live in the object record; more go to Service.mu.extra.
const inlineReps = 2

// replica is one copy: a segment slot and the allocator block in it. The
// block's offset and length live in the allocator.
type replica struct {
	seg uint32
	ref alloc.Ref
}

// object is one entry of the object table (72 bytes, no pointers). Objects
// are addressed by slot index. What eviction reads of each sampled record
// (stamp, leaseUntil, flags) lies within 24 bytes, in one cache line for
// six records of eight. With flags at the end, most records took two
// lines, the second a miss of its own: a tenth of a full store's put time
// in the H200 host's profile (docs/perf/logs-2026-12-01-s8/runC).
type object struct {
	key        uint64 // reference to the key in objTable's arena; noKey when none
	size       uint64
	token      uint64
	stamp      int64 // visible: last access; pending: put deadline (unix ns)
	leaseUntil int64 // unix ns; 0 when not leased
	// aux is the writer's registration (clientState.seq) while pending or
	// timed out, and the number of unreleased leases of the current period
	// while visible or a zombie.
	aux   uint32
	nrep  uint8
	state uint8
	flags uint8
	// leaseID names the current lease period (from the first lease granted
	// while none was held to the release or end of the last one): the id
	// of the lease that began it, which its other leases' table entries
	// name too (readPath.take; ids are never reused). While
	// the object is pending it is its index in Service.mu.pending instead
	// (a lease period needs a visible object, and starts with aux 0).
	leaseID uint64
	reps    [inlineReps]replica
}

type segState struct {
	desc     *segment.Descriptor // immutable; shared with Replica.Segment
	al       *alloc.Allocator
	draining bool
	// drainUntil (unix ns) ends draining: its owner's unmount was refused
	// while leases or puts were outstanding, so no new puts or leases land
	// on it until then; each refused retry renews it, and Reap lets an
	// unretried drain lapse.
	drainUntil int64
	// suspect: a client reported the provider unreachable; cleared by the
	// owner's next heartbeat. No new puts or leases land on it meanwhile.
	suspect bool
	// domain is the owner's fabric domain (fixed while it is mounted: the
	// owner's registration ending unmounts it).
	domain string

	// Placement index (placeindex.go): lb is the segment's bucket, slot
	// its slot; held takes it out of lb's heap while one put's placement
	// has taken or tried it. Call Service.mu.place.update after changing
	// the allocator, draining, suspect or held.
	lb   *locBucket
	slot uint32
	held bool
	// slack is Config.PlacementSlack of its size in bytes (0: exact).
	slack uint64
	// tier is desc.Tier, here because puts and frees need it and desc is
	// one more cache miss away.
	tier segment.Tier
}

// usable reports whether new puts and leases may land on the segment.
func (sg *segState) usable() bool { return !sg.draining && !sg.suspect }

type clientState struct {
	info    ClientInfo
	ttl     time.Duration
	expires int64
	// seq identifies this registration (one incarnation of the client id);
	// puts record it as their writer.
	seq uint32
	// mapped is what it reported at its last heartbeat.
	mapped Mapped
	// suspects counts its segments reported unreachable since its last
	// heartbeat (which clears them).
	suspects int
	// principal registered it ("" without authentication).
	principal string
	// What it holds, against Config.Quotas.
	segments, pending int
	reserved          int64
}

// retiredReg is a registration that expired while its writer had puts in
// progress. Those puts are revoked (never visible, their keys free), but
// the writer may be only paused with copies already queued, so their ranges
// stay reserved until the same client id registers again — a client does
// that only after its copies are complete — or until until (the put
// timeout after the expiry: a queued copy that has still not run by then
// means the writer is dead).
type retiredReg struct {
	id, principal string
	until         int64
}

// quarantine is a segment allocation the master dropped while readers held
// leases on it or writers had puts into it: the same (id, generation) may be
// mounted again only after until, so nothing granted before the drop can
// touch a range handed out after it.
type quarantine struct {
	gen   uint64
	until int64
}

// leaseBucket is the granularity of the lease expiry wheel.
const leaseBucket = int64(100 * time.Millisecond)

// Service is the master's state machine. It is safe for concurrent use: one
// lock serialises all operations (each is short and allocation-light;
// batching amortises the lock) but the read path — GetReplicas and
// ReleaseLeases — which holds it shared and runs in parallel (readpath.go).
// Close stops the background reaper and makes later calls fail with
// ErrClosed.
type Service struct {
	cfg   Config
	clock Clock
	log   *slog.Logger
	met   *metrics
	// started and rates serve Status (status.go).
	started time.Time
	rates   rateRing

	stop chan struct{}
	wg   sync.WaitGroup

	// rd is what the read path changes while it holds mu shared.
	rd readPath

	// evictSampleOnly (tests) picks every eviction victim by sampling
	// alone, as before the clock, to compare hit rates.
	evictSampleOnly bool

	// mu guards all mutable state below it: held exclusively, or shared
	// by the read path under the rules of readPath.
	mu struct {
		sync.RWMutex
		closed   bool
		clients  map[string]*clientState
		segIndex map[string]uint32   // segment id → slot
		byOwner  map[string][]uint32 // owner client id → its segments' slots
		segs     []*segState         // by slot; nil when free
		freeSegs []uint32
		place    placeIndex // usable segments by tier, reach, node and location
		tierCap  [3]uint64  // by segment.Tier
		tierUsed [3]uint64

		bySeq   map[uint32]*clientState // registrations by seq
		nextSeq uint32
		retired map[uint32]retiredReg // expired registrations whose puts still reserve ranges, by seq

		objs  objTable             // records, keys, index of visible and pending keys
		extra map[uint32][]replica // all replicas of objects with > inlineReps
		// pending are the slots of puts in progress (statePending), in
		// no order; each one's index here is its object.leaseID
		// (addPendingLocked). A slice rather than a set: a put adds and
		// ends one entry with no hashing and no allocation.
		pending  []uint32
		timedOut map[uint64]uint32  // put token → slot of puts past their timeout (stateTimedOut)
		leaseQ   map[int64][]uint32 // lease wheel: bucket → slots to look at (shared holders: readPath.wheel)
		// views are the read leases clients hold as views (HoldLeases):
		// how many views each holds on a lease period, and until when
		// it last renewed them. Entries whose lease ended are pruned by
		// Reap.
		views map[viewKey]viewHold
		// softUntil is when the soft pin of a flagSoftPinTTL object ends
		// (unix ns); while the put is pending, the TTL itself (ns).
		softUntil map[uint32]int64
		visible   int
		zombies   int

		quarantine map[string]quarantine // segment id → dropped allocation not to be remounted yet
		segVersion uint64                // changes on every mount and unmount

		nextClient uint64
		evictions  uint64
		rng        *rand.Rand
		evict      [3]evictList // visible objects by tier (segment.Tier), for eviction to sample
		sample     []uint32     // sampled or examined slots of eviction, reused
		flow       flowCounters // for Status and its metrics (status.go)
	}
}

// New returns a running Service. The caller must Close it.
func New(cfg Config) (*Service, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, stop: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.met = newMetrics(s)
	s.started = s.clock.Now()
	if cfg.Registerer != nil {
		if err := s.met.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("master: register metrics: %w", err)
		}
	}
	m := &s.mu
	m.clients = map[string]*clientState{}
	m.segIndex = map[string]uint32{}
	m.byOwner = map[string][]uint32{}
	m.place = newPlaceIndex()
	m.objs = newObjTable()
	m.extra = map[uint32][]replica{}
	m.timedOut = map[uint64]uint32{}
	m.leaseQ = map[int64][]uint32{}
	s.rd.init()
	m.views = map[viewKey]viewHold{}
	m.softUntil = map[uint32]int64{}
	m.bySeq = map[uint32]*clientState{}
	m.retired = map[uint32]retiredReg{}
	m.quarantine = map[string]quarantine{}
	seed := uint64(time.Now().UnixNano())
	m.rng = rand.New(rand.NewPCG(seed, seed>>17|1))
	s.rd.nextBlock.Store(m.rng.Uint64() >> 24)
	// Another master process starts from another version, so its clients
	// compare their mappings with its segments at their first heartbeat.
	m.segVersion = m.rng.Uint64()
	if cfg.ReapInterval > 0 {
		s.wg.Add(1)
		go s.reaper()
	}
	return s, nil
}

// Close stops the reaper and waits for it and for calls in flight; later
// calls return ErrClosed. It is idempotent and returns nil.
func (s *Service) Close() error {
	s.mu.Lock()
	already := s.mu.closed
	s.mu.closed = true
	s.mu.Unlock()
	if !already {
		close(s.stop)
	}
	s.wg.Wait()
	return nil
}

func (s *Service) reaper() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Reap()
		}
	}
}

// lock takes the mutex unless the Service is closed or ctx is done.
func (s *Service) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (s *Service) now() int64 { return s.clock.Now().UnixNano() }

// ---- clients and segments ----

// RegisterClient implements Client.
func (s *Service) RegisterClient(ctx context.Context, info ClientInfo) (reg Registration, err error) {
	defer s.met.op(opRegister, time.Now(), &err)
	if err := validateClientInfo(&info); err != nil {
		return Registration{}, err
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return Registration{}, err
	}
	if err := s.lock(ctx); err != nil {
		return Registration{}, err
	}
	defer s.mu.Unlock()
	now := s.now()
	if info.ID == "" {
		s.mu.nextClient++
		info.ID = fmt.Sprintf("client-%d-%08x", s.mu.nextClient, s.mu.rng.Uint32())
	} else {
		if old, err := s.liveClientLocked(info.ID, now); err == nil {
			switch {
			case !who.mayActAs(old.principal):
				return Registration{}, fmt.Errorf("%w: client id %q is registered by %q", ErrPermission, info.ID, old.principal)
			case info.Incarnation != 0 && old.info.Incarnation == info.Incarnation:
				// A retried RegisterClient of the same process.
				old.expires = now + int64(old.ttl)
				return Registration{ID: info.ID, TTL: old.ttl, LeaseTTL: s.cfg.LeaseTTL, PutTimeout: s.cfg.PutTimeout}, nil
			case info.Incarnation != 0 && old.info.Incarnation != 0:
				return Registration{}, fmt.Errorf("%w: client id %q is in use by a live process on %q (its registration ends in %v unless it heartbeats); use another id, or wait if that process is gone",
					ErrAlreadyExists, info.ID, old.info.Node, time.Duration(old.expires-now))
			}
			// A new incarnation of a client that does not say which it is:
			// the old process, its puts and its memory are gone.
			s.retireClientLocked(old, now, true)
		}
		for _, r := range s.mu.retired {
			if r.id == info.ID && !who.mayActAs(r.principal) {
				return Registration{}, fmt.Errorf("%w: client id %q was registered by %q", ErrPermission, info.ID, r.principal)
			}
		}
		// Puts of earlier, expired incarnations: a client registers again
		// only after the copies it had queued are complete.
		for seq, r := range s.mu.retired {
			if r.id == info.ID {
				s.freePutsOfLocked(seq, now)
				delete(s.mu.retired, seq)
			}
		}
	}
	ttl := info.TTL
	if ttl == 0 {
		ttl = s.cfg.ClientTTL
	}
	ttl = min(max(ttl, s.cfg.MinClientTTL), s.cfg.MaxClientTTL)
	s.mu.nextSeq++
	if s.mu.nextSeq == 0 {
		s.mu.nextSeq++ // 0 names no writer
	}
	c := &clientState{info: info, ttl: ttl, expires: now + int64(ttl), seq: s.mu.nextSeq, principal: who.Name}
	s.mu.clients[info.ID] = c
	s.mu.bySeq[c.seq] = c
	return Registration{ID: info.ID, TTL: ttl, LeaseTTL: s.cfg.LeaseTTL, PutTimeout: s.cfg.PutTimeout}, nil
}

// Heartbeat implements Client.
func (s *Service) Heartbeat(ctx context.Context, clientID string, mapped Mapped) (_ HeartbeatInfo, err error) {
	defer s.met.op(opHeartbeat, time.Now(), &err)
	if err := validateID("client id", clientID); err != nil {
		return HeartbeatInfo{}, err
	}
	c, now, err := s.lockAs(ctx, clientID, "heartbeat")
	if err != nil {
		return HeartbeatInfo{}, err
	}
	defer s.mu.Unlock()
	c.expires = now + int64(c.ttl)
	c.mapped = mapped
	// Alive: a report that its provider was unreachable was about the
	// reporter's view, not this process.
	if c.suspects > 0 {
		c.suspects = 0
		for _, sg := range s.mu.segs {
			if sg != nil && sg.suspect && sg.desc.Owner == clientID {
				sg.suspect = false
				s.mu.place.update(sg)
				s.log.Info("master: segment reported unreachable; its provider heartbeats, placing on it again", "segment", sg.desc.Key().String())
			}
		}
	}
	return HeartbeatInfo{SegmentsVersion: s.mu.segVersion}, nil
}

// liveClientLocked returns a registered client, expiring it first if its
// TTL ran out since the last reap.
func (s *Service) liveClientLocked(id string, now int64) (*clientState, error) {
	c, ok := s.mu.clients[id]
	if ok && c.expires <= now {
		s.expireClientLocked(id, now)
		ok = false
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownClient, id)
	}
	return c, nil
}

// lockAs authenticates ctx's caller, takes the lock and returns client id's
// live registration, which the caller must own (or be an admin). On success
// the lock is held and the caller unlocks; on error it is not held.
func (s *Service) lockAs(ctx context.Context, id, what string) (*clientState, int64, error) {
	who, err := s.callerOf(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, 0, err
	}
	now := s.now()
	if err := s.ownsLocked(who, id, what); err != nil {
		s.mu.Unlock()
		return nil, 0, err
	}
	c, err := s.liveClientLocked(id, now)
	if err != nil {
		s.mu.Unlock()
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	return c, now, nil
}

// UnregisterClient implements Client.
func (s *Service) UnregisterClient(ctx context.Context, clientID string) (err error) {
	defer s.met.op(opUnregister, time.Now(), &err)
	if err := validateID("client id", clientID); err != nil {
		return err
	}
	c, now, err := s.lockAs(ctx, clientID, "unregister")
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	puts, segs := s.retireClientLocked(c, now, true)
	delete(s.mu.clients, clientID)
	s.log.Info("master: client unregistered", "client", clientID, "segments", segs, "puts revoked", puts)
	return nil
}

func (s *Service) expireClientLocked(id string, now int64) {
	c := s.mu.clients[id]
	puts, segs := s.retireClientLocked(c, now, false)
	delete(s.mu.clients, id)
	s.met.clientExpiries.Inc()
	s.met.errs.add("client_expiry", "expired", fmt.Sprintf("client %q expired without a heartbeat: %d segments dropped, %d puts revoked", id, segs, puts))
	s.log.Warn("master: client expired", "client", id, "segments", segs, "puts revoked", puts)
}

// retireClientLocked ends registration c — expired, or replaced by a new
// incarnation of its id (gone: its puts are freed) — and returns how many
// puts it revoked and segments it dropped. A process whose registration
// ended enqueues no more copies (the client checks its registration and
// each put's deadline before every batch of copies), so its puts are
// revoked at once: never visible, their keys free. On expiry their ranges
// stay reserved (retiredReg) for copies it may have queued before.
func (s *Service) retireClientLocked(c *clientState, now int64, gone bool) (puts, segs int) {
	delete(s.mu.bySeq, c.seq)
	// Backwards: timeOutPutLocked moves the last entry into the one it
	// removes, and every entry after i has been seen.
	for i := len(s.mu.pending) - 1; i >= 0; i-- {
		if slot := s.mu.pending[i]; s.mu.objs.at(slot).aux == c.seq {
			s.timeOutPutLocked(slot)
			puts++
		}
	}
	for _, slot := range s.mu.timedOut {
		if s.mu.objs.at(slot).aux == c.seq {
			puts++
		}
	}
	if gone {
		s.freePutsOfLocked(c.seq, now)
	} else if puts > 0 {
		s.mu.retired[c.seq] = retiredReg{id: c.info.ID, principal: c.principal, until: now + int64(s.cfg.PutTimeout)}
	}
	for slot, sg := range s.mu.segs {
		if sg != nil && sg.desc.Owner == c.info.ID {
			s.dropSegmentLocked(uint32(slot), now)
			segs++
		}
	}
	return puts, segs
}

// MountSegment implements Client.
func (s *Service) MountSegment(ctx context.Context, d segment.Descriptor) (err error) {
	defer s.met.op(opMount, time.Now(), &err)
	if err := validateDescriptor(&d); err != nil {
		return err
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return err
	}
	al, err := alloc.New(d.Size, s.cfg.Alignment)
	if err != nil {
		return fmt.Errorf("%w: segment %q: size %d: smaller than the alignment %d", ErrInvalid, d.ID, d.Size, s.cfg.Alignment)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.now()
	if err := s.ownsLocked(who, d.Owner, "mount segment "+d.ID); err != nil {
		return err
	}
	owner, err := s.liveClientLocked(d.Owner, now)
	if err != nil {
		return fmt.Errorf("segment %q owner: %w", d.ID, err)
	}
	if slot, ok := s.mu.segIndex[d.ID]; ok {
		old := s.mu.segs[slot].desc
		if old.Generation == d.Generation && old.Owner == d.Owner {
			return nil // a retried mount
		}
		return fmt.Errorf("%w: segment %q is mounted (generation %#x, owner %q)", ErrAlreadyExists, d.ID, old.Generation, old.Owner)
	}
	if q, ok := s.mu.quarantine[d.ID]; ok && q.gen == d.Generation && q.until > now {
		return fmt.Errorf("%w: segment %q generation %#x was dropped while leases or puts on it were outstanding; it may be mounted again after %v (in %v)",
			ErrHasLease, d.ID, d.Generation, time.Unix(0, q.until).UTC().Format(time.RFC3339Nano), time.Duration(q.until-now))
	}
	if q := s.cfg.Quotas.Segments; q > 0 && owner.segments >= q {
		return fmt.Errorf("%w: client %q has %d segments mounted (quota %d)", ErrQuota, d.Owner, owner.segments, q)
	}
	delete(s.mu.quarantine, d.ID)
	desc := d
	sg := &segState{desc: &desc, al: al, domain: owner.info.FabricDomain, tier: d.Tier, slack: slackOf(s.cfg.PlacementSlack, al.Size())}
	var slot uint32
	if n := len(s.mu.freeSegs); n > 0 {
		slot = s.mu.freeSegs[n-1]
		s.mu.freeSegs = s.mu.freeSegs[:n-1]
		s.mu.segs[slot] = sg
	} else {
		slot = uint32(len(s.mu.segs))
		s.mu.segs = append(s.mu.segs, sg)
	}
	s.mu.segIndex[d.ID] = slot
	s.mu.byOwner[d.Owner] = append(s.mu.byOwner[d.Owner], slot)
	s.mu.place.add(slot, sg)
	s.mu.tierCap[d.Tier] += al.Size()
	s.mu.segVersion++
	owner.segments++
	return nil
}

// UnmountSegment implements Client.
func (s *Service) UnmountSegment(ctx context.Context, k segment.Key) (err error) {
	defer s.met.op(opUnmount, time.Now(), &err)
	if err := validateSegmentKey(k); err != nil {
		return err
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	slot, err := s.segmentLocked(k)
	if err != nil {
		return err
	}
	if err := s.ownsLocked(who, s.mu.segs[slot].desc.Owner, "unmount segment "+k.ID); err != nil {
		return err
	}
	now := s.now()
	sg := s.mu.segs[slot]
	leased, writing := 0, 0
	sg.al.Each(func(_ alloc.Ref, _, _ uint64, tag uint32) {
		o := s.mu.objs.at(tag)
		switch {
		case o.state == statePending || o.state == stateTimedOut:
			writing++
		case o.leaseUntil > now && o.aux > 0:
			// A reader's copy may be running (an exist check's lease
			// alone does not hold the unmount up).
			leased++
		}
	})
	if leased+writing > 0 {
		sg.draining = true
		sg.drainUntil = now + int64(s.cfg.DrainTimeout)
		s.mu.place.update(sg)
		return fmt.Errorf("%w: segment %s: %d leased objects, %d puts in progress; draining for %v, retry after the lease TTL (%v)",
			ErrHasLease, k, leased, writing, s.cfg.DrainTimeout, s.cfg.LeaseTTL)
	}
	s.dropSegmentLocked(slot, now)
	return nil
}

func (s *Service) segmentLocked(k segment.Key) (uint32, error) {
	slot, ok := s.mu.segIndex[k.ID]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownSegment, k.ID)
	}
	if g := s.mu.segs[slot].desc.Generation; g != k.Generation {
		return 0, fmt.Errorf("%w: segment %q is generation %#x, not %#x", ErrGenerationMismatch, k.ID, g, k.Generation)
	}
	return slot, nil
}

// dropSegmentLocked removes a segment whatever its leases: the replicas on
// it are dropped and objects left without replicas are removed. When
// readers still hold leases on it, or writers have puts into it, the
// allocation is quarantined: it cannot be mounted again (with the same
// generation) until those leases and put deadlines have passed.
func (s *Service) dropSegmentLocked(slot uint32, now int64) {
	sg := s.mu.segs[slot]
	var orphans []uint32
	until := int64(0)
	sg.al.Each(func(ref alloc.Ref, _, _ uint64, tag uint32) {
		o := s.mu.objs.at(tag)
		switch o.state {
		case statePending:
			// The writer enqueues no copy after its deadline (o.stamp).
			until = max(until, o.stamp)
		case stateTimedOut:
			// Revoked, but a copy its writer queued in time may still run.
			until = max(until, now+int64(s.cfg.PutTimeout))
		default:
			until = max(until, o.leaseUntil)
		}
		reps := s.repsLocked(tag)
		keep := reps[:0:0]
		for _, r := range reps {
			if r.seg != slot {
				keep = append(keep, r)
			}
		}
		s.setRepsLocked(tag, keep)
		switch {
		case len(keep) == 0:
			orphans = append(orphans, tag)
		case o.state == stateVisible: // its lists follow the tiers it keeps
			s.unlistLocked(tag)
			s.listLocked(tag)
		}
	})
	s.mu.tierCap[sg.desc.Tier] -= sg.al.Size()
	s.mu.tierUsed[sg.desc.Tier] -= sg.al.Used()
	for _, o := range orphans {
		s.freeObjectLocked(o, now)
	}
	delete(s.mu.segIndex, sg.desc.ID)
	if own := slices.DeleteFunc(s.mu.byOwner[sg.desc.Owner], func(x uint32) bool { return x == slot }); len(own) > 0 {
		s.mu.byOwner[sg.desc.Owner] = own
	} else {
		delete(s.mu.byOwner, sg.desc.Owner)
	}
	s.mu.place.remove(sg)
	if c, ok := s.mu.clients[sg.desc.Owner]; ok {
		c.segments--
	}
	s.mu.segs[slot] = nil
	s.mu.freeSegs = append(s.mu.freeSegs, slot)
	s.mu.segVersion++
	if until > now {
		s.mu.quarantine[sg.desc.ID] = quarantine{gen: sg.desc.Generation, until: until}
	}
	s.log.Info("master: segment unmounted", "segment", sg.desc.Key().String(), "orphans", len(orphans),
		"quarantined for", time.Duration(max(0, until-now)))
}

// ListSegments implements Client.
func (s *Service) ListSegments(ctx context.Context) (_ []segment.Descriptor, err error) {
	defer s.met.op(opListSegments, time.Now(), &err)
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]segment.Descriptor, 0, len(s.mu.segIndex))
	for _, sg := range s.mu.segs {
		if sg != nil {
			out = append(out, *sg.desc)
		}
	}
	return out, nil
}

// ---- objects ----

func (s *Service) repsLocked(slot uint32) []replica {
	o := s.mu.objs.at(slot)
	if o.nrep <= inlineReps {
		return o.reps[:o.nrep]
	}
	return s.mu.extra[slot]
}

// setRepsLocked stores reps as slot's replicas; reps may alias the old ones.
func (s *Service) setRepsLocked(slot uint32, reps []replica) {
	o := s.mu.objs.at(slot)
	if len(reps) <= inlineReps {
		var in [inlineReps]replica
		copy(in[:], reps)
		o.reps = in
		if o.nrep > inlineReps {
			delete(s.mu.extra, slot)
		}
	} else {
		s.mu.extra[slot] = append([]replica(nil), reps...)
	}
	o.nrep = uint8(len(reps))
}

// repsUsableLocked reports whether every replica of slot is on a usable
// segment.
func (s *Service) repsUsableLocked(slot uint32) bool {
	for _, r := range s.repsLocked(slot) {
		if !s.mu.segs[r.seg].usable() {
			return false
		}
	}
	return true
}

// freeObjectLocked frees slot's replicas and the slot itself.
func (s *Service) freeObjectLocked(slot uint32, now int64) { s.freeCountingLocked(slot, now, nil) }

// freedIn tallies the bytes freeCountingLocked frees in one tier (on usable
// segments only, with usable).
type freedIn struct {
	tier   segment.Tier
	usable bool
	n      uint64
}

// freeCountingLocked is freeObjectLocked; with in, it adds to in.n what it
// frees in in.tier.
func (s *Service) freeCountingLocked(slot uint32, now int64, in *freedIn) {
	o := s.mu.objs.at(slot)
	for _, r := range s.repsLocked(slot) {
		sg := s.mu.segs[r.seg]
		_, n, err := sg.al.Span(r.ref)
		if err == nil {
			err = sg.al.Free(r.ref)
		}
		if err != nil {
			s.log.Error("master: bug: free replica", "key", s.mu.objs.key(slot), "err", err)
			continue
		}
		s.mu.tierUsed[sg.tier] -= n
		s.mu.place.update(sg)
		if in != nil && sg.tier == in.tier && (!in.usable || sg.usable()) {
			in.n += n
		}
	}
	if o.nrep > inlineReps {
		delete(s.mu.extra, slot)
	}
	if o.flags&flagSoftPinTTL != 0 {
		delete(s.mu.softUntil, slot)
	}
	switch o.state {
	case statePending:
		s.mu.objs.unindex(slot)
		s.removePendingLocked(slot)
		s.unchargeLocked(o)
	case stateTimedOut:
		delete(s.mu.timedOut, o.token)
		s.unchargeLocked(o)
	case stateVisible:
		s.mu.objs.unindex(slot)
		s.unlistLocked(slot)
		s.mu.visible--
	case stateZombie:
		s.mu.zombies--
	}
	if o.flags&flagLeaseQueued != 0 && o.leaseUntil != 0 && o.leaseUntil <= now {
		s.met.leaseExpiries.Inc()
	}
	s.mu.objs.dropKey(slot)
	s.mu.objs.release(slot)
}

func (s *Service) replicaLocked(r replica) Replica {
	sg := s.mu.segs[r.seg]
	off, n, _ := sg.al.Span(r.ref)
	return Replica{Segment: sg.desc, Offset: off, Length: n}
}

// softPin is an object's soft pin: on, and when it ends — ttl (ns after
// its put ends) for a new put, until (unix ns) when carried over from a
// replaced object; both 0 when it lasts as long as the object.
type softPin struct {
	on         bool
	ttl, until int64
}

// softPinOfLocked returns slot's soft pin as of now (an expired one is
// off).
func (s *Service) softPinOfLocked(slot uint32, now int64) softPin {
	o := s.mu.objs.at(slot)
	switch {
	case o.flags&flagSoftPinned == 0:
		return softPin{}
	case o.flags&flagSoftPinTTL == 0:
		return softPin{on: true}
	}
	u := s.mu.softUntil[slot]
	if u < 0 {
		return softPin{on: true, ttl: -u}
	}
	if u <= now {
		return softPin{}
	}
	return softPin{on: true, until: u}
}

// setSoftPinLocked gives slot the soft pin p. While the object is pending,
// softUntil holds -ttl; PutEnd turns it into an expiry.
func (s *Service) setSoftPinLocked(slot uint32, p softPin) {
	if !p.on {
		return
	}
	o := s.mu.objs.at(slot)
	o.flags |= flagSoftPinned
	switch {
	case p.ttl > 0:
		o.flags |= flagSoftPinTTL
		s.mu.softUntil[slot] = -p.ttl
	case p.until > 0:
		o.flags |= flagSoftPinTTL
		s.mu.softUntil[slot] = p.until
	}
}

// softPinnedLocked reports whether visible object slot is soft-pinned at
// now, dropping a soft pin that has expired.
func (s *Service) softPinnedLocked(slot uint32, now int64) bool {
	o := s.mu.objs.at(slot)
	if o.flags&flagSoftPinned == 0 {
		return false
	}
	if o.flags&flagSoftPinTTL == 0 {
		return true
	}
	if u := s.mu.softUntil[slot]; u < 0 || u > now {
		return true
	}
	o.flags &^= flagSoftPinned | flagSoftPinTTL
	delete(s.mu.softUntil, slot)
	return false
}

// PutStart implements Client.
func (s *Service) PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error) {
	p, err := s.PreparePutStart(reqs)
	if err != nil {
		s.met.op(opPutStart, time.Now(), &err)
		return nil, err
	}
	return s.PutStartPrepared(ctx, p)
}

// PreparedPuts is a PutStart batch whose part that needs no lock is done:
// its requests validated, its answers allocated, its tokens drawn
// (PreparePutStart). An embedded master's caller prepares its next batch
// while the master works on the one before (client.Store's put
// pipeline), so that part leaves the master's serial path. Only the
// Service makes one; PutStartPrepared takes it once.
type PreparedPuts struct {
	svc *Service
	// The requests: reqs, or (uni, a UniformPuts) every request is tmpl
	// with keys[i] and sizes[i].
	reqs    []PutStartReq
	uni     bool
	keys    []string
	sizes   []uint64
	tmpl    PutStartReq
	out     []PutStartResult // Err: the request's validation
	backing []Replica        // the answers' replicas, capacity for all of them
	tokens  []uint64         // one per request, 0 where it failed validation
	hashes  []uint64         // the keys' index hashes (objTable.hash), 0 where validation failed
	taken   bool
}

// PreparePutStart validates reqs and prepares their PutStart without the
// lock (PreparedPuts). reqs must not change until PutStartPrepared
// returns. An error is the whole batch's (too large); a request's own
// error is its answer's.
func (s *Service) PreparePutStart(reqs []PutStartReq) (*PreparedPuts, error) {
	if err := s.checkBatch(len(reqs)); err != nil {
		return nil, err
	}
	return s.prepare(&PreparedPuts{svc: s, reqs: reqs}, len(reqs)), nil
}

// UniformPuts is a PutStart batch whose requests differ only in their key
// and size, as a Store's BatchPut makes them: request i is Req with Key
// Keys[i] and Size Sizes[i]. Its requests are never built one by one, on
// the caller's side or on the master's: each is Req's fields and two
// arrays, where a []PutStartReq is 128 bytes a key written by the caller
// and read by the master's goroutine from the caller's core.
type UniformPuts struct {
	Keys  []string
	Sizes []uint64
	Req   PutStartReq // Key and Size are not used
}

// PrepareUniformPutStart is PreparePutStart of u's requests. u's slices
// must not change until PutStartPrepared returns. An error is the whole
// batch's (too large, or Sizes not as long as Keys).
func (s *Service) PrepareUniformPutStart(u UniformPuts) (*PreparedPuts, error) {
	if err := s.checkBatch(len(u.Keys)); err != nil {
		return nil, err
	}
	if len(u.Sizes) != len(u.Keys) {
		return nil, uniformLenErr(u)
	}
	return s.prepare(&PreparedPuts{svc: s, uni: true, keys: u.Keys, sizes: u.Sizes, tmpl: u.Req}, len(u.Keys)), nil
}

// AppendRequests appends u's requests to dst, one per key: ErrInvalid
// when Sizes is not as long as Keys.
func (u UniformPuts) AppendRequests(dst []PutStartReq) ([]PutStartReq, error) {
	if len(u.Sizes) != len(u.Keys) {
		return dst, uniformLenErr(u)
	}
	dst = slices.Grow(dst, len(u.Keys))
	for i, k := range u.Keys {
		q := u.Req
		q.Key, q.Size = k, u.Sizes[i]
		dst = append(dst, q)
	}
	return dst, nil
}

func uniformLenErr(u UniformPuts) error {
	return fmt.Errorf("%w: uniform puts: %d keys but %d sizes", ErrInvalid, len(u.Keys), len(u.Sizes))
}

// PutStartUniform is PutStart of u's requests (UniformPutStarter).
func (s *Service) PutStartUniform(ctx context.Context, u UniformPuts) ([]PutStartResult, error) {
	p, err := s.PrepareUniformPutStart(u)
	if err != nil {
		s.met.op(opPutStart, time.Now(), &err)
		return nil, err
	}
	return s.PutStartPrepared(ctx, p)
}

// req returns request i of p: in p.reqs, or built in cur.
func (p *PreparedPuts) req(i int, cur *PutStartReq) *PutStartReq {
	if !p.uni {
		return &p.reqs[i]
	}
	*cur = p.tmpl
	cur.Key, cur.Size = p.keys[i], p.sizes[i]
	return cur
}

// key returns the key of request i of p.
func (p *PreparedPuts) key(i int) string {
	if p.uni {
		return p.keys[i]
	}
	return p.reqs[i].Key
}

// prepare validates the n requests of p and draws their tokens and hashes.
func (s *Service) prepare(p *PreparedPuts, n int) *PreparedPuts {
	p.out, p.tokens, p.hashes = make([]PutStartResult, n), make([]uint64, n), make([]uint64, n)
	nrep := 0
	var valid *Placement // the last placement validated: a batch's puts usually share one
	var cur PutStartReq
	for i := range n {
		r := p.req(i, &cur)
		if p.out[i].Err = validatePutStartAfter(r, s.cfg.MaxKeyLen, valid); p.out[i].Err == nil {
			nrep += max(r.Replicas, 1)
			if valid = &r.Placement; p.uni {
				valid = &p.tmpl.Placement // the same strings, and it stays
			}
			p.tokens[i] = newToken()
			// The index's hash seed is set in New and never changes: hashing
			// needs no lock.
			p.hashes[i] = s.mu.objs.hash(r.Key)
		}
	}
	p.backing = make([]Replica, 0, nrep)
	return p
}

// PutStartPrepared is PutStart of a batch PreparePutStart prepared.
func (s *Service) PutStartPrepared(ctx context.Context, p *PreparedPuts) (_ []PutStartResult, err error) {
	defer s.met.op(opPutStart, time.Now(), &err)
	if p == nil || p.svc != s {
		return nil, fmt.Errorf("%w: prepared puts: not prepared by this master", ErrInvalid)
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if p.taken { // checked under the lock: of two calls with p, one starts it
		return nil, fmt.Errorf("%w: prepared puts: already started", ErrInvalid)
	}
	p.taken = true
	out, backing := p.out, p.backing
	nok := 0
	now := s.now()
	var scratch []replica
	var writer *clientState
	var plan placePlan // the last put's, reused by the next put of the same placement
	f := newBatchFinder(&s.mu.objs, len(out), p.key)
	f.hashed = p.hashes
	var cur PutStartReq
	for i := range out {
		if out[i].Err != nil {
			continue
		}
		r := p.req(i, &cur)
		// Every put has a registered writer: its range stays reserved past
		// the put timeout for as long as that writer may still write it.
		if writer == nil || writer.info.ID != r.Placement.Client {
			if err := s.ownsLocked(who, r.Placement.Client, "put"); err != nil {
				out[i].Err = fmt.Errorf("key %q: %w", r.Key, err)
				continue
			}
			c, err := s.liveClientLocked(r.Placement.Client, now)
			if err != nil {
				out[i].Err = fmt.Errorf("key %q: writer (placement client): %w", r.Key, err)
				continue
			}
			writer = c
		}
		if err := s.quotaLocked(writer, r.Size); err != nil {
			out[i].Err = fmt.Errorf("key %q: %w", r.Key, err)
			continue
		}
		h := f.hash(i)
		old, found := s.mu.objs.find(h, r.Key)
		if found {
			switch {
			case !r.Upsert:
				out[i].Err = fmt.Errorf("%w: key %q", ErrAlreadyExists, r.Key)
				continue
			case s.mu.objs.at(old).state == statePending:
				out[i].Err = fmt.Errorf("%w: key %q: a put of it is in progress", ErrAlreadyExists, r.Key)
				continue
			}
		}
		slot := s.mu.objs.alloc()
		scratch, out[i].Err = s.placeLocked(r, writer, &plan, slot, now, scratch[:0])
		if out[i].Err != nil {
			s.mu.objs.release(slot)
			continue
		}
		// An upsert retires the old object only now that the new one has
		// its space (placing may have evicted it): until then a failure
		// leaves the old value in place. Placing only removes keys, so a
		// key absent before it is still absent.
		var keep softPin
		if found {
			if old, ok := s.mu.objs.find(h, r.Key); ok {
				keep = s.softPinOfLocked(old, now)
				_ = s.removeLocked(old, true, now) // visible: freed, or a zombie until its leases end
			}
		}
		o := s.mu.objs.at(slot)
		*o = object{key: noKey, size: r.Size, token: s.tokenLocked(p.tokens[i]), stamp: now + int64(s.cfg.PutTimeout), state: statePending, aux: writer.seq}
		writer.pending++
		writer.reserved += int64(r.Size)
		if r.Pin {
			o.flags |= flagPinned
		}
		switch {
		case r.KeepSoftPin:
			s.setSoftPinLocked(slot, keep)
		case r.SoftPin:
			s.setSoftPinLocked(slot, softPin{on: true, ttl: int64(r.SoftPinTTL)})
		}
		s.setRepsLocked(slot, scratch)
		s.mu.objs.insert(h, slot, r.Key)
		s.addPendingLocked(slot)
		start := len(backing)
		for _, rp := range scratch {
			backing = append(backing, s.replicaLocked(rp))
		}
		out[i].Token = o.token
		out[i].Hint = slot + 1
		out[i].Replicas = backing[start:len(backing):len(backing)]
		nok++
	}
	s.rd.sink.Add(f.sink)
	s.evictToWatermarksLocked(now)
	s.met.items(opPutStart, len(out), nok, func(i int) error { return out[i].Err })
	return out, nil
}

// errBatchTooLarge marks the ErrInvalid of an oversized batch: it fails the
// whole call, not its items.
var errBatchTooLarge = errors.New("batch too large")

func (s *Service) checkBatch(n int) error {
	if n > s.cfg.MaxBatch {
		return fmt.Errorf("%w: %w: %d items, limit %d", ErrInvalid, errBatchTooLarge, n, s.cfg.MaxBatch)
	}
	return nil
}

// PutEnd implements Client.
func (s *Service) PutEnd(ctx context.Context, puts []PutRef) []error {
	return s.putFinish(ctx, opPutEnd, puts)
}

// hintedLocked returns the slot p.Hint names when it holds p's put: a
// pending one (or, for a retried PutEnd, a visible one) of p.Key with
// p.Token. Such a record is the one the index holds for p.Key, so the
// caller need not look the key up (PutEnd's profile: three fifths of its
// time was the lookup). Any other hint — none, stale, another master's,
// forged — reports false and the caller looks the key up as without one.
func (s *Service) hintedLocked(p *PutRef) (uint32, bool) {
	if p.Hint == 0 || int(p.Hint) > s.mu.objs.len() {
		return 0, false
	}
	slot := p.Hint - 1
	o := s.mu.objs.at(slot)
	if o.token != p.Token || (o.state != statePending && o.state != stateVisible) || !s.mu.objs.keyEqual(slot, p.Key) {
		return 0, false
	}
	return slot, true
}

// PutRevoke implements Client.
func (s *Service) PutRevoke(ctx context.Context, puts []PutRef) []error {
	return s.putFinish(ctx, opPutRevoke, puts)
}

func (s *Service) putFinish(ctx context.Context, op opKind, puts []PutRef) []error {
	start := time.Now()
	out := make([]error, len(puts))
	err := s.checkBatch(len(puts))
	if err == nil {
		// Only what is cheap before the lock: a key found below is one a
		// PutStart validated, so the rest of validateKey (UTF-8) runs only
		// for the keys not found (PutEnd's profile: a fifth of its time).
		for i := range puts {
			if k := puts[i].Key; k == "" || len(k) > s.cfg.MaxKeyLen {
				out[i] = validateKey(k, s.cfg.MaxKeyLen)
			}
		}
		err = s.lock(ctx)
	}
	var who caller
	if err == nil {
		if who, err = s.callerOf(ctx); err != nil {
			s.mu.Unlock()
		}
	}
	if err != nil {
		s.met.op(op, start, &err)
		return fillErr(out, err)
	}
	defer s.mu.Unlock()
	now := s.now()
	f := newBatchFinder(&s.mu.objs, len(puts), func(i int) string { return puts[i].Key })
	for i, p := range puts {
		if out[i] != nil {
			continue
		}
		slot, ok := s.hintedLocked(&p)
		if !ok {
			slot, ok = f.find(i)
		}
		if !ok {
			if err := validateKey(p.Key, s.cfg.MaxKeyLen); err != nil {
				out[i] = err
				continue
			}
		}
		if err := s.mayFinishLocked(who, p, slot, ok); err != nil {
			out[i] = err
			continue
		}
		var o *object
		if ok {
			o = s.mu.objs.at(slot)
		}
		if !ok || o.token != p.Token {
			if ts, late := s.mu.timedOut[p.Token]; late && s.mu.objs.key(ts) == p.Key {
				// The writer's copies are done (it ends or revokes only
				// after them): the range is free at last.
				s.freeObjectLocked(ts, now)
				if op == opPutEnd {
					out[i] = fmt.Errorf("%w: put of key %q was revoked (put timeout %v, or the writer's registration ended); it was not made visible", ErrNotFound, p.Key, s.cfg.PutTimeout)
				}
				continue
			}
		}
		switch {
		case !ok || o.token != p.Token:
			out[i] = fmt.Errorf("%w: no put of key %q with token %#x in progress (revoked, timed out or never started)", ErrNotFound, p.Key, p.Token)
		case op == opPutEnd && o.state == stateVisible:
			// A retried PutEnd.
		case op == opPutEnd && !s.repsUsableLocked(slot):
			// Its provider is leaving or was reported unreachable: readers
			// would get no replica of it, so the put fails now rather than
			// report success for bytes nobody can read.
			s.freeObjectLocked(slot, now)
			out[i] = fmt.Errorf("%w: put of key %q revoked: a segment it was written to is draining or its provider was reported unreachable", ErrNotFound, p.Key)
		case op == opPutEnd:
			s.unchargeLocked(o)
			if u := s.mu.softUntil[slot]; o.flags&flagSoftPinTTL != 0 && u < 0 {
				s.mu.softUntil[slot] = now - u // the soft pin's TTL runs from now
			}
			o.state = stateVisible
			o.stamp = now
			s.removePendingLocked(slot)
			o.aux = 0 // from writer to reader count
			s.mu.visible++
			s.listLocked(slot)
			s.mu.flow.putBytes += o.size
		case o.state == stateVisible:
			out[i] = fmt.Errorf("%w: put of key %q already ended; use Remove", ErrWrongState, p.Key)
		default:
			s.freeObjectLocked(slot, now)
		}
	}
	s.rd.sink.Add(f.sink)
	s.met.op(op, start, &err)
	nok := 0
	for _, e := range out {
		if e == nil {
			nok++
		}
	}
	s.met.items(op, len(puts), nok, func(i int) error { return out[i] })
	return out
}

func fillErr(out []error, err error) []error {
	for i := range out {
		out[i] = err
	}
	return out
}

// GetReplicas implements Client. The leases a ReleaseCarry in ctx names
// are ended after the lookup (and its lock) and only when it succeeded: a
// call that fails leaves them to its caller.
func (s *Service) GetReplicas(ctx context.Context, keys []string) ([]GetResult, error) {
	out, err := s.getReplicas(ctx, keys)
	if c := ReleasesFrom(ctx); err == nil && c != nil && len(c.IDs) > 0 {
		if c.Released = s.releaseLeases(ctx, c.IDs) == nil; c.Released {
			s.met.carriedReleases.Add(float64(len(c.IDs)))
		}
	}
	return out, err
}

func (s *Service) getReplicas(ctx context.Context, keys []string) (_ []GetResult, err error) {
	defer s.met.op(opGet, time.Now(), &err)
	if err := s.checkBatch(len(keys)); err != nil {
		return nil, err
	}
	out := make([]GetResult, len(keys))
	// Only what is cheap before the lookup: a key found below is one a
	// PutStart validated, so the rest of validateKey (UTF-8) runs only for
	// the keys not found (as in putFinish).
	for i, k := range keys {
		if k == "" || len(k) > s.cfg.MaxKeyLen {
			out[i].Err = validateKey(k, s.cfg.MaxKeyLen)
		}
	}
	// Shared: the read path (readpath.go). Below, only the lease fields of
	// the objects found change, each under its stripe.
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	now := s.now()
	until := now + int64(s.cfg.LeaseTTL)
	expiry := time.Unix(0, until)
	rd := s.readerReachLocked(ctx)
	var backing []Replica
	f := newBatchFinder(&s.mu.objs, len(keys), func(i int) string { return keys[i] })
	var sink, getBytes uint64
	// The stripe of the object at hand is held until the next object is
	// in another one; the periods the call begins go to a shard of its own.
	g := leaseGrant{now: now, until: until, shard: s.rd.calls.Add(1) % nLeaseShards}
	if p, ok := PrincipalFrom(ctx); ok {
		g.owner = p.Name // only it (or an admin) may release or renew the leases
	}
	f.warm = func(slot uint32) {
		// A visible candidate's replicas: replicaLocked reads their
		// allocator blocks.
		if s.mu.objs.at(slot).state != stateVisible {
			return
		}
		for _, r := range s.repsLocked(slot) {
			_, n, _ := s.mu.segs[r.seg].al.Span(r.ref)
			sink += n
		}
	}
	for i, k := range keys {
		if out[i].Err != nil {
			continue
		}
		slot, ok := f.find(i)
		if !ok || s.mu.objs.at(slot).state != stateVisible {
			if out[i].Err = validateKey(k, s.cfg.MaxKeyLen); out[i].Err == nil {
				out[i].Err = fmt.Errorf("%w: key %q", ErrNotFound, k)
			}
			continue
		}
		if backing == nil {
			backing = make([]Replica, 0, len(keys)-i)
		}
		start := len(backing)
		far := 0
		for _, r := range s.repsLocked(slot) {
			switch sg := s.mu.segs[r.seg]; {
			case !sg.usable():
			case !s.reachesLocked(rd, sg):
				far++
			default:
				backing = append(backing, s.replicaLocked(r))
			}
		}
		if len(backing) == start {
			if far > 0 {
				out[i].Err = fmt.Errorf("%w: key %q: no replica reachable from reader %q on node %q (fabric domain %q)",
					ErrNotFound, k, readerOf(ctx), rd.node, rd.domain)
			} else {
				out[i].Err = fmt.Errorf("%w: key %q: all replicas are on draining or unreachable segments", ErrNotFound, k)
			}
			continue
		}
		o := s.mu.objs.at(slot)
		g.stripe.lock(s.rd.stripe(slot))
		o.stamp = now
		id := s.leaseLocked(slot, &g, len(keys)-i)
		getBytes += o.size
		out[i] = GetResult{Size: o.size, Replicas: backing[start:len(backing):len(backing)], LeaseExpiry: expiry, LeaseTTL: s.cfg.LeaseTTL, LeaseID: id}
	}
	g.stripe.unlock()
	g.seal(&s.rd)
	if len(g.queued) > 0 {
		s.rd.wheel.Lock()
		b := bucketOf(until)
		s.mu.leaseQ[b] = append(s.mu.leaseQ[b], g.queued...)
		s.rd.wheel.Unlock()
	}
	s.rd.getBytes.Add(getBytes)
	s.rd.sink.Add(sink + f.sink)
	s.met.items(opGet, len(keys), -1, func(i int) error { return out[i].Err })
	return out, nil
}

// leaseGrant is what the leases of one GetReplicas call share: when they
// are granted and end, and to whom; the stripe held; the call's shard of
// the lease table and its block there, where its leases go (one map
// insert and one counter add per call: per key, the shared counter, the
// map's buckets and their churn would bounce between the cores of
// concurrent calls); and the slots the call puts on the lease wheel at
// until's bucket — appended to the wheel once, before the call unlocks the
// Service, so the wheel cannot look at them before.
type leaseGrant struct {
	now, until int64
	owner      string // the caller's principal, "" without authentication
	stripe     heldStripe
	shard      uint64 // 0 … nLeaseShards-1
	// blk is the block the call's leases go to (number num), next its
	// first unused entry.
	blk    *leaseBlock
	num    uint64
	next   int
	queued []uint32
}

// newLease grants a lease of period (0: a period it begins) on slot in the
// call's block (opening one for up to n more when there is none or it is
// full) and returns its id and its period's.
func (g *leaseGrant) newLease(r *readPath, slot uint32, period uint64, n int) (id, per uint64) {
	if g.blk == nil || g.next == len(g.blk.entries) {
		g.seal(r)
		g.blk, g.num = r.openBlock(g.shard, min(n, leaseBlockMax), g.until, g.owner)
		g.next = 0
	}
	off := g.next
	g.next++
	id = g.num<<(leaseBlockBits+leaseShardBits) | uint64(off)<<leaseShardBits | g.shard
	if period == 0 {
		period = id
	}
	e := &g.blk.entries[off]
	e.slot = slot
	e.period.Store(period) // after the slot: a release that sees the period sees it
	return id, period
}

// seal seals the call's block, if any.
func (g *leaseGrant) seal(r *readPath) {
	if g.blk != nil {
		r.sealBlock(g.shard, g.num, g.blk, g.next)
		g.blk = nil
	}
}

// leaseLocked grants visible object slot a read lease until g.until and
// returns its id, the reader's own: until then (or until every lease of
// the period it joins or begins is released) the object is neither
// evicted nor freed. The caller holds the Service's lock shared and
// slot's stripe; left is how many leases the call may still grant, this
// one included.
func (s *Service) leaseLocked(slot uint32, g *leaseGrant, left int) uint64 {
	o := s.mu.objs.at(slot)
	if o.leaseUntil <= g.now {
		s.endLeasePeriodLocked(slot) // ended, the wheel just has not seen it yet
	}
	o.leaseUntil = max(o.leaseUntil, g.until)
	if o.flags&flagLeaseQueued == 0 {
		o.flags |= flagLeaseQueued
		if bucketOf(o.leaseUntil) == bucketOf(g.until) {
			if g.queued == nil {
				g.queued = make([]uint32, 0, left) // one allocation per call
			}
			g.queued = append(g.queued, slot)
		} else {
			s.queueLeaseLocked(slot, o.leaseUntil)
		}
	}
	// o.leaseID names the period (the id of the lease that began it); the
	// period counts its unreleased leases in o.aux.
	var period uint64
	if o.aux > 0 {
		period = o.leaseID
	}
	id, period := g.newLease(&s.rd, slot, period, left)
	o.leaseID = period
	if o.aux < ^uint32(0) { // saturated: the period then ends only by expiry
		o.aux++
	}
	return id
}

// bucketOf is the lease wheel's bucket for an expiry at until.
func bucketOf(until int64) int64 { return (until + leaseBucket - 1) / leaseBucket }

// queueLeaseLocked puts slot on the lease wheel at until's bucket.
func (s *Service) queueLeaseLocked(slot uint32, until int64) {
	b := bucketOf(until)
	s.rd.wheel.Lock()
	s.mu.leaseQ[b] = append(s.mu.leaseQ[b], slot)
	s.rd.wheel.Unlock()
}

// Exists implements Client.
func (s *Service) Exists(ctx context.Context, keys []string, lease bool) (_ []bool, err error) {
	defer s.met.op(opExists, time.Now(), &err)
	if err := s.checkBatch(len(keys)); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := validateKey(k, s.cfg.MaxKeyLen); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]bool, len(keys))
	now := s.now()
	until := now + int64(s.cfg.LeaseTTL)
	for i, k := range keys {
		slot, ok := s.mu.objs.lookup(k)
		out[i] = ok && s.mu.objs.at(slot).state == stateVisible
		if out[i] && lease {
			// Not a reader's lease (no copy depends on it, so it does not
			// hold up an unmount): it keeps the object from eviction and
			// plain removal until it expires, whatever readers release.
			o := s.mu.objs.at(slot)
			if o.leaseUntil <= now {
				s.endLeasePeriodLocked(slot) // ended, the wheel just has not seen it yet
			}
			o.stamp = now
			o.flags |= flagExistLease
			o.leaseUntil = max(o.leaseUntil, until)
			if o.flags&flagLeaseQueued == 0 {
				o.flags |= flagLeaseQueued
				s.queueLeaseLocked(slot, o.leaseUntil)
			}
		}
	}
	return out, nil
}

// Remove implements Client.
func (s *Service) Remove(ctx context.Context, keys []string, force bool) []error {
	start := time.Now()
	out := make([]error, len(keys))
	err := s.checkBatch(len(keys))
	if err == nil {
		for i, k := range keys {
			out[i] = validateKey(k, s.cfg.MaxKeyLen)
		}
		err = s.lock(ctx)
	}
	if err != nil {
		s.met.op(opRemove, start, &err)
		return fillErr(out, err)
	}
	defer s.mu.Unlock()
	now := s.now()
	for i, k := range keys {
		if out[i] != nil {
			continue
		}
		slot, ok := s.mu.objs.lookup(k)
		if !ok {
			out[i] = fmt.Errorf("%w: key %q", ErrNotFound, k)
			continue
		}
		out[i] = s.removeLocked(slot, force, now)
	}
	s.met.op(opRemove, start, &err)
	s.met.items(opRemove, len(keys), -1, func(i int) error { return out[i] })
	return out
}

func (s *Service) removeLocked(slot uint32, force bool, now int64) error {
	o := s.mu.objs.at(slot)
	switch {
	case o.state == statePending:
		return fmt.Errorf("%w: key %q: put in progress; use PutRevoke", ErrWrongState, s.mu.objs.key(slot))
	case o.leaseUntil <= now:
		s.freeObjectLocked(slot, now)
	case !force:
		return fmt.Errorf("%w: key %q: leased until %v", ErrHasLease, s.mu.objs.key(slot), time.Unix(0, o.leaseUntil).UTC().Format(time.RFC3339Nano))
	default:
		// Invisible now; the bytes stay allocated until the lease ends.
		s.mu.objs.unindex(slot)
		o.state = stateZombie
		s.unlistLocked(slot)
		s.mu.visible--
		s.mu.zombies++
	}
	return nil
}

// RemoveAll implements Client.
func (s *Service) RemoveAll(ctx context.Context, f Filter, force bool) (n int, err error) {
	defer s.met.op(opRemoveAll, time.Now(), &err)
	match, err := f.matcher()
	if err != nil {
		return 0, err
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return 0, err
	}
	if force && !who.admin() {
		return 0, fmt.Errorf("%w: RemoveAll with force needs the admin role (%q is %s)", ErrPermission, who.Name, who.Role)
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	now := s.now()
	for slot := range s.mu.objs.len() {
		if s.mu.objs.at(uint32(slot)).state != stateVisible {
			continue
		}
		if !match(s.mu.objs.keyBytes(uint32(slot))) {
			continue
		}
		if s.removeLocked(uint32(slot), force, now) == nil {
			n++
		}
	}
	return n, nil
}

// ---- background work ----

// Reap runs one pass of the background work now: it expires clients whose
// TTL ran out, revokes puts past the put timeout, ends leases (freeing
// objects removed by force), and evicts tiers above their high watermark.
// The reaper goroutine calls it every Config.ReapInterval; tests with a
// manual clock call it directly.
func (s *Service) Reap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return
	}
	now := s.now()
	for id, c := range s.mu.clients {
		if c.expires <= now {
			s.expireClientLocked(id, now)
		}
	}
	for i := len(s.mu.pending) - 1; i >= 0; i-- { // backwards: see retireClientLocked
		if slot := s.mu.pending[i]; s.mu.objs.at(slot).stamp <= now {
			s.timeOutPutLocked(slot)
		}
	}
	for seq, r := range s.mu.retired {
		if r.until <= now {
			s.freePutsOfLocked(seq, now)
			delete(s.mu.retired, seq)
		}
	}
	for id, q := range s.mu.quarantine {
		if q.until <= now {
			delete(s.mu.quarantine, id)
		}
	}
	for _, sg := range s.mu.segs {
		if sg != nil && sg.draining && sg.drainUntil <= now {
			// The owner stopped retrying its unmount (it gave up closing,
			// or will unmount later): the capacity is usable again.
			sg.draining = false
			s.mu.place.update(sg)
			s.log.Warn("master: segment drain lapsed: its owner did not retry the unmount; placing on it again",
				"segment", sg.desc.Key().String(), "owner", sg.desc.Owner, "drain_timeout", s.cfg.DrainTimeout)
		}
	}
	s.expireLeasesLocked(now)
	s.rd.sweep(now)
	s.pruneViewsLocked(now)
	s.evictToWatermarksLocked(now)
}

// newToken returns a random put token, not 0: a writer cannot guess
// another's (and with authentication a put is also bound to its writer).
// math/rand/v2's source is the runtime's ChaCha8, per thread: no lock.
func newToken() uint64 {
	for {
		if t := rand.Uint64(); t != 0 {
			return t
		}
	}
}

// tokenLocked returns t, drawn by newToken without the lock, or another
// when a timed-out put still holds t.
func (s *Service) tokenLocked(t uint64) uint64 {
	for {
		if _, dup := s.mu.timedOut[t]; !dup {
			return t
		}
		t = newToken()
	}
}

// quotaLocked checks that writer may start one more put of size bytes.
func (s *Service) quotaLocked(c *clientState, size uint64) error {
	q := s.cfg.Quotas
	switch {
	case q.PendingPuts > 0 && c.pending >= q.PendingPuts:
		return fmt.Errorf("%w: client %q has %d puts in progress (quota %d)", ErrQuota, c.info.ID, c.pending, q.PendingPuts)
	case q.ReservedBytes > 0 && c.reserved+int64(min(size, 1<<62)) > q.ReservedBytes:
		return fmt.Errorf("%w: client %q reserves %d bytes in puts in progress; %d more exceeds its quota of %d", ErrQuota, c.info.ID, c.reserved, size, q.ReservedBytes)
	}
	return nil
}

// unchargeLocked takes a put that is no longer in progress off its
// writer's quota (if the writer is still registered).
func (s *Service) unchargeLocked(o *object) {
	if c, ok := s.mu.bySeq[o.aux]; ok {
		c.pending--
		c.reserved -= int64(o.size)
	}
}

// mayFinishLocked checks that who may end or revoke put p, whose key the
// index maps to slot (found false: to none): its writer's principal (the
// put's token alone does not suffice with authentication).
func (s *Service) mayFinishLocked(who caller, p PutRef, slot uint32, found bool) error {
	if who.admin() {
		return nil
	}
	var seq uint32
	if found && s.mu.objs.at(slot).token == p.Token {
		seq = s.mu.objs.at(slot).aux
		if s.mu.objs.at(slot).state != statePending {
			return nil // visible: a retried PutEnd changes nothing
		}
	} else if slot, ok := s.mu.timedOut[p.Token]; ok {
		seq = s.mu.objs.at(slot).aux
	} else {
		return nil // not found: reported as such
	}
	owner := ""
	if c, ok := s.mu.bySeq[seq]; ok {
		owner = c.principal
	} else if r, ok := s.mu.retired[seq]; ok {
		owner = r.principal
	}
	if !who.mayActAs(owner) {
		return fmt.Errorf("%w: put of key %q belongs to %q, not %q", ErrPermission, p.Key, owner, who.Name)
	}
	return nil
}

// freePutsOfLocked frees the timed-out and revoked puts of registration seq:
// its writer can no longer write them.
func (s *Service) freePutsOfLocked(seq uint32, now int64) {
	for _, slot := range s.mu.timedOut {
		if s.mu.objs.at(slot).aux == seq {
			s.freeObjectLocked(slot, now)
		}
	}
}

// timeOutPutLocked ends a put in progress that passed its timeout or whose
// writer's registration expired: it can no longer become visible and its
// key is free for a new put, but its bytes stay reserved (counted as a
// pending put) until its writer ends or revokes it, registers again, or
// (after an expiry) the retiredReg deadline passes.
func (s *Service) timeOutPutLocked(slot uint32) {
	o := s.mu.objs.at(slot)
	s.log.Info("master: put revoked; its bytes stay reserved until its writer can no longer write them",
		"key", s.mu.objs.key(slot), "writer", s.writerLocked(o.aux))
	s.met.errs.add("put_timeout", "revoked", fmt.Sprintf("put of key %q by %q revoked (put timeout %v, or its writer's registration ended)", s.mu.objs.key(slot), s.writerLocked(o.aux), s.cfg.PutTimeout))
	s.mu.objs.unindex(slot)
	s.removePendingLocked(slot)
	o.state = stateTimedOut
	s.mu.timedOut[o.token] = slot
	s.met.putTimeouts.Inc()
}

// addPendingLocked adds slot, a put just started, to Service.mu.pending.
func (s *Service) addPendingLocked(slot uint32) {
	s.mu.objs.at(slot).leaseID = uint64(len(s.mu.pending))
	s.mu.pending = append(s.mu.pending, slot)
}

// removePendingLocked takes slot, a put that is no longer in progress, out
// of Service.mu.pending: the last entry moves into its place.
func (s *Service) removePendingLocked(slot uint32) {
	o := s.mu.objs.at(slot)
	i, last := o.leaseID, len(s.mu.pending)-1
	moved := s.mu.pending[last]
	s.mu.pending[i] = moved
	s.mu.objs.at(moved).leaseID = i
	s.mu.pending = s.mu.pending[:last]
	o.leaseID = 0
}

func (s *Service) writerLocked(seq uint32) string {
	if c, ok := s.mu.bySeq[seq]; ok {
		return c.info.ID
	}
	return ""
}

// endLeasePeriodLocked forgets slot's current lease period: all its leases
// were released or have ended. The caller holds the lock exclusively, or
// shared and slot's stripe.
func (s *Service) endLeasePeriodLocked(slot uint32) {
	o := s.mu.objs.at(slot)
	if (o.state == stateVisible || o.state == stateZombie) && o.aux > 0 {
		// Its unreleased leases stay in the table until released or
		// swept; they name this period, which no later one will reuse.
		o.aux = 0
	}
}

// ReleaseLeases implements Client. It holds the lock shared (the read
// path, readpath.go); zombies whose last lease it released are freed after
// it takes the lock exclusively.
func (s *Service) ReleaseLeases(ctx context.Context, ids []uint64) (err error) {
	defer s.met.op(opReleaseLeases, time.Now(), &err)
	return s.releaseLeases(ctx, ids)
}

// releaseLeases is ReleaseLeases without its call metrics: a GetReplicas
// carrying releases (ReleaseCarry) counts as a get.
func (s *Service) releaseLeases(ctx context.Context, ids []uint64) error {
	if err := s.checkBatch(len(ids)); err != nil {
		return err
	}
	if err := s.rlock(ctx); err != nil {
		return err
	}
	// A caller that is not authenticated where the Service requires it
	// releases only leases granted without authentication (none there).
	who, _ := s.callerOf(ctx)
	now := s.now()
	ended := 0
	var zombies []zombieRef
	// A batch's ids come in runs of one shard (the call that began their
	// periods), and of a few stripes: the stripe is held across a run.
	var stripe heldStripe
	var look leaseLookup
	for _, id := range ids {
		e, z := s.releaseLeaseLocked(id, who, now, &stripe, &look)
		if e {
			ended++
		}
		if z.token != 0 {
			zombies = append(zombies, z)
		}
	}
	stripe.unlock()
	s.mu.RUnlock()
	if ended > 0 {
		s.met.leaseReleases.Add(float64(ended)) // once: an atomic add per lease was a quarter of the call
	}
	if len(zombies) > 0 {
		s.mu.Lock()
		for _, z := range zombies {
			s.freeZombieLocked(z, now)
		}
		s.mu.Unlock()
	}
	return nil
}

// zombieRef names a zombie whose last lease was released: its slot, and
// its put's token, which tells it from whatever the slot holds later.
type zombieRef struct {
	slot  uint32
	token uint64 // 0: none
}

// freeZombieLocked frees z if its slot still holds it, unleased (the lease
// wheel or a segment's drop may have freed it since its last release).
func (s *Service) freeZombieLocked(z zombieRef, now int64) {
	if o := s.mu.objs.at(z.slot); o.state == stateZombie && o.token == z.token && o.aux == 0 {
		s.freeObjectLocked(z.slot, now)
	}
}

// releaseLeaseLocked releases read lease id on behalf of who, and reports
// whether that ended its period (the caller counts it in
// metrics.leaseReleases) and, when that period was a zombie's, the zombie,
// for the caller to free with the lock held exclusively. A lease counts
// once on its period, however often it is released; unknown ids, leases
// already released, leases whose period ended (expired, or its object
// freed) and leases granted to another principal are ignored. The caller
// holds the Service's lock, shared or exclusively, and passes the stripe
// it holds (stripe.unlock releases it when the caller is done):
// releaseLeaseLocked takes the object's stripe through it, and the lease's
// block through look (leaseLookup), which must not outlive the hold.
func (s *Service) releaseLeaseLocked(id uint64, who caller, now int64, stripe *heldStripe, look *leaseLookup) (ended bool, z zombieRef) {
	period, slot, ok := s.rd.take(id, who, look)
	if !ok {
		return false, z
	}
	stripe.lock(s.rd.stripe(slot))
	o := s.mu.objs.at(slot)
	// The period may have ended (expired, or its object freed and the
	// slot reused) since the lease was granted: period ids are never
	// reused, so it no longer matches.
	if o.aux == 0 || o.leaseID != period || (o.state != stateVisible && o.state != stateZombie) {
		return false, z
	}
	if o.aux == ^uint32(0) {
		return false, z // saturated count: the period ends by expiry
	}
	if o.aux--; o.aux > 0 {
		return false, z
	}
	// The last reader's copy is done: the object is unleased now,
	// but for an exist check's lease.
	o.leaseUntil = 0
	if o.flags&flagExistLease != 0 && o.stamp+int64(s.cfg.LeaseTTL) > now {
		o.leaseUntil = o.stamp + int64(s.cfg.LeaseTTL) // still queued: flagLeaseQueued stays
	}
	if o.state == stateZombie {
		z = zombieRef{slot: slot, token: o.token}
	}
	return true, z
}

// viewKey names the views one client holds on one lease period.
type viewKey struct {
	client string
	lease  uint64
}

// viewHold is how many views a client holds on a lease period (one per
// HoldLeases hold, until released) and until when it renewed them.
type viewHold struct {
	n     uint32
	until int64
}

// HoldLeases implements Client.
func (s *Service) HoldLeases(ctx context.Context, req HoldReq) (_ HoldResult, err error) {
	defer s.met.op(opHoldLeases, time.Now(), &err)
	if req.Client == "" {
		return HoldResult{}, fmt.Errorf("%w: hold leases: client id is empty", ErrInvalid)
	}
	if err := validateID("client id", req.Client); err != nil {
		return HoldResult{}, err
	}
	if err := s.checkBatch(len(req.Hold) + len(req.Renew) + len(req.Release)); err != nil {
		return HoldResult{}, err
	}
	who, err := s.callerOf(ctx)
	if err != nil {
		return HoldResult{}, err
	}
	_, now, err := s.lockAs(ctx, req.Client, "hold leases: client")
	if err != nil {
		return HoldResult{}, err
	}
	defer s.mu.Unlock()
	until := now + int64(s.cfg.LeaseTTL)
	res := HoldResult{TTL: s.cfg.LeaseTTL, Errs: make([]error, len(req.Hold)+len(req.Renew))}
	for i, id := range req.Hold {
		if res.Errs[i] = s.renewLeaseLocked(id, who, now, until); res.Errs[i] == nil {
			k := viewKey{req.Client, id}
			v := s.mu.views[k]
			v.n++
			v.until = until
			s.mu.views[k] = v
		}
	}
	for j, id := range req.Renew {
		i := len(req.Hold) + j
		if res.Errs[i] = s.renewLeaseLocked(id, who, now, until); res.Errs[i] == nil {
			k := viewKey{req.Client, id}
			if v, ok := s.mu.views[k]; ok {
				v.until = until
				s.mu.views[k] = v
			}
		}
	}
	for _, id := range req.Release {
		k := viewKey{req.Client, id}
		if v, ok := s.mu.views[k]; ok {
			if v.n--; v.n == 0 {
				delete(s.mu.views, k)
			} else {
				s.mu.views[k] = v
			}
		}
		var stripe heldStripe
		var look leaseLookup
		ended, z := s.releaseLeaseLocked(id, who, now, &stripe, &look)
		stripe.unlock()
		if ended {
			s.met.leaseReleases.Inc()
		}
		if z.token != 0 {
			s.freeZombieLocked(z, now)
		}
	}
	return res, nil
}

// renewLeaseLocked extends lease id's period until until, on behalf of who
// (the principal it was granted to, or an admin). It fails when the lease
// was released or its period ended — expired (even if Reap has not seen it
// yet), or its object freed: the holder's bytes may be gone — and when a replica of
// the object is on a segment that is draining or was reported unreachable:
// the lease then ends at its expiry, so that the segment can drain.
func (s *Service) renewLeaseLocked(id uint64, who caller, now, until int64) error {
	b, off, ok := s.rd.lease(id)
	if !ok {
		return fmt.Errorf("%w: lease %d ended", ErrNotFound, id)
	}
	if b.owner != "" && !who.mayActAs(b.owner) {
		return fmt.Errorf("%w: lease %d was granted to %q, not %q", ErrPermission, id, b.owner, who.Name)
	}
	e := &b.entries[off]
	slot := e.slot
	o := s.mu.objs.at(slot)
	if o.aux == 0 || o.leaseID != e.period.Load() || (o.state != stateVisible && o.state != stateZombie) {
		// Its period ended (expired, released, or its object freed).
		return fmt.Errorf("%w: lease %d ended", ErrNotFound, id)
	}
	if o.leaseUntil <= now {
		return fmt.Errorf("%w: lease %d of key %q expired %v ago", ErrNotFound, id, s.mu.objs.key(slot), time.Duration(now-o.leaseUntil))
	}
	for _, r := range s.repsLocked(slot) {
		if sg := s.mu.segs[r.seg]; !sg.usable() {
			return fmt.Errorf("%w: lease %d of key %q: segment %s is draining or unreachable; the lease ends at its expiry",
				ErrWrongState, id, s.mu.objs.key(slot), sg.desc.Key())
		}
	}
	// Still queued on the lease wheel (it has not expired): the wheel
	// requeues it at the later expiry when it gets there.
	o.leaseUntil = max(o.leaseUntil, until)
	b.until = max(b.until, until) // the sweep keeps the block while the lease is renewed
	return nil
}

// viewsLocked returns how many views are held, in all and per client.
func (s *Service) viewsLocked(now int64) (total int, per map[string]int) {
	s.pruneViewsLocked(now)
	per = map[string]int{}
	for k, v := range s.mu.views {
		per[k.client] += int(v.n)
		total += int(v.n)
	}
	return total, per
}

// pruneViewsLocked forgets views whose lease period ended or that their
// holder stopped renewing.
func (s *Service) pruneViewsLocked(now int64) {
	for k, v := range s.mu.views {
		if _, _, ok := s.rd.lease(k.lease); !ok || v.until <= now {
			delete(s.mu.views, k)
		}
	}
}

// ReportUnreachable implements Client.
func (s *Service) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) (err error) {
	defer s.met.op(opReportUnreachable, time.Now(), &err)
	if err := validateID("client id", reporter); err != nil {
		return err
	}
	if err := validateSegmentKey(k); err != nil {
		return err
	}
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	_, now, err := s.lockAs(ctx, reporter, "report unreachable: reporter")
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	slot, err := s.segmentLocked(k)
	if err != nil {
		return err // gone already
	}
	sg := s.mu.segs[slot]
	if sg.desc.Owner == reporter {
		return fmt.Errorf("%w: client %q reports its own segment %s unreachable", ErrInvalid, reporter, k)
	}
	s.met.unreachableReports.Inc()
	s.met.errs.add("report_unreachable", "unreachable", fmt.Sprintf("client %q reports segment %s of %q unreachable: %s", reporter, k, sg.desc.Owner, reason))
	if !sg.suspect {
		s.log.Warn("master: segment reported unreachable; no new puts or leases on it until its provider heartbeats",
			"segment", k.String(), "reporter", reporter, "reason", reason)
	}
	// Its provider heartbeats every third of its TTL: if it is alive, one
	// arrives within half the TTL; if not, it is expired then, not at the
	// full TTL.
	if c, ok := s.mu.clients[sg.desc.Owner]; ok {
		c.expires = min(c.expires, now+int64(c.ttl/2))
		if !sg.suspect {
			c.suspects++
		}
	}
	sg.suspect = true
	s.mu.place.update(sg)
	return nil
}

// expireLeasesLocked ends the leases that ran out by now, freeing the
// objects removed by force while they were leased (zombies).
func (s *Service) expireLeasesLocked(now int64) {
	nowBucket := now / leaseBucket
	for b, slots := range s.mu.leaseQ {
		if b > nowBucket {
			continue
		}
		delete(s.mu.leaseQ, b)
		for _, slot := range slots {
			o := s.mu.objs.at(slot)
			if o.state == stateFree || o.flags&flagLeaseQueued == 0 {
				continue
			}
			if o.leaseUntil > now {
				s.queueLeaseLocked(slot, o.leaseUntil)
				continue
			}
			o.flags &^= flagLeaseQueued | flagExistLease
			if o.leaseUntil != 0 { // 0: its readers released it (counted then)
				s.met.leaseExpiries.Inc()
			}
			s.endLeasePeriodLocked(slot)
			if o.state == stateZombie {
				s.freeObjectLocked(slot, now)
			}
		}
	}
}

// ---- stats ----

// Stats implements Client.
func (s *Service) Stats(ctx context.Context) (_ Stats, err error) {
	defer s.met.op(opStats, time.Now(), &err)
	if err := s.lock(ctx); err != nil {
		return Stats{}, err
	}
	defer s.mu.Unlock()
	return s.statsLocked(), nil
}

func (s *Service) statsLocked() Stats {
	nviews, views := s.viewsLocked(s.now())
	st := Stats{
		Views:       nviews,
		Objects:     s.mu.visible,
		PendingPuts: len(s.mu.pending) + len(s.mu.timedOut),
		Segments:    len(s.mu.segIndex),
		Clients:     len(s.mu.clients),
		Evictions:   s.mu.evictions,
	}
	type locKey struct {
		node string
		tier segment.Tier
		loc  int32
	}
	locs := map[locKey]*UsageStats{}
	var tiers [3]*UsageStats
	provided := map[string]int{}
	handles := map[string]uint8{} // owner → bit per segment.HandleKind (< 8)
	for _, sg := range s.mu.segs {
		if sg == nil {
			continue
		}
		d := sg.desc
		provided[d.Owner]++
		if d.Handle.Kind < 8 {
			handles[d.Owner] |= 1 << d.Handle.Kind
		}
		if tiers[d.Tier] == nil {
			tiers[d.Tier] = &UsageStats{Tier: d.Tier, Location: -1}
		}
		k := locKey{d.Node, d.Tier, d.Location}
		if locs[k] == nil {
			locs[k] = &UsageStats{Node: d.Node, Tier: d.Tier, Location: d.Location}
		}
		for _, u := range []*UsageStats{tiers[d.Tier], locs[k]} {
			u.Segments++
			u.Capacity += sg.al.Size()
			u.Used += sg.al.Used()
		}
	}
	for _, t := range tiers {
		if t != nil {
			st.Tiers = append(st.Tiers, *t)
		}
	}
	for _, u := range locs {
		st.Locations = append(st.Locations, *u)
	}
	sortUsage(st.Locations)
	st.PerClient = make([]ClientStats, 0, len(s.mu.clients))
	for id, c := range s.mu.clients {
		cs := ClientStats{ID: id, Node: c.info.Node, Segments: provided[id], Mapped: c.mapped,
			Driver: c.info.Driver, FabricDomain: c.info.FabricDomain, Views: views[id]}
		for k := segment.HandleKind(0); k < 8; k++ {
			if handles[id]&(1<<k) != 0 {
				cs.Handles = append(cs.Handles, k)
			}
		}
		st.PerClient = append(st.PerClient, cs)
	}
	slices.SortFunc(st.PerClient, func(a, b ClientStats) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// errResult classifies an error for metrics.
func errResult(err error) result {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, ErrInvalid):
		return resInvalid
	case errors.Is(err, ErrNotFound):
		return resNotFound
	case errors.Is(err, ErrAlreadyExists):
		return resAlreadyExists
	case errors.Is(err, ErrNoSpace):
		return resNoSpace
	case errors.Is(err, ErrHasLease):
		return resHasLease
	case errors.Is(err, ErrWrongState):
		return resWrongState
	case errors.Is(err, ErrUnknownSegment):
		return resUnknownSegment
	case errors.Is(err, ErrGenerationMismatch):
		return resGenerationMismatch
	case errors.Is(err, ErrUnknownClient):
		return resUnknownClient
	case errors.Is(err, ErrClosed):
		return resClosed
	case errors.Is(err, ErrPermission), errors.Is(err, ErrUnauthenticated):
		return resPermission
	case errors.Is(err, ErrQuota):
		return resQuota
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resCanceled
	}
	return resError
}
