package sim_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

// TestAllocationSizeAndMapBounds: MemAllocationSize reports the size of a
// created and of an imported allocation, and MemMap refuses a range past
// an allocation's end as cuMemMap does, so a consumer that maps a claimed
// size learns that the allocation is smaller.
func TestAllocationSizeAndMapBounds(t *testing.T) {
	d := newDriver(t, sim.Config{})
	ctx := retain(t, d, 0)
	const size = 2 * gran
	h, err := d.MemCreate(ctx, size, hostNUMA(0, cuda.HandlePosixFD))
	must(t, err)
	fd, err := d.MemExportToFD(ctx, h)
	must(t, err)
	imp, err := d.MemImportFromFD(ctx, fd)
	must(t, err)
	must(t, unix.Close(fd))
	for name, hh := range map[string]cuda.AllocHandle{"created": h, "imported": imp} {
		n, err := d.MemAllocationSize(ctx, hh)
		if err != nil || n != size {
			t.Fatalf("%s: MemAllocationSize = %d, %v; want %d", name, n, err, size)
		}
		va, err := d.MemAddressReserve(ctx, 2*size, 0)
		must(t, err)
		for _, r := range []struct{ size, off uint64 }{{2 * size, 0}, {size, gran}, {gran, size}} {
			if err := d.MemMap(ctx, va, r.size, r.off, hh); !errors.Is(err, cuda.ErrorNotSupported) {
				t.Fatalf("%s: MemMap of [%d, +%d) of a %d-byte allocation: %v; want CUDA_ERROR_NOT_SUPPORTED (as driver 580)", name, r.off, r.size, size, err)
			}
		}
		must(t, d.MemMap(ctx, va, size, 0, hh))
		must(t, d.MemUnmap(ctx, va, size))
		must(t, d.MemAddressFree(ctx, va, 2*size))
	}
	if _, err := d.MemAllocationSize(ctx, 12345); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("unknown handle: %v", err)
	}
	must(t, d.MemRelease(ctx, imp))
	must(t, d.MemRelease(ctx, h))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}
