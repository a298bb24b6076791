package client_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// spanCheck is a consumer driver that checks every copy handed to the copy
// engines: its source and its destination must each lie inside one
// allocation (the simulator's PointerRanges answer). It also counts the
// copies and their bytes.
type spanCheck struct {
	*sim.Driver
	mu     sync.Mutex
	copies int
	bytes  uint64
	bad    []string
}

func (d *spanCheck) check(ctx cuda.Context, cs []cuda.Copy) {
	ptrs := make([]cuda.DevicePtr, 0, 2*len(cs))
	for _, c := range cs {
		ptrs = append(ptrs, c.Src, c.Dst)
	}
	rs := make([]cuda.AddrRange, len(ptrs))
	err := d.Driver.PointerRanges(ctx, ptrs, rs)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.bad = append(d.bad, err.Error())
		return
	}
	for i, c := range cs {
		d.copies++
		d.bytes += c.Len

		if !rs[2*i].Contains(c.Src, c.Len) || !rs[2*i+1].Contains(c.Dst, c.Len) {
			d.bad = append(d.bad, fmt.Sprintf("copy %#x -> %#x (%d bytes) leaves an allocation: src in %+v, dst in %+v", c.Src, c.Dst, c.Len, rs[2*i], rs[2*i+1]))
		}
	}
}

func (d *spanCheck) MemcpyAsync(ctx cuda.Context, cs []cuda.Copy, s cuda.Stream) error {
	d.check(ctx, cs)
	return d.Driver.MemcpyAsync(ctx, cs, s)
}

func (d *spanCheck) MemcpyBatchAsync(ctx cuda.Context, cs []cuda.Copy, s cuda.Stream) error {
	d.check(ctx, cs)
	return d.Driver.MemcpyBatchAsync(ctx, cs, s)
}

