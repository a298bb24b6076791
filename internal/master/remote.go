package master

import (
	"context"
	"fmt"
	"math"
	"sync"
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
	rpc    pb.MasterClient
	conn   *grpc.ClientConn // owned when Dial made it; nil otherwise
	closed atomic.Bool

	// descs interns decoded descriptors by allocation identity so that
	// replicas of the same segment share one *segment.Descriptor, as with
	// the embedded Client. A descriptor never changes for its (id,
	// generation).
	descs sync.Map // segment.Key → *segment.Descriptor
}

var _ Client = (*remote)(nil)

// Dial connects to a master at addr ("host:port") and waits until the
// connection is ready or ctx is done. Without options it uses plaintext
// (the master listens on a trusted network); options replace that default.
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (Client, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
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
			return nil, fmt.Errorf("master: dial %s: %w (last state %v)", addr, ctx.Err(), s)
		}
	}
	return &remote{rpc: pb.NewMasterClient(conn), conn: conn}, nil
}

// NewRemote returns a Client over an existing connection (which the caller
// keeps owning: Close does not close it).
func NewRemote(cc grpc.ClientConnInterface) Client {
	return &remote{rpc: pb.NewMasterClient(cc)}
}

func (r *remote) Close() error {
	if r.closed.Swap(true) || r.conn == nil {
		return nil
	}
	return r.conn.Close()
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
	if !utf8.ValidString(info.ID + info.Node) {
		return Registration{}, validateClientInfo(&info)
	}
	resp, err := r.rpc.RegisterClient(ctx, &pb.RegisterClientRequest{Id: info.ID, Node: info.Node,
		TtlNs: int64(info.TTL), NumaNode: info.NUMANode, Device: info.Device})
	if err != nil {
		return Registration{}, r.fail(err)
	}
	return Registration{ID: resp.Id, TTL: time.Duration(resp.TtlNs)}, nil
}

