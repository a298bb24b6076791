package main

// `kvfabric bench --gather` (issue #15, docs/perf/gather.md): sparse row
// gather from DRAM-tier objects held as views, against the ways to get the
// same rows without it and against the link's ceiling.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// gatherFlags are the flags of `bench --gather`.
type gatherFlags struct {
	driver   string
	device   int
	objects  int
	rows     int
	rowBytes uint64
	sel      int
	iters    int
	json     string
}

// gatherReport is the --json output.
type gatherReport struct {
	Kind          string `json:"kind"` // "kvfabric-bench-gather"
	Driver        string `json:"driver"`
	DriverVersion int    `json:"driver_version"`
	Device        int    `json:"device"`
	Objects       int    `json:"objects"`
	RowsPerObject int    `json:"rows_per_object"`
	RowBytes      uint64 `json:"row_bytes"`
	Selected      int    `json:"selected_rows"`
	SelectedBytes uint64 `json:"selected_bytes"`
	ObjectBytes   uint64 `json:"object_bytes"`
	Iters         int    `json:"iters"`
	// LinkGBps is the copy-engine ceiling: one large DRAM -> HBM copy.
	LinkGBps float64 `json:"link_gbps"`
	// Results: one per method, times in microseconds.
	Results []gatherResult `json:"results"`
	OK      bool           `json:"ok"`
	Errors  []string       `json:"errors,omitempty"`
}

type gatherResult struct {
	Method string `json:"method"`
	// Per operation (each timed alone): median and minimum.
	P50us float64 `json:"p50_us"`
	MinUS float64 `json:"min_us"`
	// BackToBackUS: per operation, iters operations enqueued back to back
	// (0 where the method waits for each).
	BackToBackUS float64 `json:"back_to_back_us,omitempty"`
	// IssueUS: median CPU time of the call that enqueues one operation
	// (for gpu-events methods; the GPU idles meanwhile when the stream
	// was empty, so it is part of P50us).
	IssueUS float64 `json:"issue_us,omitempty"`
	// GBps: selected bytes / p50 time; Ratio: GBps / LinkGBps.
	GBps     float64 `json:"gbps"`
	Ratio    float64 `json:"ratio"`
	Verified bool    `json:"verified"`
	Timing   string  `json:"timing"` // "gpu-events" or "wall"
}

// gatherPattern is the 8-byte word at byte offset off of object o.
func gatherPattern(o int, off uint64) uint64 {
	x := uint64(o)<<48 ^ off ^ 0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return x
}

func runGatherBench(ctx context.Context, w io.Writer, f gatherFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	drv, why, err := choose.ProviderDriver(f.driver, log)
	if err != nil {
		return fmt.Errorf("--driver=%s: %w", f.driver, err)
	}
	defer drv.Close()
	return runGatherBenchOn(ctx, w, drv, why, f)
}

