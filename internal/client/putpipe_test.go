package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// slowEnds is a master client whose PutEnds answer late (delay per call)
// and record the keys of each call; a key in revoke is revoked instead of
// ended and answered ErrNotFound, as the master answers a put it revoked.
type slowEnds struct {
	master.Client
	delay  time.Duration
	revoke map[string]bool
	mu     sync.Mutex
	calls  [][]string
}

func (m *slowEnds) PutEnd(ctx context.Context, puts []master.PutRef) []error {
	time.Sleep(m.delay)
	keys := make([]string, len(puts))
	var end, rev []master.PutRef
	for i, p := range puts {
		keys[i] = p.Key
		if m.revoke[p.Key] {
			rev = append(rev, p)
		} else {
			end = append(end, p)
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, keys)
	m.mu.Unlock()
	for _, err := range m.Client.PutRevoke(ctx, rev) {
		if err != nil {
			return []error{err} // the length mismatch fails the test
		}
	}
	ended := m.Client.PutEnd(ctx, end)
	out := make([]error, len(puts))
	for i, p := range puts {
		if m.revoke[p.Key] {
			out[i] = fmt.Errorf("%w: put of key %q was revoked", master.ErrNotFound, p.Key)
		} else {
			out[i], ended = ended[0], ended[1:]
		}
	}
	return out
}

func (m *slowEnds) Close() error { return nil } // the env closes the master client

// openThrough opens a consumer Store of e's cluster whose master calls go
// through m (a wrapper of e.mc), each batch in one pipeline of test-sized
// chunks.
func openThrough(t *testing.T, e *env, m master.Client, id string) *client.Store {
	t.Helper()
	st, err := client.Open(context.Background(), cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: m, ClientID: id, PipelineChunk: testPipelineChunk, BatchParts: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A test that fails before its own Close would leave the Store's
	// heartbeat running into the tests after it (where it races their
	// time hooks under -race); Close is idempotent.
	t.Cleanup(func() { st.Close() })
	return st
}

// wantNoPending fails unless e's master holds no put in progress.
func wantNoPending(t *testing.T, e *env) {
	t.Helper()
	if s, err := e.mc.Stats(context.Background()); err != nil || s.PendingPuts != 0 {
		t.Fatalf("pending puts after BatchPut: %+v, %v", s, err)
	}
}

// closeThrough removes everything and closes st, then e (which asserts
// that nothing leaked).
func closeThrough(t *testing.T, e *env, st *client.Store) {
	t.Helper()
	if _, err := st.RemoveAll(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// TestBatchPutEndsBeforeReturn: a batch of many chunks ends its puts off
// the caller's loop (on the ender, or with an embedded master on the
// pipeline's worker), and still every put is ended or failed when BatchPut
// returns, in batch order, with each PutEnd failure at its key's position.
func TestBatchPutEndsBeforeReturn(t *testing.T) {
	for _, embedded := range []bool{false, true} {
		t.Run(fmt.Sprintf("embedded=%v", embedded), func(t *testing.T) { testBatchPutEndsBeforeReturn(t, embedded) })
	}
}

func testBatchPutEndsBeforeReturn(t *testing.T, embedded bool) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 64, 4096
	src := devBuf(t, e, n*size)
	dst := devBuf(t, e, n*size)
	want := fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(3, 4)))
	keys, srcs, dsts := slabs("ends", src, dst, n, size)
	m := &slowEnds{Client: e.mc, delay: 3 * time.Millisecond, revoke: map[string]bool{keys[9]: true, keys[40]: true, keys[63]: true}}
	st := openThrough(t, e, m, "slow-ends")
	if embedded {
		client.ForceEmbedded(st)
	}
	errs := st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	vis, err := e.mc.Exists(ctx, keys, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		switch {
		case m.revoke[keys[i]]:
			if !errors.Is(err, client.ErrTransfer) || vis[i] {
				t.Fatalf("put %s (revoked): %v, visible %v; want ErrTransfer, not visible", keys[i], err, vis[i])
			}
		case err != nil || !vis[i]:
			t.Fatalf("put %s: %v, visible when BatchPut returned: %v", keys[i], err, vis[i])
		}
	}
	wantNoPending(t, e)
	// Every key was ended once, chunk by chunk in batch order.
	next := 0
	for _, call := range m.calls {
		for _, k := range call {
			if i, _ := strconv.Atoi(k[strings.LastIndexByte(k, '/')+1:]); i != next {
				t.Fatalf("PutEnd calls %v: key %s where key %d was next", m.calls, k, next)
			}
			next++
		}
	}
	if next != n || len(m.calls) < 8 {
		t.Fatalf("PutEnd calls %v: %d keys in %d calls, want %d keys in several chunks", m.calls, next, len(m.calls), n)
	}
	_, gerrs := st.BatchGet(ctx, keys, dsts, 0)
	back := readBack(t, e, dst, n*size)
	for i, err := range gerrs {
		if m.revoke[keys[i]] {
			if !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get %s (revoked): %v, want ErrNotFound", keys[i], err)
			}
			continue
		}
		if lo := i * size; err != nil || string(back[lo:lo+size]) != string(want[lo:lo+size]) {
			t.Fatalf("get %s: %v or not its bytes", keys[i], err)
		}
	}
	closeThrough(t, e, st)
}

