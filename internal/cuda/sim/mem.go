package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// alloc is one cuMemCreate or imported allocation.
type alloc struct {
	h        cuda.AllocHandle
	fd       int // the memfd; -1 once released
	ino, dev uint64
	size     uint64
	loc      cuda.Location // the creator's location (for imports: parsed from the memfd name)
	types    cuda.HandleType
	gran     uint64
	imported bool
	maps     int    // live mappings of this allocation
	charged  bool   // counted in Driver.mu.used
	fabricID string // registered fabric export, "" if none
}

// reservation is one cuMemAddressReserve range.
type reservation struct {
	base, size uint64
	maps       int
}

// mapping is one cuMemMap range.
type mapping struct {
	start, size, offset uint64
	a                   *alloc
	res                 *reservation
	access              []cuda.AccessFlags // per device
}

// devmem is one cuMemAlloc buffer.
type devmem struct {
	ptr, size, mapLen uint64
	ctx               cuda.Context
	dev               cuda.Device
}

// hostReg is one cuMemHostRegister range.
type hostReg struct {
	p, size uint64
	flags   uint32
}

// region is an address range copies may touch: exactly one of m, dm, hr.
type region struct {
	start, end uint64
	m          *mapping
	dm         *devmem
	hr         *hostReg
}

// memfdPrefix starts the name of every simulator memfd; the name also
// records the location and handle types so an importer can recover them.
const memfdPrefix = "kvfabric-sim"

func memfdName(loc cuda.Location, types cuda.HandleType) string {
	return fmt.Sprintf("%s.%d.%d.%d", memfdPrefix, loc.Type, loc.ID, types)
}

// parseMemfdLink parses the /proc/self/fd link of a simulator memfd
// ("/memfd:kvfabric-sim.3.0.1 (deleted)").
func parseMemfdLink(link string) (cuda.Location, cuda.HandleType, bool) {
	s, ok := strings.CutPrefix(link, "/memfd:"+memfdPrefix+".")
	if !ok {
		return cuda.Location{}, 0, false
	}
	s, _, _ = strings.Cut(s, " ")
	f := strings.Split(s, ".")
	if len(f) != 3 {
		return cuda.Location{}, 0, false
	}
	t, err1 := strconv.ParseInt(f[0], 10, 32)
	id, err2 := strconv.ParseInt(f[1], 10, 32)
	ht, err3 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return cuda.Location{}, 0, false
	}
	return cuda.Location{Type: cuda.LocationType(t), ID: int32(id)}, cuda.HandleType(ht), true
}

// locGranularity returns the granularity of a VMM allocation location, or
// the result to fail with.
func (d *Driver) locGranularity(loc cuda.Location) (uint64, cuda.Result) {
	switch loc.Type {
	case cuda.LocationDevice:
		if !d.validDevice(cuda.Device(loc.ID)) {
			return 0, cuda.ErrorInvalidDevice
		}
		return d.cfg.granularity(true, int(loc.ID)), cuda.Success
	case cuda.LocationHostNUMA:
		g := d.cfg.granularity(false, int(loc.ID))
		if g == 0 {
			return 0, cuda.ErrorInvalidValue
		}
		return g, cuda.Success
	}
	return 0, cuda.ErrorInvalidValue
}

const validHandleTypes = cuda.HandlePosixFD | cuda.HandleFabric

// MemGetAllocationGranularity returns the configured granularity of the
// location (minimum and recommended are the same).
func (d *Driver) MemGetAllocationGranularity(ctx cuda.Context, prop cuda.AllocProp, opt cuda.GranularityOption) (uint64, error) {
	var g uint64
	err := d.call("MemGetAllocationGranularity", func() string {
		return fmt.Sprintf("ctx=%#x loc=%v:%d handles=%v opt=%d", ctx, prop.Location.Type, prop.Location.ID, prop.HandleTypes, opt)
	}, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if opt != cuda.GranularityMinimum && opt != cuda.GranularityRecommended {
			return cuda.ErrorInvalidValue
		}
		if prop.HandleTypes&^validHandleTypes != 0 {
			return cuda.ErrorInvalidValue
		}
		var r cuda.Result
		g, r = d.locGranularity(prop.Location)
		return r
	})
	return g, err
}

