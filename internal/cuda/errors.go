package cuda

import "errors"

// Result mirrors CUresult. Its String method works without libcuda.
type Result int32

// CUresult values kvfabric names (ABI values from cuda.h).
const (
	Success                 Result = 0
	ErrorInvalidValue       Result = 1
	ErrorOutOfMemory        Result = 2
	ErrorNotInitialized     Result = 3
	ErrorDeinitialized      Result = 4
	ErrorNoDevice           Result = 100
	ErrorInvalidDevice      Result = 101
	ErrorDeviceNotLicensed  Result = 102
	ErrorInvalidImage       Result = 200
	ErrorInvalidContext     Result = 201
	ErrorMapFailed          Result = 205
	ErrorUnmapFailed        Result = 206
	ErrorAlreadyMapped      Result = 208
	ErrorNoBinaryForGPU     Result = 209
	ErrorNotMapped          Result = 211
	ErrorInvalidPTX         Result = 218
	ErrorUnsupportedPTX     Result = 222
	ErrorInvalidSource      Result = 300
	ErrorFileNotFound       Result = 301
	ErrorOperatingSystem    Result = 304
	ErrorInvalidHandle      Result = 400
	ErrorIllegalState       Result = 401
	ErrorNotFound           Result = 500
	ErrorNotReady           Result = 600
	ErrorIllegalAddress     Result = 700
	ErrorLaunchOutOfRes     Result = 701
	ErrorLaunchFailed       Result = 719
	ErrorHostMemoryAlready  Result = 712
	ErrorHostMemoryNotReg   Result = 713
	ErrorNotPermitted       Result = 800
	ErrorNotSupported       Result = 801
	ErrorSystemNotReady     Result = 802
	ErrorSystemDriverMism   Result = 803
	ErrorCompatNotSupported Result = 804
	ErrorStreamCaptureUnsup Result = 900
	ErrorUnknown            Result = 999
)

var resultNames = map[Result]string{
	Success:                 "CUDA_SUCCESS",
	ErrorInvalidValue:       "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:        "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:     "CUDA_ERROR_NOT_INITIALIZED",
	ErrorDeinitialized:      "CUDA_ERROR_DEINITIALIZED",
	ErrorNoDevice:           "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:      "CUDA_ERROR_INVALID_DEVICE",
	ErrorDeviceNotLicensed:  "CUDA_ERROR_DEVICE_NOT_LICENSED",
	ErrorInvalidImage:       "CUDA_ERROR_INVALID_IMAGE",
	ErrorInvalidContext:     "CUDA_ERROR_INVALID_CONTEXT",
	ErrorMapFailed:          "CUDA_ERROR_MAP_FAILED",
	ErrorUnmapFailed:        "CUDA_ERROR_UNMAP_FAILED",
	ErrorAlreadyMapped:      "CUDA_ERROR_ALREADY_MAPPED",
	ErrorNoBinaryForGPU:     "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrorNotMapped:          "CUDA_ERROR_NOT_MAPPED",
	ErrorInvalidPTX:         "CUDA_ERROR_INVALID_PTX",
	ErrorUnsupportedPTX:     "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	ErrorInvalidSource:      "CUDA_ERROR_INVALID_SOURCE",
	ErrorFileNotFound:       "CUDA_ERROR_FILE_NOT_FOUND",
	ErrorOperatingSystem:    "CUDA_ERROR_OPERATING_SYSTEM",
	ErrorInvalidHandle:      "CUDA_ERROR_INVALID_HANDLE",
	ErrorIllegalState:       "CUDA_ERROR_ILLEGAL_STATE",
	ErrorNotFound:           "CUDA_ERROR_NOT_FOUND",
	ErrorNotReady:           "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:     "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorLaunchOutOfRes:     "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrorLaunchFailed:       "CUDA_ERROR_LAUNCH_FAILED",
	ErrorHostMemoryAlready:  "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrorHostMemoryNotReg:   "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	ErrorNotPermitted:       "CUDA_ERROR_NOT_PERMITTED",
	ErrorNotSupported:       "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemNotReady:     "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorSystemDriverMism:   "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorCompatNotSupported: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	ErrorStreamCaptureUnsup: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrorUnknown:            "CUDA_ERROR_UNKNOWN",
}

// String returns the CUresult's name as cuGetErrorName would, or
// "CUresult(N)" for values kvfabric does not name.
func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "CUresult(" + itoa(int64(r)) + ")"
}

// Error is a failed driver call.
type Error struct {
	Op     string // driver entry point or kvfabric operation, e.g. "cuMemCreate"
	Result Result
}

func (e *Error) Error() string {
	return "cuda: " + e.Op + ": " + e.Result.String() + " (" + itoa(int64(e.Result)) + ")"
}

// Is lets errors.Is(err, cuda.ErrorNotPermitted) match an *Error by result.
func (e *Error) Is(target error) bool {
	if r, ok := target.(Result); ok {
		return e.Result == r
	}
	return false
}

// Error makes Result usable as an errors.Is target; a bare Result is never
// returned by this package.
func (r Result) Error() string { return r.String() }

// Check turns a CUresult into nil on success and an *Error otherwise.
func Check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Result: r}
}

// ResultOf returns the CUresult carried by err, Success for nil, and
// ErrorUnknown for errors that carry none.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	return ErrorUnknown
}

// Sentinel errors of the seam itself.
var (
	// ErrNoCUDASupport is returned by Open in builds without cgo.
	ErrNoCUDASupport = errors.New("cuda: built without CUDA support (CGO_ENABLED=0 or not linux)")
	// ErrNoDriver is returned by Open when libcuda.so.1 cannot be loaded.
	ErrNoDriver = errors.New("cuda: driver library not available")
	// ErrClosed is returned by a Driver after Close.
	ErrClosed = errors.New("cuda: driver closed")
)
