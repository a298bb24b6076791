package master

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// Sharded is an in-process master split by key over n Services, its
// shards, so that the puts of several cores do not wait for one lock
// (docs/decisions.md #26).
//
// Ownership:
//   - A key belongs to one shard (ShardOf, a hash of the stored key): the
//     shard keeps its object, its pending put, its leases and its place in
//     eviction. Every per-key call goes to the key's shard; a batch that
//     spans shards is split and its answers put back in order.
//   - Every shard mounts every segment, but allocates only in its own
//     slice of it (shardPart.window): shard i of n owns the i-th n-th,
//     aligned, so every shard can place near every writer, and a replica's
//     offset is where it is in the whole segment.
//   - A lease id names its shard (lease blocks are numbered ≡ the shard's
//     index mod n), so releases and holds go straight to it.
//   - Registrations, heartbeats, mounts and unmounts go to every shard, in
//     shard order. A segment is unmounted when every shard has let it go: a
//     shard that still has leases or puts on its slice refuses
//     (ErrHasLease) and drains, and the owner retries as with one master.
//
// What a shard does not see: each shard evicts in its own slices, by its
// own recency, and per-client quotas of puts and reserved bytes are split
// evenly over the shards. An object must fit one shard's slice of a
// segment. Sharded serves one process (an embedded master); it is not
// served over the wire and does not run under HA.
type Sharded struct {
	svcs   []*Service
	seed   maphash.Seed
	closed atomic.Bool
}

var (
	_ Client   = (*Sharded)(nil)
	_ Preparer = (*Sharded)(nil)
)

// MaxShards bounds NewSharded's shard count.
const MaxShards = 64

// shardPart is a Service's place in a Sharded master: shard idx of n.
type shardPart struct{ idx, n uint64 }

// window returns the slice of segment d that the shard allocates in:
// shard i of n owns [i·s, (i+1)·s) for s = Size/n rounded down to the
// alignment, and the last one the rest. A whole master owns all of it.
func (p shardPart) window(d *segment.Descriptor, align uint64) (base, size uint64, err error) {
	if p.n <= 1 {
		return 0, d.Size, nil
	}
	slice := d.Size / p.n / align * align
	if slice == 0 {
		return 0, 0, fmt.Errorf("%w: segment %q: size %d: too small for %d master shards (each needs a slice of at least the alignment %d)",
			ErrInvalid, d.ID, d.Size, p.n, align)
	}
	base = p.idx * slice
	if p.idx == p.n-1 {
		return base, d.Size - base, nil
	}
	return base, slice, nil
}

// NewSharded returns a master of n shards (1..MaxShards), each a Service
// of cfg, except that its metrics carry a "shard" label, its log a shard
// attribute, and its quotas of pending puts and reserved bytes are
// cfg's divided by n (rounded up). Close closes the shards.
func NewSharded(cfg Config, n int) (*Sharded, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("%w: master shards=%d (want 1..%d)", ErrInvalid, n, MaxShards)
	}
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := cfg.Quotas.withDefaults()
	q.PendingPuts = (q.PendingPuts + n - 1) / n
	q.ReservedBytes = (q.ReservedBytes + int64(n) - 1) / int64(n)
	m := &Sharded{seed: maphash.MakeSeed()}
	for i := range n {
		c := cfg
		c.Quotas = q
		if cfg.Registerer != nil {
			c.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"shard": strconv.Itoa(i)}, cfg.Registerer)
		}
		if cfg.Logger != nil {
			c.Logger = cfg.Logger.With(slog.Int("shard", i))
		}
		svc, err := newPart(c, shardPart{idx: uint64(i), n: uint64(n)})
		if err != nil {
			for _, s := range m.svcs {
				_ = s.Close()
			}
			return nil, fmt.Errorf("master shard %d: %w", i, err)
		}
		m.svcs = append(m.svcs, svc)
	}
	return m, nil
}

// Shards is the number of shards.
func (m *Sharded) Shards() int { return len(m.svcs) }

