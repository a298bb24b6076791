package choose

import (
	"errors"
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
