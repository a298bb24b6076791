// Package alloc is the master's per-segment offset allocator: it hands out
// aligned byte ranges of one segment and takes them back, coalescing free
// neighbours. It manages offsets only; it never touches the memory.
//
// The design is a two-level segregated fit (TLSF): free blocks sit in
// size-class bins (a power-of-two first level split into 8 linear
// sub-classes), two bitmaps find the first non-empty bin that is large
// enough in O(1), and every block links to its physical neighbours, so a free
// coalesces in O(1). Block records live in one slice and link by index: an
// Allocator holds no pointers per block, which keeps the GC's work
// independent of the number of allocations.
package alloc

import (
	"errors"
	"fmt"
	"math/bits"
)

// Errors.
var (
	// ErrNoSpace: no free block is large enough (the total free bytes may
	// still be larger, if they are fragmented).
	ErrNoSpace = errors.New("alloc: no space")
	// ErrInvalid: a zero or impossibly large size, or a bad alignment.
	ErrInvalid = errors.New("alloc: invalid argument")
	// ErrBadRef: Free or a lookup was given a Ref that is not allocated.
	ErrBadRef = errors.New("alloc: bad ref")
)

// Ref names one allocated block. It stays valid until the block is freed;
// after that the allocator may reuse it for another block.
type Ref uint32

const (
	slLog   = 3
	slCount = 1 << slLog // sub-classes per power of two
	flCount = 64
	nilIdx  = -1
	// linearProbe bounds the scan of the exact-size bin when the O(1) search
	// (which rounds the request up to the next class) finds nothing, so that
	// a request can still take a block of its own class, e.g. the whole
	// segment.
	linearProbe = 16
)

type block struct {
	off, size          uint64 // in bytes
	prevPhys, nextPhys int32  // physical neighbours, nilIdx at the ends
	prevFree, nextFree int32  // bin list links while free
	tag                uint32 // caller's tag while allocated
	free               bool
	used               bool // the record is in use (not on the spare list)
}

// Allocator hands out aligned ranges of [0, Size). It is not safe for
// concurrent use; the master serialises access under its own lock.
type Allocator struct {
	size  uint64 // usable bytes: the segment size rounded down to align
	align uint64
	shift uint   // log2(align)
	used  uint64 // bytes in allocated blocks
	nused int    // allocated blocks

	blocks []block
	spare  []int32 // unused block records
	first  int32   // the block at offset 0

	flBitmap uint64
	slBitmap [flCount]uint8
	heads    [flCount][slCount]int32
}

// New returns an allocator for a segment of size bytes whose blocks start
// and end on multiples of align (a power of two). Bytes past the last whole
// multiple of align are never handed out.
func New(size, align uint64) (*Allocator, error) {
	if align == 0 || align&(align-1) != 0 {
		return nil, fmt.Errorf("%w: alignment %d is not a power of two", ErrInvalid, align)
	}
	usable := size &^ (align - 1)
	if usable == 0 {
		return nil, fmt.Errorf("%w: size %d is smaller than alignment %d", ErrInvalid, size, align)
	}
	a := &Allocator{size: usable, align: align, shift: uint(bits.TrailingZeros64(align))}
	for i := range a.heads {
		for j := range a.heads[i] {
			a.heads[i][j] = nilIdx
		}
	}
	b := a.newBlock()
	a.blocks[b] = block{off: 0, size: usable, prevPhys: nilIdx, nextPhys: nilIdx, used: true}
	a.first = b
	a.insertFree(b)
	return a, nil
}

// Size returns the number of bytes the allocator manages.
func (a *Allocator) Size() uint64 { return a.size }

// Align returns the alignment of every block.
func (a *Allocator) Align() uint64 { return a.align }

// Used returns the bytes in allocated blocks (each block's rounded size).
func (a *Allocator) Used() uint64 { return a.used }

// FreeBytes returns Size() - Used().
func (a *Allocator) FreeBytes() uint64 { return a.size - a.used }

// Allocated returns the number of allocated blocks.
func (a *Allocator) Allocated() int { return a.nused }

