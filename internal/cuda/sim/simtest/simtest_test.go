package simtest_test

import (
	"fmt"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

// recorder is a testing.TB that records instead of failing.
type recorder struct {
	testing.TB
	errors, logs []string
}

func (r *recorder) Helper()                    {}
func (r *recorder) Logf(f string, args ...any) { r.logs = append(r.logs, fmt.Sprintf(f, args...)) }
func (r *recorder) Errorf(f string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(f, args...))
}

// uncounted hides the simulator's ObjectCounter.
type uncounted struct{ cuda.Driver }

func TestAssertNoLeaks(t *testing.T) {
	d, err := sim.New(sim.Config{FabricRegistryDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.PrimaryCtxRetain(0); err != nil {
		t.Fatal(err)
	}
	var r recorder
	simtest.AssertNoLeaks(&r, d)
	if len(r.errors) != 1 || r.errors[0] != "simtest: 1 live objects leaked: context=1" {
		t.Fatalf("leaking driver: errors %q", r.errors)
	}
	r = recorder{}
	simtest.AssertNoLeaks(&r, uncounted{d})
	if len(r.errors) != 0 || len(r.logs) != 1 {
		t.Fatalf("driver without ObjectCounter: errors %q logs %q", r.errors, r.logs)
	}
	if err := d.PrimaryCtxRelease(0); err != nil {
		t.Fatal(err)
	}
	simtest.AssertNoLeaks(t, d)
}

func TestFormatObjects(t *testing.T) {
	for _, tc := range []struct {
		o    cuda.Objects
		want string
	}{
		{nil, "none"},
		{cuda.Objects{"stream": 2, "allocation": 1, "event": 0}, "allocation=1 stream=2"},
	} {
		if got := simtest.FormatObjects(tc.o); got != tc.want {
			t.Errorf("FormatObjects(%v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}
