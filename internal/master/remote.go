package master

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// remote is the gRPC Client.
type remote struct {
	cc     grpc.ClientConnInterface
	rpc    pb.MasterClient
	conn   *grpc.ClientConn // owned when Dial made it; nil otherwise
	closed atomic.Bool

	// descs interns the descriptors of responses (wire.go).
	descs descCache
	// fast is the master's fast path for the hot calls (fastclient.go);
	// nil when turned off or not dialable.
	fast *fastClient
	// viaGRPC counts the hot calls sent over gRPC.
	viaGRPC atomic.Uint64
	// oldMaster: the master answered a uniform PutStart with no results
	// (it predates them, and ignored them), so they go as items until the
	// next registration.
	oldMaster atomic.Bool
	// uniformPuts counts the PutStart calls sent as uniform puts.
	uniformPuts atomic.Uint64
	// columns counts the GetReplicas and PutStart answers read by column;
	// noColumns (tests and benchmarks) asks for results instead.
	columns   atomic.Uint64
	noColumns bool
}

// wireCall is the call option of the hand-coded calls (wire.go).
var wireCall = grpc.ForceCodecV2(codec)

var (
	_ Client            = (*remote)(nil)
	_ UniformPutStarter = (*remote)(nil)
)

// Dial connects to a master at addr ("host:port") and waits until the
// connection is ready or ctx is done. Without options it uses plaintext
// (the master listens on a trusted network); options replace that default.
//
// The connection reconnects at most about half a second apart however long
// the master was away, and pings it to find a dead master host (see
// connect.go); opts are applied after these defaults, so a caller's
// grpc.WithConnectParams or grpc.WithKeepaliveParams overrides them.
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (Client, error) {
	return DialFast(ctx, addr, FastPath{Off: true}, opts...)
}

// DialFast is Dial with the master's fast path configured by fp (it must
// carry the same TLS configuration and token as opts: ClientSecurity's
// DialOptions and FastPath): once RegisterClient learns the master's fast
// port, GetReplicas, ReleaseLeases, PutStart, PutEnd, PutRevoke and Exists
// go over it to the host of addr, and over gRPC while it cannot be reached.
func DialFast(ctx context.Context, addr string, fp FastPath, opts ...grpc.DialOption) (_ Client, err error) {
	var fast *fastClient
	if !fp.Off {
		if fast, err = newFastClient(addr, fp, nil); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil && fast != nil {
				_ = fast.close()
			}
		}()
	}
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, append(dialDefaults(), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("master: dial %s: %w", addr, err)
	}
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			break
		}
		if !conn.WaitForStateChange(ctx, s) {
			_ = conn.Close()
			hint := ""
			if s == connectivity.TransientFailure {
				// No master listening, or connections that fail in the
				// handshake: TLS on one side only, or a certificate the
				// other side refuses.
				hint = "; is the master up? If it is, check that both sides agree on TLS (tls_ca_file here, --tls-cert-file there), that the master's certificate names this address (tls_server_name) and that this client's certificate is signed by the master's --tls-client-ca-file"
			}
			return nil, fmt.Errorf("master: dial %s: %w (last state %v%s)", addr, ctx.Err(), s, hint)
		}
	}
	return &remote{cc: conn, rpc: pb.NewMasterClient(conn), conn: conn, fast: fast}, nil
}

// NewRemote returns a Client over an existing connection (which the caller
// keeps owning: Close does not close it).
func NewRemote(cc grpc.ClientConnInterface) Client {
	return &remote{cc: cc, rpc: pb.NewMasterClient(cc)}
}

// Close closes the fast path's connections (calls in flight on them end
// with ErrClosed), then the gRPC connection when Dial made it.
func (r *remote) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	var err error
	if r.fast != nil {
		err = r.fast.close()
	}
	if r.conn != nil {
		err = errors.Join(err, r.conn.Close())
	}
	return err
}

