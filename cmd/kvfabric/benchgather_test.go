package main

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// TestBenchGatherSim: every method of bench --gather runs and is verified
// on the simulator, and nothing leaks.
func TestBenchGatherSim(t *testing.T) {
	sd, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	var out bytes.Buffer
	if err := runGatherBenchOn(t.Context(), &out, sd, "test", gatherFlags{rowBytes: 1152, iters: 2}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, m := range []string{"copy-engine-contiguous", "view-gather-device-idx", "view-gather-host-idx", "store-gather", "full-get-then-select"} {
		if !strings.Contains(s, m) {
			t.Errorf("output lacks %q:\n%s", m, s)
		}
	}
	if strings.Contains(s, "false") {
		t.Errorf("a method failed verification:\n%s", s)
	}
	if live := sd.LiveObjects(); live.Total() != 0 {
		t.Fatalf("leaked driver objects: %v", live)
	}
}

// droppingDriver silently skips kernel launches after the first skipAfter:
// a data-path fault that only byte verification catches.
type droppingDriver struct {
	cuda.Driver
	launches  atomic.Int64
	skipAfter int64
}

func (d *droppingDriver) RegisterKernel(name string, fn cuda.KernelFunc) {
	d.Driver.(cuda.KernelEmulator).RegisterKernel(name, fn)
}

func (d *droppingDriver) LiveObjects() cuda.Objects {
	return d.Driver.(cuda.ObjectCounter).LiveObjects()
}

func (d *droppingDriver) LaunchKernel(ctx cuda.Context, f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s cuda.Stream, params [][]byte) error {
	if d.launches.Add(1) > d.skipAfter {
		return nil
	}
	return d.Driver.LaunchKernel(ctx, f, grid, block, sharedMem, s, params)
}

// TestBenchGatherVerifiesEveryIteration: gathers that silently copy
// nothing after the first iterations fail the run, naming the method.
func TestBenchGatherVerifiesEveryIteration(t *testing.T) {
	sd, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	// The puts of 8 x 576 KiB objects and the first gathers use the kernel
	// (the Store's puts go to the copy engine); drop everything after.
	drv := &droppingDriver{Driver: sd, skipAfter: 2}
	var out bytes.Buffer
	err = runGatherBenchOn(t.Context(), &out, drv, "test", gatherFlags{rowBytes: 1152, iters: 3})
	if err == nil || !strings.Contains(err.Error(), "engine-gather-device-idx: iteration") {
		t.Fatalf("err = %v, want a verification failure of engine-gather-device-idx\n%s", err, out.String())
	}
	if live := sd.LiveObjects(); live.Total() != 0 {
		t.Fatalf("leaked driver objects: %v", live)
	}
}
