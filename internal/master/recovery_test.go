package master

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"
)

// The restart tests run `kvfabric master`'s server (NewServer over a real
// TCP listener) in a child process of the test binary on a fixed port, kill
// it with SIGKILL, start a new one on the same port, and measure, in this
// process, the time from the new master's listen to the first call of a
// Dial client that succeeds. The client calls all the time, as a serving
// consumer or a heartbeating provider does.

const (
	// envRecoveryListen makes TestRecoveryMasterProcess serve on its value.
	envRecoveryListen = "KVFABRIC_RECOVERY_LISTEN"
	// envRecoveryDown ("1s,5s,30s") makes TestRestartRecoveryMeasure run,
	// restarting the master after each outage length in turn.
	envRecoveryDown = "KVFABRIC_RECOVERY_DOWN"
	// envRecoveryRuns is the number of runs per outage length (default 3).
	envRecoveryRuns = "KVFABRIC_RECOVERY_RUNS"
	// envRecoveryLog, when set, is a file the measurement appends its raw
	// log to.
	envRecoveryLog = "KVFABRIC_RECOVERY_LOG"
)

// recoveryBound is the correctness bound TestRestartRecovery checks: a
// client calls the master successfully within this of its listening again.
// (The reconnect settings aim at about 0.6 s; the slack is for a loaded
// test machine.)
const recoveryBound = 2 * time.Second

// TestRecoveryMasterProcess is the master process of the restart tests, run
// by them as a child of the test binary; on its own it skips.
func TestRecoveryMasterProcess(t *testing.T) {
	addr := os.Getenv(envRecoveryListen)
	if addr == "" {
		t.Skip("the master process of TestRestartRecovery")
	}
	svc, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// The fast path too, on an ephemeral port advertised to clients (the
	// fast-proc rungs of BenchmarkLatency, TestFastStoppedMasterProcess).
	flis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(svc, nil)
	if err := srv.ListenFast(flis); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeFast(flis, nil) }()
	fmt.Printf("listening %d\n", time.Now().UnixNano())
	// Serves until killed.
	if err := srv.Serve(lis, nil); err != nil {
		t.Fatal(err)
	}
}

// masterProc is one master child process.
type masterProc struct {
	cmd    *exec.Cmd
	listen time.Time // when its listener was open (its clock: the same host's)
	stderr *strings.Builder
}

func startMasterProc(t testing.TB, addr string) *masterProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecoveryMasterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRecoveryListen+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &masterProc{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "listening ") {
				lines <- l
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("master process exited before listening: %s", p.stderr)
		}
		ns, err := strconv.ParseInt(strings.TrimPrefix(l, "listening "), 10, 64)
		if err != nil {
			t.Fatalf("master process said %q", l)
		}
		p.listen = time.Unix(0, ns)
	case <-time.After(30 * time.Second):
		t.Fatalf("master process not listening after 30s: %s", p.stderr)
	}
	return p
}

// kill ends the process with SIGKILL (a crash: no graceful shutdown) and
// reaps it. It is idempotent.
func (p *masterProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// prober calls the master in a loop, as a busy client does, and records
// the first success after mark and the failures since.
type prober struct {
	c    Client
	stop chan struct{}
	done chan struct{}

	mu struct {
		sync.Mutex
		since   time.Time // mark
		firstOK time.Time // first success completed after since; zero: none yet
		fails   map[string]int
		calls   int
	}
}

func startProber(c Client) *prober {
	p := &prober{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	p.mu.fails = map[string]int{}
	go p.loop()
	return p
}

func (p *prober) loop() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.c.Exists(ctx, []string{"probe"}, false)
		cancel()
		now := time.Now()
		p.mu.Lock()
		p.mu.calls++
		switch {
		case err != nil:
			p.mu.fails[errLabel(err)]++
		case p.mu.firstOK.IsZero() && now.After(p.mu.since):
			p.mu.firstOK = now
		}
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

func errLabel(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded"
	}
	return status.Code(err).String()
}

// mark forgets what was recorded: the next success is the first after now.
func (p *prober) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.since, p.mu.firstOK, p.mu.fails, p.mu.calls = time.Now(), time.Time{}, map[string]int{}, 0
}

// waitOK returns the first success after the mark, waiting up to limit.
func (p *prober) waitOK(limit time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		ok := p.mu.firstOK
		p.mu.Unlock()
		if !ok.IsZero() {
			return ok, true
		}
		time.Sleep(time.Millisecond)
	}
	return time.Time{}, false
}

