package client

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvfabric/kvfabric/internal/cuda"
	"github.com/kvfabric/kvfabric/internal/master"
)

// addr is the address of b's first byte (b is mmap'd memory, never moved).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// PutBytes stores data under key (put-if-absent) by copying it through the
// Store's page-locked staging buffer: for callers whose bytes live in
// ordinary host memory (Python bytes objects, the Mooncake facade's put).
func (s *Store) PutBytes(ctx context.Context, key string, data []byte, o PutOptions) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: key %q: empty value", ErrInvalidArgument, key)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	place := s.placement()
	place.Segments = o.PreferredSegments
	s.reg.RLock()
	inc := s.reg.incarnation
	s.reg.RUnlock()
	sent := timeNow()
	sk, err := s.storedKey(key)
	if err != nil {
		return err
	}
	res, err := s.m.PutStart(ctx, []master.PutStartReq{o.req(sk, uint64(len(data)), place)})
	if err != nil {
		return mapErr(fmt.Errorf("put start: %w", err))
	}
	if res[0].Err != nil {
		return mapErr(fmt.Errorf("put %q: %w", key, res[0].Err))
	}
	ref := res[0].Ref(sk)
	if err := s.stageIn(ctx, data, res[0].Replicas, inc, sent); err != nil {
		s.revoke(ctx, []master.PutRef{ref})
		return fmt.Errorf("put %q: %w", key, err)
	}
	if e := s.m.PutEnd(ctx, []master.PutRef{ref})[0]; e != nil {
		return putEndErr(key, e)
	}
	return nil
}

// stageIn copies data to every replica through the staging buffer, one
// window at a time, for a put started under registration incarnation inc
// and sent at sent (the fence of BatchPut, checked before every window).
func (s *Store) stageIn(ctx context.Context, data []byte, reps []master.Replica, inc uint64, sent time.Time) error {
	cache := newSegCache()
	defer cache.release()
	bases := make([]cuda.DevicePtr, len(reps))
	for i, r := range reps {
		b, err := s.resolve(ctx, r, uint64(len(data)), cache)
		if err != nil {
			return err
		}
		bases[i] = b
	}
	s.stagingMu.Lock()
	defer s.stagingMu.Unlock()
	buf, err := s.staging.get(s.drv, s.cctx)
	if err != nil {
		return err
	}
	s.reg.RLock()
	defer s.reg.RUnlock()
	for off := 0; off < len(data); off += len(buf) {
		if err := s.writableRLocked(inc, sent); err != nil {
			return err
		}
		n := copy(buf, data[off:])
		cs := make([]cuda.Copy, len(bases))
		for i, b := range bases {
			cs[i] = cuda.Copy{Dst: b + cuda.DevicePtr(off), Src: cuda.DevicePtr(addr(buf)), Len: uint64(n)}
		}
		if err := s.xfer.Do(0, cs); err != nil {
			return fmt.Errorf("%w: %w", ErrTransfer, err)
		}
	}
	return nil
}

// GetBytes returns a copy of key's value, copied out through the staging
// buffer.
func (s *Store) GetBytes(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	_, err := s.getBytes(ctx, key, func(size uint64) ([]byte, error) {
		out = make([]byte, size)
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetBytesInto copies key's value into dst (any host memory, e.g. a C
// caller's buffer) through the staging buffer and returns its size. The
// size comes with the master's answer, before any copy: when dst is smaller
// it returns the size and ErrBufferTooSmall, having copied and allocated
// nothing.
func (s *Store) GetBytesInto(ctx context.Context, key string, dst []byte) (uint64, error) {
	return s.getBytes(ctx, key, func(size uint64) ([]byte, error) {
		if size > uint64(len(dst)) {
			return nil, fmt.Errorf("%w: get %q: object is %d bytes, buffer %d", ErrBufferTooSmall, key, size, len(dst))
		}
		return dst[:size], nil
	})
}

// getBytes copies key's value out through the staging buffer into the
// buffer that into returns for its size. It returns the size once known,
// also with an error.
func (s *Store) getBytes(ctx context.Context, key string, into func(size uint64) ([]byte, error)) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	// Named as the reader: replicas this process cannot import (another
	// host's POSIX-fd segments, another fabric domain's) are left out.
	sk, err := s.storedKey(key)
	if err != nil {
		return 0, err
	}
	res, err := s.lookup(master.WithReader(ctx, s.clientID), []string{sk})
	if err != nil {
		return 0, mapErr(fmt.Errorf("get replicas: %w", err))
	}
	defer s.releaseLeases(ctx, res)
	r := res[0]
	if r.Err != nil {
		return 0, mapErr(fmt.Errorf("get %q: %w", key, r.Err))
	}
	if len(r.Replicas) == 0 {
		return 0, fmt.Errorf("%w: get %q: no complete replica", ErrNotFound, key)
	}
	out, err := into(r.Size)
	if err != nil {
		return r.Size, err
	}
	cache := newSegCache()
	defer cache.release()
	rep := s.pickReplica(r.Replicas)
	base, err := s.resolve(ctx, rep, r.Size, cache)
	if err != nil {
		return r.Size, fmt.Errorf("get %q: %w", key, err)
	}
	s.stagingMu.Lock()
	defer s.stagingMu.Unlock()
	buf, err := s.staging.get(s.drv, s.cctx)
	if err != nil {
		return r.Size, err
	}
	for off := uint64(0); off < r.Size; off += uint64(len(buf)) {
		n := min(uint64(len(buf)), r.Size-off)
		c := []cuda.Copy{{Dst: cuda.DevicePtr(addr(buf)), Src: base + cuda.DevicePtr(off), Len: n}}
		if err := s.xfer.Do(0, c); err != nil {
			return r.Size, fmt.Errorf("%w: get %q: %w", ErrTransfer, key, err)
		}
		copy(out[off:], buf[:n])
	}
	if now := timeNow(); now.After(r.LeaseExpiry) {
		return r.Size, fmt.Errorf("%w: get %q: lease ended %v before the copy finished", ErrLeaseExpired, key, now.Sub(r.LeaseExpiry))
	}
	return r.Size, nil
}
