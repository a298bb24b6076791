package numa

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

func TestFromHostIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []int
		want []int
		err  error
	}{
		{"lab H200x2: both GPUs on node 0", []int{0, 0}, []int{0}, nil},
		{"GB200: one GPU per node, unsorted", []int{3, 1, 2, 0}, []int{0, 1, 2, 3}, nil},
		{"four GPUs on two nodes", []int{1, 0, 1, 0}, []int{0, 1}, nil},
		{"invalid ids dropped", []int{-1, 2, -1, 0}, []int{0, 2}, nil},
		{"any negative is invalid", []int{-7, 5}, []int{5}, nil},
		{"all invalid", []int{-1, -1}, nil, ErrNoNode},
		{"no GPUs", nil, nil, ErrNoNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got, err := FromHostIDs(tc.in)
			if !errors.Is(err, tc.err) || !slices.Equal(got, tc.want) {
				t.Fatalf("FromHostIDs(%v) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
			}
			if !slices.Equal(in, tc.in) {
				t.Fatalf("input modified: %v", tc.in)
			}
		})
	}
}

func TestAutoOnSim(t *testing.T) {
	drv, err := sim.New(sim.Config{GPUs: 4, HostNUMA: []int{1, 0, -1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	got, err := Auto(drv)
	if err != nil || !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("Auto = %v, %v", got, err)
	}
	drv.Fail("DeviceAttribute", 2, cuda.ErrorUnknown)
	if _, err := Auto(drv); !errors.Is(err, cuda.ErrorUnknown) || !strings.Contains(err.Error(), "device 1") {
		t.Fatalf("Auto with a failing query: %v", err)
	}
	drv.Fail("DeviceAttribute", 1, cuda.ErrorInvalidValue) // a driver without the attribute
	if got, err := Auto(drv); err != nil || !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("Auto with an unknown attribute on device 0: %v, %v", got, err)
	}
	simtest.AssertNoLeaks(t, drv)
}

func TestCheckOnSim(t *testing.T) {
	drv, err := sim.New(sim.Config{GPUs: 2, NUMANodes: []int{0, 2}, NodeGranularity: map[int]uint64{2: 4 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ctx, err := drv.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.PrimaryCtxRelease(0)
	nodes, err := Check(drv, ctx, []int{0, 2}, cuda.HandlePosixFD, true, nil)
	if err != nil || len(nodes) != 2 || nodes[0] != (Node{0, 2 << 20}) || nodes[1] != (Node{2, 4 << 20}) {
		t.Fatalf("Check = %v, %v", nodes, err)
	}
	if n := drv.CallCount("MemCreate"); n != 2 {
		t.Fatalf("%d probe allocations, want 2", n)
	}
	for _, ids := range [][]int{{1}, {0, 1}, {}, {2, 0}, {-1}} {
		if _, err := Check(drv, ctx, ids, cuda.HandlePosixFD, true, nil); !errors.Is(err, ErrNodeUnavailable) {
			t.Errorf("Check(%v) = %v", ids, err)
		}
	}
	// Without probing, no allocation is made.
	before := drv.CallCount("MemCreate")
	if _, err := Check(drv, ctx, []int{0, 2}, cuda.HandlePosixFD, false, nil); err != nil || drv.CallCount("MemCreate") != before {
		t.Fatalf("Check without probe: %v", err)
	}
	// A probe allocation that cannot be released goes to stray.
	drv.Fail("MemRelease", 1, cuda.ErrorUnknown)
	var stray []cuda.AllocHandle
	if _, err := Check(drv, ctx, []int{0}, cuda.HandlePosixFD, true, func(h cuda.AllocHandle) { stray = append(stray, h) }); !errors.Is(err, cuda.ErrorUnknown) || len(stray) != 1 {
		t.Fatalf("release failure: %v, stray %v", err, stray)
	}
	if err := drv.MemRelease(ctx, stray[0]); err != nil {
		t.Fatal(err)
	}
	if live := drv.LiveObjects(); live.Total() != 1 { // the context
		t.Fatalf("live: %s", simtest.FormatObjects(live))
	}
}
