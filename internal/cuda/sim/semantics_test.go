package sim_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func TestLeakDetection(t *testing.T) {
	for _, tc := range []struct {
		name string
		leak func(t *testing.T, d *sim.Driver, ctx cuda.Context) (undo func(ctx cuda.Context))
		want string
	}{
		{"allocation", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			h, err := d.MemCreate(ctx, gran, hostNUMA(0, 0))
			must(t, err)
			return func(ctx cuda.Context) { must(t, d.MemRelease(ctx, h)) }
		}, "allocation=1 context=1"},
		{"mapping-after-release", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			h, err := d.MemCreate(ctx, gran, hostNUMA(0, 0))
			must(t, err)
			v := mapVMM(t, d, ctx, h, gran, 0)
			must(t, d.MemRelease(ctx, h))
			return func(ctx cuda.Context) {
				must(t, d.MemUnmap(ctx, v.ptr, v.size))
				must(t, d.MemAddressFree(ctx, v.ptr, v.size))
			}
		}, "context=1 mapping=1 reservation=1"},
		{"exported-fd", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			h, err := d.MemCreate(ctx, gran, hostNUMA(0, cuda.HandlePosixFD))
			must(t, err)
			fd, err := d.MemExportToFD(ctx, h)
			must(t, err)
			must(t, d.MemRelease(ctx, h))
			return func(ctx cuda.Context) { must(t, unix.Close(fd)) }
		}, "context=1 export=1"},
		{"import", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			h, err := d.MemCreate(ctx, gran, hostNUMA(0, cuda.HandlePosixFD))
			must(t, err)
			fd, err := d.MemExportToFD(ctx, h)
			must(t, err)
			imp, err := d.MemImportFromFD(ctx, fd)
			must(t, err)
			must(t, unix.Close(fd))
			must(t, d.MemRelease(ctx, h))
			return func(ctx cuda.Context) { must(t, d.MemRelease(ctx, imp)) }
		}, "context=1 import=1"},
		{"registration", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			b := mmapHost(t, 4096)
			must(t, d.MemHostRegister(ctx, addrOf(b), 4096, 0))
			return func(ctx cuda.Context) { must(t, d.MemHostUnregister(ctx, addrOf(b))) }
		}, "context=1 registration=1"},
		{"stream-event-module-devmem", func(t *testing.T, d *sim.Driver, ctx cuda.Context) func(cuda.Context) {
			s, err := d.StreamCreate(ctx, 0)
			must(t, err)
			e, err := d.EventCreate(ctx, 0)
			must(t, err)
			m, err := d.ModuleLoadData(ctx, []byte(testPTX))
			must(t, err)
			p, err := d.MemAlloc(ctx, 100)
			must(t, err)
			return func(ctx cuda.Context) {
				must(t, d.StreamDestroy(ctx, s))
				must(t, d.EventDestroy(ctx, e))
				must(t, d.ModuleUnload(ctx, m))
				must(t, d.MemFree(ctx, p))
			}
		}, "context=1 devmem=1 event=1 module=1 stream=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, sim.Config{})
			ctx := retain(t, d, 0)
			undo := tc.leak(t, d, ctx)
			var r recorder
			simtest.AssertNoLeaks(&r, d)
			if len(r.failed) != 1 || !strings.HasSuffix(r.failed[0], ": "+tc.want) {
				t.Fatalf("AssertNoLeaks reported %q, want counts %q", r.failed, tc.want)
			}
			undo(ctx)
			must(t, d.PrimaryCtxRelease(0))
			simtest.AssertNoLeaks(t, d)
		})
	}
	// Context-scoped objects the caller never destroyed stay counted after
	// the context that freed them is gone.
	t.Run("orphaned-by-context-release", func(t *testing.T) {
		d := newDriver(t, sim.Config{})
		ctx := retain(t, d, 0)
		s, err := d.StreamCreate(ctx, 0)
		must(t, err)
		must(t, d.PrimaryCtxRelease(0))
		if got := d.LiveObjects(); got[cuda.ObjStream] != 1 || got.Total() != 1 {
			t.Fatalf("live = %v", got)
		}
		ctx2 := retain(t, d, 0)
		if ctx2 == ctx {
			t.Fatal("a new primary context reused the old Context value")
		}
		if err := d.StreamDestroy(ctx2, s); !errors.Is(err, cuda.ErrorInvalidHandle) {
			t.Fatalf("destroying a stream of a destroyed context: %v", err)
		}
		must(t, d.PrimaryCtxRelease(0))
	})
}