// runGatherBenchOn is runGatherBench on drv, chosen for the reason why; the
// caller owns drv.
func runGatherBenchOn(ctx context.Context, w io.Writer, drv cuda.Driver, why string, f gatherFlags) (err error) {
	isSim := drv.Name() == "sim"
	if f.objects == 0 {
		f.objects = 64
		if isSim {
			f.objects = 8
		}
	}
	if f.rows == 0 {
		f.rows = 65536
		if isSim {
			f.rows = 512
		}
	}
	if f.sel == 0 {
		f.sel = 2048
		if isSim {
			f.sel = 128
		}
	}
	if f.iters <= 0 {
		f.iters = 50
		if isSim {
			f.iters = 2
		}
	}
	switch {
	case f.objects <= 0:
		return fmt.Errorf("--objects %d must be positive", f.objects)
	case f.rows <= 0:
		return fmt.Errorf("--rows %d must be positive", f.rows)
	case f.rowBytes == 0 || f.rowBytes%8 != 0:
		return fmt.Errorf("--row-bytes %d must be a positive multiple of 8", f.rowBytes)
	case f.sel <= 0 || f.sel%f.objects != 0 || f.sel/f.objects > f.rows:
		return fmt.Errorf("--select %d must be a positive multiple of --objects %d, at most --rows per object", f.sel, f.objects)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return err
	}
	if f.device < 0 || f.device >= n {
		return fmt.Errorf("--devices: GPU %d: want 0..%d", f.device, n-1)
	}
	dev := cuda.Device(f.device)
	objBytes := uint64(f.rows) * f.rowBytes
	perObj := f.sel / f.objects
	selBytes := uint64(f.sel) * f.rowBytes
	gran, err := hostNUMAGranularity(drv, dev)
	if err != nil {
		return err
	}
	roundUp := func(v, g uint64) uint64 { return (v + g - 1) / g * g }
	maxMR := roundUp(max(4*objBytes, 256<<20), gran)
	if isSim {
		maxMR = roundUp(4*objBytes, gran)
	}
	capacity := roundUp(uint64(f.objects)*objBytes*5/4+maxMR, maxMR)
	sock, err := os.MkdirTemp("", "kvf-bench-gather-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sock)

	ver, _ := drv.DriverVersion()
	rep := gatherReport{Kind: "kvfabric-bench-gather", Driver: why, DriverVersion: ver, Device: f.device,
		Objects: f.objects, RowsPerObject: f.rows, RowBytes: f.rowBytes, Selected: f.sel, SelectedBytes: selBytes,
		ObjectBytes: objBytes, Iters: f.iters}
	fmt.Fprintf(w, "bench --gather: driver %s (version %d); GPU %d; %d objects of %d rows x %d B (%s each) in a %s DRAM-tier pool; %d rows selected (%d per object, %s); %d timed iterations, every one verified\n",
		why, ver, f.device, f.objects, f.rows, f.rowBytes, sizeLabel(objBytes), sizeLabel(capacity), f.sel, perObj, sizeLabel(selBytes), f.iters)

	svc, err := master.New(master.Config{LeaseTTL: 2 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()
	cfg, err := config.FromMap(map[string]any{
		"protocol": "nvlink", "driver": drv.Name(), "master_server_addr": config.MasterEmbedded, "device": f.device,
		"global_segment_size": capacity, "enable_egm_store_pool": true, "local_buffer_size": 0,
		"max_mr_size": maxMR, "socket_dir": sock,
	})
	if err != nil {
		return err
	}
	st, err := client.Open(ctx, cfg, client.Options{Driver: drv, Master: master.NewEmbedded(svc), ClientID: fmt.Sprintf("bench-gather-%d", os.Getpid())})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if cerr := st.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		}
	}()
	cctx := st.Context()
	var undo []func() error
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			err = errors.Join(err, undo[i]())
		}
	}()
	alloc := func(n uint64) (cuda.DevicePtr, error) {
		p, err := drv.MemAlloc(cctx, n)
		if err != nil {
			return 0, fmt.Errorf("allocate %s of HBM: %w", sizeLabel(n), err)
		}
		undo = append(undo, func() error { return drv.MemFree(cctx, p) })
		return p, nil
	}
	s, evs, err := timingStream(drv, cctx, &undo)
	if err != nil {
		return err
	}

	// The objects: each word is a function of (object, offset).
	keys := make([]string, f.objects)
	src, err := alloc(objBytes)
	if err != nil {
		return err
	}
	host := make([]byte, objBytes)
	for o := range keys {
		keys[o] = fmt.Sprintf("gather-%d", o)
		for off := uint64(0); off < objBytes; off += 8 {
			binary.LittleEndian.PutUint64(host[off:], gatherPattern(o, off))
		}
		if err := drv.MemcpyHtoD(cctx, src, host); err != nil {
			return err
		}
		if err := st.Put(ctx, keys[o], client.Bytes(uintptr(src), objBytes), 0, client.PutOptions{}); err != nil {
			return fmt.Errorf("put object %d: %w", o, err)
		}
	}
	defer func() {
		if _, rerr := st.RemoveAll(ctx, true); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	views, err := st.Acquire(ctx, keys)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer views.Release() // after every timed kernel: each is synchronized
	objs := views.Objects()
	for _, o := range objs {
		if o.Err != nil {
			return fmt.Errorf("acquire %q: %w", o.Key, o.Err)
		}
	}

	// The selection: perObj distinct random rows per object, unsorted.
	rng := rand.New(rand.NewPCG(15, uint64(f.sel)))
	hostRows := make([][]uint64, f.objects)
	idx := make([]byte, 0, f.sel*8)
	for o := range hostRows {
		seen := map[uint64]bool{}
		for len(hostRows[o]) < perObj {
			r := rng.Uint64N(uint64(f.rows))
			if !seen[r] {
				seen[r] = true
				hostRows[o] = append(hostRows[o], r)
				idx = binary.LittleEndian.AppendUint64(idx, r)
			}
		}
	}
	want := make([]byte, selBytes)
	for o, rs := range hostRows {
		for j, r := range rs {
			out := want[uint64(o*perObj+j)*f.rowBytes:][:f.rowBytes]
			for b := uint64(0); b < f.rowBytes; b += 8 {
				binary.LittleEndian.PutUint64(out[b:], gatherPattern(o, r*f.rowBytes+b))
			}
		}
	}
	devIdx, err := alloc(uint64(len(idx)))
	if err != nil {
		return err
	}
	if err := drv.MemcpyHtoD(cctx, devIdx, idx); err != nil {
		return err
	}
	dst, err := alloc(selBytes)
	if err != nil {
		return err
	}
	bad, err := alloc(4)
	if err != nil {
		return err
	}
	zero := make([]byte, selBytes)
	got := make([]byte, selBytes)
	reset := func() error {
		if err := drv.MemcpyHtoD(cctx, dst, zero); err != nil {
			return err
		}
		return drv.MemcpyHtoD(cctx, bad, zero[:4])
	}
	verify := func(method string, it int) error {
		if err := drv.MemcpyDtoH(cctx, got, dst); err != nil {
			return err
		}
		if i, ok := firstDiff(got, want); !ok {
			return fmt.Errorf("%s: iteration %d: byte %d (output row %d) differs", method, it, i, i/f.rowBytes)
		}
		var b [4]byte
		if err := drv.MemcpyDtoH(cctx, b[:], bad); err != nil {
			return err
		}
		if n := binary.LittleEndian.Uint32(b[:]); n != 0 {
			return fmt.Errorf("%s: iteration %d: %d rows counted out of range", method, it, n)
		}
		return nil
	}
	// elapsed times what fn enqueues on s with the stream's events; issue
	// is the CPU time fn took to enqueue it.
	var issue time.Duration
	elapsed := func(fn func() error) (time.Duration, error) {
		if err := drv.EventRecord(cctx, evs[0], s); err != nil {
			return 0, err
		}
		t0 := time.Now()
		err := fn()
		issue = time.Since(t0)
		if err != nil {
			_ = drv.StreamSynchronize(cctx, s)
			return 0, err
		}
		if err := drv.EventRecord(cctx, evs[1], s); err != nil {
			return 0, err
		}
		if err := drv.EventSynchronize(cctx, evs[1]); err != nil {
			return 0, err
		}
		ms, err := drv.EventElapsedTime(cctx, evs[0], evs[1])
		return time.Duration(float64(ms) * float64(time.Millisecond)), err
	}

	// The link's ceiling: one large copy from the DRAM tier to HBM.
	big := min(objBytes, 64<<20)
	scratch, err := alloc(big)
	if err != nil {
		return err
	}
	var linkTimes []time.Duration
	for range 1 + min(f.iters, 10) {
		d, err := elapsed(func() error {
			return drv.MemcpyAsync(cctx, []cuda.Copy{{Dst: scratch, Src: objs[0].Replicas[0].Addr, Len: big}}, s)
		})
		if err != nil {
			return fmt.Errorf("ceiling copy: %w", err)
		}
		linkTimes = append(linkTimes, d)
	}
	rep.LinkGBps = float64(big) / median(linkTimes[1:]).Seconds() / 1e9
	fmt.Fprintf(w, "link ceiling (one %s DRAM->HBM copy): %.1f GB/s\n", sizeLabel(big), rep.LinkGBps)

	var errs []error
	var issues []time.Duration
	record := func(method, timing string, times []time.Duration, b2b time.Duration, verr error) {
		r := gatherResult{Method: method, Timing: timing, Verified: verr == nil}
		if timing == "gpu-events" && len(issues) > 0 {
			r.IssueUS = float64(median(issues)) / 1e3
		}
		issues = nil
		if verr != nil {
			errs = append(errs, verr)
		}
		if len(times) > 0 {
			r.P50us = float64(median(times)) / 1e3
			r.MinUS = float64(slices.Min(times)) / 1e3
			r.GBps = float64(selBytes) / median(times).Seconds() / 1e9
			r.Ratio = r.GBps / rep.LinkGBps
		}
		r.BackToBackUS = float64(b2b) / 1e3
		rep.Results = append(rep.Results, r)
	}
	// timed runs fn iters times (after one warm-up), each alone and
	// verified, then iters times back to back (the last verified).
	timed := func(method string, fn func() error, b2b bool, verify func(string, int) error) {
		var times []time.Duration
		for it := range 1 + f.iters {
			if err := reset(); err != nil {
				record(method, "gpu-events", nil, 0, err)
				return
			}
			d, err := elapsed(fn)
			if err == nil {
				err = verify(method, it)
			}
			if err != nil {
				record(method, "gpu-events", times, 0, err)
				return
			}
			if it > 0 {
				times = append(times, d)
				issues = append(issues, issue)
			}
		}
		var per time.Duration
		if b2b {
			if err := reset(); err != nil {
				record(method, "gpu-events", times, 0, err)
				return
			}
			d, err := elapsed(func() error {
				for range f.iters {
					if err := fn(); err != nil {
						return err
					}
				}
				return nil
			})
			if err == nil {
				err = verify(method+" back-to-back", f.iters)
			}
			if err != nil {
				record(method, "gpu-events", times, 0, err)
				return
			}
			per = d / time.Duration(f.iters)
		}
		record(method, "gpu-events", times, per, nil)
	}

	// (b) The copy engine moving only the needed bytes, as one contiguous
	// copy: what the transfer engine could do at best for this byte count.
	ceWant := make([]byte, selBytes)
	for off := uint64(0); off+8 <= selBytes; off += 8 {
		binary.LittleEndian.PutUint64(ceWant[off:], gatherPattern(0, off))
	}
	timed("copy-engine-contiguous", func() error {
		return drv.MemcpyAsync(cctx, []cuda.Copy{{Dst: dst, Src: objs[0].Replicas[0].Addr, Len: selBytes}}, s)
	}, true, func(method string, it int) error {
		if err := drv.MemcpyDtoH(cctx, got, dst); err != nil {
			return err
		}
		if i, ok := firstDiff(got, ceWant); !ok {
			return fmt.Errorf("%s: iteration %d: byte %d differs", method, it, i)
		}
		return nil
	})
	// The transfer engine alone on the same addresses (no Store call): what
	// the views' gather adds on the CPU is the difference.
	xf, err := transfer.New(drv, cctx, dev, transfer.Options{})
	if err != nil {
		return err
	}
	undo = append(undo, xf.Close)
	eg := transfer.Gather{PerObj: perObj, Device: devIdx, IdxBytes: 8, RowBytes: f.rowBytes, Dst: dst, Bad: bad}
	for _, o := range objs {
		eg.Objs = append(eg.Objs, transfer.GatherObj{Base: o.Replicas[0].Addr, Rows: uint64(f.rows)})
	}
	timed("engine-gather-device-idx", func() error { return xf.Gather(s, eg) }, true, verify)
	// The same with the table uploaded before each launch (the engine's
	// default reads it in the pinned host ring where the GPU can): A/B.
	xu, err := transfer.New(drv, cctx, dev, transfer.Options{UploadTables: true})
	if err != nil {
		return err
	}
	undo = append(undo, xu.Close)
	timed("engine-gather-device-idx-upload", func() error { return xu.Gather(s, eg) }, true, verify)
	dstR := client.Region{Ptr: uintptr(dst), Len: selBytes}
	timed("view-gather-device-idx", func() error {
		return views.Gather(client.Rows{Device: devIdx, PerKey: perObj, ElemBytes: 8, BadRows: bad}, f.rowBytes, dstR, s)
	}, true, verify)
	timed("view-gather-host-idx", func() error {
		return views.Gather(client.Rows{Host: hostRows}, f.rowBytes, dstR, s)
	}, true, verify)

	// The one-shot Store.Gather: leases, launch, wait, release (wall time).
	{
		var times []time.Duration
		var verr error
		for it := range 1 + f.iters {
			if verr = reset(); verr != nil {
				break
			}
			t0 := time.Now()
			if verr = st.Gather(ctx, keys, client.Rows{Host: hostRows}, f.rowBytes, dstR, s); verr != nil {
				verr = fmt.Errorf("store-gather: %w", verr)
				break
			}
			d := time.Since(t0)
			if verr = verify("store-gather", it); verr != nil {
				break
			}
			if it > 0 {
				times = append(times, d)
			}
		}
		record("store-gather (one-shot, wall)", "wall", times, 0, verr)
	}

	// (a) Full get, then select: every object into HBM, then the same
	// gather kernel over the HBM copies (a best-case index-select).
	{
		full, err := alloc(uint64(f.objects) * objBytes)
		if err == nil {
			dsts := make([][]client.Region, f.objects)
			g := transfer.Gather{PerObj: perObj, Device: devIdx, IdxBytes: 8, RowBytes: f.rowBytes, Dst: dst, Bad: bad}
			for o := range dsts {
				p := full + cuda.DevicePtr(uint64(o)*objBytes)
				dsts[o] = client.Bytes(uintptr(p), objBytes)
				g.Objs = append(g.Objs, transfer.GatherObj{Base: p, Rows: uint64(f.rows)})
			}
			var times []time.Duration
			var verr error
			for it := range 1 + min(f.iters, 5) {
				if verr = reset(); verr != nil {
					break
				}
				t0 := time.Now()
				_, gerrs := st.BatchGet(ctx, keys, dsts, s)
				if verr = errors.Join(gerrs...); verr == nil {
					verr = xf.Gather(s, g)
				}
				if verr == nil {
					verr = drv.StreamSynchronize(cctx, s)
				}
				d := time.Since(t0)
				if verr == nil {
					verr = verify("full-get-then-select", it)
				}
				if verr != nil {
					verr = fmt.Errorf("full-get-then-select: %w", verr)
					break
				}
				if it > 0 {
					times = append(times, d)
				}
			}
			record("full-get-then-select (wall)", "wall", times, 0, verr)
		} else {
			errs = append(errs, fmt.Errorf("full-get-then-select: %w", err))
		}
	}
	if err := views.Err(); err != nil {
		errs = append(errs, fmt.Errorf("views lost during the run: %w", err))
	}

	writeGatherTable(w, rep)
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
	return errors.Join(errs...)
}

func writeGatherTable(w io.Writer, rep gatherReport) {
	var gatherP50 float64
	for _, r := range rep.Results {
		if r.Method == "view-gather-device-idx" {
			gatherP50 = r.P50us
		}
	}
	fmt.Fprintf(w, "%-32s %10s %10s %12s %9s %8s %10s %9s %s\n", "method", "p50 us", "min us", "b2b us/op", "GB/s", "/link", "vs gather", "issue us", "verified")
	for _, r := range rep.Results {
		vs := "-"
		if gatherP50 > 0 && r.P50us > 0 {
			vs = fmt.Sprintf("%.1fx", r.P50us/gatherP50)
		}
		b2b := "-"
		if r.BackToBackUS > 0 {
			b2b = fmt.Sprintf("%.1f", r.BackToBackUS)
		}
		iss := "-"
		if r.IssueUS > 0 {
			iss = fmt.Sprintf("%.1f", r.IssueUS)
		}
		fmt.Fprintf(w, "%-32s %10.1f %10.1f %12s %9.2f %8.3f %10s %9s %v\n", r.Method, r.P50us, r.MinUS, b2b, r.GBps, r.Ratio, vs, iss, r.Verified)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
