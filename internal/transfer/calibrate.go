package transfer

import (
	"fmt"
	"strings"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// Where the copy engines overtake the SM kernel depends on the host, not
// only on the GPU: on the lab's H200 host, copies of random 128 KiB
// blocks reached 1.00 of the ceiling on the copy engines against 0.92 by
// the kernel (gets), while on its H100 hosts the copy engines moved 64 KiB
// blocks at 0.59–0.70, 256 KiB at 0.80–0.87 and caught up with the kernel
// (0.92–0.95) only from 512 KiB (gets) and 1 MiB (puts)
// (docs/perf/logs-2026-12-06-s32/run9). Calibrate measures it where the
// Store runs.

// CalibrationSizes are the block sizes Calibrate measures.
var CalibrationSizes = []uint64{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20}

// CalibrationBytes is how many bytes each of Calibrate's measurements
// moves, and the least the buffers given to it must hold.
const CalibrationBytes = 16 << 20

// calibrationSlack: the copy engines take a size when they reach this
// share of the kernel's rate there (and at every larger size measured).
const calibrationSlack = 0.98

// Crossover is where the copy engines catch up with the SM kernel on this
// GPU and host, one way and the other: blocks of at least PutMin bytes
// from HBM to host memory, and of at least GetMin bytes from host memory
// into HBM, go to the copy engines. Rates holds what was measured.
type Crossover struct {
	PutMin, GetMin uint64
	Sizes          []uint64
	// GB/s per size: the kernel and the copy engines, each way.
	KernelPut, CopyPut, KernelGet, CopyGet []float64
}

// String renders c for a log line.
func (c Crossover) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "copy engines from %d bytes (put), %d (get); GB/s kernel/copy engines per block size:", c.PutMin, c.GetMin)
	for i, s := range c.Sizes {
		fmt.Fprintf(&b, " %dKiB put %.1f/%.1f get %.1f/%.1f;", s>>10, c.KernelPut[i], c.CopyPut[i], c.KernelGet[i], c.CopyGet[i])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Calibrate measures the SM kernel and the copy engines (one
// cuMemcpyBatchAsync) moving CalibrationBytes in blocks of each of
// CalibrationSizes between dev (HBM) and host (host memory this GPU
// reaches: registered, or a HOST_NUMA mapping), each way, on a stream of
// its own: one warm-up, then the better of two timed batches (CUDA
// events). For each direction the crossover is the smallest size from
// which the copy engines reach calibrationSlack of the kernel's rate at
// that size and every larger one, or twice the largest size when they do
// not at the largest. It overwrites both buffers, and needs RouteAuto and
// cuMemcpyBatchAsync. The engine's routing is not changed: see
// SetCopyEngineMinBytes.
func (e *Engine) Calibrate(host, dev cuda.DevicePtr) (Crossover, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return Crossover{}, ErrClosed
	}
	if e.opts.Route != RouteAuto || !e.batch {
		return Crossover{}, fmt.Errorf("transfer: calibrate needs the auto route and cuMemcpyBatchAsync (route %v, batch %v)", e.opts.Route, e.batch)
	}
	if host == 0 || dev == 0 {
		return Crossover{}, fmt.Errorf("transfer: calibrate: host %#x, device %#x: want both buffers", host, dev)
	}
	s, err := e.drv.StreamCreate(e.ctx, cuda.StreamNonBlocking)
	if err != nil {
		return Crossover{}, fmt.Errorf("transfer: calibrate: %w", err)
	}
	defer func() { _ = e.drv.StreamDestroy(e.ctx, s) }()
	var evs [2]cuda.Event
	for i := range evs {
		if evs[i], err = e.getEvent(true); err != nil {
			return Crossover{}, err
		}
		defer e.putEvent(evs[i], true)
	}
	// rate times copies on the kernel (ceMin above every block) or on
	// the copy engines (ceMin 1), best of two after a warm-up, in GB/s.
	rate := func(copies []cuda.Copy, ceMin uint64) (float64, error) {
		var best float32
		for i := range 3 {
			if err := e.drv.EventRecord(e.ctx, evs[0], s); err != nil {
				return 0, err
			}
			if err := e.submitLocked(s, copies, ceMin); err != nil {
				return 0, err
			}
			if err := e.drv.EventRecord(e.ctx, evs[1], s); err != nil {
				return 0, err
			}
			if err := e.drv.EventSynchronize(e.ctx, evs[1]); err != nil {
				return 0, err
			}
			ms, err := e.drv.EventElapsedTime(e.ctx, evs[0], evs[1])
			if err != nil {
				return 0, err
			}
			if i > 0 && (best == 0 || ms < best) {
				best = ms
			}
		}
		return float64(CalibrationBytes) / (float64(max(best, 1e-6)) * 1e6), nil
	}
	c := Crossover{Sizes: CalibrationSizes}
	for _, size := range CalibrationSizes {
		n := CalibrationBytes / size
		put, get := make([]cuda.Copy, n), make([]cuda.Copy, n)
		for i := range n {
			off := cuda.DevicePtr(i * size)
			put[i] = cuda.Copy{Dst: host + off, Src: dev + off, Len: size}
			get[i] = cuda.Copy{Dst: dev + off, Src: host + off, Len: size}
		}
		for _, m := range []struct {
			copies []cuda.Copy
			ceMin  uint64
			out    *[]float64
		}{{put, ^uint64(0), &c.KernelPut}, {put, 1, &c.CopyPut}, {get, ^uint64(0), &c.KernelGet}, {get, 1, &c.CopyGet}} {
			r, err := rate(m.copies, m.ceMin)
			if err != nil {
				return Crossover{}, fmt.Errorf("transfer: calibrate %d-byte blocks: %w", size, err)
			}
			*m.out = append(*m.out, r)
		}
	}
	c.PutMin = crossover(CalibrationSizes, c.KernelPut, c.CopyPut)
	c.GetMin = crossover(CalibrationSizes, c.KernelGet, c.CopyGet)
	return c, nil
}

// crossover returns the smallest of sizes from which copy reaches
// calibrationSlack of kernel at that size and every larger one, or twice
// the largest size.
func crossover(sizes []uint64, kernel, copy []float64) uint64 {
	at := 2 * sizes[len(sizes)-1]
	for i := len(sizes) - 1; i >= 0; i-- {
		if copy[i] < calibrationSlack*kernel[i] {
			break
		}
		at = sizes[i]
	}
	return at
}

// SetCopyEngineMinBytes changes Options.CopyEngineMinBytes for the batches
// submitted after it (a Store sets its calibrated crossover so).
func (e *Engine) SetCopyEngineMinBytes(n uint64) {
	if n > 0 {
		e.ceMin.Store(n)
	}
}
