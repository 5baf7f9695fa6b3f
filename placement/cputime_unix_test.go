//go:build unix

package placement_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user+system) the process has used. The
// benchmarks report it per op next to wall time because the shared build
// machine is often oversubscribed, which inflates ns/op but not CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
