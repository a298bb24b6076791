// Package kernels embeds kvfabric's GPU kernels as PTX (loaded with
// cuModuleLoadData) and their Go emulations for the simulator.
//
// The PTX is generated from the .cu files beside it by `make ptx` and checked
// in; see README.md for the toolchain.
package kernels

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// CopyBlocksPTX is copy_blocks.cu compiled for compute_90 (PTX text; the
// cuda package's shim NUL-terminates images for cuModuleLoadData). Callers
// must not modify it.
//
//go:embed copy_blocks.ptx
var CopyBlocksPTX []byte

// CopyBlocksEntry is the kernel's entry name in CopyBlocksPTX.
const CopyBlocksEntry = "kvf_copy_blocks"

// CopyDescSize is the size of one kvf_copy_desc {u64 dst, src, len}.
const CopyDescSize = 24

// PutCopyDesc encodes c as the kvf_copy_desc at b[0:CopyDescSize].
func PutCopyDesc(b []byte, c cuda.Copy) {
	_ = b[CopyDescSize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(c.Dst))
	binary.LittleEndian.PutUint64(b[8:], uint64(c.Src))
	binary.LittleEndian.PutUint64(b[16:], c.Len)
}

// CopyBlocksParams returns the launch parameters of kvf_copy_blocks: the
// device address of n descriptors.
func CopyBlocksParams(descs cuda.DevicePtr, n uint32) [][]byte {
	p0 := binary.LittleEndian.AppendUint64(make([]byte, 0, 8), uint64(descs))
	p1 := binary.LittleEndian.AppendUint32(make([]byte, 0, 4), n)
	return [][]byte{p0, p1}
}

// EmulateCopyBlocks is the Go emulation of kvf_copy_blocks with the same
// parameter ABI, for cuda.KernelEmulator. It reads the descriptors through
// mem (so the simulator checks that the descriptor buffer is device
// memory) and copies each block through mem (so every block's ranges are
// access-checked like a real kernel's loads and stores would fault).
func EmulateCopyBlocks(grid, block cuda.Dim3, params [][]byte, mem func(cuda.DevicePtr, uint64) ([]byte, error)) error {
	if len(params) != 2 || len(params[0]) != 8 || len(params[1]) != 4 {
		return fmt.Errorf("%s: want params (u64 descs, u32 n), got %d params", CopyBlocksEntry, len(params))
	}
	if grid.X == 0 || grid.Y == 0 || block.X == 0 {
		return fmt.Errorf("%s: empty launch shape grid %v block %v", CopyBlocksEntry, grid, block)
	}
	descs := cuda.DevicePtr(binary.LittleEndian.Uint64(params[0]))
	n := binary.LittleEndian.Uint32(params[1])
	if n == 0 {
		return nil
	}
	table, err := mem(descs, uint64(n)*CopyDescSize)
	if err != nil {
		return fmt.Errorf("%s: descriptors at %#x: %w", CopyBlocksEntry, descs, err)
	}
	for i := uint32(0); i < n; i++ {
		b := table[i*CopyDescSize:]
		dst := cuda.DevicePtr(binary.LittleEndian.Uint64(b[0:]))
		src := cuda.DevicePtr(binary.LittleEndian.Uint64(b[8:]))
		l := binary.LittleEndian.Uint64(b[16:])
		if l == 0 {
			continue
		}
		s, err := mem(src, l)
		if err != nil {
			return fmt.Errorf("%s: block %d src %#x+%d: %w", CopyBlocksEntry, i, src, l, err)
		}
		d, err := mem(dst, l)
		if err != nil {
			return fmt.Errorf("%s: block %d dst %#x+%d: %w", CopyBlocksEntry, i, dst, l, err)
		}
		// The block's grid.y slices, as the kernel cuts them: a launch
		// shape whose slices left bytes out would show here as well.
		per := CopySlice(l, grid.Y)
		for y := uint64(0); y < uint64(grid.Y); y++ {
			lo := per * y
			if lo >= l {
				break
			}
			hi := min(lo+per, l)
			copy(d[lo:hi], s[lo:hi])
		}
	}
	return nil
}

