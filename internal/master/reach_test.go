package master

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// reachEnv mounts, for the reachability tests:
//
//	sW  posix_fd on host-w (owner pW), 1 MiB
//	sB  posix_fd on host-b (owner pB), 64 MiB
//	fD  fabric, default domain, on host-d (owner pD), 8 MiB
//	fO  fabric, domain "other", on host-o (owner pO), 128 MiB
//
// Placement without reachability prefers the most free bytes, so an
// unfiltered put from host-w lands on fO or sB first.
func reachEnv(e *env) {
	e.t.Helper()
	reg := func(id, node, domain string) string {
		r, err := e.c.RegisterClient(e.ctx, ClientInfo{ID: id, Node: node, NUMANode: -1, Device: -1, FabricDomain: domain})
		if err != nil {
			e.t.Fatal(err)
		}
		return r.ID
	}
	posix := func(id, owner, node string, size uint64) segment.Descriptor {
		d := desc(id, owner, node, segment.TierDRAM, 0, size)
		d.Handle = segment.Handle{Kind: segment.HandlePosixFD, SocketPath: "/run/kvf/" + owner}
		return d
	}
	e.mount(posix("sW", reg("pW", "host-w", ""), "host-w", MiB))
	e.mount(posix("sB", reg("pB", "host-b", ""), "host-b", 64*MiB))
	e.mount(desc("fD", reg("pD", "host-d", ""), "host-d", segment.TierDRAM, 0, 8*MiB))
	e.mount(desc("fO", reg("pO", "host-o", "other"), "host-o", segment.TierDRAM, 0, 128*MiB))
	reg("w", "host-w", "")       // writer and reader on host-w, default domain
	reg("x", "host-x", "")       // reader on another host, default domain
	reg("xo", "host-x", "other") // reader on another host, domain "other"
	reg("z", "host-z", "nowhere")
}

// TestPlacementReachesWriter: a put lands only on segments its writer can
// import — POSIX-fd segments of its own host, fabric segments of its own
// fabric domain. Before, placement took the segment with the most free
// bytes: another host's POSIX-fd segment or another domain's fabric one,
// which the writer then failed to import.
func TestPlacementReachesWriter(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		reachEnv(e)
		for _, tc := range []struct {
			writer string
			want   []string // segments it may use
		}{
			{"w", []string{"sW", "fD"}},
			{"pB", []string{"sB", "fD"}},
			{"xo", []string{"fO"}},
			{"x", []string{"fD"}}, // most free is fO, then sB: neither reachable
		} {
			for i := range 8 {
				key := tc.writer + "-" + string(rune('a'+i))
				r := e.putStart(key, 64<<10, withClient(tc.writer))
				if r.Err != nil {
					t.Fatalf("PutStart(%s) as %s: %v", key, tc.writer, r.Err)
				}
				if id := r.Replicas[0].Segment.ID; !slices.Contains(tc.want, id) {
					t.Fatalf("PutStart(%s) as %s placed on %s; it reaches only %v", key, tc.writer, id, tc.want)
				}
			}
		}
		// Three replicas need three distinct segments the writer reaches;
		// w reaches two.
		r := e.putStart("three", 64<<10, withClient("w"), withReplicas(3))
		wantErr(t, "3 replicas as w", r.Err, ErrNoSpace)
		// A writer that reaches nothing is told why.
		r = e.putStart("lost", 64<<10, withClient("z"))
		if !errors.Is(r.Err, ErrNoSpace) || !strings.Contains(r.Err.Error(), `reachable from writer "z"`) {
			t.Fatalf("PutStart as z: %v; want ErrNoSpace saying nothing is reachable", r.Err)
		}
		// A preferred segment the writer cannot reach is not used.
		r = e.putStart("pref", 64<<10, withClient("w"), func(q *PutStartReq) { q.Placement.Segments = []string{"sB", "fO"} })
		if r.Err != nil || !slices.Contains([]string{"sW", "fD"}, r.Replicas[0].Segment.ID) {
			t.Fatalf("PutStart preferring unreachable segments: %+v", r)
		}
	})
}

// TestGetReplicasLeavesOutUnreachable: a reader that names itself
// (WithReader) is offered only the replicas it can import; a key with none
// left is ErrNotFound naming the reader. A reader that does not name itself
// gets every replica, as before.
func TestGetReplicasLeavesOutUnreachable(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		reachEnv(e)
		put := e.putStart("k", 4096, withClient("w"), withReplicas(2)) // sW and fD: all w reaches
		if put.Err != nil {
			t.Fatal(put.Err)
		}
		if errs := e.c.PutEnd(e.ctx, []PutRef{{Key: "k", Token: put.Token}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		for _, tc := range []struct {
			reader string
			want   []string // nil: ErrNotFound
		}{
			{"", []string{"fD", "sW"}},
			{"unregistered", []string{"fD", "sW"}},
			{"w", []string{"fD", "sW"}},
			{"x", []string{"fD"}},
			{"xo", nil},
		} {
			res, err := e.c.GetReplicas(WithReader(e.ctx, tc.reader), []string{"k"})
			if err != nil {
				t.Fatal(err)
			}
			g := res[0]
			if tc.want == nil {
				if !errors.Is(g.Err, ErrNotFound) || !strings.Contains(g.Err.Error(), `reachable from reader "xo"`) {
					t.Errorf("reader %q: %+v; want ErrNotFound naming the reader", tc.reader, g)
				}
				continue
			}
			var got []string
			for _, r := range g.Replicas {
				got = append(got, r.Segment.ID)
			}
			if g.Err != nil || strings.Join(slices.Sorted(slices.Values(got)), ",") != strings.Join(tc.want, ",") {
				t.Errorf("reader %q: replicas %v, %v; want %v", tc.reader, got, g.Err, tc.want)
			}
			if g.Err == nil {
				if err := e.c.ReleaseLeases(e.ctx, []uint64{g.LeaseID}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
