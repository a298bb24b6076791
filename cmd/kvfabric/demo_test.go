package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
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

// TestDemoVerifiesEveryRound makes the puts or the gets of one round after
// the first silently copy nothing: the demo must fail, naming that round,
// and leak nothing. (Blocks of 128 KiB go to the copy engine, where the
// lossy driver sees them.)
func TestDemoVerifiesEveryRound(t *testing.T) {
	const rounds, count = 3, 8
	const blk = 128 << 10
	for _, tc := range []struct {
		name  string
		dir   string // "put" or "get"; "" drops nothing
		round int    // 1-based round whose copies of dir are dropped
	}{
		{"no fault", "", 0},
		{"gets of round 2", "get", 2},
		{"gets of the last round", "get", rounds},
		{"puts of round 2", "put", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case waits out the provider's read leases
			sd, err := sim.New(sim.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer sd.Close()
			moved := map[string]uint64{} // bytes per direction so far: which round a call is in
			drv := newLossy(sd, func(_, dir string, copies []cuda.Copy) bool {
				round := int(moved[dir]/(blk*count)) + 1
				for _, c := range copies {
					moved[dir] += c.Len
				}
				return dir == tc.dir && round == tc.round
			})
			var out bytes.Buffer
			o := demoOpts{driver: "sim", egm: true, capacity: "64MiB", maxMR: "16MiB", numa: "auto", handle: "auto",
				block: "128KiB", count: count, batch: 4, rounds: rounds, seed: 7, master: "embedded", socketDir: t.TempDir()}
			err = runDemoOn(context.Background(), &out, drv, "test", slog.New(slog.DiscardHandler), blk, o)
			seen, dropped := drv.counts()
			if seen["put"] == 0 || seen["get"] == 0 {
				t.Fatalf("the lossy driver saw puts %d and gets %d: the fault cannot fire", seen["put"], seen["get"])
			}
			if live := sd.LiveObjects(); live.Total() != 0 {
				t.Errorf("leaked driver objects: %v", live)
			}
			if tc.dir == "" {
				if err != nil || dropped != 0 {
					t.Fatalf("no fault: err %v, dropped %d\n%s", err, dropped, out.String())
				}
				return
			}
			if dropped == 0 {
				t.Fatalf("no %s of round %d was dropped", tc.dir, tc.round)
			}
			if err == nil {
				t.Fatalf("demo passed although the %ss of round %d copied nothing:\n%s", tc.dir, tc.round, out.String())
			}
			var ve *verifyError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a *verifyError", err)
			}
			if ve.round != tc.round || ve.rounds != rounds || !strings.Contains(ve.key, fmt.Sprintf("/r%d/", tc.round)) {
				t.Errorf("err = %v: want round %d of %d and a key of that round", err, tc.round, rounds)
			}
			if tc.dir == "get" && ve.got != poisonByte(tc.round) {
				t.Errorf("err = %v: a skipped get should leave the round's poison %#x", err, poisonByte(tc.round))
			}
		})
	}
}
