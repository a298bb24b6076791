package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
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

// gatherEnv puts n objects of rows[i] rows of rowBytes random bytes and
// returns their keys and values.
func gatherEnv(t *testing.T, e *env, rows []int, rowBytes int, rng *rand.Rand) ([]string, [][]byte) {
	t.Helper()
	keys := make([]string, len(rows))
	vals := make([][]byte, len(rows))
	for i, n := range rows {
		keys[i] = fmt.Sprintf("obj%d", i)
		vals[i] = make([]byte, n*rowBytes+rng.IntN(rowBytes)) // trailing bytes are not rows
		for j := range vals[i] {
			vals[i][j] = byte(rng.Uint32())
		}
		if err := e.cons.PutBytes(context.Background(), keys[i], vals[i], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return keys, vals
}

// wantRows is the reference: rows sel[i] of vals[i], in order.
func wantRows(vals [][]byte, sel [][]uint64, rowBytes int) []byte {
	var out []byte
	for i, rs := range sel {
		for _, r := range rs {
			out = append(out, vals[i][int(r)*rowBytes:][:rowBytes]...)
		}
	}
	return out
}

// TestGather: the views' gather and the one-shot Store.Gather copy exactly
// the selected rows — host indices (uniform and ragged), device int32 and
// int64 indices (out-of-range rows zeroed and counted) — byte-exact against
// the objects' bytes read back with full gets; bad input is refused naming
// the argument, before anything is copied (issue 15, items 2 and 3).
func TestGather(t *testing.T) {
	const rowBytes = 48
	e := newEnv(t, sim.Config{}, egmProvider("16MiB"), master.Config{LeaseTTL: time.Second})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(15, 1))
	keys, vals := gatherEnv(t, e, []int{40, 7, 100, 1}, rowBytes, rng)
	// The reference comes from full gets, not from what was put.
	for i, k := range keys {
		got, err := e.cons.GetBytes(ctx, k)
		if err != nil || !bytes.Equal(got, vals[i]) {
			t.Fatalf("full get of %q: %v", k, err)
		}
	}
	views, err := e.cons.Acquire(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	const cap = 64 * 4 * rowBytes
	dst := devBuf(t, e, cap)
	poison := bytes.Repeat([]byte{0xEE}, cap)
	run := func(name string, gather func(client.Region) error, want []byte) {
		t.Helper()
		if err := e.drv.MemcpyHtoD(e.cons.Context(), dst, poison); err != nil {
			t.Fatal(err)
		}
		if err := gather(client.Region{Ptr: uintptr(dst), Len: cap}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := e.drv.StreamSynchronize(e.cons.Context(), 0); err != nil {
			t.Fatal(err)
		}
		got := readBack(t, e, dst, cap)
		if !bytes.Equal(got[:len(want)], want) {
			t.Fatalf("%s: gathered bytes differ from the rows of the full gets", name)
		}
		if !bytes.Equal(got[len(want):], poison[len(want):]) {
			t.Fatalf("%s: wrote past its %d bytes", name, len(want))
		}
	}
	uniform := [][]uint64{{39, 0, 5}, {6, 6, 1}, {99, 50, 2}, {0, 0, 0}}
	ragged := [][]uint64{{1, 2, 3, 4, 5, 39}, {}, {98}, {0, 0}}
	for name, sel := range map[string][][]uint64{"uniform": uniform, "ragged": ragged} {
		run("views host "+name, func(d client.Region) error {
			return views.Gather(client.Rows{Host: sel}, rowBytes, d, 0)
		}, wantRows(vals, sel, rowBytes))
		run("store host "+name, func(d client.Region) error {
			return e.cons.Gather(ctx, keys, client.Rows{Host: sel}, rowBytes, d, 0)
		}, wantRows(vals, sel, rowBytes))
	}

	// Device indices, with out-of-range ones zeroed and counted.
	bad := devBuf(t, e, 4)
	for _, elem := range []int{4, 8} {
		sel := [][]uint64{{3, 1 << 20, 39}, {6, 0, 7}, {^uint64(0), 99, 0}, {0, 0, 0}}
		var idx []byte
		want := make([]byte, 0, 12*rowBytes)
		for i, rs := range sel {
			for _, r := range rs {
				if elem == 4 {
					idx = binary.LittleEndian.AppendUint32(idx, uint32(r))
				} else {
					idx = binary.LittleEndian.AppendUint64(idx, r)
				}
				if lim := uint64(len(vals[i]) / rowBytes); r < lim {
					want = append(want, vals[i][int(r)*rowBytes:][:rowBytes]...)
				} else {
					want = append(want, make([]byte, rowBytes)...)
				}
			}
		}
		dev := devBuf(t, e, uint64(len(idx)))
		if err := e.drv.MemcpyHtoD(e.cons.Context(), dev, idx); err != nil {
			t.Fatal(err)
		}
		if err := e.drv.MemcpyHtoD(e.cons.Context(), bad, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		rows := client.Rows{Device: dev, PerKey: 3, ElemBytes: elem, BadRows: bad}
		run(fmt.Sprintf("views device int%d", elem*8), func(d client.Region) error {
			return views.Gather(rows, rowBytes, d, 0)
		}, want)
		// 1<<20, -1 and row 7 of a 7-row object are out of range.
		if n := binary.LittleEndian.Uint32(readBack(t, e, bad, 4)); n != 3 {
			t.Fatalf("int%d: %d rows counted out of range, want 3", elem*8, n)
		}
	}

	// Bad input: named, and nothing is written.
	d := client.Region{Ptr: uintptr(dst), Len: cap}
	for _, tc := range []struct {
		name     string
		rows     client.Rows
		rowBytes uint64
		dst      client.Region
		want     error
		text     string
	}{
		{"row out of range", client.Rows{Host: [][]uint64{{0}, {7}, {0}, {0}}}, rowBytes, d, client.ErrInvalidArgument, "rows.Host[1][0] = 7"},
		{"too few lists", client.Rows{Host: [][]uint64{{0}}}, rowBytes, d, client.ErrInvalidArgument, "1 lists for 4 keys"},
		{"zero row bytes", client.Rows{Host: uniform}, 0, d, client.ErrInvalidArgument, "row bytes is 0"},
		{"both index kinds", client.Rows{Host: uniform, Device: dst, PerKey: 1, ElemBytes: 4}, rowBytes, d, client.ErrInvalidArgument, "both"},
		{"no indices", client.Rows{}, rowBytes, d, client.ErrInvalidArgument, "neither"},
		{"elem bytes", client.Rows{Device: dst, PerKey: 1, ElemBytes: 2}, rowBytes, d, client.ErrInvalidArgument, "ElemBytes 2"},
		{"per key", client.Rows{Device: dst, PerKey: 0, ElemBytes: 4}, rowBytes, d, client.ErrInvalidArgument, "PerKey 0"},
		{"small destination", client.Rows{Host: uniform}, rowBytes, client.Region{Ptr: uintptr(dst), Len: 11 * rowBytes}, client.ErrBufferTooSmall, "need 576 bytes"},
		{"null destination", client.Rows{Host: uniform}, rowBytes, client.Region{Len: cap}, client.ErrInvalidArgument, "null"},
		{"pageable destination", client.Rows{Host: uniform}, rowBytes, client.Region{Ptr: uintptr(addrOf(make([]byte, cap))), Len: cap}, client.ErrNotRegistered, "not device"},
	} {
		if err := e.drv.MemcpyHtoD(e.cons.Context(), dst, poison); err != nil {
			t.Fatal(err)
		}
		err := views.Gather(tc.rows, tc.rowBytes, tc.dst, 0)
		if !errors.Is(err, tc.want) || !bytes.Contains([]byte(err.Error()), []byte(tc.text)) {
			t.Fatalf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.text)
		}
		if !bytes.Equal(readBack(t, e, dst, cap), poison) {
			t.Fatalf("%s: the destination was written", tc.name)
		}
	}
	if err := e.cons.Gather(ctx, []string{"obj0", "nope"}, client.Rows{Host: [][]uint64{{0}, {0}}}, rowBytes, d, 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("one-shot gather of a missing key: %v, want ErrNotFound", err)
	}

	// A launch that fails: ErrTransfer, and the views still work.
	e.drv.Fail("LaunchKernel", 1, cuda.ErrorLaunchFailed)
	if err := views.Gather(client.Rows{Host: uniform}, rowBytes, d, 0); !errors.Is(err, client.ErrTransfer) {
		t.Fatalf("gather with a failing launch: %v, want ErrTransfer", err)
	}
	run("after a failed launch", func(d client.Region) error {
		return views.Gather(client.Rows{Host: uniform}, rowBytes, d, 0)
	}, wantRows(vals, uniform, rowBytes))

	// A one-shot gather whose lease ended before it finished.
	restore := client.SetTimeNow(func() time.Time { return time.Now().Add(time.Hour) })
	err = e.cons.Gather(ctx, keys, client.Rows{Host: uniform}, rowBytes, d, 0)
	restore()
	if !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("one-shot gather past its lease: %v, want ErrLeaseExpired", err)
	}
	views.Release()
	if err := views.Gather(client.Rows{Host: uniform}, rowBytes, d, 0); !errors.Is(err, client.ErrViewsReleased) {
		t.Fatalf("gather after Release: %v", err)
	}
	if _, err := e.cons.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.close()
}
