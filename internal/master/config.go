package master

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock is the Service's source of time; tests inject a manual one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

// Watermarks bound a tier's usage as fractions of its capacity: when usage
// passes High, eviction brings it down to Low.
type Watermarks struct {
	High, Low float64
}

// Config configures a Service. The zero value of each field means its
// default (see Defaults).
type Config struct {
	// LeaseTTL is how long a GetReplicas lease lasts. Default 5s.
	LeaseTTL time.Duration
	// PutTimeout is how long a put may stay in progress before it is
	// revoked. Default 30s.
	PutTimeout time.Duration
	// DrainTimeout is how long a segment stays draining after its owner's
	// unmount was refused (ErrHasLease): each refused retry renews it, and
	// without one the segment lapses back to usable, so an owner that gave
	// up closing (its Close timed out, it stays alive) does not leave its
	// capacity unusable for good. Default max(10s, 2 × LeaseTTL): well
	// above the ≤ 1s between a closing client's retries, and above a retry
	// after one lease TTL, as the refusal suggests.
	DrainTimeout time.Duration
	// ClientTTL is the default registration TTL. Default 10s.
	ClientTTL time.Duration
	// MinClientTTL and MaxClientTTL clamp a requested TTL. Defaults 1s, 5m.
	MinClientTTL, MaxClientTTL time.Duration
	// DRAM and HBM are the eviction watermarks. Default {0.95, 0.85}.
	DRAM, HBM Watermarks
	// Alignment of every allocation: a power of two from MinAlignment to
	// MaxAlignment. Default 64.
	Alignment uint64
	// MaxKeyLen bounds keys in bytes: 1 to MaxKeyLenLimit. Default 1024.
	MaxKeyLen int
	// MaxBatch bounds the items of one call. Default 65536.
	MaxBatch int
	// EvictSample is how many members of a tier's eviction list the
	// clock's hand passes looking for a victim before it falls back to
	// sampling, and how many that sample draws (evict.go). A tier with no
	// more visible objects than this evicts in exact LRU order. Default 16.
	EvictSample int
	// PlacementSlack is how far, as a fraction of a segment's size, its
	// free bytes may fall through allocations below the free bytes the
	// placement index ranks it by before it is ranked anew (placeindex.go):
	// a batch's puts then fill a segment in runs instead of moving it in
	// the index at every allocation, and equal segments stay within that
	// much of one another. Default 1/64 (2 MiB of a 128 MiB segment); more
	// than 0 up to 0.25, or ExactPlacement: ranked by the exact free bytes
	// after every allocation.
	PlacementSlack float64
	// ReapInterval is how often the background reaper expires leases, puts
	// and clients. Default 100ms; negative disables the background reaper
	// (tests then call Service.Reap).
	ReapInterval time.Duration
	// Clock defaults to SystemClock.
	Clock Clock
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer, when set, receives the Service's metrics.
	Registerer prometheus.Registerer
	// RequireAuth makes every call carry a Principal (WithPrincipal; the
	// gRPC server sets it from a verified client certificate or a bearer
	// token): calls without one fail with ErrUnauthenticated, and a client
	// may act only on its own registrations, segments and puts (DESIGN §9,
	// "every caller is someone"). Off, callers are trusted.
	RequireAuth bool
	// Quotas bound each registration (zero fields: DefaultQuotas).
	Quotas Quotas
}

// ExactPlacement is the Config.PlacementSlack that ranks segments by their
// exact free bytes after every allocation.
const ExactPlacement = -1.0

// Bounds of Config.Alignment and Config.MaxKeyLen.
//
// MinAlignment: every replica then starts on an 8-byte boundary, so the SM
// copy kernel's word accesses never straddle two objects, and no two
// objects share a word.
//
// MaxAlignment: each object wastes up to Alignment-1 bytes, and a segment
// smaller than the alignment cannot be mounted at all; 1 MiB divides the
// 2 MiB VMM granularity of every GPU measured, so every chunk the pool
// plans stays a whole number of allocation units, while anything larger
// only wastes memory.
//
// MaxKeyLenLimit: the master keeps every key in memory and sends keys in
// every batch; 64 KiB is far above any real key (a hash of a token prefix
// is tens of bytes), and a 64 KiB key still fits gRPC's default 4 MiB
// message with room for a batch.
const (
	MinAlignment   = 8
	MaxAlignment   = 1 << 20
	MaxKeyLenLimit = 64 << 10
)

