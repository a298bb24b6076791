package client_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/fdx"
	"github.com/kvfabric/kvfabric/internal/mapping"
	"github.com/kvfabric/kvfabric/internal/master"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// reportCounter counts the segments a Store reports unreachable.
type reportCounter struct {
	master.Client
	reports *atomic.Int32
}

func (r reportCounter) ReportUnreachable(ctx context.Context, reporter string, k segment.Key, reason string) error {
	r.reports.Add(1)
	return r.Client.ReportUnreachable(ctx, reporter, k, reason)
}

// lyingSize answers every replica with a descriptor that claims twice its
// segment's size (a master, or whoever mounted the segment, that lies).
type lyingSize struct{ reportCounter }

func (l lyingSize) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	res, err := l.Client.GetReplicas(ctx, keys)
	for i := range res {
		for j := range res[i].Replicas {
			d := *res[i].Replicas[j].Segment // the master's own is shared: copy
			d.Size *= 2
			res[i].Replicas[j].Segment = &d
		}
	}
	return res, err
}

// TestConsumerTrust: a consumer imports a segment only from a socket under
// its own socket_dir, and only when the descriptor's size is the imported
// allocation's. A refused segment is not reported unreachable (its
// provider is alive), no copy is enqueued, and a trusting consumer still
// reads the object.
func TestConsumerTrust(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: 300 * time.Millisecond})
	ctx := context.Background()
	want := bytes.Repeat([]byte{0x5c}, 8192)
	if err := e.prov.PutBytes(ctx, "x", want, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := devBuf(t, e, 8192)
	outer := t // the socket_dir of the provider is the test's, not a subtest's
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		m    func(reportCounter) master.Client
		want error
	}{
		// The provider's socket lies in the test's socket_dir; this
		// consumer's is another directory.
		{"socket outside socket_dir", map[string]any{"socket_dir": t.TempDir()},
			func(r reportCounter) master.Client { return r }, fdx.ErrUntrusted},
		{"descriptor larger than the allocation", map[string]any{},
			func(r reportCounter) master.Client { return lyingSize{r} }, mapping.ErrDescriptorMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reports atomic.Int32
			c, err := client.Open(ctx, cfgFor(outer, tc.cfg), client.Options{Driver: e.drv, Master: tc.m(reportCounter{e.mc, &reports}), ClientID: "doubter"})
			if err != nil {
				t.Fatal(err)
			}
			e.drv.ResetCalls()
			_, gerr := c.Get(ctx, "x", client.Bytes(uintptr(dst), 8192), 0)
			copies := e.drv.CallCount("MemcpyBatchAsync") + e.drv.CallCount("MemcpyAsync") + e.drv.CallCount("LaunchKernel")
			if !errors.Is(gerr, tc.want) || !errors.Is(gerr, client.ErrTransfer) || copies != 0 {
				t.Fatalf("Get: %v with %d copy calls; want ErrTransfer wrapping %v and no copy", gerr, copies, tc.want)
			}
			if errors.Is(gerr, fdx.ErrUnavailable) {
				t.Fatalf("Get: %v blames the provider", gerr)
			}
			if n := reports.Load(); n != 0 {
				t.Fatalf("the segment was reported unreachable %d times; its provider is alive", n)
			}
			if st := c.MappingStats(); st.Entries != 0 {
				t.Fatalf("refused segment left %d mappings", st.Entries)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// Other consumers are unaffected: the segment stays usable.
			got, err := e.cons.GetBytes(ctx, "x")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("trusting consumer: %d bytes, %v", len(got), err)
			}
		})
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}
