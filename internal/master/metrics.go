package master

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvfabric/kvfabric/internal/segment"
)

type opKind int

const (
	opRegister opKind = iota
	opHeartbeat
	opMount
	opUnmount
	opPutStart
	opPutEnd
	opPutRevoke
	opGet
	opExists
	opRemove
	opRemoveAll
	opListSegments
	opStats
	opReleaseLeases
	opReportUnreachable
	opUnregister
	opHoldLeases
	nOps
)

var opNames = [nOps]string{"register_client", "heartbeat", "mount_segment", "unmount_segment",
	"put_start", "put_end", "put_revoke", "get_replicas", "exists", "remove", "remove_all",
	"list_segments", "stats", "release_leases", "report_unreachable", "unregister_client", "hold_leases"}

// batchOp reports whether op counts its items rather than its calls.
func batchOp(op opKind) bool {
	switch op {
	case opPutStart, opPutEnd, opPutRevoke, opGet, opExists, opRemove:
		return true
	}
	return false
}

type result int

const (
	resOK result = iota
	resInvalid
	resNotFound
	resAlreadyExists
	resNoSpace
	resHasLease
	resWrongState
	resUnknownSegment
	resGenerationMismatch
	resUnknownClient
	resClosed
	resPermission
	resQuota
	resCanceled
	resError
	nResults
)

var resultNames = [nResults]string{"ok", "invalid", "not_found", "already_exists", "no_space",
	"has_lease", "wrong_state", "unknown_segment", "generation_mismatch", "unknown_client",
	"closed", "permission_denied", "quota", "canceled", "error"}

// metrics are the Service's Prometheus metrics. Counters are pre-resolved
// per (op, result) so the hot path does no label lookups.
type metrics struct {
	opsVec         *prometheus.CounterVec
	ops            [nOps][nResults]prometheus.Counter
	latVec         *prometheus.HistogramVec
	lat            [nOps]prometheus.Observer
	evictions      *prometheus.CounterVec
	leaseExpiries  prometheus.Counter
	putTimeouts    prometheus.Counter
	clientExpiries prometheus.Counter
	// leaseReleases counts lease periods ended by their readers' releases.
	leaseReleases prometheus.Counter
	// carriedReleases counts lease ids that gets carried (ReleaseCarry)
	// and the master ended, or found ended, instead of a release call.
	carriedReleases    prometheus.Counter
	unreachableReports prometheus.Counter
	state              *stateCollector
	flow               *flowCollector
	// errs are the recent errors Status shows.
	errs errRing
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		opsVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvfabric_master_ops_total",
			Help: "Master operations by type and result; batch operations count items, other operations (and whole-batch failures) count calls.",
		}, []string{"op", "result"}),
		latVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvfabric_master_op_duration_seconds",
			Help:    "Latency of master calls (a batch is one call), in the Service.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"op"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvfabric_master_evictions_total",
			Help: "Objects evicted, by the tier whose pressure evicted them.",
		}, []string{"tier"}),
		leaseExpiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_lease_expiries_total",
			Help: "Read leases that ran out (one per object per lease period).",
		}),
		putTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_put_timeouts_total",
			Help: "Puts that passed the put timeout: never made visible; their bytes stay reserved until the writer ends or revokes them or its registration ends.",
		}),
		leaseReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_lease_releases_total",
			Help: "Lease periods ended early because every reader released its lease after its copy.",
		}),
		carriedReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_carried_lease_releases_total",
			Help: "Lease ids clients carried on a get for the master to release, instead of a release call of their own (clients that predate carrying send none).",
		}),
		unreachableReports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_unreachable_reports_total",
			Help: "Reports by clients that a segment's provider could not be reached.",
		}),
		clientExpiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvfabric_master_client_expiries_total",
			Help: "Clients whose registration expired without a heartbeat.",
		}),
		state: &stateCollector{s: s},
		flow:  &flowCollector{s: s},
	}
	for op := range nOps {
		m.lat[op] = m.latVec.WithLabelValues(opNames[op])
		for r := range nResults {
			m.ops[op][r] = m.opsVec.WithLabelValues(opNames[op], resultNames[r])
		}
	}
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.opsVec, m.latVec, m.evictions, m.leaseExpiries, m.putTimeouts, m.clientExpiries, m.leaseReleases, m.carriedReleases, m.unreachableReports, m.state, m.flow} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

// op records a call's latency, and its result unless it is a batch call
// that got as far as its items.
func (m *metrics) op(op opKind, start time.Time, errp *error) {
	m.lat[op].Observe(time.Since(start).Seconds())
	m.recordErr(op, *errp)
	if !batchOp(op) || *errp != nil {
		m.ops[op][errResult(*errp)].Inc()
	}
}

