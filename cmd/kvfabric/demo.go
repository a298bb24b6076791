package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/choose"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

type demoOpts struct {
	driver    string
	egm       bool
	capacity  string
	maxMR     string
	block     string
	count     int
	batch     int
	numa      string
	device    int
	consumer  int
	handle    string
	verbose   bool
	seed      uint64
	rounds    int
	socketDir string
	master    string
	// sec reaches a remote master (the security flags).
	sec master.ClientSecurity
}

func init() {
	var o demoOpts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Embedded master + provider + consumer: put and get random blocks, verify every byte",
		Long: `demo runs the whole store in one process: an embedded master, a provider
that mounts its capacity (the EGM HOST_NUMA DRAM pool, or HBM segments with
--egm=false), and a consumer that puts N random blocks from its GPU buffer into
the store and gets them back into a second buffer, through the consumer's
mapping cache and transfer engine (the provider's segments are imported by
POSIX fd or fabric handle, as a separate process would). Every round puts
fresh bytes, gets them into a poisoned buffer and verifies every byte. It
uses real CUDA when a GPU is present and the simulator otherwise, and says
which.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.sec = clientSecurity(cmd)
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	addSecurityFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.driver, "driver", "auto", "auto|cuda|sim")
	f.BoolVar(&o.egm, "egm", true, "provide EGM HOST_NUMA DRAM (false: HBM segments)")
	f.StringVar(&o.capacity, "capacity", "512MiB", "capacity the provider mounts (global_segment_size)")
	f.StringVar(&o.maxMR, "max-mr-size", "128MiB", "largest chunk (one allocation = one segment)")
	f.StringVar(&o.numa, "egm-numa-nodes", "auto", `host NUMA nodes: "auto" or a list like "0,2"`)
	f.StringVar(&o.handle, "handle-type", "auto", "auto|fabric|posix_fd")
	f.StringVar(&o.block, "block", "64KiB", "block size")
	f.IntVar(&o.count, "count", 1024, "number of blocks")
	f.IntVar(&o.batch, "batch", 128, "blocks per BatchPut/BatchGet")
	f.IntVar(&o.device, "device", 0, "provider's GPU")
	f.IntVar(&o.consumer, "consumer-device", 0, "consumer's GPU")
	f.IntVar(&o.rounds, "rounds", 3, "put/get rounds, each with fresh bytes and verified byte for byte: the first imports the segments; the rest are timed as steady state")
	f.Uint64Var(&o.seed, "seed", 0, "random seed (0: time-based)")
	f.StringVar(&o.socketDir, "socket-dir", "", "directory of the fd-exchange socket (default $TMPDIR)")
	f.BoolVar(&o.verbose, "verbose", false, "log lifecycle events to stderr")
	f.StringVar(&o.master, "master-server-addr", "embedded", "embedded (master + provider + consumer here), or host:port of a `kvfabric master` (consumer only: the capacity comes from `kvfabric provider` processes)")
	rootCmd.AddCommand(cmd)
}

func runDemo(ctx context.Context, out io.Writer, o demoOpts) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	blk, err := config.ParseSize(o.block)
	if err != nil || blk == 0 {
		return fmt.Errorf("--block=%q: want a size like 64KiB", o.block)
	}
	if o.count <= 0 || o.batch <= 0 || o.rounds <= 0 {
		return fmt.Errorf("--count=%d --batch=%d --rounds=%d: must be > 0", o.count, o.batch, o.rounds)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	drv, why, err := choose.ProviderDriver(o.driver, log) // the demo provides capacity
	if err != nil {
		return fmt.Errorf("--driver=%s: %w", o.driver, err)
	}
	defer func() { err = errors.Join(err, drv.Close()) }()
	return runDemoOn(ctx, out, drv, why, log, blk, o)
}

// runDemoOn is runDemo on drv (chosen for the reason why) with blocks of
// blk bytes and o validated; the caller owns and closes drv.
func runDemoOn(ctx context.Context, out io.Writer, drv cuda.Driver, why string, log *slog.Logger, blk uint64, o demoOpts) (err error) {
	kind := "simulator"
	if drv.Name() == "cuda" {
		kind = "CUDA"
	}
	fmt.Fprintf(out, "kvfabric demo: driver %s — %s\n", kind, why)
	before := liveObjects(drv)

	remote := o.master != config.MasterEmbedded
	var mc master.Client
	if remote {
		// Consumer only: capacity comes from `kvfabric provider` processes.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		mc, err = dialWith(dctx, o.master, o.sec)
		cancel()
		if err != nil {
			return err
		}
	} else {
		// The embedded master both stores share. A short lease: the
		// provider's Close waits for the readers' leases to end.
		svc, err := master.New(master.Config{Logger: log, LeaseTTL: 2 * time.Second})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, svc.Close()) }()
		mc = master.NewEmbedded(svc)
	}
	defer func() { err = errors.Join(err, mc.Close()) }()

	base := map[string]any{
		"protocol": "nvlink", "driver": o.driver, "handle_type": o.handle,
		"max_mr_size": o.maxMR, "egm_numa_nodes": o.numa,
	}
	if o.socketDir != "" {
		base["socket_dir"] = o.socketDir
	}
	provCfg := map[string]any{"global_segment_size": o.capacity, "enable_egm_store_pool": o.egm, "device": o.device}
	consCfg := map[string]any{"device": o.consumer}
	for k, v := range base {
		provCfg[k], consCfg[k] = v, v
	}
	pc, err := config.FromMap(provCfg)
	if err != nil {
		return err
	}
	cc, err := config.FromMap(consCfg)
	if err != nil {
		return err
	}

	var prov *client.Store
	if !remote {
		bar := newProgressBar(out, false)
		prov, err = client.Open(ctx, pc, client.Options{Logger: log, Driver: drv, Master: mc, ClientID: "demo-provider", Progress: bar.update})
		bar.done()
		if err != nil {
			return fmt.Errorf("provider: %w", err)
		}
		defer func() {
			if prov != nil {
				err = errors.Join(err, prov.Close())
			}
		}()
	}
	consID := "demo-consumer"
	if remote {
		consID = fmt.Sprintf("demo-consumer-%s-gpu%d-%d", pc.LocalHostname, o.consumer, os.Getpid())
	}
	cons, err := client.Open(ctx, cc, client.Options{Logger: log, Driver: drv, Master: mc, ClientID: consID})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer func() {
		if cons != nil {
			err = errors.Join(err, cons.Close())
		}
	}()

	segs, err := mc.ListSegments(ctx)
	if err != nil {
		return err
	}
	if prov != nil {
		fmt.Fprintf(out, "provider: %s of %s over %s\n", config.FormatSize(pc.GlobalSegmentSize), tierName(o.egm), prov.Pool().Plan().String())
	}

	// Consumer buffers on its GPU: src (random bytes), dst, and one block
	// of poison that clears dst before every get round.
	cctx := cons.Context()
	size := blk * uint64(o.count)
	src, err := drv.MemAlloc(cctx, size)
	if err != nil {
		return fmt.Errorf("consumer buffer of %d bytes: %w", size, err)
	}
	defer func() {
		if src != 0 {
			err = errors.Join(err, drv.MemFree(cctx, src))
		}
	}()
	dst, err := drv.MemAlloc(cctx, size)
	if err != nil {
		return fmt.Errorf("consumer buffer of %d bytes: %w", size, err)
	}
	defer func() {
		if dst != 0 {
			err = errors.Join(err, drv.MemFree(cctx, dst))
		}
	}()
	poison, err := drv.MemAlloc(cctx, blk)
	if err != nil {
		return fmt.Errorf("consumer buffer of %d bytes: %w", blk, err)
	}
	defer func() {
		if poison != 0 {
			err = errors.Join(err, drv.MemFree(cctx, poison))
		}
	}()
	clearDst := make([]cuda.Copy, o.count) // every dst block <- poison, one crossing
	for i := range clearDst {
		clearDst[i] = cuda.Copy{Dst: dst + cuda.DevicePtr(uint64(i)*blk), Src: poison, Len: blk}
	}
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b7666))
	want := make([]byte, size)
	got := make([]byte, size)
	poisonBlk := make([]byte, blk)

	// Every round puts fresh random bytes under fresh keys, gets them back
	// into a dst poisoned with that round's byte, and verifies every byte,
	// so a put or get that copies nothing fails in whichever round it
	// happens. Round 1 also maps the store's segments on first use (import +
	// map, reported below); later rounds measure the steady state. Timing
	// covers the puts and gets only.
	var putDur, getDur, put0, get0 time.Duration
	var put1Ph, get1Ph client.PhaseStats
	var moved uint64
	for round := 1; round <= o.rounds; round++ {
		fillRandom(rng, want)
		if err := drv.MemcpyHtoD(cctx, src, want); err != nil {
			return fmt.Errorf("round %d: fill source: %w", round, err)
		}
		keys := make([]string, o.count)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/r%d/block-%06d", consID, round, i)
		}
		order := rng.Perm(o.count) // random block order: random segments and offsets
		t0 := time.Now()
		for b := 0; b < o.count; b += o.batch {
			ks, rs := demoBatch(keys, order[b:min(b+o.batch, o.count)], src, blk)
			for j, e := range cons.BatchPut(ctx, ks, rs, 0, client.PutOptions{}) {
				if e != nil {
					return fmt.Errorf("round %d: put %s: %w", round, ks[j], e)
				}
			}
		}
		if round == 1 {
			put0 = time.Since(t0)
		} else {
			putDur += time.Since(t0)
		}

		pb := poisonByte(round)
		for i := range poisonBlk {
			poisonBlk[i] = pb
		}
		if err := drv.MemcpyHtoD(cctx, poison, poisonBlk); err != nil {
			return fmt.Errorf("round %d: poison: %w", round, err)
		}
		if err := drv.MemcpyAsync(cctx, clearDst, 0); err != nil {
			return fmt.Errorf("round %d: clear destination: %w", round, err)
		}
		if err := drv.StreamSynchronize(cctx, 0); err != nil {
			return fmt.Errorf("round %d: clear destination: %w", round, err)
		}
		t0 = time.Now()
		for b := 0; b < o.count; b += o.batch {
			ks, rs := demoBatch(keys, order[b:min(b+o.batch, o.count)], dst, blk)
			sizes, errs := cons.BatchGet(ctx, ks, rs, 0)
			for j, e := range errs {
				if e != nil {
					return fmt.Errorf("round %d: get %s: %w", round, ks[j], e)
				}
				if sizes[j] != blk {
					return fmt.Errorf("round %d: get %s: %d bytes, want %d", round, ks[j], sizes[j], blk)
				}
			}
		}
		if round == 1 {
			get0 = time.Since(t0)
			// Phases are reported for the steady state: the first round's
			// include the segment imports.
			put1Ph, get1Ph = cons.Phases()
		} else {
			getDur += time.Since(t0)
		}
		moved += 2 * size

		if err := drv.MemcpyDtoH(cctx, got, dst); err != nil {
			return fmt.Errorf("round %d: read back: %w", round, err)
		}
		if i, ok := firstDiff(got, want); !ok {
			b := i / blk
			return &verifyError{round: round, rounds: o.rounds, key: keys[b], block: b, offset: i % blk, got: got[i], want: want[i], poison: pb}
		}
		for i, e := range cons.BatchRemove(ctx, keys, true) {
			if e != nil {
				return fmt.Errorf("round %d: remove %s: %w", round, keys[i], e)
			}
		}
	}
	st := cons.TransferStats()
	merged := cons.MergedCopies()
	ms := cons.MappingStats()
	putPh, getPh := cons.Phases()
	if o.rounds > 1 {
		putPh, getPh = putPh.Sub(put1Ph), getPh.Sub(get1Ph)
	}

	// Teardown, then check nothing is left.
	if err := errors.Join(drv.MemFree(cctx, src), drv.MemFree(cctx, dst), drv.MemFree(cctx, poison)); err != nil {
		return err
	}
	src, dst, poison = 0, 0, 0
	if err := cons.Close(); err != nil {
		return fmt.Errorf("consumer close: %w", err)
	}
	cons = nil
	var left []segment.Descriptor
	if prov != nil {
		if err := prov.Close(); err != nil {
			return fmt.Errorf("provider close: %w", err)
		}
		prov = nil
		if left, err = mc.ListSegments(ctx); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "driver\t%s (%s)\n", kind, why)
	if remote {
		fmt.Fprintf(tw, "master\t%s (consumer on GPU %d)\n", o.master, o.consumer)
		fmt.Fprintf(tw, "store\t%d segments\n", len(segs))
	} else {
		fmt.Fprintf(tw, "provider tier\t%s, %d segments\n", tierName(o.egm), len(segs))
	}
	for _, l := range perLocation(segs) {
		fmt.Fprintf(tw, "  %s\t%d segments, %s\n", l.name, l.n, config.FormatSize(l.bytes))
	}
	fmt.Fprintf(tw, "blocks\t%d x %s, batch %d, %d rounds\n", o.count, config.FormatSize(blk), o.batch, o.rounds)
	fmt.Fprintf(tw, "verified\t%s in each of %d rounds, byte-exact\n", config.FormatSize(size), o.rounds)
	fmt.Fprintf(tw, "bytes moved\t%s\n", config.FormatSize(moved))
	fmt.Fprintf(tw, "first round\tput %.2f GB/s, get %.2f GB/s (includes segment imports)\n", gbps(size, put0), gbps(size, get0))
	if o.rounds > 1 {
		fmt.Fprintf(tw, "put (GPU -> store)\t%.2f GB/s steady state (%d rounds)\n", gbps(size*uint64(o.rounds-1), putDur), o.rounds-1)
		fmt.Fprintf(tw, "get (store -> GPU)\t%.2f GB/s steady state (%d rounds)\n", gbps(size*uint64(o.rounds-1), getDur), o.rounds-1)
	}
	fmt.Fprintf(tw, "copies\tSM kernel %d blocks in %d launches, copy engine %d blocks in %d batches, per-copy %d; %d blocks merged into the one before (random block order: few continue one another)\n",
		st.KernelBlocks, st.KernelLaunches, st.BatchBlocks, st.BatchCalls, st.EachBlocks, merged)
	for _, p := range []struct {
		name string
		ph   client.PhaseStats
	}{{"put phases", putPh}, {"get phases", getPh}} {
		if p.ph.Calls == 0 {
			continue
		}
		per := func(d time.Duration) string {
			return fmt.Sprintf("%.2fus", float64(d.Nanoseconds())/1e3/float64(p.ph.Keys))
		}
		steady := ""
		if o.rounds > 1 {
			steady = ", steady state"
		}
		fmt.Fprintf(tw, "%s\tper key: check %s, master %s, resolve %s, copy %s (%d batches%s); inside the master's calls %s, blocked on copies %s, put end %s\n",
			p.name, per(p.ph.Check), per(p.ph.Meta), per(p.ph.Resolve), per(p.ph.Copy), p.ph.Calls, steady, per(p.ph.Master), per(p.ph.Wait), per(p.ph.End))
	}
	if ms.Imports > 0 {
		fmt.Fprintf(tw, "segment imports\t%d, mean %.2f ms (fetch handle + import + map + access); cached lookups %d\n",
			ms.Imports, float64(ms.ImportTime.Microseconds())/1000/float64(ms.Imports), ms.Hits)
	} else {
		fmt.Fprintf(tw, "segment imports\t0 (every segment is the provider's own mapping)\n")
	}
	if !remote {
		fmt.Fprintf(tw, "after teardown\t%d segments mounted\n", len(left))
	}
	tw.Flush()
	if len(left) != 0 {
		return fmt.Errorf("teardown left %d segments mounted", len(left))
	}
	if after := liveObjects(drv); after != nil && after.Total() != before.Total() {
		return fmt.Errorf("teardown left driver objects: before %s, after %s", fmtObjects(before), fmtObjects(after))
	}
	fmt.Fprintln(out, "demo: OK")
	return nil
}

// demoBatch is one batch: the keys of blocks idx and their regions in buf
// (block i lives at buf + i*blk).
func demoBatch(keys []string, idx []int, buf cuda.DevicePtr, blk uint64) ([]string, [][]client.Region) {
	ks := make([]string, len(idx))
	rs := make([][]client.Region, len(idx))
	for j, i := range idx {
		ks[j] = keys[i]
		rs[j] = client.Bytes(uintptr(buf)+uintptr(uint64(i)*blk), blk)
	}
	return ks, rs
}

func tierName(egm bool) string {
	if egm {
		return "DRAM (EGM HOST_NUMA pool)"
	}
	return "HBM"
}

type locSummary struct {
	name  string
	n     int
	bytes uint64
}

func perLocation(segs []segment.Descriptor) []locSummary {
	m := map[string]*locSummary{}
	for _, d := range segs {
		name := fmt.Sprintf("%s numa %d", d.Tier, d.Location)
		if d.Tier == segment.TierHBM {
			name = fmt.Sprintf("%s gpu %d", d.Tier, d.Location)
		}
		l := m[name]
		if l == nil {
			l = &locSummary{name: name}
			m[name] = l
		}
		l.n++
		l.bytes += d.Size
	}
	out := make([]locSummary, 0, len(m))
	for _, l := range m {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func gbps(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e9
}

// verifyError is a round whose bytes came back different from those put.
type verifyError struct {
	round, rounds int    // 1-based round of rounds
	key           string // the block's key; "" in bench, which has none
	block         uint64 // block index in the buffer
	offset        uint64 // first differing byte within the block
	got, want     byte
	poison        byte // what the destination held before the get
}

func (e *verifyError) Error() string {
	what := fmt.Sprintf("block %d", e.block)
	if e.key != "" {
		what = fmt.Sprintf("key %s (block %d)", e.key, e.block)
	}
	s := fmt.Sprintf("verify round %d of %d: %s: first difference at byte %d of the block: got %#02x want %#02x",
		e.round, e.rounds, what, e.offset, e.got, e.want)
	if e.got == e.poison {
		s += " (the poison the destination held before the get: was the block copied at all?)"
	}
	return s
}

// firstDiff returns the index of the first byte where got and want (of equal
// length) differ, and ok when there is none.
func firstDiff(got, want []byte) (i uint64, ok bool) {
	if bytes.Equal(got, want) {
		return 0, true
	}
	for i := range got {
		if got[i] != want[i] {
			return uint64(i), false
		}
	}
	return uint64(len(got)), false
}

// fillRandom fills b from rng, eight bytes per draw.
func fillRandom(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	if len(b) > 0 {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], rng.Uint64())
		copy(b, t[:])
	}
}

// poisonByte is what destinations hold before the gets of round r. It
// changes every round, so a block that a get skipped shows this round's
// poison rather than a byte some earlier round left.
func poisonByte(r int) byte { return byte(0xa5 + 0x3b*r) }
