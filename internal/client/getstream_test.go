package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/cuda/sim"
	"github.com/kvfabric/kvfabric/internal/master"
)

// getStreamEnv is an env whose consumer splits batch gets into parts of
// at least 2*testPipelineChunk keys (the embedded master's smallest part),
// with n objects of size bytes stored under keys prefix/i and a
// destination slab poisoned with 0xee.
type getStreamEnv struct {
	*env
	keys []string
	dsts [][]client.Region
	want []byte
	dst  cuda.DevicePtr
	size int
}

const getPoison = 0xee

func newGetStreamEnv(t *testing.T, prefix string, n, size, parts int) *getStreamEnv {
	t.Helper()
	e := newEnvParts(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Hour}, nil, parts)
	src, dst := devBuf(t, e, uint64(n*size)), devBuf(t, e, uint64(n*size))
	want := fillRandom(t, e, src, uint64(n*size), rand.New(rand.NewPCG(uint64(n), 7)))
	keys, srcs, dsts := slabs(prefix, src, dst, n, size)
	for i, err := range e.cons.BatchPut(context.Background(), keys, srcs, 0, client.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	ge := &getStreamEnv{env: e, keys: keys, dsts: dsts, want: want, dst: dst, size: size}
	ge.poison(t)
	return ge
}

func (ge *getStreamEnv) poison(t *testing.T) {
	t.Helper()
	if err := ge.drv.MemcpyHtoD(ge.cons.Context(), ge.dst, bytes.Repeat([]byte{getPoison}, len(ge.want))); err != nil {
		t.Fatal(err)
	}
}

// feedIn feeds keys [lo, hi) in pieces of the given sizes (the last
// repeated), failing the test on a Feed error.
func (ge *getStreamEnv) feedIn(t *testing.T, g *client.GetStream, lo, hi int, pieces ...int) {
	t.Helper()
	for k := 0; lo < hi; k++ {
		n := min(pieces[min(k, len(pieces)-1)], hi-lo)
		if err := g.Feed(ge.keys[lo:lo+n], ge.dsts[lo:lo+n]); err != nil {
			t.Fatalf("feed [%d, %d): %v", lo, lo+n, err)
		}
		lo += n
	}
}

// arrived reports whether key i's destination holds its object's bytes.
func (ge *getStreamEnv) arrived(t *testing.T, i int) bool {
	t.Helper()
	b := make([]byte, ge.size)
	if err := ge.drv.MemcpyDtoH(ge.cons.Context(), b, ge.dst+cuda.DevicePtr(i*ge.size)); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(b, ge.want[i*ge.size:(i+1)*ge.size])
}

// untouched reports whether key i's destination still holds the poison.
func (ge *getStreamEnv) untouched(t *testing.T, i int) bool {
	t.Helper()
	b := make([]byte, ge.size)
	if err := ge.drv.MemcpyDtoH(ge.cons.Context(), b, ge.dst+cuda.DevicePtr(i*ge.size)); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(b, bytes.Repeat([]byte{getPoison}, ge.size))
}

// waitArrived waits (well inside StreamFeedWait) until key i's bytes are
// in its destination.
func (ge *getStreamEnv) waitArrived(t *testing.T, i int, why string) {
	t.Helper()
	for deadline := time.Now().Add(client.StreamFeedWait / 2); !ge.arrived(t, i); time.Sleep(200 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("key %d's bytes did not arrive %s", i, why)
		}
	}
}

