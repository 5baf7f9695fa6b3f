//go:build race

package systemtest_test

// devicePluginChecks is TestDevicePlugin's default sequence count under the
// race detector, which makes the real plugin's goroutines, gRPC server and
// informer several times slower, and which CI runs: kept small while a
// rare failure the model found stays unexplained (see the package
// documentation, "Running").
const devicePluginChecks = 100