// MemCreate creates a memfd-backed allocation. Requesting FABRIC fails
// with CUDA_ERROR_NOT_PERMITTED unless Config.FabricPermitted; the size
// must be a non-zero multiple of the location's granularity; a location
// over its configured capacity fails with CUDA_ERROR_OUT_OF_MEMORY.
func (d *Driver) MemCreate(ctx cuda.Context, size uint64, prop cuda.AllocProp) (cuda.AllocHandle, error) {
	var h cuda.AllocHandle
	err := d.call("MemCreate", func() string {
		return fmt.Sprintf("ctx=%#x size=%d loc=%v:%d handles=%v", ctx, size, prop.Location.Type, prop.Location.ID, prop.HandleTypes)
	}, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if prop.HandleTypes&^validHandleTypes != 0 {
			return cuda.ErrorInvalidValue
		}
		g, r := d.locGranularity(prop.Location)
		if r != cuda.Success {
			return r
		}
		if size == 0 || size%g != 0 {
			return cuda.ErrorInvalidValue
		}
		if prop.HandleTypes&cuda.HandleFabric != 0 && !d.cfg.FabricPermitted {
			return cuda.ErrorNotPermitted
		}
		if prop.HandleTypes&cuda.HandlePosixFD != 0 && d.cfg.PosixFDNotPermitted {
			return cuda.ErrorNotPermitted
		}
		if r := d.chargeLocked(prop.Location, size); r != cuda.Success {
			return r
		}
		fd, err := unix.MemfdCreate(memfdName(prop.Location, prop.HandleTypes), unix.MFD_CLOEXEC)
		if err != nil {
			d.unchargeLocked(prop.Location, size)
			return cuda.ErrorOutOfMemory
		}
		var st unix.Stat_t
		if err := unix.Ftruncate(fd, int64(size)); err != nil || unix.Fstat(fd, &st) != nil {
			unix.Close(fd)
			d.unchargeLocked(prop.Location, size)
			return cuda.ErrorOutOfMemory
		}
		a := &alloc{
			h: cuda.AllocHandle(d.newHandle(kindAlloc)), fd: fd, ino: st.Ino, dev: st.Dev,
			size: size, loc: prop.Location, types: prop.HandleTypes, gran: g, charged: true,
		}
		d.mu.allocs[a.h] = a
		h = a.h
		return cuda.Success
	})
	return h, err
}

// capLocked returns the capacity limit of a location (0: unlimited).
func (d *Driver) capLocked(loc cuda.Location) uint64 {
	if loc.Type == cuda.LocationDevice {
		return d.cfg.DeviceCapacity[int(loc.ID)]
	}
	return d.cfg.NodeCapacity[int(loc.ID)]
}

func (d *Driver) chargeLocked(loc cuda.Location, size uint64) cuda.Result {
	if c := d.capLocked(loc); c > 0 && (size > c || d.mu.used[loc] > c-size) {
		return cuda.ErrorOutOfMemory
	}
	d.mu.used[loc] += size
	return cuda.Success
}

func (d *Driver) unchargeLocked(loc cuda.Location, size uint64) {
	d.mu.used[loc] -= size
	if d.mu.used[loc] == 0 {
		delete(d.mu.used, loc)
	}
}

// MemRelease releases an allocation or import handle. As in CUDA, memory
// still mapped stays alive (and charged) until its last mapping is
// unmapped; the handle itself is invalid at once, so a second release
// fails with CUDA_ERROR_INVALID_VALUE. A fabric export of the allocation is
// withdrawn. POSIX fds exported earlier stay valid (they are the caller's).
func (d *Driver) MemRelease(ctx cuda.Context, h cuda.AllocHandle) error {
	return d.call("MemRelease", func() string { return fmt.Sprintf("ctx=%#x h=%#x", ctx, h) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, ok := d.mu.allocs[h]
		if !ok {
			return cuda.ErrorInvalidValue
		}
		delete(d.mu.allocs, h)
		if a.fabricID != "" {
			d.unpublishFabricLocked(a.fabricID)
		}
		unix.Close(a.fd)
		a.fd = -1
		d.maybeFreeLocked(a)
		return cuda.Success
	})
}

