package master

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// The operator's view (issue 16): Status is the document behind the
// dashboard, /api/v1/status and `kvfabric stat --json`. It is built from
// the Service's state under its lock, in one pass over segments and
// clients (never over objects), plus counters the hot paths keep under the
// lock they already hold (flowCounters) and the Prometheus counters of
// metrics.go. Rates are computed here, on the master, from a small ring of
// earlier snapshots (rateRing): every reader of the document sees the same
// numbers, and a one-shot `kvfabric stat --json` gets rates too.

// Status is a snapshot of the master for operators. Its JSON form is the
// /api/v1/status document; fields are only ever added.
type Status struct {
	Time          time.Time `json:"time"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Objects       int       `json:"objects"`
	PendingPuts   int       `json:"pending_puts"`
	// LeasesHeld: read leases granted and not released (objects consumers
	// are copying, and views); an expired one counts until the reaper's
	// next pass.
	LeasesHeld int `json:"leases_held"`
	// ViewsHeld: views clients hold (Store.Acquire): read leases they
	// renew for as long as they read the objects in place.
	ViewsHeld int `json:"views_held"`
	Segments  int `json:"segments"`
	Clients   int `json:"clients"`
	// Tiers: capacity and usage per tier; Blocks counts allocated ranges
	// (replicas of visible objects and of puts in progress).
	Tiers []TierStatus `json:"tiers"`
	// Nodes is the capacity map: provider node → location (NUMA node or
	// GPU) → segments.
	Nodes     []NodeStatus     `json:"nodes"`
	PerClient []ClientStatus   `json:"clients_list"`
	Counters  Counters         `json:"counters"`
	Rates     Rates            `json:"rates"`
	Evictions []EvictionStatus `json:"evictions"`
	// Errors are the most recent failed calls and events (newest first).
	Errors []ErrorEvent `json:"errors"`
}

// TierStatus is one tier's totals.
type TierStatus struct {
	Tier     string `json:"tier"`
	Segments int    `json:"segments"`
	Capacity uint64 `json:"capacity_bytes"`
	Used     uint64 `json:"used_bytes"`
	Free     uint64 `json:"free_bytes"`
	Blocks   int    `json:"blocks"`
}

// NodeStatus is one provider node of the capacity map.
type NodeStatus struct {
	Node      string           `json:"node"`
	Capacity  uint64           `json:"capacity_bytes"`
	Used      uint64           `json:"used_bytes"`
	Locations []LocationStatus `json:"locations"`
}

// LocationStatus is one (tier, location) of a node: a host NUMA node for
// DRAM, a GPU for HBM.
type LocationStatus struct {
	Tier     string          `json:"tier"`
	Location int32           `json:"location"`
	Capacity uint64          `json:"capacity_bytes"`
	Used     uint64          `json:"used_bytes"`
	Segments []SegmentStatus `json:"segments"`
}

// SegmentStatus is one mounted segment.
type SegmentStatus struct {
	ID         string `json:"id"`
	Generation uint64 `json:"generation"`
	Owner      string `json:"owner"`
	Handle     string `json:"handle"`
	Capacity   uint64 `json:"capacity_bytes"`
	Used       uint64 `json:"used_bytes"`
	Free       uint64 `json:"free_bytes"`
	// LargestFree is the largest put that fits without eviction.
	LargestFree uint64 `json:"largest_free_bytes"`
	Blocks      int    `json:"blocks"`
	// State: "ok", "draining" (its owner is unmounting it) or "suspect"
	// (reported unreachable).
	State string `json:"state"`
}

// ClientStatus is one registered client.
type ClientStatus struct {
	ID           string `json:"id"`
	Node         string `json:"node"`
	Principal    string `json:"principal,omitempty"`
	Driver       string `json:"driver,omitempty"`
	FabricDomain string `json:"fabric_domain,omitempty"`
	// Roles: "provider" when it provides segments, "consumer" when it
	// provides none or maps other providers' segments.
	Roles []string `json:"roles"`
	// Segments it provides, and their capacity.
	Segments int    `json:"segments"`
	Capacity uint64 `json:"capacity_bytes"`
	// Imports: other providers' segments it keeps mapped (last heartbeat).
	MappedSegments int    `json:"mapped_segments"`
	MappedBytes    uint64 `json:"mapped_bytes"`
	PendingPuts    int    `json:"pending_puts"`
	ReservedBytes  int64  `json:"reserved_bytes"`
	// Views it holds (Store.Acquire).
	Views int `json:"views"`
	// HeartbeatAgo is the time since its last heartbeat (or registration),
	// ExpiresIn the time left before its registration expires.
	HeartbeatAgo float64 `json:"heartbeat_ago_seconds"`
	ExpiresIn    float64 `json:"expires_in_seconds"`
	TTL          float64 `json:"ttl_seconds"`
	// Liveness: "live"; "late" when it missed a heartbeat (a third of its
	// TTL) — still registered; "suspect" when one of its segments was
	// reported unreachable since its last heartbeat.
	Liveness string `json:"liveness"`
}

// Counters are totals since the master started.
type Counters struct {
	Puts      uint64 `json:"puts"` // puts made visible
	PutBytes  uint64 `json:"put_bytes"`
	PutStarts uint64 `json:"put_starts"` // put items granted space
	NoSpace   uint64 `json:"put_no_space"`
	Gets      uint64 `json:"gets"` // get items: hits + misses
	Hits      uint64 `json:"get_hits"`
	Misses    uint64 `json:"get_misses"`
	GetBytes  uint64 `json:"get_bytes"` // sizes of the objects hits leased
	Evictions uint64 `json:"evictions"`
	// Errors: failed calls and items, without the ordinary outcomes
	// (misses, already existing keys).
	Errors             uint64 `json:"errors"`
	LeaseExpiries      uint64 `json:"lease_expiries"`
	PutTimeouts        uint64 `json:"put_timeouts"`
	ClientExpiries     uint64 `json:"client_expiries"`
	UnreachableReports uint64 `json:"unreachable_reports"`
}

// Rates are per-second rates of Counters over the last WindowSeconds.
type Rates struct {
	WindowSeconds float64 `json:"window_seconds"`
	Puts          float64 `json:"puts_per_second"`
	PutBytes      float64 `json:"put_bytes_per_second"`
	Gets          float64 `json:"gets_per_second"`
	Hits          float64 `json:"hits_per_second"`
	Misses        float64 `json:"misses_per_second"`
	GetBytes      float64 `json:"get_bytes_per_second"`
	Evictions     float64 `json:"evictions_per_second"`
	Errors        float64 `json:"errors_per_second"`
	// HitRatio is hits / gets over the window (0 without gets).
	HitRatio float64 `json:"hit_ratio"`
}

// EvictionStatus counts evictions of one tier for one reason: "watermark"
// (a tier above its high watermark) or "put" (space for a put), with
// "_soft_pin" when soft-pinned objects had to go too.
type EvictionStatus struct {
	Tier   string `json:"tier"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// ErrorEvent is one failed call or notable event.
type ErrorEvent struct {
	Time    time.Time `json:"time"`
	Op      string    `json:"op"`
	Result  string    `json:"result"`
	Message string    `json:"message"`
}

// Eviction reasons, indexes of flowCounters.evicted.
const (
	evictWatermark = iota
	evictPut
	evictWatermarkSoft
	evictPutSoft
	nEvictReasons
)

var evictReasonNames = [nEvictReasons]string{"watermark", "put", "watermark_soft_pin", "put_soft_pin"}

// flowCounters are byte and eviction counters kept under Service.mu by
// the hot paths (an add each, under the lock they hold anyway).
type flowCounters struct {
	putBytes uint64                   // getBytes is readPath.getBytes (an atomic: gets hold the lock shared)
	evicted  [3][nEvictReasons]uint64 // by segment.Tier
}

func evictReason(forPut, soft bool) int {
	r := evictWatermark
	if forPut {
		r = evictPut
	}
	if soft {
		r += 2
	}
	return r
}

// benign reports whether result r of op is an ordinary outcome rather
// than an error: a get or exists miss, a put of a key that exists.
func benign(op opKind, r result) bool {
	switch r {
	case resOK:
		return true
	case resNotFound:
		return op == opGet || op == opExists
	case resAlreadyExists:
		return op == opPutStart
	}
	return false
}

// errRingSize bounds the recent-errors ring.
const errRingSize = 64

// errRing keeps the last errRingSize errors. Safe for concurrent use; only
// failing calls take its lock.
type errRing struct {
	mu struct {
		sync.Mutex
		ev   [errRingSize]ErrorEvent
		next int
		n    int
	}
}

func (r *errRing) add(op string, res string, msg string) {
	const maxMsg = 300 // error texts carry keys; keep the ring small
	if len(msg) > maxMsg {
		msg = msg[:maxMsg] + "…"
	}
	now := time.Now()
	r.mu.Lock()
	r.mu.ev[r.mu.next] = ErrorEvent{Time: now, Op: op, Result: res, Message: msg}
	r.mu.next = (r.mu.next + 1) % errRingSize
	r.mu.n = min(r.mu.n+1, errRingSize)
	r.mu.Unlock()
}

// recent returns the events, newest first.
func (r *errRing) recent() []ErrorEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ErrorEvent, 0, r.mu.n)
	for i := 1; i <= r.mu.n; i++ {
		out = append(out, r.mu.ev[(r.mu.next-i+errRingSize)%errRingSize])
	}
	return out
}

