package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// deadlineMaster is the master.Client a Store calls a remote master
// through. (An embedded master is called directly: it waits on no peer,
// so the deadline could never fire, and its timer would cost every call.)
// A call whose context has no deadline — every call from the C ABI and
// Python, which pass context.Background(), and the best-effort revokes and
// lease releases that detach from their caller's context — gets
// rpc_timeout: a master that
// accepts connections but does not answer (stopped, wedged, a partition
// that drops packets) fails the call with ErrRPC instead of blocking an
// inference thread forever. A deadline set by the caller is kept as it is.
//
// Every Client method is written out (none is promoted from an embedded
// Client), so a method added to master.Client does not compile here until
// it gets its deadline too.
//
// It is safe for concurrent use, as the Client it wraps.
type deadlineMaster struct {
	m       master.Client
	timeout time.Duration
}

var (
	_ master.Client            = deadlineMaster{}
	_ master.UniformPutStarter = deadlineMaster{}
)

// withDeadline returns ctx, or ctx with d.timeout when it has no deadline.
func (d deadlineMaster) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.timeout)
}

// timedOut turns a call's failure caused by the deadline withDeadline added
// into an ErrRPC that names rpc_timeout; other errors pass unchanged. The
// call's DeadlineExceeded is enough: the parent has no deadline, and gRPC
// may report the deadline (the server's copy of it, sent with the call)
// a moment before ctx's own timer fires.
func (d deadlineMaster) timedOut(parent, ctx context.Context, op string, err error) error {
	if err == nil || ctx == parent || parent.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: master %s got no answer within rpc_timeout=%v: %w", ErrRPC, op, d.timeout, err)
}

func (d deadlineMaster) timedOutAll(parent, ctx context.Context, op string, errs []error) []error {
	for i, e := range errs {
		errs[i] = d.timedOut(parent, ctx, op, e)
	}
	return errs
}

func (d deadlineMaster) RegisterClient(parent context.Context, info master.ClientInfo) (master.Registration, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	r, err := d.m.RegisterClient(ctx, info)
	return r, d.timedOut(parent, ctx, "RegisterClient", err)
}

func (d deadlineMaster) UnregisterClient(parent context.Context, id string) error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOut(parent, ctx, "UnregisterClient", d.m.UnregisterClient(ctx, id))
}

func (d deadlineMaster) Heartbeat(parent context.Context, id string, mapped master.Mapped) (master.HeartbeatInfo, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	hb, err := d.m.Heartbeat(ctx, id, mapped)
	return hb, d.timedOut(parent, ctx, "Heartbeat", err)
}

func (d deadlineMaster) MountSegment(parent context.Context, desc segment.Descriptor) error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOut(parent, ctx, "MountSegment", d.m.MountSegment(ctx, desc))
}

func (d deadlineMaster) UnmountSegment(parent context.Context, k segment.Key) error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOut(parent, ctx, "UnmountSegment", d.m.UnmountSegment(ctx, k))
}

func (d deadlineMaster) PutStart(parent context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	res, err := d.m.PutStart(ctx, reqs)
	return res, d.timedOut(parent, ctx, "PutStart", err)
}

// PutStartUniform implements master.UniformPutStarter.
func (d deadlineMaster) PutStartUniform(parent context.Context, u master.UniformPuts) ([]master.PutStartResult, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	res, err := master.PutStartUniform(ctx, d.m, u)
	return res, d.timedOut(parent, ctx, "PutStart", err)
}

func (d deadlineMaster) PutEnd(parent context.Context, puts []master.PutRef) []error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOutAll(parent, ctx, "PutEnd", d.m.PutEnd(ctx, puts))
}

func (d deadlineMaster) PutRevoke(parent context.Context, puts []master.PutRef) []error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOutAll(parent, ctx, "PutRevoke", d.m.PutRevoke(ctx, puts))
}

func (d deadlineMaster) GetReplicas(parent context.Context, keys []string) ([]master.GetResult, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	res, err := d.m.GetReplicas(ctx, keys)
	return res, d.timedOut(parent, ctx, "GetReplicas", err)
}

func (d deadlineMaster) ReleaseLeases(parent context.Context, ids []uint64) error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOut(parent, ctx, "ReleaseLeases", d.m.ReleaseLeases(ctx, ids))
}

func (d deadlineMaster) HoldLeases(parent context.Context, req master.HoldReq) (master.HoldResult, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	res, err := d.m.HoldLeases(ctx, req)
	return res, d.timedOut(parent, ctx, "HoldLeases", err)
}

func (d deadlineMaster) ReportUnreachable(parent context.Context, reporter string, k segment.Key, reason string) error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOut(parent, ctx, "ReportUnreachable", d.m.ReportUnreachable(ctx, reporter, k, reason))
}

func (d deadlineMaster) Exists(parent context.Context, keys []string, lease bool) ([]bool, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	ex, err := d.m.Exists(ctx, keys, lease)
	return ex, d.timedOut(parent, ctx, "Exists", err)
}

func (d deadlineMaster) Remove(parent context.Context, keys []string, force bool) []error {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	return d.timedOutAll(parent, ctx, "Remove", d.m.Remove(ctx, keys, force))
}

func (d deadlineMaster) RemoveAll(parent context.Context, f master.Filter, force bool) (int, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	n, err := d.m.RemoveAll(ctx, f, force)
	return n, d.timedOut(parent, ctx, "RemoveAll", err)
}

func (d deadlineMaster) ListSegments(parent context.Context) ([]segment.Descriptor, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	segs, err := d.m.ListSegments(ctx)
	return segs, d.timedOut(parent, ctx, "ListSegments", err)
}

func (d deadlineMaster) Stats(parent context.Context) (master.Stats, error) {
	ctx, cancel := d.withDeadline(parent)
	defer cancel()
	st, err := d.m.Stats(ctx)
	return st, d.timedOut(parent, ctx, "Stats", err)
}

// Close closes the wrapped Client.
func (d deadlineMaster) Close() error { return d.m.Close() }

// Transports reports the wrapped Client's transport counters (zero when it
// keeps none).
func (d deadlineMaster) Transports() master.TransportStats {
	st, _ := master.Transports(d.m)
	return st
}