// mergeEnv is a provider and a consumer whose every copy goes to the copy
// engines (a crossover of 1 byte), through spanCheck, so the test sees each
// copy the Store submits.
func mergeEnv(t *testing.T, o client.Options, conf map[string]any) (*env, *spanCheck) {
	t.Helper()
	drv, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc := &spanCheck{Driver: drv}
	e := &env{t: t, drv: drv}
	if e.svc, err = master.New(master.Config{LeaseTTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e.mc = master.NewEmbedded(e.svc)
	ctx := context.Background()
	if e.prov, err = client.Open(ctx, cfgFor(t, egmProvider("32MiB")), client.Options{Driver: drv, Master: e.mc, ClientID: "prov"}); err != nil {
		t.Fatal(err)
	}
	o.Driver, o.Master, o.ClientID, o.PipelineChunk = sc, e.mc, "cons", 32
	if o.BatchParts == 0 {
		o.BatchParts = 1
	}
	conf["copy_engine_min_bytes"], conf["get_copy_engine_min_bytes"] = 1, 1
	cfg := cfgFor(t, conf)
	if e.cons, err = client.Open(ctx, cfg, o); err != nil {
		t.Fatal(err)
	}
	return e, sc
}

// TestMergedCopies: a batch whose objects follow one another in the
// caller's buffer and are placed one after another in a segment is copied
// in a few long copies, each inside one allocation on both sides — also
// when the caller's buffer is two registrations that adjoin — and every
// object reads back its own bytes, by the batch and alone. With
// SeparateCopies or merge_copies=false, or with the buffers permuted, the
// copies are the objects'. A batch split over parts (as a remote master's
// are) is split into runs of consecutive keys, which merge as one
// pipeline's do.
func TestMergedCopies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		host     bool // the buffers: two adjoining registered host ranges (else one device buffer)
		scatter  bool // key i at slot perm[i]
		separate bool // client.Options.SeparateCopies
		noMerge  bool // the configuration's merge_copies=false
		replicas int
		parts    int // client.Options.BatchParts, with enough keys to split the batch
	}{
		{name: "device"},
		{name: "host, two registrations", host: true},
		{name: "two replicas", replicas: 2},
		{name: "scatter", scatter: true},
		{name: "separate", separate: true},
		{name: "merge_copies=false", noMerge: true},
		{name: "four parts", parts: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, size := 96, 16<<10
			if tc.parts > 1 {
				// Parts of at least two pipeline chunks (64 keys)
				// with an embedded master: 4 parts of 128.
				n, size = 512, 8<<10
			}
			nb := uint64(n * size)
			conf := map[string]any{}
			if tc.noMerge {
				conf["merge_copies"] = false
			}
			e, sc := mergeEnv(t, client.Options{SeparateCopies: tc.separate, BatchParts: tc.parts}, conf)
			defer e.close()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			// buffer returns a source or destination of n slots.
			buffer := func() cuda.DevicePtr {
				if !tc.host {
					return devBuf(t, e, nb)
				}
				b := mmapHost(t, n*size)
				// The boundary inside the first chunk's run (4 keys
				// in one segment).
				half := uint64(2 * size)
				for _, r := range [][2]uint64{{0, half}, {half, nb - half}} {
					if err := e.cons.RegisterBuffer(ptrOf(b)+uintptr(r[0]), r[1]); err != nil {
						t.Fatal(err)
					}
				}
				t.Cleanup(func() {
					_ = e.cons.UnregisterBuffer(context.Background(), ptrOf(b))
					_ = e.cons.UnregisterBuffer(context.Background(), ptrOf(b)+uintptr(half))
				})
				return cuda.DevicePtr(ptrOf(b))
			}
			src, dst := buffer(), buffer()
			want := make([]byte, n*size)
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			if err := e.drv.MemcpyHtoD(e.cons.Context(), src, want); err != nil {
				t.Fatal(err)
			}
			slot := make([]int, n)
			for i := range slot {
				slot[i] = i
			}
			if tc.scatter {
				rng.Shuffle(n, func(i, j int) { slot[i], slot[j] = slot[j], slot[i] })
			}
			keys := make([]string, n)
			srcs, dsts := make([][]client.Region, n), make([][]client.Region, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%03d", i)
				off := uintptr(slot[i] * size)
				srcs[i] = client.Bytes(uintptr(src)+off, uint64(size))
				dsts[i] = client.Bytes(uintptr(dst)+off, uint64(size))
			}
			m0 := e.cons.MergedCopies()
			for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{Replicas: tc.replicas}) {
				if err != nil {
					t.Fatalf("put %s: %v", keys[i], err)
				}
			}
			putCopies, putMerged := sc.copies, e.cons.MergedCopies()-m0
			poison := bytes.Repeat([]byte{0xA5}, n*size)
			if err := e.drv.MemcpyHtoD(e.cons.Context(), dst, poison); err != nil {
				t.Fatal(err)
			}
			if _, errs := e.cons.BatchGet(ctx, keys, dsts, 0); errs != nil {
				for i, err := range errs {
					if err != nil {
						t.Fatalf("get %s: %v", keys[i], err)
					}
				}
			}
			getCopies, getMerged := sc.copies-putCopies, e.cons.MergedCopies()-m0-putMerged
			if got := readBack(t, e, dst, nb); !bytes.Equal(got, want) {
				t.Fatalf("batch get: bytes differ")
			}
			// Each object alone: its own bytes.
			one := devBuf(t, e, uint64(size))
			for _, i := range []int{0, 1, 2, n / 2, n - 1} {
				if _, err := e.cons.Get(ctx, keys[i], client.Bytes(uintptr(one), uint64(size)), 0); err != nil {
					t.Fatal(err)
				}
				off := slot[i] * size
				if got := readBack(t, e, one, uint64(size)); !bytes.Equal(got, want[off:off+size]) {
					t.Fatalf("get %s alone: not its bytes", keys[i])
				}
			}
			sc.mu.Lock()
			bad := sc.bad
			sc.mu.Unlock()
			for _, b := range bad {
				t.Error(b)
			}
			reps := max(tc.replicas, 1)
			t.Logf("put: %d copies (%d merged), get: %d copies (%d merged)", putCopies, putMerged, getCopies, getMerged)
			if uint64(putCopies)+putMerged != uint64(reps*n) || uint64(getCopies)+getMerged != uint64(n) {
				t.Errorf("copies + merged: put %d + %d, get %d + %d; want %d and %d", putCopies, putMerged, getCopies, getMerged, reps*n, n)
			}
			switch {
			case reps > 1:
				// A replica's copy merges only where the master happened
				// to place it right after the last copy: no bound.
			case tc.separate || tc.noMerge:
				if putMerged+getMerged != 0 {
					t.Errorf("SeparateCopies: %d put and %d get copies merged", putMerged, getMerged)
				}
			case tc.scatter:
				// Only keys whose slots happen to follow one another merge.
				if putMerged > uint64(n/4) || getMerged > uint64(n/4) {
					t.Errorf("scatter: %d put and %d get copies merged", putMerged, getMerged)
				}
			default:
				// Runs end at the pipeline's chunks (4, 8, 16, 32, 32,
				// 4 keys), where the master's placement moves to
				// another segment (runs of its slack: 128 KiB of these
				// 8 MiB segments) and, on the host, at the
				// registrations' boundary.
				if putCopies > n/4 || getCopies > n/4 {
					t.Errorf("contiguous: %d put and %d get copies for %d objects", putCopies, getCopies, n)
				}
			}
		})
	}
}
