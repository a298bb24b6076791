package master

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// TestPutStartUniform: a uniform batch (UniformPutStarter) gets, on every
// transport, the answers its requests would get one by one: each key's
// own size in its own order, a bad key or size failing only itself, an
// existing key ALREADY_EXISTS. A remote Client sends it as a uniform
// request and the master answers it as one (the Client never falls back
// to items). Bad input of the whole call fails it with nothing started.
func TestPutStartUniform(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch = 8
	forEachTransport(t, cfg, func(t *testing.T, e *env) {
		e.mount(desc("seg", e.register("prov", "host-prov", 0, 0), "host-prov", segment.TierDRAM, 0, 64*MiB))
		e.put("taken", 4096)
		uc, ok := e.c.(UniformPutStarter)
		if !ok {
			t.Fatalf("%T is not a UniformPutStarter", e.c)
		}
		keys := []string{"u0", "u1", "k\xff", "taken", "u4", "", "u6"}
		sizes := []uint64{4096, 8192, 4096, 4096, 0, 4096, 12288}
		u := UniformPuts{Keys: keys, Sizes: sizes, Req: PutStartReq{Key: "ignored", Size: 1,
			Placement: Placement{Client: e.defaultWriter(), Tier: segment.TierDRAM, NUMANode: -1, Device: -1}}}
		res, err := uc.PutStartUniform(e.ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(keys) {
			t.Fatalf("%d answers for %d keys", len(res), len(keys))
		}
		if r, ok := e.c.(*remote); ok && r.oldMaster.Load() {
			t.Fatal("the remote Client took the master for one that ignores uniform puts")
		}
		wantErr(t, "bad UTF-8 key", res[2].Err, ErrInvalid)
		wantErr(t, "existing key", res[3].Err, ErrAlreadyExists)
		wantErr(t, "size 0", res[4].Err, ErrInvalid)
		wantErr(t, "empty key", res[5].Err, ErrInvalid)
		var refs []PutRef
		for _, i := range []int{0, 1, 6} {
			r := res[i]
			if r.Err != nil || len(r.Replicas) != 1 || r.Replicas[0].Length < sizes[i] {
				t.Fatalf("key %q: %+v", keys[i], r)
			}
			refs = append(refs, r.Ref(keys[i]))
		}
		if st := e.stats(); st.PendingPuts != 3 {
			t.Fatalf("pending puts %d, want 3", st.PendingPuts)
		}
		endRefs(t, e.ctx, e.c, refs)
		for _, i := range []int{0, 1, 6} {
			g := e.get(keys[i])
			if g.Err != nil || g.Size != sizes[i] {
				t.Errorf("key %q: size %d (%v), want %d", keys[i], g.Size, g.Err, sizes[i])
			}
			if err := e.c.ReleaseLeases(e.ctx, []uint64{g.LeaseID}); err != nil {
				t.Fatal(err)
			}
		}
		if st := e.stats(); st.Objects != 4 || st.PendingPuts != 0 {
			t.Fatalf("objects %d pending %d, want 4 and 0", st.Objects, st.PendingPuts)
		}

		// Whole-call bad input: nothing started.
		_, err = uc.PutStartUniform(e.ctx, UniformPuts{Keys: []string{"a", "b"}, Sizes: []uint64{1}, Req: u.Req})
		wantErr(t, "sizes shorter than keys", err, ErrInvalid)
		if err == nil || !strings.Contains(err.Error(), "2 keys but 1 sizes") {
			t.Errorf("error %v does not name the keys and sizes", err)
		}
		big := make([]string, cfg.MaxBatch+1)
		for i := range big {
			big[i] = fmt.Sprintf("big-%d", i)
		}
		_, err = uc.PutStartUniform(e.ctx, UniformPuts{Keys: big, Sizes: make([]uint64, len(big)), Req: u.Req})
		wantErr(t, "batch too large", err, ErrInvalid)
		if st := e.stats(); st.Objects != 4 || st.PendingPuts != 0 {
			t.Fatalf("after bad calls: objects %d pending %d, want 4 and 0", st.Objects, st.PendingPuts)
		}

		// A template the wire cannot carry (invalid UTF-8 in the
		// placement): every key gets the Service's error for it.
		bad := u.Req
		bad.Placement.Node = "n\xff"
		res, err = uc.PutStartUniform(e.ctx, UniformPuts{Keys: []string{"v0", "v1"}, Sizes: []uint64{1, 2}, Req: bad})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			wantErr(t, fmt.Sprintf("bad template, key %d", i), r.Err, ErrInvalid)
		}

		// Zero leaked: everything removed, nothing pending or used.
		for _, err := range e.c.Remove(e.ctx, []string{"u0", "u1", "u6", "taken"}, true) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
			t.Fatalf("leaked: objects %d pending %d used %d", st.Objects, st.PendingPuts, e.tierUsed(segment.TierDRAM))
		}
	})
}

// oldMaster is a master built before uniform puts: its PutStart knows
// only the items (the generated code skips the uniform field as unknown
// to it), and it records how many items each call carried.
type oldMaster struct {
	*grpcService
	mu    sync.Mutex
	calls []int
}

