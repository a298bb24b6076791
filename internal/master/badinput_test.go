package master

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
	"github.com/kvfabric/kvfabric/internal/segment"
)

// rawCodec sends a []byte request body as is and reads the response as
// bytes: a client that speaks gRPC but not protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// TestGarbageBodyIsInvalidArgument: a request body that is not protobuf is
// the caller's fault. grpc-go answers a codec error with Internal ("the
// master broke"), which is what every call answered before the handlers
// decoded through decodeTarget; now each method answers InvalidArgument
// with the INVALID reason, on the hand-decoded and the generated paths
// (with an interceptor every call takes the generated one), and the master
// keeps serving.
func TestGarbageBodyIsInvalidArgument(t *testing.T) {
	icpt := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	bodies := map[string][]byte{
		"truncated length": {0x0a, 0xff},                            // field 1, bytes, length runs past the end
		"bad field number": {0xf8, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}, // field number past the maximum
		"bad utf8 in id":   {0x0a, 0x02, 0xff, 0xfe},                // field 1 (a string in most requests) is not UTF-8
	}
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"fast", nil}, {"interceptor", []grpc.ServerOption{grpc.UnaryInterceptor(icpt)}}} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := New(Config{ReapInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(svc, nil, tc.opts...)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(lis, nil) }()
			defer func() {
				_ = srv.Shutdown(context.Background())
				<-done
			}()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := context.Background()
			for _, m := range pb.Master_ServiceDesc.Methods {
				for what, body := range bodies {
					if what == "bad utf8 in id" && (m.MethodName == "Stats" || m.MethodName == "ListSegments" || m.MethodName == "RemoveAll") {
						continue // no length-delimited field 1: protobuf skips it as unknown
					}
					in, out := body, []byte(nil)
					err := conn.Invoke(ctx, "/"+pb.Master_ServiceDesc.ServiceName+"/"+m.MethodName, &in, &out)
					if status.Code(err) != codes.InvalidArgument || !errors.Is(fromStatus(err), ErrInvalid) ||
						!strings.Contains(err.Error(), m.MethodName+" request body") {
						t.Errorf("%s with %s: %v, want InvalidArgument naming the request", m.MethodName, what, err)
					}
				}
			}
			// Still serving, and nothing changed.
			c := NewRemote(mustConn(t, lis.Addr().String()))
			defer c.Close()
			st, err := c.Stats(ctx)
			if err != nil || st.Clients != 0 || st.Segments != 0 {
				t.Fatalf("after garbage: %+v, %v", st, err)
			}
		})
	}
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestConfigBounds: --alignment and --max-key-len were accepted whatever
// their size (an alignment of 1 TiB made every put fail with no space,
// 1 or 2 broke the 8-byte copy words); now they are bounded.
func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"alignment 8", Config{Alignment: 8}, true},
		{"alignment 1MiB", Config{Alignment: MiB}, true},
		{"alignment 1", Config{Alignment: 1}, false},
		{"alignment 4", Config{Alignment: 4}, false},
		{"alignment 24", Config{Alignment: 24}, false},
		{"alignment 2MiB", Config{Alignment: 2 * MiB}, false},
		{"alignment 2^63", Config{Alignment: 1 << 63}, false},
		{"max key len 64KiB", Config{MaxKeyLen: 64 << 10}, true},
		{"max key len 64KiB+1", Config{MaxKeyLen: 64<<10 + 1}, false},
		{"max key len 2^40", Config{MaxKeyLen: 1 << 40}, false},
		{"max key len -1", Config{MaxKeyLen: -1}, false},
		{"placement slack exact", Config{PlacementSlack: ExactPlacement}, true},
		{"placement slack 0.25", Config{PlacementSlack: 0.25}, true},
		{"placement slack 0.5", Config{PlacementSlack: 0.5}, false},
		{"placement slack -0.5", Config{PlacementSlack: -0.5}, false},
		{"placement slack NaN", Config{PlacementSlack: math.NaN()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := New(tc.cfg)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				_ = svc.Close()
				return
			}
			if err == nil {
				_ = svc.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want") || !strings.Contains(err.Error(), "config ") {
				t.Fatalf("%v: want ErrInvalid with the bounds", err)
			}
		})
	}
}

// TestClientIDRefused: a client id with '/' or a space registered raw, its
// segments were mounted under a sanitized owner and the mount failed with
// "unknown client". Now RegisterClient refuses it up front, naming the id,
// on both transports.
func TestClientIDRefused(t *testing.T) {
	forEachTransport(t, testConfig(), func(t *testing.T, e *env) {
		for _, id := range []string{"a/b", "a b", "tab\there", "é", strings.Repeat("x", MaxClientIDLen+1), "x\x00"} {
			_, err := e.c.RegisterClient(e.ctx, ClientInfo{ID: id, Node: "h", NUMANode: -1, Device: -1})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "client id") {
				t.Errorf("RegisterClient(%q) = %v, want ErrInvalid naming the client id", id, err)
			}
		}
		for _, id := range []string{"host-1.example:7_a", strings.Repeat("x", MaxClientIDLen)} {
			if got := e.register(id, "h", -1, -1); got != id {
				t.Errorf("RegisterClient(%q) = %q", id, got)
			}
		}
		if got := e.register("", "h", -1, -1); ValidateClientID(got) != nil {
			t.Errorf("assigned id %q is not a valid client id", got)
		}
		st, err := e.c.Stats(e.ctx)
		if err != nil || st.Clients != 3 {
			t.Fatalf("Stats: %+v, %v (want the 3 valid clients only)", st, err)
		}
	})
}

