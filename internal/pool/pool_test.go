package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
	"github.com/kvfabric/kvfabric/internal/numa"
	"github.com/kvfabric/kvfabric/internal/segment"
)

var _ FDRegistry = (*fakeFDs)(nil)
var _ Mounter = (*fakeMounter)(nil)

// scenario is one simulated machine and pool configuration.
type scenario struct {
	name   string
	sim    sim.Config
	cfg    func(*config.Config)
	noFDs  bool            // Deps.FDs nil (fabric handles)
	handle cuda.HandleType // expected after resolution
	chunks int             // expected number of segments
}

func egmCfg(total, maxMR uint64, nodes []int, handle string) func(*config.Config) {
	return func(c *config.Config) {
		c.EnableEGMStorePool = true
		c.GlobalSegmentSize, c.MaxMRSize = total, maxMR
		c.EGMNUMANodes = nodes
		c.HandleType = handle
	}
}

func hbmCfg(total, maxMR uint64, dev int, handle string) func(*config.Config) {
	return func(c *config.Config) {
		c.GlobalSegmentSize, c.MaxMRSize = total, maxMR
		c.Device = dev
		c.HandleType = handle
	}
}

// scenarios covers both tiers, every handle_type resolution and a
// multi-NUMA topology with differing granularities.
func scenarios() []scenario {
	twoNodes := sim.Config{GPUs: 4, HostNUMA: []int{0, 0, 1, 1}, NodeGranularity: map[int]uint64{1: 4 * mib}}
	return []scenario{
		{name: "egm/auto-nodes/auto-handle->posix_fd", sim: sim.Config{GPUs: 2},
			cfg: egmCfg(24*mib, 8*mib, nil, "auto"), handle: cuda.HandlePosixFD, chunks: 3},
		{name: "egm/auto-nodes/auto-handle->fabric", sim: sim.Config{GPUs: 2, FabricPermitted: true},
			cfg: egmCfg(24*mib, 8*mib, nil, "auto"), noFDs: true, handle: cuda.HandleFabric, chunks: 3},
		{name: "egm/2-nodes-explicit/posix_fd", sim: twoNodes,
			cfg: egmCfg(40*mib, 8*mib, []int{0, 1}, "posix_fd"), handle: cuda.HandlePosixFD, chunks: 6},
		{name: "egm/2-nodes-auto/fabric", sim: func() sim.Config { c := twoNodes; c.FabricPermitted = true; return c }(),
			cfg: egmCfg(40*mib, 8*mib, nil, "fabric"), noFDs: true, handle: cuda.HandleFabric, chunks: 6},
		{name: "hbm/device1/auto-handle->posix_fd", sim: sim.Config{GPUs: 2},
			cfg: hbmCfg(20*mib, 8*mib, 1, "auto"), handle: cuda.HandlePosixFD, chunks: 3},
		{name: "hbm/device0/fabric", sim: sim.Config{GPUs: 2, FabricPermitted: true},
			cfg: hbmCfg(20*mib, 8*mib, 0, "fabric"), noFDs: true, handle: cuda.HandleFabric, chunks: 3},
	}
}

type harness struct {
	t    *testing.T
	drv  *sim.Driver
	m    *fakeMounter
	fds  *fakeFDs
	cfg  config.Config
	deps Deps
	log  *bytes.Buffer
}

func (s scenario) harness(t *testing.T) *harness {
	t.Helper()
	sc := s.sim
	sc.FabricRegistryDir = t.TempDir()
	drv, err := sim.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	cfg := config.Defaults()
	cfg.Driver, cfg.LocalHostname = config.DriverSim, "host-a"
	s.cfg(&cfg)
	h := &harness{t: t, drv: drv, m: newFakeMounter(), fds: newFakeFDs(), cfg: cfg, log: &bytes.Buffer{}}
	h.deps = Deps{Mounter: h.m, FDs: h.fds, Owner: "client-1", Logger: slog.New(slog.NewTextHandler(h.log, nil))}
	if s.noFDs {
		h.deps.FDs = nil
	}
	return h
}

func (h *harness) open() (*Pool, error) {
	return Open(context.Background(), h.drv, h.cfg, h.deps)
}

