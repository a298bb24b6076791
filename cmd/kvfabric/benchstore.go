package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/master"
)

// `kvfabric bench --store` (issue #13 item 6): Store-level put and get per
// object size, through each client path, on one GPU and on all GPUs at
// once, as ratios to the copy-engine ceiling measured in the same run.

// Store bench paths.
const (
	pathEmbedded = "go-embedded" // Go Store API, master in this process
	pathRemote   = "go-remote"   // Go Store API, `kvfabric master` in another process
	pathPython   = "python"      // kvfabric.compat.mooncake batch_put_from/batch_get_into in python3
	// pathPythonMulti is the python path with every object scattered over
	// multiBuffers buffers, as vLLM's Mooncake connector scatters a KV block
	// over its layers (batch_put_from_multi_buffers /
	// batch_get_into_multi_buffers); not among the default paths.
	pathPythonMulti = "python-multi"
)

var storePaths = []string{pathEmbedded, pathRemote, pathPython}

// allStorePaths are the paths --paths accepts.
var allStorePaths = append(slices.Clip(storePaths), pathPythonMulti)

// multiBuffers is how many buffers the python-multi path scatters an
// object over at most (a block of 32 layers' K and V caches), each at
// least 4 KiB: min(multiBuffers, size / 4 KiB).
const multiBuffers = 64

// isPython reports the paths run by scripts/bench-store.py.
func isPython(path string) bool { return path == pathPython || path == pathPythonMulti }

// defaultStoreSizes are the object sizes of `bench --store`.
const defaultStoreSizes = "4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB"

// storeBenchFlags are the flags of `bench --store` (with the bench flags
// they share: driver, devices, sizes, bytes, iters).
type storeBenchFlags struct {
	driver   string
	devices  string // "" means every visible GPU
	sizes    string
	bytes    string // bytes per round per GPU
	iters    int
	paths    string
	maxKeys  int
	chunk    int
	parts    int
	ceMin    string // copy_engine_min_bytes of the Go paths' Stores; "" keeps the default
	prefill  bool   // fill the stores first and keep every round's objects (puts evict)
	scatter  bool   // the Go paths' keys at random slots of the GPU buffers, not key i at slot i
	separate bool   // client.Options.SeparateCopies of the Go paths
	gpuTime  bool   // client.Options.TimeCopies of the Go paths
	// defaultStream: the Go paths' batches go on the default (NULL)
	// stream, as the python path's and an engine's that passes none.
	defaultStream bool
	// masterTrace: the go-remote path's master writes an execution trace
	// here (its --trace) and a CPU profile beside it (.cpu; the trace
	// then carries the CPU samples too), for where a remote call's time
	// goes on the master's side; the mode's name is appended (one master
	// per mode).
	masterTrace string
	// fastSpin ("": the defaults) is the go-remote path's fast path spin:
	// the master's --fast-spin and the Stores' master_fast_path_spin.
	fastSpin string
	json     string
	plot     string
	python   string // the python3 executable
	script   string // the Python side; "" finds scripts/bench-store.py
	// exe runs `kvfabric master` for the remote path; "" means this
	// executable (tests re-execute the test binary as kvfabric).
	exe string
}

// storeParams are the validated parameters of a run.
type storeParams struct {
	sizes       []uint64
	roundBytes  uint64 // bytes each GPU puts (and gets) per round, at most
	iters       int    // timed rounds per size, after one warm-up round
	maxKeys     int    // keys per BatchPut/BatchGet
	chunk       int    // client.Options.PipelineChunk of the Go paths (0: default)
	parts       int    // client.Options.BatchParts of the Go paths (0: default)
	ceMin       string // copy_engine_min_bytes of the Go paths ("": the default)
	prefill     bool   // the stores are full before the rounds, which keep their objects
	scatter     bool   // key i's buffers are slot perm[i] of the GPU buffers (storeSlots)
	separate    bool   // client.Options.SeparateCopies: no copies merged
	gpuTime     bool   // the Go paths time their chunks' copies on the GPU
	defStream   bool   // the Go paths' batches on the default stream (--default-stream)
	masterTrace string // the go-remote master's --trace file, and its CPU profile with .cpu (--master-trace; the mode's name appended)
	fastSpin    string // the go-remote path's --fast-spin and master_fast_path_spin ("": the defaults)
	capacity    uint64 // global_segment_size of each GPU's store
	maxMR       uint64
	socketDir   string
}

// storeRound is one timed round of one size on one GPU: wall time and the
// Store's own phase split (client.PhaseStats) of each direction.
type storeRound struct {
	put, get     time.Duration
	putPh, getPh client.PhaseStats
	evicted      uint64 // objects the master evicted during the put phase (with prefill)
	// putMerged and getMerged are the copies the Store folded into the one
	// before (client.Store.MergedCopies) in each phase.
	putMerged, getMerged uint64
}

// storeSize is one object size's result on one GPU.
type storeSize struct {
	size    uint64
	keys    int // per round
	batches int // per direction per round
	rounds  []storeRound
	bad     error // the first round whose bytes differ (a *verifyError from Go)
	buffers int   // buffers per key (python-multi), 0: one
	// timeline is the last put pipeline of the last round (--gpu-times;
	// Go paths).
	timeline []client.ChunkTime
}

// storeGPU is one GPU's results for one path.
type storeGPU struct {
	dev              int
	ceilPut, ceilGet float64   // GB/s, measured on this path's pool (python: the embedded path's): the highest of
	ceilPuts         []float64 // each measurement: before the rounds and after them (put: not with --prefill)
	ceilGets         []float64
	sizes            []storeSize
}

