package transfer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/kernels"
)

// GatherObj is one source object: its first byte in this process's device
// address space and how many rows it has.
type GatherObj struct {
	Base cuda.DevicePtr
	Rows uint64
}

// Gather describes one row gather: output row r in [0, len(Objs)*PerObj)
// is row idx[r] of object r / PerObj, where idx is Host or the indices at
// Device. An index read as unsigned that is not below its object's Rows
// (an int64 or int32 -1 included) zero-fills its output row and adds 1 to
// the counter at Bad, if any.
//
// A Gather is read by Engine.Gather and not kept: the caller may reuse it,
// and Host, once the call returns.
type Gather struct {
	Objs   []GatherObj
	PerObj int // k: output rows per object
	// Host are host indices, len(Objs)*PerObj of them, row-major
	// [len(Objs)][PerObj]; the engine uploads them with the object table.
	// Exactly one of Host and Device is given.
	Host []uint64
	// Device is the device address of len(Objs)*PerObj indices, row-major,
	// of IdxBytes (4 or 8) bytes each, aligned to IdxBytes. The kernel reads
	// them in stream order: work enqueued before on the same stream may
	// write them.
	Device   cuda.DevicePtr
	IdxBytes int // ignored for Host
	RowBytes uint64
	// Dst receives len(Objs)*PerObj*RowBytes bytes, output row r at
	// Dst + r*RowBytes. It must not overlap the objects.
	Dst cuda.DevicePtr
	// Bad, when not 0, is the device address of a u32 counter (4-byte
	// aligned) to which every out-of-range index adds 1. The engine never
	// resets it.
	Bad cuda.DevicePtr
}

// gatherRowsPerCTA: one warp per output row.
const gatherRowsPerCTA = threadsPerCTA / 32

// Gather enqueues g on stream s after the work already on it and returns
// without waiting: one kvf_gather_rows launch for the whole gather when
// the object table (16 bytes per object, plus PerObj*8 bytes of Host
// indices) fits a ring slot, else one per slot's worth of objects (or, for
// host indices of one object larger than a slot, of its rows).
//
// A malformed g is rejected with ErrInvalidGather, naming the field and its
// value, before anything is enqueued. Host indices are not range-checked
// here: the kernel zero-fills and counts out-of-range rows. A driver error
// during enqueueing returns the error with part of the gather possibly
// enqueued (Dst's contents are then unspecified); the engine stays usable.
func (e *Engine) Gather(s cuda.Stream, g Gather) error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return e.gatherLocked(s, &g)
}

// GatherAsync is Gather followed by a completion event on s: the returned
// Handle's Wait or Done reports the gather's completion (see SubmitAsync).
func (e *Engine) GatherAsync(s cuda.Stream, g Gather) (*Handle, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	if err := e.gatherLocked(s, &g); err != nil {
		return nil, err
	}
	return e.handleLocked(s, false)
}

// validate checks g and returns its number of output rows.
func (g *Gather) validate() (uint64, error) {
	bad := func(format string, args ...any) (uint64, error) {
		return 0, fmt.Errorf("%w: "+format, append([]any{ErrInvalidGather}, args...)...)
	}
	nobj := uint64(len(g.Objs))
	if nobj == 0 {
		return bad("Objs is empty")
	}
	if g.PerObj <= 0 || uint64(g.PerObj) > math.MaxUint32 {
		return bad("PerObj %d: want 1 to %d", g.PerObj, uint32(math.MaxUint32))
	}
	hi, rows := bits.Mul64(nobj, uint64(g.PerObj))
	if hi != 0 {
		return bad("%d objects x PerObj %d overflows", nobj, g.PerObj)
	}
	if g.RowBytes == 0 {
		return bad("RowBytes is 0")
	}
	if g.Dst == 0 {
		return bad("Dst is null")
	}
	hi, total := bits.Mul64(rows, g.RowBytes)
	if hi != 0 || uint64(g.Dst)+total < uint64(g.Dst) {
		return bad("Dst %#x + %d rows x RowBytes %d overflows", g.Dst, rows, g.RowBytes)
	}
	switch {
	case len(g.Host) > 0 && g.Device != 0:
		return bad("both Host (%d indices) and Device %#x are given", len(g.Host), g.Device)
	case len(g.Host) > 0:
		if uint64(len(g.Host)) != rows {
			return bad("len(Host) %d, want len(Objs) %d x PerObj %d = %d", len(g.Host), nobj, g.PerObj, rows)
		}
	case g.Device != 0:
		if g.IdxBytes != 4 && g.IdxBytes != 8 {
			return bad("IdxBytes %d: want 4 or 8", g.IdxBytes)
		}
		if uint64(g.Device)%uint64(g.IdxBytes) != 0 {
			return bad("Device %#x is not %d-byte aligned", g.Device, g.IdxBytes)
		}
		if hi, n := bits.Mul64(rows, uint64(g.IdxBytes)); hi != 0 || uint64(g.Device)+n < uint64(g.Device) {
			return bad("Device %#x + %d indices x %d bytes overflows", g.Device, rows, g.IdxBytes)
		}
	default:
		return bad("neither Host nor Device indices are given")
	}
	if g.Bad%4 != 0 {
		return bad("Bad %#x is not 4-byte aligned", g.Bad)
	}
	for i, o := range g.Objs {
		if o.Rows == 0 {
			continue
		}
		if o.Base == 0 {
			return bad("Objs[%d].Base is null with Rows %d", i, o.Rows)
		}
		hi, n := bits.Mul64(o.Rows, g.RowBytes)
		if hi != 0 || uint64(o.Base)+n < uint64(o.Base) {
			return bad("Objs[%d]: Base %#x + Rows %d x RowBytes %d overflows", i, o.Base, o.Rows, g.RowBytes)
		}
	}
	return rows, nil
}