// recordErr puts a call's error in the ring unless it is benign.
func (m *metrics) recordErr(op opKind, err error) {
	if err == nil {
		return
	}
	if r := errResult(err); !benign(op, r) {
		m.errs.add(opNames[op], resultNames[r], err.Error())
	}
}

// recordItemErr records the first non-benign error of a batch's items
// (one per batch: a failing batch of thousands must not flood the ring).
func (m *metrics) recordItemErr(op opKind, n int, errAt func(int) error) {
	for i := range n {
		if err := errAt(i); err != nil && !benign(op, errResult(err)) {
			msg := err.Error()
			if n > 1 {
				msg = fmt.Sprintf("%s (item %d of %d)", msg, i, n)
			}
			m.errs.add(opNames[op], resultNames[errResult(err)], msg)
			return
		}
	}
}

// rateRing keeps recent Counters snapshots so Status can report rates.
// Safe for concurrent use.
type rateRing struct {
	mu struct {
		sync.Mutex
		s    [32]rateSample
		next int
		n    int
	}
}

type rateSample struct {
	t time.Time
	c Counters
}

const (
	// rateWindow is how far back rates look (at most).
	rateWindow = 5 * time.Second
	// rateSpacing: snapshots closer than this to the last one are not kept
	// (several viewers polling must not shrink the window).
	rateSpacing = 250 * time.Millisecond
)