// failures renders the failures since the mark ("Unavailable:812").
func (p *prober) failures() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []string
	for k, n := range p.mu.fails {
		s = append(s, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(s)
	return fmt.Sprintf("calls=%d failed={%s}", p.mu.calls, strings.Join(s, ","))
}

func (p *prober) close() {
	close(p.stop)
	<-p.done
}

// freeAddr returns a loopback address no one listens on: the master's fixed
// port for one test.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// restartRig is a master process on a fixed port and a client calling it.
type restartRig struct {
	t    *testing.T
	addr string
	m    *masterProc
	c    Client
	p    *prober
}

func newRestartRig(t *testing.T) *restartRig {
	r := &restartRig{t: t, addr: freeAddr(t)}
	r.m = startMasterProc(t, r.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, r.addr)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	r.p = startProber(c)
	t.Cleanup(func() {
		r.p.close()
		_ = r.c.Close()
	})
	r.p.mark()
	if _, ok := r.p.waitOK(10 * time.Second); !ok {
		t.Fatalf("no call succeeded against the first master: %s", r.p.failures())
	}
	return r
}

// restart kills the master, runs outage (the time without a master), starts
// a new one on the same port and returns the time from its listen to the
// client's first success. ok is false when none came within a minute.
func (r *restartRig) restart(outage func()) (rec time.Duration, killed, listen time.Time, ok bool) {
	r.m.kill()
	killed = time.Now()
	r.p.mark()
	outage()
	r.m = startMasterProc(r.t, r.addr)
	first, ok := r.p.waitOK(time.Minute)
	return first.Sub(r.m.listen), killed, r.m.listen, ok
}

// TestRestartRecovery checks the recovery bound after an outage long enough
// that gRPC's default reconnect backoff (1 s ×1.6 per attempt, up to 120 s)
// would have grown past it: while the master is away a stand-in on its port
// closes every connection and counts the client's connection attempts; the
// new master starts right after the fourth. With the default backoff the
// next attempt is then at least 3.3 s away; with Dial's it is at most 0.6 s.
func TestRestartRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts master processes")
	}
	r := newRestartRig(t)
	const attempts = 4
	var seen int
	rec, _, _, ok := r.restart(func() { seen = standIn(t, r.addr, attempts, 30*time.Second) })
	if !ok {
		t.Fatalf("no call succeeded within a minute of the master's restart: %s", r.p.failures())
	}
	t.Logf("recovery %v after the master listened again (%d connection attempts during the outage; %s)", rec, seen, r.p.failures())
	if seen < attempts {
		t.Fatalf("only %d connection attempts in 30s of outage", seen)
	}
	if rec > recoveryBound {
		t.Fatalf("a client's first successful call came %v after the master was serving again (bound %v): it waited on reconnect backoff",
			rec, recoveryBound)
	}
}

// standIn listens on addr and closes every connection, until n have been
// made or limit passed; it returns how many were made.
func standIn(t *testing.T, addr string, n int, limit time.Duration) int {
	t.Helper()
	var lis net.Listener
	var err error
	for range 100 { // the killed master's port may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	deadline := time.Now().Add(limit)
	seen := 0
	for seen < n {
		_ = lis.(*net.TCPListener).SetDeadline(deadline)
		c, err := lis.Accept()
		if err != nil {
			break
		}
		c.Close()
		seen++
	}
	return seen
}

// TestRestartRecoveryMeasure measures recovery after plain outages (the
// port closed): KVFABRIC_RECOVERY_DOWN=1s,5s,30s KVFABRIC_RECOVERY_RUNS=5
// KVFABRIC_RECOVERY_LOG=/tmp/recovery.log go test ./internal/master
// -run TestRestartRecoveryMeasure -v. docs/perf/recovery.md has the results.
func TestRestartRecoveryMeasure(t *testing.T) {
	spec := os.Getenv(envRecoveryDown)
	if spec == "" {
		t.Skip("set " + envRecoveryDown + " (e.g. 1s,5s,30s) to measure")
	}
	runs := 3
	if s := os.Getenv(envRecoveryRuns); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil || runs < 1 {
			t.Fatalf("%s=%q", envRecoveryRuns, s)
		}
	}
	var logw io.Writer = io.Discard
	if path := os.Getenv(envRecoveryLog); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		logw = f
	}
	logf := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		fmt.Fprintln(logw, line)
	}
	host, _ := os.Hostname()
	logf("# %s host=%s cpus=%d", time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU())
	r := newRestartRig(t)
	for _, f := range strings.Split(spec, ",") {
		down, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%s: %v", envRecoveryDown, err)
		}
		var recs []time.Duration
		for i := range runs {
			rec, killed, listen, ok := r.restart(func() { time.Sleep(down) })
			if !ok {
				logf("down=%v run=%d no success within 1m of listen: %s", down, i+1, r.p.failures())
				t.Fail()
				continue
			}
			recs = append(recs, rec)
			logf("down=%v run=%d killed=%s listen=+%.3fs recovery=%.3fs %s", down, i+1,
				killed.Format("15:04:05.000"), listen.Sub(killed).Seconds(), rec.Seconds(), r.p.failures())
		}
		if len(recs) > 0 {
			lo, hi := recs[0], recs[0]
			for _, d := range recs {
				lo, hi = min(lo, d), max(hi, d)
			}
			logf("down=%v runs=%d recovery min=%.3fs max=%.3fs", down, len(recs), lo.Seconds(), hi.Seconds())
		}
	}
}

// TestConnectSettings checks the invariants of the reconnect and keepalive
// settings that the timings above depend on.
func TestConnectSettings(t *testing.T) {
	if worst := time.Duration(float64(reconnectMaxDelay) * (1 + reconnectJitter)); worst > time.Second {
		t.Errorf("worst reconnect gap %v: a client would stay down over 1 s after the master is back", worst)
	}
	// A client pinging more often than the server's floor is sent GOAWAY
	// ("too_many_pings") and its calls fail.
	if keepaliveMinTime > keepaliveTime {
		t.Errorf("server keepalive floor %v above the clients' ping interval %v", keepaliveMinTime, keepaliveTime)
	}
	if keepaliveTime < 10*time.Second {
		t.Errorf("client keepalive %v: gRPC-Go raises it to 10 s", keepaliveTime)
	}
}