// finish asserts the end state of every lifecycle test: nothing mounted,
// no fd registered, no rule of the fakes broken, zero live driver objects.
func (h *harness) finish() {
	h.t.Helper()
	if n := h.m.numMounted(); n != 0 {
		h.t.Errorf("%d segments still mounted", n)
	}
	if err := h.m.check(); err != nil {
		h.t.Error(err)
	}
	if err := h.fds.check(); err != nil {
		h.t.Error(err)
	}
	simtest.AssertNoLeaks(h.t, h.drv)
}

// teardownMethods release driver objects; a successful call of one of them
// with the same arguments twice would be a repeated step.
var teardownMethods = map[string]bool{"MemUnmap": true, "MemAddressFree": true, "MemRelease": true, "PrimaryCtxRelease": true}

func noRepeatedSteps(t *testing.T, calls []sim.Call) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range calls {
		if teardownMethods[c.Method] && c.Result == cuda.Success {
			seen[c.Method+"("+c.Args+")"]++
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("step repeated %d times: %s", n, k)
		}
	}
}

func TestOpenClose(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			h := s.harness(t)
			var progress []Progress
			h.deps.Progress = func(p Progress) { progress = append(progress, p) }
			p, err := h.open()
			if err != nil {
				t.Fatal(err)
			}
			if p.HandleType() != s.handle {
				t.Errorf("handle %v, want %v", p.HandleType(), s.handle)
			}
			segs := p.Segments()
			if len(segs) != s.chunks || h.m.numMounted() != s.chunks {
				t.Fatalf("%d segments, %d mounted; want %d", len(segs), h.m.numMounted(), s.chunks)
			}
			wantTier := segment.TierHBM
			if h.cfg.EGMEnabled() {
				wantTier = segment.TierDRAM
			}
			gens := map[uint64]bool{}
			idx := map[int32]int{}
			var sum uint64
			for _, d := range segs {
				if err := d.Validate(); err != nil {
					t.Error(err)
				}
				want := fmt.Sprintf("host-a/client-1/%s%d/%d", wantTier, d.Location, idx[d.Location])
				idx[d.Location]++
				if d.ID != want || d.Node != "host-a" || d.Owner != "client-1" || d.Tier != wantTier {
					t.Errorf("descriptor %+v; want id %q", d, want)
				}
				if d.Generation == 0 || gens[d.Generation] {
					t.Errorf("generation %#x zero or repeated", d.Generation)
				}
				gens[d.Generation] = true
				if got := h.m.mounted[d.Key()]; got != d {
					t.Errorf("mounted descriptor %+v differs from %+v", got, d)
				}
				switch s.handle {
				case cuda.HandleFabric:
					if d.Handle.Kind != segment.HandleFabric || d.Handle.Fabric == ([64]byte{}) {
						t.Errorf("%s: fabric handle missing", d.ID)
					}
				case cuda.HandlePosixFD:
					if _, ok := h.fds.fd(d.Key()); d.Handle.Kind != segment.HandlePosixFD || d.Handle.SocketPath != h.fds.SocketPath() || !ok {
						t.Errorf("%s: posix fd handle %+v, registered %v", d.ID, d.Handle, ok)
					}
				}
				ptr, err := p.DevicePtr(d.Key())
				if err != nil || ptr == 0 {
					t.Errorf("DevicePtr(%s) = %#x, %v", d.Key(), ptr, err)
				}
				sum += d.Size
			}
			if sum != p.Plan().Total || p.Plan().Total != h.cfg.GlobalSegmentSize/p.Plan().Alignment*p.Plan().Alignment {
				t.Errorf("segments sum to %d, plan %+v", sum, p.Plan())
			}
			live := h.drv.LiveObjects()
			if live[cuda.ObjAllocation] != s.chunks || live[cuda.ObjMapping] != s.chunks || live[cuda.ObjReservation] != s.chunks {
				t.Errorf("live objects %s", simtest.FormatObjects(live))
			}
			// Progress: every setup phase reports every chunk, in order.
			var phases []Phase
			for _, pr := range progress {
				if pr.Total != s.chunks {
					t.Fatalf("progress %+v", pr)
				}
				if pr.Done == pr.Total {
					phases = append(phases, pr.Phase)
				}
			}
			if fmt.Sprint(phases) != fmt.Sprint([]Phase{PhaseAllocate, PhaseMap, PhaseExport, PhaseMount}) {
				t.Errorf("phases %v", phases)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if p.CleanupPending() {
				t.Error("cleanup pending after a successful Close")
			}
			if _, err := p.DevicePtr(segs[0].Key()); !errors.Is(err, ErrClosed) {
				t.Errorf("DevicePtr after Close: %v", err)
			}
			n := h.drv.CallCount("")
			if err := p.Close(); err != nil || h.drv.CallCount("") != n {
				t.Errorf("second Close: %v, %d driver calls", err, h.drv.CallCount("")-n)
			}
			noRepeatedSteps(t, h.drv.Calls())
			h.finish()
		})
	}
}

