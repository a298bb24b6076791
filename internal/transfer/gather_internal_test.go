package transfer

import (
	"testing"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

func TestGatherShape(t *testing.T) {
	for _, tc := range []struct {
		rows, rowBytes uint64
		grid           cuda.Dim3
	}{
		{2048, 1152, cuda.Dim3{X: 256, Y: 1, Z: 1}}, // the DSA shape: a warp per row, all at once
		{1, 64, cuda.Dim3{X: 1, Y: 1, Z: 1}},
		{9, 64, cuda.Dim3{X: 2, Y: 1, Z: 1}},
		{16, 16 << 10, cuda.Dim3{X: 2, Y: 1, Z: 1}},         // 16 KiB rows: not split
		{5, 1 << 20, cuda.Dim3{X: 1, Y: 64, Z: 1}},          // few large rows: 16 KiB slices
		{8 << 10, 64 << 10, cuda.Dim3{X: 1024, Y: 2, Z: 1}}, // up to ~2,048 CTAs
		{1 << 30, 128, cuda.Dim3{X: 1 << 16, Y: 1, Z: 1}},   // capped: warps stride
		{1 << 20, 1 << 30, cuda.Dim3{X: 1 << 16, Y: 1, Z: 1}},
	} {
		grid, block := gatherShape(tc.rows, tc.rowBytes)
		if grid != tc.grid || block != (cuda.Dim3{X: threadsPerCTA, Y: 1, Z: 1}) {
			t.Errorf("gatherShape(%d rows, %d B) = %v, %v; want grid %v, block 256", tc.rows, tc.rowBytes, grid, block, tc.grid)
		}
	}
}
