//go:build !race

package systemtest_test

// devicePluginChecks is TestDevicePlugin's default sequence count: CI's
// 2,000, like TestSystem's (see the package documentation, "Running").
const devicePluginChecks = 2000

// raceEnabled is -model.concurrent's default: without the race detector
// TestSystem serves a burst's calls one after another in a drawn order, so
// its failures replay.
const raceEnabled = false
