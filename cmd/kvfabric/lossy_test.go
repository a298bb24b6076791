package main

import (
	"maps"
	"sync"

	"github.com/kvfabric/kvfabric/internal/cuda"
)

// lossyDriver wraps a cuda.Driver and silently skips the copy calls drop
// picks: a data-path fault no driver error reports, which only byte
// verification can catch. It tells puts from gets by the VMM mappings it has
// seen (store memory: the provider's segments, bench's DRAM pool): a
// MemcpyAsync or MemcpyBatchAsync call is "put" when every copy writes mapped
// memory from unmapped memory, "get" when every copy reads mapped memory
// into unmapped memory, and "" otherwise. SM-kernel copies are not seen, so
// tests that use it route blocks to the copy engine.
//
// drop gets the method name ("MemcpyAsync", "MemcpyBatchAsync") and runs
// under the wrapper's lock, so it may keep state without a lock of its own.
type lossyDriver struct {
	cuda.Driver
	drop func(method, dir string, copies []cuda.Copy) bool

	mu struct {
		sync.Mutex
		// guards everything below
		maps    map[cuda.DevicePtr]uint64 // mapped ranges: start -> size
		seen    map[string]int            // calls per direction
		dropped int                       // calls skipped
	}
}

var (
	_ cuda.Driver         = (*lossyDriver)(nil)
	_ cuda.KernelEmulator = (*lossyDriver)(nil)
	_ cuda.ObjectCounter  = (*lossyDriver)(nil)
)

func newLossy(d cuda.Driver, drop func(method, dir string, copies []cuda.Copy) bool) *lossyDriver {
	l := &lossyDriver{Driver: d, drop: drop}
	l.mu.maps = make(map[cuda.DevicePtr]uint64)
	l.mu.seen = make(map[string]int)
	return l
}

// RegisterKernel forwards to the wrapped simulator, so the transfer engine
// finds its kernel emulation through the wrapper.
func (l *lossyDriver) RegisterKernel(name string, fn cuda.KernelFunc) {
	l.Driver.(cuda.KernelEmulator).RegisterKernel(name, fn)
}

// LiveObjects forwards to the wrapped driver, so leak checks still run.
func (l *lossyDriver) LiveObjects() cuda.Objects {
	return l.Driver.(cuda.ObjectCounter).LiveObjects()
}

func (l *lossyDriver) MemMap(ctx cuda.Context, ptr cuda.DevicePtr, size, offset uint64, h cuda.AllocHandle) error {
	if err := l.Driver.MemMap(ctx, ptr, size, offset, h); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.maps[ptr] = size
	return nil
}

func (l *lossyDriver) MemUnmap(ctx cuda.Context, ptr cuda.DevicePtr, size uint64) error {
	if err := l.Driver.MemUnmap(ctx, ptr, size); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.maps, ptr)
	return nil
}

func (l *lossyDriver) MemcpyAsync(ctx cuda.Context, copies []cuda.Copy, s cuda.Stream) error {
	if l.skip("MemcpyAsync", copies) {
		return nil
	}
	return l.Driver.MemcpyAsync(ctx, copies, s)
}

func (l *lossyDriver) MemcpyBatchAsync(ctx cuda.Context, copies []cuda.Copy, s cuda.Stream) error {
	if l.skip("MemcpyBatchAsync", copies) {
		return nil
	}
	return l.Driver.MemcpyBatchAsync(ctx, copies, s)
}

// skip classifies copies and asks drop.
func (l *lossyDriver) skip(method string, copies []cuda.Copy) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	dir := l.dirLocked(copies)
	if dir == "" {
		return false
	}
	l.mu.seen[dir]++
	if !l.drop(method, dir, copies) {
		return false
	}
	l.mu.dropped++
	return true
}

func (l *lossyDriver) dirLocked(copies []cuda.Copy) string {
	put, get := len(copies) > 0, len(copies) > 0
	for _, c := range copies {
		d, s := l.mappedLocked(c.Dst, c.Len), l.mappedLocked(c.Src, c.Len)
		put = put && d && !s
		get = get && s && !d
	}
	switch {
	case put:
		return "put"
	case get:
		return "get"
	}
	return ""
}

func (l *lossyDriver) mappedLocked(p cuda.DevicePtr, n uint64) bool {
	for start, size := range l.mu.maps {
		if p >= start && uint64(p-start)+n <= size {
			return true
		}
	}
	return false
}

// counts returns the calls seen per direction and the calls skipped.
func (l *lossyDriver) counts() (seen map[string]int, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.mu.seen), l.mu.dropped
}
