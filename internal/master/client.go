package master

import (
	"context"
	"time"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// Client is how the rest of kvfabric talks to the master: NewEmbedded calls
// a Service in the same process, Dial talks to `kvfabric master` over gRPC.
// Both behave identically, errors included (see errors.go).
//
// Batch forms are the primitive: a call for one key is a batch of one.
// Results are positional — result i answers request i — and per-item
// failures are reported per item; the returned error (or, for the []error
// forms, the same error in every slot) is for failures of the whole call:
// ErrClosed, ErrInvalid for an oversized batch, context and transport
// errors.
//
// A Client is safe for concurrent use.
type Client interface {
	// RegisterClient registers a process with the master and starts its
	// liveness clock: it must call Heartbeat more often than the returned
	// TTL, or its segments are unmounted and the replicas on them dropped.
	// An empty ClientInfo.ID asks the master to assign one. Registering an
	// id that is registered already starts a new incarnation: the segments
	// of the old one are unmounted, as on expiry (the memory went with the
	// old process).
	RegisterClient(ctx context.Context, info ClientInfo) (Registration, error)
	// UnregisterClient ends a registration now: a client closing cleanly,
	// whose copies are complete. Its puts are freed and its segments
	// dropped (as on expiry, quarantined while leases on them run), and the
	// id is free for another process. ErrUnknownClient if not registered.
	UnregisterClient(ctx context.Context, clientID string) error
	// Heartbeat renews a registration; ErrUnknownClient once it expired.
	// Its answer says whether the set of mounted segments changed (a
	// consumer then releases its mappings of segments that are gone).
	// mapped is what the client has imported, shown in Stats.
	Heartbeat(ctx context.Context, clientID string, mapped Mapped) (HeartbeatInfo, error)
	// MountSegment adds capacity. d.Owner must be a registered client id.
	// Mounting the same (id, generation) again is a no-op; the same id with
	// another generation or owner is ErrAlreadyExists.
	MountSegment(ctx context.Context, d segment.Descriptor) error
	// UnmountSegment removes a segment, dropping the replicas on it and the
	// objects left without replicas. While a reader holds a lease on an
	// object with a replica on it, or a put into it is in progress, it
	// returns ErrHasLease and the segment drains: it gets no new
	// allocations or leases, so retrying after the lease TTL succeeds. The
	// drain lasts Config.DrainTimeout from the last refused call: an owner
	// that stops retrying gets a usable segment back.
	UnmountSegment(ctx context.Context, k segment.Key) error
	// PutStart allocates replicas for new keys (put-if-absent) for the
	// writer Placement.Client, which must be a registered client. The object
	// becomes visible at PutEnd. A put neither ended nor revoked within the
	// put timeout can no longer become visible (its key is free for a new
	// put), but its bytes stay reserved until the writer ends or revokes it
	// (after its copies are complete) or the writer's registration ends: a
	// writer that is only slow never has its range handed to someone else.
	PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error)
	// PutEnd makes puts visible. Ending a put twice is a no-op; a put that
	// was revoked is ErrNotFound; a put past its timeout is ErrNotFound and
	// its bytes are freed (the writer calls PutEnd after its copies).
	PutEnd(ctx context.Context, puts []PutRef) []error
	// PutRevoke abandons puts in progress and frees their bytes.
	PutRevoke(ctx context.Context, puts []PutRef) []error
	// GetReplicas returns where visible keys live and grants each a read
	// lease until GetResult.LeaseExpiry: until then the replicas are neither
	// evicted nor freed. A missing or unfinished key is ErrNotFound. When
	// ctx names the reader (WithReader), replicas it cannot reach are left
	// out, and a key with none left is ErrNotFound. When ctx carries
	// releases (WithReleases), a successful call ends those leases after
	// its lookup, as ReleaseLeases would, and sets ReleaseCarry.Released.
	GetReplicas(ctx context.Context, keys []string) ([]GetResult, error)
	// ReleaseLeases ends read leases (GetResult.LeaseID) whose copies are
	// complete. When an object's last lease is released, its bytes are
	// evictable again, and freed at once if it was removed meanwhile. Every
	// lease has its own id (also when several readers hold one object) and
	// counts once however often it is released; unknown and ended leases,
	// and with authentication those granted to another principal (unless
	// the caller is an admin), are ignored.
	ReleaseLeases(ctx context.Context, leaseIDs []uint64) error
	// HoldLeases manages the read leases client req.Client holds as views
	// (device addresses it keeps and reads at will, Store.Acquire). Hold
	// registers leases GetReplicas just granted it as views and renews
	// them; Renew extends views' leases; both by the lease TTL from now.
	// Release ends views and their leases (as ReleaseLeases). Errs answers
	// Hold then Renew positionally: ErrNotFound when the lease ended
	// (expired, released, or its object freed) — the holder must stop
	// reading; ErrWrongState when a replica's segment is draining or was
	// reported unreachable — the lease is not renewed and ends at its
	// expiry, so that the segment can drain. Renewed leases block eviction,
	// plain removal and the reuse of the range like any read lease.
	HoldLeases(ctx context.Context, req HoldReq) (HoldResult, error)
	// ReportUnreachable tells the master that reporter could not reach the
	// provider of segment k (its fd-exchange server refused the
	// connection). The master places nothing more on the segment and grants
	// no more leases on it; the provider's next heartbeat clears the
	// suspicion, and without one its registration ends early (within half
	// its TTL) and its segments are dropped.
	ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error
	// Exists reports whether keys are visible. With lease, every visible
	// key gets a read lease of the lease TTL, as from GetReplicas, that
	// ends by expiry (Mooncake's exist check does the same: a caller that
	// saw a key can read it before it is evicted); without, none.
	Exists(ctx context.Context, keys []string, lease bool) ([]bool, error)
	// Remove deletes visible keys. A leased key is ErrHasLease unless
	// force is set; then the key disappears at once and its bytes are freed
	// when the last lease expires. A put in progress is ErrWrongState.
	Remove(ctx context.Context, keys []string, force bool) []error
	// RemoveAll removes every visible object that f selects as Remove
	// would, skipping leased ones unless force is set and puts in progress
	// always, and returns how many it removed. A bad f.Pattern is
	// ErrInvalid.
	RemoveAll(ctx context.Context, f Filter, force bool) (int, error)
	// ListSegments returns the mounted segments (draining ones included).
	ListSegments(ctx context.Context) ([]segment.Descriptor, error)
	// Stats returns capacity and usage.
	Stats(ctx context.Context) (Stats, error)
	// Close releases the Client (not the Service behind an embedded one).
	// Later calls return ErrClosed. Close is idempotent.
	Close() error
}