// FuzzRegisterClientID: RegisterClient accepts exactly the ids
// ValidateClientID accepts (and the empty id, which it assigns), and an
// accepted id is usable as a segment owner.
func FuzzRegisterClientID(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "a b", "host-1:2.x_y", "\xff", strings.Repeat("z", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		svc, err := New(Config{ReapInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		ctx := context.Background()
		reg, err := svc.RegisterClient(ctx, ClientInfo{ID: id, Node: "h", NUMANode: -1, Device: -1})
		verr := ValidateClientID(id)
		switch {
		case id == "":
			if err != nil || ValidateClientID(reg.ID) != nil {
				t.Fatalf("assigned %q, %v", reg.ID, err)
			}
		case verr != nil:
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("validator says %v, RegisterClient says %v", verr, err)
			}
			return
		case err != nil:
			t.Fatalf("valid id %q refused: %v", id, err)
		}
		for i := 0; i < len(reg.ID); i++ {
			if !clientIDByte(reg.ID[i]) {
				t.Fatalf("registered id %q has byte %q", reg.ID, reg.ID[i])
			}
		}
		if err := svc.MountSegment(ctx, desc("h/"+reg.ID+"/dram0/0", reg.ID, "h", segment.TierDRAM, 0, MiB)); err != nil {
			t.Fatalf("mount as %q: %v", reg.ID, err)
		}
	})
}

// TestPutEndBadKeys: PutEnd and PutRevoke refuse an empty, an oversized
// and a non-UTF-8 key with ErrInvalid naming what is wrong, an unknown
// key with ErrNotFound, each at its own position, and end or revoke the
// valid puts of the same call.
func TestPutEndBadKeys(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	e.mount(desc("s", e.register("p", "h", 0, 0), "h", segment.TierDRAM, 0, 1<<20))
	for _, op := range []string{"PutEnd", "PutRevoke"} {
		good := e.putStart("good-"+op, 4096)
		if good.Err != nil {
			t.Fatal(good.Err)
		}
		refs := []PutRef{
			{Key: "good-" + op, Token: good.Token},
			{Key: "", Token: good.Token},
			{Key: strings.Repeat("k", e.svc.cfg.MaxKeyLen+1), Token: good.Token},
			{Key: "bad-\xff", Token: good.Token},
			{Key: "unknown", Token: good.Token},
		}
		call := e.c.PutEnd
		if op == "PutRevoke" {
			call = e.c.PutRevoke
		}
		errs := call(e.ctx, refs)
		if errs[0] != nil {
			t.Fatalf("%s of the valid put: %v", op, errs[0])
		}
		for i, want := range map[int]string{1: "empty key", 2: "limit", 3: "not valid UTF-8"} {
			if !errors.Is(errs[i], ErrInvalid) || !strings.Contains(errs[i].Error(), want) {
				t.Fatalf("%s of key %d: %v; want ErrInvalid, %q", op, i, errs[i], want)
			}
		}
		if !errors.Is(errs[4], ErrNotFound) {
			t.Fatalf("%s of an unknown key: %v; want ErrNotFound", op, errs[4])
		}
		ex, err := e.c.Exists(e.ctx, []string{"good-" + op}, false)
		if err != nil || ex[0] != (op == "PutEnd") {
			t.Fatalf("after %s: exists %v, %v", op, ex, err)
		}
	}
}

// TestGetReplicasBadKeys: GetReplicas refuses an empty, an oversized and a
// non-UTF-8 key with ErrInvalid naming what is wrong, answers an unknown
// key and a pending one ErrNotFound, each at its own position, and leases
// the visible key of the same call.
func TestGetReplicasBadKeys(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["embedded"])
	e.mount(desc("s", e.register("p", "h", 0, 0), "h", segment.TierDRAM, 0, 1<<20))
	e.put("visible", 4096)
	if r := e.putStart("pending", 4096); r.Err != nil {
		t.Fatal(r.Err)
	}
	keys := []string{"visible", "", strings.Repeat("k", e.svc.cfg.MaxKeyLen+1), "bad-\xff", "unknown", "pending"}
	res, err := e.c.GetReplicas(e.ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Size != 4096 || len(res[0].Replicas) == 0 || res[0].LeaseID == 0 {
		t.Fatalf("get of the visible key: %+v", res[0])
	}
	for i, want := range map[int]string{1: "empty key", 2: "limit", 3: "not valid UTF-8"} {
		if !errors.Is(res[i].Err, ErrInvalid) || !strings.Contains(res[i].Err.Error(), want) {
			t.Fatalf("get of key %d: %v; want ErrInvalid, %q", i, res[i].Err, want)
		}
	}
	for _, i := range []int{4, 5} {
		if !errors.Is(res[i].Err, ErrNotFound) {
			t.Fatalf("get of %q: %v; want ErrNotFound", keys[i], res[i].Err)
		}
	}
	if err := e.c.ReleaseLeases(e.ctx, []uint64{res[0].LeaseID}); err != nil {
		t.Fatal(err)
	}
}
