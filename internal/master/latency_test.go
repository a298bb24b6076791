package master

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/segment"
)

// BenchmarkLatency is one small call at a time: the round trip a single get
// pays (sequential, no batching). These are the first rungs of the latency
// ladder (docs/perf/latency.md, "dev VM ladder"). The master is
//
//	embedded   in this goroutine's process, no transport
//	grpc       a Server in this process on TCP loopback
//	grpc-proc  a Server in a child process (this test binary) on TCP
//	           loopback, as `kvfabric master` is to a client process
//	fast-proc  the same child process, the calls over its fast path
//	           (fastpath.go; a locked caller waits in poll(2) there)
//
// and the calls are
//
//	exists       a trivial unary call (one absent key, no lease): gRPC's floor
//	getreplicas  GetReplicas of one visible 4 KiB object, as a get asks it
//	             (named reader, read lease; the leases are released after
//	             the timed loop)
//
// The wire-proc rungs are GetReplicas without gRPC: the same request and
// answer encodings (wire.go), each framed by a 4-byte length, over a plain
// TCP connection to a child process whose one goroutine per connection
// reads a request, calls its Service and writes the answer — what a lean
// transport for the hot call could cost.
//
// And, as the floor under them all, tcp and tcp-proc: a 64-byte request
// answered with 64 bytes over a plain TCP loopback connection by a
// goroutine in this process or a child process (read, write, no gRPC).
//
// -locked makes the calls from a goroutine locked to its OS thread, as a
// call entering Go from a C thread (the C ABI, Python) is: when it waits
// for the answer in the netpoller, its thread gives its P away and sleeps,
// and is woken by the thread that finds the answer. -locked-poll waits in
// a blocking poll(2) on the locked thread instead (the kernel wakes that
// thread itself). p50-us and p99-us are over the individual calls.
func BenchmarkLatency(b *testing.B) {
	for _, kind := range []string{"tcp", "tcp-proc"} {
		for _, thread := range []string{"", "-locked", "-locked-poll"} {
			b.Run(kind+"/pingpong"+thread, func(b *testing.B) {
				conn := echoConn(b, kind == "tcp-proc")
				read := func(msg []byte) error { _, err := io.ReadFull(conn, msg); return err }
				if thread == "-locked-poll" {
					read = pollRead(b, conn)
				}
				msg := make([]byte, 64)
				onThread(thread != "", func() {
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						if _, err := conn.Write(msg); err != nil {
							b.Fatal(err)
						}
						if err := read(msg); err != nil {
							b.Fatal(err)
						}
						lat.add(t0)
					}
					lat.report(b)
				})
			})
		}
	}
	for _, thread := range []string{"", "-locked", "-locked-poll"} {
		b.Run("wire-proc/getreplicas"+thread, func(b *testing.B) {
			conn := wireConn(b)
			read := func(msg []byte) error { _, err := io.ReadFull(conn, msg); return err }
			if thread == "-locked-poll" {
				read = pollRead(b, conn)
			}
			req := &keysRequest{keys: []string{"k"}, reader: latencyClient}
			var descs descCache
			var frame, hdr [4]byte
			var out, in []byte
			onThread(thread != "", func() {
				var lat latencies
				for b.Loop() {
					t0 := time.Now()
					var err error
					if out, err = req.appendWire(append(out[:0], frame[:]...)); err != nil {
						b.Fatal(err)
					}
					binary.LittleEndian.PutUint32(out, uint32(len(out)-4))
					if _, err := conn.Write(out); err != nil {
						b.Fatal(err)
					}
					if err := read(hdr[:]); err != nil {
						b.Fatal(err)
					}
					in = slices.Grow(in[:0], int(binary.LittleEndian.Uint32(hdr[:])))[:binary.LittleEndian.Uint32(hdr[:])]
					if err := read(in); err != nil {
						b.Fatal(err)
					}
					resp := resultsReply{get: true, descs: &descs, gets: make([]GetResult, 0, 1), sent: t0}
					if err := resp.unmarshalWire(in); err != nil || len(resp.gets) != 1 || resp.gets[0].Err != nil {
						b.Fatal(err, resp.gets)
					}
					lat.add(t0)
				}
				lat.report(b)
			})
		})
	}
	for _, kind := range []string{"embedded", "grpc", "grpc-proc", "fast-proc"} {
		for _, thread := range []string{"", "-locked"} {
			b.Run(kind+"/exists"+thread, func(b *testing.B) {
				c := latencyMaster(b, kind)
				ctx := context.Background()
				keys := []string{"absent"}
				onThread(thread != "", func() {
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						if _, err := c.Exists(ctx, keys, false); err != nil {
							b.Fatal(err)
						}
						lat.add(t0)
					}
					lat.report(b)
				})
			})
			b.Run(kind+"/getreplicas"+thread, func(b *testing.B) {
				c := latencyMaster(b, kind)
				ctx := WithReader(context.Background(), latencyClient)
				keys := []string{"k"}
				var leases []uint64
				onThread(thread != "", func() {
					var lat latencies
					for b.Loop() {
						t0 := time.Now()
						res, err := c.GetReplicas(ctx, keys)
						if err != nil || res[0].Err != nil {
							b.Fatal(err, res)
						}
						lat.add(t0)
						leases = append(leases, res[0].LeaseID)
					}
					lat.report(b)
				})
				if err := c.ReleaseLeases(ctx, leases); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkPutLatency: the latency of the master calls of one small batch
// put — PutStart then PutEnd of 16 new keys — and of their Remove, on each
// kind of master (see BenchmarkLatency), for 4 KiB and 16 MiB objects:
// the calls a batch of large objects makes at its ends, which nothing
// overlaps. Percentiles are of the PutStart+PutEnd pair.
func BenchmarkPutLatency(b *testing.B) {
	for _, kind := range []string{"embedded", "grpc", "fast-proc"} {
		for _, size := range []uint64{4 << 10, 16 << 20} {
			b.Run(fmt.Sprintf("%s/size=%s/keys=16", kind, sizeName(size)), func(b *testing.B) {
				c := latencyMaster(b, kind)
				round := 0
				var lat latencies
				for b.Loop() {
					start, end := latencyPut(b, c, round, size, nil)
					round++
					lat = append(lat, start+end)
				}
				lat.report(b)
			})
		}
	}
}

// BenchmarkPutLatencyIdle: BenchmarkPutLatency's PutStart and PutEnd of
// 16 keys of 16 MiB through a master process's fast path, each call made
// after the connection stood idle for idle (the caller sleeping, or
// busy-waiting so that only the master's side has gone idle), as a batch
// of large objects makes them: PutStart after whatever the caller did
// before, PutEnd after its copies. start-p50-us and end-p50-us are the
// calls' medians.
func BenchmarkPutLatencyIdle(b *testing.B) {
	for _, idle := range []time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond} {
		for _, busy := range []bool{false, true} {
			if idle == 0 && busy {
				continue
			}
			b.Run(fmt.Sprintf("idle=%v/busy=%v", idle, busy), func(b *testing.B) {
				wait := func() {
					if !busy {
						time.Sleep(idle)
						return
					}
					for t0 := time.Now(); time.Since(t0) < idle; {
					}
				}
				c := latencyMaster(b, "fast-proc")
				round := 0
				var starts, ends latencies
				for b.Loop() {
					start, end := latencyPut(b, c, round, 16<<20, wait)
					round++
					starts, ends = append(starts, start), append(ends, end)
				}
				b.ReportMetric(starts.p50us(), "start-p50-us")
				b.ReportMetric(ends.p50us(), "end-p50-us")
			})
		}
	}
}

// latencyPut puts 16 new keys of size bytes on c — PutStart, then PutEnd —
// and removes them, running wait (if not nil) before each of the two
// calls, and returns how long each call took. round makes the keys new.
func latencyPut(b *testing.B, c Client, round int, size uint64, wait func()) (start, end time.Duration) {
	b.Helper()
	ctx := context.Background()
	place := NoPlacement
	place.Client = latencyClient
	reqs := make([]PutStartReq, 16)
	refs := make([]PutRef, 16)
	keys := make([]string, 16)
	for i := range reqs {
		keys[i] = fmt.Sprintf("p%d-%d", round, i)
		reqs[i] = PutStartReq{Key: keys[i], Size: size, Placement: place}
	}
	if wait != nil {
		wait()
	}
	t0 := time.Now()
	res, err := c.PutStart(ctx, reqs)
	if err != nil {
		b.Fatal(err)
	}
	start = time.Since(t0)
	for i, r := range res {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		refs[i] = PutRef{Key: keys[i], Token: r.Token}
	}
	if wait != nil {
		wait()
	}
	t1 := time.Now()
	for _, err := range c.PutEnd(ctx, refs) {
		if err != nil {
			b.Fatal(err)
		}
	}
	end = time.Since(t1)
	for _, err := range c.Remove(ctx, keys, false) {
		if err != nil {
			b.Fatal(err)
		}
	}
	return start, end
}

func sizeName(n uint64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// latencyClient is the client latencyMaster registers.
const latencyClient = "bench"

// latencyMaster returns a Client of a master of kind (see BenchmarkLatency)
// on which latencyClient is registered with one DRAM segment and "k" is a
// visible 4 KiB object.
func latencyMaster(b *testing.B, kind string) Client {
	b.Helper()
	var c Client
	switch kind {
	case "embedded", "grpc":
		svc, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = svc.Close() })
		c = NewEmbedded(svc)
		if kind == "grpc" {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := NewServer(svc, nil)
			go srv.Serve(lis, nil)
			b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			c = dialLatency(b, lis.Addr().String(), false)
		}
	case "grpc-proc", "fast-proc":
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := lis.Addr().String() // free until the child listens on it
		_ = lis.Close()
		startMasterProc(b, addr)
		c = dialLatency(b, addr, kind == "fast-proc")
	default:
		b.Fatalf("master kind %q", kind)
	}
	setupLatency(b, c)
	return c
}

// setupLatency registers latencyClient on c's master with one DRAM
// segment and puts "k", a visible 4 KiB object.
func setupLatency(b testing.TB, c Client) {
	b.Helper()
	ctx := context.Background()
	if _, err := c.RegisterClient(ctx, ClientInfo{ID: latencyClient, Node: "h", TTL: time.Hour, NUMANode: -1, Device: -1}); err != nil {
		b.Fatal(err)
	}
	if err := c.MountSegment(ctx, desc("seg0", latencyClient, "h", segment.TierDRAM, 0, 1<<40)); err != nil {
		b.Fatal(err)
	}
	place := NoPlacement
	place.Client = latencyClient
	res, err := c.PutStart(ctx, []PutStartReq{{Key: "k", Size: 4096, Placement: place}})
	if err != nil || res[0].Err != nil {
		b.Fatal(err, res)
	}
	if err := c.PutEnd(ctx, []PutRef{{Key: "k", Token: res[0].Token}})[0]; err != nil {
		b.Fatal(err)
	}
}

// dialLatency dials the master at addr; with fast, the hot calls go over
// its fast path from the first RegisterClient (setupLatency) on.
func dialLatency(b *testing.B, addr string, fast bool) Client {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := DialFast(ctx, addr, FastPath{Off: !fast})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// envEchoListen makes TestLatencyEchoProcess serve on its value.
const envEchoListen = "KVFABRIC_LATENCY_ECHO"

// TestLatencyEchoProcess is the echo server of BenchmarkLatency's tcp-proc
// rung, run by it as a child of the test binary; on its own it skips. It
// answers every 64 bytes with them until the connection closes.
func TestLatencyEchoProcess(t *testing.T) {
	addr := os.Getenv(envEchoListen)
	if addr == "" {
		t.Skip("the echo process of BenchmarkLatency")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("listening")
	conn, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = lis.Close()
	echo(conn)
}

// envWireListen makes TestLatencyWireProcess serve on its value.
const envWireListen = "KVFABRIC_LATENCY_WIRE"

// TestLatencyWireProcess is the master of BenchmarkLatency's wire-proc
// rungs, run by it as a child of the test binary; on its own it skips. It
// answers length-framed GetReplicas requests on one connection until it
// closes.
func TestLatencyWireProcess(t *testing.T) {
	addr := os.Getenv(envWireListen)
	if addr == "" {
		t.Skip("the wire master process of BenchmarkLatency")
	}
	svc, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	setupLatency(t, NewEmbedded(svc))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("listening")
	conn, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = lis.Close()
	defer conn.Close()
	var hdr [4]byte
	var in, out []byte
	for {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		in = slices.Grow(in[:0], int(n))[:n]
		if _, err := io.ReadFull(conn, in); err != nil {
			return
		}
		var req keysRequest
		if err := req.unmarshalWire(in); err != nil {
			t.Fatal(err)
		}
		res, err := svc.GetReplicas(WithReader(context.Background(), req.reader), req.keys)
		if err != nil {
			t.Fatal(err)
		}
		resp := getResponse{res: res}
		if out, err = resp.appendWire(append(out[:0], hdr[:]...)); err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

// wireConn returns a connection to TestLatencyWireProcess in a child
// process.
func wireConn(b *testing.B) net.Conn {
	b.Helper()
	return childConn(b, "TestLatencyWireProcess", envWireListen)
}

// echo answers every 64 bytes read from conn with them, until it closes.
func echo(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 64)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return
		}
		if _, err := conn.Write(buf); err != nil {
			return
		}
	}
}

// echoConn returns a connection to an echo server on TCP loopback: a
// goroutine of this process, or a child process (proc).
func echoConn(b *testing.B, proc bool) net.Conn {
	b.Helper()
	if proc {
		return childConn(b, "TestLatencyEchoProcess", envEchoListen)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		conn, err := lis.Accept()
		_ = lis.Close()
		if err == nil {
			echo(conn)
		}
	}()
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// childConn runs test (a one-connection server) in a child process of the
// test binary, listening on the address env names, and returns a
// connection to it; the child ends when the connection closes.
func childConn(b *testing.B, test, env string) net.Conn {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // free until the child listens on it
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		_ = cmd.Process.Kill()
		b.Fatalf("%s process: %q %v", test, line, err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// pollRead returns a read of conn that waits for data in a blocking
// poll(2) on the calling thread instead of the netpoller.
func pollRead(b *testing.B, conn net.Conn) func([]byte) error {
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	return func(msg []byte) error {
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			for got := 0; got < len(msg); {
				if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1); err != nil && err != unix.EINTR {
					rerr = err
					return true
				}
				n, err := unix.Read(int(fd), msg[got:])
				if n > 0 {
					got += n
				}
				if err != nil && err != unix.EAGAIN && err != unix.EINTR {
					rerr = err
					return true
				}
				if n == 0 && err == nil {
					rerr = io.ErrUnexpectedEOF
					return true
				}
			}
			return true
		})
		return errors.Join(err, rerr)
	}
}

// onThread runs f, locked to this goroutine's OS thread when locked.
func onThread(locked bool, f func()) {
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	f()
}

// latencies are the durations of a benchmark's individual calls.
type latencies []time.Duration

// add records the time since t0.
func (l *latencies) add(t0 time.Time) { *l = append(*l, time.Since(t0)) }

// p50us is the median in µs (l sorted in place).
func (l latencies) p50us() float64 {
	slices.Sort(l)
	return float64(l[len(l)/2].Nanoseconds()) / 1e3
}

// report adds the median and the 99th percentile as p50-us and p99-us.
func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(l[len(l)/2]), "p50-us")
	b.ReportMetric(us(l[(len(l)-1)*99/100]), "p99-us")
}
