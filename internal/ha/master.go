package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/kvfabric/kvfabric/internal/master"
)

// MasterConfig configures a Master.
type MasterConfig struct {
	// Etcd is the master's etcd client; the Master does not close it.
	Etcd *clientv3.Client
	// Prefix is the cluster's key prefix (--etcd-prefix); the election
	// runs under ElectionPrefix(Prefix).
	Prefix string
	// Advertise is the address published for clients while this master
	// leads (host:port they can dial).
	Advertise string
	// LeaseTTL is the election lease: a leader that stops renewing it is
	// replaced after about this long. Whole seconds, at least 1s; etcd
	// raises it to its own minimum (1.5 election timeouts, 2s with etcd's
	// defaults). Default 2s.
	LeaseTTL time.Duration
	// Service configures each term's Service (its Registerer is replaced:
	// every term has its own registry, see Gatherer).
	Service master.Config
	// Fence overrides how long a new term places no puts: 0 means
	// Fence(Service), which is what keeps the previous term's leases and
	// puts safe; negative means none — unsafe, for the test that shows why
	// the fence exists.
	Fence time.Duration
	// Auth authenticates callers (nil: none); ServerOptions are the gRPC
	// server's (TLS credentials).
	Auth          *master.Authenticator
	ServerOptions []grpc.ServerOption
	// FastListener, when set, serves the master's fast path
	// (master.Server.ServeFast) beside gRPC, with FastTLS (the TLS
	// configuration in ServerOptions; nil: plaintext). Serve closes it.
	FastListener net.Listener
	FastTLS      *tls.Config
	// FastSpin is how long a fast path connection polls its socket for the
	// next request before it sleeps (master.Server.SetFastSpin): 0 is
	// master.DefaultFastSpin, negative none.
	FastSpin time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Master is one master of an HA deployment: it serves gRPC for as long as
// it runs, answering as the leader while it leads a term and as a standby
// (master.ErrNotLeader, naming the leader) otherwise.
//
// Its methods are safe for concurrent use.
type Master struct {
	cfg    MasterConfig
	log    *slog.Logger
	router master.Router
	fence  time.Duration

	reg  atomic.Pointer[prometheus.Registry] // the current term's registry; nil between terms
	met  *prometheus.Registry                // the Master's own metrics
	lead prometheus.Gauge
	ep   prometheus.Gauge
	hist struct {
		sync.Mutex
		terms []TermRecord
	}
}

// TermRecord describes one term this master led (for tests and logs).
type TermRecord struct {
	Epoch        uint64
	Began, Ended time.Time // Ended is zero while it leads
	Why          string    // why it ended
	// Fence is how long after Began it placed no puts (0 for the first
	// term of a cluster).
	Fence time.Duration
}

// NewMaster returns a Master; Serve runs it.
func NewMaster(cfg MasterConfig) (*Master, error) {
	if cfg.Etcd == nil || cfg.Prefix == "" || cfg.Advertise == "" {
		return nil, fmt.Errorf("%w: ha master needs an etcd client, a prefix and an address to advertise", master.ErrInvalid)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.LeaseTTL < time.Second || cfg.LeaseTTL%time.Second != 0 {
		return nil, fmt.Errorf("%w: etcd lease TTL %v: want whole seconds, at least 1s", master.ErrInvalid, cfg.LeaseTTL)
	}
	sc := cfg.Service.Defaults()
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if cfg.FastSpin > 0 {
		if err := master.CheckFastSpin("ha master: fast spin", cfg.FastSpin); err != nil {
			return nil, err
		}
	}
	m := &Master{cfg: cfg, log: cfg.Logger, fence: Fence(sc), met: prometheus.NewRegistry()}
	switch {
	case cfg.Fence > 0:
		m.fence = cfg.Fence
	case cfg.Fence < 0:
		m.fence = 0
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.lead = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvfabric_master_leader", Help: "1 while this master leads a term, else 0."})
	m.ep = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvfabric_master_epoch", Help: "Epoch of the term this master leads (0: standby)."})
	m.met.MustRegister(m.lead, m.ep, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kvfabric_master_not_leader_total", Help: "Calls refused because this master did not lead (standby, or its term ended)."},
		func() float64 { return float64(m.router.Refused.Load()) }))
	return m, nil
}

// Fence is how long a new term places no puts: the longest a lease or a
// put granted by the previous leader can still be used after its lease
// ended — a read lease (LeaseTTL), or a put until its deadline or its
// writer's registration ends, whichever comes first (min(PutTimeout,
// MaxClientTTL)). It assumes every master of the cluster runs with the
// same lease TTL, put timeout and client TTL bound.
func Fence(c master.Config) time.Duration {
	c = c.Defaults()
	return max(c.LeaseTTL, min(c.PutTimeout, c.MaxClientTTL))
}

// Gatherer returns the metrics of this Master and of its current term's
// Service.
func (m *Master) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		g := prometheus.Gatherers{m.met}
		if r := m.reg.Load(); r != nil {
			g = append(g, r)
		}
		return g.Gather()
	})
}

