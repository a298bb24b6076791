package master

import (
	"context"
	"testing"
)

// BenchmarkLatency is one small call at a time over loopback gRPC: the
// round trip a single get pays (sequential, no batching).
func BenchmarkLatency(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc"} {
		b.Run(kind+"/exists", func(b *testing.B) {
			_, c := benchService(b, kind)
			ctx := context.Background()
			keys := []string{"k"}
			for b.Loop() {
				if _, err := c.Exists(ctx, keys, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
