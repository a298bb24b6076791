package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// RegisterBuffer makes [ptr, ptr+size) usable as a Put source or Get
// destination. Host memory is registered with the driver (page-locked and
// mapped for the GPU, so copies and the SM kernel can reach it); host memory
// that is page-locked already (e.g. torch pinned tensors) is recorded as is;
// device memory, which the driver refuses to register, is recorded as
// device memory. Overlapping an earlier registration is ErrAlreadyRegistered.
func (s *Store) RegisterBuffer(ptr uintptr, size uint64) error {
	if ptr == 0 || size == 0 || uint64(ptr)+size < uint64(ptr) {
		return fmt.Errorf("%w: register buffer ptr=%#x size=%d", ErrInvalidArgument, ptr, size)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, r := range s.mu.regs {
		if uint64(ptr) < r.ptr+r.size && r.ptr < uint64(ptr)+size {
			return fmt.Errorf("%w: [%#x, +%d) overlaps [%#x, +%d)", ErrAlreadyRegistered, ptr, size, p, r.size)
		}
	}
	reg := &registration{ptr: uint64(ptr), size: size}
	err := s.drv.MemHostRegister(s.cctx, ptr, size, cuda.HostRegisterPortable|cuda.HostRegisterDevMap)
	switch {
	case err == nil:
		reg.host = true
	case errors.Is(err, cuda.ErrorHostMemoryAlready):
		// Page-locked by someone else: usable, not ours to unregister.
	case errors.Is(err, cuda.ErrorInvalidValue):
		// Not host memory the driver can lock: device memory.
	default:
		return fmt.Errorf("register buffer [%#x, +%d): %w", ptr, size, err)
	}
	s.mu.regs[ptr] = reg
	return nil
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
	if !ok {
		return fmt.Errorf("%w: no buffer registered at %#x", ErrNotRegistered, ptr)
	}
	if r.host {
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
		if r.host {
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
