package schedule

import (
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// LedgerReservations returns a pod's reservation entries as the ledger's
// reservations for that pod, in the same order, for
// [placement.Ledger.AddPod]. Only the fields the scheduler writes are
// carried over. allocs is not validated here: decode it with
// reservation.Decode first.
func LedgerReservations(podUID string, allocs []reservation.Allocation) []placement.Reservation {
	return AppendLedgerReservations(make([]placement.Reservation, 0, len(allocs)), podUID, allocs)
}

// AppendLedgerReservations is [LedgerReservations] appending to dst, for
// callers that reuse a buffer: the ledger copies what it records.
func AppendLedgerReservations(dst []placement.Reservation, podUID string, allocs []reservation.Allocation) []placement.Reservation {
	for _, a := range allocs {
		dst = append(dst, placement.Reservation{PodUID: podUID, ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement})
	}
	return dst
}

// Allocations returns the scheduler's assignments for one pod
// ([placement.Ledger.Reserve]) as the entries of its reservation, in the
// same order, with no runtime identity (the device plugin adds it after
// realization). The assignments' GPU positions are the ledger's own and
// are dropped.
func Allocations(as []placement.Assignment) []reservation.Allocation {
	out := make([]reservation.Allocation, len(as))
	for i, a := range as {
		out[i] = reservation.Allocation{ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement}
	}
	return out
}