func TestVMMSemantics(t *testing.T) {
	d := newDriver(t, sim.Config{GPUs: 2, NodeCapacity: map[int]uint64{0: 4 * gran}})
	ctx := retain(t, d, 0)
	defer func() {
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
	}()
	h, err := d.MemCreate(ctx, 2*gran, hostNUMA(0, cuda.HandlePosixFD))
	must(t, err)
	res, err := d.MemAddressReserve(ctx, 4*gran, 0)
	must(t, err)
	if uint64(res)%gran != 0 {
		t.Fatalf("reservation %#x not aligned to the granularity", res)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want cuda.Result
	}{
		{"create size not a granularity multiple", func() error { _, err := d.MemCreate(ctx, gran+4096, hostNUMA(0, 0)); return err }, cuda.ErrorInvalidValue},
		{"create size 0", func() error { _, err := d.MemCreate(ctx, 0, hostNUMA(0, 0)); return err }, cuda.ErrorInvalidValue},
		{"create on missing node", func() error { _, err := d.MemCreate(ctx, gran, hostNUMA(3, 0)); return err }, cuda.ErrorInvalidValue},
		{"create on missing device", func() error { _, err := d.MemCreate(ctx, gran, device(2, 0)); return err }, cuda.ErrorInvalidDevice},
		{"create HOST location", func() error {
			_, err := d.MemCreate(ctx, gran, cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHost}})
			return err
		}, cuda.ErrorInvalidValue},
		{"create over capacity", func() error { _, err := d.MemCreate(ctx, 4*gran, hostNUMA(0, 0)); return err }, cuda.ErrorOutOfMemory},
		{"create with invalid context", func() error { _, err := d.MemCreate(ctx+1, gran, hostNUMA(0, 0)); return err }, cuda.ErrorInvalidContext},
		{"create with context 0", func() error { _, err := d.MemCreate(0, gran, hostNUMA(0, 0)); return err }, cuda.ErrorInvalidContext},
		{"reserve unaligned size", func() error { _, err := d.MemAddressReserve(ctx, 4096, 0); return err }, cuda.ErrorInvalidValue},
		{"reserve bad alignment", func() error { _, err := d.MemAddressReserve(ctx, gran, 3<<20); return err }, cuda.ErrorInvalidValue},
		{"map misaligned address", func() error { return d.MemMap(ctx, res+4096, gran, 0, h) }, cuda.ErrorInvalidValue},
		{"map misaligned offset", func() error { return d.MemMap(ctx, res, gran, 4096, h) }, cuda.ErrorInvalidValue},
		{"map beyond allocation", func() error { return d.MemMap(ctx, res, 2*gran, gran, h) }, cuda.ErrorNotSupported}, // as driver 580
		{"map beyond reservation", func() error { return d.MemMap(ctx, res+3*gran, 2*gran, 0, h) }, cuda.ErrorInvalidValue},
		{"map unreserved address", func() error { return d.MemMap(ctx, res+cuda.DevicePtr(1<<40), gran, 0, h) }, cuda.ErrorInvalidValue},
		{"map unknown handle", func() error { return d.MemMap(ctx, res, gran, 0, h+1) }, cuda.ErrorInvalidValue},
		{"unmap unmapped", func() error { return d.MemUnmap(ctx, res, gran) }, cuda.ErrorInvalidValue},
		{"set access unmapped", func() error { return d.MemSetAccess(ctx, res, gran, rw(0)) }, cuda.ErrorInvalidValue},
		{"free wrong size", func() error { return d.MemAddressFree(ctx, res, gran) }, cuda.ErrorInvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Map the two halves of the allocation in reverse order, contiguously.
	must(t, d.MemMap(ctx, res, gran, gran, h))
	must(t, d.MemMap(ctx, res+gran, gran, 0, h))
	if err := d.MemMap(ctx, res, gran, 0, h); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("mapping over a mapping: %v", err)
	}
	must(t, d.MemSetAccess(ctx, res, 2*gran, rw(0)))
	want := pattern(int(2*gran), 9)
	must(t, d.MemcpyHtoD(ctx, res, want))
	// Released while mapped: still alive (and charged) until unmapped.
	must(t, d.MemRelease(ctx, h))
	if err := d.MemRelease(ctx, h); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("double release: %v", err)
	}
	if _, err := d.MemCreate(ctx, 4*gran, hostNUMA(0, 0)); !errors.Is(err, cuda.ErrorOutOfMemory) {
		t.Fatalf("released-but-mapped memory no longer charged: %v", err)
	}
	got := make([]byte, len(want))
	must(t, d.MemcpyDtoH(ctx, got, res))
	if !bytes.Equal(got, want) {
		t.Fatal("released-but-mapped memory lost its bytes")
	}
	if err := d.MemUnmap(ctx, res, gran+4096); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("partial unmap: %v", err)
	}
	if err := d.MemAddressFree(ctx, res, 4*gran); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("freeing a reservation with mappings: %v", err)
	}
	must(t, d.MemUnmap(ctx, res, 2*gran))
	if err := d.MemUnmap(ctx, res, 2*gran); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("double unmap: %v", err)
	}
	// Now freed: the whole capacity is available again.
	h2, err := d.MemCreate(ctx, 4*gran, hostNUMA(0, 0))
	must(t, err)
	must(t, d.MemRelease(ctx, h2))
	must(t, d.MemAddressFree(ctx, res, 4*gran))
	if err := d.MemAddressFree(ctx, res, 4*gran); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("double free: %v", err)
	}
}

