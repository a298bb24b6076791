package transfer

import "testing"

// TestCrossoverRule: the copy engines take the smallest size from which
// they reach calibrationSlack of the kernel there and at every larger
// size; a size where they fall behind again above a faster one keeps the
// kernel up to it; never catching up means twice the largest size.
func TestCrossoverRule(t *testing.T) {
	sizes := []uint64{1, 2, 4, 8}
	kernel := []float64{50, 50, 50, 50}
	for _, tc := range []struct {
		copy []float64
		want uint64
	}{
		{[]float64{20, 30, 49.5, 52}, 4}, // 49.5 >= 0.98*50
		{[]float64{20, 30, 48.9, 52}, 8}, // just under the slack at 4
		{[]float64{55, 30, 50, 50}, 4},   // behind at 2: not from 1
		{[]float64{55, 55, 55, 40}, 16},  // behind at the largest: never
		{[]float64{50, 50, 50, 50}, 1},   // level everywhere
		{[]float64{10, 10, 10, 10}, 16},  // never
	} {
		if got := crossover(sizes, kernel, tc.copy); got != tc.want {
			t.Errorf("crossover(copy %v) = %d, want %d", tc.copy, got, tc.want)
		}
	}
}