// observe records c at t and returns the rates since the oldest kept
// snapshot within rateWindow of t; when none is that recent, since the
// newest one (a longer window: nobody looked meanwhile); with none at
// all, since start.
func (r *rateRing) observe(t, start time.Time, c Counters) Rates {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, found := rateSample{t: start}, false
	for i := 1; i <= r.mu.n; i++ { // newest first
		s := r.mu.s[(r.mu.next-i+len(r.mu.s))%len(r.mu.s)]
		if !s.t.Before(t) {
			continue
		}
		if t.Sub(s.t) > rateWindow {
			if !found {
				ref = s
			}
			break
		}
		ref, found = s, true
	}
	if r.mu.n == 0 || t.Sub(r.mu.s[(r.mu.next-1+len(r.mu.s))%len(r.mu.s)].t) >= rateSpacing {
		r.mu.s[r.mu.next] = rateSample{t: t, c: c}
		r.mu.next = (r.mu.next + 1) % len(r.mu.s)
		r.mu.n = min(r.mu.n+1, len(r.mu.s))
	}
	dt := t.Sub(ref.t).Seconds()
	if dt <= 0 {
		return Rates{}
	}
	rate := func(now, then uint64) float64 {
		if now < then {
			return 0
		}
		return float64(now-then) / dt
	}
	o := ref.c
	rt := Rates{WindowSeconds: dt,
		Puts: rate(c.Puts, o.Puts), PutBytes: rate(c.PutBytes, o.PutBytes),
		Gets: rate(c.Gets, o.Gets), Hits: rate(c.Hits, o.Hits), Misses: rate(c.Misses, o.Misses),
		GetBytes: rate(c.GetBytes, o.GetBytes), Evictions: rate(c.Evictions, o.Evictions), Errors: rate(c.Errors, o.Errors)}
	if rt.Gets > 0 {
		rt.HitRatio = rt.Hits / rt.Gets
	}
	return rt
}

// counterValue reads a Prometheus counter's value.
func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

