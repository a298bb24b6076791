package pool

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvfabric/kvfabric/internal/segment"
)

const (
	kib = uint64(1) << 10
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

func dram(id int32, gran uint64) Location {
	return Location{Tier: segment.TierDRAM, ID: id, Granularity: gran}
}

func TestPlanTable(t *testing.T) {
	type node struct {
		id     int32
		bytes  uint64
		chunks []uint64
	}
	for _, tc := range []struct {
		name        string
		total, max  uint64
		locs        []Location
		wantAlign   uint64
		wantTotal   uint64
		wantMax     uint64
		wantNodes   []node
		wantErrText bool // expect ErrPlan
	}{
		{
			name: "lab H200: 16GiB on node 0, 1GiB chunks", total: 16 * gib, max: gib,
			locs:      []Location{dram(0, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 16 * gib, wantMax: gib,
			wantNodes: []node{{0, 16 * gib, slices.Repeat([]uint64{gib}, 16)}},
		},
		{
			name: "granularity below slab alignment: slab wins", total: 1 * mib, max: gib,
			locs:      []Location{dram(0, 4*kib)},
			wantAlign: SlabAlign, wantTotal: mib, wantMax: gib / SlabAlign * SlabAlign,
			wantNodes: []node{{0, mib, []uint64{mib}}},
		},
		{
			name: "total rounded down to the alignment", total: 5*mib + 123, max: gib,
			locs:      []Location{dram(0, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 4 * mib, wantMax: gib,
			wantNodes: []node{{0, 4 * mib, []uint64{4 * mib}}},
		},
		{
			name: "even split over two nodes", total: 8 * mib, max: gib,
			locs:      []Location{dram(1, 2*mib), dram(0, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 8 * mib, wantMax: gib,
			wantNodes: []node{{0, 4 * mib, []uint64{4 * mib}}, {1, 4 * mib, []uint64{4 * mib}}},
		},
		{
			name: "remainder units go to the first nodes", total: 10 * mib, max: gib,
			locs:      []Location{dram(0, 2*mib), dram(2, 2*mib), dram(3, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 10 * mib, wantMax: gib,
			wantNodes: []node{{0, 4 * mib, []uint64{4 * mib}}, {2, 4 * mib, []uint64{4 * mib}}, {3, 2 * mib, []uint64{2 * mib}}},
		},
		{
			name: "fewer units than nodes: trailing nodes get nothing", total: 2 * mib, max: gib,
			locs:      []Location{dram(0, 2*mib), dram(1, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 2 * mib, wantMax: gib,
			wantNodes: []node{{0, 2 * mib, []uint64{2 * mib}}, {1, 0, nil}},
		},
		{
			name: "differing granularities: lcm", total: 100 * mib, max: 16 * mib,
			locs:      []Location{dram(0, 2*mib), dram(1, 3*mib)},
			wantAlign: 6 * mib, wantTotal: 96 * mib, wantMax: 12 * mib,
			wantNodes: []node{
				{0, 48 * mib, []uint64{12 * mib, 12 * mib, 12 * mib, 12 * mib}},
				{1, 48 * mib, []uint64{12 * mib, 12 * mib, 12 * mib, 12 * mib}},
			},
		},
		{
			name: "max chunk rounded down, aligned remainder chunk", total: 10 * mib, max: 5 * mib,
			locs:      []Location{dram(0, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 10 * mib, wantMax: 4 * mib,
			wantNodes: []node{{0, 10 * mib, []uint64{4 * mib, 4 * mib, 2 * mib}}},
		},
		{
			name: "max chunk equal to the alignment", total: 6 * mib, max: 2 * mib,
			locs:      []Location{dram(0, 2*mib)},
			wantAlign: 2 * mib, wantTotal: 6 * mib, wantMax: 2 * mib,
			wantNodes: []node{{0, 6 * mib, []uint64{2 * mib, 2 * mib, 2 * mib}}},
		},
		{
			name: "HBM: one device location", total: 3 * gib, max: 2 * gib,
			locs:      []Location{{Tier: segment.TierHBM, ID: 1, Granularity: 2 * mib}},
			wantAlign: 2 * mib, wantTotal: 3 * gib, wantMax: 2 * gib,
			wantNodes: []node{{1, 3 * gib, []uint64{2 * gib, gib}}},
		},
		{name: "no locations", total: gib, max: gib, wantErrText: true},
		{name: "zero granularity", total: gib, max: gib, locs: []Location{dram(0, 0)}, wantErrText: true},
		{name: "duplicate location", total: gib, max: gib, locs: []Location{dram(0, 2*mib), dram(0, 2*mib)}, wantErrText: true},
		{name: "mixed tiers", total: gib, max: gib, locs: []Location{dram(0, 2*mib), {Tier: segment.TierHBM, ID: 1, Granularity: 2 * mib}}, wantErrText: true},
		{name: "max_mr_size below alignment", total: gib, max: mib, locs: []Location{dram(0, 2*mib)}, wantErrText: true},
		{name: "total below one unit", total: mib, max: gib, locs: []Location{dram(0, 2*mib)}, wantErrText: true},
		{name: "total zero", total: 0, max: gib, locs: []Location{dram(0, 2*mib)}, wantErrText: true},
		{name: "alignment overflows", total: 1 << 63, max: 1 << 63, locs: []Location{dram(0, 1<<62+1), dram(1, 1<<62+3)}, wantErrText: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.locs)
			lay, err := Plan(tc.total, tc.max, tc.locs)
			if !slices.Equal(in, tc.locs) {
				t.Fatalf("Plan modified its input: %v", tc.locs)
			}
			if tc.wantErrText {
				if !errors.Is(err, ErrPlan) {
					t.Fatalf("got %v, %v; want ErrPlan", lay, err)
				}
				t.Logf("error: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lay.Requested != tc.total || lay.Alignment != tc.wantAlign || lay.Total != tc.wantTotal || lay.MaxChunk != tc.wantMax {
				t.Fatalf("got requested %d align %d total %d max %d; want %d %d %d %d",
					lay.Requested, lay.Alignment, lay.Total, lay.MaxChunk, tc.total, tc.wantAlign, tc.wantTotal, tc.wantMax)
			}
			if len(lay.Nodes) != len(tc.wantNodes) {
				t.Fatalf("got %d nodes, want %d", len(lay.Nodes), len(tc.wantNodes))
			}
			for i, w := range tc.wantNodes {
				g := lay.Nodes[i]
				if g.Location.ID != w.id || g.Bytes != w.bytes || !slices.Equal(g.Chunks, w.chunks) {
					t.Errorf("node %d: got id %d bytes %d chunks %v; want id %d bytes %d chunks %v",
						i, g.Location.ID, g.Bytes, g.Chunks, w.id, w.bytes, w.chunks)
				}
			}
			checkLayout(t, lay, tc.max, tc.locs)
		})
	}
}

// checkLayout asserts the plan's invariants (the property test's oracle).
func checkLayout(t *testing.T, lay Layout, maxMR uint64, locs []Location) {
	t.Helper()
	a := lay.Alignment
	if a == 0 || a%SlabAlign != 0 {
		t.Fatalf("alignment %d not a multiple of SlabAlign", a)
	}
	for _, l := range locs {
		if a%l.Granularity != 0 {
			t.Fatalf("alignment %d not a multiple of %s granularity %d", a, l, l.Granularity)
		}
	}
	if lay.Total%a != 0 || lay.Total > lay.Requested || lay.Requested-lay.Total >= a {
		t.Fatalf("total %d is not requested %d rounded down to %d", lay.Total, lay.Requested, a)
	}
	if lay.MaxChunk%a != 0 || lay.MaxChunk > maxMR || maxMR-lay.MaxChunk >= a {
		t.Fatalf("max chunk %d is not max_mr_size %d rounded down to %d", lay.MaxChunk, maxMR, a)
	}
	if len(lay.Nodes) != len(locs) {
		t.Fatalf("%d nodes for %d locations", len(lay.Nodes), len(locs))
	}
	var sum uint64
	minB, maxB := ^uint64(0), uint64(0)
	for i, n := range lay.Nodes {
		if i > 0 && lay.Nodes[i-1].Location.ID >= n.Location.ID {
			t.Fatalf("nodes not sorted: %v", lay.Nodes)
		}
		if i > 0 && n.Bytes > lay.Nodes[i-1].Bytes {
			t.Fatalf("node %s got more than an earlier node", n.Location)
		}
		var nodeSum uint64
		for j, c := range n.Chunks {
			if c == 0 || c%a != 0 || c > lay.MaxChunk {
				t.Fatalf("node %s chunk %d: size %d (align %d, max %d)", n.Location, j, c, a, lay.MaxChunk)
			}
			if j < len(n.Chunks)-1 && c != lay.MaxChunk {
				t.Fatalf("node %s chunk %d: %d, only the last chunk may be short", n.Location, j, c)
			}
			nodeSum += c
		}
		if nodeSum != n.Bytes { // chunks never cross a node: they sum to its share
			t.Fatalf("node %s chunks sum to %d, share %d", n.Location, nodeSum, n.Bytes)
		}
		sum += nodeSum
		minB, maxB = min(minB, n.Bytes), max(maxB, n.Bytes)
	}
	if sum != lay.Total {
		t.Fatalf("chunks sum to %d, total %d", sum, lay.Total)
	}
	if maxB-minB > a {
		t.Fatalf("node shares differ by %d > one unit %d", maxB-minB, a)
	}
}

// FuzzPlan is the property test: any input either fails with ErrPlan or
// yields a layout whose chunks sum to the rounded total, are aligned and
// bounded, and are spread over the nodes within one unit.
func FuzzPlan(f *testing.F) {
	f.Add(uint64(16*gib), uint64(gib), uint8(1), uint64(2*mib), uint64(2*mib), uint8(0))
	f.Add(uint64(100*mib), uint64(16*mib), uint8(2), uint64(2*mib), uint64(3*mib), uint8(1))
	f.Add(uint64(10*mib), uint64(5*mib), uint8(3), uint64(4*kib), uint64(2*mib), uint8(5))
	f.Add(uint64(mib), uint64(gib), uint8(4), uint64(2*mib), uint64(2*mib), uint8(2))
	f.Add(uint64(1<<63), uint64(1<<63), uint8(2), uint64(1<<62+1), uint64(1<<62+3), uint8(0))
	f.Fuzz(func(t *testing.T, total, maxMR uint64, n uint8, g0, g1 uint64, stride uint8) {
		n = n%8 + 1
		// Keep chunk counts bounded so the fuzzer explores shapes, not memory.
		if maxMR > 0 && total/max(maxMR, 1) > 1<<16 {
			t.Skip()
		}
		locs := make([]Location, n)
		for i := range locs {
			g := g0
			if i%2 == 1 {
				g = g1
			}
			locs[i] = dram(int32(i)*(int32(stride%4)+1), g)
		}
		lay, err := Plan(total, maxMR, locs)
		if err != nil {
			if !errors.Is(err, ErrPlan) {
				t.Fatalf("error without ErrPlan: %v", err)
			}
			return
		}
		if g0 == 0 || (n > 1 && g1 == 0) {
			t.Fatalf("zero granularity accepted")
		}
		checkLayout(t, lay, maxMR, locs)
	})
}