func (ge *getStreamEnv) finish(t *testing.T) {
	t.Helper()
	if n := leasesHeld(t, ge.env); n != 0 {
		t.Fatalf("%d lease periods held after the stream", n)
	}
	if _, err := ge.cons.RemoveAll(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	ge.close()
}

// TestGetStreamRoundTrip: a get stream fed in uneven pieces returns what a
// BatchGet of the same keys returns, key by key — bytes, sizes, missing
// keys, too-small buffers — with one part and with four, and holds no
// lease after.
func TestGetStreamRoundTrip(t *testing.T) {
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprintf("parts=%d", parts), func(t *testing.T) {
			const n, size = 157, 4096
			ge := newGetStreamEnv(t, "gs", n, size, parts)
			ctx := context.Background()
			keys := append([]string(nil), ge.keys...)
			dsts := append([][]client.Region(nil), ge.dsts...)
			for i := range keys {
				switch {
				case i%9 == 4:
					keys[i] = fmt.Sprintf("gs/missing/%d", i)
				case i%13 == 6:
					dsts[i] = client.Bytes(dsts[i][0].Ptr, size-1)
				}
			}
			g, err := ge.cons.BeginGet(ctx, n, 0)
			if err != nil {
				t.Fatal(err)
			}
			for lo, k := 0, 0; lo < n; k++ {
				m := min([]int{1, 7, 3, 64, 100}[min(k, 4)], n-lo)
				if err := g.Feed(keys[lo:lo+m], dsts[lo:lo+m]); err != nil {
					t.Fatal(err)
				}
				lo += m
			}
			sizes, errs := g.End()
			for i := range keys {
				switch {
				case i%9 == 4:
					if !errors.Is(errs[i], client.ErrNotFound) {
						t.Fatalf("get of missing key %s: %v; want ErrNotFound", keys[i], errs[i])
					}
				case i%13 == 6:
					if !errors.Is(errs[i], client.ErrBufferTooSmall) || !ge.untouched(t, i) {
						t.Fatalf("get %s into %d bytes: %v; want ErrBufferTooSmall and nothing written", keys[i], size-1, errs[i])
					}
				case errs[i] != nil || sizes[i] != size || !ge.arrived(t, i):
					t.Fatalf("get %s: size %d, %v, or not its bytes", keys[i], sizes[i], errs[i])
				}
			}
			ge.poison(t)
			bsizes, berrs := ge.cons.BatchGet(ctx, keys, dsts, 0)
			for i := range keys {
				if bsizes[i] != sizes[i] || (berrs[i] == nil) != (errs[i] == nil) {
					t.Fatalf("key %s: stream %d, %v; BatchGet %d, %v", keys[i], sizes[i], errs[i], bsizes[i], berrs[i])
				}
			}
			ge.finish(t)
		})
	}
}

// TestGetStreamStartsBeforeLastFeed: the keys of a stream's first part are
// copied while the stream still lacks its last key — the point of a
// stream — and the rest follow once it is fed.
func TestGetStreamStartsBeforeLastFeed(t *testing.T) {
	ge := newGetStreamEnv(t, "early", 120, 4096, 4)
	g, err := ge.cons.BeginGet(context.Background(), len(ge.keys), 0)
	if err != nil {
		t.Fatal(err)
	}
	last := len(ge.keys) - 1
	ge.feedIn(t, g, 0, last, 16)
	ge.waitArrived(t, 0, "before the stream's last feed")
	if !ge.untouched(t, last) {
		t.Fatal("the last key's destination was written before it was fed")
	}
	ge.feedIn(t, g, last, len(ge.keys), 1)
	sizes, errs := g.End()
	for i, err := range errs {
		if err != nil || sizes[i] != uint64(ge.size) || !ge.arrived(t, i) {
			t.Fatalf("get %s: size %d, %v, or not its bytes", ge.keys[i], sizes[i], err)
		}
	}
	ge.finish(t)
}

