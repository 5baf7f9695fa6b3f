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

// scheduledPod is a running pod whose containers request exactly what its
// record reserves.
func scheduledPod(uid string, entries ...reservation.Allocation) *reservation.Pod {
	value := reservation.EncodeString(entries)
	return &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: value}, DeviceRequests: requestsOf(value)}
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

// TestAdoptPartialListingForgedCopy: startup adoption on an incomplete
// listing (an informer that has not synced yet holds only some pods) adopts
// a forger's verbatim copy of another pod's realized record, because the
// original is not in the partial listing to reveal the conflict. Once the
// forger is deleted, an authorised reconcile releases the instance as the
// forger's and destroys the device of the active pod that really owns it.
func TestAdoptPartialListingForgedCopy(t *testing.T) {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A100-SXM4-40GB")})
	dev, _ := node.Device(0)

	victim := scheduledPod("victim", entry(dev.UUID, "1g.5gb", 6, 1))
	m1 := realize.NewManager(node, realize.Options{})
	res, err := m1.Allocate(ctx, realize.AllocateRequest{Pod: *victim, Snapshot: reservation.Snapshot{Pods: []reservation.Pod{*victim}, Complete: true}})
	if err != nil {
		t.Fatalf("Allocate(victim): %v", err)
	}
	victim.Annotations[reservation.AnnotationKey] = res.Annotation
	mig := res.Devices[0].Runtime.MIGUUID

	forger := scheduledPod("forger")
	forger.Annotations[reservation.AnnotationKey] = res.Annotation // a verbatim copy
	forger.DeviceRequests = []int{1}                               // of a spec requesting one device

	// The plugin restarts; its cache has listed only the forger so far.
	m2 := realize.NewManager(node, realize.Options{})
	rep, err := m2.Adopt(ctx, reservation.Snapshot{Pods: []reservation.Pod{*forger}, Complete: false})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	for _, a := range rep.Adopted {
		if a.Owner.PodUID == "forger" {
			t.Errorf("Adopt on an incomplete listing adopted %s for the forger", a.Runtime.MIGUUID)
		}
	}
	// The forger is deleted; the listing is complete now.
	forger.Deleting, forger.ContainersTerminated = true, true
	if _, err := m2.Reconcile(ctx, reservation.Snapshot{Pods: []reservation.Pod{*victim, *forger}, Complete: true}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	for _, in := range node.Snapshot() {
		if len(in.ComputeInstances) == 1 && in.ComputeInstances[0].MIGUUID == mig {
			return
		}
	}
	t.Fatalf("the active victim's instance %s was destroyed", mig)
}

// TestAdoptUnauthorisedListingForgedCopy: with a complete listing in which
// the real owner's record has become undecodable (truncated), the owner is
// untrusted and its claims unknown, yet startup adoption adopts a forger's
// verbatim copy of the owner's realized record, and Allocate then hands the
// owner's device to the forger. Allocate's own take-over of an unmanaged
// instance requires an authorised snapshot for exactly this reason.
func TestAdoptUnauthorisedListingForgedCopy(t *testing.T) {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A100-SXM4-40GB")})
	dev, _ := node.Device(0)

	victim := scheduledPod("victim", entry(dev.UUID, "1g.5gb", 6, 1))
	m1 := realize.NewManager(node, realize.Options{})
	res, err := m1.Allocate(ctx, realize.AllocateRequest{Pod: *victim, Snapshot: reservation.Snapshot{Pods: []reservation.Pod{*victim}, Complete: true}})
	if err != nil {
		t.Fatalf("Allocate(victim): %v", err)
	}
	mig := res.Devices[0].Runtime.MIGUUID
	victim.Annotations[reservation.AnnotationKey] = res.Annotation[:len(res.Annotation)-1] // truncated
	forger := scheduledPod("forger")
	forger.Annotations[reservation.AnnotationKey] = res.Annotation // a verbatim copy
	forger.DeviceRequests = []int{1}                               // of a spec requesting one device

	snap := reservation.Snapshot{Pods: []reservation.Pod{*victim, *forger}, Complete: true}
	m2 := realize.NewManager(node, realize.Options{})
	if _, err := m2.Adopt(ctx, snap); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	got, err := m2.Allocate(ctx, realize.AllocateRequest{Pod: *forger, Snapshot: snap})
	if err == nil && len(got.Devices) == 1 && got.Devices[0].Runtime.MIGUUID == mig {
		t.Fatalf("the forger received the victim's device %s", mig)
	}
}

// TestEndedPodInstanceAtPendingReservation: after a restart, the instance
// of a Succeeded pod that is still listed (completed Job pods stay in the
// API) sits unmanaged at exactly the placement the scheduler has since
// given to a new pod. CollectLeaks leaves it (claimed by the new pod's
// reservation) and the new pod's Allocate refuses it ("belongs to an ended
// pod") instead of destroying it and creating afresh: the new pod can never
// start while the old pod object exists, though nothing runs on the
// instance.
func TestEndedPodInstanceAtPendingReservation(t *testing.T) {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(1, "A100-SXM4-40GB")})
	dev, _ := node.Device(0)

	done := scheduledPod("done", entry(dev.UUID, "1g.5gb", 6, 1))
	m1 := realize.NewManager(node, realize.Options{})
	res, err := m1.Allocate(ctx, realize.AllocateRequest{Pod: *done, Snapshot: reservation.Snapshot{Pods: []reservation.Pod{*done}, Complete: true}})
	if err != nil {
		t.Fatalf("Allocate(done): %v", err)
	}
	done.Annotations[reservation.AnnotationKey] = res.Annotation
	done.Phase = reservation.PodSucceeded
	next := scheduledPod("next", entry(dev.UUID, "1g.5gb", 6, 1)) // the freed slot
	snap := reservation.Snapshot{Pods: []reservation.Pod{*done, *next}, Complete: true}

	m2 := realize.NewManager(node, realize.Options{}) // the plugin restarted
	if _, err := m2.Adopt(ctx, snap); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if _, err := m2.Reconcile(ctx, snap); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if _, err := m2.CollectLeaks(ctx, snap); err != nil {
		t.Fatalf("CollectLeaks: %v", err)
	}
	if _, err := m2.Allocate(ctx, realize.AllocateRequest{Pod: *next, Snapshot: snap}); err != nil {
		t.Fatalf("Allocate(next): %v", err)
	}
}