// gatherLocked validates g and enqueues its launches; the caller holds
// life.
func (e *Engine) gatherLocked(s cuda.Stream, g *Gather) error {
	if _, err := g.validate(); err != nil {
		return err
	}
	k, nobj := uint64(g.PerObj), uint64(len(g.Objs))
	host := len(g.Host) > 0
	idxBytes := uint64(g.IdxBytes)
	// A slot holds the launch's object table at offset 0, then (host
	// indices) its indices as u64 at the next 16-byte boundary — the table
	// ends on one. Objects per launch, and output rows per object per
	// launch: all k unless one object's host indices exceed a slot.
	perObj := uint64(kernels.GatherObjSize)
	if host {
		idxBytes = 8
		perObj += 8 * k
	}
	objsPer, rowsPer := min(e.slotSize/perObj, math.MaxUint32), k
	if objsPer == 0 {
		objsPer, rowsPer = 1, (e.slotSize-kernels.GatherObjSize)/8
	}
	for o := uint64(0); o < nobj; {
		n := min(objsPer, nobj-o)
		for lo := uint64(0); lo < k; {
			m := min(rowsPer, k-lo) // k whenever n > 1
			if err := e.gatherLaunch(s, g, o, n, o*k+lo, m, idxBytes); err != nil {
				return err
			}
			lo += m
		}
		o += n
	}
	return nil
}

// gatherLaunch launches kvf_gather_rows over one ring slot for objects
// [o, o+n), m output rows each (all k of them when n > 1), the first of
// which is output row first.
func (e *Engine) gatherLaunch(s cuda.Stream, g *Gather, o, n, first, m, idxBytes uint64) error {
	sl, err := e.acquireSlot(s)
	if err != nil {
		return err
	}
	rows := n * m
	table := n * kernels.GatherObjSize
	for j := range n {
		ob := g.Objs[o+j]
		kernels.PutGatherObj(sl.table[j*kernels.GatherObjSize:], ob.Base, ob.Rows)
	}
	// Where the kernel reads the table: the slot's host range itself
	// (device-mapped, same address) or its device copy.
	tab := sl.dev
	if e.hostTables {
		tab = cuda.DevicePtr(sl.addr)
	}
	idx := g.Device + cuda.DevicePtr(first*idxBytes)
	if len(g.Host) > 0 {
		idx = tab + cuda.DevicePtr(table)
		putIndices(sl.table[table:table+rows*8], g.Host[first:first+rows])
		table += rows * 8
	}
	kernels.PutGatherRowsParams(&sl.pbuf, &sl.params, kernels.GatherRowsArgs{
		Objs: tab, NObj: uint32(n), PerObj: uint32(m),
		Idx: idx, IdxBytes: uint32(idxBytes),
		RowBytes: g.RowBytes, Dst: g.Dst + cuda.DevicePtr(first*g.RowBytes), Bad: g.Bad,
	})
	grid, block := gatherShape(rows, g.RowBytes)
	err = e.launch(sl, s, launchSpec{
		fn: e.gatherFn, entry: kernels.GatherRowsEntry, items: int(rows), unit: "rows",
		table: table, direct: e.hostTables, grid: grid, block: block, params: sl.params[:],
	})
	if err != nil {
		return err
	}
	e.stats.gatherLaunches.Add(1)
	e.stats.gatherRows.Add(rows)
	return nil
}

// gatherShape is kvf_gather_rows's launch shape for rows output rows of
// rowBytes: 256 threads per CTA, one warp per row (8 rows per CTA), grid.x
// enough CTAs for every row up to 65,536 (beyond, warps stride over the
// rows). When that is fewer than 2,048 CTAs and rows are larger than
// 16 KiB, grid.y splits each row into slices of ~16 KiB so that a few
// large rows still spread over many SMs.
func gatherShape(rows, rowBytes uint64) (grid, block cuda.Dim3) {
	const maxCTAs = 1 << 16
	const wantCTAs = 2048
	const slice = 16 << 10
	x := min((rows+gatherRowsPerCTA-1)/gatherRowsPerCTA, maxCTAs)
	x = max(x, 1)
	y := uint64(1)
	if x < wantCTAs && rowBytes > slice {
		y = max(min((rowBytes+slice-1)/slice, wantCTAs/x, 65535), 1)
	}
	return cuda.Dim3{X: uint32(x), Y: uint32(y), Z: 1}, cuda.Dim3{X: threadsPerCTA, Y: 1, Z: 1}
}

// littleEndian: this CPU stores a uint64 as the kernel reads it.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// putIndices writes idx as little-endian u64s into dst (8 bytes each):
// one memmove on a little-endian CPU.
func putIndices(dst []byte, idx []uint64) {
	if littleEndian && len(idx) > 0 {
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(&dst[0])), len(idx)), idx)
		return
	}
	for j, i := range idx {
		binary.LittleEndian.PutUint64(dst[j*8:], i)
	}
}
