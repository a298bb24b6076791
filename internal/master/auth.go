package master

import (
	"context"
	"fmt"
)

// Role is what an authenticated caller may do.
type Role uint8

const (
	// RoleClient may register, heartbeat, mount and unmount as itself, put
	// as itself and read, and remove objects.
	RoleClient Role = iota + 1
	// RoleAdmin may also act on other principals' registrations and
	// segments and call RemoveAll with force.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole parses "client" or "admin".
func ParseRole(s string) (Role, error) {
	switch s {
	case "client":
		return RoleClient, nil
	case "admin":
		return RoleAdmin, nil
	}
	return 0, fmt.Errorf("%w: role %q: want client or admin", ErrInvalid, s)
}

// Principal is the authenticated identity behind a call: the subject of a
// verified client certificate or the name of a bearer token.
type Principal struct {
	Name string
	Role Role
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p. The gRPC server sets it from the
// caller's certificate or token; in-process callers of an embedded master
// that enforces authentication set it themselves.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok && p.Name != ""
}

// caller is who makes a call as the Service's checks see it. With
// authentication off every caller is trusted (anon): ownership is then
// only what client ids and incarnations say.
type caller struct {
	Principal
	anon bool
}

// callerOf returns the call's caller, or ErrUnauthenticated when the
// Service requires authentication and ctx carries no principal.
func (s *Service) callerOf(ctx context.Context) (caller, error) {
	p, ok := PrincipalFrom(ctx)
	if ok {
		return caller{Principal: p}, nil
	}
	if s.cfg.RequireAuth {
		return caller{}, fmt.Errorf("%w: this master requires a client certificate or a bearer token", ErrUnauthenticated)
	}
	return caller{anon: true}, nil
}

// admin reports whether c may act on anything.
func (c caller) admin() bool { return c.anon || c.Role == RoleAdmin }

// mayActAs reports whether c may act for a registration made by principal
// owner (empty: made without authentication).
func (c caller) mayActAs(owner string) bool { return c.admin() || c.Name == owner }

// ownsLocked checks that c may act for registered client id.
func (s *Service) ownsLocked(c caller, id string, what string) error {
	cs, ok := s.mu.clients[id]
	if !ok || c.mayActAs(cs.principal) {
		return nil // an unknown id fails later with ErrUnknownClient
	}
	return fmt.Errorf("%w: %s: client %q belongs to %q, not %q", ErrPermission, what, id, cs.principal, c.Name)
}

// Quotas bound what one registration may hold. Zero fields mean the
// defaults (DefaultQuotas); a negative one means no limit.
type Quotas struct {
	// Segments mounted at once.
	Segments int
	// PendingPuts: puts in progress (and revoked ones whose bytes are still
	// reserved).
	PendingPuts int
	// ReservedBytes: bytes those puts reserve.
	ReservedBytes int64
}

// DefaultQuotas are generous bounds that stop one client from taking the
// whole master: 64 Ki segments, 1 Mi puts in progress, 16 TiB reserved.
var DefaultQuotas = Quotas{Segments: 1 << 16, PendingPuts: 1 << 20, ReservedBytes: 16 << 40}

func (q Quotas) withDefaults() Quotas {
	if q.Segments == 0 {
		q.Segments = DefaultQuotas.Segments
	}
	if q.PendingPuts == 0 {
		q.PendingPuts = DefaultQuotas.PendingPuts
	}
	if q.ReservedBytes == 0 {
		q.ReservedBytes = DefaultQuotas.ReservedBytes
	}
	return q
}
