package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/mapping"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/pool"
	"github.com/kvfabric/kvfabric/internal/segment"
	"github.com/kvfabric/kvfabric/internal/teardown"
	"github.com/kvfabric/kvfabric/internal/transfer"
)

// Options are the Store's collaborators. The zero value builds everything
// from the Config.
type Options struct {
	// Logger receives lifecycle events; nil discards. Nothing is logged per
	// block.
	Logger *slog.Logger
	// Driver, when set, is used instead of choosing one per cfg.Driver. The
	// Store does not close it.
	Driver cuda.Driver
	// Master, when set, is used instead of the one cfg.MasterServerAddr
	// names (several Stores of one process sharing an embedded master). The
	// Store does not close it.
	Master master.Client
	// MasterConfig configures the embedded master (master_server_addr
	// "embedded" and Master unset).
	MasterConfig master.Config
	// ClientID is this process's id at the master and the owner part of its
	// segment ids: 1 to master.MaxClientIDLen letters, digits, '-', '_',
	// '.' or ':' (anything else fails Open with ErrInvalidArgument); empty
	// means the configuration's client_id, and when that is empty too
	// "<local_hostname>-<pid>-<n>". Reusing the id
	// of a dead process replaces its registration (its segments are
	// unmounted).
	ClientID string
	// ClientTTL is the liveness TTL asked of the master; 0 means its default.
	ClientTTL time.Duration
	// Progress receives the provider pool's setup progress (a CLI bar).
	Progress func(pool.Progress)
	// StagingSize is the pinned host buffer PutBytes/GetBytes copy through;
	// 0 means 64 MiB, allocated on first use.
	StagingSize uint64
	// MaxMappings bounds the mapping cache (0: its default).
	MaxMappings int
	// PipelineChunk is how many keys of a BatchPut or BatchGet go to the
	// master and the transfer engine at a time: chunk k+1's metadata is
	// fetched and resolved while chunk k copies. 0 means
	// DefaultPipelineChunk.
	PipelineChunk int
	// BatchParts is how many parts a large BatchPut or BatchGet is split
	// into, each pipelined on its own goroutine (a part has at least two
	// pipeline chunks of keys — of regions for a get, where a key of many
	// regions counts once per region): the master's read path (gets run
	// in parallel there) and this process's per-key work then run on that
	// many cores.
	// A put's equal keys go to the same part, in batch order. 0 means
	// DefaultBatchParts for gets, and for puts too with a remote master;
	// with an embedded one, puts then stay in one pipeline (their master
	// calls hold its lock exclusively, so parts would only contend for
	// it: 5-10 % slower on the H200, docs/perf/store.md). 1 keeps every
	// batch in one pipeline; more splits puts and gets alike.
	BatchParts int
	// CloseTimeout bounds each wait of Close: for the operations in
	// flight, and for the master to accept the provider's unmounts, which
	// Close retries while readers hold leases or the master cannot be
	// reached. 0 means CloseTimeout.
	CloseTimeout time.Duration
	// ExitOnClose tells the Store that its process exits after Close (the
	// provider command). When the unmounts still fail at the close timeout
	// — the master is down, or readers still hold leases — Close releases
	// the memory anyway, as the exit would, and removes the fd-exchange
	// socket: the master drops the segments when this client's
	// registration expires, and consumers that imported them keep their
	// own references until then. Without it such a Close fails with
	// ErrCleanupPending, keeping everything, and a later Close retries.
	ExitOnClose bool
	// TimeCopies has the transfer engine time every chunk's copies on the
	// GPU (transfer.Options.TimeBatches), reported as PhaseStats.GPU: a
	// measurement aid (`kvfabric bench --store --gpu-times`), two timing
	// events per chunk.
	TimeCopies bool
	// SeparateCopies turns off the merging of copies that continue one
	// another (copyRuns), as the configuration's merge_copies=false does:
	// every object's regions are copied as given. Merged copies touch
	// exactly the same bytes; `kvfabric bench --store --separate-copies`
	// measures the difference.
	SeparateCopies bool
}

