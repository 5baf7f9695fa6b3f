//go:build unix

package dra_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user plus system CPU time: on a shared, loaded
// machine it moves less than wall time with other people's load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