// ClientInfo describes a process registering with the master.
type ClientInfo struct {
	// ID is the client id; empty asks the master to assign one.
	ID string
	// Node is the host identity (the segment descriptors' Node).
	Node string
	// TTL is how long the registration lives without a heartbeat; 0 means
	// the master's default. The master clamps it to its configured bounds.
	TTL time.Duration
	// NUMANode and Device are where the client's GPU sits, for placement;
	// -1 when unknown.
	NUMANode int32
	Device   int32
	// Incarnation is random per client process (0: unset). While a
	// registration of another incarnation is live, registering its id is
	// refused (ErrAlreadyExists): a second process started with the same id
	// must not wipe the first one's segments. The same incarnation
	// registering again is a retry.
	Incarnation uint64
	// Driver is the CUDA driver the client runs on ("cuda" or "sim"; ""
	// when unknown), shown in Stats.
	Driver string
	// FabricDomain is the client's fabric (NVLink/IMEX) domain; "" is the
	// default domain. A fabric handle imports only within its domain, so
	// the client is offered fabric segments of its own domain only, and
	// its own fabric segments belong to it (see reach.go).
	FabricDomain string
}

// Registration is the master's answer to RegisterClient.
type Registration struct {
	ID  string
	TTL time.Duration
	// LeaseTTL and PutTimeout are the master's: a client bounds what it does
	// under a read lease or a put with them, in its own clock.
	LeaseTTL, PutTimeout time.Duration
	// FastPort is the port of the master's fast path on the host the client
	// dialed (0: none, or an embedded master); a remote Client uses it by
	// itself (fastpath.go).
	FastPort uint32
}

// Mapped is what a client has imported from other providers (its mapping
// cache), as it reports with each heartbeat.
type Mapped struct {
	Segments int
	Bytes    uint64
}

// HeartbeatInfo is the master's answer to Heartbeat.
type HeartbeatInfo struct {
	// SegmentsVersion changes whenever a segment is mounted or unmounted
	// (and differs between master processes): a consumer that sees a new
	// value compares its mappings with ListSegments.
	SegmentsVersion uint64
}

// MaxReplicas bounds PutStartReq.Replicas.
const MaxReplicas = 8

// PutStartReq asks for space for one new object.
type PutStartReq struct {
	Key  string
	Size uint64
	// Replicas is the number of copies, each on a distinct segment; 0 means 1.
	Replicas int
	// Pin exempts the object from eviction (it can still be removed).
	Pin bool
	// SoftPin makes the object evicted only after every unpinned one: under
	// pressure it still goes.
	SoftPin bool
	// SoftPinTTL > 0 (with SoftPin) ends the soft pin that long after the
	// put ends; 0 keeps it until the object goes.
	SoftPinTTL time.Duration
	// Upsert replaces the key's visible object, if any: the old one leaves
	// the index at PutStart (its bytes stay for its lease holders, as with
	// a forced Remove) and the new one becomes visible at PutEnd. A put in
	// progress of the key is still ErrAlreadyExists. Without Upsert any
	// existing key is ErrAlreadyExists.
	Upsert bool
	// KeepSoftPin (with Upsert only) gives the new object the replaced
	// one's soft pin and its expiry; SoftPin and SoftPinTTL must be unset.
	KeepSoftPin bool
	Placement   Placement
}

