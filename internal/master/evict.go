package master

import (
	"slices"

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
// visible objects that are neither leased nor pinned, least recently used
// first, approximately (a clock over the tier's eviction list:
// clockVictimLocked). Soft-pinned objects are eligible only when unpinned
// ones could not free enough. With forPut, only bytes on segments a put
// may use (not draining, not suspect) count: evicting elsewhere would free
// nothing the put can take. It returns the bytes freed in t.
func (s *Service) evictLocked(t segment.Tier, want uint64, now int64, forPut bool) uint64 {
	freed := s.evictPassLocked(t, want, now, false, forPut)
	if freed < want {
		freed += s.evictPassLocked(t, want-freed, now, true, forPut)
	}
	return freed
}

// evictGroup is how many victims evictPassLocked picks before it frees
// them: what freeing them will read is loaded for the whole group first
// (touchVictimsLocked), so that the cache misses of a group overlap
// instead of following one another.
const evictGroup = 16

// evictPassLocked is one pass of evictLocked: soft-pinned objects are
// candidates only when soft is set. It picks victims in groups, loads a
// group's memory, then frees the group's victims in order until want
// bytes are free; victims of the last group that it does not need stay.
func (s *Service) evictPassLocked(t segment.Tier, want uint64, now int64, soft, forPut bool) uint64 {
	freed := freedIn{tier: t, usable: forPut}
	misses, evicted := 0, 0
	l := &s.mu.evict[t]
	var group [evictGroup]uint32
	for freed.n < want && evicted < maxEvictPerCall && misses < 8 && l.n > 0 {
		victims := s.pickVictimsLocked(l, t, want-freed.n, now, soft, forPut, group[:0])
		if len(victims) == 0 {
			misses++
			continue
		}
		misses = 0
		s.touchVictimsLocked(l, victims)
		for _, v := range victims {
			if freed.n >= want || evicted >= maxEvictPerCall {
				break
			}
			s.freeCountingLocked(v, now, &freed)
			evicted++
		}
	}
	if evicted > 0 {
		s.mu.evictions += uint64(evicted)
		s.met.evictions.WithLabelValues(t.String()).Add(float64(evicted))
		s.mu.flow.evicted[t][evictReason(forPut, soft)] += uint64(evicted)
	}
	return freed.n
}

// pickVictimsLocked appends to out, up to its capacity, distinct victims
// (victimLocked) whose sizes add up to want. It stops early when
// victimLocked finds none, or one it already picked (it does when a small
// list, or the fallback's sample, offers the same object again).
func (s *Service) pickVictimsLocked(l *evictList, t segment.Tier, want uint64, now int64, soft, forPut bool, out []uint32) []uint32 {
	var est uint64
	for len(out) < cap(out) && est < want {
		v, ok := s.victimLocked(l, t, now, soft, forPut)
		if !ok || slices.Contains(out, v) {
			break
		}
		out = append(out, v)
		est += s.mu.objs.at(v).size
	}
	return out
}

// victimLocked returns a member of l to evict: the clock's next victim,
// or when a window of the clock held none, the least recently used of a
// random sample (the policy before the clock); with no more members than
// EvictSample, the least recently used of them all.
func (s *Service) victimLocked(l *evictList, t segment.Tier, now int64, soft, forPut bool) (uint32, bool) {
	switch {
	case s.cfg.EvictSample >= l.n:
		s.mu.sample = l.all(s.mu.sample[:0])
		return s.oldestOfLocked(s.mu.sample, t, now, soft, forPut)
	case s.evictSampleOnly:
		return s.sampledVictimLocked(l, t, now, soft, forPut)
	}
	if v, ok := s.clockVictimLocked(l, t, now, soft, forPut); ok {
		return v, true
	}
	return s.sampledVictimLocked(l, t, now, soft, forPut)
}

// evictableLocked reports whether slot may be evicted to free bytes of
// tier t now: not pinned, not leased, not soft-pinned unless soft, and
// with a replica in t (on a usable segment, with forPut).
func (s *Service) evictableLocked(slot uint32, t segment.Tier, now int64, soft, forPut bool) bool {
	o := s.mu.objs.at(slot)
	if o.flags&flagPinned != 0 || o.leaseUntil > now || !soft && s.softPinnedLocked(slot, now) {
		return false
	}
	return s.inTierLocked(slot, t, forPut)
}

// clockVictimLocked advances l's hand over at most EvictSample members and
// returns the first evictable one not used since the sweep before this
// one began (CLOCK: a member used since is passed, its second chance), or
// nothing. A member costs one record read, where a sampled victim costs
// EvictSample: a full store evicts once per put, and that read is a cache
// miss in a large table. And the hand visits members in the order they
// were listed, mostly, so objects put together are freed together, their
// records, keys and allocator blocks near one another.
//
// What "recently" means moves with the hand: each time it wraps, prev
// becomes the time the sweep just ended began. Members swapped into a
// place the hand has passed (removals) wait for the next sweep; members
// appended (new objects) come last, and were used after prev.
//
// A window with nothing to evict — a run of recently read objects (a long
// prefix that every request shares), of leased or pinned ones — does not
// yield its least recently used member: that would take one object of a
// hot run per window (TestClockKeepsHotRun). The caller samples instead.
func (s *Service) clockVictimLocked(l *evictList, t segment.Tier, now int64, soft, forPut bool) (uint32, bool) {
	for range s.cfg.EvictSample {
		if l.hand >= l.n {
			l.hand = 0
			l.prev, l.cur = l.cur, now
		}
		slot := l.member(l.hand)
		l.hand++
		if s.mu.objs.at(slot).stamp <= l.prev && s.evictableLocked(slot, t, now, soft, forPut) {
			return slot, true
		}
	}
	return 0, false
}

// sampledVictimLocked returns the least recently used evictable one of
// EvictSample members drawn at random (the Redis approach), if any.
func (s *Service) sampledVictimLocked(l *evictList, t segment.Tier, now int64, soft, forPut bool) (uint32, bool) {
	sample := s.mu.sample[:0]
	for range s.cfg.EvictSample {
		sample = append(sample, l.member(s.mu.rng.IntN(l.n)))
	}
	s.mu.sample = sample
	// The sampled records are far apart in a large table: load each
	// once first (both ends of the fields the loop below reads, which
	// may straddle two cache lines), so that their cache misses
	// overlap instead of following one another.
	var sink int64
	for _, slot := range sample {
		o := s.mu.objs.at(slot)
		sink += o.stamp + int64(o.flags)
	}
	s.rd.sink.Add(uint64(sink))
	return s.oldestOfLocked(sample, t, now, soft, forPut)
}

// oldestOfLocked returns the least recently used evictable one of slots.
func (s *Service) oldestOfLocked(slots []uint32, t segment.Tier, now int64, soft, forPut bool) (uint32, bool) {
	victim, found := uint32(0), false
	var oldest int64
	for _, slot := range slots {
		o := s.mu.objs.at(slot)
		if found && o.stamp >= oldest {
			continue
		}
		if !s.evictableLocked(slot, t, now, soft, forPut) {
			continue
		}
		victim, found, oldest = slot, true, o.stamp
	}
	return victim, found
}

// evictList is the dense list of the visible objects with a replica in one
// tier: what eviction's clock sweeps and its fallback samples. Sampling slots of the object table instead
// misses whenever the table is sparse — after a mass removal, or once large
// objects have replaced many small ones — and a few empty samples in a row
// end an eviction, so puts into a full store failed with ErrNoSpace
// (TestEvictionFindsVictimsInSparseTable). Both arrays grow by chunks of
// objChunkLen entries, so no growth copies more than one chunk under the
// lock.
type evictList struct {
	members [][]uint32 // object slots, in no order: member i is members[i>>objChunkLog][i&objChunkMsk]
	n       int
	pos     [][]uint32 // by object slot, chunked as the table: 1 + its index in members, 0 when not one
	// The clock (clockVictimLocked): hand is the next member it examines;
	// cur is when its current sweep began, prev when the one before did.
	hand      int
	prev, cur int64
}

func (l *evictList) member(i int) uint32 { return l.members[i>>objChunkLog][i&objChunkMsk] }

// all appends every member to out.
func (l *evictList) all(out []uint32) []uint32 {
	for i := range l.n {
		out = append(out, l.member(i))
	}
	return out
}

// entry returns &chunks[i>>objChunkLog][i&objChunkMsk], growing chunks to
// hold it when grow is set; nil when it is not there and grow is not set.
// A chunk starts small and doubles up to objChunkLen (tests and small
// masters create many Services).
func entry(chunks *[][]uint32, i uint32, grow bool) *uint32 {
	c, off := int(i>>objChunkLog), int(i&objChunkMsk)
	if c >= len(*chunks) || off >= len((*chunks)[c]) {
		if !grow {
			return nil
		}
		for c >= len(*chunks) {
			*chunks = append(*chunks, nil)
		}
		ch := (*chunks)[c]
		n := max(64, len(ch))
		for n <= off {
			n *= 2
		}
		(*chunks)[c] = append(ch, make([]uint32, min(n, objChunkLen)-len(ch))...)
	}
	return &(*chunks)[c][off]
}

// add makes slot a member (once).
func (l *evictList) add(slot uint32) {
	p := entry(&l.pos, slot, true)
	if *p != 0 {
		return
	}
	*entry(&l.members, uint32(l.n), true) = slot
	l.n++
	*p = uint32(l.n)
}

// remove takes slot out, if it is a member: the last member moves into
// its place.
func (l *evictList) remove(slot uint32) {
	p := entry(&l.pos, slot, false)
	if p == nil || *p == 0 {
		return
	}
	i := *p - 1
	l.n--
	last := l.member(l.n)
	*entry(&l.members, i, false) = last
	*entry(&l.pos, last, false) = i + 1
	*p = 0
}

// listLocked adds slot, now visible, to the eviction lists of its
// replicas' tiers.
func (s *Service) listLocked(slot uint32) {
	for _, r := range s.repsLocked(slot) {
		s.mu.evict[s.mu.segs[r.seg].tier].add(slot)
	}
}

// unlistLocked takes slot, visible no longer, out of every eviction list.
func (s *Service) unlistLocked(slot uint32) {
	for t := range s.mu.evict {
		s.mu.evict[t].remove(slot)
	}
}

// inTierLocked reports whether slot has a replica in tier t (on a usable
// segment, with usable): whether evicting it frees bytes there. It reads no
// allocator block.
func (s *Service) inTierLocked(slot uint32, t segment.Tier, usable bool) bool {
	for _, r := range s.repsLocked(slot) {
		if sg := s.mu.segs[r.seg]; sg.tier == t && (!usable || sg.usable()) {
			return true
		}
	}
	return false
}

// touchVictimsLocked loads what freeing victims will read — each one's key
// and its index entry, its allocator blocks, its place in l and the places
// of the members that the removals will move — one kind at a time across
// the group, so that the group's misses overlap. A full store whose
// reads have spread its least recently used objects over the table took
// 10–20 % less time a put with it (docs/perf/logs-2026-12-05-s21).
func (s *Service) touchVictimsLocked(l *evictList, victims []uint32) {
	if len(victims) < 2 {
		return
	}
	var sink uint64
	for _, v := range victims {
		sink += s.mu.objs.touchKey(v)
		if p := entry(&l.pos, v, false); p != nil {
			sink += uint64(*p)
		}
		for _, r := range s.repsLocked(v) {
			sink += s.mu.segs[r.seg].al.Touch(r.ref)
		}
	}
	for i := range min(len(victims), l.n) {
		if p := entry(&l.pos, l.member(l.n-1-i), false); p != nil {
			sink += uint64(*p)
		}
	}
	for _, v := range victims {
		sink += s.mu.objs.touchIndex(v)
	}
	s.rd.sink.Add(sink)
}
