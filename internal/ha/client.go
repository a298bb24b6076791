package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// DialOptions configure Dial.
type DialOptions struct {
	// Security is how to reach the masters, and etcd: its CA, certificate
	// and key are also the etcd client's (one PKI; see docs/security.md).
	// Its token goes to the masters only.
	Security master.ClientSecurity
	// OnNewTerm, when set, is called with every epoch newer than all the
	// client has seen, learned from etcd or from an answer. The Store uses
	// it to register again at once.
	OnNewTerm func(epoch uint64)
	// Logger receives leadership changes; nil discards.
	Logger *slog.Logger
	// NoFastPath keeps every call on gRPC: the leaders' fast paths
	// (master.DialTermFast) are not used.
	NoFastPath bool
	// FastSpin is master.FastPath.Spin for the leaders' fast paths (0: the
	// default; negative: none).
	FastSpin time.Duration
}

// Client is a master.Client that finds the leader in etcd and follows it
// (master_server_addr etcd://…). A call refused as not executed — by a
// master that does not lead (master.ErrNotLeader), or answered by one of
// an older term (master.ErrStaleEpoch) — is sent again to the leader, until
// the call's context ends. A call that failed in transport is sent again
// only when etcd names a newer leader than the one it went to (the old
// term is over, and what the call did there with it); otherwise its error
// is returned, as with one master. Safe for concurrent use.
type Client struct {
	cli    *clientv3.Client
	w      *Watcher
	epochs master.Epochs
	dial   []grpc.DialOption
	fast   master.FastPath
	log    *slog.Logger
	closed atomic.Bool

	mu struct {
		sync.Mutex
		conns map[string]master.Client // by master address: one connection each
		hint  Leader                   // a leader named by a master, newer than etcd's view
		// term is cancelled when the leader changes: calls still waiting
		// for the old one are abandoned and sent to the new one.
		term       context.Context
		endTerm    context.CancelFunc
		termLeader Leader // the leader term belongs to
	}
}

var (
	_ master.Client            = (*Client)(nil)
	_ master.UniformPutStarter = (*Client)(nil)
)

// Dial connects to the masters' etcd cluster at addr
// (etcd://host:port,…/prefix) and waits until a leader is published or ctx
// is done.
func Dial(ctx context.Context, addr string, o DialOptions) (_ *Client, err error) {
	eps, prefix, err := config.ParseEtcdAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: master_server_addr %s: %v", master.ErrInvalid, addr, err)
	}
	dial, err := o.Security.DialOptions()
	if err != nil {
		return nil, err
	}
	tc, err := EtcdTLS(o.Security.CAFile, o.Security.CertFile, o.Security.KeyFile)
	if err != nil {
		return nil, err
	}
	fast, err := o.Security.FastPath()
	if err != nil {
		return nil, err
	}
	fast.Off, fast.Spin = o.NoFastPath, o.FastSpin
	c := &Client{dial: dial, fast: fast, log: o.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.mu.conns = map[string]master.Client{}
	c.mu.term, c.mu.endTerm = context.WithCancel(context.Background())
	c.epochs.OnNew = func(epoch uint64) {
		c.log.Info("kvfabric master: new term", "epoch", epoch)
		if o.OnNewTerm != nil {
			o.OnNewTerm(epoch)
		}
	}
	if c.cli, err = NewEtcdClient(eps, tc); err != nil {
		return nil, err
	}
	// The callback runs on the Watcher's goroutine and takes c.mu: holding
	// it here makes the first call wait until c.w is set.
	c.mu.Lock()
	c.w = Watch(c.cli, ElectionPrefix(prefix), func(l Leader) {
		if l.Addr != "" {
			_ = c.epochs.Observe(l.Epoch) // an older one than an answer's: etcd lags
			c.log.Info("kvfabric master leader", "addr", l.Addr, "epoch", l.Epoch)
		}
		c.mu.Lock()
		c.checkTermLocked(l)
		c.mu.Unlock()
	})
	c.mu.Unlock()
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if _, err := c.w.WaitLeader(ctx); err != nil {
		return nil, fmt.Errorf("master: no leader published in etcd %v under %s: %w", eps, prefix, err)
	}
	return c, nil
}

// Leader is the leader the Client sends calls to now.
func (c *Client) Leader() Leader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaderLocked()
}

func (c *Client) leaderLocked() Leader {
	l, _ := c.w.Leader()
	if c.mu.hint.Epoch > l.Epoch {
		return c.mu.hint
	}
	return l
}

