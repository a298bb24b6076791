package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	s.addRegLocked(reg)
	s.mu.Unlock()
	err := s.pin(reg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.dropRegLocked(reg)
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

// holdLocked finds the registrations [p, p+n) overlaps and adds those not
// in held yet to it, taking a use of each (released by release), so that
// no UnregisterBuffer of them completes before the batch's copies. inside
// is the registered buffer the region lies within, if one (then the
// driver need not classify it). A region touching a buffer that is being
// unregistered is ErrNotRegistered, and nothing is taken for it.
// Registrations do not overlap and are kept sorted by address (regsByPtr),
// so the ones a region touches are found by binary search: a batch of
// thousands of regions costs a lookup each, whatever the registrations.
func (s *Store) holdLocked(p uintptr, n uint64, held *[]*registration) (inside *registration, err error) {
	lo, hi := uint64(p), uint64(p)+n
	regs := s.mu.regsByPtr
	// The first registration that ends after lo; those before it cannot
	// overlap [lo, hi).
	first, _ := slices.BinarySearchFunc(regs, lo, func(r *registration, lo uint64) int {
		if r.ptr+r.size <= lo {
			return -1
		}
		return 1
	})
	end := first
	for ; end < len(regs) && regs[end].ptr < hi; end++ {
		r := regs[end]
		if r.pending {
			continue
		}
		if r.unregistering > 0 {
			return nil, fmt.Errorf("%w: [%#x, +%d) is in buffer %#x, which is being unregistered", ErrNotRegistered, p, n, r.ptr)
		}
		if lo >= r.ptr && hi <= r.ptr+r.size {
			inside = r
		}
	}
	for _, r := range regs[first:end] {
		if r.pending || slices.Contains(*held, r) {
			continue
		}
		r.users++
		*held = append(*held, r)
	}
	return inside, nil
}

// addRegLocked records reg (which overlaps no registration).
func (s *Store) addRegLocked(reg *registration) {
	s.mu.regs[uintptr(reg.ptr)] = reg
	i, _ := slices.BinarySearchFunc(s.mu.regsByPtr, reg.ptr, func(r *registration, p uint64) int { return cmp.Compare(r.ptr, p) })
	s.mu.regsByPtr = slices.Insert(s.mu.regsByPtr, i, reg)
}

// dropRegLocked forgets reg.
func (s *Store) dropRegLocked(reg *registration) {
	delete(s.mu.regs, uintptr(reg.ptr))
	s.mu.regsByPtr = slices.DeleteFunc(s.mu.regsByPtr, func(r *registration) bool { return r == reg })
}

// release drops a batch's uses of its registrations (holdLocked) once its
// copies are complete or failed, and wakes the UnregisterBuffer calls
// waiting for the last one.
func (s *Store) release(held []*registration) {
	if len(held) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range held {
		r.users--
		if r.users == 0 && r.idle != nil {
			close(r.idle)
			r.idle = nil
		}
	}
}

// UnregisterTimeout bounds how long UnregisterBuffer waits for the batches
// using the buffer.
const UnregisterTimeout = 30 * time.Second

// UnregisterBuffer undoes RegisterBuffer for the buffer registered at ptr.
// Once it returns nil no copy into or out of the buffer runs or starts, and
// the caller may free the memory.
//
// A batch holds the buffers its regions lie in from its buffer check until
// its copies are complete or failed. UnregisterBuffer waits for those
// batches — at most UnregisterTimeout, less if ctx ends first — and
// meanwhile new batches refuse the buffer (ErrNotRegistered). It waits
// rather than failing at once because the usual caller unregisters and then
// frees the memory (a tensor going away): an immediate failure would push a
// retry loop into every caller, and one that frees anyway would have the SM
// copy kernel fault on freed memory, which poisons the CUDA context of the
// whole process. A hold lasts one batch's copies, so the wait is short.
// When the wait ends first, the error is ErrBufferInUse, naming the buffer
// and how many batches still use it, and nothing changed: the buffer stays
// registered and usable.
func (s *Store) UnregisterBuffer(ctx context.Context, ptr uintptr) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	ctx, cancel := context.WithTimeout(ctx, UnregisterTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.mu.regs[ptr]
	if !ok || r.pending {
		return fmt.Errorf("%w: no buffer registered at %#x", ErrNotRegistered, ptr)
	}
	if r.users > 0 {
		start := time.Now()
		r.unregistering++
		for r.users > 0 {
			if r.idle == nil {
				r.idle = make(chan struct{})
			}
			idle := r.idle
			s.mu.Unlock()
			select {
			case <-idle:
			case <-ctx.Done():
			}
			s.mu.Lock()
			if r.users > 0 && ctx.Err() != nil {
				r.unregistering--
				return fmt.Errorf("%w: unregister buffer %#x (%d bytes): %d batch(es) still copying after %v: %w",
					ErrBufferInUse, ptr, r.size, r.users, time.Since(start).Round(time.Millisecond), ctx.Err())
			}
		}
		r.unregistering--
		if s.mu.regs[ptr] != r {
			// A concurrent UnregisterBuffer of ptr finished first.
			return fmt.Errorf("%w: no buffer registered at %#x", ErrNotRegistered, ptr)
		}
	}
	if r.ours {
		if err := s.drv.MemHostUnregister(s.cctx, ptr); err != nil {
			return fmt.Errorf("unregister buffer %#x: %w", ptr, err)
		}
	}
	s.dropRegLocked(r)
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
		s.dropRegLocked(r)
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
