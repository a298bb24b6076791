package sim

import (
	"fmt"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// accessibleLocked reports whether device dev may read (or, with write,
// write) every byte of [p, p+n): the range must be tiled, without gaps, by
// mappings whose access for dev was granted (read-write for writes),
// cuMemAlloc buffers, or registered host memory (not read-only for
// writes). n must be > 0.
func (d *Driver) accessibleLocked(dev cuda.Device, p, n uint64, write bool) bool {
	end := p + n
	if end < p {
		return false
	}
	for i, cur := d.regionIndexLocked(p), p; cur < end; i++ {
		if i >= len(d.mu.regions) {
			return false
		}
		r := d.mu.regions[i]
		if r.start > cur {
			return false
		}
		switch {
		case r.m != nil:
			f := r.m.access[dev]
			if f&cuda.AccessRead == 0 || (write && f != cuda.AccessReadWrite) {
				return false
			}
		case r.hr != nil:
			if write && r.hr.flags&hostRegisterReadOnly != 0 {
				return false
			}
		}
		cur = r.end
	}
	return true
}

// copyLocked performs one validated copy for dev.
func (d *Driver) copyLocked(dev cuda.Device, c cuda.Copy) cuda.Result {
	if c.Len == 0 {
		return cuda.Success
	}
	if !d.accessibleLocked(dev, uint64(c.Dst), c.Len, true) || !d.accessibleLocked(dev, uint64(c.Src), c.Len, false) {
		return cuda.ErrorInvalidValue
	}
	copy(bytesAt(uint64(c.Dst), c.Len), bytesAt(uint64(c.Src), c.Len))
	return cuda.Success
}

// MemcpyHtoD copies src to dst, which must be writable by the context's
// device.
func (d *Driver) MemcpyHtoD(ctx cuda.Context, dst cuda.DevicePtr, src []byte) error {
	return d.call("MemcpyHtoD", func() string { return fmt.Sprintf("ctx=%#x dst=%#x len=%d", ctx, dst, len(src)) }, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		n := uint64(len(src))
		if n == 0 {
			return cuda.Success
		}
		if !d.accessibleLocked(dev, uint64(dst), n, true) {
			return cuda.ErrorInvalidValue
		}
		copy(bytesAt(uint64(dst), n), src)
		return cuda.Success
	})
}

// MemcpyDtoH copies len(dst) bytes from src, which must be readable by the
// context's device.
func (d *Driver) MemcpyDtoH(ctx cuda.Context, dst []byte, src cuda.DevicePtr) error {
	return d.call("MemcpyDtoH", func() string { return fmt.Sprintf("ctx=%#x src=%#x len=%d", ctx, src, len(dst)) }, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		n := uint64(len(dst))
		if n == 0 {
			return cuda.Success
		}
		if !d.accessibleLocked(dev, uint64(src), n, false) {
			return cuda.ErrorInvalidValue
		}
		copy(dst, bytesAt(uint64(src), n))
		return cuda.Success
	})
}

// MemcpyAsync runs the copies in order on s (synchronously, or behind a
// hold). The first invalid copy fails the call with
// CUDA_ERROR_INVALID_VALUE; the copies before it have been performed (or
// enqueued), as their enqueued counterparts would be.
func (d *Driver) MemcpyAsync(ctx cuda.Context, copies []cuda.Copy, s cuda.Stream) error {
	return d.call("MemcpyAsync", func() string {
		return fmt.Sprintf("ctx=%#x n=%d%s stream=%#x", ctx, len(copies), copiesSummary(copies), s)
	}, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		if d.queuedLocked(s) {
			for i, c := range copies {
				if c.Len > 0 && (!d.accessibleLocked(dev, uint64(c.Dst), c.Len, true) || !d.accessibleLocked(dev, uint64(c.Src), c.Len, false)) {
					// The copies before it are enqueued, as per-copy
					// cuMemcpyAsync calls would be.
					d.deferCopiesLocked(dev, copies[:i], s)
					return cuda.ErrorInvalidValue
				}
			}
			d.deferCopiesLocked(dev, copies, s)
		} else {
			for _, c := range copies {
				if r := d.copyLocked(dev, c); r != cuda.Success {
					return r
				}
			}
		}
		d.countOpsLocked(s, len(copies))
		return cuda.Success
	})
}

// MemcpyBatchAsync validates every copy, then runs them all on s. It fails
// with CUDA_ERROR_NOT_SUPPORTED when the capability is absent and with
// CUDA_ERROR_INVALID_VALUE for an empty batch or any invalid copy (then
// nothing is copied).
func (d *Driver) MemcpyBatchAsync(ctx cuda.Context, copies []cuda.Copy, s cuda.Stream) error {
	return d.call("MemcpyBatchAsync", func() string {
		return fmt.Sprintf("ctx=%#x n=%d%s stream=%#x", ctx, len(copies), copiesSummary(copies), s)
	}, func() cuda.Result {
		d.mu.RLock()
		defer d.mu.RUnlock()
		dev, r := d.ctxDeviceLocked(ctx)
		if r != cuda.Success {
			return r
		}
		if !d.batchSupported() {
			return cuda.ErrorNotSupported
		}
		if r := d.streamOKLocked(ctx, s); r != cuda.Success {
			return r
		}
		// The real driver (580 / CUDA 13.0, H200) refuses the default
		// streams (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
		if s <= 2 {
			return cuda.ErrorInvalidValue
		}
		if len(copies) == 0 {
			return cuda.ErrorInvalidValue
		}
		for _, c := range copies {
			if c.Len == 0 {
				return cuda.ErrorInvalidValue
			}
			if !d.accessibleLocked(dev, uint64(c.Dst), c.Len, true) || !d.accessibleLocked(dev, uint64(c.Src), c.Len, false) {
				return cuda.ErrorInvalidValue
			}
		}
		if !d.deferCopiesLocked(dev, copies, s) {
			for _, c := range copies {
				copy(bytesAt(uint64(c.Dst), c.Len), bytesAt(uint64(c.Src), c.Len))
			}
		}
		d.countOpsLocked(s, len(copies))
		return cuda.Success
	})
}

// copiesSummary names the first copy of a batch for the call log.
func copiesSummary(copies []cuda.Copy) string {
	if len(copies) == 0 {
		return ""
	}
	c := copies[0]
	return fmt.Sprintf(" first={dst=%#x src=%#x len=%d}", c.Dst, c.Src, c.Len)
}
