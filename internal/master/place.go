package master

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// target is where a put's data will be read from, and what its writer
// can reach.
type target struct {
	node      string
	numa, dev int32
	writer    reach
}

func (s *Service) targetLocked(p *Placement) target {
	c, ok := s.mu.clients[p.Client]
	if !ok || p.Client == "" {
		c = nil
	}
	return targetOf(p, c)
}

// targetOf is the target of a put placed by p and written by c (nil when
// unknown).
func targetOf(p *Placement, c *clientState) target {
	t := target{node: p.Node, numa: p.NUMANode, dev: p.Device}
	if c != nil {
		// The writer copies into the segment: it must be able to import
		// it, whatever Node says about the readers.
		t.writer = reachOf(c)
		if t.node == "" {
			t.node = c.info.Node
		}
		if t.numa < 0 {
			t.numa = c.info.NUMANode
		}
		if t.dev < 0 {
			t.dev = c.info.Device
		}
	}
	return t
}

// tierOrders are the tier orders tierOrder returns (shared, read-only).
var tierOrders = [4][]segment.Tier{
	{segment.TierDRAM, segment.TierHBM},
	{segment.TierDRAM},
	{segment.TierHBM, segment.TierDRAM},
	{segment.TierHBM},
}

// tierOrder returns the tiers p allows, in the order they are tried. The
// slice is shared: do not modify it.
func tierOrder(p *Placement) []segment.Tier {
	switch {
	case p.Tier == segment.TierHBM && p.TierOnly:
		return tierOrders[3]
	case p.Tier == segment.TierHBM:
		return tierOrders[2]
	case p.TierOnly:
		return tierOrders[1]
	}
	return tierOrders[0]
}

// placePlan is what placing a put takes from its placement and writer
// alone: the tiers, the target, the candidate segments and their limits.
// A PutStart's puts mostly share one placement, so it makes the plan once
// per run of puts that do (plan) rather than once per put: on the H200
// host that was a sixth of PutStart's time under the lock
// (docs/perf/logs-2026-12-02-s12/runB/mbench.pprof).
type placePlan struct {
	ok bool
	// What it was made for: the placement's fields it depends on, the
	// writer, and the segments mounted (Service.mu.segVersion: a put may
	// expire a writer, whose segments are then dropped).
	tier         segment.Tier
	tierOnly     bool
	client, node string
	numa, dev    int32
	writer       *clientState
	version      uint64
	tiers        []segment.Tier
	t            target
	cands        *candidates
	largest      uint64
	segs, far    int
	memo         bestMemo
}

// bestMemo is the answer of a plan's last query for a put's first replica
// (bestSegmentLocked, no preferred segments): while no segment has moved
// in the index (placeIndex.moves) a put of the same size gets the same
// answer, so it is taken from here. A batch's puts of one size so make
// one query per run that fills a segment within its slack, not one each
// (dev VM profile: a seventh of PutStart's time under the lock).
type bestMemo struct {
	ok          bool
	moves, need uint64
	slot        uint32
}

// planLocked returns the plan of p written by writer: pl itself when it
// was made for them and is current, else pl remade.
func (s *Service) planLocked(pl *placePlan, p *Placement, writer *clientState) *placePlan {
	ix := &s.mu.place
	if pl.ok && pl.writer == writer && pl.version == s.mu.segVersion && pl.tier == p.Tier && pl.tierOnly == p.TierOnly &&
		pl.numa == p.NUMANode && pl.dev == p.Device && pl.client == p.Client && pl.node == p.Node {
		return pl
	}
	*pl = placePlan{ok: true, tier: p.Tier, tierOnly: p.TierOnly, client: p.Client, node: p.Node, numa: p.NUMANode, dev: p.Device,
		writer: writer, version: s.mu.segVersion, tiers: tierOrder(p), t: targetOf(p, writer)}
	pl.cands = ix.candidatesFor(pl.t.writer, pl.t.node)
	// Size against segment limits: a size no segment of the allowed tiers
	// could ever hold is a bad request, not a full store.
	for _, tier := range pl.tiers {
		pl.far += ix.mounted[tier]
		for _, g := range pl.cands.groups[tier] {
			pl.largest = max(pl.largest, g.max)
			pl.segs += g.n
		}
	}
	pl.far -= pl.segs
	return pl
}

