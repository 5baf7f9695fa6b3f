package placement_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/placement"
)

// TestUnschedulableCountsUnhealthyGPUs: a pod that does not fit says how
// many allowed GPUs were skipped as unhealthy, through Select and the
// scheduler's ledger alike.
func TestUnschedulableCountsUnhealthyGPUs(t *testing.T) {
	tests := []struct {
		name          string
		unhealthy     []bool
		devices       int
		wantReason    error
		wantUnhealthy int
	}{
		{name: "every GPU unhealthy", unhealthy: []bool{true, true}, devices: 1, wantReason: placement.ErrExcluded, wantUnhealthy: 2},
		{name: "healthy GPU full, one unhealthy", unhealthy: []bool{true, false}, devices: 9, wantReason: placement.ErrCapacity, wantUnhealthy: 1},
		{name: "no unhealthy GPU", unhealthy: []bool{false}, devices: 9, wantReason: placement.ErrCapacity, wantUnhealthy: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := healthNode(t, tc.unhealthy...)
			l := placement.NewLedger(placement.LedgerOptions{})
			if err := l.SetNode("n", gpus); err != nil {
				t.Fatal(err)
			}
			req := placement.Request{Containers: []placement.ContainerRequest{{Devices: tc.devices, Memory: placement.MiB(4000)}}}
			states, _ := l.Node("n")
			_, selErr := placement.Select(states, &req, nil)
			_, evalErr := l.Evaluate("n", &req)
			for _, err := range []error{selErr, evalErr} {
				var ue *placement.UnschedulableError
				if !errors.As(err, &ue) || !errors.Is(err, tc.wantReason) {
					t.Fatalf("err = %v, want an UnschedulableError for %v", err, tc.wantReason)
				}
				if ue.Unhealthy != tc.wantUnhealthy {
					t.Errorf("Unhealthy = %d, want %d", ue.Unhealthy, tc.wantUnhealthy)
				}
			}
		})
	}
}
