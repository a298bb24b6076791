package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// RegisterBuffer makes [ptr, ptr+size) usable as a Put source or Get
// destination. The driver classifies the range (its first and last byte,
// one PointerMemoryTypes call): device and unified memory is recorded as
// device memory; host memory that is page-locked already (torch pinned
// tensors, cudaHostAlloc) is recorded as is; pageable host memory the driver
// does not know is registered with it (page-locked and mapped for the GPU,
// so the copy engines and the SM kernel can reach it) and unregistered by
// UnregisterBuffer. A range whose two ends are memory of different kinds is
// ErrInvalidArgument; overlapping an earlier registration is
// ErrAlreadyRegistered. A failure changes nothing.
//
// Registering device buffers is optional, but Put and Get classify every
// region outside registered buffers (one driver crossing per batch), so
// registering the long-lived ones (a KV cache pool) makes that free.
func (s *Store) RegisterBuffer(ptr uintptr, size uint64) error {
	if ptr == 0 || size == 0 || uint64(ptr)+size < uint64(ptr) {
		return fmt.Errorf("%w: register buffer ptr=%#x size=%d", ErrInvalidArgument, ptr, size)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	// Reserve the range under the lock, then classify and pin it without
	// the lock: pinning a large buffer can take seconds and must not stall
	// puts and gets.
	s.mu.Lock()
	for p, r := range s.mu.regs {
		if uint64(ptr) < r.ptr+r.size && r.ptr < uint64(ptr)+size {
			s.mu.Unlock()
			return fmt.Errorf("%w: [%#x, +%d) overlaps [%#x, +%d)", ErrAlreadyRegistered, ptr, size, p, r.size)
		}
	}
	reg := &registration{ptr: uint64(ptr), size: size, pending: true}
	s.mu.regs[ptr] = reg
	s.mu.Unlock()
	err := s.pin(reg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		delete(s.mu.regs, ptr)
		return err
	}
	reg.pending = false
	return nil
}

// pin classifies reg's memory and page-locks it when it is pageable host
// memory. On error nothing is registered.
func (s *Store) pin(reg *registration) error {
	ptr, size := uintptr(reg.ptr), reg.size
	ends := []cuda.DevicePtr{cuda.DevicePtr(ptr), cuda.DevicePtr(uint64(ptr) + size - 1)}
	var mt [2]cuda.MemoryType
	if err := s.drv.PointerMemoryTypes(s.cctx, ends, mt[:]); err != nil {
		return fmt.Errorf("register buffer [%#x, +%d): classify: %w", ptr, size, err)
	}
	if mt[0] != mt[1] {
		return fmt.Errorf("%w: register buffer [%#x, +%d): first byte is %v memory, last byte %v", ErrInvalidArgument, ptr, size, mt[0], mt[1])
	}
	switch mt[0] {
	case cuda.MemoryTypeDevice, cuda.MemoryTypeUnified, cuda.MemoryTypeHost:
		// Reachable by the GPU already; not ours to unregister.
	case cuda.MemoryTypeUnregistered:
		if err := s.drv.MemHostRegister(s.cctx, ptr, size, cuda.HostRegisterPortable|cuda.HostRegisterDevMap); err != nil {
			return fmt.Errorf("register buffer [%#x, +%d): %w", ptr, size, err)
		}
		reg.ours = true
	default:
		return fmt.Errorf("%w: register buffer [%#x, +%d): %v memory cannot be copied to or from", ErrInvalidArgument, ptr, size, mt[0])
	}
	return nil
}

// registeredLocked reports whether [p, p+n) lies inside one registered
// buffer. Registrations are few (a handful of pools per process), so a scan
// is cheaper than keeping an index.
func (s *Store) registeredLocked(p uintptr, n uint64) bool {
	for _, r := range s.mu.regs {
		if !r.pending && uint64(p) >= r.ptr && n <= r.size && uint64(p)-r.ptr <= r.size-n {
			return true
		}
	}
	return false
}

// UnregisterBuffer undoes RegisterBuffer for the region starting at ptr.
func (s *Store) UnregisterBuffer(ptr uintptr) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.mu.regs[ptr]
	if !ok || r.pending {
		return fmt.Errorf("%w: no buffer registered at %#x", ErrNotRegistered, ptr)
	}
	if r.ours {
		if err := s.drv.MemHostUnregister(s.cctx, ptr); err != nil {
			return fmt.Errorf("unregister buffer %#x: %w", ptr, err)
		}
	}
	delete(s.mu.regs, ptr)
	return nil
}

// unregisterAllLocked drops every registration (teardown); a failed one
// stays recorded for the next try.
func (s *Store) unregisterAllLocked() error {
	var errs []error
	for p, r := range s.mu.regs {
		if r.ours {
			if err := s.drv.MemHostUnregister(s.cctx, p); err != nil {
				errs = append(errs, fmt.Errorf("unregister %#x: %w", p, err))
				continue
			}
		}
		delete(s.mu.regs, p)
	}
	return errors.Join(errs...)
}

// staging is a page-locked host buffer for PutBytes/GetBytes, allocated on
// first use. Guarded by Store.stagingMu (and by Store.mu in teardown, when
// no operation is in flight).
type staging struct {
	size       uint64
	mem        []byte
	registered bool
}

const defaultStagingSize = 64 << 20

func (st *staging) get(drv cuda.Driver, ctx cuda.Context) ([]byte, error) {
	if st.mem != nil && st.registered {
		return st.mem, nil
	}
	if st.size == 0 {
		st.size = defaultStagingSize
	}
	if st.mem == nil {
		m, err := unix.Mmap(-1, 0, int(st.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("staging buffer of %d bytes: %w", st.size, err)
		}
		st.mem = m
	}
	if err := drv.MemHostRegister(ctx, addr(st.mem), st.size, cuda.HostRegisterPortable|cuda.HostRegisterDevMap); err != nil {
		return nil, fmt.Errorf("register staging buffer: %w", err)
	}
	st.registered = true
	return st.mem, nil
}

func (st *staging) free(drv cuda.Driver, ctx cuda.Context) error {
	if st.registered {
		if err := drv.MemHostUnregister(ctx, addr(st.mem)); err != nil {
			return err
		}
		st.registered = false
	}
	if st.mem != nil {
		if err := unix.Munmap(st.mem); err != nil {
			return err
		}
		st.mem = nil
	}
	return nil
}
