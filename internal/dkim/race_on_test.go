//go:build race

package dkim

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts that rely on reuse do not hold.
const raceEnabled = true
