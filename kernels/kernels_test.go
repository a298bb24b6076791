package kernels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// checkPTX pins a PTX image's ISA version, target and the parameter types
// of its entry.
func checkPTX(t *testing.T, ptx []byte, entry string, params ...string) {
	t.Helper()
	text := string(ptx)
	if m := regexp.MustCompile(`(?m)^\.version (\d+)\.(\d+)$`).FindStringSubmatch(text); m == nil || m[1]+"."+m[2] != "9.0" {
		// Driver 580 (CUDA 13.0) accepts PTX ISA <= 9.0.
		t.Fatalf("PTX ISA version %v, want 9.0", m)
	}
	if !regexp.MustCompile(`(?m)^\.target sm_90$`).MatchString(text) {
		t.Fatal("PTX target is not sm_90")
	}
	decl := make([]string, len(params))
	for i, p := range params {
		decl[i] = `\.param \.` + p + ` \w+`
	}
	re := regexp.MustCompile(`\.visible \.entry ` + entry + `\(\s*` + strings.Join(decl, `,\s*`) + `\s*\)`)
	if !re.MatchString(text) {
		t.Fatalf("entry %s(%s) not found in the PTX", entry, strings.Join(params, ", "))
	}
	if n := len(regexp.MustCompile(`\.entry\s`).FindAllString(text, -1)); n != 1 {
		t.Fatalf("PTX declares %d entries, want 1", n)
	}
}

func TestCopyBlocksPTXABI(t *testing.T) {
	checkPTX(t, CopyBlocksPTX, CopyBlocksEntry, "u64", "u32")
}

// TestGatherRowsPTXABI pins kvf_gather_rows's parameters: objs, nobj,
// per_obj, idx, idx_bytes, row_bytes, dst, bad — and that the Go encoder
// produces one parameter of the same size for each.
func TestGatherRowsPTXABI(t *testing.T) {
	types := []string{"u64", "u32", "u32", "u64", "u32", "u64", "u64", "u64"}
	checkPTX(t, GatherRowsPTX, GatherRowsEntry, types...)
	params := GatherRowsParams(GatherRowsArgs{})
	if len(params) != len(types) {
		t.Fatalf("GatherRowsParams: %d params, the PTX has %d", len(params), len(types))
	}
	total := 0
	for i, p := range params {
		if want := map[string]int{"u32": 4, "u64": 8}[types[i]]; len(p) != want {
			t.Fatalf("param %d: %d bytes, PTX .%s", i, len(p), types[i])
		}
		total += len(p)
	}
	if total != GatherParamBytes {
		t.Fatalf("params total %d bytes, GatherParamBytes %d", total, GatherParamBytes)
	}
}

// hostMem resolves "device pointers" that are addresses of Go byte slices
// held alive by the test.
func hostMem(bufs ...[]byte) func(cuda.DevicePtr, uint64) ([]byte, error) {
	return func(p cuda.DevicePtr, n uint64) ([]byte, error) {
		for _, b := range bufs {
			base := uint64(uintptr(unsafe.Pointer(&b[0])))
			if uint64(p) >= base && uint64(p)+n <= base+uint64(len(b)) {
				off := uint64(p) - base
				return b[off : off+n], nil
			}
		}
		return nil, cuda.Check("kernel access", cuda.ErrorIllegalAddress)
	}
}

func TestEmulateCopyBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<16)
	dst := make([]byte, 1<<16)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	want := make([]byte, len(dst))
	addr := func(b []byte, off int) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(&b[off]))) }
	var copies []cuda.Copy
	off := 0
	for off < len(dst)-4096 {
		l := 1 + rng.IntN(3000)
		s := rng.IntN(len(src) - l)
		copies = append(copies, cuda.Copy{Dst: addr(dst, off), Src: addr(src, s), Len: uint64(l)})
		copy(want[off:], src[s:s+l])
		off += l + rng.IntN(7)
	}
	table := make([]byte, len(copies)*CopyDescSize)
	for i, c := range copies {
		PutCopyDesc(table[i*CopyDescSize:], c)
	}
	params := CopyBlocksParams(addr(table, 0), uint32(len(copies)))
	// Any grid.y: the blocks' slices (odd lengths, more slices than 16-byte
	// units) cover every byte once.
	for _, gy := range []uint32{1, 2, 3, 7, 64, 1000} {
		clear(dst)
		if err := EmulateCopyBlocks(cuda.Dim3{X: 8, Y: gy, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, params, hostMem(src, dst, table)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("grid.y %d: emulated copy differs from the reference", gy)
		}
	}
	// An out-of-range block fails like a faulting kernel.
	PutCopyDesc(table, cuda.Copy{Dst: addr(dst, 0), Src: cuda.DevicePtr(8), Len: 16})
	if err := EmulateCopyBlocks(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, params, hostMem(src, dst, table)); err == nil {
		t.Fatal("copy from an unmapped address succeeded")
	}
	if err := EmulateCopyBlocks(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}, params[:1], hostMem(src, dst, table)); err == nil {
		t.Fatal("wrong parameter count accepted")
	}
}

// gatherCase is one EmulateGatherRows launch over Go buffers.
type gatherCase struct {
	name     string
	nobj     int
	k        int
	rows     []uint64 // rows of each object
	rowBytes uint64
	idxBytes uint32
	bad      bool // pass a counter
	offset   int  // byte offset of the sources and the destination (alignment)
}

