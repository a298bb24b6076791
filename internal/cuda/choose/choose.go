// Package choose picks the cuda.Driver a process runs on: the real CUDA
// driver or the simulator, by the `driver` configuration key
// (auto|cuda|sim), and says why in words.
package choose

import (
	"errors"
	"fmt"
	"log/slog"
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

// Driver returns a driver of the given kind and a human reason for the
// choice, e.g. "CUDA 13.0 (2 GPUs)" or "simulator (1 GPU): no usable CUDA
// driver: …".
//
//   - "auto" (or ""): the real driver when it loads and reports at least one
//     GPU, otherwise the simulator (configured by $KVFABRIC_SIM).
//   - "cuda": the real driver or an error (wrapping cuda.ErrNoCUDASupport in
//     builds without cgo, cuda.ErrNoDriver when libcuda is missing, or a
//     *cuda.Error such as CUDA_ERROR_NO_DEVICE).
//   - "sim": the simulator.
//
// log receives the real driver's load line; nil discards. The caller owns
// the returned Driver and closes it.
func Driver(kind string, log *slog.Logger) (cuda.Driver, string, error) {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "", Auto:
		d, reason, err := openCUDA(log)
		if err == nil {
			return d, reason, nil
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
