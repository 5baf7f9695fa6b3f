//go:build !unix

package dra_test

import "time"

// cpuTime is not measured here; cpu-ns/op is then not reported.
func cpuTime() time.Duration { return 0 }