// Store is a kvfabric client. All methods are safe for concurrent use.
// After Close starts, operations fail with ErrClosed; Close waits for the
// operations in flight (bounded) before tearing down.
type Store struct {
	cfg      config.Config
	log      *slog.Logger
	clientID string
	dev      cuda.Device
	numa     int32 // host NUMA node of dev; -1 if unknown

	drv       cuda.Driver
	ownDriver bool
	driverWhy string
	cctx      cuda.Context
	ctxHeld   bool

	svc       *master.Service // embedded master owned by this Store, or nil
	m         master.Client
	ownMaster bool

	hbStop  chan struct{}
	hbDone  chan struct{}
	hbErr   atomic.Pointer[error]
	regInfo master.ClientInfo // as registered; fixed after Open

	// hbKick makes the heartbeat beat now (a new leadership term: register
	// with the new leader at once). Buffered, one pending kick.
	hbKick chan struct{}
	// termFenced: the master fences each leadership term (HA, ha.go), so
	// remounting after re-registration needs no wait.
	termFenced bool

	// reg is this process's registration at the master. Its RWMutex also
	// fences copies against re-registration: a put batch holds the read
	// side from its last check (registration valid, put deadline not
	// passed) until its copies are complete; re-registering after the
	// master forgot this client takes the write side. So no copy granted
	// under a registration the master has ended is enqueued after the
	// master may have handed its range to someone else (DESIGN §9).
	reg struct {
		sync.RWMutex
		incarnation uint64    // bumped on every re-registration
		validUntil  time.Time // send time of the last acknowledged heartbeat + TTL (timeNow's clock)
		ttl         time.Duration
		leaseTTL    time.Duration
		putTimeout  time.Duration
	}
	// hb is the heartbeat goroutine's own state.
	hb struct {
		segVersion   uint64
		versionKnown bool
		remountAt    time.Time // zero: no remount pending
	}
	// mounted is the pool once every segment is mounted: the heartbeat
	// (started before the pool, so that a long setup does not expire the
	// registration) remounts it after re-registering.
	mounted atomic.Pointer[pool.Pool]

	closeTimeout time.Duration
	chunk        int                      // Options.PipelineChunk
	parts        int                      // Options.BatchParts, resolved
	putParts     int                      // the same for puts
	embedded     bool                     // the master is in this process (master.IsEmbedded)
	prep         master.Preparer          // s.m, when it prepares PutStart batches apart (embedded); else nil
	uniform      master.UniformPutStarter // s.m when prep is nil: it starts uniform batches (a remote master)
	spin         spinBudget               // the pipelines' hand-offs (handoff.go)
	workers      sync.WaitGroup           // the pipelines' metaWorkers, stopped by their pipelines
	rel          releaser
	keeper       viewKeeper // renews held Views' leases (views.go)
	exitOnClose  bool
	mnt          *mounter // the pool's Mounter

	fds  *fdx.Server
	pool *pool.Pool
	// poolUnwind owns what a failed pool setup could not release; teardown
	// retries it (before the fd server, master and context it needs).
	poolUnwind *pool.UnwindError
	maps       *mapping.Cache
	xfer       *transfer.Engine

	// stagingMu serializes use of the staging buffer.
	stagingMu sync.Mutex
	staging   *staging

	phases struct{ put, get phaseCounters }
	// timeCopies is Options.TimeCopies; putTimeline the last put
	// pipeline's chunks with it (phases.go).
	timeCopies bool
	// separateCopies is Options.SeparateCopies; mergedCopies counts the
	// copies folded into the one before them (MergedCopies).
	separateCopies bool
	mergedCopies   atomic.Uint64
	putTimeline    struct {
		sync.Mutex
		chunks []ChunkTime
	}

	// gate admits operations. It is held only for a moment, never during
	// teardown, so operations started while Close runs fail with ErrClosed
	// at once instead of waiting for it.
	gate struct {
		sync.Mutex
		closing  bool
		inflight int           // admitted operations not yet exited
		drained  chan struct{} // closed when inflight reaches 0 after closing
		// streams are the put streams whose batches have not returned:
		// Close aborts them rather than wait for feeders that may never
		// come back (PutStream).
		streams map[*PutStream]struct{}
	}

	// mu guards the registered buffers and the teardown record. Teardown
	// holds it throughout (no operation is in flight by then).
	mu struct {
		sync.Mutex
		regs map[uintptr]*registration
		// regsByPtr holds regs' values sorted by address (for holdLocked).
		regsByPtr []*registration
		done      teardown.Record // teardown steps that succeeded
	}
}

// registration is one RegisterBuffer range. Its fields are guarded by
// Store.mu.
type registration struct {
	ptr, size uint64
	ours      bool // registered with the driver by us (else device or already page-locked memory)
	pending   bool // RegisterBuffer is classifying/pinning it: reserved, not usable yet
	// users is the number of batches holding the buffer: from their buffer
	// check until their copies are complete or failed (checkBuffers,
	// release).
	users int
	// unregistering is the number of UnregisterBuffer calls waiting for
	// users to reach 0; while it is > 0 new batches refuse the buffer, so
	// users only goes down.
	unregistering int
	// idle, when not nil, is closed by the release that brings users to 0.
	idle chan struct{}
}

var storeSeq atomic.Int64

// DefaultBatchParts is the default Options.BatchParts: a quarter of the cores
// this process may use (GOMAXPROCS), between 1 and 4 — each part keeps about
// two cores busy (its pipeline and its master calls), and the rest are
// the engine's.
func DefaultBatchParts() int { return min(4, max(1, runtime.GOMAXPROCS(0)/4)) }