func (r *remote) Heartbeat(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	if !utf8.ValidString(id) {
		return validateID("client id", id)
	}
	if _, err := r.rpc.Heartbeat(ctx, &pb.HeartbeatRequest{ClientId: id}); err != nil {
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

// segments decodes a response's descriptor table, interning descriptors.
func (r *remote) segments(list []*pb.SegmentDescriptor) []*segment.Descriptor {
	out := make([]*segment.Descriptor, len(list))
	for i, p := range list {
		k := segment.Key{ID: p.Id, Generation: p.Generation}
		if d, ok := r.descs.Load(k); ok {
			out[i] = d.(*segment.Descriptor)
			continue
		}
		d := descFromPB(p)
		v, _ := r.descs.LoadOrStore(k, &d)
		out[i] = v.(*segment.Descriptor)
	}
	return out
}

// replicas decodes rs into backing and returns the sub-slice.
func replicasFromPB(rs []*pb.Replica, segs []*segment.Descriptor, backing []Replica) ([]Replica, []Replica, error) {
	start := len(backing)
	for _, p := range rs {
		if int(p.Segment) >= len(segs) {
			return nil, backing, fmt.Errorf("master: malformed response: replica names segment %d of %d", p.Segment, len(segs))
		}
		backing = append(backing, Replica{Segment: segs[p.Segment], Offset: p.Offset, Length: p.Length})
	}
	return backing[start:len(backing):len(backing)], backing, nil
}

func (r *remote) PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	items := make([]pb.PutStartItem, len(reqs))
	in := &pb.PutStartRequest{Items: make([]*pb.PutStartItem, len(reqs))}
	for i := range reqs {
		q := &reqs[i]
		items[i] = pb.PutStartItem{Key: q.Key, Size: q.Size, Replicas: int32(max(math.MinInt32, min(q.Replicas, math.MaxInt32))), Pin: q.Pin, Placement: placementToPB(&q.Placement)}
		in.Items[i] = &items[i]
	}
	out := make([]PutStartResult, len(reqs))
	send, local := splitItems(len(reqs), func(i int) error { return putStartUTF8(&reqs[i]) })
	for i, err := range local {
		out[i].Err = err
	}
	if local != nil {
		in.Items = pick(in.Items, send)
	}
	resp, err := r.rpc.PutStart(ctx, in)
	if err != nil {
		return nil, r.fail(err)
	}
	if len(resp.Results) != len(in.Items) {
		return nil, fmt.Errorf("master: malformed response: %d results for %d items", len(resp.Results), len(in.Items))
	}
	segs := r.segments(resp.Segments)
	var backing []Replica
	for j, x := range resp.Results {
		i := at(send, j)
		out[i].Err = fromItemError(x.Error)
		out[i].Token = x.Token
		if len(x.Replicas) > 0 {
			if backing == nil {
				backing = make([]Replica, 0, len(reqs))
			}
			if out[i].Replicas, backing, err = replicasFromPB(x.Replicas, segs, backing); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func refsToPB(puts []PutRef) []*pb.PutRef {
	backing := make([]pb.PutRef, len(puts))
	out := make([]*pb.PutRef, len(puts))
	for i, p := range puts {
		backing[i] = pb.PutRef{Key: p.Key, Token: p.Token}
		out[i] = &backing[i]
	}
	return out
}

// itemErrs merges the errors of the items sent (send, nil for all) with
// local, the errors of the items the client answered itself.
func (r *remote) itemErrs(n int, send []int, local map[int]error, errs []*pb.ItemError, err error) []error {
	out := make([]error, n)
	if err != nil {
		return fillErr(out, r.fail(err))
	}
	if len(errs) != n-len(local) {
		return fillErr(out, fmt.Errorf("master: malformed response: %d results for %d items", len(errs), n-len(local)))
	}
	for j, e := range errs {
		out[at(send, j)] = fromItemError(e)
	}
	for i, e := range local {
		out[i] = e
	}
	return out
}

func (r *remote) PutEnd(ctx context.Context, puts []PutRef) []error {
	if err := r.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	send, local := splitItems(len(puts), func(i int) error { return keyUTF8(puts[i].Key) })
	resp, err := r.rpc.PutEnd(ctx, &pb.PutEndRequest{Puts: pick(refsToPB(puts), send)})
	return r.itemErrs(len(puts), send, local, resp.GetErrors(), err)
}

func (r *remote) PutRevoke(ctx context.Context, puts []PutRef) []error {
	if err := r.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	send, local := splitItems(len(puts), func(i int) error { return keyUTF8(puts[i].Key) })
	resp, err := r.rpc.PutRevoke(ctx, &pb.PutRevokeRequest{Puts: pick(refsToPB(puts), send)})
	return r.itemErrs(len(puts), send, local, resp.GetErrors(), err)
}

func (r *remote) GetReplicas(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	send, local := splitItems(len(keys), func(i int) error { return keyUTF8(keys[i]) })
	resp, err := r.rpc.GetReplicas(ctx, &pb.GetReplicasRequest{Keys: pick(keys, send)})
	if err != nil {
		return nil, r.fail(err)
	}
	if len(resp.Results) != len(keys)-len(local) {
		return nil, fmt.Errorf("master: malformed response: %d results for %d keys", len(resp.Results), len(keys)-len(local))
	}
	segs := r.segments(resp.Segments)
	out := make([]GetResult, len(keys))
	for i, err := range local {
		out[i].Err = err
	}
	var backing []Replica
	for j, x := range resp.Results {
		i := at(send, j)
		if out[i].Err = fromItemError(x.Error); out[i].Err != nil {
			continue
		}
		if backing == nil {
			backing = make([]Replica, 0, len(keys)-i)
		}
		out[i].Size = x.Size
		out[i].LeaseExpiry = unixNS(x.LeaseExpiryUnixNs)
		if out[i].Replicas, backing, err = replicasFromPB(x.Replicas, segs, backing); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *remote) Exists(ctx context.Context, keys []string) ([]bool, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := keyUTF8(k); err != nil {
			return nil, err
		}
	}
	resp, err := r.rpc.Exists(ctx, &pb.ExistsRequest{Keys: keys})
	if err != nil {
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
	return r.itemErrs(len(keys), send, local, resp.GetErrors(), err)
}

func (r *remote) RemoveAll(ctx context.Context, force bool) (int, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	resp, err := r.rpc.RemoveAll(ctx, &pb.RemoveAllRequest{Force: force})
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