// TestSetupFaults fails every driver call of setup in turn: each failure
// unwinds everything, leaving zero live objects and nothing mounted.
func TestSetupFaults(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			h := s.harness(t)
			p, err := h.open()
			if err != nil {
				t.Fatal(err)
			}
			n := h.drv.CallCount("")
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			for k := 1; k <= n; k++ {
				t.Run(fmt.Sprintf("call%d", k), func(t *testing.T) {
					h := s.harness(t)
					h.drv.FailAny(k, cuda.ErrorUnknown)
					p, err := h.open()
					if err == nil || p != nil {
						t.Fatalf("Open succeeded with call %d failing (%v)", k, h.drv.Calls()[k-1])
					}
					if !errors.Is(err, cuda.ErrorUnknown) {
						t.Fatalf("error %v does not carry the injected failure", err)
					}
					var ue *UnwindError
					if errors.As(err, &ue) {
						t.Fatalf("unwinding failed: %v", err)
					}
					if c := h.drv.Calls()[k-1]; !c.Injected {
						t.Fatalf("call %d not the injected one: %v", k, c)
					}
					noRepeatedSteps(t, h.drv.Calls())
					h.finish()
				})
			}
		})
	}
}

// TestTeardownFaults fails every driver call of Close in turn: the failed
// step keeps the rest owned, a second Close finishes without repeating a
// step, a third does nothing.
func TestTeardownFaults(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			h := s.harness(t)
			p, err := h.open()
			if err != nil {
				t.Fatal(err)
			}
			h.drv.ResetCalls()
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			n := h.drv.CallCount("")
			for k := 1; k <= n; k++ {
				t.Run(fmt.Sprintf("call%d", k), func(t *testing.T) {
					h := s.harness(t)
					p, err := h.open()
					if err != nil {
						t.Fatal(err)
					}
					h.drv.ResetCalls()
					h.drv.FailAny(k, cuda.ErrorUnknown)
					err = p.Close()
					if !errors.Is(err, cuda.ErrorUnknown) {
						t.Fatalf("Close with call %d failing: %v", k, err)
					}
					if !p.CleanupPending() {
						t.Error("CleanupPending false after a failed Close")
					}
					failed := h.drv.Calls()[k-1]
					if !failed.Injected {
						t.Fatalf("call %d not the injected one: %v", k, failed)
					}
					live := h.drv.LiveObjects()
					if live.Total() == 0 {
						t.Fatalf("nothing left owned after %v failed", failed)
					}
					// The failing chunk keeps what comes after the failed step.
					switch failed.Method {
					case "MemUnmap":
						if live[cuda.ObjMapping] != 1 || live[cuda.ObjReservation] != 1 || live[cuda.ObjAllocation] != 1 {
							t.Errorf("after %v: %s", failed, simtest.FormatObjects(live))
						}
					case "MemAddressFree":
						if live[cuda.ObjMapping] != 0 || live[cuda.ObjReservation] != 1 || live[cuda.ObjAllocation] != 1 {
							t.Errorf("after %v: %s", failed, simtest.FormatObjects(live))
						}
					case "MemRelease":
						if live[cuda.ObjReservation] != 0 || live[cuda.ObjAllocation] != 1 {
							t.Errorf("after %v: %s", failed, simtest.FormatObjects(live))
						}
					}
					if live[cuda.ObjContext] != 1 {
						t.Errorf("primary context released while chunks are pending: %s", simtest.FormatObjects(live))
					}
					if err := p.Close(); err != nil {
						t.Fatalf("second Close: %v", err)
					}
					if p.CleanupPending() {
						t.Error("CleanupPending after a successful retry")
					}
					c := h.drv.CallCount("")
					if err := p.Close(); err != nil || h.drv.CallCount("") != c {
						t.Errorf("third Close: %v, %d driver calls", err, h.drv.CallCount("")-c)
					}
					noRepeatedSteps(t, h.drv.Calls())
					h.finish()
				})
			}
		})
	}
}