// counters reads the metrics' counters (the flow counters are filled in by
// the caller, under the Service's lock).
func (m *metrics) counters() Counters {
	var c Counters
	for op := range nOps {
		for r := range nResults {
			if !benign(op, result(r)) {
				c.Errors += counterValue(m.ops[op][r])
			}
		}
	}
	c.Puts = counterValue(m.ops[opPutEnd][resOK])
	c.PutStarts = counterValue(m.ops[opPutStart][resOK])
	c.NoSpace = counterValue(m.ops[opPutStart][resNoSpace])
	c.Hits = counterValue(m.ops[opGet][resOK])
	c.Misses = counterValue(m.ops[opGet][resNotFound])
	c.Gets = c.Hits + c.Misses
	c.LeaseExpiries = counterValue(m.leaseExpiries)
	c.PutTimeouts = counterValue(m.putTimeouts)
	c.ClientExpiries = counterValue(m.clientExpiries)
	c.UnreachableReports = counterValue(m.unreachableReports)
	return c
}

// Status returns the operator's snapshot of the master. It reads, never
// changes, the Service's state (the rate ring aside), and costs one pass
// over segments and clients under the lock.
func (s *Service) Status(ctx context.Context) (Status, error) {
	if err := s.lock(ctx); err != nil {
		return Status{}, err
	}
	st := s.statusLocked()
	s.mu.Unlock()
	st.Errors = s.met.errs.recent()
	st.Rates = s.rates.observe(st.Time, s.started, st.Counters)
	return st, nil
}

func (s *Service) statusLocked() Status {
	now := s.clock.Now()
	nowNs := now.UnixNano()
	st := Status{
		Time:          now,
		UptimeSeconds: now.Sub(s.started).Seconds(),
		Objects:       s.mu.visible,
		PendingPuts:   len(s.mu.pending) + len(s.mu.timedOut),
		LeasesHeld:    s.rd.leasesHeld(),
		Segments:      len(s.mu.segIndex),
		Clients:       len(s.mu.clients),
		Tiers:         []TierStatus{},
		Nodes:         []NodeStatus{},
	}
	var tiers [3]*TierStatus
	type locKey struct {
		node string
		tier segment.Tier
		loc  int32
	}
	locs := map[locKey]*LocationStatus{}
	capOf := map[string]uint64{}
	for _, sg := range s.mu.segs {
		if sg == nil {
			continue
		}
		d := sg.desc
		if int(d.Tier) >= len(tiers) {
			continue
		}
		if tiers[d.Tier] == nil {
			tiers[d.Tier] = &TierStatus{Tier: d.Tier.String()}
		}
		k := locKey{d.Node, d.Tier, d.Location}
		l := locs[k]
		if l == nil {
			l = &LocationStatus{Tier: d.Tier.String(), Location: d.Location}
			locs[k] = l
		}
		size, used := sg.al.Size(), sg.al.Used()
		state := "ok"
		switch {
		case sg.draining:
			state = "draining"
		case sg.suspect:
			state = "suspect"
		}
		l.Segments = append(l.Segments, SegmentStatus{ID: d.ID, Generation: d.Generation, Owner: d.Owner,
			Handle: d.Handle.Kind.String(), Capacity: size, Used: used, Free: size - used,
			LargestFree: sg.al.LargestFree(), Blocks: sg.al.Allocated(), State: state})
		l.Capacity += size
		l.Used += used
		t := tiers[d.Tier]
		t.Segments++
		t.Capacity += size
		t.Used += used
		t.Blocks += sg.al.Allocated()
		capOf[d.Owner] += size
	}
	for _, t := range tiers {
		if t != nil {
			t.Free = t.Capacity - t.Used
			st.Tiers = append(st.Tiers, *t)
		}
	}
	nodes := map[string]*NodeStatus{}
	for k, l := range locs {
		slices.SortFunc(l.Segments, func(a, b SegmentStatus) int { return strings.Compare(a.ID, b.ID) })
		n := nodes[k.node]
		if n == nil {
			n = &NodeStatus{Node: k.node}
			nodes[k.node] = n
		}
		n.Capacity += l.Capacity
		n.Used += l.Used
		n.Locations = append(n.Locations, *l)
	}
	for _, n := range nodes {
		slices.SortFunc(n.Locations, func(a, b LocationStatus) int {
			return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Location, b.Location))
		})
		st.Nodes = append(st.Nodes, *n)
	}
	slices.SortFunc(st.Nodes, func(a, b NodeStatus) int { return strings.Compare(a.Node, b.Node) })

	var views map[string]int
	st.ViewsHeld, views = s.viewsLocked(nowNs)
	st.PerClient = make([]ClientStatus, 0, len(s.mu.clients))
	for id, c := range s.mu.clients {
		segs := len(s.mu.byOwner[id])
		cs := ClientStatus{ID: id, Node: c.info.Node, Principal: c.principal, Driver: c.info.Driver,
			FabricDomain: c.info.FabricDomain, Segments: segs, Capacity: capOf[id],
			MappedSegments: c.mapped.Segments, MappedBytes: c.mapped.Bytes,
			PendingPuts: c.pending, ReservedBytes: c.reserved, Views: views[id],
			HeartbeatAgo: time.Duration(nowNs - (c.expires - int64(c.ttl))).Seconds(),
			ExpiresIn:    time.Duration(c.expires - nowNs).Seconds(),
			TTL:          c.ttl.Seconds(), Liveness: "live"}
		if segs > 0 {
			cs.Roles = append(cs.Roles, "provider")
		}
		if segs == 0 || c.mapped.Segments > 0 {
			cs.Roles = append(cs.Roles, "consumer")
		}
		switch {
		case c.suspects > 0:
			cs.Liveness = "suspect"
		case cs.HeartbeatAgo > c.ttl.Seconds()/3*1.5:
			cs.Liveness = "late"
		}
		st.PerClient = append(st.PerClient, cs)
	}
	slices.SortFunc(st.PerClient, func(a, b ClientStatus) int { return strings.Compare(a.ID, b.ID) })

	st.Counters = s.met.counters()
	st.Counters.PutBytes = s.mu.flow.putBytes
	st.Counters.GetBytes = s.rd.getBytes.Load()
	st.Counters.Evictions = s.mu.evictions
	for t := segment.TierDRAM; t <= segment.TierHBM; t++ {
		for r, n := range s.mu.flow.evicted[t] {
			st.Evictions = append(st.Evictions, EvictionStatus{Tier: t.String(), Reason: evictReasonNames[r], Count: n})
		}
	}
	return st
}

