package sim_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// mmapHost returns n bytes of page-aligned host memory outside the Go heap.
func mmapHost(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(tb, err)
	tb.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// fillParams are the parameters of the emulated "fill" kernel.
func fillParams(p cuda.DevicePtr, n uint64, v uint32) [][]byte {
	return [][]byte{
		binary.LittleEndian.AppendUint64(nil, uint64(p)),
		binary.LittleEndian.AppendUint64(nil, n),
		binary.LittleEndian.AppendUint32(nil, v),
	}
}

// fillKernel emulates fill(p, n, v): p[i] = byte(v) for i < n.
func fillKernel(grid, block cuda.Dim3, params [][]byte, mem func(cuda.DevicePtr, uint64) ([]byte, error)) error {
	if len(params) != 3 {
		return fmt.Errorf("fill: %d params", len(params))
	}
	p := cuda.DevicePtr(binary.LittleEndian.Uint64(params[0]))
	n := binary.LittleEndian.Uint64(params[1])
	v := byte(binary.LittleEndian.Uint32(params[2]))
	b, err := mem(p, n)
	if err != nil {
		return err
	}
	for i := range b {
		b[i] = v
	}
	return nil
}
