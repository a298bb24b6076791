package cuda

import "log/slog"

// DefaultLibPath is the driver library Open loads when neither
// Options.LibPath nor the environment variable KVFABRIC_LIBCUDA names one.
const DefaultLibPath = "libcuda.so.1"

// LibPathEnv names the environment variable that overrides DefaultLibPath.
const LibPathEnv = "KVFABRIC_LIBCUDA"

// Options configures Open. The zero value loads libcuda.so.1 (or
// $KVFABRIC_LIBCUDA) and logs nothing.
type Options struct {
	// LibPath is the driver library to dlopen; empty means $KVFABRIC_LIBCUDA,
	// then DefaultLibPath.
	LibPath string
	// Logger receives one line per Open (library, driver version,
	// capabilities); nil discards.
	Logger *slog.Logger
	// BatchABI caps the cuMemcpyBatchAsync ABI Open requests: 0 means the
	// newest the driver offers (CUDA 13.0's, without failIdx, on 13.x
	// drivers); 12080 forces the CUDA 12.8 one (with failIdx), so tests can
	// exercise both on one driver; below 12080 disables the capability.
	BatchABI int
}
