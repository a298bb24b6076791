package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemoSim runs the README's main job on the simulator: embedded master,
// EGM provider and consumer, verified round trips, clean teardown — and the
// same with the EGM pool off (HBM segments).
func TestDemoSim(t *testing.T) {
	for _, egm := range []bool{true, false} {
		var out bytes.Buffer
		o := demoOpts{driver: "sim", egm: egm, capacity: "64MiB", maxMR: "16MiB", numa: "auto", handle: "auto",
			block: "16KiB", count: 256, batch: 64, rounds: 2, master: "embedded", socketDir: t.TempDir()}
		if err := runDemo(context.Background(), &out, o); err != nil {
			t.Fatalf("egm=%v: %v\n%s", egm, err, out.String())
		}
		for _, want := range []string{"driver simulator", "byte-exact", "after teardown      0 segments mounted", "demo: OK"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("egm=%v: output lacks %q:\n%s", egm, want, out.String())
			}
		}
	}
}