// Open builds a Store from cfg: the driver (cfg.Driver), the master
// (embedded or remote), provider capacity when cfg.GlobalSegmentSize > 0
// (the EGM DRAM pool, or HBM when it is off), the mapping cache and the
// transfer engine.
//
// A failed Open unwinds what it built. If the unwinding fails too, the error
// is an *OpenError whose Retry finishes it.
func Open(ctx context.Context, cfg config.Config, opts Options) (_ *Store, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.ClientID == "" {
		opts.ClientID = cfg.ClientID
	}
	if opts.ClientID != "" {
		// Refused here, before anything is built: the id names the
		// client's segments and fd-exchange socket.
		if err := master.ValidateClientID(opts.ClientID); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	if opts.BatchParts < 0 {
		return nil, fmt.Errorf("%w: Options.BatchParts=%d (want 0 for the default, or a count of at least 1)", ErrInvalidArgument, opts.BatchParts)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Store{cfg: cfg, log: log, dev: cuda.Device(cfg.Device), numa: -1, closeTimeout: opts.CloseTimeout, exitOnClose: opts.ExitOnClose, chunk: opts.PipelineChunk,
		hbKick: make(chan struct{}, 1), parts: opts.BatchParts}
	if s.parts == 0 {
		s.parts = DefaultBatchParts()
	}
	if s.closeTimeout <= 0 {
		s.closeTimeout = CloseTimeout
	}
	s.mu.regs = map[uintptr]*registration{}
	defer func() {
		if err == nil {
			return
		}
		if cerr := s.teardown(); cerr != nil {
			err = &OpenError{Err: err, Unwind: cerr, s: s}
		}
	}()

	// Driver and context.
	if opts.Driver != nil {
		s.drv, s.driverWhy = opts.Driver, opts.Driver.Name()+" (given)"
	} else {
		pick := choose.Driver
		if cfg.GlobalSegmentSize > 0 {
			// A provider never silently serves simulator memory on a
			// GPU host whose driver is broken.
			pick = choose.ProviderDriver
		}
		d, why, err := pick(cfg.Driver, log)
		if err != nil {
			return nil, fmt.Errorf("open driver %q: %w", cfg.Driver, err)
		}
		s.drv, s.driverWhy, s.ownDriver = d, why, true
	}
	n, err := s.drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("device count: %w", err)
	}
	if cfg.Device >= n {
		return nil, fmt.Errorf("%w: device=%d: only %d GPU(s) visible", config.ErrInvalid, cfg.Device, n)
	}
	if s.cctx, err = s.drv.PrimaryCtxRetain(s.dev); err != nil {
		return nil, fmt.Errorf("retain context of device %d: %w", cfg.Device, err)
	}
	s.ctxHeld = true
	if id, err := s.drv.DeviceAttribute(s.dev, cuda.AttrHostNUMAID); err == nil && id >= 0 {
		s.numa = int32(id)
	}

	// The mapping cache comes before the heartbeat, which reports its size
	// and releases mappings of segments that are gone.
	if s.maps, err = mapping.New(s.drv, s.cctx, s.accessDevices(n), mapping.Options{
		MaxEntries: opts.MaxMappings, Logger: log,
		// A descriptor's socket path comes from the master: dial only
		// under our own socket_dir, and only a server of our own uid.
		Trust: fdx.Trust{SocketDir: cfg.SocketDir},
	}); err != nil {
		return nil, fmt.Errorf("mapping cache: %w", err)
	}

	// Master and registration.
	switch {
	case opts.Master != nil:
		s.m = opts.Master
	case cfg.MasterServerAddr == config.MasterEmbedded:
		mc := opts.MasterConfig
		if mc.Logger == nil {
			mc.Logger = log
		}
		if cfg.LeaseTTL > 0 {
			mc.LeaseTTL = cfg.LeaseTTL
		}
		if cfg.PutTimeout > 0 {
			mc.PutTimeout = cfg.PutTimeout
		}
		if s.svc, err = master.New(mc); err != nil {
			return nil, fmt.Errorf("embedded master: %w", err)
		}
		s.m, s.ownMaster = master.NewEmbedded(s.svc), true
	case config.IsEtcdAddr(cfg.MasterServerAddr):
		if s.m, err = s.dialHA(ctx); err != nil {
			return nil, err
		}
		s.ownMaster = true
	default:
		sec := master.ClientSecurity{CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
			ServerName: cfg.TLSServerName, TokenFile: cfg.AuthTokenFile}
		dopts, err := sec.DialOptions()
		if err != nil {
			return nil, fmt.Errorf("%w: master security: %w", ErrInvalidArgument, err)
		}
		fast, err := sec.FastPath()
		if err != nil {
			return nil, fmt.Errorf("%w: master security: %w", ErrInvalidArgument, err)
		}
		fast.Off, fast.Spin = !cfg.MasterFastPath, master.ConfiguredSpin(cfg.MasterFastPathSpin)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s.m, err = master.DialFast(dctx, cfg.MasterServerAddr, fast, dopts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: dial master %s: %v", ErrRPC, cfg.MasterServerAddr, err)
		}
		s.ownMaster = true
	}
	s.embedded = master.IsEmbedded(s.m)
	s.prep, _ = s.m.(master.Preparer)
	s.spin.init()
	s.timeCopies = opts.TimeCopies
	s.separateCopies = opts.SeparateCopies || !cfg.MergeCopies
	s.putParts = s.parts
	if opts.BatchParts == 0 && s.embedded {
		s.putParts = 1
	}
	_, s.termFenced = s.m.(interface{ TermFenced() bool })
	rpcTimeout := cfg.RPCTimeout
	if rpcTimeout <= 0 {
		rpcTimeout = config.DefaultRPCTimeout
	}
	if !s.embedded {
		// An embedded master answers from this process and waits on no
		// peer, so rpc_timeout cannot fire there: its timer on every
		// call would be pure cost (a single embedded get makes two calls).
		s.m = deadlineMaster{m: s.m, timeout: rpcTimeout}
	}
	if s.prep == nil {
		s.uniform, _ = s.m.(master.UniformPutStarter)
	}
	s.clientID = opts.ClientID
	if s.clientID == "" {
		host := sanitize(cfg.LocalHostname) // a valid client id whatever local_hostname holds
		if len(host) > 64 {
			host = host[:64]
		}
		s.clientID = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), storeSeq.Add(1))
	}
	ttl := opts.ClientTTL
	if ttl == 0 {
		ttl = cfg.ClientTTL
	}
	s.regInfo = master.ClientInfo{
		ID: s.clientID, Node: cfg.LocalHostname, TTL: ttl,
		NUMANode: s.numa, Device: int32(cfg.Device),
		Incarnation: rand.Uint64() | 1,
		Driver:      s.drv.Name(), FabricDomain: cfg.FabricDomain,
	}
	reg, sent, err := s.register(ctx, ttl)
	if err != nil {
		return nil, mapErr(fmt.Errorf("register client %q: %w", s.clientID, err))
	}
	s.setRegistration(reg, sent)
	s.hbStop, s.hbDone = make(chan struct{}), make(chan struct{})
	go s.heartbeat(reg.TTL)
	// Lease releases go out in the background: with a remote master a
	// release costs a round trip; with an embedded one it costs the master's
	// lock for every lease of a batch, which would delay the batch's
	// return after its last copy.
	s.rel.start(s.releaseNow)

	// Provider capacity.
	if cfg.GlobalSegmentSize > 0 {
		if cfg.HandleType != config.HandleFabric {
			// Sockets of providers that died without teardown (named
			// after their client ids, often with a pid) are removed by
			// the next one to start here.
			removed, serr := fdx.SweepStale(cfg.SocketDir, "kvfabric-*.sock", StaleSocketAge)
			if len(removed) > 0 {
				log.Info("kvfabric removed sockets of dead providers", "sockets", removed)
			}
			if serr != nil {
				log.Warn("kvfabric could not remove sockets of dead providers", "err", serr)
			}
			if s.fds, err = fdx.Listen(cfg.SocketDir, "kvfabric-"+sanitize(s.clientID), log); err != nil {
				return nil, fmt.Errorf("fd exchange: %w", err)
			}
		}
		s.mnt = &mounter{Client: s.m, log: log}
		deps := pool.Deps{Mounter: s.mnt, Logger: log, Progress: opts.Progress, Owner: sanitize(s.clientID)}
		if s.fds != nil {
			deps.FDs = s.fds
		}
		if s.pool, err = pool.Open(ctx, s.drv, cfg, deps); err != nil {
			s.pool = nil
			var ue *pool.UnwindError
			if errors.As(err, &ue) {
				// Keep the pool's leftovers owned: teardown retries them.
				s.poolUnwind = ue
			}
			return nil, mapErr(fmt.Errorf("provider pool: %w", err))
		}
		s.mounted.Store(s.pool)
	}

	// Consumer data path.
	if s.xfer, err = transfer.New(s.drv, s.cctx, s.dev, transfer.Options{CopyEngineMinBytes: cfg.CopyEngineMinBytes, FewCopies: transfer.DefaultFewCopies, Logger: log,
		TimeBatches: opts.TimeCopies}); err != nil {
		return nil, fmt.Errorf("transfer engine: %w", err)
	}
	s.staging = &staging{size: opts.StagingSize}
	log.Info("kvfabric store open", "client", s.clientID, "driver", s.driverWhy, "device", cfg.Device,
		"provides", cfg.GlobalSegmentSize, "egm", cfg.EnableEGMStorePool, "master", cfg.MasterServerAddr)
	return s, nil
}

