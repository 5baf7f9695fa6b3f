// Package testwait bounds how long a test waits for an event before it
// calls the test hung.
//
// A test that waits for something to happen (a reconcile pass, a watch
// event, a socket) must not fail because a loaded machine took longer than
// some fixed number of seconds: that is a flaky test, not a finding. The
// only bound such a wait needs is the one the test binary already has, its
// -timeout. [Bound] returns the time left before that timeout, less a
// margin, so a hung wait still fails with its own message rather than the
// binary's panic, and a slow one never fails at all.
//
// It reads the testing package's flags and so must be called after they
// are parsed: from a test, or from TestMain after flag.Parse.
package testwait

import (
	"flag"
	"time"
)

// start approximates when the test binary's -timeout began to count.
var start = time.Now()

// margin is left before the binary's deadline, so that a failed wait can
// report and clean up before the testing package panics.
const margin = 15 * time.Second

// NoTimeout is the bound when the binary runs without a -timeout (-timeout 0).
const NoTimeout = time.Hour

// minimum keeps the bound useful when the deadline is already near.
const minimum = time.Second

// Bound returns how long a wait may last before the test calls it hung: the
// time left until the test binary's -timeout, less a margin, at least one
// second; [NoTimeout] without a timeout.
func Bound() time.Duration {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return NoTimeout
	}
	timeout, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || timeout <= 0 {
		return NoTimeout
	}
	return max(timeout-time.Since(start)-margin, minimum)
}
