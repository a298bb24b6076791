package sim

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// fdExport is a POSIX fd handed to the caller by MemExportToFD. It counts
// as live while the fd number still refers to the same memfd.
type fdExport struct {
	fd       int
	ino, dev uint64
}

// pruneFDExportsLocked drops exports whose fd was closed (or reused for
// something else). A number now held by one of the driver's own
// allocations (a memfd or an import's duplicate) was closed by the caller
// and reused, even when it names the same memfd.
func (d *Driver) pruneFDExportsLocked() {
	own := make(map[int]bool, len(d.mu.allocs))
	for _, a := range d.mu.allocs {
		own[a.fd] = true
	}
	live := d.mu.fdExports[:0]
	for _, e := range d.mu.fdExports {
		var st unix.Stat_t
		if !own[e.fd] && unix.Fstat(e.fd, &st) == nil && st.Ino == e.ino && st.Dev == e.dev {
			live = append(live, e)
		}
	}
	clear(d.mu.fdExports[len(live):])
	d.mu.fdExports = live
}

// MemExportToFD returns a new fd (close-on-exec) for an allocation created
// or imported with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR. The caller
// owns it; it keeps the memory alive like CUDA's shareable handle.
func (d *Driver) MemExportToFD(ctx cuda.Context, h cuda.AllocHandle) (int, error) {
	fd := -1
	err := d.call("MemExportToFD", func() string { return fmt.Sprintf("ctx=%#x h=%#x", ctx, h) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, ok := d.mu.allocs[h]
		if !ok || a.types&cuda.HandlePosixFD == 0 {
			return cuda.ErrorInvalidValue
		}
		nfd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return cuda.ErrorOperatingSystem
		}
		// An older export with the same number was closed: the kernel
		// hands out the lowest free number.
		for i, e := range d.mu.fdExports {
			if e.fd == nfd {
				d.mu.fdExports = append(d.mu.fdExports[:i], d.mu.fdExports[i+1:]...)
				break
			}
		}
		d.mu.fdExports = append(d.mu.fdExports, fdExport{fd: nfd, ino: a.ino, dev: a.dev})
		fd = nfd
		return cuda.Success
	})
	return fd, err
}

// MemImportFromFD imports an fd exported by a simulator in this or
// another process. The fd stays the caller's: the import keeps its own
// duplicate. An fd that is not a simulator allocation fails with
// CUDA_ERROR_INVALID_VALUE.
func (d *Driver) MemImportFromFD(ctx cuda.Context, fd int) (cuda.AllocHandle, error) {
	var h cuda.AllocHandle
	err := d.call("MemImportFromFD", func() string { return fmt.Sprintf("ctx=%#x fd=%d", ctx, fd) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		if fd < 0 {
			return cuda.ErrorInvalidValue
		}
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return cuda.ErrorInvalidValue
		}
		a, r := d.importFDLocked(nfd)
		if r != cuda.Success {
			unix.Close(nfd)
			return r
		}
		h = a.h
		return cuda.Success
	})
	return h, err
}

// importFDLocked turns an fd the driver owns into an import; on failure
// the caller still owns fd.
func (d *Driver) importFDLocked(fd int) (*alloc, cuda.Result) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size <= 0 {
		return nil, cuda.ErrorInvalidValue
	}
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, cuda.ErrorInvalidValue
	}
	loc, types, ok := parseMemfdLink(link)
	if !ok {
		return nil, cuda.ErrorInvalidValue
	}
	g, r := d.locGranularity(loc)
	if r != cuda.Success {
		// The exporter's topology is not ours (another Config):
		// map at the default granularity.
		g = d.cfg.Granularity
	}
	a := &alloc{
		h: cuda.AllocHandle(d.newHandle(kindAlloc)), fd: fd, ino: st.Ino, dev: st.Dev,
		size: uint64(st.Size), loc: loc, types: types, gran: g, imported: true,
	}
	d.mu.allocs[a.h] = a
	return a, cuda.Success
}

// Fabric handles: 8 bytes of magic, a 16-byte random id naming the
// registry entry, the size, zero padding.
var fabricMagic = [8]byte{'k', 'v', 'f', 's', 'i', 'm', 'F', 'H'}

// fabricEntry is the registry file of one fabric export: the importer
// opens /proc/<PID>/fd/<FD> and checks that it is still the same memfd.
type fabricEntry struct {
	PID  int    `json:"pid"`
	FD   int    `json:"fd"`
	Ino  uint64 `json:"ino"`
	Dev  uint64 `json:"dev"`
	Size uint64 `json:"size"`
}

