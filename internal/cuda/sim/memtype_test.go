package sim_test

import (
	"errors"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

func TestPointerMemoryTypes(t *testing.T) {
	d := newDriver(t, sim.Config{GPUs: 2})
	ctx := retain(t, d, 0)

	dm, err := d.MemAlloc(ctx, 10000)
	must(t, err)
	hd, err := d.MemCreate(ctx, 2*gran, device(1, cuda.HandlePosixFD))
	must(t, err)
	vd := mapVMM(t, d, ctx, hd, 2*gran, 0)
	hh, err := d.MemCreate(ctx, gran, hostNUMA(0, 0))
	must(t, err)
	vh := mapVMM(t, d, ctx, hh, gran, 0)
	// A mapping without any access granted: the type is the allocation's.
	hn, err := d.MemCreate(ctx, gran, device(0, 0))
	must(t, err)
	noAccess, err := d.MemAddressReserve(ctx, gran, 0)
	must(t, err)
	must(t, d.MemMap(ctx, noAccess, gran, 0, hn))
	// An imported DEVICE allocation mapped in this process.
	fd, err := d.MemExportToFD(ctx, hd)
	must(t, err)
	himp, err := d.MemImportFromFD(ctx, fd)
	must(t, err)
	unix.Close(fd)
	vimp := mapVMM(t, d, ctx, himp, 2*gran, 0)
	unmapped, err := d.MemAddressReserve(ctx, gran, 0)
	must(t, err)
	host := mmapHost(t, 3*4096)
	must(t, d.MemHostRegister(ctx, addrOf(host), 2*4096, 0))
	goHeap := make([]byte, 64)
	hp := cuda.DevicePtr(addrOf(host))

	const (
		U = cuda.MemoryTypeUnregistered
		H = cuda.MemoryTypeHost
		D = cuda.MemoryTypeDevice
	)
	cases := []struct {
		name string
		p    cuda.DevicePtr
		want cuda.MemoryType
	}{
		{"memalloc base", dm, D},
		{"memalloc last byte", dm + 9999, D},
		{"device vmm", vd.ptr + cuda.DevicePtr(gran) + 17, D},
		{"host-numa vmm", vh.ptr + 5, H},
		{"mapped without access", noAccess, D},
		{"imported device vmm", vimp.ptr, D},
		{"reserved, unmapped", unmapped, U},
		{"registered host", hp, H},
		{"registered host last byte", hp + 2*4096 - 1, H},
		{"host page after the registration", hp + 2*4096, U},
		{"go heap", cuda.DevicePtr(uintptr(unsafe.Pointer(&goHeap[0]))), U},
		{"null", 0, U},
	}
	ptrs := make([]cuda.DevicePtr, len(cases))
	want := make([]cuda.MemoryType, len(cases))
	for i, tc := range cases {
		ptrs[i], want[i] = tc.p, tc.want
	}
	got := make([]cuda.MemoryType, len(ptrs))
	before := d.CallCount("PointerMemoryTypes")
	must(t, d.PointerMemoryTypes(ctx, ptrs, got))
	if n := d.CallCount("PointerMemoryTypes") - before; n != 1 {
		t.Fatalf("%d calls for one batch", n)
	}
	for i, tc := range cases {
		if got[i] != tc.want {
			t.Errorf("%s (%#x): %v, want %v", tc.name, uint64(tc.p), got[i], tc.want)
		}
	}

	// Bad input and a dead context fail and write nothing.
	out := []cuda.MemoryType{99}
	if err := d.PointerMemoryTypes(ctx, ptrs, out); !errors.Is(err, cuda.ErrorInvalidValue) || out[0] != 99 {
		t.Fatalf("short out: %v, out %v", err, out)
	}
	if err := d.PointerMemoryTypes(cuda.Context(12345), ptrs[:1], out); !errors.Is(err, cuda.ErrorInvalidContext) || out[0] != 99 {
		t.Fatalf("bad context: %v, out %v", err, out)
	}
	must(t, d.PointerMemoryTypes(ctx, nil, nil))

	// Freed, unregistered and unmapped memory is unknown again.
	must(t, d.MemFree(ctx, dm))
	must(t, d.MemHostUnregister(ctx, addrOf(host)))
	unmapVMM(t, d, ctx, vh)
	again := []cuda.DevicePtr{dm, hp, vh.ptr}
	got = got[:len(again)]
	must(t, d.PointerMemoryTypes(ctx, again, got))
	if w := []cuda.MemoryType{U, U, U}; !slices.Equal(got, w) {
		t.Fatalf("after teardown: %v, want %v", got, w)
	}

	must(t, d.MemUnmap(ctx, noAccess, gran))
	must(t, d.MemAddressFree(ctx, noAccess, gran))
	must(t, d.MemRelease(ctx, hn))
	unmapVMM(t, d, ctx, vimp)
	unmapVMM(t, d, ctx, vd)
	must(t, d.MemAddressFree(ctx, unmapped, gran))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}

// TestPointerRanges: each pointer's answer is the allocation that holds it
// — a cuMemAlloc buffer, a registered host range, one MemMap's range — in
// one call; two registrations that adjoin are two ranges; unknown memory
// and freed memory answer the zero range.
func TestPointerRanges(t *testing.T) {
	d := newDriver(t, sim.Config{GPUs: 1})
	ctx := retain(t, d, 0)

	dm, err := d.MemAlloc(ctx, 10000)
	must(t, err)
	hh, err := d.MemCreate(ctx, gran, hostNUMA(0, 0))
	must(t, err)
	vh := mapVMM(t, d, ctx, hh, gran, 0)
	host := mmapHost(t, 4*4096) // the last page stays unregistered
	hp := cuda.DevicePtr(addrOf(host))
	// Two registrations that adjoin: one range each.
	must(t, d.MemHostRegister(ctx, addrOf(host), 4096, 0))
	must(t, d.MemHostRegister(ctx, addrOf(host)+4096, 2*4096, 0))
	unmapped, err := d.MemAddressReserve(ctx, gran, 0)
	must(t, err)
	goHeap := make([]byte, 64)

	r := func(p cuda.DevicePtr, n uint64) cuda.AddrRange { return cuda.AddrRange{Start: p, Size: n} }
	cases := []struct {
		name string
		p    cuda.DevicePtr
		want cuda.AddrRange
	}{
		{"memalloc base", dm, r(dm, 10000)},
		{"memalloc last byte", dm + 9999, r(dm, 10000)},
		{"host-numa vmm", vh.ptr + 5, r(vh.ptr, gran)},
		{"first registration", hp + 4095, r(hp, 4096)},
		{"second registration", hp + 4096, r(hp+4096, 2*4096)},
		{"page after them", hp + 3*4096, cuda.AddrRange{}},
		{"reserved, unmapped", unmapped, cuda.AddrRange{}},
		{"go heap", cuda.DevicePtr(uintptr(unsafe.Pointer(&goHeap[0]))), cuda.AddrRange{}},
		{"null", 0, cuda.AddrRange{}},
	}
	ptrs := make([]cuda.DevicePtr, len(cases))
	for i, tc := range cases {
		ptrs[i] = tc.p
	}
	got := make([]cuda.AddrRange, len(ptrs))
	before := d.CallCount("PointerRanges")
	must(t, d.PointerRanges(ctx, ptrs, got))
	if n := d.CallCount("PointerRanges") - before; n != 1 {
		t.Fatalf("%d calls for one batch", n)
	}
	for i, tc := range cases {
		if got[i] != tc.want {
			t.Errorf("%s (%#x): %+v, want %+v", tc.name, uint64(tc.p), got[i], tc.want)
		}
	}
	if !got[0].Contains(dm+100, 9900) || got[0].Contains(dm+100, 9901) || got[3].Contains(hp+4000, 200) {
		t.Errorf("AddrRange.Contains: wrong answer at an edge")
	}

	out := []cuda.AddrRange{{Start: 9, Size: 9}}
	if err := d.PointerRanges(ctx, ptrs, out); !errors.Is(err, cuda.ErrorInvalidValue) || out[0].Start != 9 {
		t.Fatalf("short out: %v, out %v", err, out)
	}
	if err := d.PointerRanges(cuda.Context(12345), ptrs[:1], out); !errors.Is(err, cuda.ErrorInvalidContext) || out[0].Start != 9 {
		t.Fatalf("bad context: %v, out %v", err, out)
	}

	must(t, d.MemFree(ctx, dm))
	must(t, d.PointerRanges(ctx, ptrs[:1], got[:1]))
	if got[0] != (cuda.AddrRange{}) {
		t.Fatalf("freed buffer: %+v", got[0])
	}
	must(t, d.MemHostUnregister(ctx, addrOf(host)))
	must(t, d.MemHostUnregister(ctx, addrOf(host)+4096))
	unmapVMM(t, d, ctx, vh)
	must(t, d.MemAddressFree(ctx, unmapped, gran))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}