// failStart is a master client whose PutStart call number fail (from 1)
// fails as a lost master would, starting nothing.
type failStart struct {
	master.Client
	fail  int
	mu    sync.Mutex
	calls int
}

func (m *failStart) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.mu.Unlock()
	if n == m.fail {
		return nil, fmt.Errorf("%w: injected: no master answered", master.ErrNotLeader)
	}
	return m.Client.PutStart(ctx, reqs)
}

func (m *failStart) Close() error { return nil } // the env closes the master client

// TestBatchPutStartFailsTheRest: when a chunk's PutStart fails, that
// chunk's keys and every later one fail — the chunk built ahead while the
// master answered (aheadSource) and the one whose PutStart was in flight
// among them — and exactly the keys reported put are stored; also as an
// embedded master's pipeline (PutEnds on its worker).
func TestBatchPutStartFailsTheRest(t *testing.T) {
	for _, tc := range []struct {
		fail     int
		embedded bool
	}{{2, false}, {3, false}, {5, false}, {2, true}, {3, true}, {5, true}} {
		fail := tc.fail
		t.Run(fmt.Sprintf("call=%d/embedded=%v", fail, tc.embedded), func(t *testing.T) {
			e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
			ctx := context.Background()
			const n, size = 48, 4096
			src := devBuf(t, e, n*size)
			dst := devBuf(t, e, n*size)
			keys, srcs, _ := slabs(fmt.Sprintf("start-fails/%d", fail), src, dst, n, size)
			m := &failStart{Client: e.mc, fail: fail}
			st := openThrough(t, e, m, "fail-start")
			if tc.embedded {
				client.ForceEmbedded(st)
			}
			errs := st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
			vis, err := e.mc.Exists(ctx, keys, false)
			if err != nil {
				t.Fatal(err)
			}
			ok := 0
			for i, err := range errs {
				if (err == nil) != vis[i] {
					t.Fatalf("put %s: %v, but visible: %v", keys[i], err, vis[i])
				}
				if err == nil {
					if ok != i {
						t.Fatalf("put %s succeeded after a failed key", keys[i])
					}
					ok++
				} else if !errors.Is(err, client.ErrRPC) {
					t.Fatalf("put %s: %v, want ErrRPC", keys[i], err)
				}
			}
			// Chunks of 1, 2, 4, 5, 5, … keys: call k fails keys from the
			// k-th chunk on.
			if want := []int{0, 1, 3, 7, 12, 17}[fail-1]; ok != want {
				t.Fatalf("%d keys put before call %d failed, want %d", ok, fail, want)
			}
			wantNoPending(t, e)
			closeThrough(t, e, st)
		})
	}
}

