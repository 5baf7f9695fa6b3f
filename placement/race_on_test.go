//go:build race

package placement_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts of pooled paths are not checked under it.
const raceEnabled = true
