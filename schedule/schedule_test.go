package schedule_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

func TestLedgerReservations(t *testing.T) {
	realized := reservation.Allocation{
		ContainerIndex: 1, DeviceIndex: 0, GPUUUID: "GPU-a", Profile: "2g.10gb",
		Placement: capability.Placement{Start: 2, Size: 2},
	}.WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-x", GPUInstanceID: 4, ComputeInstanceID: 0})
	logical := reservation.Allocation{
		ContainerIndex: 1, DeviceIndex: 1, GPUUUID: "GPU-b", Profile: "1g.5gb",
		Placement: capability.Placement{Start: 6, Size: 1},
	}
	tests := []struct {
		name   string
		allocs []reservation.Allocation
		want   []placement.Reservation
	}{
		{name: "none", allocs: nil, want: []placement.Reservation{}},
		{
			name:   "runtime identity is dropped, order kept",
			allocs: []reservation.Allocation{realized, logical},
			want: []placement.Reservation{
				{PodUID: "uid-1", ContainerIndex: 1, DeviceIndex: 0, GPUUUID: "GPU-a", Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}},
				{PodUID: "uid-1", ContainerIndex: 1, DeviceIndex: 1, GPUUUID: "GPU-b", Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schedule.LedgerReservations("uid-1", tt.allocs)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAllocations(t *testing.T) {
	as := []placement.Assignment{
		{ContainerIndex: 0, DeviceIndex: 0, GPU: 3, GPUUUID: "GPU-a", Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}},
		{ContainerIndex: 2, DeviceIndex: 1, GPU: 0, GPUUUID: "GPU-b", Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}},
	}
	got := schedule.Allocations(as)
	want := []reservation.Allocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: "GPU-a", Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}},
		{ContainerIndex: 2, DeviceIndex: 1, GPUUUID: "GPU-b", Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}},
	}
	assert.Equal(t, want, got)
	for _, a := range got {
		_, realized := a.Runtime()
		assert.False(t, realized, "a fresh reservation carries no runtime identity")
	}
	assert.NoError(t, reservation.Validate(got), "the scheduler's record passes the deployed decoder's checks")
	assert.Empty(t, schedule.Allocations(nil))

	// The two conversions agree with placement's own, so a pod's record
	// rebuilds exactly the occupancy its reservation added.
	assert.Equal(t, placement.Reservations("uid-1", as), schedule.LedgerReservations("uid-1", got))
}