// TestMountFaults fails each MountSegment in turn (setup unwinds, unmounting
// exactly the segments that were mounted) and each UnmountSegment in turn
// (the segment stays owned and mounted; a second Close finishes it).
func TestMountFaults(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			for n := 1; n <= s.chunks; n++ {
				t.Run(fmt.Sprintf("mount%d", n), func(t *testing.T) {
					h := s.harness(t)
					h.m.failMount = n
					p, err := h.open()
					if !errors.Is(err, errInjectedMount) || p != nil {
						t.Fatalf("Open with mount %d failing: %v", n, err)
					}
					if got := len(h.m.okUnmounts); got != n-1 {
						t.Errorf("%d segments unmounted, want the %d mounted", got, n-1)
					}
					noRepeatedSteps(t, h.drv.Calls())
					h.finish()
				})
				t.Run(fmt.Sprintf("unmount%d", n), func(t *testing.T) {
					h := s.harness(t)
					p, err := h.open()
					if err != nil {
						t.Fatal(err)
					}
					h.m.failUnmount = n
					if err := p.Close(); !errors.Is(err, errInjectedMount) {
						t.Fatalf("Close with unmount %d failing: %v", n, err)
					}
					live := h.drv.LiveObjects()
					if h.m.numMounted() != 1 || live[cuda.ObjAllocation] != 1 || live[cuda.ObjMapping] != 1 || live[cuda.ObjContext] != 1 {
						t.Fatalf("after failed unmount: %d mounted, %s", h.m.numMounted(), simtest.FormatObjects(live))
					}
					if !s.noFDs && len(h.fds.fds) != 1 {
						t.Fatalf("after failed unmount: %d fds registered, want 1", len(h.fds.fds))
					}
					if !p.CleanupPending() {
						t.Error("CleanupPending false")
					}
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
					if h.m.unmounts != s.chunks+1 {
						t.Errorf("%d unmount calls, want %d (one retry)", h.m.unmounts, s.chunks+1)
					}
					noRepeatedSteps(t, h.drv.Calls())
					h.finish()
				})
			}
		})
	}
}

// TestFDRegistryFaults fails each Register (setup unwinds and closes the
// unregistered fd) and each Unregister (the chunk stays owned; a second
// Close finishes it).
func TestFDRegistryFaults(t *testing.T) {
	for _, s := range scenarios() {
		if s.noFDs {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			for n := 1; n <= s.chunks; n++ {
				t.Run(fmt.Sprintf("register%d", n), func(t *testing.T) {
					h := s.harness(t)
					h.fds.failRegister = n
					p, err := h.open()
					if !errors.Is(err, errInjectedFD) || p != nil {
						t.Fatalf("Open with register %d failing: %v", n, err)
					}
					if h.fds.unregisters != n-1 || h.m.mounts != 0 {
						t.Errorf("%d unregisters (want %d), %d mounts (want 0)", h.fds.unregisters, n-1, h.m.mounts)
					}
					h.finish() // the sim counts the unregistered fd as a live export until closed
				})
				t.Run(fmt.Sprintf("unregister%d", n), func(t *testing.T) {
					h := s.harness(t)
					p, err := h.open()
					if err != nil {
						t.Fatal(err)
					}
					h.fds.failUnregister = n
					if err := p.Close(); !errors.Is(err, errInjectedFD) {
						t.Fatalf("Close with unregister %d failing: %v", n, err)
					}
					live := h.drv.LiveObjects()
					if h.m.numMounted() != 0 || len(h.fds.fds) != 1 || live[cuda.ObjAllocation] != 1 || live[cuda.ObjMapping] != 1 {
						t.Fatalf("after failed unregister: %d mounted, %d fds, %s", h.m.numMounted(), len(h.fds.fds), simtest.FormatObjects(live))
					}
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
					if h.m.unmounts != s.chunks || h.fds.unregisters != s.chunks+1 {
						t.Errorf("%d unmounts, %d unregisters", h.m.unmounts, h.fds.unregisters)
					}
					noRepeatedSteps(t, h.drv.Calls())
					h.finish()
				})
			}
		})
	}
}