// Transports reports which transport carried the hot calls.
func (r *remote) Transports() TransportStats {
	st := TransportStats{GRPC: r.viaGRPC.Load(), UniformPuts: r.uniformPuts.Load(), Columns: r.columns.Load()}
	if r.fast != nil {
		r.fast.stats(&st)
	}
	return st
}

// invoke makes hot call m: over the fast path when it is advertised and
// reachable, else over gRPC.
func (r *remote) invoke(ctx context.Context, m fastMethod, req, resp any) error {
	if r.fast != nil {
		if used, err := r.fast.call(ctx, m, req, resp); used {
			return err
		}
	}
	r.viaGRPC.Add(1)
	return r.cc.Invoke(ctx, fastFullMethods[m], req, resp, wireCall)
}

// fastFullMethods are the gRPC names of the fast path's calls.
var fastFullMethods = [fastMethods]string{
	fastGetReplicas:   pb.Master_GetReplicas_FullMethodName,
	fastReleaseLeases: pb.Master_ReleaseLeases_FullMethodName,
	fastPutStart:      pb.Master_PutStart_FullMethodName,
	fastPutEnd:        pb.Master_PutEnd_FullMethodName,
	fastPutRevoke:     pb.Master_PutRevoke_FullMethodName,
	fastExists:        pb.Master_Exists_FullMethodName,
}

// fail returns the error a call ends with: ErrClosed once closed (a call cut
// by Close), else the decoded status.
func (r *remote) fail(err error) error {
	if r.closed.Load() {
		return ErrClosed
	}
	return fromStatus(err)
}

