package client_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// streamEnv is an env with n objects of size bytes of random source bytes
// and their keys (prefix/i), buffers and destinations.
type streamEnv struct {
	*env
	keys       []string
	srcs, dsts [][]client.Region
	want       []byte
	dst        cuda.DevicePtr
	size       int
}

func newStreamEnv(t *testing.T, prefix string, n, size int) *streamEnv {
	t.Helper()
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{})
	src := devBuf(t, e, uint64(n*size))
	dst := devBuf(t, e, uint64(n*size))
	want := fillRandom(t, e, src, uint64(n*size), rand.New(rand.NewPCG(uint64(n), uint64(size))))
	keys, srcs, dsts := slabs(prefix, src, dst, n, size)
	return &streamEnv{env: e, keys: keys, srcs: srcs, dsts: dsts, want: want, dst: dst, size: size}
}

// feedIn feeds keys [lo, hi) of se in pieces of the given sizes (the last
// repeated), failing the test on a Feed error.
func (se *streamEnv) feedIn(t *testing.T, p *client.PutStream, lo, hi int, pieces ...int) {
	t.Helper()
	for k := 0; lo < hi; k++ {
		n := min(pieces[min(k, len(pieces)-1)], hi-lo)
		if err := p.Feed(se.keys[lo:lo+n], se.srcs[lo:lo+n]); err != nil {
			t.Fatalf("feed [%d, %d): %v", lo, lo+n, err)
		}
		lo += n
	}
}

// wantStored checks that every key of se reads back its own bytes.
func (se *streamEnv) wantStored(t *testing.T, st *client.Store) {
	t.Helper()
	_, errs := st.BatchGet(context.Background(), se.keys, se.dsts, 0)
	back := readBack(t, se.env, se.dst, uint64(len(se.keys)*se.size))
	for i, err := range errs {
		lo := i * se.size
		if err != nil || !bytes.Equal(back[lo:lo+se.size], se.want[lo:lo+se.size]) {
			t.Fatalf("get %s: %v or not its bytes", se.keys[i], err)
		}
	}
}

// wantNothingStored checks that the master holds no object and no put in
// progress.
func (se *streamEnv) wantNothingStored(t *testing.T, what string) {
	t.Helper()
	s, err := se.mc.Stats(context.Background())
	if err != nil || s.Objects != 0 || s.PendingPuts != 0 {
		t.Fatalf("%s: %d objects, %d puts in progress (%v); want none", what, s.Objects, s.PendingPuts, err)
	}
}

