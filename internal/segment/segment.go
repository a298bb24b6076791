// Package segment defines the segment descriptor shared by the provider, the
// master and the consumer (DESIGN §2): one VMM allocation, exported as one
// range and mounted as one master segment.
package segment

import (
	"errors"
	"fmt"
	"strings"
)

// Tier is the memory tier a segment lives in.
type Tier uint8

// Tiers.
const (
	TierUnknown Tier = 0
	TierDRAM    Tier = 1 // host NUMA VMM memory (EGM on Grace systems)
	TierHBM     Tier = 2 // GPU device memory
)

func (t Tier) String() string {
	switch t {
	case TierDRAM:
		return "dram"
	case TierHBM:
		return "hbm"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// HandleKind says how a consumer obtains the allocation.
type HandleKind uint8

// Handle kinds.
const (
	HandleUnknown HandleKind = 0
	// HandleFabric: the 64-byte CUmemFabricHandle travels in the descriptor.
	HandleFabric HandleKind = 1
	// HandlePosixFD: same host only; the consumer asks the provider's Unix
	// socket (SocketPath) for the fd of (ID, Generation).
	HandlePosixFD HandleKind = 2
)

func (k HandleKind) String() string {
	switch k {
	case HandleFabric:
		return "fabric"
	case HandlePosixFD:
		return "posix_fd"
	}
	return fmt.Sprintf("handle(%d)", uint8(k))
}

// Handle is how to import a segment's allocation.
type Handle struct {
	Kind HandleKind
	// Fabric is the CUmemFabricHandle when Kind is HandleFabric.
	Fabric [64]byte
	// SocketPath is the provider's fd-exchange socket when Kind is
	// HandlePosixFD.
	SocketPath string
}

// Descriptor describes one mounted segment. It is a plain value: copying it
// is safe and cheap enough (it is only exchanged at mount and first use).
type Descriptor struct {
	// ID names the segment; it is stable across provider restarts
	// ("<host>/<client>/<tier><location>/<index>"), so it alone does not
	// identify an allocation.
	ID string
	// Generation is a random 64-bit identity of the allocation, new on every
	// allocation. Consumers key mappings by (ID, Generation).
	Generation uint64
	// Node is the host identity of the provider.
	Node string
	// Owner is the client id of the provider that mounted it.
	Owner string
	// Tier is DRAM or HBM.
	Tier Tier
	// Location is the host NUMA id (DRAM) or device ordinal (HBM).
	Location int32
	// Size is the segment size in bytes.
	Size uint64
	// Handle says how to import it.
	Handle Handle
}

// Key identifies one allocation: mappings and replicas are keyed by it.
type Key struct {
	ID         string
	Generation uint64
}

// Key returns d's allocation identity.
func (d *Descriptor) Key() Key { return Key{ID: d.ID, Generation: d.Generation} }

func (k Key) String() string { return fmt.Sprintf("%s gen %#x", k.ID, k.Generation) }

// MaxIDLen bounds a segment id.
const MaxIDLen = 256

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("segment: invalid descriptor")

// Validate checks d's fields; the error names the field and its value.
func (d *Descriptor) Validate() error {
	switch {
	case d.ID == "" || len(d.ID) > MaxIDLen:
		return fmt.Errorf("%w: id %q: must be 1..%d bytes", ErrInvalid, d.ID, MaxIDLen)
	case strings.ContainsAny(d.ID, "\x00\n"):
		return fmt.Errorf("%w: id %q: contains NUL or newline", ErrInvalid, d.ID)
	case d.Generation == 0:
		return fmt.Errorf("%w: segment %q: generation 0 is reserved", ErrInvalid, d.ID)
	case d.Tier != TierDRAM && d.Tier != TierHBM:
		return fmt.Errorf("%w: segment %q: tier %d", ErrInvalid, d.ID, d.Tier)
	case d.Size == 0:
		return fmt.Errorf("%w: segment %q: size 0", ErrInvalid, d.ID)
	case d.Location < 0:
		return fmt.Errorf("%w: segment %q: location %d", ErrInvalid, d.ID, d.Location)
	}
	switch d.Handle.Kind {
	case HandleFabric:
	case HandlePosixFD:
		if d.Handle.SocketPath == "" {
			return fmt.Errorf("%w: segment %q: posix_fd handle without socket path", ErrInvalid, d.ID)
		}
	default:
		return fmt.Errorf("%w: segment %q: handle kind %d", ErrInvalid, d.ID, d.Handle.Kind)
	}
	return nil
}
