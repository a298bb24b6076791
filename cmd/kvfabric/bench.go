package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

type benchFlags struct {
	driver  string
	devices string
	sizes   string
	bytes   string
	iters   int
	ceMin   string
	objects int // --object-blocks: blocks grouped into objects (see the flag)
}

// storeFlags are the flags only `bench --store` reads.
type storeFlags struct {
	on       bool
	paths    string
	maxKeys  int
	chunk    int
	parts    int
	prefill  bool
	scatter  bool
	separate bool
	gpuTime  bool
	defaultS bool
	mTrace   string
	fastSpin string
	json     string
	plot     string
	python   string
	script   string
	replot   string
}

// gatherOpts are the flags only `bench --gather` reads.
type gatherOpts struct {
	on       bool
	objects  int
	rows     int
	rowBytes uint64
	sel      int
}

func init() {
	var f benchFlags
	var sf storeFlags
	var gf gatherOpts
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the transfer engine: DRAM-tier (HOST_NUMA VMM) <-> HBM copies per path vs the copy-engine ceiling",
		Long: `bench allocates, per GPU, a HOST_NUMA VMM pool (the DRAM tier) and HBM buffers,
measures the copy-engine ceiling (one large cuMemcpyAsync each way), then batches
of random pool blocks: put (HBM->DRAM) and get (DRAM->HBM) for each block size
through each path — SM kernel, cuMemcpyBatchAsync, per-copy cuMemcpyAsync — and
the auto-routed engine. Every batch, the warm-up included, puts bytes that
differ from the last batch's, gets them into a poisoned destination and is
verified byte for byte. GB/s are GPU event times of the batches alone; ratios
are to the ceiling measured in the same run. With several --devices the GPUs
run concurrently.

With --store it measures the Store instead (docs/perf/store.md): put and get
of objects of each --sizes (default 4KiB..16MiB) in batches of up to
--max-keys keys, up to --bytes per GPU per round (default 256MiB on CUDA), for
each of --paths: the Go Store API with an embedded master (go-embedded), with
a ` + "`kvfabric master`" + ` in another process (go-remote), and the Mooncake facade
in python3 (python: batch_put_from/batch_get_into on registered torch CUDA
tensors; skipped, saying why, without python3, torch or libkvfabric.so) and,
when named, python-multi (the same with every object scattered over
min(64, size/4KiB) buffers, as vLLM's connector scatters a KV block over its
layers: batch_put_from_multi_buffers/batch_get_into_multi_buffers). It
runs on the first of --devices (default: every GPU) alone, then on all of them
at once (one Store per GPU), reports each result per GPU and aggregated, as a
ratio to the copy-engine ceiling measured on each store's own pool segment
in the same run, verifies every round's bytes (the destination poisoned
before each get), and writes --json and --plot (.svg or .png).

With --gather it measures sparse row gather (docs/perf/gather.md): --objects
objects of --rows rows of --row-bytes bytes in the DRAM tier, held as views,
--select rows chosen at random (the same number from each object); the views'
gather with device and host indices, the one-shot Store.Gather, and a full get
of every object followed by the same selection in HBM, against the copy
engine moving only the selected bytes and the link's ceiling, on the first of
--devices. Every iteration is verified; --json writes the results.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sf.replot != "" {
				if !sf.on || sf.plot == "" {
					return errors.New("--replot needs --store and --plot")
				}
				return replotStore(cmd.OutOrStdout(), sf.replot, sf.plot)
			}
			if gf.on {
				if sf.on {
					return errors.New("--gather and --store are separate benchmarks")
				}
				dev, err := strconv.Atoi(strings.Split(f.devices, ",")[0])
				if err != nil {
					return fmt.Errorf("--devices %q: %w", f.devices, err)
				}
				return runGatherBench(cmd.Context(), cmd.OutOrStdout(), gatherFlags{driver: f.driver, device: dev,
					objects: gf.objects, rows: gf.rows, rowBytes: gf.rowBytes, sel: gf.sel, iters: f.iters, json: sf.json})
			}
			if sf.on {
				fl := cmd.Flags()
				sb := storeBenchFlags{driver: f.driver, iters: f.iters, paths: sf.paths, maxKeys: sf.maxKeys, chunk: sf.chunk, parts: sf.parts,
					prefill: sf.prefill, scatter: sf.scatter, separate: sf.separate, gpuTime: sf.gpuTime, defaultStream: sf.defaultS, masterTrace: sf.mTrace, fastSpin: sf.fastSpin, json: sf.json, plot: sf.plot, python: sf.python, script: sf.script}
				if fl.Changed("devices") {
					sb.devices = f.devices
				}
				if fl.Changed("sizes") {
					sb.sizes = f.sizes
				}
				if fl.Changed("bytes") {
					sb.bytes = f.bytes
				}
				if fl.Changed("copy-engine-min") {
					sb.ceMin = f.ceMin // the Go paths' copy_engine_min_bytes
				}
				return runStoreBench(cmd.Context(), cmd.OutOrStdout(), sb)
			}
			if sf.json != "" || sf.plot != "" || cmd.Flags().Changed("paths") {
				return errors.New("--json, --plot and --paths need --store (or --gather for --json)")
			}
			return runBench(cmd.OutOrStdout(), f)
		},
	}
	cmd.Flags().StringVar(&f.driver, "driver", choose.Auto, "driver to use: auto|cuda|sim")
	cmd.Flags().StringVar(&f.devices, "devices", "0", "comma-separated GPU ordinals, run concurrently")
	cmd.Flags().StringVar(&f.sizes, "sizes", "4KiB,64KiB,1MiB", "block sizes")
	cmd.Flags().StringVar(&f.bytes, "bytes", "", "bytes per batch (default 256MiB on CUDA, 2MiB on the simulator); the DRAM pool is 4x")
	cmd.Flags().IntVar(&f.iters, "iters", 0, "timed batches per measurement (default 5 on CUDA, 2 on the simulator)")
	cmd.Flags().StringVar(&f.ceMin, "copy-engine-min", "128KiB", "auto route: blocks from this size go to the copy engine")
	cmd.Flags().IntVar(&f.objects, "object-blocks", 0, "group the blocks into objects of this many blocks, each contiguous in the pool and scattered in HBM (block j of object o in 'tensor' j, as vLLM's layers), and also measure the staged path: whole objects by the copy engines through an HBM staging buffer, the SM kernel scattering or gathering in HBM")
	cmd.Flags().BoolVar(&sf.on, "store", false, "measure Store-level put/get per object size and client path instead (see Long help)")
	cmd.Flags().BoolVar(&gf.on, "gather", false, "measure sparse row gather from views instead (see Long help)")
	cmd.Flags().IntVar(&gf.objects, "objects", 0, "--gather: objects (default 64; 8 on the simulator)")
	cmd.Flags().IntVar(&gf.rows, "rows", 0, "--gather: rows per object (default 65536; 512 on the simulator)")
	cmd.Flags().Uint64Var(&gf.rowBytes, "row-bytes", 1152, "--gather: bytes per row (one MLA token-layer: 1152)")
	cmd.Flags().IntVar(&gf.sel, "select", 0, "--gather: rows selected in all (default 2048; 128 on the simulator)")
	cmd.Flags().StringVar(&sf.paths, "paths", strings.Join(storePaths, ","), "--store: client paths to measure (also: python-multi)")
	cmd.Flags().IntVar(&sf.maxKeys, "max-keys", 4096, "--store: keys per BatchPut/BatchGet at most")
	cmd.Flags().IntVar(&sf.chunk, "pipeline-chunk", 0, "--store: the Go paths' client.Options.PipelineChunk (keys per master call and copy submission; default client.DefaultPipelineChunk)")
	cmd.Flags().IntVar(&sf.parts, "batch-parts", 0, "--store: the Go paths' client.Options.BatchParts (parts a large batch put or get is split into, each on its own goroutine; default client.DefaultBatchParts, 1: no split)")
	cmd.Flags().BoolVar(&sf.gpuTime, "gpu-times", false, "--store: time every pipeline chunk's copies on the GPU (client.Options.TimeCopies; Go paths), reported as the gpu phase: whether the GPU was kept busy")
	cmd.Flags().BoolVar(&sf.prefill, "prefill", false, "--store: fill each GPU's store before the rounds and keep every round's objects, so that puts evict as in a full cache (Go paths; the python path is skipped)")
	cmd.Flags().BoolVar(&sf.scatter, "scatter", false, "--store: put each key from, and get it into, a random slot of the GPU buffers instead of key i at slot i, so that no two keys' buffers adjoin in key order, as in a paged KV cache (Go paths; the python path is skipped)")
	cmd.Flags().BoolVar(&sf.separate, "separate-copies", false, "--store: the Go paths' Stores copy every key on its own (client.Options.SeparateCopies) instead of merging the copies of keys whose bytes continue one another on both sides; the JSON's merged_copies_per_key says how many merged")
	cmd.Flags().BoolVar(&sf.defaultS, "default-stream", false, "--store: the Go paths put and get on the default (NULL) stream, as an engine that passes no stream does (the Mooncake facade, the python path), instead of a stream of their own")
	cmd.Flags().StringVar(&sf.mTrace, "master-trace", "", "--store: the go-remote path's `kvfabric master` writes an execution trace (go tool trace) to this file, the mode's name appended (.1gpu), and a CPU profile beside it (.1gpu.cpu)")
	cmd.Flags().StringVar(&sf.fastSpin, "fast-spin", "", "--store: the go-remote path's fast path spin, its master's --fast-spin and its Stores' master_fast_path_spin (a duration, 0 off; default: theirs, 50us)")
	cmd.Flags().StringVar(&sf.json, "json", "", "--store: write the results as JSON to this file")
	cmd.Flags().StringVar(&sf.plot, "plot", "", "--store: plot ratio to the ceiling vs object size to this .svg or .png file")
	cmd.Flags().StringVar(&sf.replot, "replot", "", "--store: do not measure; draw --plot from this --json file of an earlier run")
	cmd.Flags().StringVar(&sf.python, "python", "python3", "--store: the Python interpreter of the python path")
	cmd.Flags().StringVar(&sf.script, "python-script", "", "--store: the python path's script (default: scripts/bench-store.py of the repository, found from the working directory)")
	rootCmd.AddCommand(cmd)
}

// parseBytes reads "4KiB", "1MiB", "2GiB", "4096".
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suf string
		m   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional KiB/MiB/GiB suffix", s)
	}
	return v * mult, nil
}

func sizeLabel(n uint64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

type benchRow struct {
	dev   int
	size  uint64
	batch int
	route string
	dir   string
	gbps  float64
	ceil  float64
	bad   *verifyError // the first round whose bytes differ; nil when all matched
	// cpuMs is the mean wall time of the call that enqueues a batch (the
	// host's share: for the copy engines the driver takes each block's
	// descriptor on the CPU).
	cpuMs float64
}

// benchPoison is what get destinations hold before every round's get.
const benchPoison = 0xa5

func runBench(w io.Writer, f benchFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	drv, why, err := choose.Driver(f.driver, log)
	if err != nil {
		return err
	}
	defer drv.Close()
	return runBenchOn(w, drv, why, f)
}

// runBenchOn is runBench on drv, chosen for the reason why; the caller owns
// and closes drv.
func runBenchOn(w io.Writer, drv cuda.Driver, why string, f benchFlags) error {
	isSim := drv.Name() == "sim"
	if f.bytes == "" {
		f.bytes = "256MiB"
		if isSim {
			f.bytes = "2MiB"
		}
	}
	if f.iters <= 0 {
		f.iters = 5
		if isSim {
			f.iters = 2
		}
	}
	batchBytes, err := parseBytes(f.bytes)
	if err != nil {
		return fmt.Errorf("--bytes: %w", err)
	}
	ceMin, err := parseBytes(f.ceMin)
	if err != nil {
		return fmt.Errorf("--copy-engine-min: %w", err)
	}
	if f.objects < 0 {
		return fmt.Errorf("--object-blocks: %d: want 0 (off) or a count of blocks", f.objects)
	}
	var sizes []uint64
	for _, s := range strings.Split(f.sizes, ",") {
		v, err := parseBytes(s)
		if err != nil {
			return fmt.Errorf("--sizes: %w", err)
		}
		if v > batchBytes {
			return fmt.Errorf("--sizes: block %s is larger than --bytes %s", sizeLabel(v), sizeLabel(batchBytes))
		}
		if f.objects > 0 && v*uint64(f.objects) > batchBytes {
			return fmt.Errorf("--object-blocks %d: an object of %d blocks of %s is larger than --bytes %s", f.objects, f.objects, sizeLabel(v), sizeLabel(batchBytes))
		}
		sizes = append(sizes, v)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return err
	}
	var devs []cuda.Device
	for _, s := range strings.Split(f.devices, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 0 || v >= n {
			return fmt.Errorf("--devices: %q: want ordinals in 0..%d", s, n-1)
		}
		devs = append(devs, cuda.Device(v))
	}
	ver, _ := drv.DriverVersion()
	fmt.Fprintf(w, "driver: %s (version %d, cuMemcpyBatchAsync %v); devices %v run concurrently; %s per batch, %d timed batches\n",
		why, ver, drv.Capabilities().MemcpyBatchAsync, devs, sizeLabel(batchBytes), f.iters)

	rows := make([][]benchRow, len(devs))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i], errs[i] = benchDevice(drv, dev, sizes, batchBytes, f.iters, ceMin, f.objects)
		}()
	}
	wg.Wait()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dev\tblock\tbatch\tpath\tdir\tGB/s\tceiling GB/s\tratio\tbytes ok\tenqueue ms\t")
	for _, rs := range rows {
		for _, r := range rs {
			ok := "yes"
			if r.bad != nil {
				ok = fmt.Sprintf("NO round %d: byte %d of block %d", r.bad.round, r.bad.offset, r.bad.block)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%.1f\t%.1f\t%.2f\t%s\t%.3f\t\n", r.dev, sizeLabel(r.size), r.batch, r.route, r.dir, r.gbps, r.ceil, r.gbps/r.ceil, ok, r.cpuMs)
		}
	}
	tw.Flush()
	var bad []error
	for i, err := range errs {
		if err != nil {
			bad = append(bad, fmt.Errorf("device %d: %w", devs[i], err))
		}
	}
	for _, rs := range rows {
		for i, r := range rs {
			// The put and get rows of a path share one round-trip check.
			if r.bad != nil && (i == 0 || rs[i-1].bad != r.bad) {
				bad = append(bad, fmt.Errorf("device %d %s %s (put then get): %w", r.dev, sizeLabel(r.size), r.route, r.bad))
			}
		}
	}
	if oc, ok := drv.(cuda.ObjectCounter); ok {
		live := oc.LiveObjects()
		fmt.Fprintf(w, "live driver objects after teardown: %d\n", live.Total())
		if live.Total() != 0 {
			bad = append(bad, fmt.Errorf("leaked driver objects: %v", live))
		}
	}
	return errors.Join(bad...)
}

// benchDevice runs every measurement on one GPU and releases everything it
// created, in reverse order, whatever happened.
func benchDevice(drv cuda.Driver, dev cuda.Device, sizes []uint64, batchBytes uint64, iters int, ceMin uint64, objBlocks int) (rows []benchRow, err error) {
	var undo []func() error
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	ctx, err := drv.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return drv.PrimaryCtxRelease(dev) })
	s, evs, err := timingStream(drv, ctx, &undo)
	if err != nil {
		return nil, err
	}

	// The DRAM tier: one HOST_NUMA VMM allocation near the GPU.
	numa, aerr := drv.DeviceAttribute(dev, cuda.AttrHostNUMAID)
	if aerr != nil || numa < 0 {
		numa = 0
	}
	prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(numa)}}
	gran, err := drv.MemGetAllocationGranularity(ctx, prop, cuda.GranularityMinimum)
	if err != nil {
		return nil, err
	}
	poolSize := (4*batchBytes + gran - 1) / gran * gran
	h, err := drv.MemCreate(ctx, poolSize, prop)
	if err != nil {
		return nil, fmt.Errorf("HOST_NUMA pool of %s on node %d: %w", sizeLabel(poolSize), numa, err)
	}
	undo = append(undo, func() error { return drv.MemRelease(ctx, h) })
	pool, err := drv.MemAddressReserve(ctx, poolSize, gran)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return drv.MemAddressFree(ctx, pool, poolSize) })
	if err := drv.MemMap(ctx, pool, poolSize, 0, h); err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return drv.MemUnmap(ctx, pool, poolSize) })
	acc := []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(dev)}, Flags: cuda.AccessReadWrite}}
	if err := drv.MemSetAccess(ctx, pool, poolSize, acc); err != nil {
		return nil, err
	}
	var hbm [2]cuda.DevicePtr // source of puts, destination of gets
	for i := range hbm {
		if hbm[i], err = drv.MemAlloc(ctx, batchBytes); err != nil {
			return nil, err
		}
		p := hbm[i]
		undo = append(undo, func() error { return drv.MemFree(ctx, p) })
	}

	routes := []transfer.Route{transfer.RouteKernel, transfer.RouteCopyEach, transfer.RouteAuto}
	if drv.Capabilities().MemcpyBatchAsync {
		routes = []transfer.Route{transfer.RouteKernel, transfer.RouteCopyBatch, transfer.RouteCopyEach, transfer.RouteAuto}
	}
	engines := make(map[transfer.Route]*transfer.Engine)
	for _, r := range routes {
		eng, err := transfer.New(drv, ctx, dev, transfer.Options{Route: r, CopyEngineMinBytes: ceMin})
		if err != nil {
			return nil, err
		}
		engines[r] = eng
		undo = append(undo, eng.Close)
	}

	// timeOne returns the GPU time, in ms, of the work fn enqueues on s.
	var lastCPU time.Duration // timeOne's enqueueing call
	timeOne := func(fn func() error) (float32, error) {
		if err := drv.EventRecord(ctx, evs[0], s); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		lastCPU = time.Since(t0)
		if err := drv.EventRecord(ctx, evs[1], s); err != nil {
			return 0, err
		}
		if err := drv.EventSynchronize(ctx, evs[1]); err != nil {
			return 0, err
		}
		return drv.EventElapsedTime(ctx, evs[0], evs[1])
	}
	rate := func(bytes uint64, ms float32) float64 {
		return float64(bytes) * float64(iters) / (float64(max(ms, 1e-6)) * 1e6)
	}

	// Copy-engine ceiling: one large copy each way, timed like the paths
	// below (one warm-up, then iters batches, each between two events).
	ceil := map[string]float64{}
	for dir, c := range map[string]cuda.Copy{
		"put": {Dst: pool, Src: hbm[0], Len: batchBytes},
		"get": {Dst: hbm[1], Src: pool, Len: batchBytes},
	} {
		fn := func() error { return drv.MemcpyAsync(ctx, []cuda.Copy{c}, s) }
		var ms float32
		for r := 0; r <= iters; r++ {
			t, err := timeOne(fn)
			if err != nil {
				return nil, fmt.Errorf("ceiling %s: %w", dir, err)
			}
			if r > 0 {
				ms += t
			}
		}
		ceil[dir] = rate(batchBytes, ms)
	}

	// Round data. Every round — the warm-up and each timed batch of every
	// measurement — puts different bytes: round g's source is the window at
	// 8g of a random pattern uploaded once, copied on the GPU, so no round
	// can pass on bytes an earlier one left in the pool. Before its get,
	// the destination is filled with poison, so no round can pass on bytes
	// an earlier get left there. Both happen outside the timed events.
	nPaths := len(routes)
	if objBlocks > 0 {
		nPaths++ // the staged path
	}
	rounds := len(sizes) * nPaths * (iters + 1)
	rng := rand.New(rand.NewPCG(uint64(dev), 42))
	want := make([]byte, batchBytes+8*uint64(rounds))
	fillRandom(rng, want)
	pattern, err := drv.MemAlloc(ctx, uint64(len(want)))
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return drv.MemFree(ctx, pattern) })
	if err := drv.MemcpyHtoD(ctx, pattern, want); err != nil {
		return nil, err
	}
	poison, err := drv.MemAlloc(ctx, batchBytes)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return drv.MemFree(ctx, poison) })
	if err := drv.MemcpyHtoD(ctx, poison, bytes.Repeat([]byte{benchPoison}, int(batchBytes))); err != nil {
		return nil, err
	}

	got := make([]byte, batchBytes)
	g := 0                     // rounds run on this device
	var staging cuda.DevicePtr // the staged path's HBM buffer (--object-blocks)
	if objBlocks > 0 {
		if staging, err = drv.MemAlloc(ctx, batchBytes); err != nil {
			return nil, err
		}
		undo = append(undo, func() error { return drv.MemFree(ctx, staging) })
	}
	for _, size := range sizes {
		batch := int(batchBytes / size)
		var put, get, sPut, sPutObj, sGetObj, sGet []cuda.Copy
		if objBlocks > 0 {
			// Objects of objBlocks blocks: object o at a random object
			// slot of the pool, its block j at HBM block j*nObj+o.
			nObj := batch / objBlocks
			batch = nObj * objBlocks
			obj := uint64(objBlocks) * size
			oslots := rng.Perm(int(poolSize / obj))[:nObj]
			for o, sl := range oslots {
				for j := range objBlocks {
					d := pool + cuda.DevicePtr(uint64(sl)*obj+uint64(j)*size)
					h := cuda.DevicePtr(uint64(j*nObj+o) * size)
					st := staging + cuda.DevicePtr(uint64(o)*obj+uint64(j)*size)
					put = append(put, cuda.Copy{Dst: d, Src: hbm[0] + h, Len: size})
					get = append(get, cuda.Copy{Dst: hbm[1] + h, Src: d, Len: size})
					sPut = append(sPut, cuda.Copy{Dst: st, Src: hbm[0] + h, Len: size})
					sGet = append(sGet, cuda.Copy{Dst: hbm[1] + h, Src: st, Len: size})
				}
				d := pool + cuda.DevicePtr(uint64(sl)*obj)
				st := staging + cuda.DevicePtr(uint64(o)*obj)
				sPutObj = append(sPutObj, cuda.Copy{Dst: d, Src: st, Len: obj})
				sGetObj = append(sGetObj, cuda.Copy{Dst: st, Src: d, Len: obj})
			}
		} else {
			slots := rng.Perm(int(poolSize / size))[:batch]
			put = make([]cuda.Copy, batch)
			get = make([]cuda.Copy, batch)
			for i, sl := range slots {
				d := pool + cuda.DevicePtr(uint64(sl)*size)
				put[i] = cuda.Copy{Dst: d, Src: hbm[0] + cuda.DevicePtr(uint64(i)*size), Len: size}
				get[i] = cuda.Copy{Dst: hbm[1] + cuda.DevicePtr(uint64(i)*size), Src: d, Len: size}
			}
		}
		n := uint64(batch) * size // bytes each batch moves
		type path struct {
			label    string
			put, get func() error
		}
		var paths []path
		for _, r := range routes {
			eng := engines[r]
			paths = append(paths, path{r.String(), func() error { return eng.Submit(s, put) }, func() error { return eng.Submit(s, get) }})
		}
		if objBlocks > 0 && engines[transfer.RouteCopyBatch] != nil {
			k, ce := engines[transfer.RouteKernel], engines[transfer.RouteCopyBatch]
			paths = append(paths, path{"staged",
				func() error {
					if err := k.Submit(s, sPut); err != nil {
						return err
					}
					return ce.Submit(s, sPutObj)
				},
				func() error {
					if err := ce.Submit(s, sGetObj); err != nil {
						return err
					}
					return k.Submit(s, sGet)
				}})
		}
		for _, pa := range paths {
			r := pa.label
			var ms [2]float32        // put, get
			var cpu [2]time.Duration // their enqueueing calls
			var bad *verifyError
			for round := 0; round <= iters; round++ { // round 0: the warm-up
				off := 8 * uint64(g)
				g++
				setup := []cuda.Copy{
					{Dst: hbm[0], Src: pattern + cuda.DevicePtr(off), Len: n},
					{Dst: hbm[1], Src: poison, Len: n},
				}
				if err := drv.MemcpyAsync(ctx, setup, s); err != nil {
					return rows, fmt.Errorf("%s %s round %d: set up: %w", sizeLabel(size), r, round+1, err)
				}
				if err := drv.StreamSynchronize(ctx, s); err != nil {
					return rows, fmt.Errorf("%s %s round %d: set up: %w", sizeLabel(size), r, round+1, err)
				}
				for i, fn := range []func() error{pa.put, pa.get} {
					t, err := timeOne(fn)
					if err != nil {
						return rows, fmt.Errorf("%s %s round %d: %w", sizeLabel(size), r, round+1, err)
					}
					if round > 0 {
						ms[i] += t
						cpu[i] += lastCPU
					}
				}
				if err := drv.MemcpyDtoH(ctx, got[:n], hbm[1]); err != nil {
					return rows, err
				}
				if i, ok := firstDiff(got[:n], want[off:off+n]); !ok && bad == nil {
					bad = &verifyError{round: round + 1, rounds: iters + 1, block: i / size, offset: i % size,
						got: got[i], want: want[off+i], poison: benchPoison}
				}
			}
			rows = append(rows,
				benchRow{dev: int(dev), size: size, batch: batch, route: r, dir: "put HBM->DRAM", gbps: rate(n, ms[0]), ceil: ceil["put"], bad: bad,
					cpuMs: float64(cpu[0].Microseconds()) / 1e3 / float64(iters)},
				benchRow{dev: int(dev), size: size, batch: batch, route: r, dir: "get DRAM->HBM", gbps: rate(n, ms[1]), ceil: ceil["get"], bad: bad,
					cpuMs: float64(cpu[1].Microseconds()) / 1e3 / float64(iters)})
		}
	}
	return rows, nil
}

// timingStream creates a non-blocking stream and two events to time copies
// on it, appending their destruction to undo (run in reverse on return).
func timingStream(drv cuda.Driver, ctx cuda.Context, undo *[]func() error) (cuda.Stream, [2]cuda.Event, error) {
	var evs [2]cuda.Event
	s, err := drv.StreamCreate(ctx, cuda.StreamNonBlocking)
	if err != nil {
		return 0, evs, err
	}
	*undo = append(*undo, func() error { return drv.StreamDestroy(ctx, s) })
	for i := range evs {
		if evs[i], err = drv.EventCreate(ctx, cuda.EventDefault); err != nil {
			return 0, evs, err
		}
		ev := evs[i]
		*undo = append(*undo, func() error { return drv.EventDestroy(ctx, ev) })
	}
	return s, evs, nil
}
