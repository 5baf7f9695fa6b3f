//go:build race

package schedplugin_test

// raceEnabled: the race detector makes sync.Pool drop items at random (the
// ledger pools its selectors), so allocation counts are not checked under
// it.
const raceEnabled = true