// CopySlice is the length of each of the slices kvf_copy_blocks cuts a
// block of l bytes into for a launch with grid.y = gy: ceil(l/gy) rounded up
// to 16 bytes; the CTA of blockIdx.y = y copies [y*per, min((y+1)*per, l)).
func CopySlice(l uint64, gy uint32) uint64 {
	return ((l+uint64(gy)-1)/uint64(gy) + 15) &^ 15
}

// GatherRowsPTX is gather_rows.cu compiled for compute_90 (PTX text, as
// CopyBlocksPTX). Callers must not modify it.
//
//go:embed gather_rows.ptx
var GatherRowsPTX []byte

// GatherRowsEntry is the kernel's entry name in GatherRowsPTX.
const GatherRowsEntry = "kvf_gather_rows"

// GatherObjSize is the size of one kvf_gather_obj {u64 base, nrows}.
const GatherObjSize = 16

// GatherParamCount is the number of kvf_gather_rows parameters.
const GatherParamCount = 8

// gatherParamSizes are the byte sizes of kvf_gather_rows's parameters, in
// order: objs, nobj, per_obj, idx, idx_bytes, row_bytes, dst, bad.
var gatherParamSizes = [GatherParamCount]int{8, 4, 4, 8, 4, 8, 8, 8}

// PutGatherObj encodes one kvf_gather_obj (an object's first byte in the
// device address space and its number of rows) at b[0:GatherObjSize].
func PutGatherObj(b []byte, base cuda.DevicePtr, rows uint64) {
	_ = b[GatherObjSize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(base))
	binary.LittleEndian.PutUint64(b[8:], rows)
}

// GatherRowsArgs are the launch arguments of kvf_gather_rows; see
// gather_rows.cu for their meaning.
type GatherRowsArgs struct {
	Objs     cuda.DevicePtr // NObj kvf_gather_obj entries
	NObj     uint32
	PerObj   uint32         // k: output rows per object
	Idx      cuda.DevicePtr // NObj*PerObj indices, row-major
	IdxBytes uint32         // 4 or 8
	RowBytes uint64
	Dst      cuda.DevicePtr // NObj*PerObj*RowBytes bytes
	Bad      cuda.DevicePtr // u32 counter of out-of-range indices, or 0
}

// GatherParamBytes is the total size of kvf_gather_rows's parameters.
const GatherParamBytes = 8 + 4 + 4 + 8 + 4 + 8 + 8 + 8

// PutGatherRowsParams encodes a's parameters into buf and sets params[i]
// to parameter i's bytes (windows of buf), without allocating.
func PutGatherRowsParams(buf *[GatherParamBytes]byte, params *[GatherParamCount][]byte, a GatherRowsArgs) {
	le := binary.LittleEndian
	at := 0
	for i, n := range gatherParamSizes {
		params[i] = buf[at : at+n : at+n]
		at += n
	}
	le.PutUint64(params[0], uint64(a.Objs))
	le.PutUint32(params[1], a.NObj)
	le.PutUint32(params[2], a.PerObj)
	le.PutUint64(params[3], uint64(a.Idx))
	le.PutUint32(params[4], a.IdxBytes)
	le.PutUint64(params[5], a.RowBytes)
	le.PutUint64(params[6], uint64(a.Dst))
	le.PutUint64(params[7], uint64(a.Bad))
}

// GatherRowsParams returns the launch parameters of kvf_gather_rows for a.
func GatherRowsParams(a GatherRowsArgs) [][]byte {
	var buf [GatherParamBytes]byte
	var params [GatherParamCount][]byte
	PutGatherRowsParams(&buf, &params, a)
	return params[:]
}

