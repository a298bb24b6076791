package master

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
)

// Leadership terms (HA, docs/design.md §9 and internal/ha). With several
// masters only the leader of the current term serves; the others stand by.
// Each term has an epoch (the revision at which its leader won the etcd
// election): every answer of a term's leader carries it, and clients refuse
// answers of an epoch older than one they have seen.

var (
	// ErrNotLeader: this master does not lead (a standby, one whose term
	// ended, or one not yet serving its new term). The call was not
	// executed; retry at the leader. The error is a *NotLeaderError naming
	// the leader when known. gRPC: Unavailable.
	ErrNotLeader = errors.New("master: not leader")
	// ErrStaleEpoch: a client refused an answer of an older term than one
	// it has seen; the master that sent it no longer leads. Returned by the
	// client, never sent.
	ErrStaleEpoch = errors.New("master: answer from an older term")
)

// NotLeaderError is ErrNotLeader with the leader this master knows of:
// Leader is its address ("" when unknown) and Epoch its term.
type NotLeaderError struct {
	Leader string
	Epoch  uint64
	// Why says why this master does not answer (standby, term ended, …).
	Why string
	msg string // the master's message, when decoded from the wire
}

func (e *NotLeaderError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	msg := ErrNotLeader.Error()
	if e.Why != "" {
		msg += " (" + e.Why + ")"
	}
	if e.Leader == "" {
		return msg + ": leader unknown"
	}
	return fmt.Sprintf("%s: leader is %s, epoch %d", msg, e.Leader, e.Epoch)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// EpochHeader is the gRPC response header that carries the answering
// term's epoch (decimal).
const EpochHeader = "kvfabric-epoch"

// Term is one leadership term of this master.
type Term struct {
	// Epoch identifies the term; later terms have larger epochs.
	Epoch uint64
	// Valid reports whether this master still leads the term: true while
	// its election lease is alive by its own clock. It is called before and
	// after every call, so it must be cheap.
	Valid func() bool
	// FenceUntil is when puts may be placed again: until then, leases and
	// puts granted by the previous term's leader may still touch the
	// segments, which this term cannot know (docs/design.md §9). PutStart
	// is refused with ErrNoSpace before it.
	FenceUntil time.Time
}

// Router lets one gRPC server answer for a Service that changes with
// leadership: while a term leads (Lead), calls go to its Service and every
// answer carries its epoch; otherwise (StandBy) every call is refused with
// a *NotLeaderError naming the leader (SetLeader). Its methods are safe for
// concurrent use.
type Router struct {
	cur    atomic.Pointer[routedTerm]
	leader atomic.Pointer[NotLeaderError] // last known leader, for standby answers
	// Refused counts calls refused because no term led or the term ended
	// during the call.
	Refused atomic.Uint64
	// fastPort is the port of the fast path serving r (0: none),
	// advertised by every term.
	fastPort atomic.Uint32
}

type routedTerm struct {
	g      *grpcService
	term   Term
	header metadata.MD
}

// Lead makes svc answer every call as the leader of term t. auth is the
// server's authenticator (the same one given to NewRoutedServer).
func (r *Router) Lead(svc *Service, auth *Authenticator, t Term) {
	r.cur.Store(&routedTerm{g: &grpcService{svc: svc, auth: auth, fastPort: &r.fastPort}, term: t,
		header: metadata.Pairs(EpochHeader, strconv.FormatUint(t.Epoch, 10))})
}

// StandBy ends the current term: calls are refused from now on, also
// those in flight (their answers are replaced by ErrNotLeader).
func (r *Router) StandBy() { r.cur.Store(nil) }

// SetLeader records the leader of the current term as this master knows it
// (from etcd), for the answers of a standby.
func (r *Router) SetLeader(addr string, epoch uint64) {
	r.leader.Store(&NotLeaderError{Leader: addr, Epoch: epoch})
}

// Epoch is the epoch of the term this master leads, 0 when it stands by.
func (r *Router) Epoch() uint64 {
	if t := r.cur.Load(); t != nil {
		return t.term.Epoch
	}
	return 0
}

func (r *Router) notLeader(why string) error {
	e := NotLeaderError{Why: why}
	if l := r.leader.Load(); l != nil {
		e.Leader, e.Epoch = l.Leader, l.Epoch
	}
	return &e
}

// admit returns the term that answers a call, or why none does.
func (r *Router) admit() (*routedTerm, error) {
	t := r.cur.Load()
	if t == nil {
		return nil, r.notLeader("standby")
	}
	if !t.term.Valid() {
		return nil, r.notLeader(fmt.Sprintf("the election lease of term %d ended", t.term.Epoch))
	}
	return t, nil
}

// NewRoutedServer returns a Server whose calls go to the Service of r's
// current term (see Router). Metrics are not served: with a Service per
// term, the caller serves them (internal/ha).
func NewRoutedServer(r *Router, auth *Authenticator, opts ...grpc.ServerOption) *Server {
	opts = append(append([]grpc.ServerOption{grpc.ForceServerCodecV2(codec)}, serverDefaults()...), opts...)
	s := &Server{g: &grpcService{router: r, auth: auth, fastPort: &r.fastPort}, grpc: grpc.NewServer(opts...)}
	s.grpc.RegisterService(serviceDesc(), s.g)
	return s
}

// routed runs h for the current term of g's router (when g has one): h gets
// the term's grpcService, the answer carries the term's epoch, and an
// answer of a term that ended during the call is replaced by ErrNotLeader
// (what the call changed belongs to a Service that is discarded). PutStart
// is refused until the term's fence (Term.FenceUntil).
func routed(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		g := srv.(*grpcService)
		if g.router == nil {
			return h(srv, ctx, dec, icpt)
		}
		t, err := g.router.enter(method)
		if err != nil {
			return nil, toStatus(err)
		}
		if err := grpc.SetHeader(ctx, t.header); err != nil {
			return nil, toStatus(fmt.Errorf("master: set epoch header: %w", err))
		}
		resp, err := h(t.g, ctx, dec, icpt)
		if err := g.router.leave(t); err != nil {
			return nil, toStatus(err)
		}
		return resp, err
	}
}

