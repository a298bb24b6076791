package master

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvfabric/kvfabric/internal/segment"
)

func init() {
	transports["fast"] = newFastTestClient
}

// fastServed is a Service served over gRPC and the fast path on loopback.
type fastServed struct {
	srv            *Server
	addr, fastAddr string
}

// serveFast serves svc (or a routed server, when srv is given) on two
// loopback listeners until the test ends.
func serveFast(t testing.TB, srv *Server, tc *tls.Config) fastServed {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lis.Close()
		t.Fatal(err)
	}
	if err := srv.ListenFast(flis); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(lis, nil) }() // gRPC's TLS is among the server's options
	go func() { served <- srv.ServeFast(flis, tc) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		for range 2 {
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return fastServed{srv: srv, addr: lis.Addr().String(), fastAddr: flis.Addr().String()}
}

// dialFast dials fs's gRPC address with the fast path on, and makes the
// client use the fast port at once (as after RegisterClient).
func dialFast(t testing.TB, fs fastServed, fp FastPath, opts ...grpc.DialOption) *remote {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialFast(ctx, fs.addr, fp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := c.(*remote)
	if r.fast == nil {
		t.Fatal("DialFast made no fast path")
	}
	if err := r.fast.advertise(ctx, portOf(t, fs.fastAddr)); err != nil {
		t.Fatal(err)
	}
	return r
}

// newFastTestClient is the "fast" transport of the behaviour tests: the
// remote Client with every hot call over the fast path (the rest over
// gRPC), both on loopback TCP. At the end of the test every hot call must
// have gone over the fast path. Both ends spin (spin.go) whatever this
// machine's CPUs, so every behaviour test runs through the spinning reads.
func newFastTestClient(t testing.TB, s *Service) Client {
	t.Cleanup(setSpinSlots(2))
	fs := serveFast(t, NewServer(s, nil), nil)
	r := dialFast(t, fs, FastPath{})
	t.Cleanup(func() {
		st := r.Transports()
		if st.GRPC != 0 || st.Fallback != 0 {
			t.Errorf("transports %+v: hot calls went over gRPC", st)
		}
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if st := r.Transports(); st.Conns != 0 {
			t.Errorf("after Close, %d fast path connections are open", st.Conns)
		}
	})
	return r
}

// leakCheck records the goroutines and file descriptors of the process;
// its check, at the end of a test, fails when more remain (waiting a
// little for goroutines that are ending).
type leakCheck struct{ goroutines, fds int }

// newLeakCheck records the process's goroutines and file descriptors now
// and checks them when the test ends, after its other cleanups.
func newLeakCheck(t testing.TB) {
	l := leakCheck{goroutines: runtime.NumGoroutine(), fds: openFDs()}
	t.Cleanup(func() { l.check(t) })
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func (l leakCheck) check(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFDs()
		if g <= l.goroutines && f <= l.fds {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("leaked: %d goroutines (was %d), %d fds (was %d)\n%s", g, l.goroutines, f, l.fds, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// portOf returns the port of addr (host:port).
func portOf(t testing.TB, addr string) uint32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(p)
}

// fastRaw opens a plain TCP connection to a fast path and says hello with
// token (skipped when hello is false).
func fastRaw(t *testing.T, addr string, hello bool, token string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if hello {
		b := make([]byte, fastHeaderLen, 64)
		b = append(b, fastVersion, 0)
		b = append(b, token...)
		putFastRequest(b, fastHello, len(b)-fastHeaderLen, 0)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if code, _, body := readRawAnswer(t, c); code != codes.OK {
			t.Fatalf("hello: %v %s", code, body)
		}
	}
	return c
}

// readRawAnswer reads one answer; for an error it returns the status
// message as the body.
func readRawAnswer(t *testing.T, c net.Conn) (codes.Code, uint64, string) {
	t.Helper()
	var h [fastHeaderLen]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("read answer header: %v", err)
	}
	body := make([]byte, binary.LittleEndian.Uint32(h[:4]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	code := codes.Code(h[4])
	if code != codes.OK {
		return code, 0, status.Convert(answerStatus(code, body)).Message()
	}
	return code, binary.LittleEndian.Uint64(h[8:]), string(body)
}

// expectClosed asserts that the master closed c.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	if n, err := c.Read(b[:]); err == nil {
		t.Fatalf("connection still open: read %d bytes", n)
	}
}

// TestFastBadInput: malformed frames are answered with an error naming the
// field and its value, the connection is closed, nothing of a claimed size
// is allocated, and the master serves everyone else as before.
func TestFastBadInput(t *testing.T) {
	newLeakCheck(t)
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	fs := serveFast(t, NewServer(svc, nil), nil)
	good := dialFast(t, fs, FastPath{})
	ctx := context.Background()
	frame := func(m fastMethod, length int, body []byte) []byte {
		b := make([]byte, fastHeaderLen, fastHeaderLen+len(body))
		putFastRequest(b, m, length, 0)
		return append(b, body...)
	}
	for _, tc := range []struct {
		name  string
		hello bool
		send  []byte
		want  string // in the error message
		code  codes.Code
	}{
		{"oversized length", true, frame(fastGetReplicas, 1<<31, nil), "length 2147483648 exceeds the limit of 4194304 bytes", codes.InvalidArgument},
		{"unknown method", true, frame(fastMethod(99), 0, nil), "method 99 is unknown", codes.InvalidArgument},
		{"flags", true, func() []byte { b := frame(fastExists, 0, nil); b[5] = 3; return b }(), "flags 0x3", codes.InvalidArgument},
		{"truncated frame", true, frame(fastExists, 100, []byte("0123456789")), "Exists body of 100 bytes ends after 10", codes.InvalidArgument},
		{"garbage hello", false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "method 47 is unknown", codes.InvalidArgument},
		{"call before hello", false, frame(fastGetReplicas, 0, nil), "method GetReplicas before the hello", codes.InvalidArgument},
		{"old hello version", false, frame(fastHello, 2, []byte{9, 0}), "hello version 9", codes.InvalidArgument},
		{"second hello", true, frame(fastHello, 2, []byte{1, 0}), "a second hello", codes.InvalidArgument},
		{"garbage body", true, frame(fastGetReplicas, 3, []byte{0xff, 0xff, 0xff}), "GetReplicas request body", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			c := fastRaw(t, fs.fastAddr, tc.hello, "")
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.name == "truncated frame" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			code, _, msg := readRawAnswer(t, c)
			if code != tc.code || !strings.Contains(msg, tc.want) {
				t.Fatalf("answer %v %q, want %v naming %q", code, msg, tc.code, tc.want)
			}
			if tc.name == "garbage body" {
				// A decode error fails the call, not the connection.
				b := frame(fastExists, 0, nil)
				if _, err := c.Write(b); err != nil {
					t.Fatal(err)
				}
				if code, _, msg := readRawAnswer(t, c); code != codes.OK {
					t.Fatalf("call after a garbage body: %v %s", code, msg)
				}
				return
			}
			expectClosed(t, c)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
				t.Fatalf("allocated %d bytes for a bad frame", d)
			}
			// The master serves the others as before.
			if _, err := good.Exists(ctx, []string{"k"}, false); err != nil {
				t.Fatal(err)
			}
		})
	}
	if st := good.Transports(); st.Fast == 0 || st.GRPC != 0 {
		t.Fatalf("transports %+v", st)
	}
	if err := good.Close(); err != nil {
		t.Fatal(err)
	}
	_ = fs.srv.Shutdown(ctx)
	_ = svc.Close()
}

// TestFastHelloAuthentication: with authentication required, a hello
// without a token or with a wrong one is refused (Unauthenticated, the
// connection closed), a client whose hello is refused falls back to gRPC
// and gets gRPC's refusal, and a plaintext hello at a TLS fast path fails.
func TestFastHelloAuthentication(t *testing.T) {
	a := newAuthEnv(t)
	a.fast = true
	ctx := context.Background()
	plain := newFastConnForTest(t, a.fastPort, FastPath{})
	if _, err := plain.dial(ctx, plain.mu.addr, 0); err == nil {
		t.Fatal("plaintext hello at a TLS fast path succeeded")
	}
	for _, tc := range []struct{ name, token string }{{"no token", ""}, {"wrong token", "token-of-nobody-0123456789abcdef0123456789"}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFastConnForTest(t, a.fastPort, FastPath{TLS: &tls.Config{RootCAs: a.tc.ClientCAs, ServerName: "localhost"}, Token: tc.token})
			_, err := f.dial(ctx, f.mu.addr, 0)
			if status.Code(errors.Unwrap(errors.Unwrap(err))) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") {
				t.Fatalf("hello: %v, want Unauthenticated", err)
			}
		})
	}
	// A token for nobody: the hello is refused, the call goes to gRPC,
	// which refuses it the same way.
	if err := os.WriteFile(filepath.Join(a.dir, "nobody.token"), []byte("token-of-nobody-0123456789abcdef0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := a.dial("", "nobody")
	_, err := c.GetReplicas(ctx, []string{"k"})
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("GetReplicas with an unknown token: %v, want ErrUnauthenticated", err)
	}
	if st := c.(*remote).Transports(); st.Fallback != 1 || st.GRPC != 1 || st.Fast != 0 {
		t.Fatalf("transports %+v, want one fallback to gRPC", st)
	}
	c.(*remote).viaGRPC.Store(0) // seen; the env's check wants none
	c.(*remote).fast.fallback.Store(0)
}