// Terms returns the terms this master led, oldest first.
func (m *Master) Terms() []TermRecord {
	m.hist.Lock()
	defer m.hist.Unlock()
	return append([]TermRecord(nil), m.hist.terms...)
}

// Refused is how many calls this master refused as not leader.
func (m *Master) Refused() uint64 { return m.router.Refused.Load() }

// closeListeners closes lis and the fast path's listener (Serve's, when it
// cannot serve them).
func (m *Master) closeListeners(lis net.Listener) error {
	err := lis.Close()
	if m.cfg.FastListener != nil {
		err = errors.Join(err, m.cfg.FastListener.Close())
	}
	return err
}

// Serve serves gRPC on lis and campaigns until ctx is done; then it resigns
// (a standby takes over at once), stops serving (calls in flight get up to
// shutdownTimeout) and returns.
func (m *Master) Serve(ctx context.Context, lis net.Listener, shutdownTimeout time.Duration) error {
	srv := master.NewRoutedServer(&m.router, m.cfg.Auth, m.cfg.ServerOptions...)
	if m.cfg.FastSpin != 0 {
		if err := srv.SetFastSpin(max(m.cfg.FastSpin, 0)); err != nil { // checked by NewMaster
			return errors.Join(err, m.closeListeners(lis))
		}
	}
	// The spin counters are this Server's: exported while it serves.
	spins := srv.FastSpinCollector()
	if err := m.met.Register(spins); err != nil {
		return errors.Join(fmt.Errorf("ha master: fast spin metrics: %w", err), m.closeListeners(lis))
	}
	defer m.met.Unregister(spins)
	served := make(chan error, 2)
	nserved := 1
	if m.cfg.FastListener != nil {
		// Advertised from the first RegisterClient on.
		if err := srv.ListenFast(m.cfg.FastListener); err != nil {
			return errors.Join(err, lis.Close())
		}
	}
	go func() { served <- srv.Serve(lis, nil) }()
	if m.cfg.FastListener != nil {
		nserved++
		go func() { served <- srv.ServeFast(m.cfg.FastListener, m.cfg.FastTLS) }()
	}
	w := Watch(m.cfg.Etcd, ElectionPrefix(m.cfg.Prefix), func(l Leader) {
		m.router.SetLeader(l.Addr, l.Epoch)
		m.log.Info("kvfabric master: leader", "addr", l.Addr, "epoch", l.Epoch)
	})
	defer w.Close()

	var serr error
	backoff := 100 * time.Millisecond
loop:
	for ctx.Err() == nil {
		select {
		case serr = <-served:
			break loop
		default:
		}
		led := len(m.Terms())
		err := m.term(ctx)
		if ctx.Err() != nil {
			break
		}
		if len(m.Terms()) > led {
			backoff = 100 * time.Millisecond // it led: campaign again soon
		}
		m.log.Warn("kvfabric master: campaign or term ended; campaigning again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	errs := []error{serr, err}
	if serr != nil {
		nserved-- // the one that failed
	}
	for range nserved {
		errs = append(errs, <-served)
	}
	return errors.Join(errs...)
}

// validity is a lease's end in this process's (monotonic) clock: the send
// time of the last keepalive etcd acknowledged plus the TTL it granted.
// etcd counts from when it received it, which is later, so by this clock
// the lease never outlives etcd's.
type validity struct {
	until atomic.Int64 // monotonic ns since base
	lost  atomic.Bool
	base  time.Time
}

func (v *validity) extend(sent time.Time, ttlSec int64) {
	u := int64(sent.Sub(v.base) + time.Duration(ttlSec)*time.Second)
	for {
		old := v.until.Load()
		if u <= old || v.until.CompareAndSwap(old, u) {
			return
		}
	}
}

func (v *validity) valid() bool {
	return !v.lost.Load() && int64(time.Since(v.base)) < v.until.Load()
}

// left is how long the lease lasts by this clock.
func (v *validity) left() time.Duration {
	return time.Duration(v.until.Load() - int64(time.Since(v.base)))
}

// term campaigns on a fresh lease and, once elected, leads until the lease
// ends by this master's clock, etcd says it is gone, or ctx is done.
func (m *Master) term(ctx context.Context) (err error) {
	cli := m.cfg.Etcd
	ttl := int64(m.cfg.LeaseTTL / time.Second)
	v := &validity{base: time.Now()}
	sent := time.Now()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	g, err := cli.Grant(gctx, ttl)
	cancel()
	if err != nil {
		return fmt.Errorf("grant election lease: %w", err)
	}
	v.extend(sent, g.TTL)
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	// Our own keepalives, to know the lease's end in our clock (the
	// session's KeepAlive runs too; two renewals are harmless).
	kaDone := make(chan struct{})
	lostc := make(chan struct{})
	go func() {
		defer close(kaDone)
		m.keepAlive(tctx, g.ID, g.TTL, v, lostc)
	}()
	defer func() { <-kaDone }()
	defer stop()

	sess, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithContext(tctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer func() {
		// Revoke the lease unless it is gone already: a standby takes over
		// at once instead of after the TTL.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, rerr := cli.Revoke(rctx, g.ID); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			m.log.Info("kvfabric master: revoke election lease", "err", rerr)
		}
		sess.Orphan()
	}()
	el := concurrency.NewElection(sess, ElectionPrefix(m.cfg.Prefix))
	// The campaign ends when the lease does: a standby whose lease ended
	// must not win on it.
	cctx, ccancel := context.WithCancel(tctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lostc:
		case <-cctx.Done():
		}
		ccancel()
	}()
	err = el.Campaign(cctx, m.cfg.Advertise)
	ccancel()
	<-watched
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if !v.valid() {
		return errors.New("elected on a lease that ended meanwhile")
	}
	epoch := uint64(el.Rev())
	began := time.Now()
	// Record the term; the first term of a cluster has no predecessor
	// whose leases and puts could still run, so it needs no fence. The
	// write holds only while our election key does.
	termKey := m.cfg.Prefix + "/term"
	tctx2, cancel2 := context.WithTimeout(tctx, 5*time.Second)
	tr, err := cli.Txn(tctx2).If(clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())).
		Then(clientv3.OpGet(termKey), clientv3.OpPut(termKey, strconv.FormatUint(epoch, 10))).Commit()
	cancel2()
	switch {
	case err != nil:
		return fmt.Errorf("term %d: record it in etcd: %w", epoch, err)
	case !tr.Succeeded:
		return fmt.Errorf("term %d: the election key is gone", epoch)
	}
	fence := m.fence
	if len(tr.Responses[0].GetResponseRange().Kvs) == 0 {
		fence = 0
	}

	reg := prometheus.NewRegistry()
	sc := m.cfg.Service
	sc.Registerer = reg
	svc, err := master.New(sc)
	if err != nil {
		return fmt.Errorf("term %d: %w", epoch, err)
	}
	defer svc.Close()
	m.reg.Store(reg)
	defer m.reg.Store(nil)
	m.router.SetLeader(m.cfg.Advertise, epoch)
	m.router.Lead(svc, m.cfg.Auth, master.Term{Epoch: epoch, Valid: v.valid, FenceUntil: began.Add(fence)})
	m.lead.Set(1)
	m.ep.Set(float64(epoch))
	m.hist.Lock()
	m.hist.terms = append(m.hist.terms, TermRecord{Epoch: epoch, Began: began, Fence: fence})
	m.hist.Unlock()
	m.log.Warn("kvfabric master: leading", "epoch", epoch, "addr", m.cfg.Advertise, "puts placed from", fence)

	var why string
	select {
	case <-ctx.Done():
		why = "shutdown"
	case <-lostc:
		why = "election lease ended"
	case <-sess.Done():
		why = "election session ended"
	}
	m.router.StandBy()
	m.lead.Set(0)
	m.ep.Set(0)
	m.hist.Lock()
	m.hist.terms[len(m.hist.terms)-1].Ended = time.Now()
	m.hist.terms[len(m.hist.terms)-1].Why = why
	m.hist.Unlock()
	m.log.Warn("kvfabric master: stepped down", "epoch", epoch, "why", why)
	if why == "shutdown" {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(rctx)
		cancel()
		return nil
	}
	return errors.New(why)
}

