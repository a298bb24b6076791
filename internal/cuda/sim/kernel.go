package sim

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// module is a loaded PTX image: its entry names and the functions handed
// out for them.
type module struct {
	ctx     cuda.Context
	entries map[string]bool
	funcs   map[string]cuda.Function
}

type function struct {
	mod  cuda.Module
	name string
}

// ptxEntry matches a kernel entry declaration (".visible .entry name(").
var ptxEntry = regexp.MustCompile(`(?m)\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)`)

// parsePTX returns the entry names of a PTX text image, or false when the
// image is not PTX (no .version and .target directives, a NUL inside, or
// no entries). Cubin (ELF) images are not simulated.
func parsePTX(image []byte) (map[string]bool, bool) {
	image = bytes.TrimRight(image, "\x00")
	if len(image) == 0 || bytes.IndexByte(image, 0) >= 0 ||
		!bytes.Contains(image, []byte(".version")) || !bytes.Contains(image, []byte(".target")) {
		return nil, false
	}
	entries := make(map[string]bool)
	for _, m := range ptxEntry.FindAllSubmatch(image, -1) {
		entries[string(m[1])] = true
	}
	return entries, len(entries) > 0
}

// RegisterKernel makes fn the emulation of the kernel entry name: a module
// that declares the entry then resolves it with ModuleGetFunction, and
// LaunchKernel runs fn. Registering a name again replaces the function.
func (d *Driver) RegisterKernel(name string, fn cuda.KernelFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if fn == nil {
		delete(d.mu.kernels, name)
		return
	}
	d.mu.kernels[name] = fn
}

// ModuleLoadData loads a PTX text image (NUL-terminated or not) and
// records its .entry names; anything else fails with
// CUDA_ERROR_INVALID_IMAGE.
func (d *Driver) ModuleLoadData(ctx cuda.Context, image []byte) (cuda.Module, error) {
	var mod cuda.Module
	err := d.call("ModuleLoadData", func() string { return fmt.Sprintf("ctx=%#x len=%d", ctx, len(image)) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		entries, ok := parsePTX(image)
		if !ok {
			return cuda.ErrorInvalidImage
		}
		mod = cuda.Module(d.newHandle(kindModule))
		d.mu.modules[mod] = &module{ctx: ctx, entries: entries, funcs: make(map[string]cuda.Function)}
		return cuda.Success
	})
	return mod, err
}

// ModuleUnload unloads a module of ctx; its functions become invalid.
func (d *Driver) ModuleUnload(ctx cuda.Context, m cuda.Module) error {
	return d.call("ModuleUnload", func() string { return fmt.Sprintf("ctx=%#x module=%#x", ctx, m) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		mod, ok := d.mu.modules[m]
		if !ok || mod.ctx != ctx {
			return cuda.ErrorInvalidHandle
		}
		d.unloadModuleLocked(m, mod)
		return cuda.Success
	})
}

func (d *Driver) unloadModuleLocked(h cuda.Module, m *module) {
	for _, f := range m.funcs {
		delete(d.mu.funcs, f)
	}
	delete(d.mu.modules, h)
}

// ModuleGetFunction returns the function for an entry of m. It fails with
// CUDA_ERROR_NOT_FOUND unless the module declares the entry and a
// KernelFunc is registered under its name.
func (d *Driver) ModuleGetFunction(ctx cuda.Context, m cuda.Module, name string) (cuda.Function, error) {
	var f cuda.Function
	err := d.call("ModuleGetFunction", func() string { return fmt.Sprintf("ctx=%#x module=%#x name=%q", ctx, m, name) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		mod, ok := d.mu.modules[m]
		if !ok || mod.ctx != ctx {
			return cuda.ErrorInvalidHandle
		}
		if !mod.entries[name] || d.mu.kernels[name] == nil {
			return cuda.ErrorNotFound
		}
		if h, ok := mod.funcs[name]; ok {
			f = h
			return cuda.Success
		}
		f = cuda.Function(d.newHandle(kindFunction))
		mod.funcs[name] = f
		d.mu.funcs[f] = &function{mod: m, name: name}
		return cuda.Success
	})
	return f, err
}

// LaunchKernel runs the registered KernelFunc of f synchronously (behind a
// held stream: when the hold is released; see HoldStream). Its
// memory accessor enforces the copy rules (mapped with access granted to
// the context's device, cuMemAlloc memory, or registered host memory) and
// fails with CUDA_ERROR_ILLEGAL_ADDRESS otherwise; the accessor's bytes are
// valid only during the launch. A KernelFunc error carrying a CUresult
// fails the launch with that result, any other error with
// CUDA_ERROR_LAUNCH_FAILED. Unlike a real GPU, a failed launch does not
// poison the context.
func (d *Driver) LaunchKernel(ctx cuda.Context, f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s cuda.Stream, params [][]byte) error {
	return d.call("LaunchKernel", func() string {
		return fmt.Sprintf("ctx=%#x func=%#x grid=%v block=%v shmem=%d stream=%#x params=%d", ctx, f, grid, block, sharedMem, s, len(params))
	}, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		fn, ok := d.mu.funcs[f]
		if !ok || d.mu.modules[fn.mod].ctx != ctx {
			return cuda.ErrorInvalidHandle
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 ||
			uint64(block.X)*uint64(block.Y)*uint64(block.Z) > simMaxThreadsPerBlock ||
			grid.Y > 65535 || grid.Z > 65535 || block.Z > 64 {
			return cuda.ErrorInvalidValue
		}
		if sharedMem > defaultMaxDynamicSharedBytes {
			return cuda.ErrorInvalidValue
		}
		kfn := d.mu.kernels[fn.name]
		if kfn == nil {
			return cuda.ErrorInvalidHandle
		}
		d.countOpsLocked(s, 1)
		if d.queuedLocked(s) {
			// Behind a hold: the kernel reads its parameters' memory when it
			// runs; the parameters themselves are copied now, as CUDA does.
			ps := make([][]byte, len(params))
			for i, p := range params {
				ps[i] = bytes.Clone(p)
			}
			if d.deferLocked(s, op{run: func() cuda.Result {
				d.mu.RLock()
				defer d.mu.RUnlock()
				return d.runKernelLocked(dev, fn.name, kfn, grid, block, ps)
			}}) {
				return cuda.Success
			}
		}
		return d.runKernelLocked(dev, fn.name, kfn, grid, block, params)
	})
}

// runKernelLocked runs a kernel's emulation for dev; the caller holds d.mu
// (either side).
func (d *Driver) runKernelLocked(dev cuda.Device, name string, kfn cuda.KernelFunc, grid, block cuda.Dim3, params [][]byte) cuda.Result {
	mem := func(ptr cuda.DevicePtr, n uint64) ([]byte, error) {
		if n == 0 {
			return nil, nil
		}
		if !d.accessibleLocked(dev, uint64(ptr), n, false) {
			return nil, &cuda.Error{Op: "kernel " + name, Result: cuda.ErrorIllegalAddress}
		}
		return bytesAt(uint64(ptr), n), nil
	}
	if err := kfn(grid, block, params, mem); err != nil {
		var ce *cuda.Error
		if errors.As(err, &ce) {
			return ce.Result
		}
		return cuda.ErrorLaunchFailed
	}
	return cuda.Success
}
