package segment

import (
	"errors"
	"strings"
	"testing"
)

func valid() Descriptor {
	return Descriptor{ID: "host/c1/dram0/0", Generation: 0x9f, Node: "host", Owner: "c1", Tier: TierDRAM,
		Location: 0, Size: 1 << 30, Handle: Handle{Kind: HandlePosixFD, SocketPath: "/tmp/kvf.sock"}}
}

func TestValidate(t *testing.T) {
	if d := valid(); d.Validate() != nil {
		t.Fatalf("valid descriptor: %v", d.Validate())
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Descriptor)
		field string // the error names it
	}{
		{"empty id", func(d *Descriptor) { d.ID = "" }, "id"},
		{"long id", func(d *Descriptor) { d.ID = strings.Repeat("x", MaxIDLen+1) }, "id"},
		{"newline in id", func(d *Descriptor) { d.ID = "a\nb" }, "id"},
		{"generation 0", func(d *Descriptor) { d.Generation = 0 }, "generation"},
		{"bad tier", func(d *Descriptor) { d.Tier = 7 }, "tier 7"},
		{"size 0", func(d *Descriptor) { d.Size = 0 }, "size 0"},
		{"negative location", func(d *Descriptor) { d.Location = -1 }, "location -1"},
		{"posix fd without socket", func(d *Descriptor) { d.Handle.SocketPath = "" }, "socket path"},
		{"unknown handle", func(d *Descriptor) { d.Handle.Kind = 9 }, "handle kind 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := valid()
			tc.edit(&d)
			err := d.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want ErrInvalid naming %q", err, tc.field)
			}
		})
	}
	d := valid()
	d.Handle = Handle{Kind: HandleFabric}
	if err := d.Validate(); err != nil {
		t.Fatalf("fabric handle without socket path: %v", err)
	}
	if k := d.Key(); k.ID != d.ID || k.Generation != d.Generation || k.String() != "host/c1/dram0/0 gen 0x9f" {
		t.Fatalf("Key = %v", k)
	}
}
