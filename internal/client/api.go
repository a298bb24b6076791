// Package client is the kvfabric Store: a consumer (and, when configured, a
// provider) that puts and gets objects between its own buffers and segments
// anywhere in the domain with GPU copies, using the master for metadata only.
package client

import (
	"errors"
	"time"

	"github.com/kvfabric/kvfabric/internal/master"
)

// Region is one contiguous buffer: device (or unified) memory, page-locked
// host memory, or host memory inside a buffer registered with
// Store.RegisterBuffer. Pageable host memory that is not registered is
// refused with ErrNotRegistered before any copy is enqueued. An object is
// the concatenation of the regions it is put from (scatter/gather).
type Region struct {
	Ptr uintptr
	Len uint64
}

// Bytes is a one-region buffer.
func Bytes(ptr uintptr, n uint64) []Region { return []Region{{Ptr: ptr, Len: n}} }

// PutOptions are per-put placement options.
type PutOptions struct {
	// Replicas is the number of replicas (0 means 1).
	Replicas int
	// PreferredSegments are segment ids tried first; a client id names
	// every segment that client provides.
	PreferredSegments []string
	// Pin keeps the object from eviction until removed.
	Pin bool
	// SoftPin makes the object evicted only after every unpinned object
	// (Mooncake's soft pin): it still goes under pressure.
	SoftPin bool
	// SoftPinTTL > 0 (with SoftPin) ends the soft pin that long after the
	// put completes.
	SoftPinTTL time.Duration
	// Upsert replaces an existing value instead of failing with
	// ErrAlreadyExists. Readers holding a lease on the old value finish
	// reading it intact; until the new value is complete the key reads as
	// missing. A put of the key in progress is still ErrAlreadyExists.
	Upsert bool
	// KeepSoftPin (with Upsert) keeps the replaced value's soft pin and
	// its expiry; SoftPin and SoftPinTTL must then be unset.
	KeepSoftPin bool
}

// req is the master's PutStart request for a put of size bytes under the
// stored key sk.
func (o *PutOptions) req(sk string, size uint64, place master.Placement) master.PutStartReq {
	return master.PutStartReq{Key: sk, Size: size, Replicas: o.Replicas, Pin: o.Pin, SoftPin: o.SoftPin,
		SoftPinTTL: o.SoftPinTTL, Upsert: o.Upsert, KeepSoftPin: o.KeepSoftPin, Placement: place}
}

// Errors. Callers use errors.Is; the C ABI and Python map them to codes.
var (
	ErrNotFound = errors.New("client: key not found")
	// ErrPermission: the master authenticates callers and this one may not
	// do what it asked (or presented no valid certificate or token).
	ErrPermission        = errors.New("client: permission denied")
	ErrAlreadyExists     = errors.New("client: key already exists")
	ErrNoSpace           = errors.New("client: no space")
	ErrHasLease          = errors.New("client: object has a lease")
	ErrLeaseExpired      = errors.New("client: lease expired during the copy")
	ErrBufferTooSmall    = errors.New("client: buffer too small")
	ErrInvalidArgument   = errors.New("client: invalid argument")
	ErrTransfer          = errors.New("client: transfer failed")
	ErrRPC               = errors.New("client: master unreachable")
	ErrClosed            = errors.New("client: store closed")
	ErrCleanupPending    = errors.New("client: cleanup pending (Close may be retried)")
	ErrNotRegistered     = errors.New("client: buffer not registered")
	ErrAlreadyRegistered = errors.New("client: buffer already registered")
	ErrBufferInUse       = errors.New("client: buffer in use by batches in flight")
)
