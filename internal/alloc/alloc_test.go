package alloc

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size, align uint64
		want        error
	}{
		{"zero align", 1 << 20, 0, ErrInvalid},
		{"non power of two", 1 << 20, 48, ErrInvalid},
		{"smaller than align", 32, 64, ErrInvalid},
		{"ok", 1 << 20, 64, nil},
		{"tail dropped", 1000, 64, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.size, tc.align)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New(%d, %d) = %v, want %v", tc.size, tc.align, err, tc.want)
			}
			if err == nil && a.Size() != tc.size&^(tc.align-1) {
				t.Fatalf("Size() = %d", a.Size())
			}
		})
	}
}

func TestAllocBasics(t *testing.T) {
	a, err := New(1<<20, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(0, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc(0) = %v, want ErrInvalid", err)
	}
	if _, err := a.Alloc(1<<20+1, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc(too big) = %v, want ErrInvalid", err)
	}
	if _, err := a.Alloc(^uint64(0), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc(max) = %v, want ErrInvalid", err)
	}
	r, err := a.Alloc(100, 7)
	if err != nil {
		t.Fatal(err)
	}
	off, n, err := a.Span(r)
	if err != nil || off != 0 || n != 128 {
		t.Fatalf("Span = %d, %d, %v; want 0, 128", off, n, err)
	}
	if tag, _ := a.Tag(r); tag != 7 {
		t.Fatalf("Tag = %d, want 7", tag)
	}
	if a.Used() != 128 || a.Allocated() != 1 {
		t.Fatalf("Used = %d, Allocated = %d", a.Used(), a.Allocated())
	}
	if err := a.Free(r); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(r); !errors.Is(err, ErrBadRef) {
		t.Fatalf("double Free = %v, want ErrBadRef", err)
	}
	if err := a.Free(12345); !errors.Is(err, ErrBadRef) {
		t.Fatalf("Free(unknown) = %v, want ErrBadRef", err)
	}
	// The whole segment in one block, then nothing more.
	r, err = a.Alloc(1<<20, 0)
	if err != nil {
		t.Fatalf("whole-segment Alloc: %v", err)
	}
	if _, err := a.Alloc(64, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Alloc on full = %v, want ErrNoSpace", err)
	}
	if err := a.Free(r); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestExactFill: every size class can fill the segment exactly, and freeing
// in any order coalesces back to one block.
func TestExactFill(t *testing.T) {
	for _, sz := range []uint64{64, 192, 4096, 12288, 1 << 16, 3 << 17} {
		a, _ := New(3<<20, 64)
		var refs []Ref
		for {
			r, err := a.Alloc(sz, 0)
			if errors.Is(err, ErrNoSpace) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, r)
		}
		if want := (3 << 20) / sz; uint64(len(refs)) != want {
			t.Fatalf("size %d: %d blocks, want %d", sz, len(refs), want)
		}
		if a.Used() != uint64(len(refs))*sz {
			t.Fatalf("size %d: Used %d", sz, a.Used())
		}
		rand.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
		for _, r := range refs {
			if err := a.Free(r); err != nil {
				t.Fatal(err)
			}
		}
		assertEmpty(t, a)
	}
}

func assertEmpty(t *testing.T, a *Allocator) {
	t.Helper()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if a.Used() != 0 || a.Allocated() != 0 || a.LargestFree() != a.Size() {
		t.Fatalf("not fully coalesced: used %d, allocated %d, largest free %d of %d",
			a.Used(), a.Allocated(), a.LargestFree(), a.Size())
	}
	if len(a.blocks)-len(a.spare) != 1 {
		t.Fatalf("%d live block records, want 1", len(a.blocks)-len(a.spare))
	}
}

type span struct{ off, n uint64 }

// run applies a random operation sequence and checks, after every step, the
// properties: blocks do not overlap and stay inside the segment, offsets and
// lengths are aligned, Used is the exact sum, and freeing everything
// coalesces back to one free block.
func run(t *testing.T, a *Allocator, ops []byte) {
	live := map[Ref]span{}
	var order []Ref
	var want uint64
	for i := 0; i+2 < len(ops); i += 3 {
		if ops[i]%3 != 0 || len(order) == 0 {
			n := (uint64(ops[i+1])<<8 | uint64(ops[i+2])) * uint64(1+ops[i]%5)
			r, err := a.Alloc(n, uint32(i))
			switch {
			case n == 0:
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Alloc(0) = %v", err)
				}
				continue
			case errors.Is(err, ErrNoSpace):
				if a.LargestFree() >= a.RoundUp(n) {
					t.Fatalf("ErrNoSpace for %d bytes with a free block of %d", n, a.LargestFree())
				}
				continue
			case err != nil:
				if a.RoundUp(n) <= a.Size() {
					t.Fatalf("Alloc(%d): %v", n, err)
				}
				continue
			}
			off, ln, err := a.Span(r)
			if err != nil {
				t.Fatal(err)
			}
			if off%a.Align() != 0 || ln%a.Align() != 0 || ln < n || ln-n >= a.Align() || off+ln > a.Size() {
				t.Fatalf("Alloc(%d) = [%d,+%d): misaligned or out of range", n, off, ln)
			}
			if _, dup := live[r]; dup {
				t.Fatalf("ref %d handed out twice", r)
			}
			live[r] = span{off, ln}
			order = append(order, r)
			want += ln
		} else {
			k := int(ops[i+1]) % len(order)
			r := order[k]
			order[k] = order[len(order)-1]
			order = order[:len(order)-1]
			if err := a.Free(r); err != nil {
				t.Fatal(err)
			}
			want -= live[r].n
			delete(live, r)
		}
		if a.Used() != want {
			t.Fatalf("Used %d, want %d", a.Used(), want)
		}
	}
	// No overlap among live blocks; Each agrees with the model.
	spans := make([]span, 0, len(live))
	for _, s := range live {
		spans = append(spans, s)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].off+spans[i-1].n > spans[i].off {
			t.Fatalf("overlap: %v and %v", spans[i-1], spans[i])
		}
	}
	n := 0
	a.Each(func(r Ref, off, ln uint64, _ uint32) {
		if live[r] != (span{off, ln}) {
			t.Fatalf("Each: ref %d [%d,+%d), model %v", r, off, ln, live[r])
		}
		n++
	})
	if n != len(live) {
		t.Fatalf("Each saw %d blocks, model has %d", n, len(live))
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range order {
		if err := a.Free(r); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, a)
}

func TestRandomOps(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		ops := make([]byte, 30000)
		for i := range ops {
			ops[i] = byte(rng.Uint32())
		}
		a, _ := New(8<<20+4096+17, 256)
		run(t, a, ops)
	}
}

func FuzzAlloc(f *testing.F) {
	f.Add(uint8(6), []byte{1, 0, 10, 0, 0, 0, 2, 1, 0, 3, 0, 0})
	f.Add(uint8(0), []byte{1, 255, 255, 1, 255, 255, 0, 0, 0})
	f.Fuzz(func(t *testing.T, alignLog uint8, ops []byte) {
		a, err := New(1<<20+12345, 1<<(alignLog%13))
		if err != nil {
			t.Fatal(err)
		}
		run(t, a, ops)
	})
}

func BenchmarkAllocFree(b *testing.B) {
	a, _ := New(1<<34, 64)
	refs := make([]Ref, 0, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1024 {
		r, _ := a.Alloc(uint64(4096+rng.IntN(1<<16)), 0)
		refs = append(refs, r)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(refs)
		_ = a.Free(refs[k])
		refs[k], _ = a.Alloc(uint64(4096+(i*7919)%(1<<16)), 0)
		i++
	}
}
