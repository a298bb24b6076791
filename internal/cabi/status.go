// Package cabi is the logic behind kvfabric's C ABI (package capi, built with
// -buildmode=c-shared). capi is a thin layer of //export functions that
// convert C types to the Go types here and call one function each; keeping
// the logic in an importable, cgo-free package lets Go tests drive exactly
// what C callers drive.
//
// The ABI hands out integer handles (never pointers), returns status codes
// (0 or a negative code; see kvfabric.h), keeps a per-handle last-error
// message, turns every panic into StatusPanic, and takes C arrays (keys,
// pointers, lengths, part counts) so that a batch crosses the boundary once.
//
// Array arguments are unsafe.Pointer values to C memory (or, from Go tests,
// to Go memory that outlives the call); cabi reads them only during the call
// and copies what it keeps (keys).
package cabi

import (
	"context"
	"errors"

	"github.com/kvfabric/kvfabric"
	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
)

// ABIVersion is returned by kvfabric_abi_version; bump it on any change to
// kvfabric.h that is not backward compatible.
//
// Adding a function is backward compatible: a caller built against an older
// header never calls it, so kvfabric_version (release 0.1.0) left it at 2. A
// caller that wants a new function from a library that may predate it looks
// the symbol up (dlsym, or hasattr on a ctypes CDLL) instead of relying on
// the ABI version.
const ABIVersion = 2

// Version is the release the library was built from (kvfabric_version),
// the same string as `kvfabric --version` and the Python package's
// __version__.
func Version() string { return kvfabric.Version }

// Status codes. Mooncake's numbers where Mooncake has the condition (so a
// Mooncake-compatible facade passes them through unchanged), ours in the
// −3000 range otherwise. kvfabric.h documents the same values.
const (
	StatusOK                = 0
	StatusInternal          = -1   // Mooncake INTERNAL_ERROR
	StatusNoSpace           = -200 // Mooncake NO_AVAILABLE_HANDLE
	StatusInvalidArgument   = -600 // Mooncake INVALID_PARAMS
	StatusNotFound          = -704 // Mooncake OBJECT_NOT_FOUND
	StatusAlreadyExists     = -705 // Mooncake OBJECT_ALREADY_EXISTS
	StatusHasLease          = -706 // Mooncake OBJECT_HAS_LEASE
	StatusTransfer          = -800 // Mooncake TRANSFER_FAIL
	StatusRPC               = -900 // Mooncake RPC_FAIL
	StatusConfig            = -3001
	StatusClosed            = -3002
	StatusCleanupPending    = -3003
	StatusBufferTooSmall    = -3004
	StatusNotRegistered     = -3005
	StatusAlreadyRegistered = -3006
	StatusLeaseExpired      = -3007
	StatusInvalidHandle     = -3008
	StatusPanic             = -3009
	StatusBufferInUse       = -3010
	StatusPermission        = -3011
)

// StatusName is the header's name for a status code ("KVFABRIC_ERR_NOT_FOUND").
func StatusName(code int32) string {
	switch code {
	case StatusOK:
		return "KVFABRIC_OK"
	case StatusInternal:
		return "KVFABRIC_ERR_INTERNAL"
	case StatusNoSpace:
		return "KVFABRIC_ERR_NO_SPACE"
	case StatusInvalidArgument:
		return "KVFABRIC_ERR_INVALID_ARGUMENT"
	case StatusNotFound:
		return "KVFABRIC_ERR_NOT_FOUND"
	case StatusAlreadyExists:
		return "KVFABRIC_ERR_ALREADY_EXISTS"
	case StatusHasLease:
		return "KVFABRIC_ERR_HAS_LEASE"
	case StatusTransfer:
		return "KVFABRIC_ERR_TRANSFER"
	case StatusRPC:
		return "KVFABRIC_ERR_RPC"
	case StatusConfig:
		return "KVFABRIC_ERR_CONFIG"
	case StatusClosed:
		return "KVFABRIC_ERR_CLOSED"
	case StatusCleanupPending:
		return "KVFABRIC_ERR_CLEANUP_PENDING"
	case StatusBufferTooSmall:
		return "KVFABRIC_ERR_BUFFER_TOO_SMALL"
	case StatusNotRegistered:
		return "KVFABRIC_ERR_NOT_REGISTERED"
	case StatusAlreadyRegistered:
		return "KVFABRIC_ERR_ALREADY_REGISTERED"
	case StatusLeaseExpired:
		return "KVFABRIC_ERR_LEASE_EXPIRED"
	case StatusInvalidHandle:
		return "KVFABRIC_ERR_INVALID_HANDLE"
	case StatusPanic:
		return "KVFABRIC_ERR_PANIC"
	case StatusBufferInUse:
		return "KVFABRIC_ERR_BUFFER_IN_USE"
	case StatusPermission:
		return "KVFABRIC_ERR_PERMISSION"
	}
	return "KVFABRIC_ERR_UNKNOWN"
}

// errInvalidHandle is the error recorded for a handle that is not open.
var errInvalidHandle = errors.New("cabi: invalid handle")

// errPanic wraps a recovered panic.
var errPanic = errors.New("cabi: panic")

// statusOf maps an error to its status code. The order matters where a Store
// error wraps several sentinels: cleanup-pending wins over what caused it.
func statusOf(err error) int32 {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, errPanic):
		return StatusPanic
	case errors.Is(err, errInvalidHandle),
		// Views used after their release: their handle is not open.
		errors.Is(err, client.ErrViewsReleased):
		return StatusInvalidHandle
	case errors.Is(err, client.ErrCleanupPending):
		return StatusCleanupPending
	case errors.Is(err, client.ErrClosed):
		return StatusClosed
	case errors.Is(err, config.ErrInvalid):
		return StatusConfig
	case errors.Is(err, client.ErrNotFound):
		return StatusNotFound
	case errors.Is(err, client.ErrAlreadyExists):
		return StatusAlreadyExists
	case errors.Is(err, client.ErrNoSpace):
		return StatusNoSpace
	case errors.Is(err, client.ErrHasLease):
		return StatusHasLease
	case errors.Is(err, client.ErrLeaseExpired):
		return StatusLeaseExpired
	case errors.Is(err, client.ErrBufferTooSmall):
		return StatusBufferTooSmall
	case errors.Is(err, client.ErrNotRegistered):
		return StatusNotRegistered
	case errors.Is(err, client.ErrAlreadyRegistered):
		return StatusAlreadyRegistered
	case errors.Is(err, client.ErrBufferInUse):
		// Before DeadlineExceeded (RPC): the unregister's wait ran out.
		return StatusBufferInUse
	case errors.Is(err, client.ErrPermission):
		return StatusPermission
	case errors.Is(err, client.ErrInvalidArgument):
		return StatusInvalidArgument
	case errors.Is(err, client.ErrTransfer):
		return StatusTransfer
	case errors.Is(err, client.ErrRPC),
		errors.Is(err, context.DeadlineExceeded):
		return StatusRPC
	}
	return StatusInternal
}
