package master

import (
	"math/bits"
	"sync"
)

// Buffers of the fast path's large calls. A connection keeps its buffers
// between calls up to fastBufKeep (fastConn.buf, fastConnState.in and
// out); a call larger than that — a batch of thousands of keys, a few
// hundred KB each way — takes its buffers from these pools and gives them
// back once the call is done, instead of allocating them for each call
// (four per call: the request and the answer on each side). Pooled, they
// are shared by every connection of the process and dropped by the GC when
// no calls need them, so an idle connection holds nothing large. On the
// dev VM a one-caller 4096-key PutStart over the fast path took 538–664
// ns/key pooled against 659–698 allocated per call
// (docs/perf/logs-2026-12-05-s23/devvm-fastbuf.txt).
//
// A pooled buffer is given back only when nothing refers to it: decoded
// messages never alias the bytes they were decoded from (the server
// decodes from a string copy of the request; the client's answers are
// copied out by their decoders), as the reuse of the small kept buffers
// already requires.

const (
	bigBufMinShift = 17 // 128 KiB: the smallest pooled size, above fastBufKeep
	bigBufMaxShift = 23 // 8 MiB: a whole frame (fastMaxFrame) and its header
	// Each power of two is cut into bigBufSteps classes, so that a buffer
	// made for a call is at most 1/bigBufSteps larger than the call (its
	// bytes are zeroed when made: a pool that the GC emptied costs that).
	bigBufStepBits = 3
	bigBufSteps    = 1 << bigBufStepBits
)

var bigBufs [(bigBufMaxShift - bigBufMinShift) * bigBufSteps]sync.Pool // of *[]byte, by size class

// bigBufClass returns the class of a buffer of at least n bytes and the
// class's size, or -1 when n is beyond the largest class.
func bigBufClass(n int) (int, int) {
	if n <= 1<<bigBufMinShift {
		n = 1<<bigBufMinShift + 1
	}
	shift := bits.Len(uint(n-1)) - 1 // 2^shift < n <= 2^(shift+1)
	if shift >= bigBufMaxShift {
		return -1, 0
	}
	step := 1 << (shift - bigBufStepBits)
	k := (n - 1 - 1<<shift) / step // n <= 2^shift + (k+1)*step
	return (shift-bigBufMinShift)*bigBufSteps + k, 1<<shift + (k+1)*step
}

// getBigBuf returns an empty buffer of capacity at least n, pooled when n
// is within the classes.
func getBigBuf(n int) []byte {
	c, size := bigBufClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if p, _ := bigBufs[c].Get().(*[]byte); p != nil {
		return (*p)[:0]
	}
	return make([]byte, 0, size)
}

// putBigBuf gives b back to its class's pool: only a buffer of a class's
// exact capacity (getBigBuf's), and never one a message still refers to.
func putBigBuf(b []byte) {
	c, size := bigBufClass(cap(b))
	if c < 0 || cap(b) != size {
		return
	}
	b = b[:0]
	bigBufs[c].Put(&b)
}

// growBuf returns b with room for n more bytes: b itself, or its bytes
// copied into a larger buffer (pooled past fastBufKeep; b, if pooled, is
// given back).
func growBuf(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	need := len(b) + n
	var nb []byte
	if need > fastBufKeep {
		nb = getBigBuf(need)
	} else {
		nb = make([]byte, 0, need)
	}
	nb = append(nb, b...)
	putBigBuf(b)
	return nb
}
