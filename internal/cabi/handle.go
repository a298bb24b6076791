package cabi

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// entry is one open Store behind a handle.
type entry struct {
	store Backend

	// errMu guards lastErr. It is separate from the table lock so that
	// recording an error never contends with opening or closing other
	// handles.
	errMu   sync.Mutex
	lastErr string

	// views are the Store's held views, by views handle (views.go).
	views viewsTable
	// streams are the Store's open put streams, by stream handle
	// (putstream.go).
	streams streamsTable
}

func (e *entry) setErr(err error) {
	e.errMu.Lock()
	e.lastErr = err.Error()
	e.errMu.Unlock()
}

func (e *entry) lastError() string {
	e.errMu.Lock()
	defer e.errMu.Unlock()
	return e.lastErr
}

// table maps handles to open Stores. Handles are positive, start at 1 and
// are never reused within a process, so a stale handle can never reach
// another Store.
var table struct {
	mu      sync.Mutex // guards next, entries and global
	next    int64
	entries map[int64]*entry
	// global is the last error not attributable to an open handle (a failed
	// Open, an invalid handle); kvfabric_last_error(0, …) reads it.
	global string
}

func init() { table.entries = map[int64]*entry{} }

func register(s Backend) int64 {
	table.mu.Lock()
	defer table.mu.Unlock()
	table.next++
	table.entries[table.next] = &entry{store: s}
	return table.next
}

func lookup(h int64) (*entry, error) {
	table.mu.Lock()
	defer table.mu.Unlock()
	e, ok := table.entries[h]
	if !ok {
		return nil, fmt.Errorf("%w %d", errInvalidHandle, h)
	}
	return e, nil
}

// release removes h if it still refers to e.
func release(h int64, e *entry) {
	table.mu.Lock()
	defer table.mu.Unlock()
	if table.entries[h] == e {
		delete(table.entries, h)
	}
}

func setGlobalErr(err error) {
	table.mu.Lock()
	table.global = err.Error()
	table.mu.Unlock()
}

// OpenHandles is the number of open handles (tests and leak checks).
func OpenHandles() int {
	table.mu.Lock()
	defer table.mu.Unlock()
	return len(table.entries)
}

// LastError returns the last error message recorded on h (h == 0, or a
// handle that is not open: the last error not attributable to an open
// handle). The message describes the most recent failed call on the
// handle; concurrent callers on one handle may see each other's messages.
func LastError(h int64) string {
	if h != 0 {
		if e, err := lookup(h); err == nil {
			return e.lastError()
		}
	}
	table.mu.Lock()
	defer table.mu.Unlock()
	return table.global
}

// CopyLastError copies LastError(h) into buf as a NUL-terminated string,
// truncating to len(buf)-1 bytes, and returns the message's full length in
// bytes (excluding the NUL), so a caller can retry with a larger buffer.
func CopyLastError(h int64, buf []byte) uint64 {
	msg := LastError(h)
	if len(buf) > 0 {
		n := copy(buf[:len(buf)-1], msg)
		buf[n] = 0
	}
	return uint64(len(msg))
}

// call runs fn against handle h, records its error as h's last error and
// returns its status. A panic in fn becomes StatusPanic with the panic value
// and stack in the message.
func call(h int64, fn func(e *entry) error) (st int32) {
	var e *entry
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
			record(e, err)
			st = StatusPanic
		}
	}()
	e, err := lookup(h)
	if err == nil {
		err = fn(e)
	}
	if err != nil {
		record(e, err)
	}
	return statusOf(err)
}

func record(e *entry, err error) {
	if e != nil {
		e.setErr(err)
		return
	}
	setGlobalErr(err)
}

// Panicked records a panic value recovered outside call (in capi's C
// conversion layer) as the global last error and returns StatusPanic.
func Panicked(r any) int32 {
	setGlobalErr(fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack()))
	return StatusPanic
}