// accessDevices are the GPUs imported segments are mapped for: this
// client's device only (the consumer copies with it).
func (s *Store) accessDevices(n int) []cuda.Device {
	_ = n
	return []cuda.Device{s.dev}
}

// OpenError is a failed Open whose unwinding failed too: resources are
// still held and Retry releases them.
type OpenError struct {
	Err    error // why Open failed
	Unwind error // what unwinding could not undo
	s      *Store
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("%v (cleanup pending: %v)", e.Err, e.Unwind)
}

// Unwrap returns the setup error, the unwind error and ErrCleanupPending.
func (e *OpenError) Unwrap() []error { return []error{e.Err, e.Unwind, ErrCleanupPending} }

// Retry retries the unwinding; nil once everything is released.
func (e *OpenError) Retry() error { return e.s.teardown() }

// ClientID is this Store's id at the master.
func (s *Store) ClientID() string { return s.clientID }

// Hostname is the configured local_hostname.
func (s *Store) Hostname() string { return s.cfg.LocalHostname }

// Driver is the CUDA driver in use and why it was chosen.
func (s *Store) Driver() (cuda.Driver, string) { return s.drv, s.driverWhy }

// DriverName is the name of the CUDA driver in use: "cuda" (the real
// driver) or "sim" (the simulator).
func (s *Store) DriverName() string { return s.drv.Name() }

// HandleType is how the capacity this Store provides is exported:
// "fabric" or "posix_fd" (handle_type=auto resolved); "" for a pure
// consumer.
func (s *Store) HandleType() string {
	if s.pool == nil || s.cfg.GlobalSegmentSize == 0 {
		return ""
	}
	return s.pool.HandleType().String()
}

// Context is the primary context of the Store's device.
func (s *Store) Context() cuda.Context { return s.cctx }

// Pool is the provider capacity of this Store (nil for a pure consumer).
func (s *Store) Pool() *pool.Pool { return s.pool }

// Master is the master client in use.
func (s *Store) Master() master.Client { return s.m }

// MasterTransports reports which transport carried the hot calls to a
// remote master (the fast path or gRPC); zero for an embedded master.
func (s *Store) MasterTransports() master.TransportStats {
	st, _ := master.Transports(s.m)
	return st
}

// TransferStats reports the transfer engine's counters.
func (s *Store) TransferStats() transfer.Stats { return s.xfer.Stats() }