// items records the results of a batch's n items, of which nok (when the
// caller counted them; else -1) succeeded: an all-ok batch is then one
// counter add, with no pass over its items.
func (m *metrics) items(op opKind, n, nok int, errAt func(int) error) {
	if nok == n {
		if n > 0 {
			m.ops[op][resOK].Add(float64(n))
		}
		return
	}
	m.recordItemErr(op, n, errAt)
	var counts [nResults]int
	for i := range n {
		counts[errResult(errAt(i))]++
	}
	for r, c := range counts {
		if c > 0 {
			m.ops[op][r].Add(float64(c))
		}
	}
}

// stateCollector exports capacity, usage and counts, read under the
// Service's lock at scrape time so they are exact.
type stateCollector struct{ s *Service }

var (
	descCapacity = prometheus.NewDesc("kvfabric_master_capacity_bytes",
		"Mounted capacity by tier, node and location (host NUMA id or device ordinal).", []string{"tier", "node", "location"}, nil)
	descUsed = prometheus.NewDesc("kvfabric_master_used_bytes",
		"Allocated bytes by tier, node and location.", []string{"tier", "node", "location"}, nil)
	descTierCapacity = prometheus.NewDesc("kvfabric_master_tier_capacity_bytes", "Mounted capacity by tier.", []string{"tier"}, nil)
	descTierUsed     = prometheus.NewDesc("kvfabric_master_tier_used_bytes", "Allocated bytes by tier.", []string{"tier"}, nil)
	descObjects      = prometheus.NewDesc("kvfabric_master_objects", "Visible objects.", nil, nil)
	descPending      = prometheus.NewDesc("kvfabric_master_pending_puts", "Puts in progress.", nil, nil)
	descSegments     = prometheus.NewDesc("kvfabric_master_segments", "Mounted segments.", nil, nil)
	descClients      = prometheus.NewDesc("kvfabric_master_clients", "Registered clients.", nil, nil)
	descMappedSegs   = prometheus.NewDesc("kvfabric_master_client_mapped_segments",
		"Other providers' segments a client keeps mapped (imported), as it reported at its last heartbeat.", []string{"client"}, nil)
	descMappedBytes = prometheus.NewDesc("kvfabric_master_client_mapped_bytes",
		"Bytes of other providers' segments a client keeps mapped, as it reported at its last heartbeat.", []string{"client"}, nil)
	descHandleSegs = prometheus.NewDesc("kvfabric_master_segments_by_handle",
		"Mounted segments by handle kind (fabric, posix_fd).", []string{"handle"}, nil)
	descHandleBytes = prometheus.NewDesc("kvfabric_master_capacity_bytes_by_handle",
		"Mounted capacity by handle kind (fabric, posix_fd).", []string{"handle"}, nil)
	descDriverClients = prometheus.NewDesc("kvfabric_master_clients_by_driver",
		"Registered clients by the CUDA driver they run on (cuda, sim; unknown when not said, other for anything else).", []string{"driver"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descUsed, descTierCapacity, descTierUsed, descObjects, descPending, descSegments, descClients, descMappedSegs, descMappedBytes,
		descHandleSegs, descHandleBytes, descDriverClients} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	st := c.s.statsLocked()
	var handleSegs, handleBytes [3]uint64 // by segment.HandleKind (validated: 1 or 2)
	for _, sg := range c.s.mu.segs {
		if sg != nil && int(sg.desc.Handle.Kind) < len(handleSegs) {
			handleSegs[sg.desc.Handle.Kind]++
			handleBytes[sg.desc.Handle.Kind] += sg.desc.Size
		}
	}
	c.s.mu.Unlock()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range st.Tiers {
		g(descTierCapacity, float64(t.Capacity), t.Tier.String())
		g(descTierUsed, float64(t.Used), t.Tier.String())
	}
	for _, l := range st.Locations {
		loc := strconv.Itoa(int(l.Location))
		g(descCapacity, float64(l.Capacity), l.Tier.String(), l.Node, loc)
		g(descUsed, float64(l.Used), l.Tier.String(), l.Node, loc)
	}
	g(descObjects, float64(st.Objects))
	g(descPending, float64(st.PendingPuts))
	g(descSegments, float64(st.Segments))
	g(descClients, float64(st.Clients))
	for _, c := range st.PerClient {
		g(descMappedSegs, float64(c.Mapped.Segments), c.ID)
		g(descMappedBytes, float64(c.Mapped.Bytes), c.ID)
	}
	// Both kinds always, so a dashboard sees 0 rather than no series.
	for _, k := range []segment.HandleKind{segment.HandleFabric, segment.HandlePosixFD} {
		g(descHandleSegs, float64(handleSegs[k]), k.String())
		g(descHandleBytes, float64(handleBytes[k]), k.String())
	}
	drivers := map[string]int{"cuda": 0, "sim": 0}
	for _, c := range st.PerClient {
		switch d := c.Driver; d {
		case "cuda", "sim":
			drivers[d]++
		case "":
			drivers["unknown"]++
		default: // a label per free-form value would let clients grow the series
			drivers["other"]++
		}
	}
	for d, n := range drivers {
		g(descDriverClients, float64(n), d)
	}
}

func sortUsage(u []UsageStats) {
	slices.SortFunc(u, func(a, b UsageStats) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Location, b.Location))
	})
}