// TestBatchPutCopyFailsWithEnder: a copy that fails after the ender has
// taken chunks (the sixth chunk's kernel launch) fails that chunk and every
// later key, the chunks before it end, and the store holds exactly their
// bytes: nothing is left pending or reserved.
func TestBatchPutCopyFailsWithEnder(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 60, 4096
	src := devBuf(t, e, 2*n*size)
	keys, srcs, _ := apartSlabs("ender-fails", src, src, n, size)
	// Chunks of 1, 2, 4, 5, 5, 5, … keys: the first two go to the copy
	// engine, so the fourth kernel launch is the sixth chunk's (keys 17–21),
	// by when the ender has ended the first chunks.
	e.drv.Fail("LaunchKernel", 4, cuda.ErrorLaunchFailed)
	errs := e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	vis, err := e.mc.Exists(ctx, keys, false)
	if err != nil {
		t.Fatal(err)
	}
	const ok = 17
	for i, err := range errs {
		if wantOK := i < ok; (err == nil) != wantOK || vis[i] != wantOK {
			t.Fatalf("put %s: %v, visible %v (want success: %v)", keys[i], err, vis[i], wantOK)
		}
		if i >= ok && !errors.Is(err, client.ErrTransfer) {
			t.Fatalf("put %s: %v, want ErrTransfer", keys[i], err)
		}
	}
	st, err := e.mc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingPuts != 0 || st.Tiers[0].Used != ok*size {
		t.Fatalf("after the failed batch: %d pending puts, %d bytes used; want 0 and %d", st.PendingPuts, st.Tiers[0].Used, ok*size)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}

// goroutineSpy is a master client that records the goroutine each
// PutStart, PutEnd and GetReplicas call ran on.
type goroutineSpy struct {
	master.Client
	mu               sync.Mutex
	puts, ends, gets []uint64
}

func (m *goroutineSpy) PutEnd(ctx context.Context, puts []master.PutRef) []error {
	m.mu.Lock()
	m.ends = append(m.ends, goroutineID())
	m.mu.Unlock()
	return m.Client.PutEnd(ctx, puts)
}

func (m *goroutineSpy) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	m.mu.Lock()
	m.puts = append(m.puts, goroutineID())
	m.mu.Unlock()
	return m.Client.PutStart(ctx, reqs)
}

func (m *goroutineSpy) GetReplicas(ctx context.Context, keys []string) ([]master.GetResult, error) {
	m.mu.Lock()
	m.gets = append(m.gets, goroutineID())
	m.mu.Unlock()
	return m.Client.GetReplicas(ctx, keys)
}

func (m *goroutineSpy) Close() error { return nil } // the env closes the master client

// goroutineID is the calling goroutine's number, from its stack header
// ("goroutine 12 [running]:").
func goroutineID() uint64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// goroutineLives reports whether goroutine id exists.
func goroutineLives(id uint64) bool {
	b := make([]byte, 1<<20)
	return strings.Contains(string(b[:runtime.Stack(b, true)]), fmt.Sprintf("goroutine %d [", id))
}