// Health reports whether the Store is open and its registration alive.
func (s *Store) Health(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if p := s.hbErr.Load(); p != nil {
		return *p
	}
	if _, err := s.m.Stats(ctx); err != nil {
		return mapErr(err)
	}
	return nil
}

// register registers this process. While another live process holds the
// id (a restart under the same --client-id before the old registration
// expired, or two processes configured with one id) the master refuses it;
// register retries until the old registration can have expired (the TTL
// asked for, 10s by default, plus slack), then gives up with the master's
// error, which names the other process's node.
func (s *Store) register(ctx context.Context, ttl time.Duration) (master.Registration, time.Time, error) {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	give := time.Now().Add(ttl + 2*time.Second)
	for logged := false; ; {
		sent := timeNow()
		reg, err := s.m.RegisterClient(ctx, s.regInfo)
		if !errors.Is(err, master.ErrAlreadyExists) || time.Now().After(give) {
			return reg, sent, err
		}
		if !logged {
			s.log.Warn("kvfabric client id in use by another live process; waiting for its registration to expire", "client", s.clientID, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return reg, sent, errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// setRegistration records a registration the master granted for a request
// sent at sent.
func (s *Store) setRegistration(reg master.Registration, sent time.Time) {
	s.reg.Lock()
	defer s.reg.Unlock()
	s.reg.ttl, s.reg.leaseTTL, s.reg.putTimeout = reg.TTL, reg.LeaseTTL, reg.PutTimeout
	s.reg.validUntil = sent.Add(reg.TTL)
}

// writableRLocked reports whether a put started under registration
// incarnation inc, whose PutStart was sent at sent, may still enqueue its
// copies: the registration is the same and, by this process's clock, alive,
// and the put's deadline has not passed. The master counts both from when
// it received the requests, which is later, so it cannot have revoked the
// put or ended the registration yet. The caller holds s.reg's read lock
// until the copies are complete.
func (s *Store) writableRLocked(inc uint64, sent time.Time) error {
	now := timeNow()
	switch {
	case s.reg.incarnation != inc:
		return fmt.Errorf("%w: this client registered again since the put started (the master had ended its registration); the put was not written", ErrRPC)
	case !now.Before(s.reg.validUntil):
		return fmt.Errorf("%w: no heartbeat acknowledged for %v (TTL %v): the master may have ended this client's registration; the put was not written",
			ErrRPC, now.Sub(s.reg.validUntil.Add(-s.reg.ttl)), s.reg.ttl)
	case s.reg.putTimeout > 0 && !now.Before(sent.Add(s.reg.putTimeout)):
		return fmt.Errorf("%w: put timeout %v passed before the copy could be enqueued; the put was not written", ErrRPC, s.reg.putTimeout)
	}
	return nil
}

func (s *Store) heartbeat(ttl time.Duration) {
	defer close(s.hbDone)
	every := ttl / 3
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.hbStop:
			return
		case <-s.hbKick:
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			err := s.beat(ctx)
			cancel()
			if err != nil {
				err = mapErr(fmt.Errorf("heartbeat: %w", err))
				s.hbErr.Store(&err)
				s.log.Warn("kvfabric heartbeat failed", "client", s.clientID, "err", err)
				continue
			}
			s.hbErr.Store(nil)
		}
	}
}

// beat is one heartbeat: renew the registration (or register again), remount
// the provider's segments when that is due, and release mappings of
// segments the master no longer has.
func (s *Store) beat(ctx context.Context) error {
	sent := timeNow()
	var mapped master.Mapped
	if s.maps != nil {
		st := s.maps.Stats()
		mapped = master.Mapped{Segments: st.Entries, Bytes: st.VA}
	}
	hb, err := s.m.Heartbeat(ctx, s.clientID, mapped)
	switch {
	case errors.Is(err, master.ErrUnknownClient):
		if err := s.reregister(ctx); err != nil {
			return err
		}
		s.hb.versionKnown = false // compare every mapping with the master's segments
	case err != nil:
		return err
	default:
		s.reg.Lock()
		s.reg.validUntil = sent.Add(s.reg.ttl)
		s.reg.Unlock()
	}
	var errs []error
	if !s.hb.remountAt.IsZero() && !timeNow().Before(s.hb.remountAt) {
		if p := s.mounted.Load(); p != nil {
			if err := p.Remount(ctx); err != nil {
				// The master refuses while leases from before may be
				// outstanding (ErrHasLease): retried at the next beat.
				errs = append(errs, fmt.Errorf("remount after re-registration: %w", err))
			} else {
				s.hb.remountAt = time.Time{}
				s.log.Warn("kvfabric segments mounted again after re-registration", "client", s.clientID, "segments", len(p.Segments()))
			}
		}
	}
	if err == nil && (!s.hb.versionKnown || hb.SegmentsVersion != s.hb.segVersion) {
		if err := s.dropGoneMappings(ctx); err != nil {
			errs = append(errs, err)
		} else {
			s.hb.segVersion, s.hb.versionKnown = hb.SegmentsVersion, true
		}
	}
	return errors.Join(errs...)
}

// dropGoneMappings releases this consumer's mappings of segments the master
// no longer lists (unmounted, expired, or from before a master restart), so
// that the provider's memory is truly freed once no copy uses them.
func (s *Store) dropGoneMappings(ctx context.Context) error {
	if s.maps == nil {
		return nil
	}
	segs, err := s.m.ListSegments(ctx)
	if err != nil {
		return fmt.Errorf("list segments: %w", err)
	}
	live := make(map[segment.Key]struct{}, len(segs))
	for i := range segs {
		live[segs[i].Key()] = struct{}{}
	}
	if n := s.maps.Retain(func(k segment.Key) bool { _, ok := live[k]; return ok }); n > 0 {
		s.log.Info("kvfabric released mappings of segments that are gone", "client", s.clientID, "mappings", n)
	}
	return nil
}

// reregister registers again after the master forgot this client (missed
// heartbeats: a pause, a partition, a master restart). First it waits for
// every put batch of the old registration to finish its copies, and makes
// the ones that have not enqueued them yet fail (the write side of s.reg):
// the master revoked those puts and may hand their ranges out again.
//
// The master has unmounted our segments and dropped the objects on them.
// The memory is still ours, but readers may still hold leases on it that
// were granted before (by the master that expired us, or by one that
// died): the provider mounts the same segments again only after
// max(lease TTL, registration TTL), so every such lease — and every other
// writer's put into them — has ended first. The master enforces the same
// for the leases it knows (ErrHasLease on an early mount); the wait covers
// a master that restarted and knows none. Objects written before are gone,
// never half-visible.
func (s *Store) reregister(ctx context.Context) error {
	s.reg.Lock()
	defer s.reg.Unlock()
	s.reg.incarnation++
	sent := timeNow()
	reg, err := s.m.RegisterClient(ctx, s.regInfo)
	if err != nil {
		return fmt.Errorf("register again after expiry: %w", err)
	}
	s.reg.ttl, s.reg.leaseTTL, s.reg.putTimeout = reg.TTL, reg.LeaseTTL, reg.PutTimeout
	s.reg.validUntil = sent.Add(reg.TTL)
	wait := max(reg.LeaseTTL, reg.TTL)
	if s.termFenced {
		// A new leader places nothing until every lease and put of the
		// previous term has ended (its term fence); within one term the
		// master knows its own leases and refuses an early remount.
		wait = 0
	}
	if s.mounted.Load() != nil {
		s.hb.remountAt = timeNow().Add(wait)
	}
	s.log.Warn("kvfabric client registration had ended: registered again", "client", s.clientID,
		"segments remounted in", wait)
	return nil
}

// enter admits an operation unless Close has started.
func (s *Store) enter() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.gate.closing {
		return ErrClosed
	}
	s.gate.inflight++
	return nil
}

func (s *Store) exit() {
	s.gate.Lock()
	defer s.gate.Unlock()
	s.gate.inflight--
	if s.gate.inflight == 0 && s.gate.drained != nil {
		close(s.gate.drained)
		s.gate.drained = nil
	}
}

// StaleSocketAge is how old a socket without a listener in socket_dir must
// be before a starting provider removes it (fdx.SweepStale): far longer
// than a starting provider takes from bind to listen.
const StaleSocketAge = 10 * time.Second

// CloseTimeout is the default of Options.CloseTimeout: how long Close waits
// for operations in flight, and for the master to accept the unmounts.
const CloseTimeout = 30 * time.Second

// Close tears the Store down. Teardown order:
//  1. refuse new operations and wait (bounded) for those in flight, then
//     for their pipelines' workers (stopped as each pipeline returned);
//  2. release the Views still held (their leases end, their mappings are
//     released) and stop renewing views; stop heartbeats;
//  3. close the provider pool (unmount → unregister fds → unmap → free VA →
//     release, per chunk; see pool.Pool.Close);
//  4. close the fd-exchange server (after the pool: it serves the pool's fds);
//  5. close the mapping cache (unmap imported segments);
//  6. close the transfer engine;
//  7. unregister host buffers and free the staging buffer;
//  8. end the registration at the master (after the pool: its segments are
//     unmounted; after the operations in flight: their copies are done),
//     so the client id is free for a restarted process at once;
//  9. close the master client (and the embedded master this Store owns);
//  10. release the primary context and close the driver it opened.
//
// A failed step keeps what it holds and every step that depends on it is
// skipped (the fd exchange and the master need the pool closed; the context
// needs steps 3 and 5-7; the driver needs the context); the error wraps
// ErrCleanupPending and a later Close retries exactly the remaining steps.
// Close is idempotent: nil once all is done.
func (s *Store) Close() error {
	s.gate.Lock()
	s.gate.closing = true
	var wait chan struct{}
	if s.gate.inflight > 0 {
		if s.gate.drained == nil {
			s.gate.drained = make(chan struct{})
		}
		wait = s.gate.drained
	}
	streams := make([]*PutStream, 0, len(s.gate.streams))
	for p := range s.gate.streams {
		streams = append(streams, p)
	}
	s.gate.Unlock()
	for _, p := range streams {
		p.Abort(fmt.Errorf("%w: put stream: the store is closing", ErrClosed))
	}
	if wait != nil {
		t := time.NewTimer(s.closeTimeout)
		defer t.Stop()
		select {
		case <-wait:
		case <-t.C:
			return fmt.Errorf("%w: %v waiting for operations in flight", ErrCleanupPending, s.closeTimeout)
		}
	}
	return s.teardown()
}

// CleanupPending reports whether a Close (or a failed Open) left resources
// that a later Close will release.
func (s *Store) CleanupPending() bool {
	s.gate.Lock()
	closing := s.gate.closing
	s.gate.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return closing && !s.mu.done.Done()
}

// teardown runs the remaining teardown steps (see Close).
func (s *Store) teardown() error {
	s.gate.Lock()
	s.gate.closing = true
	s.gate.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	const (
		closePool   = "close provider pool"
		closeMaps   = "close mapping cache"
		closeXfer   = "close transfer engine"
		unregister  = "unregister buffers"
		freeStaging = "free staging buffer"
		releaseCtx  = "release context"
	)
	err := s.mu.done.Run(
		teardown.Step{Name: "join pipeline workers", Do: func() error {
			s.workers.Wait() // each ends after its last call, which has returned
			return nil
		}},
		teardown.Step{Name: "release views", Do: func() error {
			for _, v := range s.keeper.stop() {
				v.Release() // the caller's kernels reading them are done (Views' contract)
			}
			return nil
		}},
		teardown.Step{Name: "stop lease releases", Do: func() error {
			s.rel.stop() // sends what is queued while the master is there
			return nil
		}},
		teardown.Step{Name: "stop heartbeats", Do: func() error {
			if s.hbStop != nil {
				close(s.hbStop)
				<-s.hbDone
				s.hbStop = nil
			}
			return nil
		}},
		teardown.Step{Name: closePool, Do: s.closePoolLocked},
		teardown.Step{Name: "close fd exchange", Needs: []string{closePool}, Do: s.closeFDExchangeLocked},
		teardown.Step{Name: closeMaps, Do: s.closeMapsLocked},
		teardown.Step{Name: closeXfer, Do: s.closeXferLocked},
		teardown.Step{Name: unregister, Do: s.unregisterAllLocked},
		teardown.Step{Name: freeStaging, Do: s.freeStagingLocked},
		teardown.Step{Name: "end registration", Needs: []string{closePool}, Do: s.endRegistrationLocked},
		teardown.Step{Name: "close master", Needs: []string{closePool}, Do: s.closeMasterLocked},
		teardown.Step{Name: releaseCtx, Needs: []string{closePool, closeMaps, closeXfer, unregister, freeStaging}, Do: s.releaseCtxLocked},
		teardown.Step{Name: "close driver", Needs: []string{releaseCtx}, Do: s.closeDriverLocked},
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCleanupPending, err)
	}
	return nil
}

