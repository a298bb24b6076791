//go:build !cgo || !linux

package cuda

// Open returns ErrNoCUDASupport: this build has no cgo (or is not linux), so
// it cannot load the CUDA driver. Use the simulator (package sim) instead.
func Open(opts Options) (Driver, error) {
	return nil, ErrNoCUDASupport
}
