package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// Server serves a Service over gRPC and, optionally, Prometheus metrics
// over HTTP (/metrics) with the status document and dashboard beside them
// (HTTPHandler). It does not own the Service: close the Service
// after Shutdown.
type Server struct {
	svc  *Service
	g    *grpcService // what both the gRPC server and the fast path call
	grpc *grpc.Server
	http *http.Server // nil without a metrics registry
	fast fastServer   // ServeFast (fastpath.go)

	mu       sync.Mutex // guards shutdown
	shutdown bool
}

// NewServer returns a Server for svc. reg, when not nil, is served on the
// metrics listener (pass the registry given to the Service's Config).
//
// The hot calls are decoded and encoded by hand (wire.go); the wire format
// is the generated code's. With a unary interceptor among opts, every call
// goes through the generated handlers, so interceptors always see the
// generated request and response messages.
//
// The server accepts client keepalive pings down to every 5 s, also on idle
// connections (the clients Dial makes ping every 10 s), and pings idle
// clients itself (connect.go); opts come after these defaults and override
// them.
func NewServer(svc *Service, reg *prometheus.Registry, opts ...grpc.ServerOption) *Server {
	return NewServerAuth(svc, reg, nil, opts...)
}

// NewServerAuth is NewServer with callers authenticated by auth (nil: no
// authentication): every call's context carries the caller's Principal,
// and calls without one are refused when auth.Require is set. It is not an
// interceptor, so the hand-coded hot calls stay on their fast path.
func NewServerAuth(svc *Service, reg *prometheus.Registry, auth *Authenticator, opts ...grpc.ServerOption) *Server {
	opts = append(append([]grpc.ServerOption{grpc.ForceServerCodecV2(codec)}, serverDefaults()...), opts...)
	s := &Server{svc: svc, g: &grpcService{svc: svc, auth: auth, fastPort: new(atomic.Uint32)}, grpc: grpc.NewServer(opts...)}
	s.grpc.RegisterService(serviceDesc(), s.g)
	if reg != nil {
		s.http = &http.Server{Handler: HTTPHandler(func() *Service { return svc }, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), auth), ReadHeaderTimeout: 10 * time.Second}
	}
	return s
}

// Serve serves gRPC on lis and HTTP on metricsLis (may be nil; wrap it in
// tls.NewListener to serve HTTPS, as the master does with TLS on) until
// Shutdown. It returns nil after Shutdown, or the first serving error.
func (s *Server) Serve(lis, metricsLis net.Listener) error {
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- s.grpc.Serve(lis) }()
	if metricsLis != nil && s.http != nil {
		n++
		go func() {
			if err := s.http.Serve(metricsLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("master: metrics server: %w", err)
				return
			}
			errc <- nil
		}()
	}
	var errs []error
	for range n {
		if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, err)
			// One server failed: take the other down too.
			go func() { _ = s.Shutdown(context.Background()) }()
		}
	}
	return errors.Join(errs...)
}

// Shutdown stops the servers: gRPC gracefully (in-flight calls finish, new
// ones are refused), then forcibly when ctx is done; the fast path and the
// metrics server likewise. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return nil
	}
	s.shutdown = true
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		err = fmt.Errorf("master: shutdown: %w (in-flight calls were cut)", ctx.Err())
	}
	err = errors.Join(err, s.fast.shutdown(ctx))
	if s.http != nil {
		if herr := s.http.Shutdown(ctx); herr != nil {
			_ = s.http.Close()
			err = errors.Join(err, herr)
		}
	}
	return err
}

// grpcService adapts a Service to the generated server interface. All
// validation happens in the Service, so both transports reject the same
// requests with the same errors.
type grpcService struct {
	pb.UnimplementedMasterServer
	svc  *Service
	auth *Authenticator // nil: no authentication
	// router, when set (NewRoutedServer), picks the grpcService of the
	// current leadership term for every call (term.go); svc is then nil.
	router *Router
	// fastPort is the port of the server's fast path (0: none), advertised
	// in RegisterClient's answer (fastpath.go).
	fastPort *atomic.Uint32
}