// RoundUp returns n rounded up to the alignment, or 0 if that overflows.
func (a *Allocator) RoundUp(n uint64) uint64 {
	r := (n + a.align - 1) &^ (a.align - 1)
	if r < n {
		return 0
	}
	return r
}

// Alloc allocates n bytes (rounded up to the alignment) and tags the block
// with tag, which Tag and Each report back. It returns ErrInvalid for n == 0
// or n larger than the segment, and ErrNoSpace when no free block fits.
func (a *Allocator) Alloc(n uint64, tag uint32) (Ref, error) {
	need := a.RoundUp(n)
	if n == 0 || need == 0 || need > a.size {
		return 0, fmt.Errorf("%w: size %d (segment %d bytes)", ErrInvalid, n, a.size)
	}
	b := a.findFree(need)
	if b == nilIdx {
		return 0, fmt.Errorf("%w: %d bytes (%d of %d free, fragmented)", ErrNoSpace, need, a.size-a.used, a.size)
	}
	a.used += need
	a.nused++
	blk := &a.blocks[b]
	rest := blk.size - need
	if rest == 0 {
		a.removeFree(b)
		blk.free = false
		blk.tag = tag
		return Ref(b), nil
	}
	// Split: the head becomes the allocated block, a new record, and b,
	// the free tail, shrinks in place. It leaves its bin only when its
	// class changes: a large block handing out small ones (a segment
	// filling up) mostly stays in its bin, with no bin update per
	// allocation (on the H200 host they were two fifths of Alloc).
	fl, sl := mapping(blk.size >> a.shift)
	nfl, nsl := mapping(rest >> a.shift)
	rebin := fl != nfl || sl != nsl
	if rebin {
		a.removeFree(b)
	}
	r := a.newBlock()
	blk = &a.blocks[b] // newBlock may have grown the slice
	a.blocks[r] = block{off: blk.off, size: need, prevPhys: blk.prevPhys, nextPhys: b, tag: tag, used: true}
	if blk.prevPhys != nilIdx {
		a.blocks[blk.prevPhys].nextPhys = r
	} else {
		a.first = r
	}
	blk.prevPhys = r
	blk.off += need
	blk.size = rest
	if rebin {
		a.insertFree(b)
	}
	return Ref(r), nil
}

// Free returns the block r to the allocator, merging it with free
// neighbours. A Ref that is not allocated gives ErrBadRef and changes
// nothing.
func (a *Allocator) Free(r Ref) error {
	if !a.valid(r) {
		return fmt.Errorf("%w: free of %d", ErrBadRef, r)
	}
	b := int32(r)
	a.used -= a.blocks[b].size
	a.nused--
	a.blocks[b].free = true
	a.blocks[b].tag = 0
	if p := a.blocks[b].prevPhys; p != nilIdx && a.blocks[p].free {
		a.removeFree(p)
		a.merge(p, b) // b is gone, p grows
		b = p
	}
	if n := a.blocks[b].nextPhys; n != nilIdx && a.blocks[n].free {
		a.removeFree(n)
		a.merge(b, n)
	}
	a.insertFree(b)
	return nil
}

// Span returns the offset and length (rounded size) of an allocated block.
func (a *Allocator) Span(r Ref) (off, length uint64, err error) {
	if !a.valid(r) {
		return 0, 0, fmt.Errorf("%w: span of %d", ErrBadRef, r)
	}
	b := &a.blocks[r]
	return b.off, b.size, nil
}

// Touch loads block r's record and its physical neighbours' — what Span
// and Free read — and returns a word of them (for a sink): a caller about
// to free many blocks loads them all first, so that their cache misses
// overlap. An invalid r loads nothing.
func (a *Allocator) Touch(r Ref) uint64 {
	if int(r) >= len(a.blocks) {
		return 0
	}
	b := &a.blocks[r]
	sink := b.off
	if b.prevPhys != nilIdx {
		sink += a.blocks[b.prevPhys].size
	}
	if b.nextPhys != nilIdx {
		sink += a.blocks[b.nextPhys].size
	}
	return sink
}

// Tag returns the tag an allocated block was given.
func (a *Allocator) Tag(r Ref) (uint32, error) {
	if !a.valid(r) {
		return 0, fmt.Errorf("%w: tag of %d", ErrBadRef, r)
	}
	return a.blocks[r].tag, nil
}