// EmulateGatherRows is the Go emulation of kvf_gather_rows with the same
// parameter ABI, for cuda.KernelEmulator. It reads the object table and
// the indices through mem and copies (or zero-fills) every row through mem,
// so the simulator access-checks each source and destination row like the
// kernel's loads and stores would fault; the bad counter is incremented
// through mem too. Unlike the kernel, which reads any idx_bytes other than
// 8 as 32-bit indices, it fails a launch whose idx_bytes is not 4 or 8 (no
// caller passes one), and one whose block.x is not a multiple of 32 (the
// kernel would do nothing).
func EmulateGatherRows(grid, block cuda.Dim3, params [][]byte, mem func(cuda.DevicePtr, uint64) ([]byte, error)) error {
	if len(params) != GatherParamCount {
		return fmt.Errorf("%s: want %d params, got %d", GatherRowsEntry, GatherParamCount, len(params))
	}
	for i, n := range gatherParamSizes {
		if len(params[i]) != n {
			return fmt.Errorf("%s: param %d is %d bytes, want %d", GatherRowsEntry, i, len(params[i]), n)
		}
	}
	if grid.X == 0 || grid.Y == 0 || block.X == 0 || block.X%32 != 0 {
		return fmt.Errorf("%s: launch shape grid %v block %v (block.x must be a multiple of 32)", GatherRowsEntry, grid, block)
	}
	le := binary.LittleEndian
	a := GatherRowsArgs{
		Objs:     cuda.DevicePtr(le.Uint64(params[0])),
		NObj:     le.Uint32(params[1]),
		PerObj:   le.Uint32(params[2]),
		Idx:      cuda.DevicePtr(le.Uint64(params[3])),
		IdxBytes: le.Uint32(params[4]),
		RowBytes: le.Uint64(params[5]),
		Dst:      cuda.DevicePtr(le.Uint64(params[6])),
		Bad:      cuda.DevicePtr(le.Uint64(params[7])),
	}
	if a.IdxBytes != 4 && a.IdxBytes != 8 {
		return fmt.Errorf("%s: idx_bytes %d, want 4 or 8", GatherRowsEntry, a.IdxBytes)
	}
	if a.Bad%4 != 0 {
		// The kernel's atomicAdd faults on a misaligned counter.
		return fmt.Errorf("%s: bad counter %#x is not 4-byte aligned", GatherRowsEntry, a.Bad)
	}
	rows := uint64(a.NObj) * uint64(a.PerObj)
	if rows == 0 || a.RowBytes == 0 {
		return nil
	}
	objs, err := mem(a.Objs, uint64(a.NObj)*GatherObjSize)
	if err != nil {
		return fmt.Errorf("%s: objects at %#x: %w", GatherRowsEntry, a.Objs, err)
	}
	idx, err := mem(a.Idx, rows*uint64(a.IdxBytes))
	if err != nil {
		return fmt.Errorf("%s: indices at %#x: %w", GatherRowsEntry, a.Idx, err)
	}
	for r := range rows {
		o := r / uint64(a.PerObj)
		base := cuda.DevicePtr(le.Uint64(objs[o*GatherObjSize:]))
		nrows := le.Uint64(objs[o*GatherObjSize+8:])
		var i uint64
		if a.IdxBytes == 8 {
			i = le.Uint64(idx[r*8:])
		} else {
			i = uint64(le.Uint32(idx[r*4:]))
		}
		dp := a.Dst + cuda.DevicePtr(r*a.RowBytes)
		d, err := mem(dp, a.RowBytes)
		if err != nil {
			return fmt.Errorf("%s: row %d dst %#x+%d: %w", GatherRowsEntry, r, dp, a.RowBytes, err)
		}
		if i < nrows {
			sp := base + cuda.DevicePtr(i*a.RowBytes)
			s, err := mem(sp, a.RowBytes)
			if err != nil {
				return fmt.Errorf("%s: row %d (object %d row %d) src %#x+%d: %w", GatherRowsEntry, r, o, i, sp, a.RowBytes, err)
			}
			copy(d, s)
			continue
		}
		clear(d)
		if a.Bad != 0 {
			b, err := mem(a.Bad, 4)
			if err != nil {
				return fmt.Errorf("%s: bad counter %#x: %w", GatherRowsEntry, a.Bad, err)
			}
			// Atomic like the kernel's atomicAdd: launches on other
			// streams may count into the same counter at the same time.
			// The counter's bytes are little-endian, as on
			// every host the simulator runs on (amd64, arm64).
			atomic.AddUint32((*uint32)(unsafe.Pointer(&b[0])), 1)
		}
	}
	return nil
}
