package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// The python path of `bench --store`: one python3 process per GPU runs
// scripts/bench-store.py, which drives kvfabric.compat.mooncake's
// MooncakeDistributedStore (batch_put_from / batch_get_into on registered
// buffers: torch CUDA tensors on a GPU, numpy host arrays on the
// simulator) with an embedded master of its own. Several processes (the
// all-GPUs mode) run in lockstep with this one: each announces a timed
// phase ("ready") and starts it when every GPU's process is ready ("go"),
// as the Go paths' goroutines do with their barrier. A process alone
// starts each phase at once, as a Go path's goroutine alone does (its
// barrier of one never waits): the handshake before each phase cost the
// lone python path 3–5 % at 64 KiB on the H200, a phase that begins with
// an idle process (docs/perf/store.md, ninth round). Every round is
// verified in Python (the destination poisoned before each get) and
// reported.

// pyMsgPrefix marks the script's protocol lines on its stdout.
const pyMsgPrefix = "KVFBENCH "

// pyMsg is one protocol line of the script.
type pyMsg struct {
	T       string  `json:"t"` // skip, ready, round, done, error; eof when the process closed stdout
	Reason  string  `json:"reason"`
	Error   string  `json:"error"`
	Size    uint64  `json:"size"`
	Round   int     `json:"round"`
	Timed   bool    `json:"timed"`
	Keys    int     `json:"keys"`
	Batches int     `json:"batches"`
	Tensors int     `json:"tensors"` // buffers per key (python-multi), 0: one
	PutS    float64 `json:"put_s"`
	GetS    float64 `json:"get_s"`
	// PutPh and GetPh are the Store's phase split of the round's puts and
	// gets (Store.phases: calls, keys, then seconds of check, meta,
	// resolve, copy, master, wait, end); absent from a library without
	// kvfabric_phases.
	PutPh []float64 `json:"put_ph"`
	GetPh []float64 `json:"get_ph"`
	OK    bool      `json:"ok"`
}

// pyPhases is the client.PhaseStats of a pyMsg phase list (zero when the
// script sent none).
func pyPhases(v []float64) client.PhaseStats {
	if len(v) != 9 {
		return client.PhaseStats{}
	}
	return client.PhaseStats{Calls: uint64(v[0]), Keys: uint64(v[1]), Check: seconds(v[2]), Meta: seconds(v[3]),
		Resolve: seconds(v[4]), Copy: seconds(v[5]), Master: seconds(v[6]), Wait: seconds(v[7]), End: seconds(v[8])}
}

// pyConfig is the script's argument.
type pyConfig struct {
	Device     int      `json:"device"`
	Driver     string   `json:"driver"`
	Mode       string   `json:"mode"`
	Sizes      []uint64 `json:"sizes"`
	RoundBytes uint64   `json:"round_bytes"`
	Iters      int      `json:"iters"`
	MaxKeys    int      `json:"max_keys"`
	Capacity   uint64   `json:"capacity"`
	MaxMR      uint64   `json:"max_mr"`
	SocketDir  string   `json:"socket_dir"`
	// Lockstep: announce each timed phase and wait for "go" (more than
	// one process).
	Lockstep bool `json:"lockstep"`
	// Tensors > 0: scatter each object over up to that many buffers
	// (the python-multi path).
	Tensors int `json:"tensors,omitempty"`
}

// pyTimeout bounds the wait for any one message of the script.
const pyTimeout = 10 * time.Minute

