package systemtest_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// Defaults for CI: the issue asks for at least 2,000 sequences; 50 steps on
// average per sequence (rapid's default is 30) reach deeper interleavings
// of restarts, faults and forgeries.
var defaults = map[string]string{"rapid.checks": "2000", "rapid.steps": "50"}
var envNames = map[string]string{"rapid.checks": "RAPID_CHECKS", "rapid.steps": "RAPID_STEPS"}

// chosen records the rapid flags the caller set (by flag or environment).
var chosen = map[string]bool{}

// TestMain raises rapid's default check count and sequence length for this
// package unless the caller chose them (-rapid.checks, -rapid.steps, or
// RAPID_CHECKS, RAPID_STEPS), and checks that no goroutine outlives the
// tests.
func TestMain(m *testing.M) {
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { chosen[f.Name] = true })
	for name, value := range defaults {
		if _, ok := os.LookupEnv(envNames[name]); ok || chosen[name] {
			chosen[name] = true
			continue
		}
		if err := flag.Set(name, value); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// withChecks runs f with rapid's check count set to n unless the caller
// chose one, and restores it after.
func withChecks(t *testing.T, n int, f func()) {
	if chosen["rapid.checks"] {
		f()
		return
	}
	old := flag.Lookup("rapid.checks").Value.String()
	if err := flag.Set("rapid.checks", strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := flag.Set("rapid.checks", old); err != nil {
			t.Error(err)
		}
	}()
	f()
}
