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
}
