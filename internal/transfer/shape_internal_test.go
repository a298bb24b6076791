package transfer

import (
	"testing"

	"github.com/kvfabric/kvfabric/kernels"
)

// TestLaunchShape: a launch of few blocks spreads over enough CTAs (the put
// pipeline's first chunks), no CTA is given a slice below minKernelSlice,
// and many blocks are not split at all.
func TestLaunchShape(t *testing.T) {
	for _, c := range []struct {
		n       int
		maxLen  uint64
		wantY   uint32
		minCTAs uint32
	}{
		{n: 64, maxLen: 64 << 10, wantY: 4, minCTAs: 256},         // the first chunk of a 64 KiB put
		{n: 128, maxLen: 64 << 10, wantY: 4, minCTAs: 512},        // its second
		{n: 512, maxLen: 64 << 10, wantY: 4, minCTAs: 2048},       // a full chunk
		{n: 64, maxLen: 32 << 10, wantY: 2, minCTAs: 128},         // vLLM's 32 KiB layer buffers
		{n: 64, maxLen: 16 << 10, wantY: 1, minCTAs: 64},          // no slice below 16 KiB
		{n: 64, maxLen: 4 << 10, wantY: 1, minCTAs: 64},           // 4 KiB blocks are never split
		{n: 64, maxLen: 64<<10 + 1, wantY: 4, minCTAs: 256},       // an odd length: slices still >= 16 KiB
		{n: 4096, maxLen: 64 << 10, wantY: 1, minCTAs: 4096},      // enough blocks: one CTA each
		{n: 1, maxLen: 16 << 20, wantY: 1024, minCTAs: 1024},      // one large block: 16 KiB slices
		{n: 1, maxLen: 1 << 40, wantY: 2048, minCTAs: 2048},       // bounded by wantCTAs
		{n: 3, maxLen: 1 << 40, wantY: 683, minCTAs: 2048},        // ceil(2048/3)
		{n: 1 << 21, maxLen: 4 << 10, wantY: 1, minCTAs: 1 << 20}, // grid.x is capped; CTAs stride
	} {
		grid, block := launchShape(c.n, c.maxLen)
		if grid.Y != c.wantY || grid.X*grid.Y < c.minCTAs || block.X != threadsPerCTA {
			t.Errorf("launchShape(%d, %d) = grid %v block %v, want grid.y %d and >= %d CTAs", c.n, c.maxLen, grid, block, c.wantY, c.minCTAs)
		}
		if per := kernels.CopySlice(c.maxLen, grid.Y); grid.Y > 1 && per < minKernelSlice {
			t.Errorf("launchShape(%d, %d): grid.y %d gives %d-byte slices, below %d", c.n, c.maxLen, grid.Y, per, minKernelSlice)
		}
	}
}
