//go:build race

package systemtest_test

// devicePluginChecks is TestDevicePlugin's default sequence count under the
// race detector, which makes the real plugin's goroutines, gRPC server and
// informer several times slower. CI runs the full count without it (see
// the package documentation, "Running").
const devicePluginChecks = 50

// raceEnabled is -model.concurrent's default: under the race detector
// TestSystem serves a burst's calls at once.
const raceEnabled = true