// endRegistrationLocked ends this client's registration (Close step 8).
// Best effort: if the master cannot be reached the registration ends by
// its TTL, and Close goes on (it must not hang on a master that is gone).
func (s *Store) endRegistrationLocked() error {
	if s.m == nil || s.hbDone == nil {
		return nil // never registered
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.m.UnregisterClient(ctx, s.clientID); err != nil && !errors.Is(err, master.ErrUnknownClient) {
		s.log.Warn("kvfabric could not end its registration; it ends at its TTL", "client", s.clientID, "err", err)
	}
	return nil
}

// closeFDExchangeLocked closes the fd-exchange server (Close step 4).
func (s *Store) closeFDExchangeLocked() error {
	if s.fds != nil {
		return s.fds.Close()
	}
	return nil
}

// closeMapsLocked closes the mapping cache (Close step 5).
func (s *Store) closeMapsLocked() error {
	if s.maps != nil {
		return s.maps.Close()
	}
	return nil
}

// closeXferLocked closes the transfer engine (Close step 6).
func (s *Store) closeXferLocked() error {
	if s.xfer != nil {
		return s.xfer.Close()
	}
	return nil
}

// freeStagingLocked frees the staging buffer (Close step 7).
func (s *Store) freeStagingLocked() error {
	if s.staging != nil {
		return s.staging.free(s.drv, s.cctx)
	}
	return nil
}

// closeMasterLocked closes the master client and the embedded master, when
// this Store owns them (Close step 8).
func (s *Store) closeMasterLocked() error {
	if s.m == nil || !s.ownMaster {
		return nil
	}
	var err error
	if cerr := s.m.Close(); cerr != nil {
		err = cerr
	}
	if s.svc != nil {
		if cerr := s.svc.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// releaseCtxLocked releases the primary context (Close step 9).
func (s *Store) releaseCtxLocked() error {
	if s.ctxHeld {
		if err := s.drv.PrimaryCtxRelease(s.dev); err != nil {
			return err
		}
		s.ctxHeld = false
	}
	return nil
}

// closeDriverLocked closes the driver this Store opened (Close step 9).
func (s *Store) closeDriverLocked() error {
	if s.drv != nil && s.ownDriver {
		return s.drv.Close()
	}
	return nil
}

// closePoolLocked closes the provider pool. While readers hold leases on
// objects in its segments the master refuses the unmount (and drains the
// segment: no new leases or puts land there); the memory must not go away
// under their copies, so Close retries until the leases have expired. It
// retries the same way while the master cannot be reached (down,
// restarting, partitioned): the teardown finishes once it is back. Both
// are bounded by the close timeout, which also bounds each unmount call.
// At the timeout an ExitOnClose Store abandons the unmounts and releases
// the memory (see Options.ExitOnClose); any other keeps it all and fails
// with the pool's error, for a later Close to retry.
func (s *Store) closePoolLocked() error {
	closePool := func() error {
		if s.pool != nil {
			return s.pool.Close()
		}
		if s.poolUnwind != nil {
			if err := s.poolUnwind.Retry(); err != nil {
				return err
			}
			s.poolUnwind = nil
		}
		return nil
	}
	if s.pool == nil && s.poolUnwind == nil {
		return nil
	}
	deadline := time.Now().Add(s.closeTimeout)
	if s.mnt != nil {
		s.mnt.deadline.Store(deadline.UnixNano())
		defer s.mnt.deadline.Store(0)
	}
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := closePool()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left > 0 && retryableUnmount(err) {
			s.log.Info("kvfabric provider teardown: unmount refused or master unreachable; retrying",
				"client", s.clientID, "attempt", attempt, "left", left.Round(time.Millisecond), "err", err)
			time.Sleep(min(wait, left))
			wait = min(2*wait, time.Second)
			continue
		}
		if !s.exitOnClose || s.mnt == nil {
			return err
		}
		// The process exits next, which frees the memory whatever the
		// master says: do it here, in order, and remove the socket.
		s.mnt.abandon.Store(true)
		aerr := closePool()
		s.log.Warn("kvfabric provider teardown: unmounts abandoned after the close timeout; the master drops the segments when this client's registration expires",
			"client", s.clientID, "close_timeout", s.closeTimeout, "segments", s.mnt.abandoned.Load(), "last_err", err)
		return aerr
	}
}

// retryableUnmount reports whether every failure in a pool teardown error
// is one that a later attempt can get past: an unmount refused while
// leases or puts are outstanding, or a master that could not be reached
// or answered too late.
func retryableUnmount(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !retryableUnmount(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return errors.Is(err, master.ErrHasLease) || errors.Is(err, master.ErrClosed) ||
		errors.Is(err, master.ErrNotLeader) || errors.Is(err, master.ErrStaleEpoch) ||
		errors.Is(err, context.DeadlineExceeded) || isTransport(err)
}

// mounter is the pool's Mounter. An unmount of a segment the master no
// longer has with this generation is done already: the master dropped it
// when this client's registration expired or when it restarted, or the id
// now names another allocation. Reporting it as a failure would make every
// Close retry it forever and never release the memory.
//
// During Close, deadline bounds every unmount call, and abandon (an
// ExitOnClose Store past its close timeout) makes them succeed without the
// master. Both are atomic: the pool calls from Close's goroutine, which
// sets them.
type mounter struct {
	master.Client
	log       *slog.Logger
	deadline  atomic.Int64 // unix ns; 0: none
	abandon   atomic.Bool
	abandoned atomic.Int32 // unmounts abandoned
}

func (m *mounter) UnmountSegment(ctx context.Context, k segment.Key) error {
	if m.abandon.Load() {
		m.abandoned.Add(1)
		m.log.Debug("kvfabric segment left to expire at the master", "segment", k.String())
		return nil
	}
	if d := m.deadline.Load(); d != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, d))
		defer cancel()
	}
	err := m.Client.UnmountSegment(ctx, k)
	if errors.Is(err, master.ErrUnknownSegment) || errors.Is(err, master.ErrGenerationMismatch) {
		m.log.Info("kvfabric segment already unmounted at the master", "segment", k.String(), "reason", err)
		return nil
	}
	return err
}

