package reservation_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

const (
	gpuA = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
	gpuB = "GPU-11111111-2222-4333-8444-555555555555"
	migA = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	migB = "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
)

func alloc(ci, di int, gpu, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: ci, DeviceIndex: di, GPUUUID: gpu, Profile: profile,
		Placement: capability.Placement{Start: start, Size: size}}
}

func pod(uid string, phase reservation.PodPhase, allocs ...reservation.Allocation) reservation.Pod {
	return reservation.Pod{UID: uid, Namespace: "ns", Name: "pod-" + uid, Phase: phase,
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(allocs)}}
}

func TestDesiredSmoke(t *testing.T) {
	snap := reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
		pod("a", reservation.PodRunning, alloc(0, 0, gpuA, "2g.10gb", 2, 2).WithRuntime(reservation.RuntimeIdentity{MIGUUID: migA, GPUInstanceID: 4})),
		pod("b", reservation.PodPending, alloc(0, 0, gpuA, "1g.5gb", 0, 1)),
		pod("c", reservation.PodSucceeded, alloc(0, 0, gpuA, "1g.5gb", 0, 1)),
	}}
	set := reservation.Desired(snap)
	if !set.Authorized || len(set.Active) != 2 {
		t.Fatalf("Desired = %+v, want 2 active and authorised", set)
	}
	if _, ok := set.Lookup("a", 0, 0); !ok {
		t.Fatalf("Lookup(a,0,0) missing")
	}
	snap.Pods = append(snap.Pods, reservation.Pod{UID: "d", Namespace: "ns", Name: "bad", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: "[{]"}})
	set = reservation.Desired(snap)
	if set.Authorized || len(set.Active) != 2 || !set.IsUnknown("d") {
		t.Fatalf("Desired = %+v, want 2 active, unauthorised, d unknown", set)
	}
	if !errors.Is(set.Verdict(), reservation.ErrMalformed) {
		t.Fatalf("Verdict = %v, want ErrMalformed", set.Verdict())
	}
}