// formatGBps formats GB/s figures as "45.37, 55.20".
func formatGBps(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

// storeMode is a set of GPUs that run at once: the first GPU alone, then
// every GPU.
type storeMode struct {
	name string // "1gpu" or "<n>gpus"
	devs []cuda.Device
}

// Output JSON (--json): see docs/perf/store.md.
type storeReport struct {
	Kind          string         `json:"kind"`
	Driver        string         `json:"driver"`
	DriverVersion int            `json:"driver_version"`
	Devices       []int          `json:"devices"`
	Sizes         []uint64       `json:"sizes"`
	RoundBytes    uint64         `json:"round_bytes"`
	Iters         int            `json:"iters"`
	MaxKeys       int            `json:"max_keys_per_batch"`
	PipelineChunk int            `json:"pipeline_chunk,omitempty"`  // --pipeline-chunk; 0: the client's default
	BatchParts    int            `json:"batch_parts"`               // the Go paths' client.Options.BatchParts (--batch-parts, or the default it resolved to)
	FastSpin      string         `json:"fast_spin,omitempty"`       // --fast-spin: the go-remote path's master and Stores' fast path spin
	CopyEngineMin string         `json:"copy_engine_min,omitempty"` // --copy-engine-min given with --store: the Go paths' copy_engine_min_bytes
	Prefill       bool           `json:"prefill,omitempty"`         // --prefill: the stores were full and every put evicted
	Scatter       bool           `json:"scatter,omitempty"`         // --scatter: each key's buffers at a random slot, not key i at slot i
	Separate      bool           `json:"separate_copies,omitempty"` // --separate-copies: the Go paths merged no copies
	GPUTimes      bool           `json:"gpu_times,omitempty"`       // --gpu-times: the Go paths' rows have the gpu phase
	DefaultStream bool           `json:"default_stream,omitempty"`  // --default-stream: the Go paths' batches went on the default stream
	Ceilings      []storeCeiling `json:"ceilings"`
	// MasterPutPath is the master's own put path alone on this host's CPU
	// per object size (master.MeasurePutPath, in the Go paths' chunks):
	// for small objects the embedded put's bound, which the copy-engine
	// ceiling does not show and which varies from host to host.
	MasterPutPath []master.PutPathCost `json:"master_put_path,omitempty"`
	Results       []storeResult        `json:"results"`
	Skipped       []storeSkip          `json:"skipped"`
	OK            bool                 `json:"ok"`
	Errors        []string             `json:"errors"`
}

type storeCeiling struct {
	Mode    string  `json:"mode"`
	Path    string  `json:"path"`
	GPU     int     `json:"gpu"`
	PutGBps float64 `json:"put_gbps"` // the ceiling: the highest of put_runs
	GetGBps float64 `json:"get_gbps"`
	// PutRuns and GetRuns are each measurement, in order: before the
	// rounds, after them (a put after the rounds not with --prefill).
	PutRuns []float64 `json:"put_runs_gbps"`
	GetRuns []float64 `json:"get_runs_gbps"`
}

type storeResult struct {
	Mode string `json:"mode"`
	Path string `json:"path"`
	Dir  string `json:"dir"` // "put" (HBM -> store) or "get" (store -> HBM)
	Size uint64 `json:"size"`
	// GPU is the device, or -1 for the aggregate of a mode's GPUs.
	GPU           int     `json:"gpu"`
	Keys          int     `json:"keys_per_round"`
	Batches       int     `json:"batches_per_round"`
	BytesPerRound uint64  `json:"bytes_per_round"`
	Rounds        int     `json:"timed_rounds"`
	Seconds       float64 `json:"seconds"`
	GBps          float64 `json:"gbps"`
	CeilingGBps   float64 `json:"ceiling_gbps"`
	Ratio         float64 `json:"ratio"`
	Verified      bool    `json:"verified"`
	Error         string  `json:"error,omitempty"`
	// PhaseUs is the Store's time per key in each phase of the timed
	// rounds (client.PhaseStats: check, meta, resolve, copy), in µs; Go
	// paths only, not in aggregate rows.
	PhaseUs *storePhases `json:"phase_us_per_key,omitempty"`
	// EvictionsPerKey is how many objects the master evicted per key put
	// in the timed rounds (--prefill; Go paths' put rows).
	EvictionsPerKey *float64 `json:"evictions_per_key,omitempty"`
	// MergedPerKey is the share of the timed rounds' keys whose copy the
	// Store folded into the copy before it (bytes that continue the last
	// key's on both sides; client.Store.MergedCopies); Go paths' per-GPU
	// rows.
	MergedPerKey *float64 `json:"merged_copies_per_key,omitempty"`
	// BuffersPerKey is how many buffers each object was scattered over
	// (python-multi; absent: one).
	BuffersPerKey int `json:"buffers_per_key,omitempty"`
	// PutTimeline is, with --gpu-times, the chunks of the last round's
	// last put pipeline (client.ChunkTime, µs from its start; Go paths'
	// per-GPU put rows): where the GPU waited.
	PutTimeline []storeChunkTime `json:"put_timeline_us,omitempty"`
}

// storeChunkTime is a client.ChunkTime in µs.
type storeChunkTime struct {
	Keys      int     `json:"keys"`
	Asked     float64 `json:"asked"`
	Answered  float64 `json:"answered"`
	Received  float64 `json:"received"`
	Submitted float64 `json:"submitted"`
	Waited    float64 `json:"waited"`
	GPUStart  float64 `json:"gpu_start"`
	GPUFinish float64 `json:"gpu_finish"`
}

func chunkTimesUs(tl []client.ChunkTime) []storeChunkTime {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	var out []storeChunkTime
	for _, c := range tl {
		out = append(out, storeChunkTime{Keys: c.Keys, Asked: us(c.Asked), Answered: us(c.Answered), Received: us(c.Received), Submitted: us(c.Submitted), Waited: us(c.Waited), GPUStart: us(c.GPUStart), GPUFinish: us(c.GPUFinish)})
	}
	return out
}

// storePhases is client.PhaseStats per key, in µs.
type storePhases struct {
	Check   float64 `json:"check"`
	Meta    float64 `json:"meta"`
	Resolve float64 `json:"resolve"`
	Copy    float64 `json:"copy"`
	// The breakdown (overlapping the phases; see client.PhaseStats):
	// time inside the master's calls wherever they ran, blocked on copies,
	// in PutEnd.
	Master float64 `json:"master"`
	Wait   float64 `json:"wait"`
	End    float64 `json:"end"`
	// GPU is the chunks' copies' time on the GPU (--gpu-times), summed
	// over a batch's parts like the rest.
	GPU float64 `json:"gpu,omitempty"`
}

func phasesPerKey(p client.PhaseStats) *storePhases {
	if p.Keys == 0 {
		return nil
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(p.Keys) }
	return &storePhases{Check: us(p.Check), Meta: us(p.Meta), Resolve: us(p.Resolve), Copy: us(p.Copy),
		Master: us(p.Master), Wait: us(p.Wait), End: us(p.End), GPU: us(p.GPU)}
}

type storeSkip struct {
	Mode   string `json:"mode"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func runStoreBench(ctx context.Context, w io.Writer, f storeBenchFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	drv, why, err := choose.ProviderDriver(f.driver, log) // every GPU's store provides capacity
	if err != nil {
		return fmt.Errorf("--driver=%s: %w", f.driver, err)
	}
	defer drv.Close()
	return runStoreBenchOn(ctx, w, drv, why, f)
}

// runStoreBenchOn is runStoreBench on drv, chosen for the reason why; the
// caller owns and closes drv.
func runStoreBenchOn(ctx context.Context, w io.Writer, drv cuda.Driver, why string, f storeBenchFlags) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	isSim := drv.Name() == "sim"
	p := storeParams{maxKeys: f.maxKeys, iters: f.iters, chunk: f.chunk, parts: f.parts, ceMin: f.ceMin, prefill: f.prefill, scatter: f.scatter, separate: f.separate, gpuTime: f.gpuTime, defStream: f.defaultStream, masterTrace: f.masterTrace, fastSpin: f.fastSpin}
	if p.chunk < 0 {
		return fmt.Errorf("--pipeline-chunk %d: want 0 (the default) or more", p.chunk)
	}
	if p.parts < 0 {
		return fmt.Errorf("--batch-parts %d: want 0 (the default) or more", p.parts)
	}
	if p.fastSpin != "" {
		d, err := time.ParseDuration(p.fastSpin)
		if err == nil {
			err = master.CheckFastSpin("--fast-spin", d)
		}
		if err != nil {
			return fmt.Errorf("--fast-spin %q: %w", p.fastSpin, err)
		}
	}
	if f.sizes == "" {
		f.sizes = defaultStoreSizes
	}
	if f.bytes == "" {
		f.bytes = "256MiB"
		if isSim {
			f.bytes = "1MiB"
		}
	}
	if p.iters <= 0 {
		p.iters = 3
		if isSim {
			p.iters = 1
		}
	}
	if p.maxKeys <= 0 {
		p.maxKeys = 4096
	}
	if p.roundBytes, err = parseBytes(f.bytes); err != nil {
		return fmt.Errorf("--bytes: %w", err)
	}
	for _, s := range strings.Split(f.sizes, ",") {
		v, err := parseBytes(s)
		if err != nil {
			return fmt.Errorf("--sizes: %w", err)
		}
		if v > p.roundBytes {
			return fmt.Errorf("--sizes: object %s is larger than --bytes %s (the bytes per round)", sizeLabel(v), sizeLabel(p.roundBytes))
		}
		p.sizes = append(p.sizes, v)
	}
	paths := storePaths
	if f.paths != "" {
		paths = nil
		for _, s := range strings.Split(f.paths, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(allStorePaths, s) {
				return fmt.Errorf("--paths: %q: want some of %s", s, strings.Join(allStorePaths, ","))
			}
			paths = append(paths, s)
		}
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return err
	}
	var devs []cuda.Device
	if f.devices == "" {
		for i := range n {
			devs = append(devs, cuda.Device(i))
		}
	} else {
		for _, s := range strings.Split(f.devices, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || v < 0 || v >= n || slices.Contains(devs, cuda.Device(v)) {
				return fmt.Errorf("--devices: %q: want distinct ordinals in 0..%d", s, n-1)
			}
			devs = append(devs, cuda.Device(v))
		}
	}
	if len(devs) == 0 {
		return errors.New("no GPU")
	}
	// Each GPU's store holds one round's objects at a time (they are
	// removed after the round), with as much to spare, in two chunks.
	gran, err := hostNUMAGranularity(drv, devs[0])
	if err != nil {
		return err
	}
	// With --prefill it holds eight rounds and is full before the first:
	// each put evicts. Eviction is approximate LRU (the oldest of 16
	// sampled objects that are not leased), so a round's own objects can be
	// victims when the sample holds nothing older: with the round and the
	// previous one (leased until its releases go out) a quarter of the
	// store, that is about 0.25^16 per eviction. (With four rounds it was
	// every few rounds.)
	room := 2 * p.roundBytes
	if p.prefill {
		room = 8 * p.roundBytes
	}
	p.capacity = (room + 2*gran - 1) / (2 * gran) * (2 * gran)
	p.maxMR = p.capacity / 2
	if p.socketDir, err = os.MkdirTemp("", "kvf-bench-store-"); err != nil {
		return err
	}
	defer os.RemoveAll(p.socketDir)

	ver, _ := drv.DriverVersion()
	rep := storeReport{Kind: "kvfabric-bench-store", Driver: why, DriverVersion: ver, Sizes: p.sizes,
		RoundBytes: p.roundBytes, Iters: p.iters, MaxKeys: p.maxKeys, PipelineChunk: p.chunk, FastSpin: p.fastSpin, CopyEngineMin: p.ceMin, Prefill: p.prefill, Scatter: p.scatter, Separate: p.separate, GPUTimes: p.gpuTime, DefaultStream: p.defStream, BatchParts: cmp.Or(p.parts, client.DefaultBatchParts()), Ceilings: []storeCeiling{}, Results: []storeResult{}, Skipped: []storeSkip{}}
	for _, d := range devs {
		rep.Devices = append(rep.Devices, int(d))
	}
	fmt.Fprintf(w, "bench --store: driver %s (version %d); GPUs %v; objects %s; up to %s per GPU per round in batches of <= %d keys; 1 warm-up + %d timed rounds, every round verified\n",
		why, ver, devs, f.sizes, sizeLabel(p.roundBytes), p.maxKeys, p.iters)

	for _, size := range p.sizes {
		keys := int(min(uint64(p.maxKeys), max(p.roundBytes/size, 1)))
		c, err := master.MeasurePutPath(ctx, size, keys, cmp.Or(p.chunk, client.DefaultPipelineChunk), 3, 2, p.maxMR)
		if err != nil {
			return fmt.Errorf("master put path at %s: %w", sizeLabel(size), err)
		}
		rep.MasterPutPath = append(rep.MasterPutPath, c)
	}

	modes := []storeMode{{name: "1gpu", devs: devs[:1]}}
	if len(devs) > 1 {
		modes = append(modes, storeMode{name: fmt.Sprintf("%dgpus", len(devs)), devs: devs})
	}
	var errs []error
	for _, m := range modes {
		var ceil []storeGPU // the embedded path's, for the python path's ratios
		for _, path := range paths {
			t0 := time.Now()
			var gpus []storeGPU
			var skip string
			var perr error
			switch path {
			case pathEmbedded, pathRemote:
				gpus, perr = runStoreGo(ctx, drv, path, m, p, f.exe, false)
				if path == pathEmbedded || ceil == nil {
					ceil = gpus
				}
			case pathPython, pathPythonMulti:
				if p.prefill || p.scatter || p.separate {
					skip = "--prefill, --scatter and --separate-copies cover the Go paths only"
					break
				}
				if _, _, _, skip = pythonSetup(f); skip != "" {
					break
				}
				if ceil == nil { // measure the ceiling on an embedded store
					if ceil, perr = runStoreGo(ctx, drv, pathEmbedded, m, p, f.exe, true); perr != nil {
						break
					}
				}
				tensors := 0
				if path == pathPythonMulti {
					tensors = multiBuffers
				}
				gpus, skip, perr = runStorePython(ctx, drv, m, p, f, ceil, tensors)
			}
			if skip != "" {
				fmt.Fprintf(w, "%s %s: skipped: %s\n", m.name, path, skip)
				rep.Skipped = append(rep.Skipped, storeSkip{Mode: m.name, Path: path, Reason: skip})
				continue
			}
			if perr != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", m.name, path, perr))
			}
			fmt.Fprintf(w, "%s %s: done in %.1fs\n", m.name, path, time.Since(t0).Seconds())
			for _, g := range gpus {
				rep.Ceilings = append(rep.Ceilings, storeCeiling{Mode: m.name, Path: path, GPU: g.dev, PutGBps: g.ceilPut, GetGBps: g.ceilGet,
					PutRuns: g.ceilPuts, GetRuns: g.ceilGets})
				for _, c := range []struct {
					dir  string
					runs []float64
				}{{"put", g.ceilPuts}, {"get", g.ceilGets}} {
					if len(c.runs) > 1 && slices.Min(c.runs) < 0.95*slices.Max(c.runs) {
						fmt.Fprintf(w, "%s %s gpu %d: %s ceiling measured %s GB/s: the highest is the ceiling\n",
							m.name, path, g.dev, c.dir, formatGBps(c.runs))
					}
				}
			}
			rows, verr := storeRows(m, path, gpus, p)
			rep.Results = append(rep.Results, rows...)
			errs = append(errs, verr...)
		}
	}
	if oc, ok := drv.(cuda.ObjectCounter); ok {
		live := oc.LiveObjects()
		fmt.Fprintf(w, "live driver objects after teardown: %d\n", live.Total())
		if live.Total() != 0 {
			errs = append(errs, fmt.Errorf("leaked driver objects: %v", live))
		}
	}
	writeStoreTable(w, rep.Results)
	writeMasterPutPath(w, rep)
	for _, e := range errs {
		rep.Errors = append(rep.Errors, e.Error())
	}
	rep.OK = len(errs) == 0
	if f.json != "" {
		if jerr := writeJSON(f.json, rep); jerr != nil {
			errs = append(errs, fmt.Errorf("--json: %w", jerr))
		} else {
			fmt.Fprintf(w, "wrote %s\n", f.json)
		}
	}
	if f.plot != "" {
		if perr := plotStore(f.plot, rep); perr != nil {
			errs = append(errs, fmt.Errorf("--plot: %w", perr))
		} else {
			fmt.Fprintf(w, "wrote %s\n", f.plot)
		}
	}
	return errors.Join(errs...)
}

// hostNUMAGranularity is the HOST_NUMA allocation granularity of dev's
// host NUMA node (node 0 when it has none).
func hostNUMAGranularity(drv cuda.Driver, dev cuda.Device) (uint64, error) {
	numa, err := drv.DeviceAttribute(dev, cuda.AttrHostNUMAID)
	if err != nil || numa < 0 {
		numa = 0
	}
	ctx, err := drv.PrimaryCtxRetain(dev)
	if err != nil {
		return 0, err
	}
	prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(numa)}}
	g, err := drv.MemGetAllocationGranularity(ctx, prop, cuda.GranularityMinimum)
	return g, errors.Join(err, drv.PrimaryCtxRelease(dev))
}

// storeRows turns one path's per-GPU results into rows: per GPU, and for
// several GPUs their aggregate. It returns the verification failures.
func storeRows(m storeMode, path string, gpus []storeGPU, p storeParams) ([]storeResult, []error) {
	var rows []storeResult
	var errs []error
	for si, size := range p.sizes {
		for _, dir := range []string{"put", "get"} {
			var aggBytes, aggCeil float64
			var aggSec float64 // per round, the slowest GPU (they start each phase together)
			var agg storeResult
			ok := true
			for gi, g := range gpus {
				if si >= len(g.sizes) {
					continue
				}
				s := g.sizes[si]
				ceil := g.ceilPut
				if dir == "get" {
					ceil = g.ceilGet
				}
				var sec float64
				var ph client.PhaseStats
				var evicted, merged uint64
				for ri, r := range s.rounds {
					t, rph, rm := r.put, r.putPh, r.putMerged
					if dir == "get" {
						t, rph, rm = r.get, r.getPh, r.getMerged
					}
					sec += t.Seconds()
					ph = ph.Add(rph)
					evicted += r.evicted
					merged += rm
					if gi == 0 {
						aggSec += maxRound(gpus, si, ri, dir)
					}
				}
				bytes := float64(uint64(s.keys)*size) * float64(len(s.rounds))
				row := storeResult{Mode: m.name, Path: path, Dir: dir, Size: size, GPU: g.dev, Keys: s.keys, Batches: s.batches,
					BytesPerRound: uint64(s.keys) * size, Rounds: len(s.rounds), Seconds: sec, CeilingGBps: ceil, Verified: s.bad == nil, BuffersPerKey: s.buffers,
					PhaseUs: phasesPerKey(ph)}
				if dir == "put" {
					row.PutTimeline = chunkTimesUs(s.timeline)
				}
				if sec > 0 {
					row.GBps = bytes / sec / 1e9
				}
				if ceil > 0 {
					row.Ratio = row.GBps / ceil
				}
				if !isPython(path) && len(s.rounds) > 0 {
					mk := float64(merged) / float64(s.keys*len(s.rounds))
					row.MergedPerKey = &mk
				}
				if p.prefill && dir == "put" && !isPython(path) && len(s.rounds) > 0 {
					e := float64(evicted) / float64(s.keys*len(s.rounds))
					row.EvictionsPerKey = &e
				}
				if s.bad != nil {
					row.Error = s.bad.Error()
					ok = false
					if dir == "put" { // one round trip per round: report it once
						errs = append(errs, fmt.Errorf("%s %s gpu %d %s (put then get): %w", m.name, path, g.dev, sizeLabel(size), s.bad))
					}
				}
				rows = append(rows, row)
				aggBytes += bytes
				aggCeil += ceil
				agg = row
			}
			if len(gpus) > 1 && len(rows) > 0 {
				agg.GPU, agg.Seconds, agg.CeilingGBps, agg.Verified = -1, aggSec, aggCeil, ok
				agg.Keys *= len(gpus)
				agg.Batches *= len(gpus)
				agg.BytesPerRound *= uint64(len(gpus))
				agg.GBps, agg.Ratio, agg.Error, agg.PhaseUs, agg.EvictionsPerKey, agg.MergedPerKey, agg.PutTimeline = 0, 0, "", nil, nil, nil, nil
				if aggSec > 0 {
					agg.GBps = aggBytes / aggSec / 1e9
				}
				if aggCeil > 0 {
					agg.Ratio = agg.GBps / aggCeil
				}
				rows = append(rows, agg)
			}
		}
	}
	return rows, errs
}

// maxRound is the slowest GPU's time for round ri of size si in dir.
func maxRound(gpus []storeGPU, si, ri int, dir string) float64 {
	var m time.Duration
	for _, g := range gpus {
		if si >= len(g.sizes) || ri >= len(g.sizes[si].rounds) {
			continue
		}
		r := g.sizes[si].rounds[ri]
		t := r.put
		if dir == "get" {
			t = r.get
		}
		m = max(m, t)
	}
	return m.Seconds()
}

// writeMasterPutPath prints the master's put path alone per object size,
// and the bound it sets an embedded put as a share of the put ceiling
// the 1gpu go-embedded path measured.
func writeMasterPutPath(w io.Writer, rep storeReport) {
	if len(rep.MasterPutPath) == 0 {
		return
	}
	var ceil float64
	for _, c := range rep.Ceilings {
		if c.Mode == "1gpu" && c.Path == pathEmbedded {
			ceil = c.PutGBps
		}
	}
	fmt.Fprintln(w, "master put path alone on this host's CPU (no GPU; PutStart + PutEnd under its lock, prepare beside it on the pipeline):")
	for _, c := range rep.MasterPutPath {
		line := fmt.Sprintf("  %7s  %.3f + %.3f us/key (prepare %.3f): at most %.2f GB/s", sizeLabel(c.Size),
			c.PutStartNs/1e3, c.PutEndNs/1e3, c.PrepareNs/1e3, c.GBps())
		if ceil > 0 {
			line += fmt.Sprintf(", %.3f of the 1gpu go-embedded put ceiling", c.GBps()/ceil)
		}
		fmt.Fprintln(w, line)
	}
}

func writeStoreTable(w io.Writer, rows []storeResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tpath\tdir\tobject\tgpu\tkeys/round\tbatches\tGB/s\tceiling GB/s\tratio\tbytes ok\tus/key: check meta resolve copy | master wait end\t")
	for _, r := range rows {
		gpu := strconv.Itoa(r.GPU)
		if r.GPU < 0 {
			gpu = "all"
		}
		ok := "yes"
		if !r.Verified {
			ok = "NO"
			if r.Error != "" {
				ok = "NO: " + r.Error
			}
		}
		ph := "-"
		if p := r.PhaseUs; p != nil {
			ph = fmt.Sprintf("%.3f %.3f %.3f %.3f | %.3f %.3f %.3f", p.Check, p.Meta, p.Resolve, p.Copy, p.Master, p.Wait, p.End)
			if p.GPU > 0 {
				ph += fmt.Sprintf(" | gpu %.3f", p.GPU)
			}
		}
		if e := r.EvictionsPerKey; e != nil {
			ph += fmt.Sprintf(" | evicted/key %.2f", *e)
		}
		if m := r.MergedPerKey; m != nil && *m > 0 {
			ph += fmt.Sprintf(" | merged/key %.3f", *m)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.3f\t%s\t%s\t\n", r.Mode, r.Path, r.Dir, sizeLabel(r.Size), gpu,
			r.Keys, r.Batches, r.GBps, r.CeilingGBps, r.Ratio, ok, ph)
	}
	tw.Flush()
	for _, r := range rows {
		if len(r.PutTimeline) == 0 {
			continue
		}
		fmt.Fprintf(w, "put timeline %s %s %s gpu %d (the last round's last pipeline; µs from its start):\n", r.Mode, r.Path, sizeLabel(r.Size), r.GPU)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "chunk\tkeys\tput start asked\tanswered\treceived\tsubmitted\tgpu start\tgpu end\tgpu idle before\twaited\t")
		var prev float64
		for i, c := range r.PutTimeline {
			fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", i, c.Keys, c.Asked, c.Answered, c.Received, c.Submitted, c.GPUStart, c.GPUFinish, c.GPUStart-prev, c.Waited)
			prev = c.GPUFinish
		}
		tw.Flush()
	}
}

// barrier lets a mode's GPUs start every timed phase together. A party that
// fails breaks it, and every wait then returns an error.
type barrier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n, here int
	gen     uint64
	broken  error
}

func newBarrier(n int) *barrier {
	b := &barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *barrier) wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken != nil {
		return b.broken
	}
	gen := b.gen
	b.here++
	if b.here == b.n {
		b.here = 0
		b.gen++
		b.cond.Broadcast()
		return nil
	}
	for gen == b.gen && b.broken == nil {
		b.cond.Wait()
	}
	if gen == b.gen {
		return b.broken
	}
	return nil
}

func (b *barrier) abort(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken == nil {
		b.broken = fmt.Errorf("another GPU failed: %w", err)
	}
	b.cond.Broadcast()
}

// runStoreGo runs one Go path (embedded or remote master) on the mode's
// GPUs at once: one Store per GPU, each providing capacity and consuming.
// With ceilingOnly it measures the ceilings and stops.
func runStoreGo(ctx context.Context, drv cuda.Driver, path string, m storeMode, p storeParams, exe string, ceilingOnly bool) (gpus []storeGPU, err error) {
	var svc *master.Service
	addr := config.MasterEmbedded
	var mc master.Client
	switch path {
	case pathEmbedded:
		// A short lease: a store's Close waits for the readers' leases.
		if svc, err = master.New(master.Config{LeaseTTL: 2 * time.Second}); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, svc.Close()) }()
		mc = master.NewEmbedded(svc)
	case pathRemote:
		var stop func() error
		var extra []string
		if p.masterTrace != "" {
			extra = []string{"--trace", p.masterTrace + "." + m.name, "--cpuprofile", p.masterTrace + "." + m.name + ".cpu"}
		}
		if p.fastSpin != "" {
			extra = append(extra, "--fast-spin", p.fastSpin)
		}
		if addr, stop, err = spawnMaster(ctx, exe, p.socketDir, extra...); err != nil {
			return nil, fmt.Errorf("start kvfabric master: %w", err)
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	stores := make([]*client.Store, len(m.devs))
	defer func() {
		for _, s := range stores {
			if s != nil {
				if cerr := s.Close(); cerr != nil {
					err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
				}
			}
		}
	}()
	for i, dev := range m.devs {
		keys := map[string]any{
			"protocol": "nvlink", "driver": drv.Name(), "master_server_addr": addr, "device": int(dev),
			"global_segment_size": p.capacity, "enable_egm_store_pool": true, "local_buffer_size": 0,
			"max_mr_size": p.maxMR, "socket_dir": p.socketDir,
		}
		if p.ceMin != "" {
			keys["copy_engine_min_bytes"] = p.ceMin
		}
		if p.fastSpin != "" && path == pathRemote {
			keys["master_fast_path_spin"] = p.fastSpin
		}
		cfg, err := config.FromMap(keys)
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("bench-%s-%s-gpu%d-%d", path, m.name, dev, os.Getpid())
		if stores[i], err = client.Open(ctx, cfg, client.Options{Driver: drv, Master: mc, ClientID: id, PipelineChunk: p.chunk, BatchParts: p.parts,
			TimeCopies: p.gpuTime, SeparateCopies: p.separate}); err != nil {
			return nil, fmt.Errorf("gpu %d: open store: %w", dev, err)
		}
	}
	gpus = make([]storeGPU, len(m.devs))
	errs := make([]error, len(m.devs))
	bar := newBarrier(len(m.devs))
	var wg sync.WaitGroup
	for i, dev := range m.devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gpus[i], errs[i] = storeGoGPU(ctx, drv, stores[i], dev, path, m, p, bar, ceilingOnly)
			if errs[i] != nil {
				bar.abort(errs[i])
				errs[i] = fmt.Errorf("gpu %d: %w", dev, errs[i])
			}
		}()
	}
	wg.Wait()
	return gpus, errors.Join(errs...)
}

// storeGoGPU is one GPU's share of a Go path: buffers, the ceiling on its
// store's own segment, then every size.
func storeGoGPU(ctx context.Context, drv cuda.Driver, st *client.Store, dev cuda.Device, path string, m storeMode, p storeParams, bar *barrier, ceilingOnly bool) (res storeGPU, err error) {
	res.dev = int(dev)
	cctx := st.Context()
	var undo []func() error
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	alloc := func(n uint64) (cuda.DevicePtr, error) {
		ptr, err := drv.MemAlloc(cctx, n)
		if err != nil {
			return 0, fmt.Errorf("allocate %s of HBM: %w", sizeLabel(n), err)
		}
		undo = append(undo, func() error { return drv.MemFree(cctx, ptr) })
		return ptr, nil
	}
	s, evs, err := timingStream(drv, cctx, &undo)
	if err != nil {
		return res, err
	}
	R := p.roundBytes
	src, err := alloc(R)
	if err != nil {
		return res, err
	}
	dst, err := alloc(R)
	if err != nil {
		return res, err
	}
	// Registered, as an engine registers its KV cache (the Mooncake facade
	// requires it): a batch then finds its buffers in the registration
	// table instead of asking the driver about every region.
	for _, b := range []cuda.DevicePtr{src, dst} {
		if err := st.RegisterBuffer(uintptr(b), R); err != nil {
			return res, fmt.Errorf("register buffer: %w", err)
		}
		undo = append(undo, func() error { return st.UnregisterBuffer(context.WithoutCancel(ctx), uintptr(b)) })
	}

	// The ceiling: one large copy each way between the HBM buffers and
	// this GPU's own pool segment, timed with events like `kvfabric
	// bench`: one warm-up, then iters copies. It is measured before the
	// rounds (no object lives there yet) and again after them (every
	// object removed; with --prefill the store stays full, and the segment
	// is not written again), and the higher of the two is the ceiling:
	// one measurement alone came out low now and then — in 14 of 855
	// taken on the H200 in sessions 6–15 below 53 GB/s against a median of
	// 55.2, once 45.4 —, which lifted every ratio of its run, up to 1.16
	// (docs/perf/store.md, fourteenth round).
	segs := st.Pool().Segments()
	if len(segs) == 0 {
		return res, errors.New("the store mounted no segment")
	}
	seg, err := st.Pool().DevicePtr(segs[0].Key())
	if err != nil {
		return res, err
	}
	cn := min(R, segs[0].Size)
	// ceiling measures both directions once (GB/s), every GPU of the mode
	// at once; put false measures gets only.
	ceiling := func(put bool) (float64, float64, error) {
		var gbps [2]float64
		for i, cp := range []cuda.Copy{{Dst: seg, Src: src, Len: cn}, {Dst: dst, Src: seg, Len: cn}} {
			if err := bar.wait(); err != nil {
				return 0, 0, err
			}
			if i == 0 && !put {
				continue
			}
			var ms float32
			for r := 0; r <= p.iters; r++ {
				if err := drv.EventRecord(cctx, evs[0], s); err != nil {
					return 0, 0, err
				}
				if err := drv.MemcpyAsync(cctx, []cuda.Copy{cp}, s); err != nil {
					return 0, 0, fmt.Errorf("ceiling copy: %w", err)
				}
				if err := drv.EventRecord(cctx, evs[1], s); err != nil {
					return 0, 0, err
				}
				if err := drv.EventSynchronize(cctx, evs[1]); err != nil {
					return 0, 0, err
				}
				t, err := drv.EventElapsedTime(cctx, evs[0], evs[1])
				if err != nil {
					return 0, 0, err
				}
				if r > 0 {
					ms += t
				}
			}
			gbps[i] = float64(cn) * float64(p.iters) / (float64(max(ms, 1e-6)) * 1e6)
		}
		return gbps[0], gbps[1], nil
	}
	// again measures the ceiling a second time, after the rounds (or, for
	// ceilingOnly, at once).
	again := func() error {
		put, get, err := ceiling(!p.prefill)
		if err != nil {
			return err
		}
		if !p.prefill {
			res.ceilPuts = append(res.ceilPuts, put)
		}
		res.ceilGets = append(res.ceilGets, get)
		res.ceilPut, res.ceilGet = slices.Max(res.ceilPuts), slices.Max(res.ceilGets)
		return nil
	}
	put0, get0, err := ceiling(true)
	if err != nil {
		return res, err
	}
	res.ceilPuts, res.ceilGets = []float64{put0}, []float64{get0}
	res.ceilPut, res.ceilGet = put0, get0
	if ceilingOnly {
		return res, again()
	}

	// Round data, as in `kvfabric bench`: round g's source is the window
	// at 8g of a random pattern uploaded once (copied on the GPU, outside
	// the timing), so no round passes on bytes an earlier one left in the
	// store; before its gets the destination holds that round's poison.
	rounds := len(p.sizes) * (p.iters + 1)
	rng := rand.New(rand.NewPCG(uint64(dev), 0x73746f7265))
	want := make([]byte, R+8*uint64(rounds))
	fillRandom(rng, want)
	pattern, err := alloc(uint64(len(want)))
	if err != nil {
		return res, err
	}
	if err := drv.MemcpyHtoD(cctx, pattern, want); err != nil {
		return res, err
	}
	poisonLen := min(R, 16<<20)
	poison, err := alloc(poisonLen)
	if err != nil {
		return res, err
	}
	poisonHost := make([]byte, poisonLen)
	got := make([]byte, R)

	g := 0
	for _, size := range p.sizes {
		nkeys := int(R / size)
		n := uint64(nkeys) * size
		sr := storeSize{size: size, keys: nkeys, batches: (nkeys + p.maxKeys - 1) / p.maxKeys}
		slot, keyAt := storeSlots(nkeys, p.scatter, slotSeed(dev, size))
		// With prefill this size's objects (fillers and rounds) go at its
		// end: a store full of small objects has no room for a larger one
		// that evicting the same number of bytes would make (they are
		// scattered), so each size starts from an empty store.
		sizePrefix := fmt.Sprintf("bench/%s/%s/gpu%d/%d/", path, m.name, dev, size)
		if p.prefill {
			if err := prefillStore(ctx, st, src, s, size, nkeys, p, sizePrefix+"fill/"); err != nil {
				return res, err
			}
		}
		for round := 0; round <= p.iters; round++ { // round 0: the warm-up (maps the segments)
			off := 8 * uint64(g)
			pb := poisonByte(g)
			g++
			for i := range poisonHost {
				poisonHost[i] = pb
			}
			if err := drv.MemcpyHtoD(cctx, poison, poisonHost); err != nil {
				return res, err
			}
			setup := []cuda.Copy{{Dst: src, Src: pattern + cuda.DevicePtr(off), Len: n}}
			for o := uint64(0); o < n; o += poisonLen {
				setup = append(setup, cuda.Copy{Dst: dst + cuda.DevicePtr(o), Src: poison, Len: min(poisonLen, n-o)})
			}
			if err := drv.MemcpyAsync(cctx, setup, s); err != nil {
				return res, fmt.Errorf("set up round: %w", err)
			}
			if err := drv.StreamSynchronize(cctx, s); err != nil {
				return res, fmt.Errorf("set up round: %w", err)
			}
			prefix := fmt.Sprintf("bench/%s/%s/gpu%d/%d/r%d/", path, m.name, dev, size, g)
			keys := make([]string, nkeys)
			for i := range keys {
				keys[i] = prefix + strconv.Itoa(i)
			}
			// Each direction's argument lists, built before its timing
			// starts: one region per key, in the registered buffers, key
			// j's at slot[j] of both (so the get's destination still
			// matches the put's source byte for byte).
			args := map[string][][]client.Region{}
			for dir, buf := range map[string]cuda.DevicePtr{"put": src, "get": dst} {
				rs := make([]client.Region, nkeys)
				lists := make([][]client.Region, nkeys)
				for j := range rs {
					rs[j] = client.Region{Ptr: uintptr(buf) + uintptr(uint64(slot[j])*size), Len: size}
					lists[j] = rs[j : j+1 : j+1]
				}
				args[dir] = lists
			}
			var rt storeRound
			for _, dir := range []string{"put", "get"} {
				if err := bar.wait(); err != nil {
					return res, err
				}
				var ev0 uint64
				if p.prefill && dir == "put" {
					if ev0, err = evictions(ctx, st); err != nil {
						return res, err
					}
				}
				put0, get0 := st.Phases()
				merged0 := st.MergedCopies()
				bs := s // the batches' stream
				if p.defStream {
					bs = 0
				}
				t0 := time.Now()
				for b := 0; b < nkeys; b += p.maxKeys {
					hi := min(b+p.maxKeys, nkeys)
					ks, rs := keys[b:hi], args[dir][b:hi]
					if dir == "put" {
						for j, e := range st.BatchPut(ctx, ks, rs, bs, client.PutOptions{}) {
							if e != nil {
								return res, fmt.Errorf("%s round %d: put %s: %w", sizeLabel(size), round+1, ks[j], e)
							}
						}
						continue
					}
					sizes, errs := st.BatchGet(ctx, ks, rs, bs)
					for j, e := range errs {
						if e == nil && sizes[j] != size {
							e = fmt.Errorf("%d bytes, want %d", sizes[j], size)
						}
						if e != nil {
							return res, fmt.Errorf("%s round %d: get %s: %w", sizeLabel(size), round+1, ks[j], e)
						}
					}
				}
				took := time.Since(t0)
				put1, get1 := st.Phases()
				merged := st.MergedCopies() - merged0
				if dir == "put" {
					rt.put, rt.putPh, rt.putMerged = took, put1.Sub(put0), merged
					if p.gpuTime && round == p.iters {
						sr.timeline = st.LastPutTimeline()
					}
					if p.prefill {
						ev1, err := evictions(ctx, st)
						if err != nil {
							return res, err
						}
						rt.evicted = ev1 - ev0
					}
				} else {
					rt.get, rt.getPh, rt.getMerged = took, get1.Sub(get0), merged
				}
			}
			if round > 0 {
				sr.rounds = append(sr.rounds, rt)
			}
			if err := drv.MemcpyDtoH(cctx, got[:n], dst); err != nil {
				return res, err
			}
			if i, ok := firstDiff(got[:n], want[off:off+n]); !ok && sr.bad == nil {
				b := i / size // the block of the buffer: key keyAt[b]'s
				sr.bad = &verifyError{round: round + 1, rounds: p.iters + 1, key: keys[keyAt[b]], block: b, offset: i % size,
					got: got[i], want: want[off+i], poison: pb}
			}
			for b := 0; b < nkeys && !p.prefill; b += p.maxKeys { // with prefill the store stays full
				ks := keys[b:min(b+p.maxKeys, nkeys)]
				for j, e := range st.BatchRemove(ctx, ks, true) {
					if e != nil {
						return res, fmt.Errorf("%s round %d: remove %s: %w", sizeLabel(size), round+1, ks[j], e)
					}
				}
			}
		}
		if p.prefill {
			// The Store's removal first sends its queued lease releases
			// (gets release in the background), so the space is free at
			// once for the next size's fill.
			if _, err := st.RemoveMatching(ctx, "^"+regexp.QuoteMeta(sizePrefix), true); err != nil {
				return res, fmt.Errorf("prefill %s: remove: %w", sizeLabel(size), err)
			}
		}
		res.sizes = append(res.sizes, sr)
	}
	return res, again()
}

// storeSlots returns which slot of the GPU buffers each of nkeys keys puts
// from and gets into (slot[key]) and the inverse (keyAt[slot]): key i at
// slot i, or with scatter a permutation drawn from seed, so that keys that
// follow each other do not have adjoining buffers (a paged KV cache's
// blocks, as opposed to one contiguous staging buffer).
func storeSlots(nkeys int, scatter bool, seed uint64) (slot, keyAt []int) {
	slot, keyAt = make([]int, nkeys), make([]int, nkeys)
	for i := range slot {
		slot[i] = i
	}
	if scatter {
		rand.New(rand.NewPCG(seed, 0x73636174)).Shuffle(nkeys, func(i, j int) { slot[i], slot[j] = slot[j], slot[i] })
	}
	for k, sl := range slot {
		keyAt[sl] = k
	}
	return slot, keyAt
}

// slotSeed is the seed of storeSlots' permutation for a GPU and object size.
func slotSeed(dev cuda.Device, size uint64) uint64 { return uint64(dev)<<32 | size }

// prefillStore fills st's store (p.capacity) with objects of size, in
// batches of at most min(p.maxKeys, nkeys) from the start of src (their
// bytes do not matter), under prefix, outside any timing, so that the
// rounds' puts evict.
func prefillStore(ctx context.Context, st *client.Store, src cuda.DevicePtr, s cuda.Stream, size uint64, nkeys int, p storeParams, prefix string) error {
	lists := make([][]client.Region, nkeys)
	for j := range lists {
		lists[j] = []client.Region{{Ptr: uintptr(src) + uintptr(uint64(j)*size), Len: size}}
	}
	total := int(p.capacity / size) // objects that fill the store
	batch := min(p.maxKeys, nkeys)
	keys := make([]string, 0, batch)
	for i := 0; i < total; {
		keys = keys[:0]
		for j := 0; j < batch && i < total; j, i = j+1, i+1 {
			keys = append(keys, prefix+strconv.Itoa(i))
		}
		for j, e := range st.BatchPut(ctx, keys, lists[:len(keys)], s, client.PutOptions{}) {
			if e != nil {
				return fmt.Errorf("prefill %s: put %s: %w", sizeLabel(size), keys[j], e)
			}
		}
	}
	return nil
}

// evictions is the master's count of evicted objects.
func evictions(ctx context.Context, st *client.Store) (uint64, error) {
	stats, err := st.Master().Stats(ctx)
	if err != nil {
		return 0, fmt.Errorf("master stats: %w", err)
	}
	return stats.Evictions, nil
}

// spawnMaster starts `<exe> master` on a loopback port of its choosing and
// returns its address and a stop function (SIGTERM, then SIGKILL after
// 15 s). exe "" is this executable; extra are more flags of `master`.
func spawnMaster(ctx context.Context, exe, dir string, extra ...string) (string, func() error, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", nil, err
		}
	}
	addrFile := filepath.Join(dir, fmt.Sprintf("master-%d.addr", time.Now().UnixNano()))
	cmd := exec.Command(exe, append([]string{"master", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--lease-ttl", "2s", "--addr-file", addrFile}, extra...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // not outliving the bench
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("kvfabric master: %w\n%s", err, out.String())
			}
			return nil
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("kvfabric master did not stop within 15s of SIGTERM\n%s", out.String())
		}
	}
	deadline := time.After(20 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b)), stop, nil
		}
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("kvfabric master exited (%v) before serving:\n%s", err, out.String())
		case <-deadline:
			return "", nil, errors.Join(errors.New("kvfabric master did not serve within 20s"), stop())
		case <-ctx.Done():
			return "", nil, errors.Join(ctx.Err(), stop())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// writeJSON writes v to path as indented JSON (the --json reports).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