// checkTermLocked ends the calls' term context when the leader is no
// longer the one it belongs to.
func (c *Client) checkTermLocked(Leader) {
	if l := c.leaderLocked(); l != c.mu.termLeader && c.mu.endTerm != nil {
		c.mu.endTerm()
		c.mu.term, c.mu.endTerm = context.WithCancel(context.Background())
		c.mu.termLeader = l
	}
}

// Epoch is the newest epoch the Client has seen.
func (c *Client) Epoch() uint64 { return c.epochs.Max() }

// TermFenced reports that the master fences each term (client.Store: a
// provider that registers again at a new leader remounts at once).
func (c *Client) TermFenced() bool { return true }

// Close closes the connections, the watcher and the etcd client.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var errs []error
	c.mu.Lock()
	for _, m := range c.mu.conns {
		errs = append(errs, m.Close())
	}
	c.mu.conns = nil
	c.mu.endTerm()
	c.mu.Unlock()
	if c.w != nil {
		c.w.Close()
	}
	if c.cli != nil {
		errs = append(errs, c.cli.Close())
	}
	return errors.Join(errs...)
}

// Transports sums the transport counters of the connections to the
// masters.
func (c *Client) Transports() master.TransportStats {
	var st master.TransportStats
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.mu.conns {
		if t, ok := master.Transports(m); ok {
			st = st.Add(t)
		}
	}
	return st
}

// conn returns the connection to the current leader and the context of its
// term, waiting (bounded by ctx) until a leader is known.
func (c *Client) conn(ctx context.Context) (master.Client, Leader, context.Context, error) {
	for {
		if c.closed.Load() {
			return nil, Leader{}, nil, master.ErrClosed
		}
		c.mu.Lock()
		l := c.leaderLocked()
		if l.Addr != "" {
			defer c.mu.Unlock()
			if c.mu.conns == nil {
				return nil, l, nil, master.ErrClosed
			}
			c.checkTermLocked(l)
			m, ok := c.mu.conns[l.Addr]
			if !ok {
				var err error
				if m, err = master.DialTermFast(l.Addr, &c.epochs, c.fast, c.dial...); err != nil {
					return nil, l, nil, err
				}
				c.mu.conns[l.Addr] = m
			}
			return m, l, c.mu.term, nil
		}
		c.mu.Unlock()
		if _, err := c.w.WaitLeader(ctx); err != nil {
			return nil, l, nil, fmt.Errorf("master: no leader in etcd: %w", err)
		}
	}
}

// retryWait is how long a call refused by a master that does not lead yet
// waits before it is sent again (a new leader learns of its election
// before it serves; etcd names it first).
const retryWait = 20 * time.Millisecond