// enter admits a call of method to the current term, or returns why it is
// refused: no term leads, or its election lease ended (counted in
// Refused), or the call is a PutStart before the term's fence. Both
// servers (gRPC and the fast path) call it before every call, and leave
// after it.
func (r *Router) enter(method string) (*routedTerm, error) {
	t, err := r.admit()
	if err != nil {
		r.Refused.Add(1)
		return nil, err
	}
	if method == "PutStart" {
		if left := time.Until(t.term.FenceUntil); left > 0 {
			return nil, fmt.Errorf("%w: term %d began less than a fence ago; puts are placed again in %v (leases and puts of the previous term may still touch the segments until then)",
				ErrNoSpace, t.term.Epoch, left.Round(time.Millisecond))
		}
	}
	return t, nil
}

// leave returns the error that replaces the answer of a call enter
// admitted to term t when t ended during the call (what the call changed
// belongs to a Service that is discarded), nil when t still leads.
func (r *Router) leave(t *routedTerm) error {
	if r.cur.Load() != t {
		r.Refused.Add(1)
		return r.notLeader(fmt.Sprintf("term %d ended during the call", t.term.Epoch))
	}
	if !t.term.Valid() {
		r.Refused.Add(1)
		return r.notLeader(fmt.Sprintf("the election lease of term %d ended during the call", t.term.Epoch))
	}
	return nil
}

// Epochs is the newest epoch a client has seen, shared by its connections
// to every master. Safe for concurrent use.
type Epochs struct {
	max atomic.Uint64
	// OnNew, when set before use, is called (outside any lock) with every
	// epoch newer than all before it.
	OnNew func(epoch uint64)
}

// Max is the newest epoch seen (0: none).
func (e *Epochs) Max() uint64 { return e.max.Load() }

// Observe records epoch and refuses it when it is older than one seen:
// the answer comes from a master whose term has ended.
func (e *Epochs) Observe(epoch uint64) error {
	for {
		m := e.max.Load()
		switch {
		case epoch < m:
			return fmt.Errorf("%w: epoch %d, but epoch %d is known", ErrStaleEpoch, epoch, m)
		case epoch == m:
			return nil
		case e.max.CompareAndSwap(m, epoch):
			if e.OnNew != nil {
				e.OnNew(epoch)
			}
			return nil
		}
	}
}

// epochConn checks the epoch of every answer (the EpochHeader) against
// epochs: an answer of an older term is refused with ErrStaleEpoch, and one
// without an epoch too (every master of an HA deployment sends one).
type epochConn struct {
	cc     *grpc.ClientConn
	epochs *Epochs
}

func (c epochConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	var md metadata.MD
	if err := c.cc.Invoke(ctx, method, args, reply, append(opts, grpc.Header(&md))...); err != nil {
		return err
	}
	v := md.Get(EpochHeader)
	if len(v) != 1 {
		return fmt.Errorf("%w: the answer carries no epoch (a master without HA?)", ErrStaleEpoch)
	}
	epoch, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: the answer carries a malformed epoch %q", ErrStaleEpoch, v[0])
	}
	return c.epochs.Observe(epoch)
}

func (c epochConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, fmt.Errorf("master: %s: no streams", method)
}

// DialTerm returns a Client for the master at addr that refuses answers of
// a term older than epochs knows (ErrStaleEpoch) and records newer ones.
// Unlike Dial it does not wait for the connection: a leader found in etcd
// may still be starting its term, and callers retry. opts are as for Dial.
func DialTerm(addr string, epochs *Epochs, opts ...grpc.DialOption) (Client, error) {
	return DialTermFast(addr, epochs, FastPath{Off: true}, opts...)
}

// DialTermFast is DialTerm with the master's fast path configured by fp
// (see DialFast); its answers' epochs are checked the same way.
func DialTermFast(addr string, epochs *Epochs, fp FastPath, opts ...grpc.DialOption) (Client, error) {
	var fast *fastClient
	if !fp.Off {
		var err error
		if fast, err = newFastClient(addr, fp, epochs); err != nil {
			return nil, err
		}
	}
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, append(dialDefaults(), opts...)...)
	if err != nil {
		if fast != nil {
			_ = fast.close()
		}
		return nil, fmt.Errorf("master: dial %s: %w", addr, err)
	}
	conn.Connect()
	cc := epochConn{cc: conn, epochs: epochs}
	return &remote{cc: cc, rpc: pb.NewMasterClient(cc), conn: conn, fast: fast}, nil
}

// notLeaderMetadata and notLeaderFromMetadata carry a NotLeaderError's
// leader in the ErrorInfo of its status (codes.go).
func notLeaderMetadata(e *NotLeaderError) map[string]string {
	md := map[string]string{"why": e.Why}
	if e.Leader != "" {
		md["leader"], md["epoch"] = e.Leader, strconv.FormatUint(e.Epoch, 10)
	}
	return md
}

func notLeaderFromMetadata(msg string, md map[string]string) error {
	if _, ok := md["why"]; !ok {
		return &wireError{msg: msg, sentinel: ErrNotLeader} // no NotLeaderError was sent
	}
	e := &NotLeaderError{Leader: md["leader"], Why: md["why"], msg: msg}
	e.Epoch, _ = strconv.ParseUint(md["epoch"], 10, 64)
	if e.Epoch == 0 {
		e.Leader = ""
	}
	return e
}
