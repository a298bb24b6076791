package numa

import (
	"errors"
	"slices"
	"testing"
)

func TestFromHostIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []int
		want []int
		err  error
	}{
		{"lab H200x2: both GPUs on node 0", []int{0, 0}, []int{0}, nil},
		{"GB200: one GPU per node, unsorted", []int{3, 1, 2, 0}, []int{0, 1, 2, 3}, nil},
		{"four GPUs on two nodes", []int{1, 0, 1, 0}, []int{0, 1}, nil},
		{"invalid ids dropped", []int{-1, 2, -1, 0}, []int{0, 2}, nil},
		{"any negative is invalid", []int{-7, 5}, []int{5}, nil},
		{"all invalid", []int{-1, -1}, nil, ErrNoNode},
		{"no GPUs", nil, nil, ErrNoNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got, err := FromHostIDs(tc.in)
			if !errors.Is(err, tc.err) || !slices.Equal(got, tc.want) {
				t.Fatalf("FromHostIDs(%v) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
			}
			if !slices.Equal(in, tc.in) {
				t.Fatalf("input modified: %v", tc.in)
			}
		})
	}
}
