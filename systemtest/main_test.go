package systemtest_test

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// defaultChecks is the number of rapid sequences CI runs: the issue asks for
// at least 2,000.
const defaultChecks = "2000"

// TestMain raises rapid's default check count for this package unless the
// caller chose one with -rapid.checks or RAPID_CHECKS, and checks that no
// goroutine outlives the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			explicit = true
		}
	})
	if _, ok := os.LookupEnv("RAPID_CHECKS"); !ok && !explicit {
		if err := flag.Set("rapid.checks", defaultChecks); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
