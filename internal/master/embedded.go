package master

import (
	"context"
	"sync/atomic"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// embedded is the in-process Client: each call goes straight to the
// Service. Results share Replica.Segment descriptors with the Service (they
// are immutable).
type embedded struct {
	svc    *Service
	closed atomic.Bool
}

var (
	_ Client            = (*embedded)(nil)
	_ Preparer          = (*embedded)(nil)
	_ UniformPutStarter = (*embedded)(nil)
)

// UniformPutStarter is a Client that starts a batch of puts given as
// UniformPuts (as a Store's batch puts are) without a request built per
// key: a remote one sends it as one item and two arrays
// (pb.UniformPutStart), a fraction of the bytes and of the work of
// encoding and decoding a request per key. The answers are PutStart's.
type UniformPutStarter interface {
	PutStartUniform(ctx context.Context, u UniformPuts) ([]PutStartResult, error)
}

// PutStartUniform starts u's puts through c: as uniform puts when c is a
// UniformPutStarter, else as PutStart of u's requests.
func PutStartUniform(ctx context.Context, c Client, u UniformPuts) ([]PutStartResult, error) {
	if uc, ok := c.(UniformPutStarter); ok {
		return uc.PutStartUniform(ctx, u)
	}
	reqs, err := u.AppendRequests(nil)
	if err != nil {
		return nil, err
	}
	return c.PutStart(ctx, reqs)
}

// Preparer is a Client that prepares a PutStart batch apart from starting
// it (Service.PreparePutStart): an embedded one. A caller that prepares
// its next batch while the master works on the one before takes the
// preparation off the master's serial path.
type Preparer interface {
	PreparePutStart(reqs []PutStartReq) (*PreparedPuts, error)
	PrepareUniformPutStart(u UniformPuts) (*PreparedPuts, error)
	PutStartPrepared(ctx context.Context, p *PreparedPuts) ([]PutStartResult, error)
}

// NewEmbedded returns a Client that calls svc directly. Closing the Client
// does not close svc.
func NewEmbedded(svc *Service) Client { return &embedded{svc: svc} }

// IsEmbedded reports whether c calls a Service in this process (a call
// costs a lock, not a round trip).
func IsEmbedded(c Client) bool {
	_, ok := c.(*embedded)
	return ok
}

func (e *embedded) check() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (e *embedded) RegisterClient(ctx context.Context, info ClientInfo) (Registration, error) {
	if err := e.check(); err != nil {
		return Registration{}, err
	}
	return e.svc.RegisterClient(ctx, info)
}

func (e *embedded) Heartbeat(ctx context.Context, id string, mapped Mapped) (HeartbeatInfo, error) {
	if err := e.check(); err != nil {
		return HeartbeatInfo{}, err
	}
	return e.svc.Heartbeat(ctx, id, mapped)
}

func (e *embedded) UnregisterClient(ctx context.Context, id string) error {
	if err := e.check(); err != nil {
		return err
	}
	return e.svc.UnregisterClient(ctx, id)
}

func (e *embedded) ReleaseLeases(ctx context.Context, ids []uint64) error {
	if err := e.check(); err != nil {
		return err
	}
	return e.svc.ReleaseLeases(ctx, ids)
}

func (e *embedded) HoldLeases(ctx context.Context, req HoldReq) (HoldResult, error) {
	if err := e.check(); err != nil {
		return HoldResult{}, err
	}
	return e.svc.HoldLeases(ctx, req)
}

func (e *embedded) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error {
	if err := e.check(); err != nil {
		return err
	}
	return e.svc.ReportUnreachable(ctx, reporter, k, reason)
}

func (e *embedded) MountSegment(ctx context.Context, d segment.Descriptor) error {
	if err := e.check(); err != nil {
		return err
	}
	return e.svc.MountSegment(ctx, d)
}

func (e *embedded) UnmountSegment(ctx context.Context, k segment.Key) error {
	if err := e.check(); err != nil {
		return err
	}
	return e.svc.UnmountSegment(ctx, k)
}

func (e *embedded) PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.PutStart(ctx, reqs)
}

// PutStartUniform implements UniformPutStarter.
func (e *embedded) PutStartUniform(ctx context.Context, u UniformPuts) ([]PutStartResult, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.PutStartUniform(ctx, u)
}

// PreparePutStart implements Preparer.
func (e *embedded) PreparePutStart(reqs []PutStartReq) (*PreparedPuts, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.PreparePutStart(reqs)
}

// PrepareUniformPutStart implements Preparer.
func (e *embedded) PrepareUniformPutStart(u UniformPuts) (*PreparedPuts, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.PrepareUniformPutStart(u)
}

// PutStartPrepared implements Preparer.
func (e *embedded) PutStartPrepared(ctx context.Context, p *PreparedPuts) ([]PutStartResult, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.PutStartPrepared(ctx, p)
}

func (e *embedded) PutEnd(ctx context.Context, puts []PutRef) []error {
	if err := e.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	return e.svc.PutEnd(ctx, puts)
}

func (e *embedded) PutRevoke(ctx context.Context, puts []PutRef) []error {
	if err := e.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	return e.svc.PutRevoke(ctx, puts)
}

func (e *embedded) GetReplicas(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.GetReplicas(ctx, keys)
}

func (e *embedded) Exists(ctx context.Context, keys []string, lease bool) ([]bool, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.Exists(ctx, keys, lease)
}

func (e *embedded) Remove(ctx context.Context, keys []string, force bool) []error {
	if err := e.check(); err != nil {
		return fillErr(make([]error, len(keys)), err)
	}
	return e.svc.Remove(ctx, keys, force)
}

func (e *embedded) RemoveAll(ctx context.Context, f Filter, force bool) (int, error) {
	if err := e.check(); err != nil {
		return 0, err
	}
	return e.svc.RemoveAll(ctx, f, force)
}

func (e *embedded) ListSegments(ctx context.Context) ([]segment.Descriptor, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.svc.ListSegments(ctx)
}

func (e *embedded) Stats(ctx context.Context) (Stats, error) {
	if err := e.check(); err != nil {
		return Stats{}, err
	}
	return e.svc.Stats(ctx)
}

func (e *embedded) Close() error {
	e.closed.Store(true)
	return nil
}