func (g *grpcService) RegisterClient(ctx context.Context, r *pb.RegisterClientRequest) (*pb.RegisterClientResponse, error) {
	reg, err := g.svc.RegisterClient(ctx, ClientInfo{ID: r.Id, Node: r.Node, TTL: time.Duration(r.TtlNs), NUMANode: r.NumaNode, Device: r.Device,
		Incarnation: r.Incarnation, Driver: r.Driver, FabricDomain: r.FabricDomain})
	if err != nil {
		return nil, toStatus(err)
	}
	var fast uint32
	if g.fastPort != nil {
		fast = g.fastPort.Load()
	}
	return &pb.RegisterClientResponse{Id: reg.ID, TtlNs: int64(reg.TTL),
		LeaseTtlNs: int64(reg.LeaseTTL), PutTimeoutNs: int64(reg.PutTimeout), FastPort: fast}, nil
}

func (g *grpcService) Heartbeat(ctx context.Context, r *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	hb, err := g.svc.Heartbeat(ctx, r.ClientId, Mapped{Segments: int(r.MappedSegments), Bytes: r.MappedBytes})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HeartbeatResponse{SegmentsVersion: hb.SegmentsVersion}, nil
}

func (g *grpcService) UnregisterClient(ctx context.Context, r *pb.UnregisterClientRequest) (*pb.UnregisterClientResponse, error) {
	if err := g.svc.UnregisterClient(ctx, r.ClientId); err != nil {
		return nil, toStatus(err)
	}
	return &pb.UnregisterClientResponse{}, nil
}

func (g *grpcService) ReleaseLeases(ctx context.Context, r *pb.ReleaseLeasesRequest) (*pb.ReleaseLeasesResponse, error) {
	if err := g.svc.ReleaseLeases(ctx, r.LeaseIds); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReleaseLeasesResponse{}, nil
}

func (g *grpcService) HoldLeases(ctx context.Context, r *pb.HoldLeasesRequest) (*pb.HoldLeasesResponse, error) {
	res, err := g.svc.HoldLeases(ctx, HoldReq{Client: r.ClientId, Hold: r.Hold, Renew: r.Renew, Release: r.Release})
	if err != nil {
		return nil, toStatus(err)
	}
	errs, err := itemErrors(res.Errs)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HoldLeasesResponse{Errors: errs, LeaseTtlNs: int64(res.TTL)}, nil
}

func (g *grpcService) ReportUnreachable(ctx context.Context, r *pb.ReportUnreachableRequest) (*pb.ReportUnreachableResponse, error) {
	k := segment.Key{ID: r.SegmentId, Generation: r.Generation}
	if err := g.svc.ReportUnreachable(ctx, r.ClientId, k, r.Reason); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReportUnreachableResponse{}, nil
}

func (g *grpcService) MountSegment(ctx context.Context, r *pb.MountSegmentRequest) (*pb.MountSegmentResponse, error) {
	if err := g.svc.MountSegment(ctx, descFromPB(r.Segment)); err != nil {
		return nil, toStatus(err)
	}
	return &pb.MountSegmentResponse{}, nil
}