// ShardOf is the shard that keeps key (a stored key, as PutStartReq.Key).
func (m *Sharded) ShardOf(key string) int {
	if len(m.svcs) == 1 {
		return 0
	}
	return int(maphash.String(m.seed, key) % uint64(len(m.svcs)))
}

// Shard returns shard i's Service (tests and status pages).
func (m *Sharded) Shard(i int) *Service { return m.svcs[i] }

// leaseShard is the shard that granted lease id (readPath.openBlock).
func (m *Sharded) leaseShard(id uint64) int {
	return int((id >> (leaseBlockBits + leaseShardBits)) % uint64(len(m.svcs)))
}

func (m *Sharded) check() error {
	if m.closed.Load() {
		return ErrClosed
	}
	return nil
}

// group sorts n items by shard: single is their shard when all n are in
// one (or n is 0), and -1 when they are not; then idx[s] lists the
// positions in shard s, in order.
func (m *Sharded) group(n int, shard func(i int) int) (single int, idx [][]int) {
	if len(m.svcs) == 1 || n == 0 {
		return 0, nil
	}
	first := shard(0)
	for i := 1; i < n; i++ {
		s := shard(i)
		if s == first {
			if idx != nil {
				idx[s] = append(idx[s], i)
			}
			continue
		}
		if idx == nil {
			idx = make([][]int, len(m.svcs))
			for j := range i {
				idx[first] = append(idx[first], j)
			}
		}
		idx[s] = append(idx[s], i)
	}
	if idx == nil {
		return first, nil
	}
	return -1, idx
}

// RegisterClient implements Client: shard 0 assigns an empty id, and every
// shard registers it. A shard that refuses undoes the registrations before
// it.
func (m *Sharded) RegisterClient(ctx context.Context, info ClientInfo) (Registration, error) {
	if err := m.check(); err != nil {
		return Registration{}, err
	}
	var first Registration
	for i, s := range m.svcs {
		reg, err := s.RegisterClient(ctx, info)
		if err != nil {
			for _, t := range m.svcs[:i] {
				_ = t.UnregisterClient(context.WithoutCancel(ctx), info.ID)
			}
			return Registration{}, err
		}
		if i == 0 {
			first, info.ID = reg, reg.ID
		}
	}
	return first, nil
}

