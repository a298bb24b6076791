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
	t := target{node: p.Node, numa: p.NUMANode, dev: p.Device}
	if c, ok := s.mu.clients[p.Client]; ok && p.Client != "" {
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

func tierOrder(p *Placement) []segment.Tier {
	switch {
	case p.Tier == segment.TierHBM && p.TierOnly:
		return []segment.Tier{segment.TierHBM}
	case p.Tier == segment.TierHBM:
		return []segment.Tier{segment.TierHBM, segment.TierDRAM}
	case p.TierOnly:
		return []segment.Tier{segment.TierDRAM}
	}
	return []segment.Tier{segment.TierDRAM, segment.TierHBM}
}

// placeLocked allocates r's replicas, tagged with the object slot, into out.
// When they do not fit it evicts and tries once more; then ErrNoSpace. On
// error nothing stays allocated.
func (s *Service) placeLocked(r *PutStartReq, slot uint32, now int64, out []replica) ([]replica, error) {
	n := max(r.Replicas, 1)
	tiers := tierOrder(&r.Placement)
	// Size against segment limits: a size no segment of the allowed tiers
	// could ever hold is a bad request, not a full store.
	t := s.targetLocked(&r.Placement)
	var largest uint64
	segs, far := 0, 0
	for _, sg := range s.mu.segs {
		if sg == nil || !slices.Contains(tiers, sg.desc.Tier) {
			continue
		}
		if !s.reachesLocked(t.writer, sg) {
			far++
			continue
		}
		largest = max(largest, sg.al.Size())
		segs++
	}
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
	out, err := s.tryPlaceLocked(r, slot, t, tiers, n, out)
	if !errors.Is(err, ErrNoSpace) {
		return out, err
	}
	// First reclaim what is already free in all but name: objects removed
	// by force whose leases have ended since the last reap. Then evict.
	if s.mu.zombies > 0 {
		s.expireLeasesLocked(now)
		if out, err = s.tryPlaceLocked(r, slot, t, tiers, n, out); !errors.Is(err, ErrNoSpace) {
			return out, err
		}
	}
	need := (r.Size + s.cfg.Alignment - 1) &^ (s.cfg.Alignment - 1)
	for _, tier := range tiers {
		s.evictLocked(tier, need*uint64(n), now, true)
	}
	return s.tryPlaceLocked(r, slot, t, tiers, n, out)
}

func (s *Service) tryPlaceLocked(r *PutStartReq, slot uint32, t target, tiers []segment.Tier, n int, out []replica) ([]replica, error) {
	out = out[:0]
	var tried []uint32
	for len(out) < n {
		best, ok := s.bestSegmentLocked(r, t, tiers, out, tried)
		if !ok {
			break
		}
		ref, err := s.mu.segs[best].al.Alloc(r.Size, slot)
		if err != nil { // fragmented: try the next best
			tried = append(tried, best)
			continue
		}
		sg := s.mu.segs[best]
		_, l, _ := sg.al.Span(ref)
		s.mu.tierUsed[sg.desc.Tier] += l
		out = append(out, replica{seg: best, ref: ref})
	}
	if len(out) == n {
		return out, nil
	}
	for _, rp := range out {
		sg := s.mu.segs[rp.seg]
		_, l, _ := sg.al.Span(rp.ref)
		s.mu.tierUsed[sg.desc.Tier] -= l
		_ = sg.al.Free(rp.ref)
	}
	return out[:0], fmt.Errorf("%w: key %q: %d bytes × %d replicas in tiers %v", ErrNoSpace, r.Key, r.Size, n, tiers)
}

// bestSegmentLocked picks the segment for the next replica: the first tier
// in order that has a candidate; within it the highest score, then the most
// free bytes (which spreads load). Candidates are mounted, not draining or suspect,
// not used by this object's other replicas, not tried, with enough free
// bytes, and reachable by the writer (reach.go).
//
// Preferred segments (Placement.Segments: segment ids, or client ids for
// every segment that client provides) of any allowed tier come first.
func (s *Service) bestSegmentLocked(r *PutStartReq, t target, tiers []segment.Tier, chosen []replica, tried []uint32) (uint32, bool) {
	need := (r.Size + s.cfg.Alignment - 1) &^ (s.cfg.Alignment - 1)
	pref := len(r.Placement.Segments) > 0
	for pass := 0; pass <= len(tiers); pass++ {
		if pass == 0 && !pref {
			continue
		}
		best, found := uint32(0), false
		bestScore, bestFree := 0, uint64(0)
		var tier segment.Tier
		if pass > 0 {
			tier = tiers[pass-1]
		}
	segs:
		for i, sg := range s.mu.segs {
			if sg == nil || !sg.usable() || sg.al.FreeBytes() < need || !s.reachesLocked(t.writer, sg) {
				continue
			}
			if pass == 0 && (!slices.Contains(tiers, sg.desc.Tier) || !preferred(r.Placement.Segments, sg.desc)) ||
				pass > 0 && sg.desc.Tier != tier {
				continue
			}
			slot := uint32(i)
			if slices.Contains(tried, slot) {
				continue
			}
			score := 0
			d := sg.desc
			for _, c := range chosen {
				if c.seg == slot {
					continue segs
				}
				cd := s.mu.segs[c.seg].desc
				if cd.Node == d.Node {
					score -= 8 // spread over nodes
					if cd.Owner == d.Owner {
						// and over the processes of a node: a replica
						// must outlive its provider's exit
						score -= 16
					}
					if cd.Location == d.Location {
						score -= 4 // and over NUMA nodes / devices
					}
				}
			}
			if t.node != "" && t.node == d.Node {
				score += 4
				if (d.Tier == segment.TierDRAM && t.numa >= 0 && d.Location == t.numa) ||
					(d.Tier == segment.TierHBM && t.dev >= 0 && d.Location == t.dev) {
					score += 2
				}
			}
			free := sg.al.FreeBytes()
			if !found || score > bestScore || (score == bestScore && free > bestFree) {
				best, found, bestScore, bestFree = slot, true, score, free
			}
		}
		if found {
			return best, true
		}
	}
	return 0, false
}

// preferred reports whether the preferred list names d by its id or by its
// owner's client id (a Mooncake-style "prefer this provider's memory").
func preferred(list []string, d *segment.Descriptor) bool {
	return slices.Contains(list, d.ID) || d.Owner != "" && slices.Contains(list, d.Owner)
}
