package master

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestObjectRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(object{}); n != 72 {
		t.Fatalf("object record is %d bytes, want 72", n)
	}
}

// checkTable verifies objTable's invariants against want (indexed key →
// slot) and arena (slots holding a key, indexed or not).
func checkTable(t *testing.T, tb *objTable, want map[string]uint32, arena map[uint32]string) {
	t.Helper()
	if tb.indexed != len(want) {
		t.Fatalf("indexed = %d, want %d", tb.indexed, len(want))
	}
	for k, slot := range want {
		got, ok := tb.lookup(k)
		if !ok || got != slot {
			t.Fatalf("lookup(%q) = %d, %v; want %d", k, got, ok, slot)
		}
	}
	for slot, k := range arena {
		if got := tb.key(slot); got != k {
			t.Fatalf("key(%d) = %q, want %q", slot, got, k)
		}
		ref := tb.at(slot).key
		if owner := binary.LittleEndian.Uint32(tb.keys[ref>>32][uint32(ref):]); owner != slot {
			t.Fatalf("arena entry of slot %d names owner %d", slot, owner)
		}
	}
	// Directory: each table covers exactly the prefixes of its depth.
	used := 0
	for ti := range tb.tabs {
		it := &tb.tabs[ti]
		n, mask := 0, uint32(len(it.slots)-1)
		for i, e := range it.slots {
			if e == 0 {
				continue
			}
			n++
			fp := uint32(e >> 32)
			if tb.dir[fp>>(32-tb.depth)] != int32(ti) {
				t.Fatalf("table %d holds fingerprint %#x of another table", ti, fp)
			}
			// No hole between the entry's home and its position.
			for j := fp & mask; j != uint32(i); j = (j + 1) & mask {
				if it.slots[j] == 0 {
					t.Fatalf("table %d: hole at %d before entry at %d (home %d)", ti, j, i, fp&mask)
				}
			}
		}
		if n != it.used {
			t.Fatalf("table %d: used = %d, counted %d", ti, it.used, n)
		}
		used += n
	}
	if used != len(want) {
		t.Fatalf("index holds %d entries, want %d", used, len(want))
	}
	// Arena accounting: dead bytes match the dead entries of each chunk.
	live := 0
	for c, ch := range tb.keys {
		dead := 0
		for off := 0; off < len(ch); {
			n := int(binary.LittleEndian.Uint32(ch[off+4:]))
			if binary.LittleEndian.Uint32(ch[off:]) == deadOwner {
				dead += keyHdr + n
			} else {
				live++
			}
			off += keyHdr + n
		}
		if dead != int(tb.keyDead[c]) {
			t.Fatalf("chunk %d: %d dead bytes, recorded %d", c, dead, tb.keyDead[c])
		}
		if c != tb.keyCur && ch != nil && 2*dead >= len(ch) {
			t.Fatalf("sealed chunk %d is %d/%d dead and not compacted", c, dead, len(ch))
		}
	}
	if live != len(arena) {
		t.Fatalf("arena holds %d live keys, want %d", live, len(arena))
	}
}