// maybeFreeLocked returns a released, unmapped allocation's capacity.
func (d *Driver) maybeFreeLocked(a *alloc) {
	if a.fd < 0 && a.maps == 0 && a.charged {
		a.charged = false
		d.unchargeLocked(a.loc, a.size)
	}
}

// MemAddressReserve reserves a PROT_NONE range of the process's address
// space. size must be a non-zero multiple of the smallest configured
// granularity; alignment 0 means that granularity, otherwise it must be a
// power of two.
func (d *Driver) MemAddressReserve(ctx cuda.Context, size, alignment uint64) (cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	err := d.call("MemAddressReserve", func() string {
		return fmt.Sprintf("ctx=%#x size=%d align=%d", ctx, size, alignment)
	}, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		g := d.cfg.minGranularity()
		if size == 0 || size%g != 0 || alignment&(alignment-1) != 0 || size > 1<<46 || alignment > 1<<40 {
			return cuda.ErrorInvalidValue
		}
		if alignment == 0 {
			alignment = g
		}
		base, err := reserve(size, alignment)
		if err != nil {
			return cuda.ErrorOutOfMemory
		}
		d.mu.res[base] = &reservation{base: base, size: size}
		p = cuda.DevicePtr(base)
		return cuda.Success
	})
	return p, err
}

// MemAddressFree frees a reservation; ptr and size must be exactly those
// of the reservation. The simulator is stricter than CUDA here: freeing a
// range that still has mappings fails with CUDA_ERROR_INVALID_VALUE, since
// kvfabric always unmaps first.
func (d *Driver) MemAddressFree(ctx cuda.Context, ptr cuda.DevicePtr, size uint64) error {
	return d.call("MemAddressFree", func() string { return fmt.Sprintf("ctx=%#x ptr=%#x size=%d", ctx, ptr, size) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		res, ok := d.mu.res[uint64(ptr)]
		if !ok || res.size != size || res.maps > 0 {
			return cuda.ErrorInvalidValue
		}
		if err := munmap(res.base, res.size); err != nil {
			return cuda.ErrorInvalidValue
		}
		delete(d.mu.res, res.base)
		return cuda.Success
	})
}

// reservationOfLocked returns the reservation holding [p, p+n).
func (d *Driver) reservationOfLocked(p, n uint64) *reservation {
	for _, r := range d.mu.res {
		if p >= r.base && n <= r.size && p-r.base <= r.size-n {
			return r
		}
	}
	return nil
}

// regionIndexLocked returns the index of the first region ending after p.
func (d *Driver) regionIndexLocked(p uint64) int {
	return sort.Search(len(d.mu.regions), func(i int) bool { return d.mu.regions[i].end > p })
}

// overlapsLocked reports whether [p, p+n) intersects any region.
func (d *Driver) overlapsLocked(p, n uint64) bool {
	i := d.regionIndexLocked(p)
	return i < len(d.mu.regions) && d.mu.regions[i].start < p+n
}

func (d *Driver) insertRegionLocked(r region) {
	i := d.regionIndexLocked(r.start)
	d.mu.regions = append(d.mu.regions, region{})
	copy(d.mu.regions[i+1:], d.mu.regions[i:])
	d.mu.regions[i] = r
}

func (d *Driver) removeRegionLocked(start uint64) {
	i := d.regionIndexLocked(start)
	if i < len(d.mu.regions) && d.mu.regions[i].start == start {
		d.mu.regions = append(d.mu.regions[:i], d.mu.regions[i+1:]...)
	}
}

// MemAllocationSize returns the size of allocation h, created or imported
// (cuda.AllocationSizer): for an import, the size of the exporter's memfd.
func (d *Driver) MemAllocationSize(ctx cuda.Context, h cuda.AllocHandle) (uint64, error) {
	var size uint64
	err := d.call("MemAllocationSize", func() string { return fmt.Sprintf("ctx=%#x h=%#x", ctx, h) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, ok := d.mu.allocs[h]
		if !ok {
			return cuda.ErrorInvalidValue
		}
		size = a.size
		return cuda.Success
	})
	return size, err
}