// sanitize makes an id usable in segment ids and socket names.
func sanitize(id string) string {
	b := []byte(id)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// mapErr translates master errors into the client's sentinels, keeping the
// original in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch {
	case errors.Is(err, master.ErrNotFound):
		sentinel = ErrNotFound
	case errors.Is(err, master.ErrAlreadyExists):
		sentinel = ErrAlreadyExists
	case errors.Is(err, master.ErrNoSpace):
		sentinel = ErrNoSpace
	case errors.Is(err, master.ErrHasLease), errors.Is(err, master.ErrWrongState):
		// Leased, or a put of it still in progress: busy, retry later.
		sentinel = ErrHasLease
	case errors.Is(err, master.ErrUnknownClient):
		// Our registration expired (missed heartbeats): the master has
		// forgotten this client.
		sentinel = ErrRPC
	case errors.Is(err, master.ErrInvalid):
		sentinel = ErrInvalidArgument
	case errors.Is(err, master.ErrPermission), errors.Is(err, master.ErrUnauthenticated):
		sentinel = ErrPermission
	case errors.Is(err, master.ErrQuota):
		// The caller's own share of the store is full.
		sentinel = ErrNoSpace
	case errors.Is(err, master.ErrClosed), errors.Is(err, master.ErrNotLeader), errors.Is(err, master.ErrStaleEpoch):
		// No master answered for the current term (a failover).
		sentinel = ErrRPC
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	default:
		if isTransport(err) {
			sentinel = ErrRPC
		}
	}
	if sentinel == nil || errors.Is(err, sentinel) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// segmentOf identifies the segment a replica lives on.
func segmentOf(r master.Replica) segment.Key { return r.Segment.Key() }

// timeNow is the clock of the lease, put-deadline and registration checks:
// time.Now, unless a test has set another (export_test.go's SetTimeNow).
// Tests set it while the Stores' goroutines (heartbeats, pipelines) read
// it, so it is an atomic load, not a variable a test writes.
func timeNow() time.Time {
	if f := clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// clock is the test clock timeNow uses, nil for time.Now.
var clock atomic.Pointer[func() time.Time]

// MappingStats reports the consumer mapping cache's counters (imports, the
// time they took, hits).
func (s *Store) MappingStats() mapping.Stats { return s.maps.Stats() }

// MergedCopies is the number of copies the Store's batches folded into the
// copy before them (an object whose bytes continue the previous object's
// on both sides) since Open; 0 with Options.SeparateCopies.
func (s *Store) MergedCopies() uint64 { return s.mergedCopies.Load() }
