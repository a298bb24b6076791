package client

import "time"

// SetTimeNow replaces the clock lease checks use; the returned func restores it.
func SetTimeNow(f func() time.Time) (restore func()) {
	old := timeNow
	timeNow = f
	return func() { timeNow = old }
}