// TestPutStreamRoundTrip: a stream fed in uneven pieces stores every key
// with its own bytes, through a master that prepares uniform chunks (the
// embedded one) and through one that takes requests.
func TestPutStreamRoundTrip(t *testing.T) {
	for _, prepared := range []bool{true, false} {
		name := "requests"
		if prepared {
			name = "prepared"
		}
		t.Run(name, func(t *testing.T) {
			se := newStreamEnv(t, "stream", 157, 4096)
			st := se.cons
			if !prepared {
				st = openThrough(t, se.env, &goroutineSpy{Client: se.mc}, "stream-req")
			}
			p, err := st.BeginPut(context.Background(), len(se.keys), 0, client.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			se.feedIn(t, p, 0, len(se.keys), 1, 7, 3, 64, 100)
			for i, err := range p.End() {
				if err != nil {
					t.Fatalf("put %s: %v", se.keys[i], err)
				}
			}
			se.wantStored(t, st)
			wantNoPending(t, se.env)
			if _, err := st.RemoveAll(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			if !prepared {
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
			se.close()
		})
	}
}

// TestPutStreamNothingVisibleBeforeLastFeed: while a stream lacks its last
// key, its earlier chunks are copied and started but none of its objects
// is visible — even with many chunks past the pipeline's depth — and once
// the last key is fed all of them are.
func TestPutStreamNothingVisibleBeforeLastFeed(t *testing.T) {
	se := newStreamEnv(t, "gate", 120, 4096)
	ctx := context.Background()
	p, err := se.cons.BeginPut(ctx, len(se.keys), 0, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := len(se.keys) - 1
	se.feedIn(t, p, 0, last, 16)
	// Wait (well inside PutStreamFeedWait) until every fed key's put is
	// started: the pipeline then holds many finished chunks.
	deadline := time.Now().Add(client.PutStreamFeedWait / 2)
	for {
		s, err := se.mc.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Objects != 0 {
			t.Fatalf("%d objects visible before the stream's last feed; want none", s.Objects)
		}
		if s.PendingPuts == last || time.Now().After(deadline) {
			if s.PendingPuts < 4*testPipelineChunk {
				t.Fatalf("only %d puts started before the last feed; want the fed chunks started", s.PendingPuts)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := se.cons.GetBytes(ctx, se.keys[0]); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of the stream's first key before its last feed: %v; want ErrNotFound", err)
	}
	se.feedIn(t, p, last, len(se.keys), 1)
	for i, err := range p.End() {
		if err != nil {
			t.Fatalf("put %s: %v", se.keys[i], err)
		}
	}
	se.wantStored(t, se.cons)
	wantNoPending(t, se.env)
	if _, err := se.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	se.close()
}

// TestPutStreamAbortStoresNothing: a stream that ends without all its keys
// — aborted by its feeder, ended early, its feeder silent past
// PutStreamFeedWait, its ctx cancelled — fails every key and leaves no
// object and no put in progress, though its fed chunks were started and
// copied.
func TestPutStreamAbortStoresNothing(t *testing.T) {
	bad := errors.New("the feeder's bad value")
	cases := []struct {
		name string
		stop func(p *client.PutStream, cancel context.CancelFunc)
		want func(error) bool
	}{
		{"abort", func(p *client.PutStream, _ context.CancelFunc) { p.Abort(bad) },
			func(err error) bool { return errors.Is(err, bad) }},
		{"end-early", func(*client.PutStream, context.CancelFunc) {},
			func(err error) bool { return errors.Is(err, client.ErrInvalidArgument) }},
		{"stalled", func(*client.PutStream, context.CancelFunc) {
			time.Sleep(client.PutStreamFeedWait + 50*time.Millisecond)
		},
			func(err error) bool { return errors.Is(err, client.ErrInvalidArgument) }},
		{"cancelled", func(_ *client.PutStream, cancel context.CancelFunc) { cancel() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			se := newStreamEnv(t, "abort", 90, 4096)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p, err := se.cons.BeginPut(ctx, len(se.keys), 0, client.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			se.feedIn(t, p, 0, 60, 7)
			c.stop(p, cancel)
			if c.name != "end-early" {
				// Fed after the stop: refused, nothing of it stored.
				if err := p.Feed(se.keys[60:], se.srcs[60:]); !c.want(err) {
					t.Fatalf("feed after the stream stopped: %v; want its abort's error", err)
				}
			}
			for i, err := range p.End() {
				if !c.want(err) {
					t.Fatalf("put %s of a stopped stream: %v; want its abort's error", se.keys[i], err)
				}
			}
			se.wantNothingStored(t, "after the stream stopped")
			if _, err := se.cons.GetBytes(context.Background(), se.keys[0]); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get of a stopped stream's first key: %v; want ErrNotFound", err)
			}
			se.close()
		})
	}
}

// TestPutStreamBadFeed: a feed of more keys than the stream has room for,
// or of keys and buffers of different lengths, feeds nothing and names
// what was wrong; the stream then goes on as if it had not been made.
func TestPutStreamBadFeed(t *testing.T) {
	se := newStreamEnv(t, "badfeed", 20, 4096)
	p, err := se.cons.BeginPut(context.Background(), 10, 0, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Feed(se.keys[:11], se.srcs[:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed of 11 keys into a stream of n=10: %v; want ErrInvalidArgument", err)
	}
	if err := p.Feed(se.keys[:3], se.srcs[:2]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed of 3 keys and 2 buffers: %v; want ErrInvalidArgument", err)
	}
	se.feedIn(t, p, 0, 10, 4)
	if err := p.Feed(se.keys[10:11], se.srcs[10:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed past a full stream: %v; want ErrInvalidArgument", err)
	}
	for i, err := range p.End() {
		if err != nil {
			t.Fatalf("put %s: %v", se.keys[i], err)
		}
	}
	if err := p.Feed(se.keys[10:11], se.srcs[10:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed after End: %v; want ErrInvalidArgument", err)
	}
	if _, err := se.cons.BeginPut(context.Background(), -1, 0, client.PutOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("BeginPut of n=-1: %v; want ErrInvalidArgument", err)
	}
	s, err := se.mc.Stats(context.Background())
	if err != nil || s.Objects != 10 || s.PendingPuts != 0 {
		t.Fatalf("after the stream: %+v, %v; want its 10 objects", s, err)
	}
	if _, err := se.cons.RemoveAll(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	se.close()
}

// TestPutStreamUpsertKeepsOldValues: an upsert stream (whose PutStarts
// retire the old values) starts nothing before it is fed in full, so one
// aborted half-way leaves every old value readable.
func TestPutStreamUpsertKeepsOldValues(t *testing.T) {
	se := newStreamEnv(t, "upsert", 40, 4096)
	ctx := context.Background()
	old := bytes.Repeat([]byte{0x5a}, se.size)
	for _, k := range se.keys {
		if err := se.cons.PutBytes(ctx, k, old, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := se.cons.BeginPut(ctx, len(se.keys), 0, client.PutOptions{Upsert: true})
	if err != nil {
		t.Fatal(err)
	}
	se.feedIn(t, p, 0, 30, 5)
	time.Sleep(5 * time.Millisecond)
	if s, err := se.mc.Stats(ctx); err != nil || s.PendingPuts != 0 {
		t.Fatalf("an upsert stream fed in part: %d puts started (%v); want none", s.PendingPuts, err)
	}
	p.Abort(nil)
	for i, err := range p.End() {
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("upsert %s of an aborted stream: %v; want ErrInvalidArgument", se.keys[i], err)
		}
	}
	for _, k := range se.keys {
		if b, err := se.cons.GetBytes(ctx, k); err != nil || !bytes.Equal(b, old) {
			t.Fatalf("old value of %s after an aborted upsert stream: %v, equal %v", k, err, bytes.Equal(b, old))
		}
	}
	p, err = se.cons.BeginPut(ctx, len(se.keys), 0, client.PutOptions{Upsert: true})
	if err != nil {
		t.Fatal(err)
	}
	se.feedIn(t, p, 0, len(se.keys), 9)
	for i, err := range p.End() {
		if err != nil {
			t.Fatalf("upsert %s: %v", se.keys[i], err)
		}
	}
	se.wantStored(t, se.cons)
	if _, err := se.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	se.close()
}

// TestPutStreamCloseWithStreamOpen: Store.Close with a stream fed in part
// aborts it and returns at once (not after the stream stalls out, nor after
// CloseTimeout), with nothing of the stream stored and nothing leaked.
func TestPutStreamCloseWithStreamOpen(t *testing.T) {
	se := newStreamEnv(t, "close", 60, 4096)
	st := openThrough(t, se.env, se.mc, "close")
	p, err := st.BeginPut(context.Background(), len(se.keys), 0, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	se.feedIn(t, p, 0, 30, 6)
	for deadline := time.Now().Add(client.PutStreamFeedWait / 2); ; time.Sleep(time.Millisecond) {
		if s, err := se.mc.Stats(context.Background()); err != nil || s.PendingPuts > 0 {
			break // the batch runs: Close has to wait for it
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream's batch started no put")
		}
	}
	t0 := time.Now()
	if err := st.Close(); err != nil {
		t.Fatalf("close with a stream open: %v", err)
	}
	if d := time.Since(t0); d >= client.PutStreamFeedWait {
		t.Fatalf("close with a stream open took %v; want it aborted at once, not stalled out (%v)", d, client.PutStreamFeedWait)
	}
	for i, err := range p.End() {
		if i == 0 {
			t.Logf("put %s of a stream open at Close: %v (close took %v)", se.keys[i], err, time.Since(t0))
		}
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("put %s of a stream cut off by Close: %v; want ErrClosed", se.keys[i], err)
		}
	}
	se.wantNothingStored(t, "after close")
	se.close()
}

// pauseAtPutStart is a master client after whose nth PutStart the writer's
// clock has moved on by delay (the writer was paused — SIGSTOP, a long GC, a
// preempted VM — between a chunk's PutStart and its copies); paused is
// closed then. The call may run on the pipeline's worker while the
// pipeline reads the clock: SetTimeNow is safe beside readers.
type pauseAtPutStart struct {
	master.Client
	n       int
	delay   time.Duration
	calls   int
	paused  chan struct{}
	restore func()
}

func (m *pauseAtPutStart) PutStart(ctx context.Context, reqs []master.PutStartReq) ([]master.PutStartResult, error) {
	res, err := m.Client.PutStart(ctx, reqs)
	// One pipeline: its calls come one at a time.
	if m.calls++; m.calls == m.n {
		m.restore = client.SetTimeNow(func() time.Time { return time.Now().Add(m.delay) })
		close(m.paused)
	}
	return res, err
}

// TestPutStreamPausedPastPutTimeout: a stream's writer paused past its put
// timeout between a chunk's PutStart and its copies must not enqueue them
// (DESIGN §9, "timeouts keep, never give": the master may have handed the
// range on), as a batch put must not (TestPutPausedPastItsTimeoutWritesNothing).
// Paused at its first chunk, the stream fails every key with no copy made;
// at a later one, while it is still being fed, every key from that chunk
// on fails and the keys of the chunks copied before the pause are stored
// with their own bytes, as a batch put's would be. No put stays in
// progress. Both cases fail when the pipeline skips its fence check for
// streams (ran it).
func TestPutStreamPausedPastPutTimeout(t *testing.T) {
	for _, c := range []struct {
		name string
		at   int // the PutStart after which the clock jumps
		fed  int // keys fed before the jump; the rest after it
	}{
		{"first chunk", 1, 64},
		{"later chunk", 3, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{PutTimeout: 2 * time.Second})
			ctx := context.Background()
			m := &pauseAtPutStart{Client: e.mc, n: c.at, delay: 3 * time.Second, paused: make(chan struct{})}
			w, err := client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: e.drv, Master: m, ClientID: "paused-stream",
				ClientTTL: time.Hour, PipelineChunk: 8, BatchParts: 1})
			if err != nil {
				t.Fatal(err)
			}
			const n, size = 64, 4096
			src, dst := devBuf(t, e, n*size), devBuf(t, e, n*size)
			want := fillRandom(t, e, src, n*size, rand.New(rand.NewPCG(5, 9)))
			keys, srcs, dsts := slabs("paused", src, dst, n, size)
			e.drv.ResetCalls()
			p, err := w.BeginPut(ctx, n, 0, client.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Feed(keys[:c.fed], srcs[:c.fed]); err != nil {
				t.Fatal(err)
			}
			<-m.paused
			if c.fed < n {
				_ = p.Feed(keys[c.fed:], srcs[c.fed:]) // refused or taken: the keys fail either way
			}
			errs := p.End()
			m.restore()
			copies := e.drv.CallCount("MemcpyBatchAsync") + e.drv.CallCount("MemcpyAsync") + e.drv.CallCount("LaunchKernel")
			// Chunks of 1, 2, 4, 8, ... keys (PipelineChunk 8): the
			// paused chunk starts at key 2^(at-1)-1.
			first := 1<<(c.at-1) - 1
			stored := 0
			for i, err := range errs {
				switch {
				case i >= first && err == nil:
					t.Fatalf("put %s, started with or after the paused chunk, succeeded", keys[i])
				case i >= first && !errors.Is(err, client.ErrRPC):
					t.Fatalf("put %s of the paused chunk or after: %v; want ErrRPC", keys[i], err)
				case err == nil:
					stored++
				}
			}
			if c.at == 1 && copies != 0 {
				t.Fatalf("%d copy calls; want none", copies)
			}
			_, gerrs := w.BatchGet(ctx, keys[:stored], dsts[:stored], 0)
			back := readBack(t, e, dst, uint64(stored*size))
			for i, err := range gerrs {
				if err != nil || !bytes.Equal(back[i*size:(i+1)*size], want[i*size:(i+1)*size]) {
					t.Fatalf("get %s, stored before the pause: %v or not its bytes", keys[i], err)
				}
			}
			st, err := e.mc.Stats(ctx)
			if err != nil || st.Objects != stored || st.PendingPuts != 0 {
				t.Fatalf("after the paused stream: %d objects (%d keys stored), %d puts in progress (%v); want no put in progress",
					st.Objects, stored, st.PendingPuts, err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			e.close()
		})
	}
}
