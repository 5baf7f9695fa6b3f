package deviceplugin

import "time"

// SetRecordInterval sets how often the health loop reads the node's
// health record while it names a GPU, for tests, as SetPruneInterval.
func SetRecordInterval(d time.Duration) (restore func()) {
	old := recordInterval
	recordInterval = d
	return func() { recordInterval = old }
}

// SetPruneInterval sets how often the health loop prunes vanished MIG
// devices, for tests; call it before starting a plugin and the returned
// func after stopping it.
func SetPruneInterval(d time.Duration) (restore func()) {
	old := pruneInterval
	pruneInterval = d
	return func() { pruneInterval = old }
}