// Filter selects keys for RemoveAll: those of Tenant's namespace ("" is
// the default one) whose name in it matches Pattern (RE2 syntax,
// unanchored as regexp.MatchString; "" matches all).
type Filter struct {
	Tenant, Pattern string
}

// Placement holds hints; none of them makes a put fail except TierOnly.
type Placement struct {
	// Tier is tried first; TierUnknown means DRAM, then HBM.
	Tier segment.Tier
	// TierOnly forbids falling back to the other tier.
	TierOnly bool
	// Client is the writing client's id; its registered Node, NUMA node and
	// device are used when the fields below are unset.
	Client string
	// Node, NUMANode and Device say where the data will be read from: a
	// segment on that node and NUMA node (DRAM) or device (HBM) is
	// preferred. Empty / -1 when unknown. (The zero value 0 means NUMA
	// node 0 / device 0: set -1 explicitly when unknown.)
	Node     string
	NUMANode int32
	Device   int32
	// Segments are preferred segment ids, or client ids (every segment the
	// client provides); unknown ids are ignored.
	Segments []string
}

// NoPlacement is Placement with nothing known.
var NoPlacement = Placement{NUMANode: -1, Device: -1}

// Replica is where one copy of an object lives.
type Replica struct {
	// Segment is the descriptor the segment was mounted with: enough to
	// import it, keyed by Segment.Key(). It is shared and must not be
	// modified.
	Segment *segment.Descriptor
	Offset  uint64
	// Length is the allocated length (Size rounded up to the alignment).
	Length uint64
}

// PutStartResult answers one PutStartReq.
type PutStartResult struct {
	// Err is nil on success.
	Err error
	// Token identifies this put; pass it to PutEnd or PutRevoke.
	Token    uint64
	Replicas []Replica
	// Hint, when not 0, is where this master keeps the put: PutEnd and
	// PutRevoke go to it directly rather than look the key up (Ref
	// carries it). The wire carries it both ways (PutStartResult.hint,
	// PutRef.hint): a remote master's PutEnds skip the lookup too.
	Hint uint32
}

// Ref returns the PutRef of this put, of key.
func (r *PutStartResult) Ref(key string) PutRef {
	return PutRef{Key: key, Token: r.Token, Hint: r.Hint}
}

// PutRef names a put in progress.
type PutRef struct {
	Key   string
	Token uint64
	// Hint is PutStartResult.Hint. The master trusts no hint: it uses the
	// record a hint names only when that record is a put of Key with
	// Token, and otherwise looks Key up, so a stale, foreign or forged
	// hint changes nothing but the time taken.
	Hint uint32
}

// GetResult answers one key of GetReplicas.
type GetResult struct {
	// Err is nil on success.
	Err      error
	Size     uint64
	Replicas []Replica
	// LeaseExpiry is when the read lease ends; a reader whose copy finishes
	// later must treat the data as possibly overwritten.
	LeaseExpiry time.Time
	// LeaseTTL is the lease's length as granted. The remote Client sets
	// LeaseExpiry to its own send time plus LeaseTTL, so a reader on another
	// host never trusts a lease longer than the master granted, whatever the
	// clock skew between them.
	LeaseTTL time.Duration
	// LeaseID names the lease for ReleaseLeases.
	LeaseID uint64
}

// Stats is a snapshot of the master's state.
type Stats struct {
	// Views is the number of views held, all clients (HoldLeases).
	Views       int
	Objects     int
	PendingPuts int
	Segments    int
	Clients     int
	Tiers       []UsageStats // one per tier with segments, by tier
	Locations   []UsageStats // one per (node, tier, location), sorted
	Evictions   uint64
	// PerClient lists the registered clients, by id.
	PerClient []ClientStats
}

// ClientStats is one registered client as the master sees it.
type ClientStats struct {
	ID, Node string
	// Segments is how many segments it provides.
	Segments int
	// Mapped is what it reported at its last heartbeat.
	Mapped Mapped
	// Views is how many views it holds (HoldLeases).
	Views int
	// Driver and FabricDomain are as it registered them.
	Driver, FabricDomain string
	// Handles are the handle kinds of the segments it provides, distinct
	// and sorted.
	Handles []segment.HandleKind
}

// UsageStats is capacity and usage of a set of segments.
type UsageStats struct {
	Node     string // empty in Stats.Tiers
	Tier     segment.Tier
	Location int32 // -1 in Stats.Tiers
	Segments int
	Capacity uint64
	Used     uint64
}

// HoldReq is a HoldLeases request: lease ids (GetResult.LeaseID) of Client.
type HoldReq struct {
	Client               string
	Hold, Renew, Release []uint64
}

// HoldResult answers a HoldLeases request.
type HoldResult struct {
	// TTL is how long the renewed leases last from the request.
	TTL time.Duration
	// Errs answers HoldReq.Hold then HoldReq.Renew, positionally.
	Errs []error
}