// placeLocked allocates r's replicas, tagged with the object slot, into out.
// writer is r's writer, the registered client r.Placement.Client; pl is a
// plan to reuse (planLocked), made again when it is not r's. When the
// replicas do not fit it evicts and tries once more; then ErrNoSpace. On
// error nothing stays allocated.
func (s *Service) placeLocked(r *PutStartReq, writer *clientState, pl *placePlan, slot uint32, now int64, out []replica) ([]replica, error) {
	n := max(r.Replicas, 1)
	pl = s.planLocked(pl, &r.Placement, writer)
	tiers, t, cands := pl.tiers, pl.t, pl.cands
	largest, segs, far := pl.largest, pl.segs, pl.far
	if segs == 0 && far > 0 {
		return out, fmt.Errorf("%w: key %q: none of the %d segments in tiers %v is reachable from writer %q on node %q (fabric domain %q): posix_fd segments only from their host, fabric segments only within their fabric domain",
			ErrNoSpace, r.Key, far, tiers, r.Placement.Client, t.writer.node, t.writer.domain)
	}
	if segs == 0 {
		return out, fmt.Errorf("%w: key %q: no segment mounted in tiers %v", ErrNoSpace, r.Key, tiers)
	}
	if r.Size > largest {
		return out, fmt.Errorf("%w: key %q: size %d exceeds the largest segment its writer reaches (%d bytes)", ErrInvalid, r.Key, r.Size, largest)
	}
	if n > segs {
		return out, fmt.Errorf("%w: key %q: %d replicas need distinct segments, %d mounted (and reachable)", ErrNoSpace, r.Key, n, segs)
	}
	out, err := s.tryPlaceLocked(r, slot, &t, tiers, cands, n, &pl.memo, out)
	if err == nil || !errors.Is(err, ErrNoSpace) {
		return out, err
	}
	// First reclaim what is already free in all but name: objects removed
	// by force whose leases have ended since the last reap. Then evict.
	if s.mu.zombies > 0 {
		s.expireLeasesLocked(now)
		if out, err = s.tryPlaceLocked(r, slot, &t, tiers, cands, n, &pl.memo, out); !errors.Is(err, ErrNoSpace) {
			return out, err
		}
	}
	// Eviction frees bytes, not a range: in a store of mixed sizes the
	// bytes it freed may lie in holes too small for r. Then it evicts as
	// much again, a bounded number of times, while it still frees bytes.
	need := s.alignUp(r.Size)
	for range maxEvictRounds {
		var freed uint64
		for _, tier := range tiers {
			freed += s.evictLocked(tier, need*uint64(n), now, true)
		}
		cands = s.mu.place.candidatesFor(t.writer, t.node) // eviction unmounts nothing, but do not rely on it
		if out, err = s.tryPlaceLocked(r, slot, &t, tiers, cands, n, &pl.memo, out); err == nil || !errors.Is(err, ErrNoSpace) || freed == 0 {
			return out, err
		}
	}
	return out, err
}

// checkBestMemo, when set (tests), is called at every answer taken from a
// bestMemo with the query's answer made in full.
var checkBestMemo func(memo, full uint32, fullOK bool)

// alignUp is n rounded up to the allocation alignment.
func (s *Service) alignUp(n uint64) uint64 {
	return (n + s.cfg.Alignment - 1) &^ (s.cfg.Alignment - 1)
}

// maxEvictRounds bounds how often one put evicts its size and retries
// before it fails with ErrNoSpace.
const maxEvictRounds = 8

