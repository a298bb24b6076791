package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/pool"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// poolFlags maps each `kvfabric pool` flag to its configuration key.
var poolFlags = []struct{ flag, key, usage string }{
	{"global-segment-size", "global_segment_size", "capacity to provide, e.g. 16GiB"},
	{"enable-egm-store-pool", "enable_egm_store_pool", "provide HOST_NUMA DRAM (EGM pool) instead of HBM"},
	{"egm-numa-nodes", "egm_numa_nodes", `host NUMA nodes: "auto" or a list like "0,2"`},
	{"max-mr-size", "max_mr_size", "largest chunk (one allocation = one segment)"},
	{"handle-type", "handle_type", "auto|fabric|posix_fd"},
	{"driver", "driver", "auto|cuda|sim"},
	{"device", "device", "CUDA device ordinal (HBM capacity lives here when the EGM pool is off)"},
	{"protocol", "protocol", "nvlink|rdma|tcp"},
	{"local-buffer-size", "local_buffer_size", "Mooncake local buffer (must be 0 with the EGM pool)"},
	{"local-hostname", "local_hostname", "host identity in segment ids"},
	{"socket-dir", "socket_dir", "directory of the posix_fd exchange socket"},
	{"client-ttl", "client_ttl", "registration TTL asked of the master, e.g. 10s (heartbeats every third of it)"},
	{"fabric-domain", "fabric_domain", `fabric (NVLink/IMEX) domain; "" is the default one`},
	{"rpc-timeout", "rpc_timeout", "bound on a master call made without a deadline, e.g. 5s"},
}

