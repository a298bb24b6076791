package transfer_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// TestCalibrate: Calibrate times both paths at every calibration size
// each way (kernel launches and batch copies both made), reports rates and
// crossovers it measured, leaves the engine's routing alone until
// SetCopyEngineMinBytes changes it for later batches, refuses an engine
// that cannot route both ways, missing buffers and a closed engine, and
// leaves no driver object behind (the env's cleanup checks).
func TestCalibrate(t *testing.T) {
	e := newSimEnv(t, sim.Config{})
	eng := newEngine(t, e, transfer.Options{})
	host, dev := e.dram(t, transfer.CalibrationBytes), e.hbm(t, transfer.CalibrationBytes)
	e.sim.ResetCalls()
	c, err := eng.Calibrate(host, dev)
	if err != nil {
		t.Fatal(err)
	}
	if e.sim.CallCount("LaunchKernel") == 0 || e.sim.CallCount("MemcpyBatchAsync") == 0 {
		t.Fatalf("calibration made %d kernel launches and %d batch copies; want both paths timed",
			e.sim.CallCount("LaunchKernel"), e.sim.CallCount("MemcpyBatchAsync"))
	}
	n := len(transfer.CalibrationSizes)
	if !slices.Equal(c.Sizes, transfer.CalibrationSizes) || len(c.KernelPut) != n || len(c.CopyPut) != n || len(c.KernelGet) != n || len(c.CopyGet) != n {
		t.Fatalf("crossover %+v: want a rate per size and path", c)
	}
	for _, rs := range [][]float64{c.KernelPut, c.CopyPut, c.KernelGet, c.CopyGet} {
		for _, r := range rs {
			if !(r > 0) {
				t.Fatalf("rates %v: want every one positive", rs)
			}
		}
	}
	valid := append(slices.Clone(transfer.CalibrationSizes), 2*transfer.CalibrationSizes[n-1])
	if !slices.Contains(valid, c.PutMin) || !slices.Contains(valid, c.GetMin) {
		t.Fatalf("crossovers %d, %d: want one of %v", c.PutMin, c.GetMin, valid)
	}
	t.Logf("sim: %v", c)

	// Routing follows SetCopyEngineMinBytes, not the calibration.
	copies := func() []cuda.Copy {
		var cs []cuda.Copy
		for i := range 8 {
			off := cuda.DevicePtr(i * 64 << 10)
			cs = append(cs, cuda.Copy{Dst: host + off, Src: dev + off, Len: 64 << 10})
		}
		return cs
	}
	for _, tc := range []struct {
		min           uint64
		launch, batch int
	}{{0, 1, 0}, {1 << 20, 1, 0}, {64 << 10, 0, 1}} { // 0: the default, 128 KiB
		eng.SetCopyEngineMinBytes(tc.min)
		e.sim.ResetCalls()
		if err := eng.Submit(e.s, copies()); err != nil {
			t.Fatal(err)
		}
		if err := e.drv.StreamSynchronize(e.ctx, e.s); err != nil {
			t.Fatal(err)
		}
		if got := [2]int{e.sim.CallCount("LaunchKernel"), e.sim.CallCount("MemcpyBatchAsync")}; got != [2]int{tc.launch, tc.batch} {
			t.Fatalf("after SetCopyEngineMinBytes(%d): calls (launch, batch) = %v, want [%d %d]", tc.min, got, tc.launch, tc.batch)
		}
	}

	if _, err := eng.Calibrate(0, dev); err == nil {
		t.Fatal("Calibrate without a host buffer succeeded")
	}
	kern := newEngine(t, e, transfer.Options{Route: transfer.RouteKernel})
	if _, err := kern.Calibrate(host, dev); err == nil {
		t.Fatal("Calibrate of a kernel-only engine succeeded")
	}
	closed := newEngine(t, e, transfer.Options{})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Calibrate(host, dev); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Calibrate of a closed engine: %v; want ErrClosed", err)
	}
}
