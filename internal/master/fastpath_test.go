package master

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
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
	served := make(chan error, 2)
	glis := lis
	if tc != nil {
		glis = lis // gRPC TLS comes from the server's own options
	}
	go func() { served <- srv.Serve(glis, nil) }()
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
	_, port, _ := net.SplitHostPort(fs.fastAddr)
	var p uint32
	for _, ch := range port {
		p = p*10 + uint32(ch-'0')
	}
	if err := r.fast.advertise(ctx, p); err != nil {
		t.Fatal(err)
	}
	return r
}

// newFastTestClient is the "fast" transport of the behaviour tests: the
// remote Client with every hot call over the fast path (the rest over
// gRPC), both on loopback TCP. At the end of the test every hot call must
// have gone over the fast path.
func newFastTestClient(t testing.TB, s *Service) Client {
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

func newLeakCheck() leakCheck {
	return leakCheck{goroutines: runtime.NumGoroutine(), fds: openFDs()}
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