// newFastConnForTest returns a fastClient for the loopback port, closed
// with the test.
func newFastConnForTest(t *testing.T, port uint32, fp FastPath) *fastClient {
	t.Helper()
	f, err := newFastClient("127.0.0.1:1", fp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.advertise(context.Background(), port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.close() })
	return f
}

// TestFastFallback: a fast port that refuses connections leaves the calls
// on gRPC (counted, and not retried for fastRetryAfter); with the fast path
// off no connection is made.
func TestFastFallback(t *testing.T) {
	newLeakCheck(t)
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	fs := serveFast(t, NewServer(svc, nil), nil)
	ctx := context.Background()

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := portOf(t, dead.Addr().String())
	dead.Close()
	r := dialFast(t, fs, FastPath{})
	if err := r.fast.advertise(ctx, deadPort); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := r.Exists(ctx, []string{"k"}, false); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.Transports(); st.Fallback != 1 || st.GRPC != 5 || st.Fast != 0 || st.Conns != 0 {
		t.Fatalf("transports %+v, want 5 over gRPC after one fallback", st)
	}
	// Advertised again (as by a RegisterClient): the fast path is used
	// once fastRetryAfter has passed.
	if err := r.fast.advertise(ctx, portOf(t, fs.fastAddr)); err != nil {
		t.Fatal(err)
	}
	r.fast.retryAt.Store(0)
	if _, err := r.Exists(ctx, []string{"k"}, false); err != nil {
		t.Fatal(err)
	}
	if st := r.Transports(); st.Fast != 1 || st.Conns != 1 {
		t.Fatalf("transports %+v, want one call over the fast path", st)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Exists(ctx, []string{"k"}, false); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}

	// Turned off: RegisterClient learns the port, nothing uses it.
	c, err := DialFast(ctx, fs.addr, FastPath{Off: true})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterClient(ctx, ClientInfo{ID: "off", NUMANode: -1, Device: -1})
	if err != nil || reg.FastPort != portOf(t, fs.fastAddr) {
		t.Fatalf("RegisterClient = %+v, %v; want fast port %d", reg, err, portOf(t, fs.fastAddr))
	}
	if _, err := c.GetReplicas(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := Transports(c); st.Fast != 0 || st.Conns != 0 || st.GRPC != 1 {
		t.Fatalf("fast path off: transports %+v", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// On: RegisterClient's answer turns it on by itself.
	c, err = DialFast(ctx, fs.addr, FastPath{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: "on", NUMANode: -1, Device: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetReplicas(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := Transports(c); st.Fast != 1 || st.GRPC != 0 {
		t.Fatalf("after RegisterClient: transports %+v, want the get over the fast path", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = fs.srv.Shutdown(ctx)
}

// fakeFast is a fast path on a loopback port that hands each connection
// it accepts, in turn, to serve on its accept goroutine; every connection
// is closed when the test ends. It returns the port.
func fakeFast(t *testing.T, serve func(c net.Conn)) uint32 {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			serve(c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return portOf(t, lis.Addr().String())
}

// readFastFrame reads one frame from c: its header into h, its body
// discarded.
func readFastFrame(c net.Conn, h []byte) error {
	if _, err := io.ReadFull(c, h[:fastHeaderLen]); err != nil {
		return err
	}
	_, err := io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint32(h[:4])))
	return err
}

// answerHello reads the hello frame from c and answers it; false when c
// failed first.
func answerHello(c net.Conn) bool {
	var h [fastHeaderLen]byte
	if readFastFrame(c, h[:]) != nil {
		return false
	}
	putFastAnswer(h[:], codes.OK, 0, 0)
	_, err := c.Write(h[:])
	return err == nil
}

// stalledFast is a fast path that says hello and then never answers (a
// master stopped with SIGSTOP, as seen from the client).
func stalledFast(t *testing.T) uint32 {
	return fakeFast(t, func(c net.Conn) { answerHello(c) })
}

// TestFastStalledMaster: a call to a master that stops answering fails
// with DeadlineExceeded at its deadline (and with Canceled when its
// context is cancelled, without a deadline); a call in flight at Close
// fails with ErrClosed at once. Nothing leaks.
func TestFastStalledMaster(t *testing.T) {
	newLeakCheck(t)
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	fs := serveFast(t, NewServer(svc, nil), nil)
	r := dialFast(t, fs, FastPath{})
	if err := r.fast.advertise(context.Background(), stalledFast(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = r.GetReplicas(ctx, []string{"k"})
	if took := time.Since(t0); !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("GetReplicas at a stalled master: %v after %v, want DeadlineExceeded after 300ms", err, took)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, ccancel)
	if err := r.ReleaseLeases(cctx, []uint64{1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReleaseLeases cancelled: %v, want Canceled", err)
	}
	errc := make(chan error, 1)
	go func() { _, err := r.Exists(context.Background(), []string{"k"}, false); errc <- err }()
	time.Sleep(100 * time.Millisecond)
	t0 = time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) || time.Since(t0) > time.Second {
		t.Fatalf("call in flight at Close: %v after %v, want ErrClosed at once", err, time.Since(t0))
	}
	if st := r.Transports(); st.Conns != 0 || st.Fast != 3 || st.GRPC != 0 {
		t.Fatalf("transports %+v, want 3 fast calls and no connection left", st)
	}
	_ = fs.srv.Shutdown(context.Background())
}

// TestFastConcurrent: 16 goroutines make mixed calls over one client's
// pool (run it with -race); every call gives the embedded Client's answer.
func TestFastConcurrent(t *testing.T) {
	newLeakCheck(t)
	svc, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	fs := serveFast(t, NewServer(svc, nil), nil)
	r := dialFast(t, fs, FastPath{})
	ctx := context.Background()
	e := &env{t: t, svc: svc, c: r, ctx: ctx}
	w := e.register("w", "h", 0, 0)
	e.mount(desc("w/0", w, "h", segment.TierDRAM, 0, 256*MiB))
	const workers, rounds = 16, 50
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				key := fmt.Sprintf("g%d/%d", g, i)
				res, err := r.PutStart(ctx, []PutStartReq{{Key: key, Size: 4096, Placement: Placement{Client: w, NUMANode: -1, Device: -1}}})
				if err != nil || res[0].Err != nil {
					errc <- fmt.Errorf("PutStart %s: %v %v", key, err, res)
					return
				}
				if i%5 == 4 {
					if errs := r.PutRevoke(ctx, []PutRef{{Key: key, Token: res[0].Token}}); errs[0] != nil {
						errc <- fmt.Errorf("PutRevoke %s: %v", key, errs[0])
						return
					}
					continue
				}
				if errs := r.PutEnd(ctx, []PutRef{{Key: key, Token: res[0].Token}}); errs[0] != nil {
					errc <- fmt.Errorf("PutEnd %s: %v", key, errs[0])
					return
				}
				got, err := r.GetReplicas(ctx, []string{key, "missing"})
				if err != nil || got[0].Err != nil || got[0].Size != 4096 || !errors.Is(got[1].Err, ErrNotFound) {
					errc <- fmt.Errorf("GetReplicas %s: %v %+v", key, err, got)
					return
				}
				if err := r.ReleaseLeases(ctx, []uint64{got[0].LeaseID}); err != nil {
					errc <- fmt.Errorf("ReleaseLeases: %v", err)
					return
				}
				ex, err := r.Exists(ctx, []string{key}, false)
				if err != nil || !ex[0] {
					errc <- fmt.Errorf("Exists %s: %v %v", key, err, ex)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	st := r.Transports()
	if st.GRPC != 0 || st.Conns > fastMaxConns || st.Conns == 0 {
		t.Fatalf("transports %+v", st)
	}
	t.Logf("transports %+v", st)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := svc.Stats(ctx)
	if s.Objects != workers*rounds*4/5 {
		t.Fatalf("%d objects, want %d", s.Objects, workers*rounds*4/5)
	}
	_ = fs.srv.Shutdown(ctx)
}

// FuzzFastFrames feeds the master's fast path any bytes after a valid hello
// (and, half the time, in place of it): it must answer with well-formed
// frames only — each a header, a body of the stated length, error bodies
// the gRPC status of the stated code — and never panic or allocate what a
// header claims beyond the frame limit.
func FuzzFastFrames(f *testing.F) {
	frame := func(m fastMethod, body []byte) []byte {
		b := make([]byte, fastHeaderLen, fastHeaderLen+len(body))
		putFastRequest(b, m, len(body), 0)
		return append(b, body...)
	}
	get, _ := appendMessage(nil, &keysRequest{keys: []string{"k", "a/b"}, reader: "p"})
	put, _ := appendMessage(nil, &putStartRequest{reqs: []PutStartReq{{Key: "k", Size: 10, Placement: Placement{Client: "p", NUMANode: -1, Device: -1}}}})
	f.Add(frame(fastGetReplicas, get), false)
	f.Add(append(frame(fastPutStart, put), frame(fastExists, nil)...), false)
	f.Add(frame(fastPutEnd, []byte{0x0a, 0x03, 0x0a, 0x01, 'k'}), false)
	f.Add([]byte("\xff\xff\xff\xff\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), false)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), true)
	f.Add(frame(fastHello, []byte{1, 0, 'x'}), true)
	svc, err := New(Config{ReapInterval: -1, MaxKeyLen: 64, Clock: newManualClock()})
	if err != nil {
		f.Fatal(err)
	}
	defer svc.Close()
	if _, err := svc.RegisterClient(context.Background(), ClientInfo{ID: "p", Node: "h", NUMANode: -1, Device: -1}); err != nil {
		f.Fatal(err)
	}
	if err := svc.MountSegment(context.Background(), desc("p/0", "p", "h", segment.TierDRAM, 0, MiB)); err != nil {
		f.Fatal(err)
	}
	g := &grpcService{svc: svc}
	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		in := data
		if !raw {
			in = append(frame(fastHello, []byte{fastVersion, 0}), data...)
		}
		var out bytes.Buffer
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), &out}
		cs := &fastConnState{g: g, rw: rw, br: bufio.NewReader(rw), ctx: context.Background()}
		if cs.hello(nil) {
			for cs.call() {
			}
		}
		b := out.Bytes()
		for len(b) > 0 {
			if len(b) < fastHeaderLen {
				t.Fatalf("%d bytes of a header left", len(b))
			}
			n := int(binary.LittleEndian.Uint32(b[:4]))
			code := codes.Code(b[4])
			if n > fastMaxFrame || len(b) < fastHeaderLen+n || b[5] != 0 || b[6] != 0 || b[7] != 0 || code > codes.Unauthenticated {
				t.Fatalf("malformed answer header % x (%d bytes follow)", b[:fastHeaderLen], len(b)-fastHeaderLen)
			}
			if code != codes.OK {
				if st := status.Convert(answerStatus(code, b[fastHeaderLen:fastHeaderLen+n])); st.Code() != code {
					t.Fatalf("error answer of code %v holds status %v %q", code, st.Code(), st.Message())
				}
			}
			b = b[fastHeaderLen+n:]
		}
	})
}

// TestFastStoppedMasterProcess: a master process stopped with SIGSTOP makes
// a fast path call fail with DeadlineExceeded at its deadline; resumed, the
// master answers again over the fast path (on a new connection: the one
// of the failed call is closed). Nothing leaks.
func TestFastStoppedMasterProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master process")
	}
	newLeakCheck(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String() // free until the child listens on it
	_ = lis.Close()
	p := startMasterProc(t, addr)
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := DialFast(dctx, addr, FastPath{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: "r", NUMANode: -1, Device: -1}); err != nil {
		t.Fatal(err)
	}
	get := func(d time.Duration) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		t0 := time.Now()
		_, err := c.GetReplicas(cctx, []string{"k"})
		return time.Since(t0), err
	}
	if _, err := get(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is asynchronous: wait until the process is stopped.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "T" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("master process not stopped: %s", stat)
		}
	}
	took, err := get(500 * time.Millisecond)
	if cerr := p.cmd.Process.Signal(syscall.SIGCONT); cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || took < 450*time.Millisecond || took > 2*time.Second {
		t.Fatalf("get from a stopped master: %v after %v, want DeadlineExceeded after 500ms", err, took)
	}
	if _, err := get(5 * time.Second); err != nil {
		t.Fatalf("get after SIGCONT: %v", err)
	}
	if st, _ := Transports(c); st.Fast != 3 || st.GRPC != 0 || st.Conns != 1 {
		t.Fatalf("transports %+v, want 3 fast calls on one connection", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	p.kill()
}

// TestFastPathLargeCallsConcurrent: calls larger than a connection keeps
// its buffers for (fastBufKeep) take them from the process's pools
// (fastbuf.go) on both sides; concurrent large calls over several
// connections each get exactly their own answers — a buffer given back
// while still in use, or to two pools, shows up as another caller's sizes
// or as a malformed answer.
func TestFastPathLargeCallsConcurrent(t *testing.T) {
	e := newEnvWith(t, testConfig(), transports["fast"])
	keys := putLargeKeySets(t, e)
	checkLargeGets(t, e, keys)
	removeLargeKeySets(t, e, keys)
}

// TestFastPathLargeCallLost: a large call whose master dies after taking
// the request (the connection closed before any answer, as kill -9 leaves
// it) fails, and the pooled buffer it held is dropped with its connection,
// not pooled: the large calls after it, over new connections to a live
// master, each get exactly their own answers.
func TestFastPathLargeCallLost(t *testing.T) {
	var r *remote
	var fs fastServed
	e := newEnvWith(t, testConfig(), func(tb testing.TB, s *Service) Client {
		fs = serveFast(tb, NewServer(s, nil), nil)
		r = dialFast(tb, fs, FastPath{})
		tb.Cleanup(func() { _ = r.Close() })
		return r
	})
	keys := putLargeKeySets(t, e)
	if err := r.fast.advertise(e.ctx, dyingFast(t)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		_, err := r.GetReplicas(ctx, keys[i])
		cancel()
		if err == nil {
			t.Fatalf("call %d to a master that died with the request: no error", i)
		}
	}
	if err := r.fast.advertise(e.ctx, portOf(t, fs.fastAddr)); err != nil {
		t.Fatal(err)
	}
	checkLargeGets(t, e, keys)
	removeLargeKeySets(t, e, keys)
}

// dyingFast is a fast path that says hello, reads the next request whole
// and closes the connection without answering it.
func dyingFast(t *testing.T) uint32 {
	return fakeFast(t, func(c net.Conn) {
		if answerHello(c) {
			var h [fastHeaderLen]byte
			_ = readFastFrame(c, h[:])
		}
		c.Close()
	})
}

const largeCallers, largeKeys = 6, 4000

// putLargeKeySets stores largeCallers sets of largeKeys objects through
// e's client, set g's of size (g+1)*4096, with long keys: requests of
// ~360 KB and answers of ~150 KB, past what a connection keeps.
func putLargeKeySets(t *testing.T, e *env) [][]string {
	t.Helper()
	p := e.register("p1", "host-a", 0, 0)
	e.mount(desc("s0", p, "host-a", segment.TierDRAM, 0, 8<<30))
	pad := strings.Repeat("x", 80)
	keys := make([][]string, largeCallers)
	for g := range largeCallers {
		for i := range largeKeys {
			keys[g] = append(keys[g], fmt.Sprintf("%d/%s/%d", g, pad, i))
		}
		reqs := make([]PutStartReq, largeKeys)
		for i, k := range keys[g] {
			reqs[i] = PutStartReq{Key: k, Size: uint64(g+1) * 4096, Placement: Placement{Client: e.defaultWriter()}}
		}
		res, err := e.c.PutStart(e.ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		refs := make([]PutRef, largeKeys)
		for i := range res {
			if res[i].Err != nil {
				t.Fatalf("PutStart %s: %v", keys[g][i], res[i].Err)
			}
			refs[i] = res[i].Ref(keys[g][i])
		}
		for i, err := range e.c.PutEnd(e.ctx, refs) {
			if err != nil {
				t.Fatalf("PutEnd %s: %v", keys[g][i], err)
			}
		}
	}
	return keys
}

// checkLargeGets gets every set of putLargeKeySets at once, one caller
// per set, eight times each, and checks each answer is its own set's.
func checkLargeGets(t *testing.T, e *env, keys [][]string) {
	t.Helper()
	// A corrupted frame may also leave a side waiting for bytes that never
	// come: the deadline turns that into a failure.
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for g := range keys {
		wg.Go(func() {
			for r := range 8 {
				res, err := e.c.GetReplicas(ctx, keys[g])
				if err != nil {
					errs <- err
					return
				}
				leases := make([]uint64, 0, len(res))
				for i := range res {
					if res[i].Err != nil || res[i].Size != uint64(g+1)*4096 || len(res[i].Replicas) != 1 {
						errs <- fmt.Errorf("caller %d round %d: key %s: %v, size %d, %d replicas", g, r, keys[g][i], res[i].Err, res[i].Size, len(res[i].Replicas))
						return
					}
					leases = append(leases, res[i].LeaseID)
				}
				if err := e.c.ReleaseLeases(ctx, leases); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// removeLargeKeySets removes the sets and checks nothing is left.
func removeLargeKeySets(t *testing.T, e *env, keys [][]string) {
	t.Helper()
	for g := range keys {
		for i, err := range e.c.Remove(e.ctx, keys[g], false) {
			if err != nil {
				t.Fatalf("remove %s: %v", keys[g][i], err)
			}
		}
	}
	if st := e.stats(); st.Objects != 0 || st.PendingPuts != 0 {
		t.Fatalf("after removing everything: %+v", st)
	}
}

func TestBigBufClasses(t *testing.T) {
	for _, tc := range []struct{ n, class, size int }{
		{1, 0, 144 << 10}, {128 << 10, 0, 144 << 10}, {128<<10 + 1, 0, 144 << 10}, {144 << 10, 0, 144 << 10},
		{144<<10 + 1, 1, 160 << 10}, {256 << 10, 7, 256 << 10}, {256<<10 + 1, 8, 288 << 10},
		{8 << 20, 47, 8 << 20}, {8<<20 + 1, -1, 0},
	} {
		if c, size := bigBufClass(tc.n); c != tc.class || size != tc.size {
			t.Errorf("bigBufClass(%d) = %d, %d; want %d, %d", tc.n, c, size, tc.class, tc.size)
		}
	}
	// Every size past the first class gets a class that holds it, at most
	// an eighth larger.
	for n := 144<<10 + 1; n <= 8<<20; n += 997 {
		if c, size := bigBufClass(n); size < n || size-n >= n/8 {
			t.Fatalf("bigBufClass(%d): class %d of %d bytes", n, c, size)
		}
	}
	b := getBigBuf(200 << 10)
	if len(b) != 0 || cap(b) != 208<<10 {
		t.Fatalf("getBigBuf(200 KiB): len %d cap %d, want 0 and 208 KiB", len(b), cap(b))
	}
	// growBuf keeps the bytes; small growth is not pooled.
	s := growBuf([]byte("head"), 10)
	if string(s) != "head" || cap(s) < 14 || cap(s) > fastBufKeep {
		t.Fatalf("growBuf small: %q cap %d", s, cap(s))
	}
	g := growBuf(append(b, "body"...), 300<<10)
	if string(g) != "body" || cap(g) != 320<<10 {
		t.Fatalf("growBuf large: %q cap %d, want the bytes and a 320 KiB class", g[:min(len(g), 8)], cap(g))
	}
	// Only a class's exact capacity is pooled: an odd one is dropped.
	putBigBuf(make([]byte, 0, 300<<10))
	putBigBuf(g)
}
