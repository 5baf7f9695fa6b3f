package kube

import (
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// LedgerReservations converts a pod's hami.io/vgpu-mig-allocations
// entries into the scheduler ledger's reservations for that pod, in the
// same order, so that a scheduler rebuilds occupancy from active pods
// ([placement.Ledger.AddPod]). Only the fields the scheduler writes are
// carried over: a reservation occupies its placement's half-open slot
// interval [start, start+size) whether or not it has been realized, so the
// runtime identity plays no part in occupancy. allocs is not validated
// here; decode it with [PodAllocations] first.
func LedgerReservations(podUID string, allocs []reservation.Allocation) []placement.Reservation {
	out := make([]placement.Reservation, len(allocs))
	for i, a := range allocs {
		out[i] = placement.Reservation{PodUID: podUID, ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement}
	}
	return out
}

// Allocations converts the scheduler's assignments for one pod
// ([placement.Ledger.Reserve]) into the logical reservation it persists in
// the pod's hami.io/vgpu-mig-allocations annotation, in the same order:
// containerIndex, deviceIndex, gpuUUID, profile and placement, with no
// runtime identity (the device plugin adds it after realization). Encode
// the result with reservation.EncodeString. The assignments' GPU positions
// are the ledger's own and are dropped.
func Allocations(as []placement.Assignment) []reservation.Allocation {
	out := make([]reservation.Allocation, len(as))
	for i, a := range as {
		out[i] = reservation.Allocation{ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement}
	}
	return out
}
