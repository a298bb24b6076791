package master

import (
	"encoding/binary"
	"hash/maphash"
)

// The object table is built to stay cheap for the garbage collector at tens
// of millions of objects: the records, the key bytes and the key index are
// large pointer-free blocks (noscan spans the GC never looks into), held by
// a few thousand slice headers in all. A forced full GC then costs about
// the same with 10 M objects as with none.
//
//   - Records live in fixed-size chunks, so growing the table never copies
//     it (and never stalls the lock for a 10 M-record memmove).
//   - Keys live in a byte arena of 1 MiB chunks: an object names its key by
//     (chunk, offset); each entry is a 4-byte owner slot and a 4-byte length
//     ahead of the bytes. A freed entry is marked dead; a sealed chunk that
//     is at least half dead is compacted by copying its live entries to the
//     open chunk (rewriting their owners' references), and then released:
//     its buffer opens a later chunk (keyBufs), so a store in a steady
//     state allocates no arena memory.
//   - The key → slot index is extendible hashing over open-addressing
//     tables of uint64 entries (32-bit hash fingerprint, slot+1). A table
//     grows up to idxMaxSlots and then splits in two, so no growth ever
//     rehashes more than one table.

const (
	objChunkLog = 14 // 16 Ki records (1 MiB) per chunk
	objChunkLen = 1 << objChunkLog
	objChunkMsk = objChunkLen - 1

	keyChunkSize = 1 << 20
	keyBufsMax   = 2          // released chunk buffers kept for reuse (objTable.keyBufs)
	keyHdr       = 8          // owner slot, key length
	deadOwner    = ^uint32(0) // owner of a freed arena entry
	noKey        = ^uint64(0) // object.key of a slot without a key
	idxMinSlots  = 16         // a new index table
	idxMaxSlots  = 1 << 16    // split instead of growing past this (512 KiB)
	idxMaxDepth  = 32 - 16    // fingerprint bits left for the position
	idxLoadNum   = 3          // grow at 3/4 full: linear probing stays short
	idxLoadDen   = 4
)

// objTable holds the object records, their keys and the index of keys of
// pending and visible objects. It is not safe for concurrent use; the
// Service guards it with its mutex.
type objTable struct {
	chunks [][]object // all full but the last
	n      int        // records in use or on the free list
	free   []uint32   // free record slots

	// Key arena.
	keys     [][]byte // by chunk; nil once released
	keyDead  []uint32 // dead bytes by chunk
	keyCur   int      // chunk appended to; -1 before the first key
	keySpare []int    // released chunk numbers, reused first
	// keyBufs are the buffers of released chunks (of keyChunkSize bytes),
	// at most keyBufsMax, which new chunks take before allocating one: a
	// store in a steady state (every put evicts) compacts a chunk for each
	// one it fills, and without them allocated a new 1 MiB chunk for every
	// MiB of keys put, under the master's lock — where a GC assist for
	// such an allocation stalled every other call for ~1 ms
	// (docs/perf/store.md, twenty-third round).
	keyBufs [][]byte
	// keyChunksMade and keyCompactions count the chunk buffers allocated
	// and the chunks compacted (tests).
	keyChunksMade, keyCompactions int

	// Index.
	seed    maphash.Seed
	depth   uint8      // global depth: the directory has 1<<depth entries
	dir     []int32    // fingerprint's top depth bits → table
	tabs    []idxTable // by table number
	indexed int        // keys in the index

}

// idxTable is one open-addressing table of the index: entries are
// fingerprint<<32 | (slot+1), 0 when empty; an entry's home position is
// its fingerprint's low bits.
type idxTable struct {
	slots []uint64
	used  int
	depth uint8 // its fingerprints share their top depth bits
}

func newObjTable() objTable {
	return objTable{
		keyCur: -1,
		seed:   maphash.MakeSeed(),
		dir:    []int32{0},
		tabs:   []idxTable{{slots: make([]uint64, idxMinSlots)}},
	}
}

// ---- records ----

// at returns slot's record; slot must be below len.
func (t *objTable) at(slot uint32) *object {
	return &t.chunks[slot>>objChunkLog][slot&objChunkMsk]
}

