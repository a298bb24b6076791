package sim_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/cuda/sim/simtest"
)

// childDriver opens the simulator a parent configured through sim.EnvVar.
func childDriver(t *testing.T) *sim.Driver {
	t.Helper()
	cfg, err := sim.ConfigFromEnv()
	must(t, err)
	d, err := sim.New(cfg)
	must(t, err)
	return d
}

func recv(t *testing.T) string {
	t.Helper()
	m, err := simtest.Recv()
	must(t, err)
	return m
}

// importAndSwap is the child side of both directions of a test: it maps
// imported memory, checks the parent's pattern, and writes its own.
func importAndSwap(t *testing.T, d *sim.Driver, ctx cuda.Context, h cuda.AllocHandle, size uint64) {
	t.Helper()
	v := mapVMM(t, d, ctx, h, size, 0)
	got := make([]byte, size)
	must(t, d.MemcpyDtoH(ctx, got, v.ptr))
	if !bytes.Equal(got, pattern(int(size), 'P')) {
		t.Fatal("child: imported bytes differ from the parent's pattern")
	}
	must(t, d.MemcpyHtoD(ctx, v.ptr, pattern(int(size), 'C')))
	unmapVMM(t, d, ctx, v)
}

func TestCrossProcessPosixFD(t *testing.T) {
	if simtest.Role() == "fd-importer" {
		d := childDriver(t)
		ctx := retain(t, d, 0)
		f := simtest.ExtraFile(0, "export")
		size, _ := strconv.ParseUint(os.Getenv("SIZE"), 10, 64)
		h, err := d.MemImportFromFD(ctx, int(f.Fd()))
		must(t, err)
		must(t, f.Close()) // the import keeps its own fd
		importAndSwap(t, d, ctx, h, size)
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
		simtest.Send("done")
		return
	}
	for _, prop := range []cuda.AllocProp{hostNUMA(0, cuda.HandlePosixFD), device(0, cuda.HandlePosixFD)} {
		t.Run(prop.Location.Type.String(), func(t *testing.T) {
			cfg := sim.Config{FabricRegistryDir: t.TempDir()}
			d := newDriver(t, cfg)
			ctx := retain(t, d, 0)
			size := uint64(2 * gran)
			h, err := d.MemCreate(ctx, size, prop)
			must(t, err)
			v := mapVMM(t, d, ctx, h, size, 0)
			must(t, d.MemcpyHtoD(ctx, v.ptr, pattern(int(size), 'P')))
			fd, err := d.MemExportToFD(ctx, h)
			must(t, err)
			if n := d.LiveObjects()[cuda.ObjExport]; n != 1 {
				t.Fatalf("live exports = %d, want 1", n)
			}
			f := os.NewFile(uintptr(fd), "export")
			child := simtest.Spawn(t, "TestCrossProcessPosixFD", "fd-importer", simtest.Options{
				Config: &cfg, Files: []*os.File{f}, Env: []string{"SIZE=" + strconv.FormatUint(size, 10)},
			})
			must(t, f.Close()) // the child holds its own copy
			if m := child.Recv(); m != "done" {
				t.Fatalf("child said %q", m)
			}
			child.Wait()
			got := make([]byte, size)
			must(t, d.MemcpyDtoH(ctx, got, v.ptr))
			if !bytes.Equal(got, pattern(int(size), 'C')) {
				t.Fatal("parent does not see the child's bytes")
			}
			unmapVMM(t, d, ctx, v)
			must(t, d.PrimaryCtxRelease(0))
			simtest.AssertNoLeaks(t, d)
		})
	}
}

