// Package numa selects the host NUMA nodes the EGM pool allocates from
// (DESIGN §3): automatically from the visible GPUs' host NUMA ids, or from an
// operator's explicit list, which is checked node by node against the driver.
package numa

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

var (
	// ErrNoNode is returned by Auto when no visible GPU reports a valid host
	// NUMA id.
	ErrNoNode = errors.New("numa: no GPU reports a valid host NUMA node")
	// ErrNodeUnavailable is wrapped by Check's errors: a node that does not
	// answer a granularity query or does not accept a HOST_NUMA allocation.
	ErrNodeUnavailable = errors.New("numa: host NUMA node unavailable")
)

// Node is one selected host NUMA node and its allocation granularity for
// the handle types it was checked with.
type Node struct {
	ID          int
	Granularity uint64
}

// FromHostIDs turns per-GPU host NUMA ids into the auto selection: invalid
// (negative) ids dropped, sorted, deduplicated. It returns ErrNoNode when
// none is valid.
func FromHostIDs(ids []int) ([]int, error) {
	var out []int
	for _, id := range ids {
		if id >= 0 {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (host NUMA ids %v)", ErrNoNode, ids)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Auto reads CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID of every visible GPU and
// returns FromHostIDs of the answers. A GPU whose driver does not know the
// attribute (CUDA_ERROR_INVALID_VALUE, drivers before 12.2) counts as having
// no host NUMA id; any other driver error is returned.
func Auto(drv cuda.Driver) ([]int, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("numa: count devices: %w", err)
	}
	ids := make([]int, 0, n)
	for d := range n {
		id, err := drv.DeviceAttribute(cuda.Device(d), cuda.AttrHostNUMAID)
		switch {
		case errors.Is(err, cuda.ErrorInvalidValue):
			id = -1
		case err != nil:
			return nil, fmt.Errorf("numa: device %d host NUMA id: %w", d, err)
		}
		ids = append(ids, id)
	}
	return FromHostIDs(ids)
}

// Prop returns the allocation properties of a HOST_NUMA allocation on node
// with handle types ht: the properties that granularity queries, probes and
// the pool's allocations all use.
func Prop(node int, ht cuda.HandleType) cuda.AllocProp {
	return cuda.AllocProp{
		Location:    cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(node)},
		HandleTypes: ht,
	}
}

// Check queries the recommended allocation granularity of every node in ids
// (sorted, unique, non-negative) for HOST_NUMA allocations with handle
// types ht. With probe set it also allocates one granule on each node and
// releases it at once, so an explicit node that exists in the driver's eyes
// but cannot back memory fails here, naming the node, instead of halfway
// through setup.
//
// If releasing a probe allocation fails, Check hands the allocation to
// stray (which then owns it) and returns the error; stray may be nil only
// if the caller accepts the leak.
func Check(drv cuda.Driver, ctx cuda.Context, ids []int, ht cuda.HandleType, probe bool, stray func(cuda.AllocHandle)) ([]Node, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: empty node list", ErrNodeUnavailable)
	}
	nodes := make([]Node, 0, len(ids))
	for i, id := range ids {
		if id < 0 || (i > 0 && ids[i-1] >= id) {
			return nil, fmt.Errorf("%w: node list %v must be sorted, unique and non-negative", ErrNodeUnavailable, ids)
		}
		prop := Prop(id, ht)
		g, err := drv.MemGetAllocationGranularity(ctx, prop, cuda.GranularityRecommended)
		if err != nil {
			return nil, fmt.Errorf("%w: node %d: granularity query (%s handles): %w", ErrNodeUnavailable, id, ht, err)
		}
		if g == 0 {
			return nil, fmt.Errorf("%w: node %d: driver reports granularity 0", ErrNodeUnavailable, id)
		}
		if probe {
			h, err := drv.MemCreate(ctx, g, prop)
			if err != nil {
				return nil, fmt.Errorf("%w: node %d: HOST_NUMA allocation probe: %w", ErrNodeUnavailable, id, err)
			}
			if err := drv.MemRelease(ctx, h); err != nil {
				if stray != nil {
					stray(h)
				}
				return nil, fmt.Errorf("numa: node %d: release probe allocation: %w", id, err)
			}
		}
		nodes = append(nodes, Node{ID: id, Granularity: g})
	}
	return nodes, nil
}