func rw(devs ...int32) []cuda.AccessDesc {
	var ds []cuda.AccessDesc
	for _, dev := range devs {
		ds = append(ds, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: dev}, Flags: cuda.AccessReadWrite})
	}
	return ds
}

func TestAccessRules(t *testing.T) {
	d := newDriver(t, sim.Config{GPUs: 2})
	ctx0 := retain(t, d, 0)
	ctx1 := retain(t, d, 1)
	h, err := d.MemCreate(ctx0, 2*gran, hostNUMA(0, 0))
	must(t, err)
	v := mapVMM(t, d, ctx0, h, gran, 0) // only the first half, device 0 only
	unmappedRes, err := d.MemAddressReserve(ctx0, gran, 0)
	must(t, err)
	ro, err := d.MemAddressReserve(ctx0, gran, 0)
	must(t, err)
	must(t, d.MemMap(ctx0, ro, gran, gran, h))
	must(t, d.MemSetAccess(ctx0, ro, gran, []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice, ID: 0}, Flags: cuda.AccessRead}}))
	noAccess, err := d.MemAddressReserve(ctx0, gran, 0)
	must(t, err)
	must(t, d.MemMap(ctx0, noAccess, gran, 0, h))
	dm, err := d.MemAlloc(ctx0, 1000)
	must(t, err)
	host := mmapHost(t, 8192)
	must(t, d.MemHostRegister(ctx0, addrOf(host), 4096, 0))
	hostPtr := cuda.DevicePtr(addrOf(host))
	stale, err := d.MemAddressReserve(ctx0, gran, 0)
	must(t, err)
	h2, err := d.MemCreate(ctx0, gran, hostNUMA(0, 0))
	must(t, err)
	must(t, d.MemMap(ctx0, stale, gran, 0, h2))
	must(t, d.MemSetAccess(ctx0, stale, gran, rw(0)))
	must(t, d.MemUnmap(ctx0, stale, gran))
	must(t, d.MemRelease(ctx0, h2))

	c := func(dst, src cuda.DevicePtr, n uint64) []cuda.Copy { return []cuda.Copy{{Dst: dst, Src: src, Len: n}} }
	for _, tc := range []struct {
		name string
		ctx  cuda.Context
		cp   []cuda.Copy
		ok   bool
	}{
		{"mapped to devmem", ctx0, c(dm, v.ptr, 1000), true},
		{"devmem to registered host", ctx0, c(hostPtr, dm, 1000), true},
		{"registered host to mapped", ctx0, c(v.ptr, hostPtr, 4096), true},
		{"read-only source", ctx0, c(v.ptr, ro, 4096), true},
		{"unmapped reservation", ctx0, c(dm, unmappedRes, 8), false},
		{"stale mapping (unmapped, released)", ctx0, c(stale, dm, 8), false},
		{"mapping without access", ctx0, c(dm, noAccess, 8), false},
		{"other device without access", ctx1, c(dm, v.ptr, 8), false},
		{"write to read-only mapping", ctx0, c(ro, dm, 8), false},
		{"past the end of a mapping", ctx0, c(dm, v.ptr+cuda.DevicePtr(gran)-4, 8), false},
		{"past the end of devmem", ctx0, c(v.ptr, dm+996, 8), false},
		{"past the end of a registration", ctx0, c(v.ptr, hostPtr+4090, 8), false},
		{"unregistered host memory", ctx0, c(v.ptr, hostPtr+4096, 8), false},
		{"null", ctx0, c(0, dm, 8), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []struct {
				name string
				fn   func(cuda.Context, []cuda.Copy, cuda.Stream) error
			}{{"MemcpyAsync", d.MemcpyAsync}, {"MemcpyBatchAsync", d.MemcpyBatchAsync}} {
				st, err := d.StreamCreate(tc.ctx, cuda.StreamNonBlocking)
				if err != nil {
					t.Fatal(err)
				}
				err = op.fn(tc.ctx, tc.cp, st)
				if derr := d.StreamDestroy(tc.ctx, st); derr != nil {
					t.Fatal(derr)
				}
				if tc.ok && err != nil {
					t.Errorf("%s: %v", op.name, err)
				}
				if !tc.ok && !errors.Is(err, cuda.ErrorInvalidValue) {
					t.Errorf("%s: got %v, want INVALID_VALUE", op.name, err)
				}
			}
			// The kernel accessor applies the same rule with
			// CUDA_ERROR_ILLEGAL_ADDRESS (it checks read access only).
			if tc.cp[0].Dst != ro {
				errDst := launchFill(t, d, tc.ctx, tc.cp[0].Dst, tc.cp[0].Len)
				errSrc := launchFill(t, d, tc.ctx, tc.cp[0].Src, tc.cp[0].Len)
				if tc.ok && (errDst != nil || errSrc != nil) {
					t.Errorf("kernel: %v / %v", errDst, errSrc)
				}
				bad := func(err error) bool { return errors.Is(err, cuda.ErrorIllegalAddress) }
				if !tc.ok && !(bad(errDst) && errSrc == nil || bad(errSrc) && errDst == nil) {
					t.Errorf("kernel: got %v / %v, want one ILLEGAL_ADDRESS", errDst, errSrc)
				}
			}
		})
	}
	if err := d.MemcpyHtoD(ctx0, unmappedRes, []byte{1}); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("HtoD to an unmapped range: %v", err)
	}
	if err := d.MemcpyDtoH(ctx1, make([]byte, 1), v.ptr); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("DtoH without access: %v", err)
	}
	// Granting access to device 1 makes the same copy legal.
	must(t, d.MemSetAccess(ctx0, v.ptr, v.size, rw(0, 1)))
	must(t, d.MemcpyDtoH(ctx1, make([]byte, 1), v.ptr))

	must(t, d.MemHostUnregister(ctx0, addrOf(host)))
	must(t, d.MemFree(ctx0, dm))
	for _, p := range []cuda.DevicePtr{ro, noAccess} {
		must(t, d.MemUnmap(ctx0, p, gran))
		must(t, d.MemAddressFree(ctx0, p, gran))
	}
	must(t, d.MemAddressFree(ctx0, unmappedRes, gran))
	must(t, d.MemAddressFree(ctx0, stale, gran))
	unmapVMM(t, d, ctx0, v)
	must(t, d.PrimaryCtxRelease(0))
	must(t, d.PrimaryCtxRelease(1))
	simtest.AssertNoLeaks(t, d)
}

