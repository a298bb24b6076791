package client_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// TestCalibratedCopyRoutes: a Store that calibrates its copy routes at
// Open (copy_engine_calibrate, as on a GPU) routes by the crossovers it
// measured — blocks of the put (get) crossover's size go to the copy
// engines, blocks of half that size to the SM kernel — and puts and gets
// byte-exact with them; one whose calibration fails (its scratch mapping
// refused) opens anyway with the configured crossovers;
// copy_engine_calibrate=false does not calibrate. Everything calibration
// took is released: the env's close finds no driver object left.
func TestCalibratedCopyRoutes(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("64MiB"), master.Config{})
	ctx := context.Background()
	open := func(id string, cfg map[string]any) *client.Store {
		t.Helper()
		// Chunks of 8 keys and more: more copies than a batch that goes
		// to the copy engines one by one (transfer.DefaultFewCopies).
		o := client.Options{Driver: e.drv, Master: e.mc, ClientID: id, PipelineChunk: 64, BatchParts: 1}
		client.CalibrateOnSim(&o)
		st, err := client.Open(ctx, cfgFor(t, cfg), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	closeStore := func(st *client.Store) {
		t.Helper()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}

	st := open("calibrated", map[string]any{})
	put, get, m := st.CopyCrossovers()
	if m == nil || put != m.PutMin || get != m.GetMin || len(m.Sizes) != len(transfer.CalibrationSizes) {
		t.Fatalf("calibrated store: crossovers %d, %d, measured %+v; want the measured ones", put, get, m)
	}
	t.Logf("sim: %v", m)
	const n = 8 // apart: no copies merged
	most := max(put, get)
	src, dst := devBuf(t, e, 2*n*most), devBuf(t, e, 2*n*most)
	for _, tc := range []struct {
		op     string
		size   uint64
		engine bool // the copy engines, else the kernel
	}{{"put", put, true}, {"put", put / 2, false}, {"get", get, true}, {"get", get / 2, false}} {
		want := fillRandom(t, e, src, 2*n*tc.size, rand.New(rand.NewPCG(tc.size, 5)))
		keys, srcs, dsts := apartSlabs(fmt.Sprintf("cal-%s-%d", tc.op, tc.size), src, dst, n, int(tc.size))
		counts := func() [2]int { return [2]int{e.drv.CallCount("MemcpyBatchAsync"), e.drv.CallCount("LaunchKernel")} }
		e.drv.ResetCalls()
		for i, err := range st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
			if err != nil {
				t.Fatalf("put %s: %v", keys[i], err)
			}
		}
		calls := counts()
		e.drv.ResetCalls()
		if _, errs := st.BatchGet(ctx, keys, dsts, 0); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if tc.op == "get" {
			calls = counts()
		}
		if tc.engine != (calls[0] > 0) || tc.engine == (calls[1] > 0) {
			t.Fatalf("%s of %d-byte blocks (crossovers %d, %d): %d batch copies, %d kernel launches; want only the %s",
				tc.op, tc.size, put, get, calls[0], calls[1], map[bool]string{true: "copy engines", false: "kernel"}[tc.engine])
		}
		back := readBack(t, e, dst, 2*n*tc.size)
		for i := range keys {
			lo := 2 * uint64(i) * tc.size
			if !bytes.Equal(back[lo:lo+tc.size], want[lo:lo+tc.size]) {
				t.Fatalf("%s %s: not its bytes", tc.op, keys[i])
			}
		}
		if _, err := st.RemoveAll(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	closeStore(st)

	e.drv.Fail("MemMap", 1, cuda.ErrorOutOfMemory) // the calibration's scratch mapping
	st = open("uncalibrated", map[string]any{})
	if put, get, m := st.CopyCrossovers(); m != nil || put != 128<<10 || get != 64<<10 {
		t.Fatalf("store whose calibration failed: crossovers %d, %d, measured %v; want the configured 131072, 65536", put, get, m)
	}
	closeStore(st)
	st = open("off", map[string]any{"copy_engine_calibrate": false, "get_copy_engine_min_bytes": "32KiB"})
	if put, get, m := st.CopyCrossovers(); m != nil || put != 128<<10 || get != 32<<10 {
		t.Fatalf("store with copy_engine_calibrate=false: %d, %d, measured %v; want the configured ones", put, get, m)
	}
	closeStore(st)
	e.close()
}