// TestObjTableModel drives the table with random inserts, unindexes (like a
// forced remove, the key stays) and frees against a map, through index
// growth, splits and arena compaction.
func TestObjTableModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    int
		keyMax int
	}{
		{"short", 400_000, 24},
		{"long", 60_000, 3000},
		{"huge", 200, 3 << 20}, // keys larger than a chunk
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			tb := newObjTable()
			want := map[string]uint32{}
			arena := map[uint32]string{}
			var keys []string // indexed keys, for picking victims
			zombies := []uint32{}
			key := func() string {
				n := 1 + rng.IntN(tc.keyMax)
				if n > 64 {
					return fmt.Sprintf("k%d-", rng.Uint64()) + strings.Repeat("x", n)
				}
				return fmt.Sprintf("k%016x", rng.Uint64())[:min(n+1, 17)]
			}
			for i := range tc.ops {
				switch r := rng.IntN(10); {
				case r < 6 || len(keys) == 0: // insert
					k := key()
					h := tb.hash(k)
					if _, ok := tb.find(h, k); ok != hasKey(want, k) {
						t.Fatalf("op %d: find(%q) = %v", i, k, ok)
					} else if ok {
						continue
					}
					slot := tb.alloc()
					*tb.at(slot) = object{key: noKey, state: statePending}
					tb.insert(h, slot, k)
					want[k], arena[slot] = slot, k
					keys = append(keys, k)
				case r < 9: // free an indexed key
					j := rng.IntN(len(keys))
					k := keys[j]
					keys[j] = keys[len(keys)-1]
					keys = keys[:len(keys)-1]
					slot := want[k]
					tb.unindex(slot)
					delete(want, k)
					if rng.IntN(8) == 0 { // a zombie: keeps its key a while
						zombies = append(zombies, slot)
						continue
					}
					tb.dropKey(slot)
					tb.release(slot)
					delete(arena, slot)
				default: // free a zombie
					if len(zombies) == 0 {
						continue
					}
					slot := zombies[len(zombies)-1]
					zombies = zombies[:len(zombies)-1]
					tb.dropKey(slot)
					tb.release(slot)
					delete(arena, slot)
				}
				if i%(tc.ops/8) == 0 {
					checkTable(t, &tb, want, arena)
				}
			}
			checkTable(t, &tb, want, arena)
			// Free three quarters: sealed chunks get compacted, moving live
			// keys (checkTable verifies their owners' references).
			for _, k := range keys[:3*len(keys)/4] {
				slot := want[k]
				tb.unindex(slot)
				tb.dropKey(slot)
				tb.release(slot)
				delete(want, k)
				delete(arena, slot)
			}
			checkTable(t, &tb, want, arena)
			if tc.name == "short" && (len(tb.tabs) < 2 || len(tb.keySpare) == 0) {
				t.Fatalf("%d index tables, %d released arena chunks: the test missed splits or compaction", len(tb.tabs), len(tb.keySpare))
			}
			// Free everything: the arena and the index end empty.
			for k, slot := range want {
				tb.unindex(slot)
				delete(want, k)
			}
			for slot := range arena {
				tb.dropKey(slot)
				tb.release(slot)
				delete(arena, slot)
			}
			checkTable(t, &tb, want, arena)
			var bytes int
			for _, ch := range tb.keys {
				bytes += len(ch)
			}
			if bytes != 0 {
				t.Fatalf("empty table keeps %d arena bytes", bytes)
			}
		})
	}
}

func hasKey(m map[string]uint32, k string) bool { _, ok := m[k]; return ok }

// TestObjTableChunks: the records, the arena and the index tables are
// pointer-free, and there are few of them, so the GC has little to scan
// whatever the number of objects.
func TestObjTableChunks(t *testing.T) {
	tb := newObjTable()
	for i := range 200_000 {
		k := fmt.Sprintf("key-%d", i)
		slot := tb.alloc()
		tb.insert(tb.hash(k), slot, k)
	}
	// A few thousand slice headers at most for 200k objects.
	if n := len(tb.chunks) + len(tb.keys) + len(tb.tabs); n > 64 {
		t.Fatalf("%d chunks and tables for 200k objects", n)
	}
	runtime.KeepAlive(&tb)
}