func (o *oldMaster) PutStart(ctx context.Context, r *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	o.mu.Lock()
	o.calls = append(o.calls, len(r.Items))
	o.mu.Unlock()
	res, err := o.svc.PutStart(ctx, putStartReqsFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return putToPB(res), nil
}

// TestPutStartUniformOldMaster: a remote Client's uniform batch to a
// master that ignores uniform puts (it answers none and starts none) is
// sent again as items, and every later batch goes as items at once: no
// put is lost or started twice. A new registration (as after the master's
// restart, maybe as a newer one) tries uniform puts again.
func TestPutStartUniformOldMaster(t *testing.T) {
	e := newEnvWith(t, testConfig(), func(_ testing.TB, s *Service) Client { return NewEmbedded(s) })
	e.mount(desc("seg", e.register("prov", "host-prov", 0, 0), "host-prov", segment.TierDRAM, 0, 64*MiB))
	w := e.defaultWriter()

	old := &oldMaster{grpcService: &grpcService{svc: e.svc}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterMasterServer(srv, old)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := NewRemote(conn)
	defer c.Close()

	tmpl := PutStartReq{Placement: Placement{Client: w, NUMANode: -1, Device: -1}}
	for round, want := range [][]int{{0, 2}, {2}, {0, 2}} {
		if round == 2 {
			if _, err := c.RegisterClient(e.ctx, ClientInfo{ID: "again", Node: "n"}); err != nil {
				t.Fatal(err)
			}
		}
		old.mu.Lock()
		old.calls = nil
		old.mu.Unlock()
		keys := []string{fmt.Sprintf("r%d-a", round), fmt.Sprintf("r%d-b", round)}
		res, err := c.(UniformPutStarter).PutStartUniform(e.ctx, UniformPuts{Keys: keys, Sizes: []uint64{4096, 8192}, Req: tmpl})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var refs []PutRef
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("round %d key %q: %v", round, keys[i], r.Err)
			}
			refs = append(refs, r.Ref(keys[i]))
		}
		old.mu.Lock()
		got := fmt.Sprint(old.calls)
		old.mu.Unlock()
		if got != fmt.Sprint(want) {
			t.Errorf("round %d: items per call %s, want %v", round, got, want)
		}
		endRefs(t, e.ctx, e.c, refs)
	}
	if st := e.stats(); st.Objects != 6 || st.PendingPuts != 0 {
		t.Fatalf("objects %d pending %d, want 6 and 0", st.Objects, st.PendingPuts)
	}
	if _, err := e.c.RemoveAll(e.ctx, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 {
		t.Fatalf("leaked: objects %d pending %d", st.Objects, st.PendingPuts)
	}
}

// TestPutStartUniformServer: the server's side of uniform puts, as a peer
// built from the proto sends them (the generated client): a request with
// both items and uniform puts is answered items first, then the uniform
// ones in order; keys and sizes of different lengths fail the whole call
// as INVALID_ARGUMENT naming both counts, with nothing started.
func TestPutStartUniformServer(t *testing.T) {
	e := newEnvWith(t, testConfig(), func(_ testing.TB, s *Service) Client { return NewEmbedded(s) })
	e.mount(desc("seg", e.register("prov", "host-prov", 0, 0), "host-prov", segment.TierDRAM, 0, 64*MiB))
	w := e.defaultWriter()
	lis := bufconn.Listen(1 << 20)
	srv := NewServer(e.svc, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis, nil) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-done
	}()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gen := pb.NewMasterClient(conn)
	pl := &pb.Placement{Client: w, NumaNode: -1, Device: -1}

	_, err = gen.PutStart(e.ctx, &pb.PutStartRequest{Uniform: &pb.UniformPutStart{Item: &pb.PutStartItem{Placement: pl},
		Keys: []string{"a", "b"}, Sizes: []uint64{4096}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "2 keys but 1 sizes") {
		t.Errorf("keys and sizes of different lengths: %v", err)
	}
	if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 {
		t.Fatalf("after a refused call: objects %d pending %d", st.Objects, st.PendingPuts)
	}

	resp, err := gen.PutStart(e.ctx, &pb.PutStartRequest{
		Items:   []*pb.PutStartItem{{Key: "i0", Size: 100, Placement: pl}, {Key: "u1", Size: 200, Placement: pl}},
		Uniform: &pb.UniformPutStart{Item: &pb.PutStartItem{Placement: pl}, Keys: []string{"u0", "u1", "u2"}, Sizes: []uint64{300, 400, 500}},
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, sizes := []string{"i0", "u1", "u0", "u1", "u2"}, []uint64{100, 200, 300, 400, 500}
	if len(resp.Results) != len(keys) {
		t.Fatalf("%d results for 2 items and 3 uniform puts", len(resp.Results))
	}
	var refs []PutRef
	for i, r := range resp.Results {
		if i == 3 { // u1 again: its put (item 1) is in progress
			if r.Error == nil || codes.Code(r.Error.Code) != codes.AlreadyExists {
				t.Errorf("result 3 (u1 again): %v", r.Error)
			}
			continue
		}
		if r.Error != nil || len(r.Replicas) != 1 || r.Replicas[0].Length < sizes[i] {
			t.Fatalf("result %d (%s): %v", i, keys[i], r)
		}
		refs = append(refs, PutRef{Key: keys[i], Token: r.Token, Hint: r.Hint})
	}
	endRefs(t, e.ctx, e.c, refs)
	for i, k := range keys {
		if i == 3 {
			continue
		}
		g := e.get(k)
		if g.Err != nil || g.Size != sizes[i] {
			t.Errorf("%s: size %d (%v), want %d", k, g.Size, g.Err, sizes[i])
		}
		if err := e.c.ReleaseLeases(e.ctx, []uint64{g.LeaseID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.c.RemoveAll(e.ctx, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 || e.tierUsed(segment.TierDRAM) != 0 {
		t.Fatalf("leaked: objects %d pending %d used %d", st.Objects, st.PendingPuts, e.tierUsed(segment.TierDRAM))
	}
}