// TestUnwindFailure: setup fails and so does its unwinding; the error owns
// the rest and Retry finishes the job.
func TestUnwindFailure(t *testing.T) {
	s := scenarios()[0]
	h := s.harness(t)
	h.drv.Fail("MemMap", 2, cuda.ErrorOutOfMemory)
	h.drv.Fail("MemRelease", 2, cuda.ErrorUnknown) // the first is the FABRIC probe's
	p, err := h.open()
	var ue *UnwindError
	if p != nil || !errors.As(err, &ue) || !errors.Is(err, cuda.ErrorOutOfMemory) || !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("Open: %v", err)
	}
	if !ue.CleanupPending() || h.drv.LiveObjects()[cuda.ObjAllocation] != 1 {
		t.Fatalf("pending %v, live %s", ue.CleanupPending(), simtest.FormatObjects(h.drv.LiveObjects()))
	}
	if err := ue.Retry(); err != nil {
		t.Fatal(err)
	}
	if ue.CleanupPending() {
		t.Fatal("still pending")
	}
	noRepeatedSteps(t, h.drv.Calls())
	h.finish()
}

// TestProbeReleaseFailure: releasing the FABRIC probe allocation fails;
// the pool keeps it and the unwinding releases it.
func TestProbeReleaseFailure(t *testing.T) {
	s := scenarios()[1] // fabric permitted: the probe allocation succeeds
	h := s.harness(t)
	h.drv.Fail("MemRelease", 1, cuda.ErrorUnknown)
	if _, err := h.open(); !errors.Is(err, cuda.ErrorUnknown) {
		t.Fatalf("Open: %v", err)
	}
	if got := h.drv.CallCount("MemRelease"); got != 2 {
		t.Errorf("%d MemRelease calls, want 2 (failed, retried)", got)
	}
	h.finish()
}

// TestMultiNUMADistribution: 4 GPUs on 2 nodes with 2 MiB and 4 MiB
// granularities; capacity is spread as Plan says, every chunk is allocated
// on its node and every GPU (and the node's CPUs) get access in one call.
func TestMultiNUMADistribution(t *testing.T) {
	s := scenario{
		sim: sim.Config{GPUs: 4, HostNUMA: []int{1, 0, 1, 0}, NodeGranularity: map[int]uint64{0: 2 * mib, 1: 4 * mib}},
		cfg: egmCfg(100*mib, 16*mib, nil, "posix_fd"),
	}
	h := s.harness(t)
	p, err := h.open()
	if err != nil {
		t.Fatal(err)
	}
	lay := p.Plan()
	if lay.Alignment != 4*mib || lay.Total != 100*mib || lay.MaxChunk != 16*mib {
		t.Fatalf("plan %v", lay)
	}
	want := map[int32][]uint64{0: {16 * mib, 16 * mib, 16 * mib, 4 * mib}, 1: {16 * mib, 16 * mib, 16 * mib}}
	got := map[int32][]uint64{}
	for _, d := range p.Segments() {
		got[d.Location] = append(got[d.Location], d.Size)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("segments per node %v, want %v", got, want)
	}
	nodes := p.Nodes()
	if len(nodes) != 2 || nodes[0].Bytes != 52*mib || nodes[1].Bytes != 48*mib || nodes[0].Mounted != 4 || nodes[1].Mounted != 3 ||
		nodes[0].Granularity != 2*mib || nodes[1].Granularity != 4*mib {
		t.Fatalf("nodes %+v", nodes)
	}
	creates, access := 0, 0
	for _, c := range h.drv.Calls() {
		switch c.Method {
		case "MemCreate": // handle_type=posix_fd: no FABRIC probe
			creates++
		case "MemSetAccess":
			access++
			for dev := range 4 {
				if !strings.Contains(c.Args, fmt.Sprintf("{{DEVICE %d} 3}", dev)) {
					t.Errorf("device %d missing from %s", dev, c.Args)
				}
			}
			if !strings.Contains(c.Args, "{{HOST_NUMA ") {
				t.Errorf("no host access in %s", c.Args)
			}
		}
	}
	if creates != 7 || access != 7 {
		t.Errorf("%d MemCreate, %d MemSetAccess calls; want 7 each", creates, access)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	h.finish()
}

// TestProviderIsConsumer writes into a chunk through DevicePtr and reads it
// back through the chunk's exported fd, imported as a consumer would.
func TestProviderIsConsumer(t *testing.T) {
	h := scenarios()[0].harness(t)
	p, err := h.open()
	if err != nil {
		t.Fatal(err)
	}
	d := p.Segments()[1]
	ptr, err := p.DevicePtr(d.Key())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DevicePtr(segment.Key{ID: d.ID, Generation: d.Generation + 1}); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("stale generation: %v", err)
	}
	ctx, err := h.drv.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("kv block written by the provider")
	if err := h.drv.MemcpyHtoD(ctx, ptr+4096, msg); err != nil {
		t.Fatal(err)
	}
	fd, _ := h.fds.fd(d.Key())
	imp, err := h.drv.MemImportFromFD(ctx, fd)
	if err != nil {
		t.Fatal(err)
	}
	va, err := h.drv.MemAddressReserve(ctx, d.Size, 0)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.drv.MemMap(ctx, va, d.Size, 0, imp))
	must(h.drv.MemSetAccess(ctx, va, d.Size, []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: 0}, Flags: cuda.AccessReadWrite}}))
	got := make([]byte, len(msg))
	must(h.drv.MemcpyDtoH(ctx, got, va+4096))
	if !bytes.Equal(got, msg) {
		t.Fatalf("read %q", got)
	}
	must(h.drv.MemUnmap(ctx, va, d.Size))
	must(h.drv.MemAddressFree(ctx, va, d.Size))
	must(h.drv.MemRelease(ctx, imp))
	must(h.drv.PrimaryCtxRelease(0))
	must(p.Close())
	h.finish()
}

