package client

import (
	"slices"
	"testing"
)

// The chunks of a batch ramp up from an eighth of the pipeline chunk,
// doubling, and cover every key exactly once, in order.
func TestChunkerRamp(t *testing.T) {
	for _, tc := range []struct {
		max, n int
		want   []int // chunk sizes
	}{
		{512, 4096, []int{64, 128, 256, 512, 512, 512, 512, 512, 512, 512, 64}},
		{512, 100, []int{64, 36}},
		{512, 1, []int{1}},
		{5, 12, []int{1, 2, 4, 5}},
		{1, 3, []int{1, 1, 1}},
	} {
		c := chunker{size: max(tc.max/8, 1), max: tc.max}
		var got []int
		for lo, hi := 0, 0; lo < tc.n; lo = hi {
			hi = c.next(lo, tc.n)
			if hi <= lo || hi > tc.n {
				t.Fatalf("max %d, n %d: chunk [%d, %d)", tc.max, tc.n, lo, hi)
			}
			got = append(got, hi-lo)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("max %d, n %d: chunks %v, want %v", tc.max, tc.n, got, tc.want)
		}
	}
}