// flowCollector exports the flow counters to Prometheus, read under the
// Service's lock at scrape time.
type flowCollector struct{ s *Service }

var (
	descPutBytes = prometheus.NewDesc("kvfabric_master_put_bytes_total",
		"Bytes of puts made visible (object sizes; replicas not multiplied).", nil, nil)
	descGetBytes = prometheus.NewDesc("kvfabric_master_get_bytes_total",
		"Bytes of objects gets found and leased to readers (object sizes).", nil, nil)
	descEvictReason = prometheus.NewDesc("kvfabric_master_evictions_by_reason_total",
		"Objects evicted, by tier and reason: watermark (tier above its high watermark), put (space for a put); _soft_pin when soft-pinned objects went too.",
		[]string{"tier", "reason"}, nil)
	descLeasesHeld = prometheus.NewDesc("kvfabric_master_leases_held",
		"Read leases granted and not released (an expired one counts until the reaper's next pass).", nil, nil)
	descViewsHeld = prometheus.NewDesc("kvfabric_master_views_held",
		"Views clients hold (read leases they renew while reading objects in place).", nil, nil)
)

func (c *flowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPutBytes, descGetBytes, descEvictReason, descLeasesHeld, descViewsHeld} {
		ch <- d
	}
}

func (c *flowCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	f := c.s.mu.flow
	leases := c.s.rd.leasesHeld()
	views, _ := c.s.viewsLocked(c.s.now())
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descPutBytes, prometheus.CounterValue, float64(f.putBytes))
	ch <- prometheus.MustNewConstMetric(descGetBytes, prometheus.CounterValue, float64(c.s.rd.getBytes.Load()))
	ch <- prometheus.MustNewConstMetric(descLeasesHeld, prometheus.GaugeValue, float64(leases))
	ch <- prometheus.MustNewConstMetric(descViewsHeld, prometheus.GaugeValue, float64(views))
	for t := segment.TierDRAM; t <= segment.TierHBM; t++ {
		for r, n := range f.evicted[t] {
			ch <- prometheus.MustNewConstMetric(descEvictReason, prometheus.CounterValue, float64(n), t.String(), evictReasonNames[r])
		}
	}
}

// errStatusUnavailable: no Service answers (an HA master standing by).
var errStatusUnavailable = errors.New("master: status: this master does not lead")