// Each calls fn for every allocated block in offset order. fn must not
// allocate or free.
func (a *Allocator) Each(fn func(r Ref, off, length uint64, tag uint32)) {
	for b := a.first; b != nilIdx; b = a.blocks[b].nextPhys {
		if blk := &a.blocks[b]; !blk.free {
			fn(Ref(b), blk.off, blk.size, blk.tag)
		}
	}
}

// LargestFree returns the size of the largest free block.
func (a *Allocator) LargestFree() uint64 {
	if a.flBitmap == 0 {
		return 0
	}
	fl := flCount - 1 - bits.LeadingZeros64(a.flBitmap)
	sl := 7 - bits.LeadingZeros8(a.slBitmap[fl])
	var best uint64
	for b := a.heads[fl][sl]; b != nilIdx; b = a.blocks[b].nextFree {
		best = max(best, a.blocks[b].size)
	}
	return best
}

func (a *Allocator) valid(r Ref) bool {
	return int(r) < len(a.blocks) && a.blocks[r].used && !a.blocks[r].free
}

func (a *Allocator) newBlock() int32 {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	a.blocks = append(a.blocks, block{})
	return int32(len(a.blocks) - 1)
}

// merge folds block n (the physical successor of p) into p and recycles n.
func (a *Allocator) merge(p, n int32) {
	pb, nb := &a.blocks[p], &a.blocks[n]
	pb.size += nb.size
	pb.nextPhys = nb.nextPhys
	if nb.nextPhys != nilIdx {
		a.blocks[nb.nextPhys].prevPhys = p
	}
	*nb = block{}
	a.spare = append(a.spare, n)
}

// mapping returns the bin of a block of u alignment units.
func mapping(u uint64) (fl, sl int) {
	if u < slCount {
		return 0, int(u)
	}
	f := bits.Len64(u) - 1
	return f - slLog + 1, int((u >> uint(f-slLog)) & (slCount - 1))
}

func (a *Allocator) insertFree(b int32) {
	blk := &a.blocks[b]
	blk.free = true
	fl, sl := mapping(blk.size >> a.shift)
	h := a.heads[fl][sl]
	blk.prevFree, blk.nextFree = nilIdx, h
	if h != nilIdx {
		a.blocks[h].prevFree = b
	}
	a.heads[fl][sl] = b
	a.flBitmap |= 1 << uint(fl)
	a.slBitmap[fl] |= 1 << uint(sl)
}

func (a *Allocator) removeFree(b int32) {
	blk := &a.blocks[b]
	fl, sl := mapping(blk.size >> a.shift)
	if blk.prevFree != nilIdx {
		a.blocks[blk.prevFree].nextFree = blk.nextFree
	} else {
		a.heads[fl][sl] = blk.nextFree
	}
	if blk.nextFree != nilIdx {
		a.blocks[blk.nextFree].prevFree = blk.prevFree
	}
	blk.prevFree, blk.nextFree = nilIdx, nilIdx
	if a.heads[fl][sl] == nilIdx {
		a.slBitmap[fl] &^= 1 << uint(sl)
		if a.slBitmap[fl] == 0 {
			a.flBitmap &^= 1 << uint(fl)
		}
	}
}

// findFree returns a free block of at least need bytes, or nilIdx.
func (a *Allocator) findFree(need uint64) int32 {
	u := need >> a.shift
	// Good fit in O(1): round u up to the next class boundary so that every
	// block of the bin found is large enough.
	su := u
	if u >= slCount {
		su = u + (uint64(1) << uint(bits.Len64(u)-1-slLog)) - 1
	}
	if su >= u { // no overflow
		fl, sl := mapping(su)
		if fl < flCount {
			if b := a.firstFrom(fl, sl); b != nilIdx {
				return b
			}
		}
	}
	// The rounded class is empty or beyond: a block of u's own class may
	// still fit.
	fl, sl := mapping(u)
	n := 0
	for b := a.heads[fl][sl]; b != nilIdx && n < linearProbe; b = a.blocks[b].nextFree {
		if a.blocks[b].size >= need {
			return b
		}
		n++
	}
	return nilIdx
}

