package pool

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// SlabAlign is the offset allocator's slab alignment. Every chunk size is a
// multiple of it (and of the driver's allocation granularity), so a slab
// never straddles the end of a segment and the allocator needs no tail
// special case. 64 KiB divides every VMM granularity seen so far (2 MiB on
// H200 for DEVICE and HOST_NUMA), so on real hardware it never raises the
// alignment; it only matters for the simulator's smaller granularities.
const SlabAlign = 64 << 10

// MaxChunks bounds the chunks of one plan: every chunk is one allocation,
// one exported handle (an open fd for POSIX fds) and one master segment, so
// a plan of more is a configuration mistake (a max_mr_size far too small
// for global_segment_size), and refusing it keeps Plan from building a
// slice sized by an absurd request. 65536 chunks of the default 1 GiB
// max_mr_size are 64 TiB.
const MaxChunks = 1 << 16

// ErrPlan is wrapped by every Plan error.
var ErrPlan = errors.New("pool: invalid capacity plan")

// Location is one place capacity can live in: a host NUMA node (tier DRAM)
// or a GPU (tier HBM), with the allocation granularity the driver reported
// for exactly the allocation properties that will be used.
type Location struct {
	Tier        segment.Tier
	ID          int32  // host NUMA id (DRAM) or device ordinal (HBM)
	Granularity uint64 // bytes, > 0
}

func (l Location) String() string { return fmt.Sprintf("%s%d", l.Tier, l.ID) }

// Layout is a capacity plan: how Requested bytes are cut into chunks over
// locations. It is a plain value.
type Layout struct {
	// Requested is global_segment_size as configured.
	Requested uint64
	// Alignment is lcm(SlabAlign, every location's granularity).
	Alignment uint64
	// Total is Requested rounded down to Alignment: the capacity provided.
	Total uint64
	// MaxChunk is the largest multiple of Alignment <= max_mr_size.
	MaxChunk uint64
	// Nodes holds one entry per location, sorted by location id.
	Nodes []NodeLayout
}

// NodeLayout is one location's share of a Layout.
type NodeLayout struct {
	Location Location
	// Bytes is the location's capacity (sum of Chunks).
	Bytes uint64
	// Chunks are the sizes of the location's allocations, in order: as many
	// MaxChunk-sized chunks as fit, then the aligned remainder.
	Chunks []uint64
}

// NumChunks is the number of chunks over all locations.
func (l *Layout) NumChunks() int {
	n := 0
	for _, nd := range l.Nodes {
		n += len(nd.Chunks)
	}
	return n
}

func (l Layout) String() string {
	s := fmt.Sprintf("requested %s, alignment %s, total %s, max chunk %s, %d chunks",
		config.FormatSize(l.Requested), config.FormatSize(l.Alignment), config.FormatSize(l.Total),
		config.FormatSize(l.MaxChunk), l.NumChunks())
	for _, n := range l.Nodes {
		s += fmt.Sprintf("\n  %s: %s in %d chunks (granularity %s)", n.Location, config.FormatSize(n.Bytes),
			len(n.Chunks), config.FormatSize(n.Location.Granularity))
	}
	return s
}

// Plan computes the capacity plan (DESIGN §3): the common alignment is the
// lcm of SlabAlign and every location's granularity; total is rounded down
// to it; the aligned units are split as evenly as possible over the
// locations sorted by id (the remainder going one unit each to the first
// locations); each location's share is cut into chunks of at most MaxChunk,
// the largest aligned value <= maxMR. No chunk crosses a location.
//
// Plan is pure. Errors wrap ErrPlan and name the offending value: no
// locations, duplicate or mixed-tier locations, a zero granularity, an
// alignment that overflows, maxMR below the alignment, a total smaller
// than one aligned unit, or more than MaxChunks chunks.
func Plan(total, maxMR uint64, locs []Location) (Layout, error) {
	if len(locs) == 0 {
		return Layout{}, fmt.Errorf("%w: no locations", ErrPlan)
	}
	sorted := slices.Clone(locs)
	slices.SortFunc(sorted, func(a, b Location) int { return int(a.ID) - int(b.ID) })
	align := uint64(SlabAlign)
	for i, l := range sorted {
		if l.Granularity == 0 {
			return Layout{}, fmt.Errorf("%w: %s: granularity 0", ErrPlan, l)
		}
		if i > 0 && sorted[i-1].ID == l.ID {
			return Layout{}, fmt.Errorf("%w: location %s listed twice", ErrPlan, l)
		}
		if l.Tier != sorted[0].Tier {
			return Layout{}, fmt.Errorf("%w: mixed tiers %s and %s", ErrPlan, sorted[0].Tier, l.Tier)
		}
		var ok bool
		if align, ok = lcm(align, l.Granularity); !ok {
			return Layout{}, fmt.Errorf("%w: %s: granularity %d makes the common alignment overflow", ErrPlan, l, l.Granularity)
		}
	}
	if maxMR < align {
		return Layout{}, fmt.Errorf("%w: max_mr_size=%d (%s) is smaller than the alignment %s",
			ErrPlan, maxMR, config.FormatSize(maxMR), config.FormatSize(align))
	}
	if total < align {
		return Layout{}, fmt.Errorf("%w: global_segment_size=%d (%s) is smaller than one aligned unit (%s)",
			ErrPlan, total, config.FormatSize(total), config.FormatSize(align))
	}
	lay := Layout{
		Requested: total,
		Alignment: align,
		Total:     total / align * align,
		MaxChunk:  maxMR / align * align,
		Nodes:     make([]NodeLayout, len(sorted)),
	}
	units := lay.Total / align
	per, rem := units/uint64(len(sorted)), units%uint64(len(sorted))
	// Count the chunks before building any: one node gets at most per+1
	// units, and every node's chunks are ceil(bytes/MaxChunk).
	var chunks uint64
	for i := range sorted {
		u := per
		if uint64(i) < rem {
			u++
		}
		b := u * align // <= Total: no overflow
		chunks += b/lay.MaxChunk + min(b%lay.MaxChunk, 1)
		if chunks > MaxChunks {
			return Layout{}, fmt.Errorf("%w: global_segment_size=%d (%s) with max_mr_size=%d (%s) needs more than %d chunks; raise max_mr_size",
				ErrPlan, total, config.FormatSize(total), maxMR, config.FormatSize(maxMR), MaxChunks)
		}
	}
	for i, l := range sorted {
		u := per
		if uint64(i) < rem {
			u++
		}
		n := NodeLayout{Location: l, Bytes: u * align}
		for left := n.Bytes; left > 0; {
			c := min(left, lay.MaxChunk)
			n.Chunks = append(n.Chunks, c)
			left -= c
		}
		lay.Nodes[i] = n
	}
	return lay, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// lcm returns the least common multiple of a and b (both > 0) and false
// when it does not fit in 64 bits.
func lcm(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a/gcd(a, b), b)
	return lo, hi == 0
}
