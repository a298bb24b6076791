package main

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// TestBenchSim runs `kvfabric bench` on a two-GPU simulator with small
// sizes: every path byte-verified on both devices, nothing leaked.
func TestBenchSim(t *testing.T) {
	t.Setenv("KVFABRIC_SIM", `{"gpus": 2, "granularity": 65536}`)
	var out bytes.Buffer
	err := runBench(&out, benchFlags{driver: "sim", devices: "0,1", sizes: "4KiB,64KiB", bytes: "256KiB", iters: 1, ceMin: "64KiB"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"sm-kernel", "ce-batch", "ce-per-copy", "auto", "live driver objects after teardown: 0"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "NO ") {
		t.Errorf("a path failed verification:\n%s", s)
	}
	if err := runBench(&out, benchFlags{driver: "sim", devices: "7", sizes: "4KiB", bytes: "64KiB", iters: 1, ceMin: "1MiB"}); err == nil {
		t.Error("device 7 of 2 accepted")
	}
}

// TestBenchObjectBlocks: --object-blocks measures blocks grouped into
// objects (contiguous in the pool, scattered in HBM) on every path and the
// staged one, every batch verified, and reports each path's enqueueing
// time; objects larger than a batch and a negative count are refused by
// name.
func TestBenchObjectBlocks(t *testing.T) {
	var out bytes.Buffer
	err := runBench(&out, benchFlags{driver: "sim", devices: "0", sizes: "16KiB,32KiB", bytes: "1MiB", iters: 1, ceMin: "128KiB", objects: 8})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"enqueue ms", "sm-kernel", "ce-batch", "staged", "live driver objects after teardown: 0"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "staged") != 4 || strings.Contains(s, "NO ") {
		t.Errorf("want put and get of the staged path at both sizes, all verified:\n%s", s)
	}
	for _, tc := range []struct {
		objects int
		want    string
	}{{64, "--object-blocks 64"}, {-1, "--object-blocks: -1"}} {
		err := runBench(&out, benchFlags{driver: "sim", devices: "0", sizes: "32KiB", bytes: "1MiB", iters: 1, ceMin: "128KiB", objects: tc.objects})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--object-blocks %d: %v; want an error naming it", tc.objects, err)
		}
	}
}

// TestBenchVerifiesEveryBatch makes every get batch that repeats the copies
// of the one before (same method, same copies: the timed batches after a
// warm-up) silently copy nothing. bench must fail on the copy-engine paths,
// the lossy driver's only victims, naming the first timed round.
func TestBenchVerifiesEveryBatch(t *testing.T) {
	sd, err := sim.New(sim.Config{Granularity: 65536})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	last := map[string][]cuda.Copy{} // the last get per method
	drv := newLossy(sd, func(method, dir string, copies []cuda.Copy) bool {
		if dir != "get" {
			return false
		}
		again := slices.Equal(last[method], copies)
		last[method] = slices.Clone(copies)
		return again
	})
	var out bytes.Buffer
	// The auto route sends 64 KiB blocks to the SM kernel (copy engine from
	// 1 MiB), which the lossy driver does not see.
	err = runBenchOn(&out, drv, "test", benchFlags{devices: "0", sizes: "64KiB", bytes: "256KiB", iters: 2, ceMin: "1MiB"})
	if _, dropped := drv.counts(); dropped == 0 {
		t.Fatal("no get was dropped: the fault cannot fire")
	}
	if err == nil {
		t.Fatalf("bench passed although timed gets copied nothing:\n%s", out.String())
	}
	var ve *verifyError
	if !errors.As(err, &ve) || ve.round != 2 || ve.rounds != 3 || ve.got != benchPoison {
		t.Fatalf("err = %v, want a *verifyError of round 2 of 3 that found the poison", err)
	}
	s := out.String()
	for _, route := range []string{"ce-batch", "ce-per-copy", "sm-kernel", "auto"} {
		failed := regexp.MustCompile(`(?m)^.*` + route + `\s+get.*NO round 2`).MatchString(s)
		if want := strings.HasPrefix(route, "ce-"); failed != want {
			t.Errorf("route %s: failed verification %v, want %v:\n%s", route, failed, want, s)
		}
	}
	if !strings.Contains(s, "live driver objects after teardown: 0") {
		t.Errorf("leak:\n%s", s)
	}
}
