package master

import "errors"

// Errors. Every error a Client returns wraps at most one of these, so callers
// branch with errors.Is. The embedded and the remote Client return the same
// sentinel and the same message for the same failure: over gRPC each
// sentinel travels as a status code plus an ErrorInfo reason (see codes.go).
var (
	// ErrInvalid: the request is malformed (empty or too long key, size 0,
	// too many replicas, a bad descriptor, an oversized batch, …). Nothing
	// changed. Not retryable. gRPC: InvalidArgument.
	ErrInvalid = errors.New("master: invalid request")
	// ErrNotFound: the key is not visible (absent, still being written, or
	// removed), or a PutEnd/PutRevoke names a put that is no longer in
	// progress (revoked after the put timeout). gRPC: NotFound.
	ErrNotFound = errors.New("master: not found")
	// ErrAlreadyExists: PutStart on a key that exists or is being written
	// (put-if-absent); MountSegment of an id that is mounted with another
	// generation or owner. gRPC: AlreadyExists.
	ErrAlreadyExists = errors.New("master: already exists")
	// ErrNoSpace: no placement after evicting and retrying once. Retryable
	// later. gRPC: ResourceExhausted.
	ErrNoSpace = errors.New("master: no space")
	// ErrHasLease: the object or segment is in use — a reader holds a lease
	// or a put is in progress. UnmountSegment returns it and leaves the
	// segment draining (no new allocations or leases) so that a retry after
	// the lease TTL (or the put timeout) succeeds; Remove without force
	// returns it for a leased object. Retryable. gRPC: Unavailable.
	ErrHasLease = errors.New("master: leased or in use")
	// ErrWrongState: the object is not in a state that allows the operation
	// (Remove of a put in progress, PutRevoke of a put already ended). Not
	// retryable as is. gRPC: FailedPrecondition.
	ErrWrongState = errors.New("master: wrong object state")
	// ErrUnknownSegment: no mounted segment has that id. gRPC: NotFound.
	ErrUnknownSegment = errors.New("master: unknown segment")
	// ErrGenerationMismatch: the segment id is mounted with another
	// generation (another allocation). gRPC: FailedPrecondition.
	ErrGenerationMismatch = errors.New("master: generation mismatch")
	// ErrUnknownClient: the client id is not registered, or its
	// registration expired; register again (and re-mount). gRPC: NotFound.
	ErrUnknownClient = errors.New("master: unknown client")
	// ErrClosed: the Service or the Client is closed. gRPC: Unavailable.
	ErrClosed = errors.New("master: closed")
	// ErrPermission: the caller may not do this (another principal's
	// registration, segment or put; an admin call without the admin role).
	// gRPC: PermissionDenied.
	ErrPermission = errors.New("master: permission denied")
	// ErrUnauthenticated: the master requires authentication and the call
	// carried no valid client certificate or token. gRPC: Unauthenticated.
	ErrUnauthenticated = errors.New("master: unauthenticated")
	// ErrQuota: the caller's registration is at one of its quotas
	// (segments mounted, puts in progress, bytes reserved). gRPC:
	// ResourceExhausted.
	ErrQuota = errors.New("master: quota exceeded")
)
