package master

import (
	"github.com/kvfabric/kvfabric/internal/segment"
)

// maxEvictPerCall bounds the work one call does under the lock; the reaper
// continues where it stopped.
const maxEvictPerCall = 4096

func (s *Service) watermarks(t segment.Tier) Watermarks {
	if t == segment.TierHBM {
		return s.cfg.HBM
	}
	return s.cfg.DRAM
}

// evictToWatermarksLocked evicts every tier above its high watermark down to
// its low watermark.
func (s *Service) evictToWatermarksLocked(now int64) {
	for _, t := range []segment.Tier{segment.TierDRAM, segment.TierHBM} {
		capacity, used := s.mu.tierCap[t], s.mu.tierUsed[t]
		w := s.watermarks(t)
		if capacity == 0 || float64(used) <= w.High*float64(capacity) {
			continue
		}
		low := uint64(w.Low * float64(capacity))
		s.evictLocked(t, used-low, now, false)
	}
}

// evictLocked frees at least want bytes of tier t, if it can, by removing
// visible objects that are neither leased nor pinned, oldest last access
// first, approximately: each step samples Config.EvictSample slots and
// evicts the least recently used eligible one (the Redis approach).
// Soft-pinned objects are eligible only when unpinned ones could not free
// enough. With forPut, only bytes on segments a put may use (not draining,
// not suspect) count: evicting elsewhere would free nothing the put can
// take. It returns the bytes freed in t.
func (s *Service) evictLocked(t segment.Tier, want uint64, now int64, forPut bool) uint64 {
	freed := s.evictPassLocked(t, want, now, false, forPut)
	if freed < want {
		freed += s.evictPassLocked(t, want-freed, now, true, forPut)
	}
	return freed
}

// evictPassLocked is one pass of evictLocked: soft-pinned objects are
// candidates only when soft is set.
func (s *Service) evictPassLocked(t segment.Tier, want uint64, now int64, soft, forPut bool) uint64 {
	var freed uint64
	misses, evicted := 0, 0
	for freed < want && evicted < maxEvictPerCall && misses < 8 && s.mu.visible > 0 {
		victim, found := uint32(0), false
		var oldest int64
		n := s.mu.objs.len()
		// A sparse table would make sampling miss; scale the sample up.
		sample := s.mu.sample[:0]
		for range min(s.cfg.EvictSample*max(1, n/max(1, s.mu.visible)), 16*s.cfg.EvictSample) {
			sample = append(sample, uint32(s.mu.rng.IntN(n)))
		}
		s.mu.sample = sample
		// The sampled records are far apart in a large table: load each
		// once first, so that their cache misses overlap instead of
		// following one another (the loop below then finds them cached).
		var sink int64
		for _, slot := range sample {
			sink += s.mu.objs.at(slot).stamp
		}
		s.rd.sink.Add(uint64(sink))
		for _, slot := range sample {
			o := s.mu.objs.at(slot)
			if o.state != stateVisible || o.flags&flagPinned != 0 || o.leaseUntil > now ||
				!soft && s.softPinnedLocked(slot, now) {
				continue
			}
			if found && o.stamp >= oldest {
				continue
			}
			if !s.inTierLocked(slot, t, forPut) {
				continue
			}
			victim, found, oldest = slot, true, o.stamp
		}
		if !found {
			misses++
			continue
		}
		misses = 0
		freed += s.tierBytesLocked(victim, t, forPut)
		s.freeObjectLocked(victim, now)
		s.mu.evictions++
		s.met.evictions.WithLabelValues(t.String()).Inc()
		s.mu.flow.evicted[t][evictReason(forPut, soft)]++
		evicted++
	}
	return freed
}

// inTierLocked reports whether slot has a replica in tier t (on a usable
// segment, with usable): whether evicting it frees bytes there. Unlike
// tierBytesLocked it reads no allocator block.
func (s *Service) inTierLocked(slot uint32, t segment.Tier, usable bool) bool {
	for _, r := range s.repsLocked(slot) {
		if sg := s.mu.segs[r.seg]; sg.tier == t && (!usable || sg.usable()) {
			return true
		}
	}
	return false
}

// tierBytesLocked returns the bytes slot's replicas hold in tier t (only on
// usable segments with usable).
func (s *Service) tierBytesLocked(slot uint32, t segment.Tier, usable bool) uint64 {
	var n uint64
	for _, r := range s.repsLocked(slot) {
		if sg := s.mu.segs[r.seg]; sg.tier == t && (!usable || sg.usable()) {
			_, l, _ := sg.al.Span(r.ref)
			n += l
		}
	}
	return n
}