func TestEmulateGatherRows(t *testing.T) {
	for _, tc := range []gatherCase{
		{name: "int64/aligned", nobj: 8, k: 32, rowBytes: 1152, idxBytes: 8, bad: true},
		{name: "int32/aligned", nobj: 8, k: 32, rowBytes: 1152, idxBytes: 4, bad: true},
		{name: "int64/unaligned", nobj: 5, k: 7, rowBytes: 100, idxBytes: 8, bad: true, offset: 3},
		{name: "int32/odd rows", nobj: 3, k: 9, rowBytes: 13, idxBytes: 4, bad: true, offset: 1},
		{name: "null bad", nobj: 4, k: 16, rowBytes: 64, idxBytes: 8},
		{name: "k=1", nobj: 40, k: 1, rowBytes: 256, idxBytes: 4, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.nobj), uint64(tc.k)))
			// Each object: a random number of rows in its own buffer.
			type obj struct {
				buf  []byte
				rows uint64
			}
			objs := make([]obj, tc.nobj)
			var bufs [][]byte
			for o := range objs {
				objs[o].rows = uint64(1 + rng.IntN(50))
				objs[o].buf = make([]byte, tc.offset+int(objs[o].rows*tc.rowBytes))
				for i := range objs[o].buf {
					objs[o].buf[i] = byte(rng.Uint32())
				}
				bufs = append(bufs, objs[o].buf)
			}
			n := tc.nobj * tc.k
			idx := make([]byte, n*int(tc.idxBytes))
			dst := make([]byte, tc.offset+n*int(tc.rowBytes))
			for i := range dst {
				dst[i] = 0xa5 // out-of-range rows must be zeroed, not left
			}
			want := bytes.Clone(dst)
			wantBad := uint32(0)
			for r := range n {
				o := objs[r/tc.k]
				// Mostly valid rows; some at the limit, some negative.
				var i int64
				switch rng.IntN(8) {
				case 0:
					i = -1
				case 1:
					i = int64(o.rows)
				default:
					i = int64(rng.Uint64N(o.rows))
				}
				if tc.idxBytes == 8 {
					binary.LittleEndian.PutUint64(idx[r*8:], uint64(i))
				} else {
					binary.LittleEndian.PutUint32(idx[r*4:], uint32(int32(i)))
				}
				d := want[tc.offset+r*int(tc.rowBytes):][:tc.rowBytes]
				if i >= 0 && uint64(i) < o.rows {
					copy(d, o.buf[tc.offset+int(i)*int(tc.rowBytes):])
				} else {
					clear(d)
					wantBad++
				}
			}
			if wantBad == 0 {
				t.Fatal("no out-of-range row in the case")
			}
			table := make([]byte, tc.nobj*GatherObjSize)
			addr := func(b []byte, off int) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(&b[off]))) }
			for j, o := range objs {
				PutGatherObj(table[j*GatherObjSize:], addr(o.buf, tc.offset), o.rows)
			}
			badBuf := make([]byte, 64) // 8-byte aligned; the counter is its first 4 bytes
			binary.LittleEndian.PutUint32(badBuf, 5)
			args := GatherRowsArgs{
				Objs: addr(table, 0), NObj: uint32(tc.nobj), PerObj: uint32(tc.k),
				Idx: addr(idx, 0), IdxBytes: tc.idxBytes, RowBytes: tc.rowBytes, Dst: addr(dst, tc.offset),
			}
			if tc.bad {
				args.Bad = addr(badBuf, 0)
			}
			mem := hostMem(append(bufs, table, idx, dst, badBuf)...)
			if err := EmulateGatherRows(cuda.Dim3{X: 4, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, GatherRowsParams(args), mem); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(dst, want); i >= 0 {
				t.Fatalf("byte %d (row %d) is %#x, want %#x", i, (i-tc.offset)/int(tc.rowBytes), dst[i], want[i])
			}
			got := binary.LittleEndian.Uint32(badBuf)
			if !tc.bad {
				wantBad = 0
			}
			if got != 5+wantBad {
				t.Fatalf("bad counter %d, want 5 + %d", got, wantBad)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestEmulateGatherRowsFaults: launches the kernel would fault on (or that
// no caller makes) fail.
func TestEmulateGatherRowsFaults(t *testing.T) {
	src := make([]byte, 4096)
	dst := make([]byte, 4096)
	table := make([]byte, GatherObjSize)
	idx := make([]byte, 64)
	badBuf := make([]byte, 64)
	addr := func(b []byte, off int) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(&b[off]))) }
	PutGatherObj(table, addr(src, 0), 16)
	good := GatherRowsArgs{Objs: addr(table, 0), NObj: 1, PerObj: 4, Idx: addr(idx, 0), IdxBytes: 8, RowBytes: 256, Dst: addr(dst, 0), Bad: addr(badBuf, 0)}
	mem := hostMem(src, dst, table, idx, badBuf)
	grid, block := cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 64, Y: 1, Z: 1}
	if err := EmulateGatherRows(grid, block, GatherRowsParams(good), mem); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mod    func(*GatherRowsArgs)
		params func([][]byte) [][]byte
		block  uint32
	}{
		{name: "unmapped objects", mod: func(a *GatherRowsArgs) { a.Objs = 4096 }},
		{name: "unmapped indices", mod: func(a *GatherRowsArgs) { a.Idx = 4096 }},
		{name: "destination past its buffer", mod: func(a *GatherRowsArgs) { a.Dst = addr(dst, 4096-512) }},
		{name: "unmapped bad counter", mod: func(a *GatherRowsArgs) { a.Bad = 4096; binary.LittleEndian.PutUint64(idx, 99) }},
		{name: "misaligned bad counter", mod: func(a *GatherRowsArgs) { a.Bad = addr(badBuf, 2) }},
		{name: "idx_bytes 2", mod: func(a *GatherRowsArgs) { a.IdxBytes = 2 }},
		{name: "too few params", params: func(p [][]byte) [][]byte { return p[:7] }},
		{name: "short param", params: func(p [][]byte) [][]byte { p[5] = p[5][:4]; return p }},
		{name: "block of 48 threads", block: 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(idx)
			a := good
			if tc.mod != nil {
				tc.mod(&a)
			}
			p := GatherRowsParams(a)
			if tc.params != nil {
				p = tc.params(p)
			}
			b := block
			if tc.block != 0 {
				b.X = tc.block
			}
			if err := EmulateGatherRows(grid, b, p, mem); err == nil {
				t.Fatal("launch succeeded")
			}
		})
	}
	// A source row past the object's buffer faults: the object claims
	// more rows than its memory holds.
	PutGatherObj(table, addr(src, 0), 1<<20)
	binary.LittleEndian.PutUint64(idx, 1000)
	if err := EmulateGatherRows(grid, block, GatherRowsParams(good), mem); !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Fatalf("source row outside memory: %v", err)
	}
}