func (g *grpcService) UnmountSegment(ctx context.Context, r *pb.UnmountSegmentRequest) (*pb.UnmountSegmentResponse, error) {
	if err := g.svc.UnmountSegment(ctx, segment.Key{ID: r.Id, Generation: r.Generation}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.UnmountSegmentResponse{}, nil
}

// putStartReqsFromPB converts a generated PutStartRequest (the wire
// codec's reference decoding).
func putStartReqsFromPB(r *pb.PutStartRequest) []PutStartReq {
	reqs := make([]PutStartReq, len(r.Items))
	for i, it := range r.Items {
		reqs[i] = itemFromPB(it)
	}
	return reqs
}

func itemFromPB(it *pb.PutStartItem) PutStartReq {
	return PutStartReq{Key: it.Key, Size: it.Size, Replicas: int(it.Replicas), Pin: it.Pin, SoftPin: it.SoftPin,
		SoftPinTTL: time.Duration(it.SoftPinTtlNs), Upsert: it.Upsert, KeepSoftPin: it.KeepSoftPin, Placement: placementFromPB(it.Placement)}
}

// uniformFromPB converts a generated PutStartRequest's uniform puts
// (false: it has none).
func uniformFromPB(r *pb.PutStartRequest) (UniformPuts, bool) {
	x := r.GetUniform()
	if x == nil {
		return UniformPuts{}, false
	}
	u := UniformPuts{Keys: x.Keys, Sizes: x.Sizes, Req: PutStartReq{Placement: NoPlacement}}
	if x.Item != nil {
		u.Req = itemFromPB(x.Item)
	}
	return u, true
}

func (g *grpcService) PutStart(ctx context.Context, r *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	u, uni := uniformFromPB(r)
	res, err := g.startPuts(ctx, putStartReqsFromPB(r), u, uni)
	if err != nil {
		return nil, toStatus(err)
	}
	return putToPB(res), nil
}

// startPuts starts a PutStartRequest's puts: reqs, then (if uni) u's.
func (g *grpcService) startPuts(ctx context.Context, reqs []PutStartReq, u UniformPuts, uni bool) ([]PutStartResult, error) {
	switch {
	case !uni:
		return g.svc.PutStart(ctx, reqs)
	case len(reqs) == 0:
		return g.svc.PutStartUniform(ctx, u)
	}
	// Both: a client of its own making; kvfabric's send one or the other.
	all, err := u.AppendRequests(reqs[:len(reqs):len(reqs)])
	if err != nil {
		return nil, err
	}
	return g.svc.PutStart(ctx, all)
}

// putToPB converts PutStart results to the generated response (each
// segment descriptor sent once, in the response's table).
func putToPB(res []PutStartResult) *pb.PutStartResponse {
	var tab segTable
	backing := make([]pb.PutStartResult, len(res))
	out := &pb.PutStartResponse{Results: make([]*pb.PutStartResult, len(res))}
	for i, x := range res {
		backing[i] = pb.PutStartResult{Error: toItemError(x.Err), Token: x.Token, Replicas: tab.replicas(x.Replicas), Hint: x.Hint}
		out.Results[i] = &backing[i]
	}
	out.Segments = tab.list
	return out
}

func refsFromPB(ps []*pb.PutRef) []PutRef {
	refs := make([]PutRef, len(ps))
	for i, p := range ps {
		refs[i] = PutRef{Key: p.Key, Token: p.Token, Hint: p.Hint}
	}
	return refs
}

// itemErrors encodes positional errors. A whole-call failure (the same
// error in every slot from a check before the items) becomes a status.
func itemErrors(errs []error) ([]*pb.ItemError, error) {
	if len(errs) > 0 && errs[0] != nil && allSame(errs) && wholeCall(errs[0]) {
		return nil, toStatus(errs[0])
	}
	out := make([]*pb.ItemError, len(errs))
	for i, e := range errs {
		out[i] = toItemError(e)
	}
	return out, nil
}

func allSame(errs []error) bool {
	for _, e := range errs[1:] {
		if e != errs[0] {
			return false
		}
	}
	return true
}

// wholeCall reports whether err fails a call rather than an item.
func wholeCall(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errBatchTooLarge)
}

func (g *grpcService) PutEnd(ctx context.Context, r *pb.PutEndRequest) (*pb.PutEndResponse, error) {
	errs, err := itemErrors(g.svc.PutEnd(ctx, refsFromPB(r.Puts)))
	if err != nil {
		return nil, err
	}
	return &pb.PutEndResponse{Errors: errs}, nil
}

func (g *grpcService) PutRevoke(ctx context.Context, r *pb.PutRevokeRequest) (*pb.PutRevokeResponse, error) {
	errs, err := itemErrors(g.svc.PutRevoke(ctx, refsFromPB(r.Puts)))
	if err != nil {
		return nil, err
	}
	return &pb.PutRevokeResponse{Errors: errs}, nil
}

