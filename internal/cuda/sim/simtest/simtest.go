// Package simtest holds test helpers for code that runs on a cuda.Driver,
// above all the simulator: a leak assertion and a helper that re-executes
// the current test binary as a child process for multi-process tests.
package simtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
)

// AssertNoLeaks fails tb, listing the live objects per kind, when d counts
// any object created through it and not yet destroyed. A driver that does
// not implement cuda.ObjectCounter is not checked (and tb says so): leak
// checks are skipped, never faked.
func AssertNoLeaks(tb testing.TB, d cuda.Driver) {
	tb.Helper()
	oc, ok := d.(cuda.ObjectCounter)
	if !ok {
		tb.Logf("simtest: %s driver counts no objects; leak check skipped", d.Name())
		return
	}
	if live := oc.LiveObjects(); live.Total() != 0 {
		tb.Errorf("simtest: %d live objects leaked: %s", live.Total(), FormatObjects(live))
	}
}

// FormatObjects renders counts as "kind=n" pairs sorted by kind.
func FormatObjects(o cuda.Objects) string {
	var parts []string
	for k, n := range o {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// RoleEnv is the environment variable that tells a re-executed test binary
// which child role to play.
const RoleEnv = "KVFABRIC_SIMTEST_ROLE"

// Role returns the child role of this process, or "" in the parent.
func Role() string { return os.Getenv(RoleEnv) }

// FirstExtraFD is the fd number of the first of Options.Files in the child.
const FirstExtraFD = 3

// msgPrefix marks protocol lines on the child's stdout, so that the test
// framework's own output there is ignored.
const msgPrefix = "kvfabric-simtest-msg: "

// Options configure Spawn.
type Options struct {
	// Config is handed to the child through sim.EnvVar when set.
	Config *sim.Config
	// Files become the child's fds FirstExtraFD, FirstExtraFD+1, …
	Files []*os.File
	// Env adds "KEY=value" entries to the child's environment.
	Env []string
	// Timeout bounds the child's run (default 60s); the child is killed
	// after it.
	Timeout time.Duration
}

// Child is a running child process started by Spawn.
type Child struct {
	tb     testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan string
	out    bytes.Buffer // everything the child printed (guarded by outMu)
	outMu  sync.Mutex
	done   chan struct{}
	err    error
	timer  *time.Timer
	reader sync.WaitGroup
}

// Spawn re-executes the current test binary running only the test named
// test (its full name, e.g. t.Name()) with RoleEnv=role. Only top-level
// tests are matched exactly; a subtest name is matched with its parent.
// The child reads parent messages with Recv and sends with Send; the
// parent uses Child.Send/Child.Recv. Cleanup kills a child still running.
func Spawn(tb testing.TB, test, role string, opt Options) *Child {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatalf("simtest: spawn %s: %v", role, err)
	}
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(exe, "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), RoleEnv+"="+role)
	if opt.Config != nil {
		cmd.Env = append(cmd.Env, sim.EnvVar+"="+opt.Config.Env())
	}
	cmd.Env = append(cmd.Env, opt.Env...)
	cmd.ExtraFiles = opt.Files
	c := &Child{tb: tb, cmd: cmd, msgs: make(chan string, 64), done: make(chan struct{})}
	c.stdin, err = cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("simtest: spawn %s: %v", role, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("simtest: spawn %s: %v", role, err)
	}
	cmd.Stderr = writerFunc(c.appendOut)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("simtest: spawn %s: %v", role, err)
	}
	c.reader.Add(1)
	go func() {
		defer c.reader.Done()
		defer close(c.msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m, ok := strings.CutPrefix(line, msgPrefix); ok {
				c.msgs <- m
				continue
			}
			c.appendOut([]byte(line + "\n"))
		}
	}()
	timeout := opt.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	c.timer = time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
	go func() {
		c.reader.Wait() // stdout must be drained before Wait
		c.err = cmd.Wait()
		c.timer.Stop()
		close(c.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func (c *Child) appendOut(p []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.out.Write(p)
}

// Pid is the child's process id (to signal it: SIGSTOP, SIGKILL).
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Output is what the child printed so far (stdout without protocol lines,
// and stderr).
func (c *Child) Output() string {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.out.String()
}

// Send writes one message line (no newlines) to the child's stdin.
func (c *Child) Send(msg string) {
	c.tb.Helper()
	if _, err := io.WriteString(c.stdin, msg+"\n"); err != nil {
		c.tb.Fatalf("simtest: send to child: %v\n%s", err, c.Output())
	}
}

// Recv returns the child's next message; it fails the test if the child
// exits first or nothing arrives within 30 seconds.
func (c *Child) Recv() string {
	c.tb.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			<-c.done
			c.tb.Fatalf("simtest: child exited (%v) before sending; output:\n%s", c.err, c.Output())
		}
		return m
	case <-time.After(30 * time.Second):
		c.tb.Fatalf("simtest: no message from child in 30s; output:\n%s", c.Output())
	}
	return ""
}

// Wait closes the child's stdin, waits for it to exit, and fails the test
// with the child's output unless it exited 0 and its test passed.
func (c *Child) Wait() {
	c.tb.Helper()
	_ = c.stdin.Close()
	<-c.done
	if c.err != nil {
		c.tb.Fatalf("simtest: child failed: %v; output:\n%s", c.err, c.Output())
	}
	if out := c.Output(); strings.Contains(out, "\n--- SKIP") || strings.Contains(out, "testing: warning: no tests to run") {
		c.tb.Fatalf("simtest: child ran no test; output:\n%s", out)
	}
}

// Send writes one message line for the parent (in a child).
func Send(msg string) {
	fmt.Fprintf(os.Stdout, "%s%s\n", msgPrefix, msg)
}

var stdinLines = sync.OnceValue(func() *bufio.Scanner {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return sc
})

// ErrParentGone is returned by Recv when the parent closed the child's stdin.
var ErrParentGone = errors.New("simtest: parent closed the channel")

// Recv returns the parent's next message line (in a child).
func Recv() (string, error) {
	sc := stdinLines()
	if sc.Scan() {
		return sc.Text(), nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", ErrParentGone
}

// ExtraFile returns the child's Options.Files[i] as an *os.File.
func ExtraFile(i int, name string) *os.File {
	return os.NewFile(uintptr(FirstExtraFD+i), name)
}
