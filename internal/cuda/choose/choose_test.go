package choose

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

func TestDriver(t *testing.T) {
	// No driver library, whatever machine this runs on.
	t.Setenv(cuda.LibPathEnv, "/nonexistent/libcuda.so.1")
	t.Setenv("KVFABRIC_SIM", "")

	for _, tc := range []struct {
		kind       string
		wantName   string // "" means an error
		wantReason string
	}{
		{"auto", "sim", "simulator (1 GPU): no usable CUDA driver: "},
		{"", "sim", "simulator (1 GPU): no usable CUDA driver: "},
		{"sim", "sim", "simulator (1 GPU): driver=sim requested"},
		{"SIM", "sim", "simulator (1 GPU)"},
		{"cuda", "", ""},
		{"gpu", "", ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			d, reason, err := Driver(tc.kind, nil)
			if tc.wantName == "" {
				if err == nil {
					d.Close()
					t.Fatalf("Driver(%q) = %s, want an error", tc.kind, d.Name())
				}
				if tc.kind == "cuda" && !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoCUDASupport) {
					t.Fatalf("Driver(cuda): %v, want ErrNoDriver or ErrNoCUDASupport", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Driver(%q): %v", tc.kind, err)
			}
			defer d.Close()
			if d.Name() != tc.wantName || !strings.HasPrefix(reason, tc.wantReason) {
				t.Fatalf("Driver(%q) = %s, %q; want %s, %q…", tc.kind, d.Name(), reason, tc.wantName, tc.wantReason)
			}
		})
	}
}

func TestDriverSimConfigFromEnv(t *testing.T) {
	t.Setenv("KVFABRIC_SIM", `{"gpus": 2}`)
	d, reason, err := Driver("sim", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n, _ := d.DeviceCount(); n != 2 || !strings.Contains(reason, "2 GPUs") {
		t.Fatalf("got %d GPUs, reason %q", n, reason)
	}
	t.Setenv("KVFABRIC_SIM", `{"bogus": 1}`)
	if _, _, err := Driver("sim", nil); err == nil {
		t.Fatal("bad KVFABRIC_SIM accepted")
	}
}

// fakeGPUHost is a root with the kernel driver's traces of one GPU.
func fakeGPUHost(t *testing.T, rel string) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestGPUPresent(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"dev/nvidia0", true},
		{"dev/nvidia7", true},
		{"proc/driver/nvidia/gpus/0000:19:00.0/information", true},
		{"dev/nvidiactl", false}, // the control node alone is not a GPU
		{"dev/nvidia-uvm", false},
		{"proc/driver/nvidia/version", false},
	} {
		ok, ev := GPUPresent(fakeGPUHost(t, tc.rel))
		if ok != tc.want || ok && !strings.HasPrefix(ev, "/dev/nvidia") && !strings.HasPrefix(ev, "/proc/driver/nvidia/gpus/") {
			t.Errorf("%s: GPUPresent = %v, %q; want %v", tc.rel, ok, ev, tc.want)
		}
	}
}

// TestAutoWithBrokenDriverOnGPUHost: with a GPU present and no usable CUDA
// driver, auto used to hand a provider the simulator, so it served memory
// no GPU could reach. Now a provider fails with the driver's error; a
// consumer still falls back, but says why; driver=sim is still the
// simulator for both.
func TestAutoWithBrokenDriverOnGPUHost(t *testing.T) {
	t.Setenv(cuda.LibPathEnv, "/nonexistent/libcuda.so.1")
	t.Setenv("KVFABRIC_SIM", "")
	gpu := fakeGPUHost(t, "dev/nvidia0")
	noGPU := t.TempDir()

	d, _, err := pick("auto", nil, true, gpu)
	if err == nil {
		d.Close()
		t.Fatal("provider with driver=auto on a GPU host with a broken driver got a driver")
	}
	if !errors.Is(err, ErrGPUPresent) || (!errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoCUDASupport)) ||
		!strings.Contains(err.Error(), "/dev/nvidia0") || !strings.Contains(err.Error(), "driver=sim") {
		t.Fatalf("provider: %v; want ErrGPUPresent with the driver's error, the evidence and the way out", err)
	}
	for _, tc := range []struct {
		name     string
		kind     string
		provider bool
		root     string
		reason   string
	}{
		{"consumer auto on a GPU host", "auto", false, gpu, "although /dev/nvidia0 exists"},
		{"provider sim on a GPU host", "sim", true, gpu, "driver=sim requested"},
		{"provider auto without a GPU", "auto", true, noGPU, "no usable CUDA driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, err := pick(tc.kind, nil, tc.provider, tc.root)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Name() != "sim" || !strings.Contains(reason, tc.reason) {
				t.Fatalf("got %s, %q; want the simulator, %q", d.Name(), reason, tc.reason)
			}
		})
	}
}