// len is the number of slots, in use or free.
func (t *objTable) len() int { return t.n }

// alloc returns a free slot whose record is zero (with no key).
func (t *objTable) alloc() uint32 {
	if n := len(t.free); n > 0 {
		slot := t.free[n-1]
		t.free = t.free[:n-1]
		return slot
	}
	c := t.n >> objChunkLog
	if c == len(t.chunks) {
		// The first chunk starts small and grows by append (tests and small
		// masters create many tables); later ones are allocated whole.
		capacity := objChunkLen
		if c == 0 {
			capacity = 64
		}
		t.chunks = append(t.chunks, make([]object, 0, capacity))
	}
	t.chunks[c] = append(t.chunks[c], object{key: noKey})
	t.n++
	return uint32(t.n - 1)
}

// release returns slot, whose key must be dropped, to the free list.
func (t *objTable) release(slot uint32) {
	*t.at(slot) = object{key: noKey}
	t.free = append(t.free, slot)
}

// ---- keys ----

// setKey stores key as slot's key in the arena (not in the index).
func (t *objTable) setKey(slot uint32, key string) {
	t.at(slot).key = appendKey(t, slot, key)
}

// appendKey appends an entry for slot's key to the open chunk and returns
// its reference.
func appendKey[K string | []byte](t *objTable, slot uint32, key K) uint64 {
	need := keyHdr + len(key)
	for t.keyCur < 0 || len(t.keys[t.keyCur])+need > cap(t.keys[t.keyCur]) {
		t.openKeyChunk(max(keyChunkSize, need))
	}
	c := t.keyCur
	ch := t.keys[c]
	off := len(ch)
	ch = binary.LittleEndian.AppendUint32(ch, slot)
	ch = binary.LittleEndian.AppendUint32(ch, uint32(len(key)))
	t.keys[c] = append(ch, key...)
	return uint64(c)<<32 | uint64(off)
}

// openKeyChunk seals the open chunk and opens a new one of size bytes. A
// sealed chunk already half dead is compacted into the new one at once (a
// later free might never come to trigger it), so that it may have to be
// followed by yet another chunk: callers check for room again.
func (t *objTable) openKeyChunk(size int) {
	sealed := t.keyCur
	if sealed >= 0 && len(t.keys[sealed]) == 0 {
		// Empty but too small for the key: release it.
		t.recycleKeyBuf(t.keys[sealed])
		t.keys[sealed] = nil
		t.keySpare = append(t.keySpare, sealed)
		sealed = -1
	}
	ch := t.keyBuf(size)
	if n := len(t.keySpare); n > 0 {
		t.keyCur = t.keySpare[n-1]
		t.keySpare = t.keySpare[:n-1]
		t.keys[t.keyCur] = ch
		t.keyDead[t.keyCur] = 0
	} else {
		t.keyCur = len(t.keys)
		t.keys = append(t.keys, ch)
		t.keyDead = append(t.keyDead, 0)
	}
	if sealed >= 0 && t.keyDead[sealed] > 0 && 2*int(t.keyDead[sealed]) >= len(t.keys[sealed]) {
		t.compactKeys(sealed)
	}
}

// keyBuf returns an empty chunk buffer of at least size bytes: a released
// chunk's, when size fits one, else a new one.
func (t *objTable) keyBuf(size int) []byte {
	if n := len(t.keyBufs); n > 0 && size <= keyChunkSize {
		b := t.keyBufs[n-1]
		t.keyBufs[n-1] = nil
		t.keyBufs = t.keyBufs[:n-1]
		return b[:0]
	}
	t.keyChunksMade++
	return make([]byte, 0, size)
}

// recycleKeyBuf keeps the buffer of a chunk being released for keyBuf,
// unless it is an oversized one or keyBufsMax are kept. Nothing may refer
// to its bytes any more: live keys were moved out (compactKeys), and
// keyBytes' slices do not outlive a change of the table.
func (t *objTable) recycleKeyBuf(b []byte) {
	if cap(b) == keyChunkSize && len(t.keyBufs) < keyBufsMax {
		t.keyBufs = append(t.keyBufs, b[:0])
	}
}

