//go:build !race

package systemtest_test

// devicePluginChecks is TestDevicePlugin's default sequence count.
const devicePluginChecks = 2000
