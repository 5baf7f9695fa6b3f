package systemtest_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
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
	bound = testwait.Bound()
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

// ranAll fails t, when it passed, if rapid ran fewer sequences than it was
// asked for (ran): rapid stops drawing, and passes, once the test's
// deadline (go test's -timeout) is near, so a slow run would claim more
// than it checked. Call it where the count rapid was asked for is in
// force (inside withChecks's f).
func ranAll(t *testing.T, ran int) {
	want, err := strconv.Atoi(flag.Lookup("rapid.checks").Value.String())
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		want /= 5 // as rapid does
	}
	if !t.Failed() && ran < want {
		t.Errorf("rapid ran %d of the %d sequences asked for: it stops early when the test's deadline nears; give go test a longer -timeout", ran, want)
	}
}