func (r *remote) check() error {
	if r.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (r *remote) RegisterClient(ctx context.Context, info ClientInfo) (Registration, error) {
	if err := r.check(); err != nil {
		return Registration{}, err
	}
	if !utf8.ValidString(info.ID + info.Node + info.Driver + info.FabricDomain) {
		return Registration{}, validateClientInfo(&info)
	}
	resp, err := r.rpc.RegisterClient(ctx, &pb.RegisterClientRequest{Id: info.ID, Node: info.Node,
		TtlNs: int64(info.TTL), NumaNode: info.NUMANode, Device: info.Device, Incarnation: info.Incarnation,
		Driver: info.Driver, FabricDomain: info.FabricDomain})
	if err != nil {
		return Registration{}, r.fail(err)
	}
	if r.fast != nil {
		// A host that does not resolve leaves the calls on gRPC.
		_ = r.fast.advertise(ctx, resp.FastPort)
	}
	// A registration follows a master's restart, perhaps as a newer
	// master: uniform puts are tried again.
	r.oldMaster.Store(false)
	return Registration{ID: resp.Id, TTL: time.Duration(resp.TtlNs),
		LeaseTTL: time.Duration(resp.LeaseTtlNs), PutTimeout: time.Duration(resp.PutTimeoutNs), FastPort: resp.FastPort}, nil
}

func (r *remote) Heartbeat(ctx context.Context, id string, mapped Mapped) (HeartbeatInfo, error) {
	if err := r.check(); err != nil {
		return HeartbeatInfo{}, err
	}
	if !utf8.ValidString(id) {
		return HeartbeatInfo{}, validateID("client id", id)
	}
	resp, err := r.rpc.Heartbeat(ctx, &pb.HeartbeatRequest{ClientId: id,
		MappedSegments: uint32(min(max(mapped.Segments, 0), math.MaxUint32)), MappedBytes: mapped.Bytes})
	if err != nil {
		return HeartbeatInfo{}, r.fail(err)
	}
	return HeartbeatInfo{SegmentsVersion: resp.SegmentsVersion}, nil
}

func (r *remote) UnregisterClient(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	if !utf8.ValidString(id) {
		return validateID("client id", id)
	}
	if _, err := r.rpc.UnregisterClient(ctx, &pb.UnregisterClientRequest{ClientId: id}); err != nil {
		return r.fail(err)
	}
	return nil
}

func (r *remote) ReleaseLeases(ctx context.Context, ids []uint64) error {
	if err := r.check(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if err := r.invoke(ctx, fastReleaseLeases, &pb.ReleaseLeasesRequest{LeaseIds: ids}, &pb.ReleaseLeasesResponse{}); err != nil {
		return r.fail(err)
	}
	return nil
}

func (r *remote) HoldLeases(ctx context.Context, req HoldReq) (HoldResult, error) {
	if err := r.check(); err != nil {
		return HoldResult{}, err
	}
	if !utf8.ValidString(req.Client) {
		return HoldResult{}, validateID("client id", req.Client)
	}
	resp, err := r.rpc.HoldLeases(ctx, &pb.HoldLeasesRequest{ClientId: req.Client, Hold: req.Hold, Renew: req.Renew, Release: req.Release})
	if err != nil {
		return HoldResult{}, r.fail(err)
	}
	n := len(req.Hold) + len(req.Renew)
	if len(resp.Errors) != n {
		return HoldResult{}, fmt.Errorf("master: malformed response: %d results for %d leases", len(resp.Errors), n)
	}
	res := HoldResult{TTL: time.Duration(resp.LeaseTtlNs), Errs: make([]error, n)}
	for i, e := range resp.Errors {
		res.Errs[i] = fromItemError(e)
	}
	return res, nil
}

func (r *remote) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error {
	if err := r.check(); err != nil {
		return err
	}
	if !utf8.ValidString(reporter + k.ID + reason) {
		return fmt.Errorf("%w: report unreachable: strings must be valid UTF-8", ErrInvalid)
	}
	if _, err := r.rpc.ReportUnreachable(ctx, &pb.ReportUnreachableRequest{ClientId: reporter,
		SegmentId: k.ID, Generation: k.Generation, Reason: reason}); err != nil {
		return r.fail(err)
	}
	return nil
}

func (r *remote) MountSegment(ctx context.Context, d segment.Descriptor) error {
	if err := r.check(); err != nil {
		return err
	}
	if !utf8.ValidString(d.ID + d.Node + d.Owner + d.Handle.SocketPath) {
		return validateDescriptor(&d)
	}
	if _, err := r.rpc.MountSegment(ctx, &pb.MountSegmentRequest{Segment: descToPB(&d)}); err != nil {
		return r.fail(err)
	}
	return nil
}

func (r *remote) UnmountSegment(ctx context.Context, k segment.Key) error {
	if err := r.check(); err != nil {
		return err
	}
	if !utf8.ValidString(k.ID) {
		return validateSegmentKey(k)
	}
	if _, err := r.rpc.UnmountSegment(ctx, &pb.UnmountSegmentRequest{Id: k.ID, Generation: k.Generation}); err != nil {
		return r.fail(err)
	}
	return nil
}

func (r *remote) PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	send, local := splitItems(len(reqs), func(i int) error { return putStartUTF8(&reqs[i]) })
	return r.putStart(ctx, len(reqs), send, local, &putStartRequest{reqs: pick(reqs, send), checked: true})
}

// PutStartUniform implements UniformPutStarter: u goes as one
// PutStartItem and two arrays (pb.UniformPutStart), or as one item per key
// to a master that predates them.
func (r *remote) PutStartUniform(ctx context.Context, u UniformPuts) ([]PutStartResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if len(u.Sizes) != len(u.Keys) {
		return nil, uniformLenErr(u)
	}
	tmpl := u.Req
	tmpl.Key, tmpl.Size = "", 0
	if !r.oldMaster.Load() && putStartUTF8(&tmpl) == nil {
		send, local := splitItems(len(u.Keys), func(i int) error { return keyUTF8(u.Keys[i]) })
		r.uniformPuts.Add(1)
		res, err := r.putStart(ctx, len(u.Keys), send, local, &putStartRequest{uni: true,
			u: UniformPuts{Keys: pick(u.Keys, send), Sizes: pick(u.Sizes, send), Req: tmpl}, checked: true})
		if err != errIgnoredUniform {
			return res, err
		}
		r.oldMaster.Store(true)
	}
	// A template that cannot be sent (each request then gets the
	// Service's error for it, as from PutStart), or an old master.
	reqs, _ := u.AppendRequests(nil) // as long as each other
	return r.PutStart(ctx, reqs)
}

// errIgnoredUniform: a uniform PutStart was answered with no results. A
// master that serves them answers every put or fails the call, so this
// one predates them: it skipped the field and started none of them.
var errIgnoredUniform = errors.New("master: uniform puts ignored")

// putStart sends msg, the n puts but those answered locally (send, local:
// splitItems), and merges its answers with local's.
func (r *remote) putStart(ctx context.Context, n int, send []int, local map[int]error, msg *putStartRequest) ([]PutStartResult, error) {
	sent := n - len(local)
	resp := resultsReply{descs: &r.descs, puts: make([]PutStartResult, 0, sent)}
	msg.columns = !r.noColumns
	if err := r.invoke(ctx, fastPutStart, msg, &resp); err != nil {
		return nil, r.fail(err)
	}
	if resp.malformed != nil {
		return nil, resp.malformed
	}
	if msg.uni && len(msg.reqs) == 0 && sent > 0 && len(resp.puts) == 0 {
		return nil, errIgnoredUniform
	}
	if len(resp.puts) != sent {
		return nil, fmt.Errorf("master: malformed response: %d results for %d items", len(resp.puts), sent)
	}
	if resp.columns {
		r.columns.Add(1)
	}
	if local == nil {
		return resp.puts, nil
	}
	out := make([]PutStartResult, n)
	for i, err := range local {
		out[i].Err = err
	}
	for j, x := range resp.puts {
		out[send[j]] = x
	}
	return out, nil
}

// itemErrs merges the errors of the items sent (send, nil for all) with
// local, the errors of the items the client answered itself.
func (r *remote) itemErrs(n int, send []int, local map[int]error, errs []error, err error) []error {
	out := make([]error, n)
	if err != nil {
		return fillErr(out, r.fail(err))
	}
	if len(errs) != n-len(local) {
		return fillErr(out, fmt.Errorf("master: malformed response: %d results for %d items", len(errs), n-len(local)))
	}
	for j, e := range errs {
		out[at(send, j)] = e
	}
	for i, e := range local {
		out[i] = e
	}
	return out
}

func (r *remote) PutEnd(ctx context.Context, puts []PutRef) []error {
	return r.putFinish(ctx, fastPutEnd, puts)
}

func (r *remote) PutRevoke(ctx context.Context, puts []PutRef) []error {
	return r.putFinish(ctx, fastPutRevoke, puts)
}

func (r *remote) putFinish(ctx context.Context, m fastMethod, puts []PutRef) []error {
	if err := r.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	send, local := splitItems(len(puts), func(i int) error { return keyUTF8(puts[i].Key) })
	var resp itemErrorList
	err := r.invoke(ctx, m, &putRefsRequest{puts: pick(puts, send), checked: true}, &resp)
	return r.itemErrs(len(puts), send, local, resp.errs, err)
}

func (r *remote) GetReplicas(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	send, local := splitItems(len(keys), func(i int) error { return keyUTF8(keys[i]) })
	n := len(keys) - len(local)
	resp := resultsReply{get: true, descs: &r.descs, gets: make([]GetResult, 0, n), sent: time.Now()}
	req := keysRequest{keys: pick(keys, send), reader: readerOf(ctx), columns: !r.noColumns, checked: true}
	c := ReleasesFrom(ctx)
	if c != nil {
		req.release = c.IDs
	}
	if err := r.invoke(ctx, fastGetReplicas, &req, &resp); err != nil {
		return nil, r.fail(err)
	}
	if c != nil {
		c.Released = resp.released
	}
	if resp.malformed != nil {
		return nil, resp.malformed
	}
	if len(resp.gets) != n {
		return nil, fmt.Errorf("master: malformed response: %d results for %d keys", len(resp.gets), n)
	}
	if resp.columns {
		r.columns.Add(1)
	}
	if local == nil {
		return resp.gets, nil
	}
	out := make([]GetResult, len(keys))
	for i, err := range local {
		out[i].Err = err
	}
	for j, x := range resp.gets {
		out[send[j]] = x
	}
	return out, nil
}

func (r *remote) Exists(ctx context.Context, keys []string, lease bool) ([]bool, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := keyUTF8(k); err != nil {
			return nil, err
		}
	}
	resp := &pb.ExistsResponse{}
	if err := r.invoke(ctx, fastExists, &pb.ExistsRequest{Keys: keys, Lease: lease}, resp); err != nil {
		return nil, r.fail(err)
	}
	if len(resp.Exists) != len(keys) {
		return nil, fmt.Errorf("master: malformed response: %d results for %d keys", len(resp.Exists), len(keys))
	}
	return resp.Exists, nil
}