// launchFill loads the test module in ctx, runs fill(p, n, 0x5a) and
// unloads the module.
func launchFill(t *testing.T, d *sim.Driver, ctx cuda.Context, p cuda.DevicePtr, n uint64) error {
	t.Helper()
	d.RegisterKernel("fill", fillKernel)
	m, err := d.ModuleLoadData(ctx, []byte(testPTX))
	must(t, err)
	defer func() { must(t, d.ModuleUnload(ctx, m)) }()
	f, err := d.ModuleGetFunction(ctx, m, "fill")
	must(t, err)
	return d.LaunchKernel(ctx, f, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, 0, 0, fillParams(p, n, 0x5a))
}

func TestKernels(t *testing.T) {
	d := newDriver(t, sim.Config{})
	ctx := retain(t, d, 0)
	for _, img := range []string{"", "\x7fELF....", "not ptx at all", ".version 8.0\n.target sm_90\n"} {
		if _, err := d.ModuleLoadData(ctx, []byte(img)); !errors.Is(err, cuda.ErrorInvalidImage) {
			t.Errorf("ModuleLoadData(%q) = %v, want INVALID_IMAGE", img, err)
		}
	}
	m, err := d.ModuleLoadData(ctx, append([]byte(testPTX), 0))
	must(t, err)
	for _, name := range []string{"fill", "unregistered", "absent"} {
		if _, err := d.ModuleGetFunction(ctx, m, name); !errors.Is(err, cuda.ErrorNotFound) {
			t.Errorf("ModuleGetFunction(%q) before RegisterKernel = %v, want NOT_FOUND", name, err)
		}
	}
	d.RegisterKernel("fill", fillKernel)
	d.RegisterKernel("absent", fillKernel) // registered but not in the module
	if _, err := d.ModuleGetFunction(ctx, m, "absent"); !errors.Is(err, cuda.ErrorNotFound) {
		t.Errorf("ModuleGetFunction(absent) = %v, want NOT_FOUND", err)
	}
	f, err := d.ModuleGetFunction(ctx, m, "fill")
	must(t, err)
	p, err := d.MemAlloc(ctx, 256)
	must(t, err)
	s, err := d.StreamCreate(ctx, 0)
	must(t, err)
	must(t, d.LaunchKernel(ctx, f, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, fillParams(p, 256, 0x77)))
	got := make([]byte, 256)
	must(t, d.MemcpyDtoH(ctx, got, p))
	if !bytes.Equal(got, bytes.Repeat([]byte{0x77}, 256)) {
		t.Fatal("kernel did not fill")
	}
	if n := d.StreamOps(s); n != 1 {
		t.Fatalf("StreamOps = %d", n)
	}
	for _, tc := range []struct {
		name        string
		grid, block cuda.Dim3
		params      [][]byte
		want        cuda.Result
	}{
		{"zero grid", cuda.Dim3{}, cuda.Dim3{X: 1, Y: 1, Z: 1}, fillParams(p, 1, 0), cuda.ErrorInvalidValue},
		{"block too big", cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 2048, Y: 1, Z: 1}, fillParams(p, 1, 0), cuda.ErrorInvalidValue},
		{"kernel error", cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, nil, cuda.ErrorLaunchFailed},
	} {
		if err := d.LaunchKernel(ctx, f, tc.grid, tc.block, 0, s, tc.params); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	must(t, d.ModuleUnload(ctx, m))
	if err := d.LaunchKernel(ctx, f, cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, 0, s, fillParams(p, 1, 0)); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("launch after unload: %v", err)
	}
	must(t, d.StreamDestroy(ctx, s))
	must(t, d.MemFree(ctx, p))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}