// Defaults returns c with zero fields set to their defaults.
func (c Config) Defaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 5*time.Second)
	def(&c.PutTimeout, 30*time.Second)
	def(&c.DrainTimeout, max(10*time.Second, 2*c.LeaseTTL))
	def(&c.ClientTTL, 10*time.Second)
	def(&c.MinClientTTL, time.Second)
	def(&c.MaxClientTTL, 5*time.Minute)
	def(&c.ReapInterval, 100*time.Millisecond)
	if c.DRAM == (Watermarks{}) {
		c.DRAM = Watermarks{High: 0.95, Low: 0.85}
	}
	if c.HBM == (Watermarks{}) {
		c.HBM = Watermarks{High: 0.95, Low: 0.85}
	}
	if c.Alignment == 0 {
		c.Alignment = 64
	}
	if c.MaxKeyLen == 0 {
		c.MaxKeyLen = 1024
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 65536
	}
	if c.EvictSample == 0 {
		c.EvictSample = 16
	}
	if c.PlacementSlack == 0 {
		c.PlacementSlack = 1.0 / 64
	}
	if c.Clock == nil {
		c.Clock = SystemClock
	}
	c.Quotas = c.Quotas.withDefaults()
	return c
}

// Validate checks a Config after Defaults; the error names the field.
func (c Config) Validate() error {
	switch {
	case c.LeaseTTL < 0:
		return fmt.Errorf("%w: config LeaseTTL %v", ErrInvalid, c.LeaseTTL)
	case c.PutTimeout < 0:
		return fmt.Errorf("%w: config PutTimeout %v", ErrInvalid, c.PutTimeout)
	case c.DrainTimeout < 0:
		return fmt.Errorf("%w: config DrainTimeout %v", ErrInvalid, c.DrainTimeout)
	case c.ClientTTL < 0 || c.MinClientTTL < 0 || c.MaxClientTTL < c.MinClientTTL:
		return fmt.Errorf("%w: config ClientTTL %v (min %v, max %v)", ErrInvalid, c.ClientTTL, c.MinClientTTL, c.MaxClientTTL)
	case c.Alignment&(c.Alignment-1) != 0 || c.Alignment < MinAlignment || c.Alignment > MaxAlignment:
		return fmt.Errorf("%w: config Alignment %d: want a power of two from %d to %d", ErrInvalid, c.Alignment, MinAlignment, MaxAlignment)
	case c.MaxKeyLen < 1 || c.MaxKeyLen > MaxKeyLenLimit:
		return fmt.Errorf("%w: config MaxKeyLen %d: want 1 to %d", ErrInvalid, c.MaxKeyLen, MaxKeyLenLimit)
	case c.MaxBatch < 1:
		return fmt.Errorf("%w: config MaxBatch %d", ErrInvalid, c.MaxBatch)
	case c.EvictSample < 1:
		return fmt.Errorf("%w: config EvictSample %d", ErrInvalid, c.EvictSample)
	case c.PlacementSlack != ExactPlacement && !(c.PlacementSlack > 0 && c.PlacementSlack <= 0.25):
		return fmt.Errorf("%w: config PlacementSlack %v: want ExactPlacement (%v) or more than 0 up to 0.25", ErrInvalid, c.PlacementSlack, ExactPlacement)
	}
	for _, w := range []struct {
		name string
		w    Watermarks
	}{{"DRAM", c.DRAM}, {"HBM", c.HBM}} {
		if !(w.w.Low > 0 && w.w.Low <= w.w.High && w.w.High <= 1) {
			return fmt.Errorf("%w: config %s watermarks high %v low %v: want 0 < low <= high <= 1", ErrInvalid, w.name, w.w.High, w.w.Low)
		}
	}
	return nil
}