// TestGetStreamAbort: a stream stopped before all its keys are fed —
// aborted by its feeder, ended early, its feeder silent past
// StreamFeedWait, its ctx cancelled, its Store closed — starts no more
// parts. Each key either got its own bytes (its part had started) or
// fails with the abort's error with nothing written to its destination;
// the keys never fed are of the second kind, and the first part's of the
// first (but for the end of ctx, which ends the started parts' master
// calls too, as a BatchGet's). No lease is left and nothing leaks.
func TestGetStreamAbort(t *testing.T) {
	bad := errors.New("the feeder's bad value")
	cases := []struct {
		name string
		stop func(g *client.GetStream, st *client.Store, cancel context.CancelFunc)
		want func(error) bool
	}{
		{"abort", func(g *client.GetStream, _ *client.Store, _ context.CancelFunc) { g.Abort(bad) },
			func(err error) bool { return errors.Is(err, bad) }},
		{"end-early", func(*client.GetStream, *client.Store, context.CancelFunc) {},
			func(err error) bool { return errors.Is(err, client.ErrInvalidArgument) }},
		{"stalled", func(*client.GetStream, *client.Store, context.CancelFunc) {
			time.Sleep(client.StreamFeedWait + 50*time.Millisecond)
		}, func(err error) bool { return errors.Is(err, client.ErrInvalidArgument) }},
		{"cancelled", func(_ *client.GetStream, _ *client.Store, cancel context.CancelFunc) { cancel() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"closed", func(_ *client.GetStream, st *client.Store, _ context.CancelFunc) {
			t0 := time.Now()
			if err := st.Close(); err != nil {
				t.Errorf("close with a get stream open: %v", err)
			}
			if d := time.Since(t0); d >= client.StreamFeedWait {
				t.Errorf("close with a get stream open took %v; want it aborted at once (%v)", d, client.StreamFeedWait)
			}
		}, func(err error) bool { return errors.Is(err, client.ErrClosed) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ge := newGetStreamEnv(t, "abort", 90, 4096, 4)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := ge.cons
			if c.name == "closed" { // a Store of its own, closed by the case
				var err error
				st, err = client.Open(ctx, cfgFor(t, map[string]any{}), client.Options{Driver: ge.drv, Master: ge.mc,
					ClientID: "gs-closed", PipelineChunk: testPipelineChunk, BatchParts: 4})
				if err != nil {
					t.Fatal(err)
				}
			}
			g, err := st.BeginGet(ctx, len(ge.keys), 0)
			if err != nil {
				t.Fatal(err)
			}
			const fed = 60
			ge.feedIn(t, g, 0, fed, 7)
			ge.waitArrived(t, 0, "before the stop")
			c.stop(g, st, cancel)
			if c.name != "end-early" {
				if err := g.Feed(ge.keys[fed:], ge.dsts[fed:]); !c.want(err) {
					t.Fatalf("feed after the stream stopped: %v; want its abort's error", err)
				}
			}
			sizes, errs := g.End()
			got := 0
			for i, err := range errs {
				switch {
				case err == nil && i < fed && sizes[i] == uint64(ge.size) && ge.arrived(t, i):
					got++
				case err == nil:
					t.Fatalf("get %s of a stopped stream: size %d, ok, not fed before the stop or not its bytes", ge.keys[i], sizes[i])
				case !c.want(err) || !ge.untouched(t, i):
					t.Fatalf("get %s of a stopped stream: %v (destination untouched: %v); want its abort's error and nothing written",
						ge.keys[i], err, ge.untouched(t, i))
				case i < 2*testPipelineChunk && c.name != "cancelled": // the end of ctx ends the started parts' calls too
					t.Fatalf("get %s, of the part that had started: %v", ge.keys[i], err)
				}
			}
			t.Logf("%d of %d fed keys got before the stop", got, fed)
			ge.finish(t)
		})
	}
}

// TestGetStreamBadFeed: a feed of more keys than the stream has room for,
// or of keys and buffers of different lengths, feeds nothing and names
// what was wrong; the stream then goes on as if it had not been made.
func TestGetStreamBadFeed(t *testing.T) {
	ge := newGetStreamEnv(t, "gbad", 20, 4096, 4)
	g, err := ge.cons.BeginGet(context.Background(), 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Feed(ge.keys[:11], ge.dsts[:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed of 11 keys into a stream of n=10: %v; want ErrInvalidArgument", err)
	}
	if err := g.Feed(ge.keys[:3], ge.dsts[:2]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed of 3 keys and 2 buffers: %v; want ErrInvalidArgument", err)
	}
	ge.feedIn(t, g, 0, 10, 4)
	if err := g.Feed(ge.keys[10:11], ge.dsts[10:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed past a full stream: %v; want ErrInvalidArgument", err)
	}
	sizes, errs := g.End()
	for i, err := range errs {
		if err != nil || sizes[i] != uint64(ge.size) || !ge.arrived(t, i) {
			t.Fatalf("get %s: %d, %v, or not its bytes", ge.keys[i], sizes[i], err)
		}
	}
	if !ge.untouched(t, 10) {
		t.Fatal("key 10, refused by every feed, was written")
	}
	if err := g.Feed(ge.keys[10:11], ge.dsts[10:11]); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("feed after End: %v; want ErrInvalidArgument", err)
	}
	if _, err := ge.cons.BeginGet(context.Background(), -1, 0); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("BeginGet of n=-1: %v; want ErrInvalidArgument", err)
	}
	g, err = ge.cons.BeginGet(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sizes, errs := g.End(); len(sizes) != 0 || len(errs) != 0 {
		t.Fatalf("a stream of 0 keys: %d sizes, %d errors", len(sizes), len(errs))
	}
	ge.finish(t)
}