func TestStreamsAndEvents(t *testing.T) {
	d := newDriver(t, sim.Config{GPUs: 2})
	ctx0 := retain(t, d, 0)
	ctx1 := retain(t, d, 1)
	s, err := d.StreamCreate(ctx0, cuda.StreamNonBlocking)
	must(t, err)
	a, err := d.EventCreate(ctx0, 0)
	must(t, err)
	b, err := d.EventCreate(ctx0, 0)
	must(t, err)
	nt, err := d.EventCreate(ctx0, cuda.EventDisableTiming)
	must(t, err)
	if _, err := d.EventElapsedTime(ctx0, a, b); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("elapsed time of unrecorded events: %v", err)
	}
	if done, err := d.EventQuery(ctx0, a); err != nil || !done {
		t.Errorf("query of an unrecorded event: %v %v", done, err)
	}
	must(t, d.EventRecord(ctx0, a, s))
	must(t, d.EventRecord(ctx0, b, s))
	must(t, d.EventRecord(ctx0, nt, 0))
	must(t, d.EventSynchronize(ctx0, b))
	must(t, d.StreamWaitEvent(ctx0, s, b))
	if ms, err := d.EventElapsedTime(ctx0, a, b); err != nil || ms < 0 {
		t.Errorf("elapsed = %v, %v", ms, err)
	}
	if _, err := d.EventElapsedTime(ctx0, a, nt); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("elapsed time with a DISABLE_TIMING event: %v", err)
	}
	for name, err := range map[string]error{
		"stream of another context":  d.StreamSynchronize(ctx1, s),
		"event of another context":   d.EventRecord(ctx1, a, 0),
		"destroy the default stream": d.StreamDestroy(ctx0, 0),
		"record on unknown stream":   d.EventRecord(ctx0, a, s+1),
	} {
		if !errors.Is(err, cuda.ErrorInvalidHandle) {
			t.Errorf("%s: %v, want INVALID_HANDLE", name, err)
		}
	}
	if _, err := d.StreamCreate(ctx0, 0x80); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("bad stream flags: %v", err)
	}
	for _, e := range []cuda.Event{a, b, nt} {
		must(t, d.EventDestroy(ctx0, e))
	}
	if err := d.EventDestroy(ctx0, a); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("double event destroy: %v", err)
	}
	must(t, d.StreamDestroy(ctx0, s))
	must(t, d.PrimaryCtxRelease(0))
	must(t, d.PrimaryCtxRelease(1))
	if err := d.PrimaryCtxRelease(1); !errors.Is(err, cuda.ErrorInvalidContext) {
		t.Errorf("release of an unretained context: %v", err)
	}
	simtest.AssertNoLeaks(t, d)
}

