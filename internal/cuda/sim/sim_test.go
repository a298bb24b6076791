package sim_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

const gran = sim.DefaultGranularity

// newDriver returns a simulator whose fabric registry is private to the
// test, and closes it at cleanup.
func newDriver(tb testing.TB, cfg sim.Config) *sim.Driver {
	tb.Helper()
	if cfg.FabricRegistryDir == "" {
		cfg.FabricRegistryDir = tb.TempDir()
	}
	d, err := sim.New(cfg)
	if err != nil {
		tb.Fatalf("sim.New: %v", err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func retain(tb testing.TB, d cuda.Driver, dev cuda.Device) cuda.Context {
	tb.Helper()
	ctx, err := d.PrimaryCtxRetain(dev)
	must(tb, err)
	return ctx
}

// vmm is one allocation mapped at its own reservation with access for devs.
type vmm struct {
	h    cuda.AllocHandle
	ptr  cuda.DevicePtr
	size uint64
}

func mapVMM(tb testing.TB, d cuda.Driver, ctx cuda.Context, h cuda.AllocHandle, size uint64, devs ...cuda.Device) vmm {
	tb.Helper()
	ptr, err := d.MemAddressReserve(ctx, size, 0)
	must(tb, err)
	must(tb, d.MemMap(ctx, ptr, size, 0, h))
	var descs []cuda.AccessDesc
	for _, dev := range devs {
		descs = append(descs, cuda.AccessDesc{Location: cuda.Location{Type: cuda.LocationDevice, ID: int32(dev)}, Flags: cuda.AccessReadWrite})
	}
	must(tb, d.MemSetAccess(ctx, ptr, size, descs))
	return vmm{h: h, ptr: ptr, size: size}
}

func unmapVMM(tb testing.TB, d cuda.Driver, ctx cuda.Context, v vmm) {
	tb.Helper()
	must(tb, d.MemUnmap(ctx, v.ptr, v.size))
	must(tb, d.MemAddressFree(ctx, v.ptr, v.size))
	must(tb, d.MemRelease(ctx, v.h))
}

func hostNUMA(node int32, types cuda.HandleType) cuda.AllocProp {
	return cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: node}, HandleTypes: types}
}

func device(dev int32, types cuda.HandleType) cuda.AllocProp {
	return cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationDevice, ID: dev}, HandleTypes: types}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestLifecycleRoundTrip(t *testing.T) {
	for _, prop := range []cuda.AllocProp{hostNUMA(0, cuda.HandlePosixFD), device(0, cuda.HandleNone)} {
		t.Run(prop.Location.Type.String(), func(t *testing.T) {
			d := newDriver(t, sim.Config{})
			ctx := retain(t, d, 0)
			h, err := d.MemCreate(ctx, 2*gran, prop)
			must(t, err)
			v := mapVMM(t, d, ctx, h, 2*gran, 0)
			want := pattern(int(2*gran), 1)
			must(t, d.MemcpyHtoD(ctx, v.ptr, want))
			got := make([]byte, len(want))
			must(t, d.MemcpyDtoH(ctx, got, v.ptr))
			if !bytes.Equal(got, want) {
				t.Fatal("bytes differ after HtoD/DtoH")
			}
			// Device-to-device through MemcpyAsync on a stream.
			s, err := d.StreamCreate(ctx, cuda.StreamNonBlocking)
			must(t, err)
			must(t, d.MemcpyAsync(ctx, []cuda.Copy{{Dst: v.ptr, Src: v.ptr + cuda.DevicePtr(gran), Len: gran}}, s))
			must(t, d.StreamSynchronize(ctx, s))
			must(t, d.MemcpyDtoH(ctx, got[:gran], v.ptr))
			if !bytes.Equal(got[:gran], want[gran:]) {
				t.Fatal("bytes differ after DtoD")
			}
			must(t, d.StreamDestroy(ctx, s))
			unmapVMM(t, d, ctx, v)
			must(t, d.PrimaryCtxRelease(0))
			simtest.AssertNoLeaks(t, d)
			if err := d.MemRelease(ctx, h); !errors.Is(err, cuda.ErrorInvalidContext) {
				t.Fatalf("release after ctx release: %v", err)
			}
		})
	}
}