// MemMap maps [offset, offset+size) of allocation h at ptr. ptr, size and
// offset must be multiples of the allocation's granularity, the range must
// lie inside one reservation and must not be mapped already, and the
// allocation must still be live; like cuMemMap (driver 580), a range past
// the allocation's end is CUDA_ERROR_NOT_SUPPORTED. The mapping is not
// accessible to any device until MemSetAccess.
func (d *Driver) MemMap(ctx cuda.Context, ptr cuda.DevicePtr, size, offset uint64, h cuda.AllocHandle) error {
	return d.call("MemMap", func() string {
		return fmt.Sprintf("ctx=%#x ptr=%#x size=%d off=%d h=%#x", ctx, ptr, size, offset, h)
	}, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, ok := d.mu.allocs[h]
		if !ok {
			return cuda.ErrorInvalidValue
		}
		p := uint64(ptr)
		if size == 0 || p%a.gran != 0 || size%a.gran != 0 || offset%a.gran != 0 {
			return cuda.ErrorInvalidValue
		}
		if offset > a.size || size > a.size-offset {
			// What cuMemMap answers on H200, driver 580 (DEVICE and
			// HOST_NUMA, created or imported; see TestGPUMapPastAllocation).
			return cuda.ErrorNotSupported
		}
		res := d.reservationOfLocked(p, size)
		if res == nil || d.overlapsLocked(p, size) {
			return cuda.ErrorInvalidValue
		}
		if err := mmapFixed(p, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, a.fd, offset); err != nil {
			_ = protNone(p, size)
			return cuda.ErrorOutOfMemory
		}
		m := &mapping{start: p, size: size, offset: offset, a: a, res: res, access: make([]cuda.AccessFlags, d.cfg.GPUs)}
		d.insertRegionLocked(region{start: p, end: p + size, m: m})
		a.maps++
		res.maps++
		return cuda.Success
	})
}

// mappingsCoveringLocked returns the mappings that exactly tile
// [p, p+n), or nil.
func (d *Driver) mappingsCoveringLocked(p, n uint64) []*mapping {
	if n == 0 || p+n < p {
		return nil
	}
	var ms []*mapping
	for i, cur := d.regionIndexLocked(p), p; cur < p+n; i++ {
		if i >= len(d.mu.regions) {
			return nil
		}
		r := d.mu.regions[i]
		if r.m == nil || r.start != cur || r.end > p+n {
			return nil
		}
		ms = append(ms, r.m)
		cur = r.end
	}
	return ms
}

// MemUnmap unmaps [ptr, ptr+size), which must be exactly one or more whole,
// contiguous mappings; the range becomes a PROT_NONE reservation again. An
// allocation released while mapped is freed by its last unmap.
func (d *Driver) MemUnmap(ctx cuda.Context, ptr cuda.DevicePtr, size uint64) error {
	return d.call("MemUnmap", func() string { return fmt.Sprintf("ctx=%#x ptr=%#x size=%d", ctx, ptr, size) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		ms := d.mappingsCoveringLocked(uint64(ptr), size)
		if ms == nil {
			return cuda.ErrorInvalidValue
		}
		if err := protNone(uint64(ptr), size); err != nil {
			return cuda.ErrorUnmapFailed
		}
		for _, m := range ms {
			d.removeRegionLocked(m.start)
			m.res.maps--
			m.a.maps--
			d.maybeFreeLocked(m.a)
		}
		return cuda.Success
	})
}