// TestPipelineMetaWorker: a batch of many chunks makes its first master
// call on the caller's goroutine and every prefetched one (the next
// chunk's, while this one copies) on one goroutine of its own — not a new
// goroutine per call, whose start cost 9–203 µs on the H200 host — and
// that goroutine has ended when the Store's Close returns. A batch of one
// chunk makes its only call on the caller's goroutine.
func TestPipelineMetaWorker(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 64, 4096
	src := devBuf(t, e, n*size)
	dst := devBuf(t, e, n*size)
	want := fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(5, 6)))
	keys, srcs, dsts := slabs("worker", src, dst, n, size)
	m := &goroutineSpy{Client: e.mc}
	st := openThrough(t, e, m, "worker")
	me := goroutineID()
	var workers []uint64
	check := func(op string, calls []uint64) {
		t.Helper()
		if len(calls) < 4 || calls[0] != me {
			t.Fatalf("%s: calls on goroutines %v; want several, the first on the caller's (%d)", op, calls, me)
		}
		w := calls[1]
		for _, id := range calls[1:] {
			if id != w || id == me {
				t.Fatalf("%s: calls on goroutines %v; want every prefetch on one worker, not the caller's (%d)", op, calls, me)
			}
		}
		workers = append(workers, w)
	}
	for i, err := range st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	check("BatchPut", m.puts)
	_, gerrs := st.BatchGet(ctx, keys, dsts, 0)
	back := readBack(t, e, dst, n*size)
	for i, err := range gerrs {
		if lo := i * size; err != nil || string(back[lo:lo+size]) != string(want[lo:lo+size]) {
			t.Fatalf("get %s: %v or not its bytes", keys[i], err)
		}
	}
	check("BatchGet", m.gets)
	m.puts, m.gets = nil, nil
	if errs := st.BatchPut(ctx, []string{"worker/one"}, srcs[:1], 0, client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, errs := st.BatchGet(ctx, []string{"worker/one"}, dsts[:1], 0); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if len(m.puts) != 1 || m.puts[0] != me || len(m.gets) != 1 || m.gets[0] != me {
		t.Fatalf("one-key batches: PutStart on %v, GetReplicas on %v; want each once on the caller's goroutine %d", m.puts, m.gets, me)
	}
	if _, err := st.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if goroutineLives(w) {
			t.Fatalf("worker goroutine %d still runs after the Store closed", w)
		}
	}
	e.close()
}

// TestPipelineEndsOnWorker: with an embedded master a batch of many
// chunks runs its PutEnds on the pipeline's worker, the goroutine of its
// PutStarts (the last chunks' on the caller's, inline), so that one
// goroutine, not two, takes the master's lock; with another master an
// ender goroutine of its own runs them, next to the worker's PutStarts.
func TestPipelineEndsOnWorker(t *testing.T) {
	for _, embedded := range []bool{false, true} {
		t.Run(fmt.Sprintf("embedded=%v", embedded), func(t *testing.T) {
			e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
			ctx := context.Background()
			const n, size = 64, 4096
			src := devBuf(t, e, n*size)
			fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(7, 8)))
			keys, srcs, _ := slabs("ends-on", src, src, n, size)
			m := &goroutineSpy{Client: e.mc}
			st := openThrough(t, e, m, "ends-on")
			if embedded {
				client.ForceEmbedded(st)
			}
			me := goroutineID()
			for i, err := range st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
				if err != nil {
					t.Fatalf("put %s: %v", keys[i], err)
				}
			}
			if len(m.puts) < 4 || len(m.ends) < 4 {
				t.Fatalf("PutStart on %v, PutEnd on %v: want several calls of each", m.puts, m.ends)
			}
			w := m.puts[1]
			onWorker, onOther := 0, 0
			for _, id := range m.ends {
				switch id {
				case w:
					onWorker++
				case me:
				default:
					onOther++
				}
			}
			if embedded && (onWorker == 0 || onOther > 0) {
				t.Fatalf("PutEnd on %v (worker %d, caller %d): want them on the worker, the last ones on the caller", m.ends, w, me)
			}
			if !embedded && (onWorker > 0 || onOther == 0) {
				t.Fatalf("PutEnd on %v (worker %d, caller %d): want them on an ender, not the worker", m.ends, w, me)
			}
			wantNoPending(t, e)
			closeThrough(t, e, st)
		})
	}
}

// cancelAfterStarts is a master client that cancels a context once its
// after-th PutStart has answered: the caller gives up mid-batch.
type cancelAfterStarts struct {
	master.Client
	after  int
	cancel context.CancelFunc
	mu     sync.Mutex
	starts int
}

func (m *cancelAfterStarts) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	res, err := m.Client.PutStart(ctx, reqs)
	m.mu.Lock()
	if m.starts++; m.starts == m.after {
		m.cancel()
	}
	m.mu.Unlock()
	return res, err
}

func (m *cancelAfterStarts) Close() error { return nil } // the env closes the master client

