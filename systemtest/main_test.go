package systemtest_test

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Defaults for CI: the issue asks for at least 2,000 sequences; 50 steps on
// average per sequence (rapid's default is 30) reach deeper interleavings
// of restarts, faults and forgeries.
var defaults = map[string]string{"rapid.checks": "2000", "rapid.steps": "50"}
var envNames = map[string]string{"rapid.checks": "RAPID_CHECKS", "rapid.steps": "RAPID_STEPS"}

// TestMain raises rapid's default check count and sequence length for this
// package unless the caller chose them (-rapid.checks, -rapid.steps, or
// RAPID_CHECKS, RAPID_STEPS), and checks that no goroutine outlives the
// tests.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for name, value := range defaults {
		if _, ok := os.LookupEnv(envNames[name]); ok || explicit[name] {
			continue
		}
		if err := flag.Set(name, value); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