func (d *Driver) fabricPath(id string) string {
	return filepath.Join(d.cfg.FabricRegistryDir, id+".json")
}

func fabricID(fh cuda.FabricHandle) (string, bool) {
	if !bytes.Equal(fh[:8], fabricMagic[:]) {
		return "", false
	}
	for _, b := range fh[32:] {
		if b != 0 {
			return "", false
		}
	}
	return hex.EncodeToString(fh[8:24]), true
}

func makeFabricHandle(id []byte, size uint64) cuda.FabricHandle {
	var fh cuda.FabricHandle
	copy(fh[:8], fabricMagic[:])
	copy(fh[8:24], id)
	binary.LittleEndian.PutUint64(fh[24:32], size)
	return fh
}

// MemExportToFabric publishes an allocation created with
// CU_MEM_HANDLE_TYPE_FABRIC in the registry directory and returns its
// 64-byte handle; exporting the same allocation again returns the same
// handle. The export lasts until the allocation is released (or the
// driver closed, or the process exits).
func (d *Driver) MemExportToFabric(ctx cuda.Context, h cuda.AllocHandle) (cuda.FabricHandle, error) {
	var fh cuda.FabricHandle
	err := d.call("MemExportToFabric", func() string { return fmt.Sprintf("ctx=%#x h=%#x", ctx, h) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		a, ok := d.mu.allocs[h]
		if !ok || a.types&cuda.HandleFabric == 0 {
			return cuda.ErrorInvalidValue
		}
		if a.fabricID != "" {
			id, _ := hex.DecodeString(a.fabricID)
			fh = makeFabricHandle(id, a.size)
			return cuda.Success
		}
		id := make([]byte, 16)
		if _, err := rand.Read(id); err != nil {
			return cuda.ErrorOperatingSystem
		}
		sid := hex.EncodeToString(id)
		if err := d.publishFabric(sid, fabricEntry{PID: os.Getpid(), FD: a.fd, Ino: a.ino, Dev: a.dev, Size: a.size}); err != nil {
			return cuda.ErrorOperatingSystem
		}
		a.fabricID = sid
		d.mu.fabric[sid] = a
		fh = makeFabricHandle(id, a.size)
		return cuda.Success
	})
	return fh, err
}

// publishFabric writes a registry entry atomically (temp file + rename).
func (d *Driver) publishFabric(id string, e fabricEntry) error {
	if err := os.MkdirAll(d.cfg.FabricRegistryDir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.cfg.FabricRegistryDir, ".tmp-"+id+"-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), d.fabricPath(id))
	}
	if werr != nil {
		os.Remove(tmp.Name())
	}
	return werr
}

func (d *Driver) unpublishFabricLocked(id string) {
	if a, ok := d.mu.fabric[id]; ok {
		a.fabricID = ""
		delete(d.mu.fabric, id)
	}
	_ = os.Remove(d.fabricPath(id))
}

// MemImportFromFabric imports a fabric handle exported by a simulator in
// this or another process of the host (same registry directory). A
// malformed handle fails with CUDA_ERROR_INVALID_VALUE; an unknown or
// stale one (released allocation, exited exporter) with
// CUDA_ERROR_NOT_FOUND.
func (d *Driver) MemImportFromFabric(ctx cuda.Context, fh cuda.FabricHandle) (cuda.AllocHandle, error) {
	var h cuda.AllocHandle
	err := d.call("MemImportFromFabric", func() string { return fmt.Sprintf("ctx=%#x fh=%x", ctx, fh[:32]) }, func() cuda.Result {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, r := d.ctxDeviceLocked(ctx); r != cuda.Success {
			return r
		}
		id, ok := fabricID(fh)
		if !ok {
			return cuda.ErrorInvalidValue
		}
		b, err := os.ReadFile(d.fabricPath(id))
		if err != nil {
			return cuda.ErrorNotFound
		}
		var e fabricEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return cuda.ErrorNotFound
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", e.PID, e.FD), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return cuda.ErrorNotFound
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Ino != e.Ino || st.Dev != e.Dev {
			unix.Close(fd)
			return cuda.ErrorNotFound
		}
		a, r := d.importFDLocked(fd)
		if r != cuda.Success {
			unix.Close(fd)
			return r
		}
		h = a.h
		return cuda.Success
	})
	return h, err
}
