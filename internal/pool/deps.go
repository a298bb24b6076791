package pool

import (
	"context"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// Mounter publishes segments to the master. The pool mounts each segment
// once and unmounts it once; a failed call is treated as not done and is
// retried by the next Close.
type Mounter interface {
	MountSegment(ctx context.Context, d segment.Descriptor) error
	UnmountSegment(ctx context.Context, k segment.Key) error
}

// FDRegistry serves POSIX fds of exported allocations to same-host
// consumers (the fd-exchange server, DESIGN §2).
type FDRegistry interface {
	// Register takes ownership of fd on success; on error the caller still
	// owns it.
	Register(k segment.Key, fd int) error
	// Unregister stops serving k and closes its fd. On error the registry
	// still owns the fd and a later Unregister may be retried.
	Unregister(k segment.Key) error
	// SocketPath is the Unix socket consumers connect to.
	SocketPath() string
}