// keyBytes returns slot's key; it aliases the arena and is valid until the
// next change of the table.
func (t *objTable) keyBytes(slot uint32) []byte {
	ref := t.at(slot).key
	ch := t.keys[ref>>32]
	off := uint32(ref)
	n := binary.LittleEndian.Uint32(ch[off+4:])
	return ch[off+keyHdr : off+keyHdr+n : off+keyHdr+n]
}

// key returns slot's key as a new string (for messages and logs).
func (t *objTable) key(slot uint32) string {
	if t.at(slot).key == noKey {
		return ""
	}
	return string(t.keyBytes(slot))
}

// dropKey frees slot's key in the arena; the key must not be indexed.
func (t *objTable) dropKey(slot uint32) {
	o := t.at(slot)
	ref := o.key
	if ref == noKey {
		return
	}
	o.key = noKey
	c, off := int(ref>>32), uint32(ref)
	ch := t.keys[c]
	n := binary.LittleEndian.Uint32(ch[off+4:])
	binary.LittleEndian.PutUint32(ch[off:], deadOwner)
	t.keyDead[c] += keyHdr + n
	switch {
	case c == t.keyCur && int(t.keyDead[c]) == len(ch):
		// Everything in the open chunk is dead: start it over.
		t.keys[c] = ch[:0]
		t.keyDead[c] = 0
	case c != t.keyCur && 2*int(t.keyDead[c]) >= len(ch):
		t.compactKeys(c)
	}
}

// compactKeys moves the live keys of sealed chunk c to the open chunk and
// releases c. The index holds slots, not key references, so it is not
// touched.
func (t *objTable) compactKeys(c int) {
	ch := t.keys[c]
	for off := 0; off < len(ch); {
		owner := binary.LittleEndian.Uint32(ch[off:])
		n := int(binary.LittleEndian.Uint32(ch[off+4:]))
		if owner != deadOwner {
			k := ch[off+keyHdr : off+keyHdr+n]
			t.at(owner).key = appendKey(t, owner, k)
		}
		off += keyHdr + n
	}
	t.keyCompactions++
	t.recycleKeyBuf(ch)
	t.keys[c] = nil
	t.keyDead[c] = 0
	t.keySpare = append(t.keySpare, c)
}

// keyEqual reports whether slot's key is key.
func (t *objTable) keyEqual(slot uint32, key string) bool {
	return string(t.keyBytes(slot)) == key // no allocation: compiled to a compare
}

// ---- index ----