// TestPipelineCancelledOnWorker: a caller that gives up (its context
// cancelled) in the middle of a many-chunk batch put whose PutEnds run on
// the pipeline's worker (an embedded master) gets, for every key, either
// success with the object visible or an error with it invisible; no put it
// started is left in progress (revoked, not reserved until the put
// timeout); and the worker has ended once the Store is closed.
func TestPipelineCancelledOnWorker(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{PutTimeout: time.Hour})
	const n, size = 64, 4096
	src := devBuf(t, e, n*size)
	fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(9, 10)))
	keys, srcs, _ := slabs("cancelled", src, src, n, size)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &cancelAfterStarts{Client: &goroutineSpy{Client: e.mc}, after: 3, cancel: cancel}
	st := openThrough(t, e, m, "cancelled")
	client.ForceEmbedded(st)
	errs := st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{})
	bg := context.Background()
	vis, err := e.mc.Exists(bg, keys, false)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i, err := range errs {
		if (err == nil) != vis[i] {
			t.Fatalf("key %s: error %v but visible %v", keys[i], err, vis[i])
		}
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no key failed: the cancellation came too late to test anything")
	}
	wantNoPending(t, e)
	workers := m.Client.(*goroutineSpy).puts[1:]
	closeThrough(t, e, st)
	for _, w := range workers {
		if goroutineLives(w) {
			t.Fatalf("worker goroutine %d still runs after the Store closed", w)
		}
	}
}

// prepSpy is an embedded master client that records where each PutStart
// batch was prepared (master.Preparer) and how each was started.
type prepSpy struct {
	master.Client
	p                       master.Preparer
	mu                      sync.Mutex
	prepared                []uint64 // goroutine of each preparation
	uniform                 int      // of them, PrepareUniformPutStart's
	viaPrepared, unprepared int
}

func (m *prepSpy) PreparePutStart(reqs []master.PutStartReq) (*master.PreparedPuts, error) {
	m.mu.Lock()
	m.prepared = append(m.prepared, goroutineID())
	m.mu.Unlock()
	return m.p.PreparePutStart(reqs)
}

func (m *prepSpy) PrepareUniformPutStart(u master.UniformPuts) (*master.PreparedPuts, error) {
	m.mu.Lock()
	m.prepared = append(m.prepared, goroutineID())
	m.uniform++
	m.mu.Unlock()
	return m.p.PrepareUniformPutStart(u)
}

func (m *prepSpy) PutStartPrepared(ctx context.Context, p *master.PreparedPuts) ([]master.PutStartResult, error) {
	m.mu.Lock()
	m.viaPrepared++
	m.mu.Unlock()
	return m.p.PutStartPrepared(ctx, p)
}

func (m *prepSpy) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	m.mu.Lock()
	m.unprepared++
	m.mu.Unlock()
	return m.Client.PutStart(ctx, reqs)
}

func (m *prepSpy) Close() error { return nil } // the env closes the master client

// TestPutChunksPrepared: with a master that prepares PutStart batches
// apart (an embedded one), a batch of many chunks prepares every chunk on
// the pipeline's goroutine as it builds it, from its keys and sizes
// (master.UniformPuts: no request built per key), and the worker only
// starts them: fails if any chunk's PutStart goes out unprepared, is
// prepared from requests, or is prepared on the worker (the master's
// serial path).
func TestPutChunksPrepared(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	ctx := context.Background()
	const n, size = 64, 4096
	src := devBuf(t, e, n*size)
	dst := devBuf(t, e, n*size)
	want := fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(9, 10)))
	keys, srcs, dsts := slabs("prepared", src, dst, n, size)
	p, ok := e.mc.(master.Preparer)
	if !ok {
		t.Fatal("the test env's embedded master client is not a master.Preparer")
	}
	m := &prepSpy{Client: e.mc, p: p}
	st := openThrough(t, e, m, "prepared")
	client.ForceEmbedded(st)
	me := goroutineID()
	for i, err := range st.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	if len(m.prepared) < 4 || m.viaPrepared != len(m.prepared) || m.unprepared != 0 || m.uniform != len(m.prepared) {
		t.Fatalf("%d chunks prepared (%d uniform), %d started prepared, %d unprepared: want several, all uniform and started prepared",
			len(m.prepared), m.uniform, m.viaPrepared, m.unprepared)
	}
	for _, id := range m.prepared {
		if id != me {
			t.Fatalf("chunks prepared on goroutines %v; want all on the pipeline's (the caller's, %d)", m.prepared, me)
		}
	}
	_, gerrs := st.BatchGet(ctx, keys, dsts, 0)
	back := readBack(t, e, dst, n*size)
	for i, err := range gerrs {
		if lo := i * size; err != nil || string(back[lo:lo+size]) != string(want[lo:lo+size]) {
			t.Fatalf("get %s: %v or not its bytes", keys[i], err)
		}
	}
	wantNoPending(t, e)
	closeThrough(t, e, st)
}

