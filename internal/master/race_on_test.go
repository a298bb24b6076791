//go:build race

package master

// raceEnabled: the race detector's instrumentation changes allocation
// counts.
const raceEnabled = true
