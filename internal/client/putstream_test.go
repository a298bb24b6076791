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