func (r *remote) Remove(ctx context.Context, keys []string, force bool) []error {
	if err := r.check(); err != nil {
		return fillErr(make([]error, len(keys)), err)
	}
	send, local := splitItems(len(keys), func(i int) error { return keyUTF8(keys[i]) })
	resp, err := r.rpc.Remove(ctx, &pb.RemoveRequest{Keys: pick(keys, send), Force: force})
	var errs []error
	for _, e := range resp.GetErrors() {
		errs = append(errs, fromItemError(e))
	}
	return r.itemErrs(len(keys), send, local, errs, err)
}

func (r *remote) RemoveAll(ctx context.Context, f Filter, force bool) (int, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	if err := keyUTF8(f.Tenant); err != nil {
		return 0, err
	}
	if err := keyUTF8(f.Pattern); err != nil {
		return 0, err
	}
	resp, err := r.rpc.RemoveAll(ctx, &pb.RemoveAllRequest{Force: force, Tenant: f.Tenant, Pattern: f.Pattern})
	if err != nil {
		return 0, r.fail(err)
	}
	return int(resp.Removed), nil
}

func (r *remote) ListSegments(ctx context.Context) ([]segment.Descriptor, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	resp, err := r.rpc.ListSegments(ctx, &pb.ListSegmentsRequest{})
	if err != nil {
		return nil, r.fail(err)
	}
	out := make([]segment.Descriptor, len(resp.Segments))
	for i, p := range resp.Segments {
		out[i] = descFromPB(p)
	}
	return out, nil
}