func TestCrossProcessFabric(t *testing.T) {
	switch simtest.Role() {
	case "fabric-importer":
		d := childDriver(t)
		ctx := retain(t, d, 0)
		var fh cuda.FabricHandle
		b, err := hex.DecodeString(recv(t))
		must(t, err)
		copy(fh[:], b)
		h, err := d.MemImportFromFabric(ctx, fh)
		must(t, err)
		importAndSwap(t, d, ctx, h, 2*gran)
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
		simtest.Send("done")
		return
	case "fabric-exporter":
		d := childDriver(t)
		ctx := retain(t, d, 0)
		size := uint64(2 * gran)
		h, err := d.MemCreate(ctx, size, hostNUMA(0, cuda.HandleFabric))
		must(t, err)
		v := mapVMM(t, d, ctx, h, size, 0)
		must(t, d.MemcpyHtoD(ctx, v.ptr, pattern(int(size), 'P')))
		fh, err := d.MemExportToFabric(ctx, h)
		must(t, err)
		simtest.Send(hex.EncodeToString(fh[:]))
		if m := recv(t); m != "imported" {
			t.Fatalf("parent said %q", m)
		}
		got := make([]byte, size)
		must(t, d.MemcpyDtoH(ctx, got, v.ptr))
		if !bytes.Equal(got, pattern(int(size), 'C')) {
			t.Fatal("exporter does not see the importer's bytes")
		}
		unmapVMM(t, d, ctx, v) // releases: the fabric export is withdrawn
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
		simtest.Send("released")
		return
	}
	cfg := sim.Config{FabricPermitted: true, FabricRegistryDir: t.TempDir()}

	t.Run("parent-exports", func(t *testing.T) {
		d := newDriver(t, cfg)
		ctx := retain(t, d, 0)
		size := uint64(2 * gran)
		h, err := d.MemCreate(ctx, size, hostNUMA(0, cuda.HandleFabric|cuda.HandlePosixFD))
		must(t, err)
		v := mapVMM(t, d, ctx, h, size, 0)
		must(t, d.MemcpyHtoD(ctx, v.ptr, pattern(int(size), 'P')))
		fh, err := d.MemExportToFabric(ctx, h)
		must(t, err)
		if again, err := d.MemExportToFabric(ctx, h); err != nil || again != fh {
			t.Fatalf("second export: %v, same handle %v", err, again == fh)
		}
		child := simtest.Spawn(t, "TestCrossProcessFabric", "fabric-importer", simtest.Options{Config: &cfg})
		child.Send(hex.EncodeToString(fh[:]))
		if m := child.Recv(); m != "done" {
			t.Fatalf("child said %q", m)
		}
		child.Wait()
		got := make([]byte, size)
		must(t, d.MemcpyDtoH(ctx, got, v.ptr))
		if !bytes.Equal(got, pattern(int(size), 'C')) {
			t.Fatal("parent does not see the child's bytes")
		}
		unmapVMM(t, d, ctx, v)
		if _, err := d.MemImportFromFabric(ctx, fh); !errors.Is(err, cuda.ErrorNotFound) {
			t.Fatalf("import after release: %v, want NOT_FOUND", err)
		}
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
	})

	t.Run("child-exports", func(t *testing.T) {
		d := newDriver(t, cfg)
		ctx := retain(t, d, 0)
		child := simtest.Spawn(t, "TestCrossProcessFabric", "fabric-exporter", simtest.Options{Config: &cfg})
		b, err := hex.DecodeString(child.Recv())
		must(t, err)
		var fh cuda.FabricHandle
		copy(fh[:], b)
		h, err := d.MemImportFromFabric(ctx, fh)
		must(t, err)
		v := mapVMM(t, d, ctx, h, 2*gran, 0)
		got := make([]byte, v.size)
		must(t, d.MemcpyDtoH(ctx, got, v.ptr))
		if !bytes.Equal(got, pattern(int(v.size), 'P')) {
			t.Fatal("importer does not see the exporter's bytes")
		}
		must(t, d.MemcpyHtoD(ctx, v.ptr, pattern(int(v.size), 'C')))
		child.Send("imported")
		if m := child.Recv(); m != "released" {
			t.Fatalf("child said %q", m)
		}
		child.Wait()
		// The exporter released and exited: the mapping stays valid (the
		// import holds the memory), the handle is stale.
		must(t, d.MemcpyDtoH(ctx, got, v.ptr))
		if !bytes.Equal(got, pattern(int(v.size), 'C')) {
			t.Fatal("imported memory changed after the exporter exited")
		}
		if _, err := d.MemImportFromFabric(ctx, fh); !errors.Is(err, cuda.ErrorNotFound) {
			t.Fatalf("import of a stale handle: %v, want NOT_FOUND", err)
		}
		unmapVMM(t, d, ctx, v)
		must(t, d.PrimaryCtxRelease(0))
		simtest.AssertNoLeaks(t, d)
	})
}

func TestFabricNotPermitted(t *testing.T) {
	d := newDriver(t, sim.Config{}) // the default, like the lab H200s
	ctx := retain(t, d, 0)
	for _, tc := range []struct {
		name string
		prop cuda.AllocProp
	}{
		{"host_numa", hostNUMA(0, cuda.HandleFabric)},
		{"host_numa+fd", hostNUMA(0, cuda.HandleFabric|cuda.HandlePosixFD)},
		{"device", device(0, cuda.HandleFabric)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.MemCreate(ctx, gran, tc.prop); !errors.Is(err, cuda.ErrorNotPermitted) {
				t.Fatalf("MemCreate = %v, want NOT_PERMITTED", err)
			}
		})
	}
	// The attribute still says FABRIC is supported, as on H200.
	if v, err := d.DeviceAttribute(0, cuda.AttrHandleTypeFabricSupported); err != nil || v != 1 {
		t.Fatalf("fabric attribute = %d, %v", v, err)
	}
	// An allocation without FABRIC cannot be exported as fabric.
	h, err := d.MemCreate(ctx, gran, hostNUMA(0, cuda.HandlePosixFD))
	must(t, err)
	if _, err := d.MemExportToFabric(ctx, h); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("MemExportToFabric = %v, want INVALID_VALUE", err)
	}
	var junk cuda.FabricHandle
	junk[0] = 1
	if _, err := d.MemImportFromFabric(ctx, junk); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Fatalf("MemImportFromFabric(junk) = %v, want INVALID_VALUE", err)
	}
	must(t, d.MemRelease(ctx, h))
	must(t, d.PrimaryCtxRelease(0))
	simtest.AssertNoLeaks(t, d)
}