// TestBatchFinder: finding a batch's keys through batchFinder (prefetched
// a group at a time, some keys skipped, the table changing between finds)
// answers as lookup does, and prefetch names each indexed key's own slot
// as its candidate.
func TestBatchFinder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := newObjTable()
	slots := map[string]uint32{}
	add := func(k string) {
		slot := tb.alloc()
		*tb.at(slot) = object{key: noKey, state: stateVisible}
		tb.insert(tb.hash(k), slot, k)
		slots[k] = slot
	}
	for i := range 50_000 {
		add("key-" + strconv.Itoa(i))
	}
	for _, n := range []int{1, prefetchGroup - 1, prefetchGroup, 3*prefetchGroup + 5, 1000} {
		batch := make([]string, n)
		for i := range batch {
			batch[i] = "key-" + strconv.Itoa(rng.IntN(60_000)) // some absent
		}
		f := newBatchFinder(&tb, n, func(i int) string { return batch[i] })
		var warmed []uint32
		f.warm = func(slot uint32) { warmed = append(warmed, slot) }
		for i, k := range batch {
			if rng.IntN(5) == 0 {
				continue // skipped: an invalid key, say
			}
			if rng.IntN(7) == 0 {
				add(fmt.Sprintf("new-%d-%d", n, i)) // the table changes between finds
			}
			got, ok := f.find(i)
			want, wantOK := tb.lookup(k)
			if ok != wantOK || got != want {
				t.Fatalf("batch of %d, key %d (%q): find = %d, %v; lookup = %d, %v", n, i, k, got, ok, want, wantOK)
			}
			if f.hash(i) != tb.hash(k) {
				t.Fatalf("batch of %d, key %d: hash differs from the table's", n, i)
			}
		}
		for _, slot := range warmed {
			if int(slot) >= tb.len() || tb.at(slot).key == noKey {
				t.Fatalf("batch of %d: warmed slot %d holds no key", n, slot)
			}
		}
	}
	// The candidates prefetch names are the keys' slots.
	keys := []string{"key-1", "absent", "key-49999", "key-7"}
	var hs [prefetchGroup]uint64
	var cand [prefetchGroup]uint32
	tb.prefetch(keys, hs[:len(keys)], &cand)
	for j, k := range keys {
		slot, ok := slots[k]
		switch {
		case ok && cand[j] != slot+1:
			t.Errorf("prefetch: candidate of %q is %d, want slot %d + 1", k, cand[j], slot)
		case !ok && cand[j] != 0:
			t.Errorf("prefetch: absent %q has candidate %d", k, cand[j])
		}
	}
}

// TestKeyArenaReusesChunks: in a steady state — as many keys inserted as
// freed, in random order, as in a full store where every put evicts — the
// arena opens its chunks in the buffers of the chunks it compacted instead
// of allocating new ones (each allocation happens under the master's
// lock, where a GC assist for it stalls every other call), and every live
// key still reads back as it was written.
func TestKeyArenaReusesChunks(t *testing.T) {
	tb := newObjTable()
	rng := rand.New(rand.NewPCG(7, 7))
	var live []uint32
	keyOf := map[uint32]string{}
	insert := func(i int) {
		k := fmt.Sprintf("steady/%08d/%x", i, rng.Uint64())
		slot := tb.alloc()
		*tb.at(slot) = object{key: noKey, state: statePending}
		tb.insert(tb.hash(k), slot, k)
		live = append(live, slot)
		keyOf[slot] = k
	}
	free := func() {
		j := rng.IntN(len(live))
		slot := live[j]
		live[j] = live[len(live)-1]
		live = live[:len(live)-1]
		tb.unindex(slot)
		tb.dropKey(slot)
		tb.release(slot)
		delete(keyOf, slot)
	}
	const fill, warm, steady = 100_000, 200_000, 300_000 // keys of ~33 bytes: 1 MiB chunks hold ~25 k
	for i := range fill {
		insert(i)
	}
	for i := fill; i < fill+warm; i++ {
		insert(i)
		free()
	}
	made, compacted := tb.keyChunksMade, tb.keyCompactions
	for i := fill + warm; i < fill+warm+steady; i++ {
		insert(i)
		free()
	}
	if compactions := tb.keyCompactions - compacted; compactions < 4 {
		t.Fatalf("%d chunks compacted while %d keys were replaced: the test missed the steady state", compactions, steady)
	}
	if tb.keyChunksMade != made {
		t.Fatalf("%d key chunks allocated while %d keys were replaced (%d chunks compacted): released buffers were not reused",
			tb.keyChunksMade-made, steady, tb.keyCompactions-compacted)
	}
	for slot, k := range keyOf {
		if got := tb.key(slot); got != k {
			t.Fatalf("slot %d: key %q, want %q", slot, got, k)
		}
	}
	checkTable(t, &tb, indexOf(keyOf), keyOf)
}

// indexOf inverts keyOf: key → slot.
func indexOf(keyOf map[uint32]string) map[string]uint32 {
	m := make(map[string]uint32, len(keyOf))
	for slot, k := range keyOf {
		m[k] = slot
	}
	return m
}
