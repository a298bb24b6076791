package numa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoMemInfo is wrapped by HostMemory errors when a meminfo file has no
// readable MemTotal line.
var ErrNoMemInfo = errors.New("numa: no MemTotal in meminfo")

// HostMemory reads the host's memory sizes from procfs and sysfs. Root
// prefixes every path ("" is "/"), so tests point it at a fake tree. The
// zero value reads this host. HostMemory is a plain value, safe for
// concurrent use.
type HostMemory struct {
	Root string
}

// Total is MemTotal of /proc/meminfo in bytes: all the memory the kernel
// manages, the most any request for host memory can ever get.
func (h HostMemory) Total() (uint64, error) {
	return memTotal(h.path("proc", "meminfo"))
}

// NodeTotal is MemTotal of host NUMA node n in bytes, from
// /sys/devices/system/node/node<n>/meminfo. ok is false when the kernel
// does not expose the node (no NUMA support, or a container without that
// part of sysfs); callers then fall back to Total.
func (h HostMemory) NodeTotal(n int) (bytes uint64, ok bool, err error) {
	p := h.path("sys", "devices", "system", "node", "node"+strconv.Itoa(n), "meminfo")
	bytes, err = memTotal(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	return bytes, err == nil, err
}

func (h HostMemory) path(elem ...string) string {
	root := h.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// memTotal parses the MemTotal line of a meminfo file: "MemTotal: 123 kB"
// (/proc/meminfo) or "Node 0 MemTotal: 123 kB" (a node's).
func memTotal(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("numa: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "MemTotal:" {
				continue
			}
			kb, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil || i+2 >= len(f) || f[i+2] != "kB" || kb > (1<<64-1)/1024 {
				return 0, fmt.Errorf("%w: %s: %q", ErrNoMemInfo, path, sc.Text())
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("%w: %s", ErrNoMemInfo, path)
}