// TestHBMPathUnchanged: with enable_egm_store_pool off, the EGM keys change
// nothing — the same driver calls, HBM DEVICE chunks on cfg.Device, no
// host NUMA query or allocation.
func TestHBMPathUnchanged(t *testing.T) {
	run := func(mut func(*config.Config)) []string {
		s := scenario{sim: sim.Config{GPUs: 2, HostNUMA: []int{0, 1}}, cfg: hbmCfg(20*mib, 8*mib, 1, "posix_fd")}
		h := s.harness(t)
		mut(&h.cfg)
		if err := h.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		p, err := h.open()
		if err != nil {
			t.Fatal(err)
		}
		if p.Tier() != segment.TierHBM {
			t.Fatalf("tier %v", p.Tier())
		}
		for _, d := range p.Segments() {
			if d.Tier != segment.TierHBM || d.Location != 1 || !strings.HasPrefix(d.ID, "host-a/client-1/hbm1/") {
				t.Errorf("segment %+v", d)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		h.finish()
		var calls []string
		for _, c := range h.drv.Calls() {
			if strings.Contains(c.Args, "HOST_NUMA") || (c.Method == "DeviceAttribute" && strings.Contains(c.Args, "134")) {
				t.Errorf("HBM path touched host NUMA: %v", c)
			}
			if strings.HasPrefix(c.Args, "ctx=") { // drop pointers and handles, keep shapes
				c.Args = ""
			}
			calls = append(calls, c.Method+"("+c.Args+")="+c.Result.String())
		}
		return calls
	}
	base := run(func(*config.Config) {})
	for name, mut := range map[string]func(*config.Config){
		"explicit nodes": func(c *config.Config) { c.EGMNUMANodes = []int{0, 1} },
		"unknown node":   func(c *config.Config) { c.EGMNUMANodes = []int{7} },
		"rdma + buffer":  func(c *config.Config) { c.Protocol, c.LocalBufferSize = config.ProtocolRDMA, 1<<20 },
	} {
		if got := run(mut); fmt.Sprint(got) != fmt.Sprint(base) {
			t.Errorf("%s: driver calls differ:\n got %v\nwant %v", name, got, base)
		}
	}
}

func TestNodeSelectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sim  sim.Config
		cfg  func(*config.Config)
		want error
		text string
	}{
		{"explicit node that does not exist", sim.Config{GPUs: 2}, egmCfg(16*mib, 8*mib, []int{1}, "posix_fd"),
			numa.ErrNodeUnavailable, "node 1"},
		{"explicit node that does not exist, auto handle", sim.Config{GPUs: 2}, egmCfg(16*mib, 8*mib, []int{1}, "auto"),
			numa.ErrNodeUnavailable, "node 1"},
		{"explicit list with one bad node", sim.Config{GPUs: 2}, egmCfg(16*mib, 8*mib, []int{0, 3}, "auto"),
			numa.ErrNodeUnavailable, "node 3"},
		{"explicit node without capacity", sim.Config{GPUs: 2, NUMANodes: []int{0, 1}, NodeCapacity: map[int]uint64{1: mib}},
			egmCfg(16*mib, 8*mib, []int{0, 1}, "posix_fd"), numa.ErrNodeUnavailable, "node 1: HOST_NUMA allocation probe"},
		{"auto without host NUMA ids", sim.Config{GPUs: 2, HostNUMA: []int{-1, -1}}, egmCfg(16*mib, 8*mib, nil, "posix_fd"),
			numa.ErrNoNode, "egm_numa_nodes=auto"},
		{"fabric required but not permitted", sim.Config{GPUs: 1}, egmCfg(16*mib, 8*mib, nil, "fabric"),
			cuda.ErrorNotPermitted, "allocate"},
		{"max_mr_size below granularity", sim.Config{GPUs: 1}, egmCfg(16*mib, mib, nil, "posix_fd"),
			ErrPlan, "max_mr_size=1048576"},
		{"total below one unit", sim.Config{GPUs: 1}, egmCfg(mib, 8*mib, nil, "posix_fd"),
			ErrPlan, "global_segment_size=1048576"},
		{"device out of range", sim.Config{GPUs: 2}, hbmCfg(16*mib, 8*mib, 2, "posix_fd"),
			ErrInvalid, "device=2"},
		{"out of memory", sim.Config{GPUs: 1, NodeCapacity: map[int]uint64{0: 8 * mib}}, egmCfg(16*mib, 4*mib, nil, "posix_fd"),
			cuda.ErrorOutOfMemory, "allocate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := scenario{sim: tc.sim, cfg: tc.cfg}.harness(t)
			p, err := h.open()
			if p != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Open: %v; want %v naming %q", err, tc.want, tc.text)
			}
			t.Logf("error: %v", err)
			h.finish()
		})
	}
}