// after decides what follows a call to leader l that failed with err:
// retry (nil), or return err.
func (c *Client) after(ctx context.Context, l Leader, err error) error {
	var nl *master.NotLeaderError
	switch {
	case errors.As(err, &nl):
		if nl.Leader != "" && nl.Epoch > l.Epoch {
			c.mu.Lock()
			if nl.Epoch > c.mu.hint.Epoch {
				c.mu.hint = Leader{Addr: nl.Leader, Epoch: nl.Epoch}
				c.checkTermLocked(c.mu.hint)
			}
			c.mu.Unlock()
			return nil
		}
	case errors.Is(err, master.ErrStaleEpoch):
	case errors.Is(err, master.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		if !transport(err) {
			return err
		}
		// A transport failure: the call may have run. Retry only at a
		// newer leader, when etcd names one.
		if now := c.Leader(); now.Epoch > l.Epoch {
			return nil
		}
		return err
	}
	t := time.NewTimer(retryWait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// transport reports whether err is a gRPC failure of the connection, not
// an answer of a master (those arrive decoded: master's sentinels).
func transport(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// do sends f to the leader, and again to a new one as after decides. A
// call still waiting for a leader when etcd names another is abandoned
// and sent to the new one (a stopped leader answers nothing until its
// term is long over; when it resumes, it refuses the call).
func do[T any](c *Client, ctx context.Context, f func(context.Context, master.Client) (T, error)) (T, error) {
	for {
		m, l, term, err := c.conn(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		cctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(term, cancel)
		v, err := f(cctx, m)
		stop()
		cancel()
		if err == nil {
			return v, nil
		}
		if ctx.Err() == nil && term.Err() != nil {
			continue // the leader changed during the call
		}
		if aerr := c.after(ctx, l, err); aerr != nil {
			return v, aerr
		}
	}
}

// doErrs is do for the calls that answer one error per item: the same
// error in every slot is the call's.
func doErrs(c *Client, ctx context.Context, n int, f func(context.Context, master.Client) []error) []error {
	errs, err := do(c, ctx, func(ctx context.Context, m master.Client) ([]error, error) {
		errs := f(ctx, m)
		if len(errs) > 0 && errs[0] != nil {
			for _, e := range errs[1:] {
				if e != errs[0] {
					return errs, nil
				}
			}
			return errs, errs[0]
		}
		return errs, nil
	})
	if err != nil && (len(errs) != n || errs[0] != err) {
		errs = make([]error, n)
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

func (c *Client) RegisterClient(ctx context.Context, info master.ClientInfo) (master.Registration, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) (master.Registration, error) {
		return m.RegisterClient(ctx, info)
	})
}

func (c *Client) UnregisterClient(ctx context.Context, id string) error {
	_, err := do(c, ctx, func(ctx context.Context, m master.Client) (struct{}, error) {
		return struct{}{}, m.UnregisterClient(ctx, id)
	})
	return err
}

func (c *Client) Heartbeat(ctx context.Context, id string, mapped master.Mapped) (master.HeartbeatInfo, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) (master.HeartbeatInfo, error) {
		return m.Heartbeat(ctx, id, mapped)
	})
}

func (c *Client) MountSegment(ctx context.Context, d segment.Descriptor) error {
	_, err := do(c, ctx, func(ctx context.Context, m master.Client) (struct{}, error) {
		return struct{}{}, m.MountSegment(ctx, d)
	})
	return err
}

func (c *Client) UnmountSegment(ctx context.Context, k segment.Key) error {
	_, err := do(c, ctx, func(ctx context.Context, m master.Client) (struct{}, error) {
		return struct{}{}, m.UnmountSegment(ctx, k)
	})
	return err
}

func (c *Client) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) ([]master.PutStartResult, error) {
		return m.PutStart(ctx, reqs)
	})
}

// PutStartUniform implements master.UniformPutStarter.
func (c *Client) PutStartUniform(ctx context.Context, u master.UniformPuts) ([]master.PutStartResult, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) ([]master.PutStartResult, error) {
		return master.PutStartUniform(ctx, m, u)
	})
}

func (c *Client) PutEnd(ctx context.Context, puts []master.PutRef) []error {
	return doErrs(c, ctx, len(puts), func(ctx context.Context, m master.Client) []error { return m.PutEnd(ctx, puts) })
}

func (c *Client) PutRevoke(ctx context.Context, puts []master.PutRef) []error {
	return doErrs(c, ctx, len(puts), func(ctx context.Context, m master.Client) []error { return m.PutRevoke(ctx, puts) })
}

func (c *Client) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) ([]master.GetResult, error) {
		return m.GetReplicas(ctx, keys)
	})
}

func (c *Client) ReleaseLeases(ctx context.Context, ids []uint64) error {
	_, err := do(c, ctx, func(ctx context.Context, m master.Client) (struct{}, error) {
		return struct{}{}, m.ReleaseLeases(ctx, ids)
	})
	return err
}

func (c *Client) HoldLeases(ctx context.Context, req master.HoldReq) (master.HoldResult, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) (master.HoldResult, error) {
		return m.HoldLeases(ctx, req)
	})
}

func (c *Client) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error {
	_, err := do(c, ctx, func(ctx context.Context, m master.Client) (struct{}, error) {
		return struct{}{}, m.ReportUnreachable(ctx, reporter, k, reason)
	})
	return err
}

func (c *Client) Exists(ctx context.Context, keys []string, lease bool) ([]bool, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) ([]bool, error) { return m.Exists(ctx, keys, lease) })
}

func (c *Client) Remove(ctx context.Context, keys []string, force bool) []error {
	return doErrs(c, ctx, len(keys), func(ctx context.Context, m master.Client) []error { return m.Remove(ctx, keys, force) })
}

func (c *Client) RemoveAll(ctx context.Context, f master.Filter, force bool) (int, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) (int, error) { return m.RemoveAll(ctx, f, force) })
}

func (c *Client) ListSegments(ctx context.Context) ([]segment.Descriptor, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) ([]segment.Descriptor, error) { return m.ListSegments(ctx) })
}

func (c *Client) Stats(ctx context.Context) (master.Stats, error) {
	return do(c, ctx, func(ctx context.Context, m master.Client) (master.Stats, error) { return m.Stats(ctx) })
}
