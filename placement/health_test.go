package placement_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// healthNode builds A100 GPUs, marking those in unhealthy as
// capability.GPU.Unhealthy.
func healthNode(t *testing.T, unhealthy ...bool) []capability.GPU {
	t.Helper()
	gpus := make([]capability.GPU, len(unhealthy))
	for i, u := range unhealthy {
		gpus[i] = plainGPU(t, "A100-SXM4-40GB", i)
		gpus[i].Unhealthy = u
	}
	return gpus
}

func TestSelectSkipsUnhealthyGPUs(t *testing.T) {
	tests := []struct {
		name      string
		unhealthy []bool
		devices   int
		wantGPUs  []int // GPU of each device; nil when unschedulable
		wantErr   error
	}{
		{name: "first GPU unhealthy", unhealthy: []bool{true, false}, devices: 1, wantGPUs: []int{1}},
		{name: "only the middle GPU healthy, two devices", unhealthy: []bool{true, false, true}, devices: 2, wantGPUs: []int{1, 1}},
		{name: "all healthy uses the first", unhealthy: []bool{false, false}, devices: 1, wantGPUs: []int{0}},
		{name: "every GPU unhealthy", unhealthy: []bool{true, true}, devices: 1, wantErr: placement.ErrExcluded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := healthNode(t, tc.unhealthy...)
			states := make([]placement.GPUState, len(gpus))
			for i := range gpus {
				g, err := placement.NewGrid(&gpus[i])
				if err != nil {
					t.Fatal(err)
				}
				if got, want := g.Healthy(), !tc.unhealthy[i]; got != want {
					t.Fatalf("GPU %d Healthy() = %v, want %v", i, got, want)
				}
				states[i] = placement.GPUState{Grid: g}
			}
			req := placement.Request{Containers: []placement.ContainerRequest{{Devices: tc.devices, Memory: placement.MiB(4000)}}}
			as, err := placement.Select(states, &req, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, %v; want %v", as, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range as {
				if got, want := a.GPU, tc.wantGPUs[i]; got != want {
					t.Errorf("device %d on GPU %d, want %d", i, got, want)
				}
			}
		})
	}
}

// TestLedgerUnhealthyGPUKeepsReservations: the scheduler's ledger keeps the
// slots of pods already on an unhealthy GPU, and places new pods only on
// healthy ones.
func TestLedgerUnhealthyGPUKeepsReservations(t *testing.T) {
	gpus := healthNode(t, true, false)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n", gpus); err != nil {
		t.Fatal(err)
	}
	held := placement.Reservation{PodUID: "old", GPUUUID: gpus[0].UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
	if err := l.AddPod("n", "old", []placement.Reservation{held}); err != nil {
		t.Fatal(err)
	}
	states, _ := l.Node("n")
	if got, want := states[0].Used, placement.Occupancy(0).Take(held.Placement); got != want {
		t.Errorf("unhealthy GPU used = %v, want %v (its pod's slots)", got, want)
	}
	req := placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(4000)}}}
	as, err := l.Reserve("n", "new", &req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := as[0].GPUUUID, gpus[1].UUID; got != want {
		t.Errorf("new pod on %s, want the healthy %s", got, want)
	}
}
