package main

import (
	"strconv"
	"testing"
)

// TestPlurals: counts of one read in the singular.
func TestPlurals(t *testing.T) {
	node := writeTemp(t, "node.json", migctl(t, "", "discover", "--fake", "1xA30", "--node", "n1").stdout)
	migctl(t, "", "status", "--node", node).check(t, exitOK, []string{"node n1: 1 MIG GPU (NVIDIA A30 x1), 0 active pods hold 0 reservations (0 realized, 0 not yet), 0 pending MIG pods"}, nil)
	migctl(t, "", "status", "--node", testdata("node.json"), "--pods", testdata("pods.json")).check(t, exitOK,
		[]string{"2 MIG GPUs", "3 active pods hold 4 reservations", "1 pending MIG pod\n"}, nil)
	migctl(t, "", "simulate", "--model", "A30", "--gpus", "1", "--synthetic", "1", "--arrivals", "1").check(t, exitOK, []string{", 2 events\n"}, nil)
}

// TestSimulateRefusesWhatItCannotHold: a synthetic run larger than
// simulate can hold in memory is a usage error that says why, before
// anything is generated.
func TestSimulateRefusesWhatItCannotHold(t *testing.T) {
	for _, n := range []int{maxArrivals + 1, 2000000000} {
		migctl(t, "", "simulate", "--model", "A30", "--gpus", "8", "--synthetic", "1", "--arrivals", strconv.Itoa(n)).
			check(t, exitUsage, nil, []string{"--arrivals " + strconv.Itoa(n) + ": at most 1000000", "memory"})
	}
}

// TestVersionHelp: version is a command like the others; --help describes
// it instead of printing the version.
func TestVersionHelp(t *testing.T) {
	r := migctl(t, "", "version", "--help")
	r.check(t, exitOK, []string{"usage: migctl version\n", "VCS revision"}, nil)
	migctl(t, "", "version", "extra").check(t, exitUsage, nil, []string{`unexpected argument "extra"`})
}