// tryPlaceLocked places r's n replicas, each on the best segment for it
// (bestSegmentLocked) that can allocate it. A segment it takes or tries is
// held out of the index until it returns, which keeps replicas on distinct
// segments and skips a fragmented segment (enough free bytes, no block
// large enough) for the next best.
func (s *Service) tryPlaceLocked(r *PutStartReq, slot uint32, t *target, tiers []segment.Tier, cands *candidates, n int, memo *bestMemo, out []replica) ([]replica, error) {
	out = out[:0]
	ix := &s.mu.place
	held := ix.held[:0]
	var chosen [MaxReplicas]*segment.Descriptor
	var others []uint32
	for len(out) < n {
		var best uint32
		ok := false
		for _, pref := range [2]bool{true, false} {
			if pref && len(r.Placement.Segments) == 0 {
				continue
			}
			if len(out) > 0 {
				// Another provider's segment first, if any: a replica
				// must outlive its provider's exit (another process on
				// the same node will do; the score spreads over nodes).
				others = s.holdOwnersLocked(chosen[:len(out)], others[:0])
				best, ok = s.bestSegmentLocked(r, t, tiers, cands, chosen[:len(out)], pref)
				s.unholdLocked(others)
			}
			switch need := s.alignUp(r.Size); {
			case ok:
			case len(out) == 0 && !pref && memo.ok && memo.moves == ix.moves && memo.need == need:
				best, ok = memo.slot, true
				if checkBestMemo != nil {
					full, fok := s.bestSegmentLocked(r, t, tiers, cands, nil, false)
					checkBestMemo(best, full, fok)
				}
			default:
				best, ok = s.bestSegmentLocked(r, t, tiers, cands, chosen[:len(out)], pref)
				if len(out) == 0 && !pref {
					*memo = bestMemo{ok: ok, moves: ix.moves, need: need, slot: best}
				}
			}
			if ok {
				break
			}
		}
		if !ok {
			break
		}
		sg := s.mu.segs[best]
		ref, err := sg.al.Alloc(r.Size, slot)
		if err == nil {
			_, l, _ := sg.al.Span(ref)
			s.mu.tierUsed[sg.tier] += l
			chosen[len(out)] = sg.desc
			out = append(out, replica{seg: best, ref: ref})
			if len(out) == n {
				ix.allocated(sg, l) // the last: no need to hold it
				break
			}
		} // else fragmented: held, so the next query finds the next best
		sg.held = true
		ix.update(sg)
		held = append(held, best)
	}
	ok := len(out) == n
	if !ok {
		for _, rp := range out {
			sg := s.mu.segs[rp.seg]
			_, l, _ := sg.al.Span(rp.ref)
			s.mu.tierUsed[sg.tier] -= l
			_ = sg.al.Free(rp.ref)
			ix.update(sg)
		}
	}
	for _, h := range held {
		sg := s.mu.segs[h]
		sg.held = false
		ix.update(sg)
	}
	ix.held = held[:0]
	if ok {
		return out, nil
	}
	return out[:0], fmt.Errorf("%w: key %q: %d bytes × %d replicas in tiers %v", ErrNoSpace, r.Key, r.Size, n, tiers)
}

// bestSegmentLocked picks the segment for the next replica: the first tier
// in order that has a candidate; within it the highest score, then the most
// free bytes (which spreads load), then the lowest slot. Candidates are
// mounted, not draining or suspect, not used by this object's other
// replicas (chosen), not tried, with enough free bytes, and reachable by
// the writer (reach.go). The score (score in placeindex.go) prefers the
// target's node and NUMA node or device and spreads replicas over nodes
// and locations.
//
// With pref it considers only the preferred segments (Placement.Segments:
// segment ids, or client ids for every segment that client provides) of
// any allowed tier; the caller asks for those first.
func (s *Service) bestSegmentLocked(r *PutStartReq, t *target, tiers []segment.Tier, cands *candidates, chosen []*segment.Descriptor, pref bool) (uint32, bool) {
	need := s.alignUp(r.Size)
	if pref {
		var c candidate
		consider := func(slot uint32) {
			sg := s.mu.segs[slot]
			if !sg.usable() || sg.held || sg.al.FreeBytes() < need || !slices.Contains(tiers, sg.desc.Tier) || !s.reachesLocked(t.writer, sg) {
				return
			}
			c.consider(score(t, sg.desc.Tier, sg.desc.Node, sg.desc.Location, chosen), pkey{free: sg.al.FreeBytes(), slot: slot})
		}
		for _, id := range r.Placement.Segments {
			if slot, ok := s.mu.segIndex[id]; ok {
				consider(slot)
				continue
			}
			// A client id: every segment that client provides (a
			// Mooncake-style "prefer this provider's memory"). Unknown ids
			// are ignored.
			for _, slot := range s.mu.byOwner[id] {
				consider(slot)
			}
		}
		return c.key.slot, c.found
	}
	for _, tier := range tiers {
		var c candidate
		s.bestInLocked(&c, cands, tier, t, need, chosen)
		if c.found {
			return c.key.slot, true
		}
	}
	return 0, false
}

// holdOwnersLocked holds out of the index every segment of the providers
// of chosen that is not held already, appending them to buf.
func (s *Service) holdOwnersLocked(chosen []*segment.Descriptor, buf []uint32) []uint32 {
	for i, d := range chosen {
		if slices.ContainsFunc(chosen[:i], func(e *segment.Descriptor) bool { return e.Owner == d.Owner }) {
			continue
		}
		for _, slot := range s.mu.byOwner[d.Owner] {
			if sg := s.mu.segs[slot]; !sg.held {
				sg.held = true
				s.mu.place.update(sg)
				buf = append(buf, slot)
			}
		}
	}
	return buf
}

// unholdLocked returns slots held by holdOwnersLocked to the index.
func (s *Service) unholdLocked(slots []uint32) {
	for _, slot := range slots {
		sg := s.mu.segs[slot]
		sg.held = false
		s.mu.place.update(sg)
	}
}