func (r *remote) Stats(ctx context.Context) (Stats, error) {
	if err := r.check(); err != nil {
		return Stats{}, err
	}
	resp, err := r.rpc.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return Stats{}, r.fail(err)
	}
	return statsFromPB(resp), nil
}

// Proto3 strings must be valid UTF-8, so a request holding an invalid one
// cannot be sent. The remote Client answers such items itself with the
// validator the Service would have applied, so both Clients return the same
// error; the other items go to the server.

func keyUTF8(k string) error {
	if utf8.ValidString(k) {
		return nil
	}
	return validateKey(k, math.MaxInt)
}

func putStartUTF8(q *PutStartReq) error {
	ok := utf8.ValidString(q.Key) && utf8.ValidString(q.Placement.Client) && utf8.ValidString(q.Placement.Node)
	for _, id := range q.Placement.Segments {
		ok = ok && utf8.ValidString(id)
	}
	if ok {
		return nil
	}
	return validatePutStart(q, math.MaxInt)
}

// splitItems returns the indexes of the items to send (nil: all of them)
// and the local errors of the others (nil when none).
func splitItems(n int, localErr func(int) error) (send []int, local map[int]error) {
	for i := range n {
		if err := localErr(i); err != nil {
			if local == nil {
				local = map[int]error{}
				send = make([]int, 0, n)
				for j := range i {
					send = append(send, j)
				}
			}
			local[i] = err
		} else if local != nil {
			send = append(send, i)
		}
	}
	return send, local
}

// pick returns the items at send (all of them when send is nil).
func pick[T any](items []T, send []int) []T {
	if send == nil {
		return items
	}
	out := make([]T, len(send))
	for j, i := range send {
		out[j] = items[i]
	}
	return out
}

// at maps the j-th sent item back to its position.
func at(send []int, j int) int {
	if send == nil {
		return j
	}
	return send[j]
}