func init() {
	var configFile, owner string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Open a provider pool, print its plan and segments, close it and check that nothing is left",
		Long: `pool opens the provider capacity the configuration describes (the EGM
HOST_NUMA pool, or HBM segments when enable_egm_store_pool is off) against an
in-process recording master, prints the plan, the mounted segments per node,
the live driver objects and MemAvailable before and after, then closes it
and verifies that no driver object is left and nothing is mounted.
It exits non-zero on any failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Defaults()
			if configFile != "" {
				var err error
				if cfg, err = config.FromFile(configFile); err != nil {
					return err
				}
			}
			for _, f := range poolFlags {
				if fl := cmd.Flags().Lookup(f.flag); fl.Changed {
					if err := cfg.Set(f.key, fl.Value.String()); err != nil {
						return fmt.Errorf("--%s: %w", f.flag, err)
					}
				}
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if owner == "" {
				owner = "pool-check-" + strconv.Itoa(os.Getpid())
			}
			return runPool(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg, owner, quiet)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "JSON configuration file (flags override its keys)")
	cmd.Flags().StringVar(&owner, "owner", "", "client id in segment ids (default pool-check-<pid>)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	for _, f := range poolFlags {
		cmd.Flags().String(f.flag, "", f.usage+" (key "+f.key+")")
	}
	cmd.Flags().Lookup("enable-egm-store-pool").NoOptDefVal = "true"
	rootCmd.AddCommand(cmd)
}

func runPool(ctx context.Context, out, errOut io.Writer, cfg config.Config, owner string, quiet bool) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	drv, reason, err := choose.ProviderDriver(cfg.Driver, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, drv.Close()) }()
	fmt.Fprintf(out, "driver: %s\n", reason)
	tier := "HBM (DEVICE VMM) on device " + strconv.Itoa(cfg.Device)
	if cfg.EGMEnabled() {
		tier = "DRAM (HOST_NUMA VMM, EGM pool), egm_numa_nodes=" + cfg.NUMANodesString()
	}
	fmt.Fprintf(out, "config: global_segment_size=%s max_mr_size=%s handle_type=%s tier=%s\n",
		config.FormatSize(cfg.GlobalSegmentSize), config.FormatSize(cfg.MaxMRSize), cfg.HandleType, tier)

	fds, err := fdx.Listen(cfg.SocketDir, "kvfabric-pool-"+strconv.Itoa(os.Getpid()), log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, fds.Close()) }()
	mnt := newRecordingMounter()

	liveBefore := liveObjects(drv)
	memBefore := memAvailable()
	fmt.Fprintf(out, "before: MemAvailable %s, live driver objects %s\n", fmtMem(memBefore), fmtObjects(liveBefore))

	bar := newProgressBar(errOut, quiet)
	t0 := time.Now()
	p, err := pool.Open(ctx, drv, cfg, pool.Deps{Mounter: mnt, FDs: fds, Logger: log, Progress: bar.update, Owner: owner})
	bar.done()
	if err != nil {
		var ue *pool.UnwindError
		if errors.As(err, &ue) {
			if rerr := ue.Retry(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("retrying the unwind: %w", rerr))
			}
		}
		after := liveObjects(drv)
		fmt.Fprintf(out, "setup failed after %v; live driver objects %s, mounted %d\n", time.Since(t0).Round(time.Millisecond), fmtObjects(after), mnt.count())
		return errors.Join(err, checkClean(liveBefore, after, mnt))
	}
	setup := time.Since(t0)
	memMounted := memAvailable()

	lay := p.Plan()
	fmt.Fprintf(out, "setup: %v, handle %s\nplan: %s\n", setup.Round(time.Millisecond), p.HandleType(), lay)
	segs := p.Segments()
	for _, n := range p.Nodes() {
		fmt.Fprintf(out, "node %s%d: %s in %d chunks, %d mounted (granularity %s)\n",
			n.Tier, n.Location, config.FormatSize(n.Bytes), n.Chunks, n.Mounted, config.FormatSize(n.Granularity))
		for _, d := range segs {
			if d.Location == n.Location {
				fmt.Fprintf(out, "  %-40s gen %#016x %8s %s mounted=%v\n", d.ID, d.Generation, config.FormatSize(d.Size), d.Handle.Kind, mnt.has(d.Key()))
			}
		}
	}
	if mnt.count() != len(segs) {
		err = errors.Join(err, fmt.Errorf("pool: %d segments but %d mounted", len(segs), mnt.count()))
	}
	liveMounted := liveObjects(drv)
	fmt.Fprintf(out, "mounted: MemAvailable %s (%s), live driver objects %s\n", fmtMem(memMounted), fmtDelta(memBefore, memMounted), fmtObjects(liveMounted))

	t1 := time.Now()
	cerr := p.Close()
	if cerr != nil {
		fmt.Fprintf(out, "close failed (cleanup pending %v): %v; retrying once\n", p.CleanupPending(), cerr)
		if rerr := p.Close(); rerr != nil {
			cerr = errors.Join(cerr, fmt.Errorf("retry: %w", rerr))
		}
	}
	bar.done()
	err = errors.Join(err, cerr)
	memAfter := memAvailable()
	liveAfter := liveObjects(drv)
	fmt.Fprintf(out, "closed: %v, MemAvailable %s (%s vs before), live driver objects %s, mounted %d\n",
		time.Since(t1).Round(time.Millisecond), fmtMem(memAfter), fmtDelta(memBefore, memAfter), fmtObjects(liveAfter), mnt.count())
	if err = errors.Join(err, checkClean(liveBefore, liveAfter, mnt)); err == nil {
		fmt.Fprintln(out, "OK: all segments mounted, then zero allocations left and nothing mounted")
	}
	return err
}

// checkClean fails unless the driver counts the same live objects as before
// the pool (zero of the pool's) and nothing is mounted.
func checkClean(before, after cuda.Objects, mnt *recordingMounter) error {
	var errs []error
	if before != nil && after != nil {
		for _, k := range []string{cuda.ObjAllocation, cuda.ObjReservation, cuda.ObjMapping, cuda.ObjExport, cuda.ObjContext} {
			if after[k] != before[k] {
				errs = append(errs, fmt.Errorf("pool: %d live %s objects after close (%d before)", after[k], k, before[k]))
			}
		}
	}
	if n := mnt.count(); n != 0 {
		errs = append(errs, fmt.Errorf("pool: %d segments still mounted after close", n))
	}
	return errors.Join(errs...)
}

// recordingMounter is an in-process stand-in for the master: it records
// mounts and refuses a double mount or an unknown unmount.
type recordingMounter struct {
	mu      sync.Mutex
	mounted map[segment.Key]segment.Descriptor
}

func newRecordingMounter() *recordingMounter {
	return &recordingMounter{mounted: map[segment.Key]segment.Descriptor{}}
}

func (m *recordingMounter) MountSegment(_ context.Context, d segment.Descriptor) error {
	if err := d.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mounted[d.Key()]; ok {
		return fmt.Errorf("recording master: %s already mounted", d.Key())
	}
	m.mounted[d.Key()] = d
	return nil
}

func (m *recordingMounter) UnmountSegment(_ context.Context, k segment.Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mounted[k]; !ok {
		return fmt.Errorf("recording master: %s not mounted", k)
	}
	delete(m.mounted, k)
	return nil
}

func (m *recordingMounter) has(k segment.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.mounted[k]
	return ok
}

func (m *recordingMounter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mounted)
}

func liveObjects(d cuda.Driver) cuda.Objects {
	oc, ok := d.(cuda.ObjectCounter)
	if !ok {
		return nil
	}
	return oc.LiveObjects()
}

func fmtObjects(o cuda.Objects) string {
	if o == nil {
		return "(not counted by this driver)"
	}
	var parts []string
	for k, n := range o {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// memAvailable is /proc/meminfo's MemAvailable in bytes (-1 if unknown):
// a driver-independent view of host DRAM. HBM is not measured here.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

func fmtMem(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return config.FormatSize(uint64(n))
}

func fmtDelta(before, after int64) string {
	if before < 0 || after < 0 {
		return "delta unknown"
	}
	if after <= before {
		return "-" + config.FormatSize(uint64(before-after))
	}
	return "+" + config.FormatSize(uint64(after-before))
}

// progressBar draws setup progress on a terminal with \r, or one line per
// tenth of each phase into a log.
type progressBar struct {
	w     io.Writer
	off   bool
	tty   bool
	phase pool.Phase
	last  int // last tenth printed (non-tty)
	drawn bool
}

func newProgressBar(w io.Writer, quiet bool) *progressBar {
	b := &progressBar{w: w, off: quiet}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.tty = true
		}
	}
	return b
}

func (b *progressBar) update(p pool.Progress) {
	if b.off || p.Total == 0 {
		return
	}
	if p.Phase != b.phase {
		if b.tty && b.drawn {
			fmt.Fprintln(b.w)
		}
		b.phase, b.last = p.Phase, -1
	}
	tenth := p.Done * 10 / p.Total
	if !b.tty && tenth == b.last {
		return
	}
	b.last = tenth
	const width = 30
	filled := p.Done * width / p.Total
	line := fmt.Sprintf("%-9s [%s%s] %d/%d chunks %s", p.Phase, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.Done, p.Total, config.FormatSize(p.Bytes))
	if b.tty {
		fmt.Fprintf(b.w, "\r%s", line)
		b.drawn = true
		return
	}
	fmt.Fprintln(b.w, line)
}

func (b *progressBar) done() {
	if b.tty && b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
