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
		copy(d, s)
	}
	return nil
}
