package client

import "time"

// SetTimeNow replaces the clock lease checks use; the returned func restores it.
// Safe while Stores run (timeNow loads it atomically).
func SetTimeNow(f func() time.Time) (restore func()) {
	old := clock.Swap(&f)
	return func() { clock.Store(old) }
}

// SetReleaseDelay replaces how long a lease release waits for others (for
// Stores opened afterwards); the returned func restores it.
func SetReleaseDelay(d time.Duration) (restore func()) {
	old := releaseDelay
	releaseDelay = d
	return func() { releaseDelay = old }
}

// ReleaseBatch is how many queued lease releases are sent without waiting.
const ReleaseBatch = releaseBatch

// CarryMax is the most queued lease releases a get carries.
const CarryMax = carryMax

// ForceEmbedded makes st treat its master as an embedded one, as it does a
// master.NewEmbedded client: for tests whose master client wraps one. Call
// it before st's first call.
func ForceEmbedded(st *Store) { st.embedded = true }

// RPCDeadline reports whether st's master calls go through deadlineMaster
// (rpc_timeout's context and timer on every call).
func RPCDeadline(st *Store) bool {
	_, ok := st.m.(deadlineMaster)
	return ok
}
