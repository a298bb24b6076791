package mapping_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/mapping"
	"github.com/kvfabric/kvfabric/internal/segment"
)

const segSize = 2 << 20

// provider owns segments on its own simulated driver and serves their fds.
type provider struct {
	drv *sim.Driver
	ctx cuda.Context
	srv *fdx.Server
	dev cuda.Device
}

type provSeg struct {
	d    segment.Descriptor
	h    cuda.AllocHandle
	base cuda.DevicePtr
}

func newProvider(t testing.TB, cfg sim.Config) *provider {
	t.Helper()
	d, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fdx.Listen(t.TempDir(), "prov", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{drv: d, ctx: ctx, srv: srv}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		d.PrimaryCtxRelease(0)
		d.Close()
	})
	return p
}

// segment allocates a HOST_NUMA segment filled with fill, exports it by fd
// (or fabric) and returns its descriptor.
func (p *provider) segment(t testing.TB, id string, gen uint64, fill byte, kind segment.HandleKind) *provSeg {
	t.Helper()
	ht := cuda.HandlePosixFD
	if kind == segment.HandleFabric {
		ht = cuda.HandleFabric
	}
	prop := cuda.AllocProp{Location: cuda.Location{Type: cuda.LocationHostNUMA, ID: 0}, HandleTypes: ht}
	h, err := p.drv.MemCreate(p.ctx, segSize, prop)
	if err != nil {
		t.Fatal(err)
	}
	base, err := p.drv.MemAddressReserve(p.ctx, segSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.drv.MemMap(p.ctx, base, segSize, 0, h); err != nil {
		t.Fatal(err)
	}
	if err := p.drv.MemSetAccess(p.ctx, base, segSize, []cuda.AccessDesc{{Location: cuda.Location{Type: cuda.LocationDevice}, Flags: cuda.AccessReadWrite}}); err != nil {
		t.Fatal(err)
	}
	if err := p.drv.MemcpyHtoD(p.ctx, base, bytes.Repeat([]byte{fill}, segSize)); err != nil {
		t.Fatal(err)
	}
	s := &provSeg{h: h, base: base, d: segment.Descriptor{
		ID: id, Generation: gen, Node: "host", Owner: "prov", Tier: segment.TierDRAM, Size: segSize,
		Handle: segment.Handle{Kind: kind, SocketPath: p.srv.SocketPath()},
	}}
	if kind == segment.HandleFabric {
		fh, err := p.drv.MemExportToFabric(p.ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		s.d.Handle.Fabric = fh
	} else {
		fd, err := p.drv.MemExportToFD(p.ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Register(s.d.Key(), fd); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// free tears a segment down on the provider side (as on unmount).
func (p *provider) free(t testing.TB, s *provSeg) {
	t.Helper()
	if s.d.Handle.Kind == segment.HandlePosixFD {
		if err := p.srv.Unregister(s.d.Key()); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{p.drv.MemUnmap(p.ctx, s.base, segSize), p.drv.MemAddressFree(p.ctx, s.base, segSize), p.drv.MemRelease(p.ctx, s.h)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// consumer is a second simulated driver (another process's view).
type consumer struct {
	drv *sim.Driver
	ctx cuda.Context
}

func newConsumer(t testing.TB, cfg sim.Config) *consumer {
	t.Helper()
	d, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.PrimaryCtxRelease(0)
		if live := d.LiveObjects(); live.Total() != 0 {
			t.Errorf("consumer leaked driver objects: %v", live)
		}
		d.Close()
	})
	return &consumer{drv: d, ctx: ctx}
}

// mapped counts the consumer's live mappings.
func (c *consumer) mapped() int { return c.drv.LiveObjects()[cuda.ObjMapping] }

// nonContext is the consumer's live object count beyond its context.
func (c *consumer) nonContext() int {
	live := c.drv.LiveObjects()
	return live.Total() - live[cuda.ObjContext]
}

func (c *consumer) read(t testing.TB, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := c.drv.MemcpyDtoH(c.ctx, b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

func newCache(t testing.TB, c *consumer, opts mapping.Options) *mapping.Cache {
	t.Helper()
	m, err := mapping.New(c.drv, c.ctx, []cuda.Device{0}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("cache Close: %v", err)
		}
	})
	return m
}

var bg = context.Background()

func TestAcquireImportsOnceThenHits(t *testing.T) {
	for _, kind := range []segment.HandleKind{segment.HandlePosixFD, segment.HandleFabric} {
		t.Run(kind.String(), func(t *testing.T) {
			cfg := sim.Config{FabricPermitted: true, FabricRegistryDir: t.TempDir()}
			p := newProvider(t, cfg)
			c := newConsumer(t, cfg)
			cache := newCache(t, c, mapping.Options{})
			s := p.segment(t, "host/prov/dram0/0", 0xa1, 0x5a, kind)
			m1, err := cache.Acquire(bg, s.d)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := cache.Acquire(bg, s.d)
			if err != nil {
				t.Fatal(err)
			}
			if m1.Base != m2.Base || m1.Size != segSize {
				t.Fatalf("bases %#x %#x size %d", m1.Base, m2.Base, m1.Size)
			}
			if got := c.read(t, m1.Base+segSize-16, 16); !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 16)) {
				t.Fatalf("read %x through the mapping", got)
			}
			imports := c.drv.CallCount("MemImportFromFD") + c.drv.CallCount("MemImportFromFabric")
			if imports != 1 || c.drv.CallCount("MemSetAccess") != 1 || c.drv.CallCount("MemMap") != 1 {
				t.Fatalf("imports %d, MemSetAccess %d, MemMap %d; want 1 each", imports, c.drv.CallCount("MemSetAccess"), c.drv.CallCount("MemMap"))
			}
			if st := cache.Stats(); st.Hits != 1 || st.Misses != 1 || st.Imports != 1 || st.Entries != 1 {
				t.Fatalf("stats %+v", st)
			}
			if _, err := m1.Addr(segSize-8, 16); err == nil {
				t.Fatal("Addr past the end accepted")
			}
			m1.Release()
			m2.Release()
			if c.mapped() != 1 {
				t.Fatal("unreferenced mapping was unmapped without pressure")
			}
		})
	}
}

func TestConcurrentFirstUseMapsOnce(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	cache := newCache(t, c, mapping.Options{})
	segs := []*provSeg{p.segment(t, "s/0", 1, 1, segment.HandlePosixFD), p.segment(t, "s/1", 2, 2, segment.HandlePosixFD)}
	var wg sync.WaitGroup
	bases := make([]cuda.DevicePtr, 32)
	errs := make([]error, 32)
	for i := range bases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := cache.Acquire(bg, segs[i%2].d)
			bases[i], errs[i] = m.Base, err
			time.Sleep(time.Millisecond)
			m.Release()
		}()
	}
	wg.Wait()
	for i := range bases {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if bases[i] != bases[i%2] {
			t.Fatalf("goroutine %d got base %#x, goroutine %d %#x", i, bases[i], i%2, bases[i%2])
		}
	}
	if n := c.drv.CallCount("MemImportFromFD"); n != 2 {
		t.Fatalf("%d imports for 2 segments", n)
	}
}

// TestGenerationChange is Mooncake #2832: the provider re-allocates a
// segment under the same id; a descriptor with the new generation never
// reads through the old mapping, the old one is unmapped once unreferenced,
// and a stale descriptor fails cleanly instead of reading old bytes.
func TestGenerationChange(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	cache := newCache(t, c, mapping.Options{})
	old := p.segment(t, "host/prov/dram0/0", 0x1111, 0xAA, segment.HandlePosixFD)
	mOld, err := cache.Acquire(bg, old.d)
	if err != nil {
		t.Fatal(err)
	}
	// Provider restarts: same id, new allocation and generation.
	p.free(t, old)
	fresh := p.segment(t, "host/prov/dram0/0", 0x2222, 0xBB, segment.HandlePosixFD)
	mNew, err := cache.Acquire(bg, fresh.d)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.read(t, mNew.Base, 64); !bytes.Equal(got, bytes.Repeat([]byte{0xBB}, 64)) {
		t.Fatalf("new generation reads %x", got[:8])
	}
	if c.drv.CallCount("MemImportFromFD") != 2 {
		t.Fatal("new generation did not import afresh")
	}
	// The old mapping stays valid for its holder until released...
	if c.mapped() != 2 {
		t.Fatalf("%d mappings while the old one is held", c.mapped())
	}
	mOld.Release()
	// ...then it is unmapped.
	if c.mapped() != 1 {
		t.Fatalf("%d mappings after releasing the stale one", c.mapped())
	}
	// A stale descriptor is refused by the provider, and does not disturb
	// the current mapping.
	if _, err := cache.Acquire(bg, old.d); !errors.Is(err, fdx.ErrGenerationMismatch) {
		t.Fatalf("stale descriptor: %v", err)
	}
	m, err := cache.Acquire(bg, fresh.d)
	if err != nil || m.Base != mNew.Base {
		t.Fatalf("current mapping disturbed: %v %#x vs %#x", err, m.Base, mNew.Base)
	}
	m.Release()
	mNew.Release()
	if st := cache.Stats(); st.Invalidations != 1 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A descriptor whose size disagrees with the mapping is refused.
	bad := fresh.d
	bad.Size = 4 << 20
	if _, err := cache.Acquire(bg, bad); !errors.Is(err, mapping.ErrDescriptorMismatch) {
		t.Fatalf("size mismatch: %v", err)
	}
}

func TestBoundsAndLRU(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	for _, tc := range []struct {
		name string
		opts mapping.Options
	}{
		{"entries", mapping.Options{MaxEntries: 2}},
		{"va", mapping.Options{MaxVA: 2 * segSize}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache, err := mapping.New(c.drv, c.ctx, []cuda.Device{0}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var segs []*provSeg
			for i := range 3 {
				segs = append(segs, p.segment(t, fmt.Sprintf("%s/%d", tc.name, i), uint64(i+1), byte(i), segment.HandlePosixFD))
			}
			acq := func(i int) mapping.Mapping {
				t.Helper()
				m, err := cache.Acquire(bg, segs[i].d)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			acq(0).Release()
			acq(1).Release()
			acq(0).Release() // 1 is now the least recently used
			m2 := acq(2)
			if st := cache.Stats(); st.Evictions != 1 || st.Entries != 2 || c.mapped() != 2 {
				t.Fatalf("after third segment: %+v, %d mapped", st, c.mapped())
			}
			before := c.drv.CallCount("MemImportFromFD")
			acq(0).Release() // still cached
			if c.drv.CallCount("MemImportFromFD") != before {
				t.Fatal("the recently used segment was evicted instead of the LRU one")
			}
			// With every entry in use, a new segment does not fit.
			m0 := acq(0)
			if _, err := cache.Acquire(bg, segs[1].d); !errors.Is(err, mapping.ErrFull) {
				t.Fatalf("over the bound with all in use: %v", err)
			}
			if c.mapped() != 2 {
				t.Fatalf("%d mapped; in-use entries must not be unmapped", c.mapped())
			}
			m0.Release()
			m2.Release()
			if err := cache.Close(); err != nil {
				t.Fatal(err)
			}
			if n := c.nonContext(); n != 0 {
				t.Fatalf("%d objects after Close: %v", n, c.drv.LiveObjects())
			}
		})
	}
}

func TestInvalidate(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	cache := newCache(t, c, mapping.Options{})
	s := p.segment(t, "seg/x", 7, 7, segment.HandlePosixFD)
	held, err := cache.Acquire(bg, s.d)
	if err != nil {
		t.Fatal(err)
	}
	cache.Invalidate("seg/x")
	m, err := cache.Acquire(bg, s.d)
	if err != nil {
		t.Fatal(err)
	}
	if c.drv.CallCount("MemImportFromFD") != 2 || c.mapped() != 2 {
		t.Fatalf("after Invalidate: %d imports, %d mapped", c.drv.CallCount("MemImportFromFD"), c.mapped())
	}
	held.Release()
	if c.mapped() != 1 {
		t.Fatalf("invalidated mapping not unmapped at its last release: %d mapped", c.mapped())
	}
	m.Release()
	cache.InvalidateKey(s.d.Key())
	if c.mapped() != 0 {
		t.Fatalf("unreferenced invalidated mapping still mapped")
	}
}

// TestImportFaults fails, one at a time, every driver call and the fd fetch
// of the import/map path: Acquire returns the error and the consumer holds
// no driver objects afterwards; the next Acquire succeeds.
func TestImportFaults(t *testing.T) {
	for _, kind := range []segment.HandleKind{segment.HandlePosixFD, segment.HandleFabric} {
		t.Run(kind.String(), func(t *testing.T) {
			cfg := sim.Config{FabricPermitted: true, FabricRegistryDir: t.TempDir()}
			p := newProvider(t, cfg)
			c := newConsumer(t, cfg)
			s := p.segment(t, "seg/f", 9, 9, kind)
			failed := 0
			for n := 1; ; n++ {
				cache, err := mapping.New(c.drv, c.ctx, []cuda.Device{0}, mapping.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c.drv.ResetCalls()
				c.drv.FailAny(n, cuda.ErrorOutOfMemory)
				m, err := cache.Acquire(bg, s.d)
				c.drv.ClearFaults()
				if err == nil {
					m.Release()
					if err := cache.Close(); err != nil {
						t.Fatal(err)
					}
					break
				}
				failed++
				if !errors.Is(err, cuda.ErrorOutOfMemory) {
					t.Fatalf("call %d failed: Acquire returned %v", n, err)
				}
				if k := c.nonContext(); k != 0 {
					t.Fatalf("call %d (%v) failed: %d objects left: %v", n, c.drv.Calls()[n-1], k, c.drv.LiveObjects())
				}
				// The cache is not poisoned: the next Acquire works.
				m, err = cache.Acquire(bg, s.d)
				if err != nil {
					t.Fatalf("after fault %d: %v", n, err)
				}
				m.Release()
				if err := cache.Close(); err != nil {
					t.Fatal(err)
				}
				if k := c.nonContext(); k != 0 {
					t.Fatalf("after Close: %v", c.drv.LiveObjects())
				}
			}
			if failed < 4 { // import, reserve, map, set access
				t.Fatalf("only %d calls on the import path", failed)
			}
		})
	}
	// A failed fd fetch leaves nothing either.
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	s := p.segment(t, "seg/g", 9, 9, segment.HandlePosixFD)
	cache := newCache(t, c, mapping.Options{Fetch: func(ctx context.Context, d segment.Descriptor) (int, error) {
		return -1, fdx.ErrUnavailable
	}})
	if _, err := cache.Acquire(bg, s.d); !errors.Is(err, fdx.ErrUnavailable) {
		t.Fatalf("fetch failure: %v", err)
	}
	if k := c.nonContext(); k != 0 {
		t.Fatalf("objects after a failed fetch: %v", c.drv.LiveObjects())
	}
}

func TestCloseWaitsForReferences(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	cache, err := mapping.New(c.drv, c.ctx, []cuda.Device{0}, mapping.Options{CloseTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s1 := p.segment(t, "a", 1, 1, segment.HandlePosixFD)
	s2 := p.segment(t, "b", 2, 2, segment.HandlePosixFD)
	m1, _ := cache.Acquire(bg, s1.d)
	m2, err := cache.Acquire(bg, s2.d)
	if err != nil {
		t.Fatal(err)
	}
	m2.Release()
	if err := cache.Close(); !errors.Is(err, mapping.ErrBusy) {
		t.Fatalf("Close with a held reference: %v", err)
	}
	if c.mapped() != 1 {
		t.Fatalf("%d mapped: the held one must stay, the other go", c.mapped())
	}
	if _, err := cache.Acquire(bg, s2.d); !errors.Is(err, mapping.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		m1.Release() // unmaps it: the cache is closed
	}()
	cache2, err := mapping.New(c.drv, c.ctx, []cuda.Device{0}, mapping.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m3, err := cache2.Acquire(bg, s2.d)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		m3.Release()
	}()
	if err := cache2.Close(); err != nil { // waits for m3
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.nonContext() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cache.Close(); err != nil {
		t.Fatalf("retried Close: %v", err)
	}
	if k := c.nonContext(); k != 0 {
		t.Fatalf("objects after Close: %v", c.drv.LiveObjects())
	}
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWaiterContext(t *testing.T) {
	p := newProvider(t, sim.Config{})
	c := newConsumer(t, sim.Config{})
	s := p.segment(t, "slow", 1, 1, segment.HandlePosixFD)
	release := make(chan struct{})
	cache := newCache(t, c, mapping.Options{Fetch: func(ctx context.Context, d segment.Descriptor) (int, error) {
		<-release
		return fdx.Fetch(ctx, d.Handle.SocketPath, d.Key())
	}})
	done := make(chan error, 1)
	go func() {
		m, err := cache.Acquire(bg, s.d)
		if err == nil {
			m.Release()
		}
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if _, err := cache.Acquire(ctx, s.d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter past its deadline: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := c.drv.CallCount("MemImportFromFD"); n != 1 {
		t.Fatalf("%d imports", n)
	}
}

// plainDriver hides the simulator's optional interfaces (AllocationSizer
// among them), as the real driver lacks it.
type plainDriver struct{ cuda.Driver }

// TestImportedSizeMustMatch: a descriptor (from the master, i.e. from
// whoever mounted the segment) whose size is not the imported allocation's
// is refused before anything is mapped or copied; the import is released.
// With a driver that cannot tell an allocation's size, a claim larger than
// the allocation is still refused, by the map of the claimed size.
func TestImportedSizeMustMatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   uint64
		plain  bool // the driver has no AllocationSizer
		mapped bool // whether MemMap is reached
	}{
		{"larger", 2 * segSize, false, false},
		{"smaller", segSize / 2, false, false},
		{"larger, driver without size query", 2 * segSize, true, true},
	} {
		for _, kind := range []segment.HandleKind{segment.HandlePosixFD, segment.HandleFabric} {
			t.Run(tc.name+"/"+kind.String(), func(t *testing.T) {
				cfg := sim.Config{FabricPermitted: true, FabricRegistryDir: t.TempDir()}
				p := newProvider(t, cfg)
				c := newConsumer(t, cfg)
				var drv cuda.Driver = c.drv
				if tc.plain {
					drv = plainDriver{c.drv}
				}
				cache, err := mapping.New(drv, c.ctx, []cuda.Device{0}, mapping.Options{})
				if err != nil {
					t.Fatal(err)
				}
				s := p.segment(t, "host/prov/dram0/0", 7, 0x11, kind)
				lie := s.d
				lie.Size = tc.size
				c.drv.ResetCalls()
				_, err = cache.Acquire(bg, lie)
				if !errors.Is(err, mapping.ErrDescriptorMismatch) {
					t.Fatalf("descriptor of %d bytes for an allocation of %d: %v; want ErrDescriptorMismatch", tc.size, segSize, err)
				}
				if got := c.drv.CallCount("MemMap") > 0; got != tc.mapped {
					t.Fatalf("MemMap called: %v, want %v", got, tc.mapped)
				}
				if n := c.nonContext(); n != 0 {
					t.Fatalf("objects left after the refusal: %v", c.drv.LiveObjects())
				}
				// The truthful descriptor still maps, and reads the provider's
				// bytes.
				m, err := cache.Acquire(bg, s.d)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.read(t, m.Base, 64); !bytes.Equal(got, bytes.Repeat([]byte{0x11}, 64)) {
					t.Fatalf("read %x", got)
				}
				m.Release()
				if err := cache.Close(); err != nil {
					t.Fatal(err)
				}
				p.free(t, s)
			})
		}
	}
}
