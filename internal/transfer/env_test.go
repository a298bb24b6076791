package transfer_test

import (
	"os"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// gpuTests reports whether benchmarks should run on the real driver
// (KVFABRIC_GPU_TESTS=1, on the device).
func gpuTests() bool { return os.Getenv("KVFABRIC_GPU_TESTS") == "1" }

// env is one driver, device 0's primary context and a stream.
type env struct {
	drv cuda.Driver
	sim *sim.Driver // nil on the real driver
	ctx cuda.Context
	s   cuda.Stream
}

func newSimEnv(tb testing.TB, cfg sim.Config) *env {
	tb.Helper()
	d, err := sim.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{drv: d, sim: d}
	e.init(tb)
	return e
}

// newBenchEnv is the real driver under KVFABRIC_GPU_TESTS=1, else the
// simulator.
func newBenchEnv(tb testing.TB) *env {
	tb.Helper()
	if !gpuTests() {
		return newSimEnv(tb, sim.Config{})
	}
	d, err := cuda.Open(cuda.Options{})
	if err != nil {
		tb.Fatalf("KVFABRIC_GPU_TESTS=1 but cuda.Open: %v", err)
	}
	e := &env{drv: d}
	e.init(tb)
	return e
}

func (e *env) init(tb testing.TB) {
	tb.Helper()
	ctx, err := e.drv.PrimaryCtxRetain(0)
	if err != nil {
		tb.Fatal(err)
	}
	e.ctx = ctx
	s, err := e.drv.StreamCreate(ctx, cuda.StreamNonBlocking)
	if err != nil {
		tb.Fatal(err)
	}
	e.s = s
	tb.Cleanup(func() {
		if err := e.drv.StreamDestroy(ctx, s); err != nil {
			tb.Errorf("StreamDestroy: %v", err)
		}
		if err := e.drv.PrimaryCtxRelease(0); err != nil {
			tb.Errorf("PrimaryCtxRelease: %v", err)
		}
		if oc, ok := e.drv.(cuda.ObjectCounter); ok {
			if live := oc.LiveObjects(); live.Total() != 0 {
				tb.Errorf("live driver objects at the end: %v", live)
			}
		}
		e.drv.Close()
	})
}

// live returns the driver's live object counts (nil when it counts none).
func (e *env) live() cuda.Objects {
	if oc, ok := e.drv.(cuda.ObjectCounter); ok {
		return oc.LiveObjects()
	}
	return nil
}

// dram maps a HOST_NUMA VMM allocation of size bytes (a DRAM-tier segment)
// with read-write access for device 0; it is released at cleanup.
func (e *env) dram(tb testing.TB, size uint64) cuda.DevicePtr {
	tb.Helper()
	numa := 0
	if e.sim == nil {
		if n, err := e.drv.DeviceAttribute(0, cuda.AttrHostNUMAID); err == nil && n >= 0 {
			numa = n
		}
	}
	return e.vmm(tb, cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(numa)}, size)
}

func (e *env) vmm(tb testing.TB, loc cuda.Location, size uint64) cuda.DevicePtr {
	tb.Helper()
	prop := cuda.AllocProp{Location: loc}
	g, err := e.drv.MemGetAllocationGranularity(e.ctx, prop, cuda.GranularityMinimum)
	if err != nil {
		tb.Fatal(err)
	}
	size = (size + g - 1) / g * g
	h, err := e.drv.MemCreate(e.ctx, size, prop)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := e.drv.MemAddressReserve(e.ctx, size, g)
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.drv.MemMap(e.ctx, p, size, 0, h); err != nil {
		tb.Fatal(err)
	}
	acc := []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: 0}, Flags: cuda.AccessReadWrite}}
	if err := e.drv.MemSetAccess(e.ctx, p, size, acc); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, err := range []error{e.drv.MemUnmap(e.ctx, p, size), e.drv.MemAddressFree(e.ctx, p, size), e.drv.MemRelease(e.ctx, h)} {
			if err != nil {
				tb.Error(err)
			}
		}
	})
	return p
}

// hbm allocates device memory (cuMemAlloc), freed at cleanup.
func (e *env) hbm(tb testing.TB, size uint64) cuda.DevicePtr {
	tb.Helper()
	p, err := e.drv.MemAlloc(e.ctx, size)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.drv.MemFree(e.ctx, p); err != nil {
			tb.Error(err)
		}
	})
	return p
}