// TestTwoChunkBatches: a batch of two pipeline chunks (1 + 2 keys with the
// tests' chunk of 5) makes its second master call on its own goroutine
// after the first chunk's copies are enqueued (no worker). It puts and
// gets every key; when the first chunk's copy fails, the second chunk's
// keys fail with it and nothing of them was started: no pending put, no
// bytes held, no lease left to block a plain remove.
func TestTwoChunkBatches(t *testing.T) {
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour})
	ctx := context.Background()
	const n, size = 3, 4096
	src := devBuf(t, e, 2*n*size)
	dst := devBuf(t, e, 2*n*size)
	want := fillRandom(t, e, src, 2*n*size, rand.New(rand.NewPCG(3, 4)))
	// Keys apart: one copy each, so the first chunk is one copy and the
	// second two (both on the copy engine, one MemcpyAsync call each).
	keys, srcs, dsts := apartSlabs("two", src, dst, n, size)
	for i, err := range e.cons.BatchPut(ctx, keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	if _, errs := e.cons.BatchGet(ctx, keys, dsts, 0); errs != nil {
		for i, err := range errs {
			if err != nil {
				t.Fatalf("get %s: %v", keys[i], err)
			}
		}
	}
	got := readBack(t, e, dst, 2*n*size)
	for i := range n {
		if off := 2 * i * size; !bytes.Equal(got[off:off+size], want[off:off+size]) {
			t.Fatalf("get %s: not its bytes", keys[i])
		}
	}

	// The first chunk's copy fails: the whole batch fails, nothing of the
	// second chunk was started.
	bad, bsrcs, _ := apartSlabs("two-bad", src, dst, n, size)
	e.drv.Fail("MemcpyAsync", 1, cuda.ErrorUnknown)
	errs := e.cons.BatchPut(ctx, bad, bsrcs, 0, client.PutOptions{})
	vis, err := e.mc.Exists(ctx, bad, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !errors.Is(err, client.ErrTransfer) || vis[i] {
			t.Fatalf("put %s after a failed first chunk: %v, visible %v (want ErrTransfer, not visible)", bad[i], err, vis[i])
		}
	}
	wantNoPending(t, e)
	st, err := e.mc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Tiers[0].Used; used != n*size {
		t.Fatalf("the store holds %d bytes after the failed batch, want %d (the first batch's)", used, n*size)
	}

	e.drv.Fail("MemcpyAsync", 1, cuda.ErrorUnknown)
	if _, errs := e.cons.BatchGet(ctx, keys, dsts, 0); errs == nil {
		t.Fatal("get with a failed first chunk succeeded")
	} else {
		for i, err := range errs {
			if !errors.Is(err, client.ErrTransfer) {
				t.Fatalf("get %s after a failed first chunk: %v, want ErrTransfer", keys[i], err)
			}
		}
	}
	for i, err := range e.cons.BatchRemove(ctx, keys, false) {
		if err != nil {
			t.Fatalf("plain remove of %s after the failed get (a lease left behind?): %v", keys[i], err)
		}
	}
	e.close()
}