// hash returns key's index hash.
func (t *objTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

func fingerprint(h uint64) uint32 { return uint32(h >> 32) }

func (t *objTable) tableOf(fp uint32) *idxTable {
	return &t.tabs[t.dir[fp>>(32-t.depth)]] // fp>>32 is 0 at depth 0
}

// find returns the slot indexed under key, whose hash is h.
func (t *objTable) find(h uint64, key string) (uint32, bool) {
	fp := fingerprint(h)
	tb := t.tableOf(fp)
	mask := uint32(len(tb.slots) - 1)
	for i := fp & mask; ; i = (i + 1) & mask {
		e := tb.slots[i]
		if e == 0 {
			return 0, false
		}
		if uint32(e>>32) == fp && t.keyEqual(uint32(e)-1, key) {
			return uint32(e) - 1, true
		}
	}
}

// lookup is find with the hash computed.
func (t *objTable) lookup(key string) (uint32, bool) { return t.find(t.hash(key), key) }

// insert stores key (hash h), which must not be indexed, as slot's key and
// indexes it.
func (t *objTable) insert(h uint64, slot uint32, key string) {
	t.setKey(slot, key)
	fp := fingerprint(h)
	tb := t.tableOf(fp)
	for (tb.used+1)*idxLoadDen > len(tb.slots)*idxLoadNum {
		t.growTable(fp)
		tb = t.tableOf(fp)
	}
	tb.put(uint64(fp)<<32 | uint64(slot+1))
	t.indexed++
}

// put stores e in tb, which has room.
func (tb *idxTable) put(e uint64) {
	mask := uint32(len(tb.slots) - 1)
	i := uint32(e>>32) & mask
	for tb.slots[i] != 0 {
		i = (i + 1) & mask
	}
	tb.slots[i] = e
	tb.used++
}

// growTable makes room in the table of fingerprint fp: it doubles a small
// table, and splits a full-sized one by the next fingerprint bit.
func (t *objTable) growTable(fp uint32) {
	ti := t.dir[fp>>(32-t.depth)]
	old := t.tabs[ti]
	if len(old.slots) < idxMaxSlots || old.depth >= idxMaxDepth {
		// (Past idxMaxDepth the fingerprint has no bits left for a split;
		// unreachable below 2^32 keys with a good hash.)
		nt := idxTable{slots: make([]uint64, 2*len(old.slots)), depth: old.depth}
		for _, e := range old.slots {
			if e != 0 {
				nt.put(e)
			}
		}
		t.tabs[ti] = nt
		return
	}
	if old.depth == t.depth {
		dir := make([]int32, 2*len(t.dir))
		for i := range dir {
			dir[i] = t.dir[i>>1]
		}
		t.dir = dir
		t.depth++
	}
	d := old.depth + 1
	lo := idxTable{slots: make([]uint64, len(old.slots)), depth: d}
	hi := idxTable{slots: make([]uint64, len(old.slots)), depth: d}
	for _, e := range old.slots {
		if e == 0 {
			continue
		}
		if fingerprint(e)>>(32-d)&1 == 0 {
			lo.put(e)
		} else {
			hi.put(e)
		}
	}
	hiIdx := int32(len(t.tabs))
	t.tabs[ti] = lo
	t.tabs = append(t.tabs, hi)
	for i := range t.dir {
		if t.dir[i] == ti && i>>(t.depth-d)&1 == 1 {
			t.dir[i] = hiIdx
		}
	}
}

// touchKey loads slot's key from the arena and returns a word of it (for
// a sink): the first of two loads touchVictimsLocked makes ahead of
// freeing a group of objects.
func (t *objTable) touchKey(slot uint32) uint64 {
	ref := t.at(slot).key
	if ref == noKey {
		return 0
	}
	return uint64(binary.LittleEndian.Uint32(t.keys[ref>>32][uint32(ref)+4:]))
}

// touchIndex loads the index entry at the home of slot's key, where
// unindex starts its probe, and returns it (for a sink).
func (t *objTable) touchIndex(slot uint32) uint64 {
	if t.at(slot).key == noKey {
		return 0
	}
	fp := fingerprint(maphash.Bytes(t.seed, t.keyBytes(slot)))
	tb := t.tableOf(fp)
	return tb.slots[fp&uint32(len(tb.slots)-1)]
}

// unindex removes slot's key from the index; the key stays in the arena.
func (t *objTable) unindex(slot uint32) {
	fp := fingerprint(maphash.Bytes(t.seed, t.keyBytes(slot)))
	tb := t.tableOf(fp)
	mask := uint32(len(tb.slots) - 1)
	want := slot + 1
	i := fp & mask
	for uint32(tb.slots[i]) != want {
		if tb.slots[i] == 0 {
			return // not indexed: a bug the callers' state checks rule out
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: pull later entries of the run into the hole
	// unless their home lies cyclically in (hole, j].
	for j := i; ; {
		j = (j + 1) & mask
		e := tb.slots[j]
		if e == 0 {
			break
		}
		home := uint32(e>>32) & mask
		if (i <= j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		tb.slots[i] = e
		i = j
	}
	tb.slots[i] = 0
	tb.used--
	t.indexed--
}

// ---- batches ----

// prefetchGroup is how many keys prefetch takes at once: enough
// independent cache misses to overlap, few enough that their lines are
// still cached when the keys are then found one by one.
const prefetchGroup = 16

// prefetch computes the index hashes of keys (at most prefetchGroup) into
// hs and pulls into the cache what finding them will read. A find in a
// large table reads three lines that depend on each other — the index
// slot, the record of the slot it names, that record's key bytes — so a
// lookup at a time waits for three misses in a row; here each step is
// taken for the whole group before the next, so the group's misses
// overlap. It changes nothing: callers then find the keys as before.
//
// cand[j] is set to the slot+1 of the first record whose fingerprint
// matches key j (0: none), usually the key's: a caller may warm what it
// reads of those records next.
//
// It returns the sum of what it loaded, for the caller to keep (so that
// the compiler keeps the loads).
func (t *objTable) prefetch(keys []string, hs []uint64, cand *[prefetchGroup]uint32) uint64 {
	for j, k := range keys {
		hs[j] = t.hash(k)
	}
	return t.prefetchHashed(keys, hs, cand)
}

// prefetchHashed is prefetch of keys whose hashes hs holds already.
func (t *objTable) prefetchHashed(keys []string, hs []uint64, cand *[prefetchGroup]uint32) uint64 {
	var pos [prefetchGroup]uint32 // home positions
	var sink uint64
	for j := range keys {
		fp := fingerprint(hs[j])
		tb := t.tableOf(fp)
		pos[j] = fp & uint32(len(tb.slots)-1)
		sink += tb.slots[pos[j]]
	}
	for j := range keys {
		cand[j] = 0
		fp := fingerprint(hs[j])
		tb := t.tableOf(fp)
		mask := uint32(len(tb.slots) - 1)
		for i := pos[j]; ; i = (i + 1) & mask {
			e := tb.slots[i]
			if e == 0 {
				break
			}
			if uint32(e>>32) == fp {
				cand[j] = uint32(e)
				// Both ends: a 72-byte record may span two lines.
				o := t.at(uint32(e) - 1)
				// (nrep, not flags: readers change lease bits of flags
				// under a stripe, see readpath.go.)
				sink += o.key + uint64(o.nrep)
				break
			}
		}
	}
	for j := range keys {
		if cand[j] == 0 {
			continue
		}
		if ref := t.at(cand[j] - 1).key; ref != noKey {
			sink += uint64(t.keys[ref>>32][uint32(ref)])
		}
	}
	return sink
}

// batchFinder finds the keys of a batch by index, in increasing order
// (skipping some is fine), prefetching them a group at a time.
type batchFinder struct {
	t   *objTable
	n   int                // keys in the batch
	key func(i int) string // the batch's i-th key
	// warm, if not nil, is called with the slot of each key's candidate
	// record (see prefetch) once the group is prefetched: to load what
	// the caller reads next, the misses of one group overlapping again.
	warm func(slot uint32)
	// hashed, if not nil, holds the batch's keys' hashes, computed before
	// (PreparePutStart): the group's are taken from it.
	hashed []uint64
	base   int // index of the group's first key
	ready  bool
	keys   [prefetchGroup]string // the group's
	hs     [prefetchGroup]uint64 // and their hashes
	// sink sums the prefetches' loads: the caller hands it to
	// readPath.sink once per call (done).
	sink uint64
}

func newBatchFinder(t *objTable, n int, key func(i int) string) batchFinder {
	return batchFinder{t: t, n: n, key: key}
}

// hash returns the index hash of key i, prefetching its group first if it
// is a new one.
func (f *batchFinder) hash(i int) uint64 {
	if g := i - i%prefetchGroup; !f.ready || g != f.base {
		m := min(prefetchGroup, f.n-g)
		for j := range m {
			f.keys[j] = f.key(g + j)
		}
		var cand [prefetchGroup]uint32
		if f.hashed != nil {
			copy(f.hs[:m], f.hashed[g:g+m])
			f.sink += f.t.prefetchHashed(f.keys[:m], f.hs[:m], &cand)
		} else {
			f.sink += f.t.prefetch(f.keys[:m], f.hs[:m], &cand)
		}
		if f.warm != nil {
			for _, c := range cand[:m] {
				if c != 0 {
					f.warm(c - 1)
				}
			}
		}
		f.base, f.ready = g, true
	}
	return f.hs[i-f.base]
}

// find is objTable.find of key i.
func (f *batchFinder) find(i int) (uint32, bool) { return f.t.find(f.hash(i), f.keys[i-f.base]) }
