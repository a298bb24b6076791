package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// TestBenchStoreSim runs `kvfabric bench --store` on a two-GPU simulator
// with tiny sizes: every Go path (the remote one against a `kvfabric
// master` child process), one GPU and both at once, every round verified;
// the python path runs when python3, numpy and libkvfabric.so are there
// and is otherwise skipped saying why. It checks the JSON's shape, the
// aggregate rows, and that the plot was written.
func TestBenchStoreSim(t *testing.T) {
	t.Setenv("KVFABRIC_SIM", `{"gpus": 2, "granularity": 65536}`)
	t.Setenv(envAsKvfabric, "1") // the remote path's master is this binary
	dir := t.TempDir()
	jsonFile, plotFile := filepath.Join(dir, "store.json"), filepath.Join(dir, "store.svg")
	var out bytes.Buffer
	err := runStoreBench(context.Background(), &out, storeBenchFlags{driver: "sim", sizes: "4KiB,64KiB", bytes: "256KiB",
		iters: 1, maxKeys: 32, chunk: 8, parts: 2, ceMin: "64KiB", gpuTime: true, json: jsonFile, plot: plotFile, python: "python3"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	// The shape, as a reader of the file sees it.
	var shape map[string]any
	if err := json.Unmarshal(raw, &shape); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "driver", "devices", "sizes", "round_bytes", "iters", "max_keys_per_batch", "ceilings", "results", "skipped", "ok", "errors"} {
		if _, ok := shape[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var rep storeReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	// Batches of 32 keys in chunks of 8: the Go paths split them in two
	// parts, verified like the rest.
	if rep.Kind != "kvfabric-bench-store" || !rep.OK || len(rep.Devices) != 2 || len(rep.Sizes) != 2 || rep.Iters != 1 || rep.MaxKeys != 32 ||
		rep.PipelineChunk != 8 || rep.BatchParts != 2 || rep.CopyEngineMin != "64KiB" || !rep.GPUTimes {
		t.Errorf("report header: %+v", rep)
	}
	paths := []string{pathEmbedded, pathRemote}
	python := true
	for _, s := range rep.Skipped {
		if s.Path == pathPython && s.Reason != "" {
			python = false
			t.Logf("python path skipped (%s): %s", s.Mode, s.Reason)
		}
	}
	if python {
		paths = append(paths, pathPython)
	}
	type key struct {
		mode, path, dir string
		size            uint64
		gpu             int
	}
	rows := map[key]storeResult{}
	for _, r := range rep.Results {
		rows[key{r.Mode, r.Path, r.Dir, r.Size, r.GPU}] = r
	}
	for _, mode := range []struct {
		name string
		gpus []int
	}{{"1gpu", []int{0}}, {"2gpus", []int{0, 1, -1}}} {
		for _, path := range paths {
			for _, dir := range []string{"put", "get"} {
				for _, size := range []uint64{4 << 10, 64 << 10} {
					for _, gpu := range mode.gpus {
						r, ok := rows[key{mode.name, path, dir, size, gpu}]
						if !ok {
							t.Errorf("no row %s %s %s %s gpu %d", mode.name, path, dir, sizeLabel(size), gpu)
							continue
						}
						keys, batches := int(256<<10/size), int((256<<10/size+31)/32)
						if gpu < 0 {
							keys, batches = 2*keys, 2*batches
						}
						if !r.Verified || r.Error != "" || r.GBps <= 0 || r.CeilingGBps <= 0 || r.Ratio <= 0 || r.Rounds != 1 ||
							r.Keys != keys || r.Batches != batches {
							t.Errorf("row %+v: want verified, positive rates, %d keys in %d batches", r, keys, batches)
						}
						// Every path's per-GPU rows have the Store's phase
						// split (the python path's through kvfabric_phases).
						if p := r.PhaseUs; gpu >= 0 && (p == nil || p.Meta <= 0 || p.Copy <= 0) {
							t.Errorf("row %s %s %s %s gpu %d: phase split %+v", mode.name, path, dir, sizeLabel(size), gpu, p)
						}
						// --gpu-times: the Go paths' chunks were timed on the GPU.
						if p := r.PhaseUs; gpu >= 0 && path != pathPython && (p == nil || p.GPU <= 0) {
							t.Errorf("row %s %s %s %s gpu %d: no gpu phase with --gpu-times: %+v", mode.name, path, dir, sizeLabel(size), gpu, p)
						}
						// and a put row has its last pipeline's chunks, in
						// stream order on the GPU.
						if tl := r.PutTimeline; gpu >= 0 && path != pathPython && dir == "put" {
							keys := 0
							for i, c := range tl {
								keys += c.Keys
								if c.GPUFinish <= c.GPUStart || i > 0 && c.GPUStart < tl[i-1].GPUFinish {
									t.Errorf("row %s %s put %s gpu %d: chunk %d of %+v out of order", mode.name, path, sizeLabel(size), gpu, i, tl)
								}
								// Its PutStart was asked, answered and taken
								// before its copies were submitted.
								if c.Asked < 0 || c.Answered < c.Asked || c.Received < c.Answered || c.Submitted < c.Received {
									t.Errorf("row %s %s put %s gpu %d: chunk %d's put start times out of order: %+v", mode.name, path, sizeLabel(size), gpu, i, c)
								}
							}
							if len(tl) == 0 || keys > 32 {
								t.Errorf("row %s %s put %s gpu %d: timeline %+v (a pipeline of at most 32 keys)", mode.name, path, sizeLabel(size), gpu, tl)
							}
						}
					}
				}
			}
		}
	}
	if n := len(rep.Ceilings); n < 2*3 { // 1 + 2 GPUs, two Go paths
		t.Errorf("%d ceilings, want >= 6", n)
	}
	checkCeilings(t, rep, 2)
	svg, err := os.ReadFile(plotFile)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("plot %s: %v (%d bytes)", plotFile, err, len(svg))
	}
	s := out.String()
	for _, want := range []string{"ceiling GB/s", "go-remote", "live driver objects after teardown: 0", "wrote " + plotFile} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if err := runStoreBench(context.Background(), &out, storeBenchFlags{driver: "sim", paths: "go-embedded,carrier-pigeon"}); err == nil {
		t.Error("an unknown path was accepted")
	}
}

// checkCeilings: every ceiling was measured before and after its path's
// rounds (puts: putRuns times), the ceiling is the highest measurement, and
// each row's ratio is to its GPU's ceiling of its direction (the
// aggregate's to their sum).
func checkCeilings(t *testing.T, rep storeReport, putRuns int) {
	t.Helper()
	type key struct {
		mode, path string
		gpu        int
	}
	ceil := map[key]storeCeiling{}
	for _, c := range rep.Ceilings {
		if len(c.PutRuns) != putRuns || len(c.GetRuns) != 2 || c.PutGBps != slices.Max(c.PutRuns) || c.GetGBps != slices.Max(c.GetRuns) ||
			slices.Min(c.PutRuns) <= 0 || slices.Min(c.GetRuns) <= 0 {
			t.Errorf("ceiling %+v: want %d put and 2 get measurements, the ceilings their highest", c, putRuns)
		}
		ceil[key{c.Mode, c.Path, c.GPU}] = c
	}
	for _, r := range rep.Results {
		var want float64
		for g, c := range ceil {
			if g.mode == r.Mode && g.path == r.Path && (r.GPU < 0 || g.gpu == r.GPU) {
				want += map[string]float64{"put": c.PutGBps, "get": c.GetGBps}[r.Dir]
			}
		}
		if want <= 0 || math.Abs(r.CeilingGBps-want) > 1e-9*want || math.Abs(r.Ratio-r.GBps/want) > 1e-9 {
			t.Errorf("row %s %s %s %d gpu %d: ceiling %v ratio %v, want ceiling %v", r.Mode, r.Path, r.Dir, r.Size, r.GPU, r.CeilingGBps, r.Ratio, want)
		}
	}
}

// TestBenchStorePrefill: with --prefill each store is full before the
// rounds and keeps their objects, so the timed puts evict (about one object
// per key at steady state, counted from the master) while every round is
// still verified; each size starts from an empty store; the python path is
// skipped, saying why; nothing leaks.
func TestBenchStorePrefill(t *testing.T) {
	sd, err := sim.New(sim.Config{Granularity: 65536})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	t.Setenv(envAsKvfabric, "1") // the remote path's master is this binary
	jsonFile := filepath.Join(t.TempDir(), "store.json")
	var out bytes.Buffer
	err = runStoreBenchOn(context.Background(), &out, sd, "test", storeBenchFlags{sizes: "4KiB,64KiB", bytes: "256KiB", iters: 2,
		maxKeys: 32, paths: strings.Join([]string{pathEmbedded, pathRemote, pathPython}, ","), prefill: true, json: jsonFile})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rep, err := readStoreReport(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || !rep.Prefill || len(rep.Results) != 8 {
		t.Fatalf("report: ok %v prefill %v %d results\n%s", rep.OK, rep.Prefill, len(rep.Results), out.String())
	}
	for _, r := range rep.Results {
		switch {
		case !r.Verified:
			t.Errorf("%s %s %d: not verified: %s", r.Path, r.Dir, r.Size, r.Error)
		case r.Dir == "put" && (r.EvictionsPerKey == nil || *r.EvictionsPerKey < 0.5):
			t.Errorf("%s put %d: evictions per key %v, want about 1 (the store was full)", r.Path, r.Size, r.EvictionsPerKey)
		case r.Dir == "get" && r.EvictionsPerKey != nil:
			t.Errorf("%s get %d: evictions per key reported for a get", r.Path, r.Size)
		}
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != pathPython || !strings.Contains(rep.Skipped[0].Reason, "--prefill") {
		t.Errorf("skipped: %+v", rep.Skipped)
	}
	checkCeilings(t, rep, 1) // the full store's segment is not written after the rounds
	if !strings.Contains(out.String(), "evicted/key") {
		t.Errorf("table does not show the evictions:\n%s", out.String())
	}
	if live := sd.LiveObjects(); live.Total() != 0 {
		t.Errorf("leaked driver objects: %v", live)
	}
}

// TestBenchStoreVerifiesEveryRound makes the gets of the timed round (the
// second) silently copy nothing: bench --store must fail naming that round,
// mark the row unverified in the JSON, and leak nothing. (Objects of
// 256 KiB go to the copy engine, batched or one cuMemcpyAsync each, where
// the lossy driver sees them.)
func TestBenchStoreVerifiesEveryRound(t *testing.T) {
	sd, err := sim.New(sim.Config{Granularity: 65536})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	gets := 0
	drv := newLossy(sd, func(method, dir string, copies []cuda.Copy) bool {
		// The objects' copies only (not the ceiling's one large copy).
		if method != "MemcpyBatchAsync" && method != "MemcpyAsync" || dir != "get" || copies[0].Len != 256<<10 {
			return false
		}
		gets++
		return gets == 2
	})
	jsonFile := filepath.Join(t.TempDir(), "store.json")
	var out bytes.Buffer
	err = runStoreBenchOn(context.Background(), &out, drv, "test", storeBenchFlags{sizes: "256KiB", bytes: "512KiB", iters: 1,
		paths: pathEmbedded, json: jsonFile})
	if gets < 2 {
		t.Fatalf("%d gets seen: the fault cannot fire\n%s", gets, out.String())
	}
	var ve *verifyError
	if !errors.As(err, &ve) || ve.round != 2 || ve.rounds != 2 || ve.got != ve.poison {
		t.Fatalf("err = %v, want a *verifyError of round 2 of 2 that found the poison\n%s", err, out.String())
	}
	rep, err := readStoreReport(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Errors) == 0 || len(rep.Results) != 2 || rep.Results[0].Verified || !strings.Contains(rep.Results[0].Error, "round 2") {
		t.Errorf("JSON after a failed round: ok %v errors %q results %+v", rep.OK, rep.Errors, rep.Results)
	}
	if !strings.Contains(out.String(), "NO: verify round 2") {
		t.Errorf("table does not flag the round:\n%s", out.String())
	}
	if live := sd.LiveObjects(); live.Total() != 0 {
		t.Errorf("leaked driver objects: %v", live)
	}
}

// TestBenchStorePythonVerifies: a round whose bytes the Python side finds
// wrong (its test hook damages one byte after the gets of round 2) fails
// the command and is flagged in the table. Skipped without python3, numpy
// or libkvfabric.so.
func TestBenchStorePythonVerifies(t *testing.T) {
	for _, path := range []string{pathPython, pathPythonMulti} {
		t.Run(path, func(t *testing.T) {
			f := storeBenchFlags{driver: "sim", sizes: "64KiB", bytes: "256KiB", iters: 1, paths: path, python: "python3"}
			if _, _, _, skip := pythonSetup(f); skip != "" {
				t.Skip(skip)
			}
			t.Setenv("KVFABRIC_BENCH_STORE_CORRUPT", "1")
			var out bytes.Buffer
			err := runStoreBench(context.Background(), &out, f)
			if strings.Contains(out.String(), "skipped:") {
				t.Skipf("python path skipped:\n%s", out.String())
			}
			if err == nil || !strings.Contains(err.Error(), "verify round 2 of 2") {
				t.Fatalf("err = %v, want the python side's failed verification of round 2\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "NO: verify round 2") {
				t.Errorf("table does not flag the round:\n%s", out.String())
			}
		})
	}
}

// TestBenchStorePythonMulti: the python-multi path (named only; not a
// default path) scatters each object over min(64, size/4KiB) buffers —
// its JSON rows say how many — and every round verifies, at a size whose
// objects take fewer buffers and one that takes all 64. Skipped without
// python3, numpy or libkvfabric.so.
func TestBenchStorePythonMulti(t *testing.T) {
	if slices.Contains(storePaths, pathPythonMulti) {
		t.Fatalf("default paths %v include %s", storePaths, pathPythonMulti)
	}
	jsonFile := filepath.Join(t.TempDir(), "multi.json")
	f := storeBenchFlags{driver: "sim", sizes: "16KiB,256KiB", bytes: "1MiB", iters: 1, paths: pathPython + "," + pathPythonMulti,
		python: "python3", json: jsonFile}
	if _, _, _, skip := pythonSetup(f); skip != "" {
		t.Skip(skip)
	}
	var out bytes.Buffer
	if err := runStoreBench(context.Background(), &out, f); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "skipped:") {
		t.Skipf("python path skipped:\n%s", out.String())
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep storeReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[uint64]int{pathPython: {16 << 10: 0, 256 << 10: 0}, pathPythonMulti: {16 << 10: 4, 256 << 10: 64}}
	seen := 0
	for _, r := range rep.Results {
		if r.GPU < 0 {
			continue
		}
		b, ok := want[r.Path][r.Size]
		if !ok || !r.Verified || r.Ratio <= 0 || r.BuffersPerKey != b {
			t.Errorf("%s %s %s: verified %v, ratio %.3f, %d buffers per key (want %d)", r.Path, r.Dir, sizeLabel(r.Size),
				r.Verified, r.Ratio, r.BuffersPerKey, b)
		}
		seen++
	}
	if seen != 8 {
		t.Fatalf("%d result rows, want 8 (2 paths x 2 sizes x put, get)\n%s", seen, out.String())
	}
	var bad bytes.Buffer
	if err := runStoreBench(context.Background(), &bad, storeBenchFlags{driver: "sim", sizes: "64KiB", bytes: "256KiB", paths: "python-many"}); err == nil ||
		!strings.Contains(err.Error(), pathPythonMulti) {
		t.Fatalf("--paths python-many: %v; want an error listing %s", err, pathPythonMulti)
	}
}

// TestBenchStoreScatter: with --scatter the Go paths put each key from, and
// get it into, a random slot of the GPU buffers — the batch's copies no
// longer continue one another in key order — every round still verifies
// (the get's destination matches the put's source slot for slot), and a
// failed round names the key whose slot differs. The python path is
// skipped with it.
func TestBenchStoreScatter(t *testing.T) {
	slot, keyAt := storeSlots(64, false, 1)
	for i := range slot {
		if slot[i] != i || keyAt[i] != i {
			t.Fatalf("without scatter key %d at slot %d (keyAt %d)", i, slot[i], keyAt[i])
		}
	}
	slot, keyAt = storeSlots(64, true, 1)
	seen, adjoin := map[int]bool{}, 0
	for i := range slot {
		if seen[slot[i]] || keyAt[slot[i]] != i {
			t.Fatalf("scatter: slot %d twice or keyAt not the inverse", slot[i])
		}
		seen[slot[i]] = true
		if i > 0 && slot[i] == slot[i-1]+1 {
			adjoin++
		}
	}
	if adjoin > 8 {
		t.Fatalf("scatter: %d of 63 consecutive keys adjoin", adjoin)
	}

	const size = 64 << 10
	// The layout checks below look at the copies as the keys lay them
	// out, so the Store merges none (--separate-copies); merging is
	// checked last.
	run := func(scatter bool, failGet bool) (contiguous, putCopies int, out string, err error) {
		sd, err := sim.New(sim.Config{Granularity: 65536})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if live := sd.LiveObjects(); live.Total() != 0 {
				t.Errorf("leaked driver objects: %v", live)
			}
			sd.Close()
		}()
		gets := 0
		drv := newLossy(sd, func(method, dir string, copies []cuda.Copy) bool {
			if len(copies) == 0 || copies[0].Len != size {
				return false // the ceiling's copies
			}
			if dir == "put" {
				for i := 1; i < len(copies); i++ {
					if copies[i].Src == copies[i-1].Src+cuda.DevicePtr(copies[i-1].Len) {
						contiguous++
					}
				}
				putCopies += len(copies)
				return false
			}
			gets++
			return failGet && gets == 2
		})
		var b bytes.Buffer
		// The copy engine takes the objects: the wrapper sees its copies.
		err = runStoreBenchOn(context.Background(), &b, drv, "test", storeBenchFlags{sizes: "64KiB", bytes: "1MiB", iters: 1,
			paths: pathEmbedded, scatter: scatter, separate: true, ceMin: "64KiB"})
		return contiguous, putCopies, b.String(), err
	}
	c, n, out, err := run(false, false)
	if err != nil || n == 0 || c < n/2 {
		t.Fatalf("without --scatter: %v; %d of %d put copies continue the one before (want most)\n%s", err, c, n, out)
	}
	c, n, out, err = run(true, false)
	if err != nil || n == 0 || c > n/4 {
		t.Fatalf("--scatter: %v; %d of %d put copies continue the one before (want few)\n%s", err, c, n, out)
	}
	_, _, out, err = run(true, true)
	var ve *verifyError
	_, keyAt = storeSlots(16, true, slotSeed(0, size))
	if !errors.As(err, &ve) || ve.round != 2 || !strings.HasSuffix(ve.key, "/"+strconv.Itoa(keyAt[ve.block])) {
		t.Fatalf("--scatter, a get lost: err = %v; want round 2 naming the key of the block's slot\n%s", err, out)
	}
	var b bytes.Buffer
	if err := runStoreBench(context.Background(), &b, storeBenchFlags{driver: "sim", sizes: "64KiB", bytes: "256KiB", iters: 1,
		paths: pathPython, scatter: true}); err != nil || !strings.Contains(b.String(), "cover the Go paths only") {
		t.Fatalf("python path with --scatter: %v\n%s", err, b.String())
	}

	// The Store merges the copies of keys whose bytes continue one
	// another: most of them in the bench's own layout, few with
	// --scatter, none with --separate-copies; the JSON says how many.
	// (The bench's two segments are --bytes each; the master fills one
	// for 1/64 of its size, 128 KiB here, before it turns to the other:
	// runs of 8 keys.)
	merged := func(scatter, separate bool) (put, get float64) {
		js := filepath.Join(t.TempDir(), "m.json")
		var b bytes.Buffer
		if err := runStoreBench(context.Background(), &b, storeBenchFlags{driver: "sim", sizes: "16KiB", bytes: "8MiB", iters: 2,
			paths: pathEmbedded, scatter: scatter, separate: separate, json: js}); err != nil {
			t.Fatalf("scatter %v, separate %v: %v\n%s", scatter, separate, err, b.String())
		}
		var rep storeReport
		raw, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Separate != separate {
			t.Fatalf("separate_copies %v in the JSON, want %v", rep.Separate, separate)
		}
		for _, r := range rep.Results {
			if r.MergedPerKey == nil {
				t.Fatalf("%s row without merged_copies_per_key", r.Dir)
			}
			if r.Dir == "put" {
				put = *r.MergedPerKey
			} else {
				get = *r.MergedPerKey
			}
		}
		return put, get
	}
	if p, g := merged(false, false); p < 0.5 || g < 0.5 {
		t.Fatalf("bench layout: %.3f of the put and %.3f of the get copies merged; want most", p, g)
	}
	if p, g := merged(true, false); p > 0.25 || g > 0.25 {
		t.Fatalf("--scatter: %.3f of the put and %.3f of the get copies merged; want few", p, g)
	}
	if p, g := merged(false, true); p != 0 || g != 0 {
		t.Fatalf("--separate-copies: %.3f of the put and %.3f of the get copies merged; want none", p, g)
	}
}

// TestBenchStoreDefaultStream: with --default-stream the Go paths' batches
// go on the default stream, as an engine's that passes none (the copy
// engine's batches then run on the transfer engine's side stream); every
// round is still verified byte for byte, and the JSON says so.
func TestBenchStoreDefaultStream(t *testing.T) {
	t.Setenv(envAsKvfabric, "1") // the remote path's master is this binary
	js := filepath.Join(t.TempDir(), "d.json")
	var b bytes.Buffer
	if err := runStoreBench(context.Background(), &b, storeBenchFlags{driver: "sim", sizes: "16KiB,256KiB", bytes: "8MiB", iters: 2,
		paths: pathEmbedded + "," + pathRemote, defaultStream: true, json: js}); err != nil {
		t.Fatalf("--default-stream: %v\n%s", err, b.String())
	}
	rep, err := readStoreReport(js)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || !rep.DefaultStream || len(rep.Results) != 8 {
		t.Fatalf("ok %v, default_stream %v, %d rows (want true, true, 8)\n%s", rep.OK, rep.DefaultStream, len(rep.Results), b.String())
	}
}

// TestBenchStoreMasterPutPath: the report carries the master's put path
// alone for every object size, each phase timed, and the text names its
// bound as a share of the go-embedded put ceiling.
func TestBenchStoreMasterPutPath(t *testing.T) {
	js := filepath.Join(t.TempDir(), "m.json")
	var b bytes.Buffer
	if err := runStoreBench(context.Background(), &b, storeBenchFlags{driver: "sim", sizes: "4KiB,64KiB", bytes: "4MiB", iters: 1,
		paths: pathEmbedded, json: js}); err != nil {
		t.Fatalf("bench: %v\n%s", err, b.String())
	}
	rep, err := readStoreReport(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.MasterPutPath) != 2 {
		t.Fatalf("master_put_path %+v: want one per size", rep.MasterPutPath)
	}
	for i, c := range rep.MasterPutPath {
		if c.Size != rep.Sizes[i] || c.Keys <= 0 || c.PutStartNs <= 0 || c.PutEndNs <= 0 || c.PrepareNs <= 0 {
			t.Fatalf("master_put_path[%d] = %+v", i, c)
		}
	}
	if out := b.String(); !strings.Contains(out, "master put path alone") || !strings.Contains(out, "of the 1gpu go-embedded put ceiling") {
		t.Fatalf("no master put path lines in\n%s", out)
	}
}

// TestBenchStoreMasterTrace: --master-trace makes the go-remote path's
// master write an execution trace and a CPU profile, named for the mode.
func TestBenchStoreMasterTrace(t *testing.T) {
	t.Setenv(envAsKvfabric, "1") // the remote path's master is this binary
	tr := filepath.Join(t.TempDir(), "master.trace")
	var b bytes.Buffer
	if err := runStoreBench(context.Background(), &b, storeBenchFlags{driver: "sim", sizes: "64KiB", bytes: "1MiB", iters: 1,
		paths: pathRemote, masterTrace: tr}); err != nil {
		t.Fatalf("--master-trace: %v\n%s", err, b.String())
	}
	for _, f := range []string{tr + ".1gpu", tr + ".1gpu.cpu"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 {
			t.Fatalf("%s is empty", fi.Name())
		}
	}
}
