//go:build cgo && linux

package cuda

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGPUMapPastAllocation: cuMemMap refuses a range past the end of an
// allocation, created or imported. The consumer's check that a segment
// descriptor does not claim more than the imported allocation (CUDA has no
// size query for an imported handle) rests on this on the real driver.
func TestGPUMapPastAllocation(t *testing.T) {
	d := openGPU(t)
	for _, loc := range []Location{{Type: LocationDevice, ID: 0}, {Type: LocationHostNUMA, ID: hostNUMA(t, d)}} {
		t.Run(loc.Type.String(), func(t *testing.T) {
			ctx, err := d.PrimaryCtxRetain(0)
			must(t, err)
			prop := AllocProp{Location: loc, HandleTypes: HandlePosixFD}
			g, err := d.MemGetAllocationGranularity(ctx, prop, GranularityMinimum)
			must(t, err)
			h, err := d.MemCreate(ctx, g, prop)
			must(t, err)
			fd, err := d.MemExportToFD(ctx, h)
			must(t, err)
			imp, err := d.MemImportFromFD(ctx, fd)
			must(t, err)
			must(t, unix.Close(fd))
			va, err := d.MemAddressReserve(ctx, 2*g, g)
			must(t, err)
			for name, hh := range map[string]AllocHandle{"created": h, "imported": imp} {
				for _, r := range []struct{ size, off uint64 }{{2 * g, 0}, {g, g}} {
					err := d.MemMap(ctx, va, r.size, r.off, hh)
					if err == nil {
						must(t, d.MemUnmap(ctx, va, r.size))
						t.Fatalf("%s: cuMemMap of [%d, +%d) of a %d-byte allocation succeeded", name, r.off, r.size, g)
					}
					// mapping.importMap reports these results as a
					// descriptor that does not match its allocation. Driver
					// 580 (H200): NOT_SUPPORTED.
					if !errors.Is(err, ErrorNotSupported) && !errors.Is(err, ErrorInvalidValue) {
						t.Errorf("%s: cuMemMap past the end: %v; want CUDA_ERROR_NOT_SUPPORTED or CUDA_ERROR_INVALID_VALUE", name, err)
					}
				}
				must(t, d.MemMap(ctx, va, g, 0, hh))
				must(t, d.MemUnmap(ctx, va, g))
			}
			must(t, d.MemAddressFree(ctx, va, 2*g))
			must(t, d.MemRelease(ctx, imp))
			must(t, d.MemRelease(ctx, h))
			must(t, d.PrimaryCtxRelease(0))
			assertNoLeaks(t, d)
		})
	}
}
