// Package choose picks the cuda.Driver a process runs on: the real CUDA
// driver or the simulator, by the `driver` configuration key
// (auto|cuda|sim), and says why in words.
package choose

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// Driver kinds accepted by Driver.
const (
	Auto = "auto"
	CUDA = "cuda"
	Sim  = "sim"
)

// ErrGPUPresent is wrapped by ProviderDriver's error when driver=auto finds
// a GPU on the host but cannot use the CUDA driver: a provider then fails
// instead of serving simulator memory in a real deployment.
var ErrGPUPresent = errors.New("choose: a GPU is present but the CUDA driver cannot be used")

// Driver returns a driver of the given kind and a human reason for the
// choice, e.g. "CUDA 13.0 (2 GPUs)" or "simulator (1 GPU): no usable CUDA
// driver: …". It is the choice of a pure consumer; a process that
// provides capacity uses ProviderDriver.
//
//   - "auto" (or ""): the real driver when it loads and reports at least one
//     GPU, otherwise the simulator (configured by $KVFABRIC_SIM). When a GPU
//     is present (GPUPresent) but the driver failed, the fallback is logged
//     as a warning and the reason says so.
//   - "cuda": the real driver or an error (wrapping cuda.ErrNoCUDASupport in
//     builds without cgo, cuda.ErrNoDriver when libcuda is missing, or a
//     *cuda.Error such as CUDA_ERROR_NO_DEVICE).
//   - "sim": the simulator.
//
// log receives the real driver's load line; nil discards. The caller owns
// the returned Driver and closes it.
func Driver(kind string, log *slog.Logger) (cuda.Driver, string, error) {
	return pick(kind, log, false, "/")
}

// ProviderDriver is Driver for a process that provides capacity (a Store
// with global_segment_size > 0, `kvfabric provider`): with "auto", when a
// GPU is present but the CUDA driver cannot be used, it fails with the
// driver's error (wrapping ErrGPUPresent) instead of serving simulator
// memory that no consumer on the GPU fabric could reach. driver=sim still
// gives the simulator.
func ProviderDriver(kind string, log *slog.Logger) (cuda.Driver, string, error) {
	return pick(kind, log, true, "/")
}

// GPUPresent reports whether the host has an NVIDIA GPU, whatever the state
// of the user-space CUDA driver, and names the evidence. Present means the
// kernel driver shows one, under root ("/" on a real host):
//
//   - a device node /dev/nvidia<N> (created per GPU by the kernel driver or
//     nvidia-modprobe, and what a container is given for each GPU it may
//     use; /dev/nvidiactl alone is not a GPU), or
//   - an entry in /proc/driver/nvidia/gpus (one per GPU the kernel module
//     bound).
//
// nvidia-smi is not consulted: it may be installed without a GPU, and it
// needs the same libnvidia/libcuda stack whose failure is in question.
func GPUPresent(root string) (bool, string) {
	devs, _ := filepath.Glob(filepath.Join(root, "dev", "nvidia[0-9]*"))
	for _, d := range devs {
		if _, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "nvidia")); err == nil {
			return true, strings.TrimPrefix(d, filepath.Clean(root))
		}
	}
	gpus := filepath.Join(root, "proc", "driver", "nvidia", "gpus")
	if ents, err := os.ReadDir(gpus); err == nil && len(ents) > 0 {
		return true, strings.TrimPrefix(filepath.Join(gpus, ents[0].Name()), filepath.Clean(root))
	}
	return false, ""
}

// pick is Driver (provider false) and ProviderDriver (provider true), with
// GPU presence judged under root.
func pick(kind string, log *slog.Logger, provider bool, root string) (cuda.Driver, string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", Auto:
		d, reason, err := openCUDA(log)
		if err == nil {
			return d, reason, nil
		}
		if ok, evidence := GPUPresent(root); ok {
			if provider {
				return nil, "", fmt.Errorf("%w (%s exists): driver=auto: %w; fix the driver, or set driver=sim to provide simulator memory on purpose",
					ErrGPUPresent, evidence, err)
			}
			log.Warn("kvfabric: a GPU is present but the CUDA driver cannot be used; falling back to the simulator",
				"evidence", evidence, "err", err)
			return openSim("no usable CUDA driver although " + evidence + " exists: " + cause(err))
		}
		return openSim("no usable CUDA driver: " + cause(err))
	case CUDA:
		d, reason, err := openCUDA(log)
		if err != nil {
			return nil, "", fmt.Errorf("choose: driver=cuda: %w", err)
		}
		return d, reason, nil
	case Sim:
		return openSim("driver=sim requested")
	}
	return nil, "", fmt.Errorf("choose: driver %q: want auto, cuda or sim", kind)
}

// openCUDA opens the real driver and requires at least one GPU.
func openCUDA(log *slog.Logger) (cuda.Driver, string, error) {
	d, err := cuda.Open(cuda.Options{Logger: log})
	if err != nil {
		return nil, "", err
	}
	n, err := d.DeviceCount()
	if err == nil && n == 0 {
		err = &cuda.Error{Op: "cuDeviceGetCount", Result: cuda.ErrorNoDevice}
	}
	if err != nil {
		return nil, "", errors.Join(err, d.Close())
	}
	v, err := d.DriverVersion()
	if err != nil {
		return nil, "", errors.Join(err, d.Close())
	}
	return d, fmt.Sprintf("CUDA %d.%d (%s)", v/1000, v%1000/10, gpus(n)), nil
}

func openSim(why string) (cuda.Driver, string, error) {
	cfg, err := sim.ConfigFromEnv()
	if err != nil {
		return nil, "", fmt.Errorf("choose: simulator: %w", err)
	}
	d, err := sim.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("choose: simulator: %w", err)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("choose: simulator: %w", err), d.Close())
	}
	return d, fmt.Sprintf("simulator (%s): %s", gpus(n), why), nil
}

func gpus(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// cause is err's text without the "cuda: " package prefix.
func cause(err error) string {
	if errors.Is(err, cuda.ErrNoCUDASupport) {
		return "built without CUDA support"
	}
	return strings.TrimPrefix(err.Error(), "cuda: ")
}
