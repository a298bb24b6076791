package pool

import (
	"fmt"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/numa"
)

// A global_segment_size is bounded by the memory that can hold it before
// anything is planned or allocated: a value like 18446744073709551615 or
// "16000000TiB" otherwise made Plan build a slice of billions of chunk
// sizes until the kernel's OOM killer ended the provider. The bound is the
// memory the kernel or the driver reports in total, not what is free now:
// a size above it can never succeed, while one below it may still fail in
// cuMemCreate with an out-of-memory error that names the chunk.

// checkHostMemory refuses a DRAM (HOST_NUMA) size larger than the host's
// memory (MemTotal of /proc/meminfo). It does not bound a node's share by
// the node's own MemTotal (/sys/devices/system/node/node<N>/meminfo): on the
// lab's H200 VM node 0 reports 11 GiB there while /proc/meminfo has 126 GiB
// and HOST_NUMA allocations of 24 GiB on node 0 succeed (memory the
// hypervisor adds is not counted per node), so that bound refused working
// configurations. A share too large for its node still fails in cuMemCreate
// with an out-of-memory error naming the chunk. The error wraps
// config.ErrInvalid and names global_segment_size, the value and the limit.
func checkHostMemory(h numa.HostMemory, total uint64) error {
	host, err := h.Total()
	if err != nil {
		return fmt.Errorf("pool: bound global_segment_size by the host's memory: %w", err)
	}
	if total > host {
		return fmt.Errorf("%w: global_segment_size=%d (%s) is more than this host's memory (MemTotal %s in /proc/meminfo)",
			config.ErrInvalid, total, config.FormatSize(total), config.FormatSize(host))
	}
	return nil
}

// checkDeviceMemory refuses an HBM size larger than the provider's device
// (cuDeviceTotalMem). A driver without cuda.DeviceMemory leaves the size to
// Plan's chunk limit and to cuMemCreate.
func (p *Pool) checkDeviceMemory(total uint64) error {
	dm, ok := p.drv.(cuda.DeviceMemory)
	if !ok {
		p.log.Warn("pool: the driver does not report device memory; global_segment_size is not bounded by it", "driver", p.drv.Name())
		return nil
	}
	limit, err := dm.DeviceTotalMem(p.dev)
	if err != nil {
		return fmt.Errorf("pool: device %d total memory: %w", p.dev, err)
	}
	if total > limit {
		return fmt.Errorf("%w: global_segment_size=%d (%s) is more than device %d's memory (%s)",
			config.ErrInvalid, total, config.FormatSize(total), p.dev, config.FormatSize(limit))
	}
	return nil
}
