package client

import (
	"fmt"
	"testing"

	"github.com/kvfabric/kvfabric/internal/master"
)

// TestSplitPuts: a split BatchPut's parts are runs of consecutive
// requests that together hold every request once, in batch order; when a
// key is named twice, every occurrence of it is in one part, in batch
// order, wherever in the batch the two lie.
func TestSplitPuts(t *testing.T) {
	batch := func(n int, same map[int]int) ([]master.PutStartReq, []int) {
		reqs, idx := make([]master.PutStartReq, n), make([]int, n)
		for i := range reqs {
			reqs[i].Key = fmt.Sprintf("split/%d", i)
			if j, ok := same[i]; ok {
				reqs[i].Key = reqs[j].Key
			}
			idx[i] = 3 * i // positions in the batch: not the request index
		}
		return reqs, idx
	}
	// check: every request once, each part in batch order; returns the
	// part of each request.
	check := func(t *testing.T, reqs []master.PutStartReq, idx []int, parts []putBatchPart) []int {
		t.Helper()
		partOf := make([]int, len(reqs))
		for i := range partOf {
			partOf[i] = -1
		}
		for p, part := range parts {
			if len(part.reqs) != len(part.idx) {
				t.Fatalf("part %d: %d requests, %d positions", p, len(part.reqs), len(part.idx))
			}
			for k, pos := range part.idx {
				i := pos / 3
				if part.reqs[k].Key != reqs[i].Key {
					t.Fatalf("part %d item %d: key %q at position %d, want %q", p, k, part.reqs[k].Key, pos, reqs[i].Key)
				}
				if partOf[i] != -1 {
					t.Fatalf("request %d in parts %d and %d", i, partOf[i], p)
				}
				partOf[i] = p
				if k > 0 && part.idx[k-1] >= pos {
					t.Fatalf("part %d: position %d after %d", p, pos, part.idx[k-1])
				}
			}
		}
		for i, p := range partOf {
			if p == -1 {
				t.Fatalf("request %d in no part", i)
			}
		}
		return partOf
	}
	for _, tc := range []struct{ n, parts int }{{4096, 4}, {1000, 3}, {7, 2}, {5, 1}} {
		t.Run(fmt.Sprintf("n=%d/parts=%d", tc.n, tc.parts), func(t *testing.T) {
			reqs, idx := batch(tc.n, nil)
			parts := splitPuts(reqs, idx, tc.parts)
			if len(parts) != tc.parts {
				t.Fatalf("%d parts, want %d", len(parts), tc.parts)
			}
			partOf := check(t, reqs, idx, parts)
			for i := 1; i < tc.n; i++ {
				if partOf[i] < partOf[i-1] {
					t.Fatalf("request %d in part %d after request %d in part %d: not runs", i, partOf[i], i-1, partOf[i-1])
				}
			}
			for p, part := range parts {
				if lo, hi := tc.n/tc.parts, (tc.n+tc.parts-1)/tc.parts; len(part.reqs) < lo || len(part.reqs) > hi {
					t.Fatalf("part %d: %d requests, want %d-%d", p, len(part.reqs), lo, hi)
				}
			}
		})
	}
	t.Run("a key named twice", func(t *testing.T) {
		// First and last, and neighbours in the middle.
		same := map[int]int{4095: 0, 2049: 2048}
		reqs, idx := batch(4096, same)
		partOf := check(t, reqs, idx, splitPuts(reqs, idx, 4))
		for i, j := range same {
			if partOf[i] != partOf[j] {
				t.Fatalf("key %q in parts %d and %d", reqs[i].Key, partOf[j], partOf[i])
			}
		}
	})
	if repeatsKey(nil) {
		t.Fatal("an empty batch repeats a key")
	}
}

// BenchmarkSplitPuts: the cost of dealing a 4096-key batch of stored keys
// (46 bytes, as the bench's) into 4 parts: by runs (splitPuts, which
// first looks for a repeated key) and by key hash (splitByKey, the split
// before runs).
func BenchmarkSplitPuts(b *testing.B) {
	const n = 4096
	reqs, idx := make([]master.PutStartReq, n), make([]int, n)
	for i := range reqs {
		reqs[i].Key = fmt.Sprintf("kvfabric-bench/ns0/rank0/layer0/chunk-%021d", i)
		idx[i] = i
	}
	for _, split := range []struct {
		name string
		f    func([]master.PutStartReq, []int, int) []putBatchPart
	}{{"runs", splitPuts}, {"hash", splitByKey}} {
		b.Run("split="+split.name, func(b *testing.B) {
			for b.Loop() {
				if parts := split.f(reqs, idx, 4); len(parts) != 4 {
					b.Fatalf("%d parts", len(parts))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}
