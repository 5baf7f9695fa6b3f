package deviceplugin

import "time"

// SetPruneInterval sets how often the health loop prunes vanished MIG
// devices, for tests; call it before starting a plugin and the returned
// func after stopping it.
func SetPruneInterval(d time.Duration) (restore func()) {
	old := pruneInterval
	pruneInterval = d
	return func() { pruneInterval = old }
}