// keepAlive renews the lease every third of its TTL and records its end
// in v; it closes lost when etcd no longer has the lease or the lease ended
// by this clock without a renewal.
func (m *Master) keepAlive(ctx context.Context, id clientv3.LeaseID, ttlSec int64, v *validity, lost chan struct{}) {
	every := time.Duration(ttlSec) * time.Second / 3
	declare := func(why string, err error) {
		v.lost.Store(true)
		m.log.Warn("kvfabric master: election lease lost", "why", why, "err", err)
		close(lost)
	}
	wait := every
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		left := v.left()
		if left <= 0 {
			declare("no renewal acknowledged within the TTL", nil)
			return
		}
		t.Reset(min(wait, left))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if v.left() <= 0 {
			declare("no renewal acknowledged within the TTL", nil)
			return
		}
		sent := time.Now()
		kctx, cancel := context.WithTimeout(ctx, max(v.left(), 10*time.Millisecond))
		resp, err := m.cfg.Etcd.KeepAliveOnce(kctx, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			declare("etcd revoked the lease", err)
			return
		case err != nil:
			wait = 100 * time.Millisecond // retried until the lease ends by our clock
			continue
		case resp.TTL <= 0:
			declare("etcd reports the lease expired", nil)
			return
		}
		wait = every
		v.extend(sent, resp.TTL)
	}
}