// firstFrom returns the head of the first non-empty bin at or above (fl, sl).
func (a *Allocator) firstFrom(fl, sl int) int32 {
	m := a.slBitmap[fl] & (^uint8(0) << uint(sl))
	if m == 0 {
		f := a.flBitmap & (^uint64(0) << uint(fl+1))
		if fl+1 >= flCount || f == 0 {
			return nilIdx
		}
		fl = bits.TrailingZeros64(f)
		m = a.slBitmap[fl]
	}
	return a.heads[fl][bits.TrailingZeros8(m)]
}

// Check verifies the allocator's invariants (tests and the invariants
// build): blocks tile [0, Size) without gaps or overlap, no two free blocks
// are adjacent, every free block is in the right bin, and the used count is
// exact.
func (a *Allocator) Check() error {
	var first int32 = nilIdx
	live := 0
	for i := range a.blocks {
		if a.blocks[i].used {
			live++
			if a.blocks[i].prevPhys == nilIdx {
				if first != nilIdx {
					return fmt.Errorf("alloc: two first blocks %d and %d", first, i)
				}
				first = int32(i)
			}
		}
	}
	if live+len(a.spare) != len(a.blocks) {
		return fmt.Errorf("alloc: %d live + %d spare records != %d", live, len(a.spare), len(a.blocks))
	}
	if first != a.first {
		return fmt.Errorf("alloc: first block %d, recorded %d", first, a.first)
	}
	var off, used uint64
	nused, nfree, seen := 0, 0, 0
	prevFree := false
	prev := int32(nilIdx)
	for b := first; b != nilIdx; b = a.blocks[b].nextPhys {
		blk := &a.blocks[b]
		seen++
		if blk.prevPhys != prev {
			return fmt.Errorf("alloc: block %d prevPhys %d, want %d", b, blk.prevPhys, prev)
		}
		if blk.off != off {
			return fmt.Errorf("alloc: block %d at %d, want %d (gap or overlap)", b, blk.off, off)
		}
		if blk.size == 0 || blk.size%a.align != 0 || blk.off%a.align != 0 {
			return fmt.Errorf("alloc: block %d [%d,+%d) misaligned or empty", b, blk.off, blk.size)
		}
		if blk.free {
			if prevFree {
				return fmt.Errorf("alloc: free block %d follows a free block (not coalesced)", b)
			}
			nfree++
		} else {
			used += blk.size
			nused++
		}
		prevFree = blk.free
		off += blk.size
		prev = b
	}
	if seen != live {
		return fmt.Errorf("alloc: %d blocks reachable, %d live", seen, live)
	}
	if off != a.size {
		return fmt.Errorf("alloc: blocks cover %d bytes, want %d", off, a.size)
	}
	if used != a.used || nused != a.nused {
		return fmt.Errorf("alloc: used %d bytes in %d blocks, counters say %d in %d", used, nused, a.used, a.nused)
	}
	binned := 0
	for fl := range a.heads {
		for sl := range a.heads[fl] {
			h := a.heads[fl][sl]
			if (h != nilIdx) != (a.slBitmap[fl]&(1<<uint(sl)) != 0) {
				return fmt.Errorf("alloc: bin (%d,%d) bitmap disagrees with list", fl, sl)
			}
			for b := h; b != nilIdx; b = a.blocks[b].nextFree {
				if !a.blocks[b].free {
					return fmt.Errorf("alloc: allocated block %d in bin (%d,%d)", b, fl, sl)
				}
				if f, s := mapping(a.blocks[b].size >> a.shift); f != fl || s != sl {
					return fmt.Errorf("alloc: block %d of %d bytes in bin (%d,%d), want (%d,%d)", b, a.blocks[b].size, fl, sl, f, s)
				}
				binned++
			}
		}
		if (a.slBitmap[fl] != 0) != (a.flBitmap&(1<<uint(fl)) != 0) {
			return fmt.Errorf("alloc: first-level bitmap disagrees at %d", fl)
		}
	}
	if binned != nfree {
		return fmt.Errorf("alloc: %d free blocks, %d in bins", nfree, binned)
	}
	return nil
}
