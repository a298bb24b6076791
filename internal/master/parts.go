package master

import (
	"runtime"
	"sync"
)

// The per-item work of a large call that needs no lock — validating and
// preparing a PutStart batch (Service.prepare), encoding an answer's
// results (putStartResponse, getResponse) — is split over cores: runs of
// at least partMin consecutive items, at most maxParts of them. The
// master's work under its lock stays one pass over the whole batch, in
// the batch's order; only what surrounds it runs in parts. A remote
// 4096-key PutStart spent 115 of its 258 ns per key on the server outside
// the lock (dev VM profile, docs/perf/logs-2026-12-05-s27/devvm).
const (
	partMin  = 1024
	maxParts = 4
)

// partsFor returns how many parts n items are split into.
func partsFor(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), maxParts, n/partMin))
}

// runParts calls f(p, lo, hi) for each of parts consecutive runs [lo, hi)
// of [0, n), part 0 on the calling goroutine and the others each on its
// own, and returns when all have returned.
func runParts(n, parts int, f func(p, lo, hi int)) {
	if parts <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Go(func() { f(p, p*n/parts, (p+1)*n/parts) })
	}
	f(0, 0, n/parts)
	wg.Wait()
}

// appendParts appends the encodings of n items to b: enc(b, lo, hi)
// appends those of items [lo, hi). Split into parts (partsFor), part 0 is
// encoded into b (which the caller sized for the whole answer) and each
// other part into a buffer of its own (size(lo, hi) bytes is a good
// guess), copied after it in order.
func appendParts(b []byte, n int, size func(lo, hi int) int, enc func(b []byte, lo, hi int) ([]byte, error)) ([]byte, error) {
	parts := partsFor(n)
	if parts == 1 {
		return enc(b, 0, n)
	}
	var bufs [maxParts][]byte
	var errs [maxParts]error
	runParts(n, parts, func(p, lo, hi int) {
		if p == 0 {
			b, errs[0] = enc(b, lo, hi)
			return
		}
		bufs[p], errs[p] = enc(growBuf(nil, size(lo, hi)), lo, hi)
	})
	var err error
	for p := range parts {
		if err == nil && errs[p] != nil {
			err = errs[p]
		}
		if p > 0 {
			if err == nil {
				b = append(b, bufs[p]...)
			}
			putBigBuf(bufs[p])
		}
	}
	return b, err
}
