package numa

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, root, rel, data string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHostMemory(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/meminfo", "MemTotal:       263840564 kB\nMemFree:        1000 kB\n")
	writeFile(t, root, "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       131920282 kB\nNode 1 MemFree: 5 kB\n")
	writeFile(t, root, "sys/devices/system/node/node2/meminfo", "Node 2 MemFree: 5 kB\n")
	h := HostMemory{Root: root}
	if n, err := h.Total(); err != nil || n != 263840564*1024 {
		t.Fatalf("Total = %d, %v", n, err)
	}
	if n, ok, err := h.NodeTotal(1); err != nil || !ok || n != 131920282*1024 {
		t.Fatalf("NodeTotal(1) = %d, %v, %v", n, ok, err)
	}
	if n, ok, err := h.NodeTotal(0); err != nil || ok || n != 0 {
		t.Fatalf("NodeTotal(0) (absent) = %d, %v, %v; want not ok", n, ok, err)
	}
	if _, ok, err := h.NodeTotal(2); !errors.Is(err, ErrNoMemInfo) || ok {
		t.Fatalf("NodeTotal(2) (no MemTotal) = %v, %v; want ErrNoMemInfo", ok, err)
	}
	if _, err := (HostMemory{Root: t.TempDir()}).Total(); err == nil {
		t.Fatal("Total without /proc/meminfo succeeded")
	}
}

// TestHostMemoryThisHost reads the real files: every Linux host has
// /proc/meminfo.
func TestHostMemoryThisHost(t *testing.T) {
	n, err := HostMemory{}.Total()
	if err != nil || n < 64<<20 {
		t.Fatalf("Total = %d, %v", n, err)
	}
	if m, ok, err := (HostMemory{}).NodeTotal(0); err != nil || ok && (m == 0 || m > n) {
		t.Fatalf("NodeTotal(0) = %d, %v, %v (host %d)", m, ok, err, n)
	}
}
