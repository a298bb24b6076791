package pool

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/config"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/numa"
)

// hostOf is a /proc + /sys tree with a host of hostKiB and the given
// NUMA nodes (node id → KiB).
func hostOf(t *testing.T, hostKiB uint64, nodes map[int]uint64) numa.HostMemory {
	t.Helper()
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/meminfo", "MemTotal: "+itoa(hostKiB)+" kB\n")
	for n, kib := range nodes {
		write("sys/devices/system/node/node"+itoa(uint64(n))+"/meminfo", "Node "+itoa(uint64(n))+" MemTotal: "+itoa(kib)+" kB\n")
	}
	return numa.HostMemory{Root: root}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestSizeBoundedByMemory: a global_segment_size the host or the device
// can never hold is refused before planning, naming the key, the value
// and the limit, with no allocation made. Before, 18446744073709551615 made
// Plan build a slice of 16 G chunk sizes and the OOM killer ended the
// provider; sizes merely too large failed chunk by chunk in cuMemCreate.
func TestSizeBoundedByMemory(t *testing.T) {
	huge, err := config.ParseSize("16000000TiB")
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	for _, tc := range []struct {
		name string
		sim  sim.Config
		host numa.HostMemory // zero: the real host
		cfg  func(*config.Config)
		text string
	}{
		{"egm max uint64, real host", sim.Config{}, numa.HostMemory{}, egmCfg(1<<64-1, gib, nil, "posix_fd"),
			"global_segment_size=18446744073709551615"},
		{"egm 16000000TiB, real host", sim.Config{}, numa.HostMemory{}, egmCfg(huge, gib, nil, "posix_fd"),
			"MemTotal"},
		{"egm more than the host", sim.Config{}, hostOf(t, 1<<20, nil), egmCfg(2*gib, 8*mib, nil, "posix_fd"),
			"more than this host's memory (MemTotal 1GiB"},
		{"hbm more than the device", sim.Config{DeviceCapacity: map[int]uint64{0: 64 * mib}}, numa.HostMemory{}, hbmCfg(128*mib, 8*mib, 0, "posix_fd"),
			"global_segment_size=134217728 (128MiB) is more than device 0's memory (64MiB)"},
		{"hbm max uint64", sim.Config{}, numa.HostMemory{}, hbmCfg(1<<64-1, gib, 0, "posix_fd"),
			"device 0's memory (140GiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := scenario{sim: tc.sim, cfg: tc.cfg}.harness(t)
			h.deps.HostMemory = tc.host
			p, err := h.open()
			if p != nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), "global_segment_size=") {
				t.Fatalf("Open: %v; want config.ErrInvalid naming global_segment_size and %q", err, tc.text)
			}
			t.Logf("error: %v", err)
			if n := h.drv.CallCount("MemCreate"); n != 0 {
				t.Errorf("%d allocations before the size was refused", n)
			}
			h.finish()
		})
	}
	t.Run("within the limits", func(t *testing.T) {
		h := scenario{sim: sim.Config{GPUs: 2, HostNUMA: []int{0, 1}}, cfg: egmCfg(32*mib, 8*mib, []int{0, 1}, "posix_fd")}.harness(t)
		h.deps.HostMemory = hostOf(t, 1<<20, map[int]uint64{0: 16 << 10})
		p, err := h.open()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		h.finish()
	})
}

// TestPlanChunkLimit: Plan refuses a plan of more than MaxChunks chunks
// before building any (it used to append one size per chunk, 16 G of them
// for global_segment_size=18446744073709551615).
func TestPlanChunkLimit(t *testing.T) {
	for _, tc := range []struct {
		name         string
		total, maxMR uint64
		locs         []Location
		ok           bool
	}{
		{"max uint64", 1<<64 - 1, 1 << 30, []Location{dram(0, 2*mib)}, false},
		{"max uint64 over two nodes", 1<<64 - 1, 1 << 63, []Location{dram(0, 2*mib), dram(1, 2*mib)}, true}, // 2 chunks
		{"128GiB of 64KiB chunks", 128 << 30, 64 * kib, []Location{dram(0, 64*kib)}, false},
		{"exactly MaxChunks", MaxChunks * 2 * mib, 2 * mib, []Location{dram(0, 2*mib)}, true},
		{"one more", (MaxChunks + 1) * 2 * mib, 2 * mib, []Location{dram(0, 2*mib)}, false},
		{"one more over two nodes", (MaxChunks + 1) * 2 * mib, 2 * mib, []Location{dram(0, 2*mib), dram(1, 2*mib)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lay, err := Plan(tc.total, tc.maxMR, tc.locs)
			if tc.ok {
				if err != nil || lay.NumChunks() > MaxChunks {
					t.Fatalf("Plan: %d chunks, %v", lay.NumChunks(), err)
				}
				return
			}
			if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), "max_mr_size") || !strings.Contains(err.Error(), "global_segment_size=") {
				t.Fatalf("Plan = %d chunks, %v; want ErrPlan naming global_segment_size and max_mr_size", lay.NumChunks(), err)
			}
		})
	}
}
