package systemtest_test

import (
	"context"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// Minimal reproductions of failures the system test found, one test each,
// so that the owning package can see them without rapid.

func scheduledPod(uid string, entries ...reservation.Allocation) *reservation.Pod {
	return &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(entries)}}
}

func entry(gpuUUID, profile string, start, size uint32) reservation.Allocation {
	return reservation.Allocation{GPUUUID: gpuUUID, Profile: profile, Placement: capability.Placement{Start: start, Size: size}}
}

// TestLeakOverlappingPendingReservation: an unmanaged instance that
// overlaps an active pod's pending reservation, but is not at its placement,
// cannot be that pod's unpatched instance. CollectLeaks must collect it
// (nobody owns it, nothing runs on it); otherwise the pod's Allocate fails
// with ErrOccupied forever.
//
// How it arises: pod-1's 7g instance is created but the annotation patch is
// lost (kubelet's Allocate fails), the plugin restarts, pod-1 ends, and the
// scheduler places pod-2's 1g at [6,7) on the freed slots.
func TestLeakOverlappingPendingReservation(t *testing.T) {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A100-SXM4-40GB")})
	dev, _ := node.Device(0)

	pod1 := scheduledPod("pod-1", entry(dev.UUID, "7g.40gb", 0, 8))
	m1 := realize.NewManager(node, realize.Options{})
	if _, err := m1.Allocate(ctx, realize.AllocateRequest{Pod: *pod1, Snapshot: reservation.Snapshot{Pods: []reservation.Pod{*pod1}, Complete: true}}); err != nil {
		t.Fatalf("Allocate(pod-1): %v", err)
	}
	// The patch is lost; the plugin restarts; pod-1 ends; pod-2 is placed.
	pod1.Phase = reservation.PodSucceeded
	pod2 := scheduledPod("pod-2", entry(dev.UUID, "1g.5gb", 6, 1))
	snap := reservation.Snapshot{Pods: []reservation.Pod{*pod1, *pod2}, Complete: true}

	m2 := realize.NewManager(node, realize.Options{})
	if _, err := m2.Adopt(ctx, snap); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if _, err := m2.Reconcile(ctx, snap); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	rep, err := m2.CollectLeaks(ctx, snap)
	if err != nil {
		t.Fatalf("CollectLeaks: %v", err)
	}
	if _, err := m2.Allocate(ctx, realize.AllocateRequest{Pod: *pod2, Snapshot: snap}); err != nil {
		t.Fatalf("Allocate(pod-2) after CollectLeaks (collected %v, left %v): %v", rep.Collected, rep.Left, err)
	}
	if err := node.Check(); err != nil {
		t.Fatal(err)
	}
}
