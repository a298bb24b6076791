package master

import (
	"context"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// Reachability: a client can import a segment only where its handle can
// travel (DESIGN §2).
//
//   - posix_fd: the fd is passed over a Unix socket, so only processes on
//     the provider's host (the descriptor's Node equal to the client's
//     registered Node) can import it.
//   - fabric: a CUmemFabricHandle imports on any node of one NVLink/IMEX
//     domain. A client names its domain with the fabric_domain key
//     (ClientInfo.FabricDomain; "" is the default domain, so a deployment
//     that never sets it is one domain). A fabric segment belongs to its
//     owner's domain: the owner is registered for as long as its segments
//     are mounted (its expiry or re-registration unmounts them), so the
//     domain is taken from it at mount (segState.domain) rather than
//     carried in the descriptor.
//
// The master places a put only on segments its writer reaches, and leaves
// out of a reader's GetReplicas results the replicas it cannot reach. A
// reader that does not say who it is (no WithReader, or an id the master
// does not know) gets every replica, as before.

// reach is where one client can import segments from.
type reach struct {
	known  bool // false: nothing is known; every segment counts as reachable
	node   string
	domain string
}

// reachOf is the reach of a registered client.
func reachOf(c *clientState) reach {
	return reach{known: true, node: c.info.Node, domain: c.info.FabricDomain}
}

// reachesLocked reports whether r can import sg.
func (s *Service) reachesLocked(r reach, sg *segState) bool {
	if !r.known {
		return true
	}
	switch sg.desc.Handle.Kind {
	case segment.HandlePosixFD:
		return r.node == "" || r.node == sg.desc.Node
	case segment.HandleFabric:
		return r.domain == sg.domain
	}
	return true
}

type readerKey struct{}

// WithReader returns ctx naming clientID as the reader of the GetReplicas
// calls made with it, so that replicas that client cannot reach are left
// out (see reach.go). The remote Client sends the id with the request.
func WithReader(ctx context.Context, clientID string) context.Context {
	if clientID == "" {
		return ctx
	}
	return context.WithValue(ctx, readerKey{}, clientID)
}

// readerOf is the reader WithReader put in ctx, or "".
func readerOf(ctx context.Context) string {
	id, _ := ctx.Value(readerKey{}).(string)
	return id
}

// readerReachLocked is the reach of ctx's reader.
func (s *Service) readerReachLocked(ctx context.Context) reach {
	if c, ok := s.mu.clients[readerOf(ctx)]; ok {
		return reachOf(c)
	}
	return reach{}
}