// MemSetAccess sets the access of every device (and the host, for
// HOST_NUMA allocations) named in descs on [ptr, ptr+size), which must be
// exactly one or more whole, contiguous mappings. It validates every desc
// before changing anything.
func (d *Driver) MemSetAccess(ctx cuda.Context, ptr cuda.DevicePtr, size uint64, descs []cuda.AccessDesc) error {
	return d.call("MemSetAccess", func() string {
		return fmt.Sprintf("ctx=%#x ptr=%#x size=%d descs=%v", ctx, ptr, size, descs)
	}, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if len(descs) == 0 {
			return cuda.ErrorInvalidValue
		}
		ms := d.mappingsCoveringLocked(uint64(ptr), size)
		if ms == nil {
			return cuda.ErrorInvalidValue
		}
		for _, ad := range descs {
			switch ad.Flags {
			case cuda.AccessNone, cuda.AccessRead, cuda.AccessReadWrite:
			default:
				return cuda.ErrorInvalidValue
			}
			switch ad.Location.Type {
			case cuda.LocationDevice:
				if !d.validDevice(cuda.Device(ad.Location.ID)) {
					return cuda.ErrorInvalidDevice
				}
			case cuda.LocationHost, cuda.LocationHostNUMA:
				// Host access to a VMM range: only HOST_NUMA memory
				// can be made host-accessible.
				for _, m := range ms {
					if m.a.loc.Type != cuda.LocationHostNUMA {
						return cuda.ErrorInvalidValue
					}
				}
			default:
				return cuda.ErrorInvalidValue
			}
		}
		for _, ad := range descs {
			if ad.Location.Type != cuda.LocationDevice {
				continue // host access is always possible through the mapping
			}
			for _, m := range ms {
				m.access[ad.Location.ID] = ad.Flags
			}
		}
		return cuda.Success
	})
}

// MemAlloc allocates a cuMemAlloc buffer: anonymous memory accessible to
// every context of the driver (as with unified addressing and peer access).
func (d *Driver) MemAlloc(ctx cuda.Context, size uint64) (cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	err := d.call("MemAlloc", func() string { return fmt.Sprintf("ctx=%#x size=%d", ctx, size) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		if size == 0 || size > 1<<46 {
			return cuda.ErrorInvalidValue
		}
		loc := cuda.Location{Type: cuda.LocationDevice, ID: int32(dev)}
		if r := d.chargeLocked(loc, size); r != cuda.Success {
			return r
		}
		mapLen := (size + pageSize - 1) &^ (pageSize - 1)
		base, err := mmapAnon(mapLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_NORESERVE)
		if err != nil {
			d.unchargeLocked(loc, size)
			return cuda.ErrorOutOfMemory
		}
		m := &devmem{ptr: base, size: size, mapLen: mapLen, ctx: ctx, dev: dev}
		d.mu.devmem[cuda.DevicePtr(base)] = m
		d.insertRegionLocked(region{start: base, end: base + size, dm: m})
		p = cuda.DevicePtr(base)
		return cuda.Success
	})
	return p, err
}

// MemFree frees a cuMemAlloc buffer; ptr must be its base.
func (d *Driver) MemFree(ctx cuda.Context, ptr cuda.DevicePtr) error {
	return d.call("MemFree", func() string { return fmt.Sprintf("ctx=%#x ptr=%#x", ctx, ptr) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		m, ok := d.mu.devmem[ptr]
		if !ok {
			return cuda.ErrorInvalidValue
		}
		d.freeDevmemLocked(ptr, m)
		return cuda.Success
	})
}

func (d *Driver) freeDevmemLocked(ptr cuda.DevicePtr, m *devmem) {
	d.removeRegionLocked(m.ptr)
	delete(d.mu.devmem, ptr)
	_ = munmap(m.ptr, m.mapLen)
	d.unchargeLocked(cuda.Location{Type: cuda.LocationDevice, ID: int32(m.dev)}, m.size)
}

// MemHostRegister records [p, p+size) as registered host memory that
// copies may use. The range must be mapped process memory that overlaps no
// registration (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) and no
// simulated device memory.
func (d *Driver) MemHostRegister(ctx cuda.Context, p uintptr, size uint64, flags uint32) error {
	return d.call("MemHostRegister", func() string {
		return fmt.Sprintf("ctx=%#x p=%#x size=%d flags=%#x", ctx, p, size, flags)
	}, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		start := uint64(p)
		if p == 0 || size == 0 || start+size < start || flags&^hostRegisterValidFlags != 0 {
			return cuda.ErrorInvalidValue
		}
		if d.overlapsLocked(start, size) {
			i := d.regionIndexLocked(start)
			if d.mu.regions[i].hr != nil {
				return cuda.ErrorHostMemoryAlready
			}
			return cuda.ErrorInvalidValue
		}
		for _, r := range d.mu.res {
			if start < r.base+r.size && r.base < start+size {
				return cuda.ErrorInvalidValue
			}
		}
		if !mapped(start, size) {
			return cuda.ErrorInvalidValue
		}
		hr := &hostReg{p: start, size: size, flags: flags}
		d.mu.hostRegs[p] = hr
		d.insertRegionLocked(region{start: start, end: start + size, hr: hr})
		return cuda.Success
	})
}