func TestOpenArgumentErrors(t *testing.T) {
	s := scenarios()[0]
	for name, mut := range map[string]func(*harness){
		"invalid config":       func(h *harness) { h.cfg.Protocol = "tcp" },
		"no mounter":           func(h *harness) { h.deps.Mounter = nil },
		"no owner":             func(h *harness) { h.deps.Owner = "" },
		"owner with slash":     func(h *harness) { h.deps.Owner = "a/b" },
		"posix_fd without FDs": func(h *harness) { h.cfg.HandleType = "posix_fd"; h.deps.FDs = nil },
	} {
		t.Run(name, func(t *testing.T) {
			h := s.harness(t)
			mut(h)
			if p, err := h.open(); p != nil || err == nil {
				t.Fatalf("Open accepted it")
			}
			if n := h.drv.CallCount(""); n != 0 {
				t.Errorf("%d driver calls before the argument check", n)
			}
			h.finish()
		})
	}
	t.Run("auto falls back to posix_fd without FDs", func(t *testing.T) {
		h := s.harness(t)
		h.deps.FDs = nil
		if _, err := h.open(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Open: %v", err)
		}
		h.finish()
	})
}

func TestAutoFallbackIsLogged(t *testing.T) {
	h := scenarios()[0].harness(t)
	p, err := h.open()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.log.String(), "falling back to posix_fd") || !strings.Contains(h.log.String(), "CUDA_ERROR_NOT_PERMITTED") {
		t.Errorf("log lacks the fallback: %s", h.log)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	h.finish()
}

func TestCancelledContext(t *testing.T) {
	h := scenarios()[2].harness(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, h.drv, h.cfg, h.deps); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open: %v", err)
	}
	h.finish()
}

func TestPureConsumer(t *testing.T) {
	h := scenarios()[4].harness(t)
	h.cfg.GlobalSegmentSize = 0
	p, err := h.open()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Segments()) != 0 || h.drv.CallCount("") != 0 {
		t.Fatalf("%d segments, %d driver calls", len(p.Segments()), h.drv.CallCount(""))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	h.finish()
}

// TestConcurrentClose runs accessors and several Closes at once (-race).
func TestConcurrentClose(t *testing.T) {
	h := scenarios()[2].harness(t)
	p, err := h.open()
	if err != nil {
		t.Fatal(err)
	}
	segs := p.Segments()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			switch i % 4 {
			case 0:
				errs <- p.Close()
			case 1:
				_, err := p.DevicePtr(segs[i%len(segs)].Key())
				if err != nil && !errors.Is(err, ErrClosed) {
					errs <- err
				}
			case 2:
				_ = p.Nodes()
				_ = p.CleanupPending()
			case 3:
				_ = p.Segments()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	h.finish()
}