// UnregisterClient implements Client: every shard ends the registration.
// ErrUnknownClient only if no shard knew it.
func (m *Sharded) UnregisterClient(ctx context.Context, id string) error {
	if err := m.check(); err != nil {
		return err
	}
	unknown := 0
	var errs []error
	for _, s := range m.svcs {
		switch err := s.UnregisterClient(ctx, id); {
		case errors.Is(err, ErrUnknownClient):
			unknown++
			if unknown == len(m.svcs) {
				return err
			}
		case err != nil:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Heartbeat implements Client. The segments' version is the sum of the
// shards': it changes when any shard's does.
func (m *Sharded) Heartbeat(ctx context.Context, id string, mapped Mapped) (HeartbeatInfo, error) {
	if err := m.check(); err != nil {
		return HeartbeatInfo{}, err
	}
	var out HeartbeatInfo
	for _, s := range m.svcs {
		hb, err := s.Heartbeat(ctx, id, mapped)
		if err != nil {
			return HeartbeatInfo{}, err
		}
		out.SegmentsVersion += hb.SegmentsVersion
	}
	return out, nil
}

// MountSegment implements Client: every shard mounts d (its slice of it).
// A shard that refuses undoes the mounts before it.
func (m *Sharded) MountSegment(ctx context.Context, d segment.Descriptor) error {
	if err := m.check(); err != nil {
		return err
	}
	for i, s := range m.svcs {
		if err := s.MountSegment(ctx, d); err != nil {
			for _, t := range m.svcs[:i] {
				_ = t.UnmountSegment(context.WithoutCancel(ctx), d.Key())
			}
			return err
		}
	}
	return nil
}

// UnmountSegment implements Client: every shard unmounts k. A shard that
// still has leases or puts on its slice refuses, and the call returns its
// ErrHasLease: the shards that let go are done, and a retry (or the
// drain's end) finishes the rest. ErrUnknownSegment only if no shard had k.
func (m *Sharded) UnmountSegment(ctx context.Context, k segment.Key) error {
	if err := m.check(); err != nil {
		return err
	}
	unknown := 0
	var lease, other error
	for _, s := range m.svcs {
		switch err := s.UnmountSegment(ctx, k); {
		case err == nil:
		case errors.Is(err, ErrUnknownSegment):
			unknown++
			if unknown == len(m.svcs) {
				return err
			}
		case errors.Is(err, ErrHasLease):
			lease = cmpOr(lease, err)
		default:
			other = cmpOr(other, err)
		}
	}
	return cmpOr(other, lease)
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// PutStart implements Client. A batch that spans shards is split; a
// shard's whole-batch error becomes its keys' errors, unless every shard
// failed.
func (m *Sharded) PutStart(ctx context.Context, reqs []PutStartReq) ([]PutStartResult, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	single, idx := m.group(len(reqs), func(i int) int { return m.ShardOf(reqs[i].Key) })
	if idx == nil {
		return m.svcs[single].PutStart(ctx, reqs)
	}
	out := make([]PutStartResult, len(reqs))
	err := m.each(idx, func(s *Service, pos []int) error {
		res, err := s.PutStart(ctx, pick(reqs, pos))
		if err != nil {
			return err
		}
		for j, i := range pos {
			out[i] = res[j]
		}
		return nil
	}, func(i int, err error) { out[i].Err = err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// each calls fn for every shard with positions in idx. A shard's error is
// given to fail for each of its positions, and returned only when every
// shard called failed.
func (m *Sharded) each(idx [][]int, fn func(s *Service, pos []int) error, fail func(i int, err error)) error {
	var first error
	ok := false
	for sh, pos := range idx {
		if len(pos) == 0 {
			continue
		}
		if err := fn(m.svcs[sh], pos); err != nil {
			first = cmpOr(first, err)
			for _, i := range pos {
				fail(i, err)
			}
			continue
		}
		ok = true
	}
	if !ok {
		return first
	}
	return nil
}

// PreparePutStart implements Preparer: a batch of one shard is prepared by
// it; one that spans shards is kept as it is and split at
// PutStartPrepared.
func (m *Sharded) PreparePutStart(reqs []PutStartReq) (*PreparedPuts, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	single, idx := m.group(len(reqs), func(i int) int { return m.ShardOf(reqs[i].Key) })
	if idx == nil {
		return m.svcs[single].PreparePutStart(reqs)
	}
	return &PreparedPuts{split: m, reqs: reqs}, nil
}

// PrepareUniformPutStart implements Preparer, as PreparePutStart.
func (m *Sharded) PrepareUniformPutStart(u UniformPuts) (*PreparedPuts, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	single, idx := m.group(len(u.Keys), func(i int) int { return m.ShardOf(u.Keys[i]) })
	if idx == nil {
		return m.svcs[single].PrepareUniformPutStart(u)
	}
	if len(u.Sizes) != len(u.Keys) {
		return nil, fmt.Errorf("%w: uniform puts: %d keys but %d sizes", ErrInvalid, len(u.Keys), len(u.Sizes))
	}
	reqs := make([]PutStartReq, len(u.Keys))
	for i := range reqs {
		reqs[i] = u.Req
		reqs[i].Key, reqs[i].Size = u.Keys[i], u.Sizes[i]
	}
	return &PreparedPuts{split: m, reqs: reqs}, nil
}

// PutStartPrepared implements Preparer.
func (m *Sharded) PutStartPrepared(ctx context.Context, p *PreparedPuts) ([]PutStartResult, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	switch {
	case p == nil:
	case p.split == m:
		if p.taken {
			return nil, fmt.Errorf("%w: prepared puts: already started", ErrInvalid)
		}
		p.taken = true
		return m.PutStart(ctx, p.reqs)
	case p.svc != nil:
		if i := slices.Index(m.svcs, p.svc); i >= 0 {
			return p.svc.PutStartPrepared(ctx, p)
		}
	}
	return nil, fmt.Errorf("%w: prepared puts: not prepared by this master", ErrInvalid)
}

// PutEnd implements Client.
func (m *Sharded) PutEnd(ctx context.Context, puts []PutRef) []error {
	return m.refs(ctx, puts, (*Service).PutEnd)
}

// PutRevoke implements Client.
func (m *Sharded) PutRevoke(ctx context.Context, puts []PutRef) []error {
	return m.refs(ctx, puts, (*Service).PutRevoke)
}

func (m *Sharded) refs(ctx context.Context, puts []PutRef, fn func(*Service, context.Context, []PutRef) []error) []error {
	if err := m.check(); err != nil {
		return fillErr(make([]error, len(puts)), err)
	}
	single, idx := m.group(len(puts), func(i int) int { return m.ShardOf(puts[i].Key) })
	if idx == nil {
		return fn(m.svcs[single], ctx, puts)
	}
	out := make([]error, len(puts))
	for sh, pos := range idx {
		if len(pos) > 0 {
			for j, e := range fn(m.svcs[sh], ctx, pick(puts, pos)) {
				out[pos[j]] = e
			}
		}
	}
	return out
}

// GetReplicas implements Client.
func (m *Sharded) GetReplicas(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	single, idx := m.group(len(keys), func(i int) int { return m.ShardOf(keys[i]) })
	if idx == nil {
		return m.svcs[single].GetReplicas(ctx, keys)
	}
	out := make([]GetResult, len(keys))
	err := m.each(idx, func(s *Service, pos []int) error {
		res, err := s.GetReplicas(ctx, pick(keys, pos))
		if err != nil {
			return err
		}
		for j, i := range pos {
			out[i] = res[j]
		}
		return nil
	}, func(i int, err error) { out[i].Err = err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLeases implements Client: each id goes to the shard that granted
// it.
func (m *Sharded) ReleaseLeases(ctx context.Context, ids []uint64) error {
	if err := m.check(); err != nil {
		return err
	}
	single, idx := m.group(len(ids), func(i int) int { return m.leaseShard(ids[i]) })
	if idx == nil {
		return m.svcs[single].ReleaseLeases(ctx, ids)
	}
	var errs []error
	for sh, pos := range idx {
		if len(pos) > 0 {
			if err := m.svcs[sh].ReleaseLeases(ctx, pick(ids, pos)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// HoldLeases implements Client: each id goes to the shard that granted it.
// A shard's error is its ids' (Errs) and the call's.
func (m *Sharded) HoldLeases(ctx context.Context, req HoldReq) (HoldResult, error) {
	if err := m.check(); err != nil {
		return HoldResult{}, err
	}
	if len(m.svcs) == 1 {
		return m.svcs[0].HoldLeases(ctx, req)
	}
	type part struct {
		req      HoldReq
		pos      []int // positions in Errs of its Hold then Renew ids
		involved bool
	}
	parts := make([]part, len(m.svcs))
	n := 0 // position in Errs
	for _, id := range req.Hold {
		p := &parts[m.leaseShard(id)]
		p.involved, p.req.Hold, p.pos = true, append(p.req.Hold, id), append(p.pos, n)
		n++
	}
	for _, id := range req.Renew {
		p := &parts[m.leaseShard(id)]
		p.involved, p.req.Renew, p.pos = true, append(p.req.Renew, id), append(p.pos, n)
		n++
	}
	for _, id := range req.Release {
		p := &parts[m.leaseShard(id)]
		p.involved, p.req.Release = true, append(p.req.Release, id)
	}
	out := HoldResult{Errs: make([]error, len(req.Hold)+len(req.Renew))}
	var errs []error
	for sh := range parts {
		p := &parts[sh]
		if !p.involved {
			continue
		}
		p.req.Client = req.Client
		res, err := m.svcs[sh].HoldLeases(ctx, p.req)
		if err != nil {
			errs = append(errs, err)
			for _, i := range p.pos {
				out.Errs[i] = err
			}
			continue
		}
		if out.TTL == 0 || res.TTL < out.TTL {
			out.TTL = res.TTL
		}
		for j, i := range p.pos {
			if j < len(res.Errs) {
				out.Errs[i] = res.Errs[j]
			}
		}
	}
	return out, errors.Join(errs...)
}

// ReportUnreachable implements Client: every shard has the segment.
func (m *Sharded) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error {
	if err := m.check(); err != nil {
		return err
	}
	var errs []error
	for _, s := range m.svcs {
		if err := s.ReportUnreachable(ctx, reporter, k, reason); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(m.svcs) {
		return errs[0]
	}
	return nil
}

// Exists implements Client.
func (m *Sharded) Exists(ctx context.Context, keys []string, lease bool) ([]bool, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	single, idx := m.group(len(keys), func(i int) int { return m.ShardOf(keys[i]) })
	if idx == nil {
		return m.svcs[single].Exists(ctx, keys, lease)
	}
	out := make([]bool, len(keys))
	for sh, pos := range idx {
		if len(pos) == 0 {
			continue
		}
		r, err := m.svcs[sh].Exists(ctx, pick(keys, pos), lease)
		if err != nil {
			return nil, err
		}
		for j, i := range pos {
			out[i] = r[j]
		}
	}
	return out, nil
}

// Remove implements Client.
func (m *Sharded) Remove(ctx context.Context, keys []string, force bool) []error {
	if err := m.check(); err != nil {
		return fillErr(make([]error, len(keys)), err)
	}
	single, idx := m.group(len(keys), func(i int) int { return m.ShardOf(keys[i]) })
	if idx == nil {
		return m.svcs[single].Remove(ctx, keys, force)
	}
	out := make([]error, len(keys))
	for sh, pos := range idx {
		if len(pos) > 0 {
			for j, e := range m.svcs[sh].Remove(ctx, pick(keys, pos), force) {
				out[pos[j]] = e
			}
		}
	}
	return out
}

// RemoveAll implements Client: every shard removes its matching keys.
func (m *Sharded) RemoveAll(ctx context.Context, f Filter, force bool) (int, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, s := range m.svcs {
		n, err := s.RemoveAll(ctx, f, force)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// ListSegments implements Client: the segments any shard has mounted (a
// segment some shards have let go of is still mounted in the others).
func (m *Sharded) ListSegments(ctx context.Context) ([]segment.Descriptor, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	var out []segment.Descriptor
	seen := map[string]bool{}
	for _, s := range m.svcs {
		ds, err := s.ListSegments(ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if !seen[d.ID] {
				seen[d.ID] = true
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// Stats implements Client: the shards' counts and capacities summed.
// Segments, Clients and each client's segments are shard 0's (every shard
// mounts every segment and registers every client).
func (m *Sharded) Stats(ctx context.Context) (Stats, error) {
	if err := m.check(); err != nil {
		return Stats{}, err
	}
	var out Stats
	for i, s := range m.svcs {
		st, err := s.Stats(ctx)
		if err != nil {
			return Stats{}, err
		}
		if i == 0 {
			out = st
			continue
		}
		out.Views += st.Views
		out.Objects += st.Objects
		out.PendingPuts += st.PendingPuts
		out.Evictions += st.Evictions
		out.Tiers = addUsage(out.Tiers, st.Tiers)
		out.Locations = addUsage(out.Locations, st.Locations)
		for _, c := range st.PerClient {
			if j := slices.IndexFunc(out.PerClient, func(o ClientStats) bool { return o.ID == c.ID }); j >= 0 {
				out.PerClient[j].Views += c.Views
			}
		}
	}
	return out, nil
}

// addUsage adds b's capacity and use to a's entries of the same (node,
// tier, location); both are sorted alike and list the same segments, so
// the keys match (an entry only b has is appended).
func addUsage(a, b []UsageStats) []UsageStats {
	for _, u := range b {
		j := slices.IndexFunc(a, func(v UsageStats) bool {
			return v.Node == u.Node && v.Tier == u.Tier && v.Location == u.Location
		})
		if j < 0 {
			a = append(a, u)
			continue
		}
		a[j].Capacity += u.Capacity
		a[j].Used += u.Used
	}
	return a
}

// Close implements Client: it closes the shards. Later calls return
// ErrClosed.
func (m *Sharded) Close() error {
	m.closed.Store(true)
	var errs []error
	for _, s := range m.svcs {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