// MemHostUnregister removes the registration that starts at p.
func (d *Driver) MemHostUnregister(ctx cuda.Context, p uintptr) error {
	return d.call("MemHostUnregister", func() string { return fmt.Sprintf("ctx=%#x p=%#x", ctx, p) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if _, ok := d.mu.hostRegs[p]; !ok {
			return cuda.ErrorHostMemoryNotReg
		}
		delete(d.mu.hostRegs, p)
		d.removeRegionLocked(uint64(p))
		return cuda.Success
	})
}

// PointerMemoryTypes classifies each pointer by the region that holds it:
// cuMemAlloc buffers and mappings of DEVICE allocations are Device;
// registered host ranges are Host; mappings of HOST_NUMA allocations are
// Host too, which is what the real driver's pointer query reports for
// cuMemCreate memory at a host location (Open MPI #12751, by NVIDIA, relies
// on it; the gated real-driver test records it); anything else, reserved
// but unmapped address space included, is Unregistered (the real driver's
// CUDA_ERROR_INVALID_VALUE). A mapping's type does not depend on the access
// granted to it. The context must be live, as everywhere.
func (d *Driver) PointerMemoryTypes(ctx cuda.Context, ptrs []cuda.DevicePtr, out []cuda.MemoryType) error {
	return pointerQuery(d, "PointerMemoryTypes", ctx, ptrs, out, memoryType)
}

// PointerRanges reports, for each pointer, the region that holds it: the
// cuMemAlloc buffer, the registered host range or the mapping (one MemMap
// call's range); anything else yields the zero AddrRange, as the real
// driver's CUDA_ERROR_INVALID_VALUE does.
func (d *Driver) PointerRanges(ctx cuda.Context, ptrs []cuda.DevicePtr, out []cuda.AddrRange) error {
	return pointerQuery(d, "PointerRanges", ctx, ptrs, out, func(r region, ok bool) cuda.AddrRange {
		if !ok {
			return cuda.AddrRange{}
		}
		return cuda.AddrRange{Start: cuda.DevicePtr(r.start), Size: r.end - r.start}
	})
}

// pointerQuery is one cuPointerGetAttribute batch (method) on a live
// context: out[i] = answer(the region holding ptrs[i], whether one does).
func pointerQuery[T any](d *Driver, method string, ctx cuda.Context, ptrs []cuda.DevicePtr, out []T, answer func(region, bool) T) error {
	return d.call(method, func() string {
		return fmt.Sprintf("ctx=%#x n=%d", ctx, len(ptrs))
	}, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if len(out) != len(ptrs) {
			return cuda.ErrorInvalidValue
		}
		for i, p := range ptrs {
			out[i] = answer(d.regionAtLocked(uint64(p)))
		}
		return cuda.Success
	})
}

// regionAtLocked returns the memory region (a cuMemAlloc buffer, a
// registered host range or a mapping) that holds p, if one does.
func (d *Driver) regionAtLocked(p uint64) (region, bool) {
	i := d.regionIndexLocked(p)
	if i == len(d.mu.regions) || d.mu.regions[i].start > p {
		return region{}, false
	}
	r := d.mu.regions[i]
	return r, r.m != nil || r.dm != nil || r.hr != nil
}

// memoryType is the type the driver reports for an address in r.
func memoryType(r region, ok bool) cuda.MemoryType {
	switch {
	case !ok:
		return cuda.MemoryTypeUnregistered
	case r.dm != nil:
		return cuda.MemoryTypeDevice
	case r.hr != nil:
		return cuda.MemoryTypeHost
	case r.m.a.loc.Type == cuda.LocationDevice:
		return cuda.MemoryTypeDevice
	}
	return cuda.MemoryTypeHost
}
