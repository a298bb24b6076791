package kernels

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"testing"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

func TestCopyBlocksPTXABI(t *testing.T) {
	ptx := string(CopyBlocksPTX)
	if m := regexp.MustCompile(`(?m)^\.version (\d+)\.(\d+)$`).FindStringSubmatch(ptx); m == nil || m[1]+"."+m[2] != "9.0" {
		// Driver 580 (CUDA 13.0) accepts PTX ISA <= 9.0.
		t.Fatalf("PTX ISA version %v, want 9.0", m)
	}
	if !regexp.MustCompile(`(?m)^\.target sm_90$`).MatchString(ptx) {
		t.Fatal("PTX target is not sm_90")
	}
	entry := regexp.MustCompile(`\.visible \.entry ` + CopyBlocksEntry + `\(\s*\.param \.u64 \w+,\s*\.param \.u32 \w+\s*\)`)
	if !entry.MatchString(ptx) {
		t.Fatalf("entry %s(u64, u32) not found in the PTX", CopyBlocksEntry)
	}
}

// hostMem resolves "device pointers" that are addresses of Go byte slices
// held alive by the test.
func hostMem(bufs ...[]byte) func(cuda.DevicePtr, uint64) ([]byte, error) {
	return func(p cuda.DevicePtr, n uint64) ([]byte, error) {
		for _, b := range bufs {
			base := uint64(uintptr(unsafe.Pointer(&b[0])))
			if uint64(p) >= base && uint64(p)+n <= base+uint64(len(b)) {
				off := uint64(p) - base
				return b[off : off+n], nil
			}
		}
		return nil, cuda.Check("kernel access", cuda.ErrorIllegalAddress)
	}
}

func TestEmulateCopyBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<16)
	dst := make([]byte, 1<<16)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	want := make([]byte, len(dst))
	addr := func(b []byte, off int) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(&b[off]))) }
	var copies []cuda.Copy
	off := 0
	for off < len(dst)-4096 {
		l := 1 + rng.IntN(3000)
		s := rng.IntN(len(src) - l)
		copies = append(copies, cuda.Copy{Dst: addr(dst, off), Src: addr(src, s), Len: uint64(l)})
		copy(want[off:], src[s:s+l])
		off += l + rng.IntN(7)
	}
	table := make([]byte, len(copies)*CopyDescSize)
	for i, c := range copies {
		PutCopyDesc(table[i*CopyDescSize:], c)
	}
	params := CopyBlocksParams(addr(table, 0), uint32(len(copies)))
	if err := EmulateCopyBlocks(cuda.Dim3{X: 8, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, params, hostMem(src, dst, table)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, want) {
		t.Fatal("emulated copy differs from the reference")
	}
	// An out-of-range block fails like a faulting kernel.
	PutCopyDesc(table, cuda.Copy{Dst: addr(dst, 0), Src: cuda.DevicePtr(8), Len: 16})
	if err := EmulateCopyBlocks(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, params, hostMem(src, dst, table)); err == nil {
		t.Fatal("copy from an unmapped address succeeded")
	}
	if err := EmulateCopyBlocks(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, params[:1], hostMem(src, dst, table)); err == nil {
		t.Fatal("wrong parameter count accepted")
	}
}