func (g *grpcService) GetReplicas(ctx context.Context, r *pb.GetReplicasRequest) (*pb.GetReplicasResponse, error) {
	ctx, c := carrying(WithReader(ctx, r.ClientId), r.ReleaseLeaseIds)
	res, err := g.svc.GetReplicas(ctx, r.Keys)
	if err != nil {
		return nil, toStatus(err)
	}
	out := getToPB(res)
	out.LeasesReleased = c.done()
	return out, nil
}

// carrying is ctx carrying the releases of a GetReplicas request
// (ReleaseCarry), or ctx and nil when it carries none.
func carrying(ctx context.Context, ids []uint64) (context.Context, *ReleaseCarry) {
	if len(ids) == 0 {
		return ctx, nil
	}
	c := &ReleaseCarry{IDs: ids}
	return WithReleases(ctx, c), c
}

// getToPB converts GetReplicas results to the generated response (each
// segment descriptor sent once, in the response's table).
func getToPB(res []GetResult) *pb.GetReplicasResponse {
	var tab segTable
	backing := make([]pb.GetResult, len(res))
	out := &pb.GetReplicasResponse{Results: make([]*pb.GetResult, len(res))}
	for i, x := range res {
		b := &backing[i]
		b.Error = toItemError(x.Err)
		if x.Err == nil {
			b.Size, b.Replicas, b.LeaseExpiryUnixNs = x.Size, tab.replicas(x.Replicas), x.LeaseExpiry.UnixNano()
			b.LeaseTtlNs = int64(max(0, x.LeaseTTL))
			b.LeaseId = x.LeaseID
		}
		out.Results[i] = b
	}
	out.Segments = tab.list
	return out
}

func (g *grpcService) Exists(ctx context.Context, r *pb.ExistsRequest) (*pb.ExistsResponse, error) {
	ex, err := g.svc.Exists(ctx, r.Keys, r.Lease)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ExistsResponse{Exists: ex}, nil
}

func (g *grpcService) Remove(ctx context.Context, r *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	errs, err := itemErrors(g.svc.Remove(ctx, r.Keys, r.Force))
	if err != nil {
		return nil, err
	}
	return &pb.RemoveResponse{Errors: errs}, nil
}

func (g *grpcService) RemoveAll(ctx context.Context, r *pb.RemoveAllRequest) (*pb.RemoveAllResponse, error) {
	n, err := g.svc.RemoveAll(ctx, Filter{Tenant: r.Tenant, Pattern: r.Pattern}, r.Force)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.RemoveAllResponse{Removed: uint64(n)}, nil
}

func (g *grpcService) ListSegments(ctx context.Context, _ *pb.ListSegmentsRequest) (*pb.ListSegmentsResponse, error) {
	segs, err := g.svc.ListSegments(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListSegmentsResponse{Segments: make([]*pb.SegmentDescriptor, len(segs))}
	for i := range segs {
		out.Segments[i] = descToPB(&segs[i])
	}
	return out, nil
}

func (g *grpcService) Stats(ctx context.Context, _ *pb.StatsRequest) (*pb.StatsResponse, error) {
	st, err := g.svc.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return statsToPB(&st), nil
}

// serviceDesc is pb.Master_ServiceDesc with hand-coded handlers for the hot
// calls: they decode straight into the Service's types (wire.go).
func serviceDesc() *grpc.ServiceDesc {
	d := pb.Master_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	fast := map[string]grpc.MethodHandler{
		"PutStart": fastHandler(pb.Master_ServiceDesc, "PutStart", func(g *grpcService, ctx context.Context, in *putStartRequest) (any, error) {
			return g.putStart(ctx, in)
		}),
		"PutEnd": fastHandler(pb.Master_ServiceDesc, "PutEnd", func(g *grpcService, ctx context.Context, in *putRefsRequest) (any, error) {
			return g.putFinish(ctx, opPutEnd, in.puts)
		}),
		"PutRevoke": fastHandler(pb.Master_ServiceDesc, "PutRevoke", func(g *grpcService, ctx context.Context, in *putRefsRequest) (any, error) {
			return g.putFinish(ctx, opPutRevoke, in.puts)
		}),
		"GetReplicas": fastHandler(pb.Master_ServiceDesc, "GetReplicas", func(g *grpcService, ctx context.Context, in *keysRequest) (any, error) {
			return g.getReplicas(WithReader(ctx, in.reader), in)
		}),
	}
	for i, m := range d.Methods {
		h := m.Handler
		if f, ok := fast[m.MethodName]; ok {
			h = f
		}
		d.Methods[i].Handler = authenticated(m.MethodName, routed(m.MethodName, invalidOnDecodeError(m.MethodName, h)))
	}
	return &d
}

// authenticated runs h with the caller's principal in its context (see
// NewServerAuth).
func authenticated(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		g := srv.(*grpcService)
		if g.auth != nil {
			p, err := g.auth.principal(ctx, method)
			if err != nil {
				return nil, toStatus(err)
			}
			if p.Name != "" {
				ctx = WithPrincipal(ctx, p)
			}
		}
		return h(srv, ctx, dec, icpt)
	}
}

