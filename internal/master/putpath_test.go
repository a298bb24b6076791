package master

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestMeasurePutPath: the put path's cost comes back per key for every
// phase, over the timed rounds only, and bad arguments are refused by
// name.
func TestMeasurePutPath(t *testing.T) {
	ctx := context.Background()
	c, err := MeasurePutPath(ctx, 4096, 300, 64, 2, 2, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 4096 || c.Keys != 600 || c.PrepareNs <= 0 || c.PutStartNs <= 0 || c.PutEndNs <= 0 {
		t.Fatalf("cost %+v: want size 4096, 600 keys and every phase timed", c)
	}
	if got, want := c.GBps(), 4096/(c.PutStartNs+c.PutEndNs); got != want {
		t.Fatalf("GBps %v, want %v", got, want)
	}
	// A round that does not fit the segments (it would evict its own
	// objects) is refused, naming the sizes.
	if _, err := MeasurePutPath(ctx, 1<<20, 20, 8, 1, 1, 8<<20); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "keys=20 of size=1048576") {
		t.Fatalf("round larger than the pool: %v, want ErrInvalid naming keys and size", err)
	}
	for _, tc := range []struct {
		size                      uint64
		keys, chunk, rounds, segs int
		field                     string
	}{
		{0, 1, 1, 1, 1, "size=0"}, {1, 0, 1, 1, 1, "keys=0"}, {1, 1, 0, 1, 1, "chunk=0"},
		{1, 1, 1, 0, 1, "rounds=0"}, {1, 1, 1, 1, 0, "segs=0"},
	} {
		if _, err := MeasurePutPath(ctx, tc.size, tc.keys, tc.chunk, tc.rounds, tc.segs, 1<<20); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("%s: %v, want ErrInvalid naming it", tc.field, err)
		}
	}
}