// findUp looks for rel in dir and its parents, up to 4 levels.
func findUp(dir, rel string) string {
	for range 5 {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

// pythonSetup finds the interpreter, the script, the Python package and the
// C ABI library; a non-empty skip says what is missing.
func pythonSetup(f storeBenchFlags) (python, script string, env []string, skip string) {
	python, err := exec.LookPath(f.python)
	if err != nil {
		return "", "", nil, fmt.Sprintf("no Python interpreter %q (--python)", f.python)
	}
	script = f.script
	if script == "" {
		var starts []string
		if wd, err := os.Getwd(); err == nil {
			starts = append(starts, wd)
		}
		if exe, err := os.Executable(); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
		for _, d := range starts {
			if script = findUp(d, filepath.Join("scripts", "bench-store.py")); script != "" {
				break
			}
		}
		if script == "" {
			return "", "", nil, "scripts/bench-store.py not found from the working directory (run from the repository, or give --python-script)"
		}
	}
	root := filepath.Dir(filepath.Dir(script))
	pkg := filepath.Join(root, "python")
	if _, err := os.Stat(filepath.Join(pkg, "kvfabric", "__init__.py")); err != nil {
		return "", "", nil, fmt.Sprintf("the kvfabric Python package is not at %s", pkg)
	}
	lib := os.Getenv("KVFABRIC_LIB")
	if lib == "" {
		for _, p := range []string{filepath.Join(root, "build", "libkvfabric.so"), filepath.Join(root, ".device", "libkvfabric.so")} {
			if _, err := os.Stat(p); err == nil {
				lib = p
				break
			}
		}
	}
	if lib == "" {
		return "", "", nil, "libkvfabric.so not found (set KVFABRIC_LIB, or build it: make device, or go build -buildmode=c-shared -o build/libkvfabric.so ./capi)"
	}
	if _, err := os.Stat(lib); err != nil {
		return "", "", nil, fmt.Sprintf("KVFABRIC_LIB=%s: %v", lib, err)
	}
	pp := pkg
	if old := os.Getenv("PYTHONPATH"); old != "" {
		pp += string(os.PathListSeparator) + old
	}
	env = append(os.Environ(), "PYTHONPATH="+pp, "KVFABRIC_LIB="+lib, "PYTHONUNBUFFERED=1")
	return python, script, env, ""
}

// pyProc is one GPU's running script.
type pyProc struct {
	dev   cuda.Device
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// msgs carries its protocol lines; it is closed once the process
	// exited, after waitErr is set.
	msgs    chan pyMsg
	waitErr error
	mu      sync.Mutex
	out     bytes.Buffer // what it printed besides protocol lines (guarded by mu)
}

// finish closes the script's stdin and waits for it to exit, killing it
// after timeout; it returns how it exited.
func (p *pyProc) finish(timeout time.Duration) error {
	_ = p.stdin.Close()
	t := time.After(timeout)
	for {
		select {
		case _, ok := <-p.msgs:
			if !ok {
				return p.waitErr
			}
		case <-t:
			_ = p.cmd.Process.Kill()
			t = nil
		}
	}
}

func (p *pyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.out.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// runStorePython runs the python path on the mode's GPUs at once (with
// tensors > 0 the python-multi path: objects scattered over up to tensors
// buffers). ceil is the mode's ceilings per GPU (measured by the embedded
// path on its pool).
func runStorePython(ctx context.Context, drv cuda.Driver, m storeMode, p storeParams, f storeBenchFlags, ceil []storeGPU, tensors int) (gpus []storeGPU, skip string, err error) {
	python, script, env, skip := pythonSetup(f)
	if skip != "" {
		return nil, skip, nil
	}
	driver := "sim"
	if drv.Name() == "cuda" {
		driver = "cuda"
	}
	var procs []*pyProc
	defer func() {
		for _, pr := range procs {
			_ = pr.finish(30 * time.Second)
		}
	}()
	for _, dev := range m.devs {
		arg, _ := json.Marshal(pyConfig{Device: int(dev), Driver: driver, Mode: m.name, Sizes: p.sizes, RoundBytes: p.roundBytes,
			Iters: p.iters, MaxKeys: p.maxKeys, Capacity: p.capacity, MaxMR: p.maxMR, SocketDir: p.socketDir,
			Lockstep: len(m.devs) > 1, Tensors: tensors})
		cmd := exec.CommandContext(ctx, python, script, string(arg))
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // not outliving the bench
		pr := &pyProc{dev: dev, cmd: cmd, msgs: make(chan pyMsg, 16)}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, "", err
		}
		cmd.Stderr = &lockedWriter{mu: &pr.mu, w: &pr.out}
		if pr.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, "", err
		}
		if err := cmd.Start(); err != nil {
			return nil, "", fmt.Errorf("start %s %s: %w", python, script, err)
		}
		procs = append(procs, pr)
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, pyMsgPrefix); ok {
					var msg pyMsg
					if err := json.Unmarshal([]byte(rest), &msg); err != nil {
						msg = pyMsg{T: "error", Error: fmt.Sprintf("bad protocol line %q: %v", line, err)}
					}
					pr.msgs <- msg
					continue
				}
				pr.mu.Lock()
				pr.out.WriteString(line + "\n")
				pr.mu.Unlock()
			}
			pr.waitErr = cmd.Wait()
			close(pr.msgs)
		}()
	}
	gpus = make([]storeGPU, len(procs))
	for i, pr := range procs {
		gpus[i].dev = int(pr.dev)
		if i < len(ceil) {
			gpus[i].ceilPut, gpus[i].ceilGet = ceil[i].ceilPut, ceil[i].ceilGet
			gpus[i].ceilPuts, gpus[i].ceilGets = ceil[i].ceilPuts, ceil[i].ceilGets
		}
	}
	fail := func(i int, format string, args ...any) error {
		return fmt.Errorf("gpu %d: %s\n%s", procs[i].dev, fmt.Sprintf(format, args...), procs[i].output())
	}
	for {
		msgs := make([]pyMsg, len(procs))
		for i, pr := range procs {
			select {
			case msg, ok := <-pr.msgs:
				if !ok {
					msg = pyMsg{T: "eof"}
				}
				msgs[i] = msg
			case <-time.After(pyTimeout):
				return gpus, "", fail(i, "no word from %s in %v", script, pyTimeout)
			}
		}
		for i, msg := range msgs {
			switch msg.T {
			case "skip":
				return nil, msg.Reason, nil
			case "error":
				return gpus, "", fail(i, "%s", msg.Error)
			case "eof":
				return gpus, "", fail(i, "%s exited before it was done", script)
			}
			if msg.T != msgs[0].T {
				return gpus, "", fail(i, "out of step: %q while GPU %d sent %q", msg.T, procs[0].dev, msgs[0].T)
			}
		}
		switch msgs[0].T {
		case "ready":
			for i, pr := range procs {
				if _, err := io.WriteString(pr.stdin, "go\n"); err != nil {
					return gpus, "", fail(i, "write: %v", err)
				}
			}
		case "round":
			for i, msg := range msgs {
				g := &gpus[i]
				if len(g.sizes) == 0 || g.sizes[len(g.sizes)-1].size != msg.Size {
					g.sizes = append(g.sizes, storeSize{size: msg.Size, keys: msg.Keys, batches: msg.Batches, buffers: msg.Tensors})
				}
				s := &g.sizes[len(g.sizes)-1]
				if msg.Timed {
					s.rounds = append(s.rounds, storeRound{put: seconds(msg.PutS), get: seconds(msg.GetS),
						putPh: pyPhases(msg.PutPh), getPh: pyPhases(msg.GetPh)})
				}
				if !msg.OK && s.bad == nil {
					s.bad = errors.New(msg.Error)
				}
			}
		case "done":
			var errs []error
			for i, pr := range procs {
				if err := pr.finish(2 * time.Minute); err != nil {
					errs = append(errs, fail(i, "%s: %v", script, err))
				}
			}
			procs = nil
			return gpus, "", errors.Join(errs...)
		default:
			return gpus, "", fail(0, "unknown message %q", msgs[0].T)
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// lockedWriter writes to w under mu (a child's stderr, copied by os/exec's
// goroutine while the reader of its stdout appends there too).
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