// invalidOnDecodeError makes a request body that does not decode the
// caller's fault: grpc-go turns any codec error into codes.Internal ("grpc:
// failed to unmarshal the received message", grpc 1.85 rpc_util.go recv),
// which says the master broke. The handler's dec decodes through a
// decodeTarget instead: the codec records the decode error there and
// reports success to grpc, and the error is answered as ErrInvalid
// (InvalidArgument). Errors of the transport itself (size limits,
// decompression, a cancelled stream) keep grpc's own codes.
func invalidOnDecodeError(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(v any) error {
			t := &decodeTarget{v: v}
			if err := dec(t); err != nil {
				return err
			}
			if t.err != nil {
				return toStatus(decodeError(method, t.err))
			}
			return nil
		}, interceptor)
	}
}

// decodeError is the error answering a request body of method that does
// not decode (both servers).
func decodeError(method string, err error) error {
	return fmt.Errorf("%w: %s request body: %v", ErrInvalid, method, err)
}

// fastHandler returns a handler that decodes into a new In and calls f,
// or, when an interceptor is set, the generated handler of method.
func fastHandler[In any, PIn interface {
	*In
	wireMessage
}](desc grpc.ServiceDesc, method string, f func(*grpcService, context.Context, PIn) (any, error)) grpc.MethodHandler {
	var generated grpc.MethodHandler
	for _, m := range desc.Methods {
		if m.MethodName == method {
			generated = m.Handler
		}
	}
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		if interceptor != nil {
			return generated(srv, ctx, dec, interceptor)
		}
		in := PIn(new(In))
		if err := dec(in); err != nil {
			return nil, err
		}
		out, err := f(srv.(*grpcService), ctx, in)
		if p, ok := any(in).(interface{ free() }); ok {
			p.free() // the Service is done with it (wire.go)
		}
		return out, err
	}
}

func (g *grpcService) putStart(ctx context.Context, in *putStartRequest) (any, error) {
	res, err := g.startPuts(ctx, in.reqs, in.u, in.uni)
	if err != nil {
		return nil, toStatus(err)
	}
	return &putStartResponse{res: res, columns: in.columns}, nil
}

func (g *grpcService) putFinish(ctx context.Context, op opKind, puts []PutRef) (any, error) {
	errs := g.svc.putFinish(ctx, op, puts)
	if len(errs) > 0 && errs[0] != nil && allSame(errs) && wholeCall(errs[0]) {
		return nil, toStatus(errs[0])
	}
	return &itemErrorList{errs: errs}, nil
}

func (g *grpcService) getReplicas(ctx context.Context, in *keysRequest) (any, error) {
	ctx, c := carrying(ctx, in.release)
	res, err := g.svc.GetReplicas(ctx, in.keys)
	if err != nil {
		return nil, toStatus(err)
	}
	return &getResponse{res: res, released: c.done(), columns: in.columns}, nil
}