// TestConcurrentContexts exercises the context-per-call rule: goroutines
// on different devices and NUMA nodes, each passing its own context, never
// see each other's state; run with -race.
func TestConcurrentContexts(t *testing.T) {
	cfg := sim.Config{GPUs: 4, HostNUMA: []int{0, 0, 1, 1}}
	d := newDriver(t, cfg)
	const workers, rounds = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := cuda.Device(w % cfg.GPUs)
			other := (dev + 1) % cuda.Device(cfg.GPUs)
			errs <- func() error {
				ctx, err := d.PrimaryCtxRetain(dev)
				if err != nil {
					return err
				}
				defer d.PrimaryCtxRelease(dev)
				octx, err := d.PrimaryCtxRetain(other)
				if err != nil {
					return err
				}
				defer d.PrimaryCtxRelease(other)
				node := int32(cfg.HostNUMA[dev])
				s, err := d.StreamCreate(ctx, cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer d.StreamDestroy(ctx, s)
				for r := range rounds {
					h, err := d.MemCreate(ctx, gran, hostNUMA(node, 0))
					if err != nil {
						return err
					}
					p, err := d.MemAddressReserve(ctx, gran, 0)
					if err != nil {
						return err
					}
					if err := d.MemMap(ctx, p, gran, 0, h); err != nil {
						return err
					}
					if err := d.MemSetAccess(ctx, p, gran, rw(int32(dev))); err != nil {
						return err
					}
					want := pattern(4096, byte(w*rounds+r))
					if err := d.MemcpyHtoD(ctx, p, want); err != nil {
						return err
					}
					dm, err := d.MemAlloc(ctx, 4096)
					if err != nil {
						return err
					}
					if err := d.MemcpyAsync(ctx, []cuda.Copy{{Dst: dm, Src: p, Len: 4096}}, s); err != nil {
						return err
					}
					got := make([]byte, 4096)
					if err := d.MemcpyDtoH(ctx, got, dm); err != nil {
						return err
					}
					if !bytes.Equal(got, want) {
						return fmt.Errorf("worker %d round %d: bytes differ", w, r)
					}
					// Access was granted to dev only: the other
					// device's context must be refused.
					if err := d.MemcpyDtoH(octx, got, p); !errors.Is(err, cuda.ErrorInvalidValue) {
						return fmt.Errorf("worker %d: copy from device %d without access: %v", w, other, err)
					}
					for _, step := range []error{d.MemFree(ctx, dm), d.MemUnmap(ctx, p, gran), d.MemAddressFree(ctx, p, gran), d.MemRelease(ctx, h)} {
						if step != nil {
							return step
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	simtest.AssertNoLeaks(t, d)
}

func TestTopology(t *testing.T) {
	cfg := sim.Config{
		GPUs: 4, HostNUMA: []int{0, 1, -1, 1}, NUMANodes: []int{0, 1, 2},
		NodeGranularity: map[int]uint64{1: 4 << 20}, DeviceGranularity: map[int]uint64{3: 1 << 20},
		DriverVersion: 12040,
	}
	d := newDriver(t, cfg)
	if n, err := d.DeviceCount(); err != nil || n != 4 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	if v, err := d.DriverVersion(); err != nil || v != 12040 {
		t.Fatalf("DriverVersion = %d, %v", v, err)
	}
	if d.Capabilities().MemcpyBatchAsync {
		t.Fatal("driver 12.4 has no cuMemcpyBatchAsync")
	}
	for dev, want := range cfg.HostNUMA {
		if v, err := d.DeviceAttribute(cuda.Device(dev), cuda.AttrHostNUMAID); err != nil || v != want {
			t.Errorf("GPU %d HOST_NUMA_ID = %d, %v; want %d", dev, v, err, want)
		}
		if name, err := d.DeviceName(cuda.Device(dev)); err != nil || name != fmt.Sprintf("kvfabric-sim GPU %d", dev) {
			t.Errorf("DeviceName(%d) = %q, %v", dev, name, err)
		}
	}
	for _, tc := range []struct {
		attr cuda.Attribute
		want int
	}{
		{cuda.AttrVirtualMemoryManagementSupported, 1},
		{cuda.AttrHandleTypePosixFDSupported, 1},
		{cuda.AttrHandleTypeFabricSupported, 1},
		{cuda.AttrHostNUMAVirtualMemoryManagementSupport, 1},
		{cuda.AttrHostNUMAMultinodeIPCSupported, 0},
		{cuda.AttrNUMAID, -1},
	} {
		if v, err := d.DeviceAttribute(0, tc.attr); err != nil || v != tc.want {
			t.Errorf("attribute %d = %d, %v; want %d", tc.attr, v, err, tc.want)
		}
	}
	if _, err := d.DeviceAttribute(0, cuda.Attribute(100000)); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("unknown attribute: %v", err)
	}
	if _, err := d.DeviceAttribute(4, cuda.AttrHostNUMAID); !errors.Is(err, cuda.ErrorInvalidDevice) {
		t.Errorf("attribute of device 4: %v", err)
	}
	if ok, err := d.CanAccessPeer(0, 3); err != nil || !ok {
		t.Errorf("CanAccessPeer(0,3) = %v, %v", ok, err)
	}
	ctx := retain(t, d, 2)
	for _, tc := range []struct {
		prop cuda.AllocProp
		want uint64
		err  cuda.Result
	}{
		{hostNUMA(0, 0), 2 << 20, cuda.Success},
		{hostNUMA(1, 0), 4 << 20, cuda.Success},
		{hostNUMA(2, 0), 2 << 20, cuda.Success}, // exists, no GPU on it
		{hostNUMA(5, 0), 0, cuda.ErrorInvalidValue},
		{hostNUMA(-1, 0), 0, cuda.ErrorInvalidValue},
		{device(3, cuda.HandlePosixFD), 1 << 20, cuda.Success},
		{device(4, 0), 0, cuda.ErrorInvalidDevice},
	} {
		g, err := d.MemGetAllocationGranularity(ctx, tc.prop, cuda.GranularityMinimum)
		if cuda.ResultOf(err) != tc.err || g != tc.want {
			t.Errorf("granularity of %+v = %d, %v; want %d, %v", tc.prop.Location, g, err, tc.want, tc.err)
		}
	}
	// The 4 MiB node rejects a 2 MiB allocation.
	if _, err := d.MemCreate(ctx, 2<<20, hostNUMA(1, 0)); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("2 MiB on a 4 MiB-granularity node: %v", err)
	}
	must(t, d.PrimaryCtxRelease(2))
	simtest.AssertNoLeaks(t, d)
}

func TestConfig(t *testing.T) {
	full := sim.Config{
		GPUs: 2, HostNUMA: []int{0, -1}, NUMANodes: []int{0, 1}, Granularity: 1 << 20,
		NodeGranularity: map[int]uint64{1: 2 << 20}, FabricPermitted: true, FabricRegistryDir: "/tmp/x",
		DriverVersion: 12080, NoMemcpyBatch: true, NodeCapacity: map[int]uint64{0: 1 << 30},
		DeviceCapacity: map[int]uint64{1: 1 << 30},
	}
	t.Run("env round trip", func(t *testing.T) {
		t.Setenv(sim.EnvVar, full.Env())
		got, err := sim.ConfigFromEnv()
		must(t, err)
		if got.Env() != full.Env() {
			t.Fatalf("round trip: %s != %s", got.Env(), full.Env())
		}
	})
	t.Run("file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "sim.json")
		must(t, os.WriteFile(p, []byte(full.Env()), 0o600))
		t.Setenv(sim.EnvVar, p)
		got, err := sim.ConfigFromEnv()
		must(t, err)
		if got.Env() != full.Env() {
			t.Fatalf("from file: %s", got.Env())
		}
	})
	t.Run("unset", func(t *testing.T) {
		t.Setenv(sim.EnvVar, "")
		got, err := sim.ConfigFromEnv()
		must(t, err)
		d, err := sim.New(got)
		must(t, err)
		defer d.Close()
		c := d.Config()
		if c.GPUs != 1 || c.HostNUMA[0] != 0 || c.Granularity != 2<<20 || c.DriverVersion != 13000 || c.FabricPermitted || !d.Capabilities().MemcpyBatchAsync {
			t.Fatalf("defaults: %+v", c)
		}
		if want := fmt.Sprintf("kvfabric-sim-fabric-%d", os.Getuid()); filepath.Base(c.FabricRegistryDir) != want {
			t.Fatalf("registry dir %q", c.FabricRegistryDir)
		}
	})
	for _, tc := range []struct {
		name, env, field string
	}{
		{"unknown key", `{"gpu":2}`, "gpu"},
		{"host_numa length", `{"gpus":2,"host_numa":[0]}`, "host_numa"},
		{"host_numa not a node", `{"host_numa":[3],"numa_nodes":[0]}`, "host_numa"},
		{"granularity", `{"granularity":12345}`, "granularity"},
		{"missing file", `/nonexistent/sim.json`, "nonexistent"},
		{"negative gpus", `{"gpus":-1}`, "gpus"},
		{"relative registry", `{"fabric_registry_dir":"rel"}`, "fabric_registry_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(sim.EnvVar, tc.env)
			_, err := sim.ConfigFromEnv()
			if !errors.Is(err, sim.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want ErrInvalidConfig naming %q", err, tc.field)
			}
		})
	}
}

func TestBatchCapabilityAbsent(t *testing.T) {
	d := newDriver(t, sim.Config{NoMemcpyBatch: true})
	ctx := retain(t, d, 0)
	p, err := d.MemAlloc(ctx, 64)
	must(t, err)
	if err := d.MemcpyBatchAsync(ctx, []cuda.Copy{{Dst: p, Src: p, Len: 8}}, 3); !errors.Is(err, cuda.ErrorNotSupported) {
		t.Fatalf("MemcpyBatchAsync = %v, want NOT_SUPPORTED", err)
	}
	must(t, d.MemFree(ctx, p))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}
