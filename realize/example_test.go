package realize_test

import (
	"context"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// A device plugin's life on one node: realize a pod's reservation, restart
// and adopt it, then reclaim it when the pod ends.
func Example() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{Seed: 1}) // one A100-SXM4-40GB
	gpu, _ := node.Device(0)

	// The scheduler reserved 2g.10gb at slots [2,4) for container 0.
	pod := reservation.Pod{UID: "uid-a", Namespace: "default", Name: "trainer", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` +
			gpu.UUID + `","profile":"2g.10gb","placement":{"start":2,"size":2}}]`},
		DeviceRequests: []int{1}} // container 0's nvidia.com/gpu limit
	listing := func() reservation.Snapshot { return reservation.Snapshot{Pods: []reservation.Pod{pod}, Complete: true} }

	m := realize.NewManager(node, realize.Options{})
	res, err := m.Allocate(ctx, realize.AllocateRequest{Pod: pod, ContainerIndex: 0, Snapshot: listing()})
	if err != nil {
		fmt.Println(err)
		return
	}
	d := res.Devices[0]
	fmt.Println("allocate:", d.Key, d.Origin, "GI", d.Runtime.GPUInstanceID, "CI", d.Runtime.ComputeInstanceID)
	// The plugin sends res.Patch to the API server; here we apply it.
	pod.Annotations[reservation.AnnotationKey] = res.Annotation

	// The plugin restarts: the hardware keeps the instance, the new
	// manager adopts it from the annotation.
	m = realize.NewManager(node, realize.Options{})
	rep, err := m.Adopt(ctx, listing())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("adopt:", len(rep.Adopted), "adopted,", len(rep.Leaks), "leaks")
	again, err := m.Allocate(ctx, realize.AllocateRequest{Pod: pod, ContainerIndex: 0, Snapshot: listing()})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("allocate again:", again.Devices[0].Origin, "same MIG UUID:", again.Devices[0].Runtime == d.Runtime)

	// The pod ends; an authorised reconcile destroys its CI and GI.
	pod.Phase = reservation.PodSucceeded
	rec, err := m.Reconcile(ctx, listing())
	fmt.Println("reconcile:", rec, err)
	fmt.Println("live instances:", len(node.Snapshot()))
	st := m.Stats()
	fmt.Println("stats: adoptions", st.Adoptions, "destroys", st.Destroys, "managed", st.Managed)
	// Output:
	// allocate: gpu0/2g.10gb@[2,4) created GI 6 CI 0
	// adopt: 1 adopted, 0 leaks
	// allocate again: managed same MIG UUID: true
	// reconcile: authorised: released 1, kept 0, vanished 0, deferred 0 <nil>
	// live instances: 0
	// stats: adoptions 1 destroys 1 managed 0
}

// Without a complete pod listing nothing is destroyed, and the report says
// why.
func ExampleManager_Reconcile_unauthorised() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{})
	m := realize.NewManager(node, realize.Options{})
	rep, err := m.Reconcile(ctx, reservation.Snapshot{Complete: false})
	fmt.Println(rep, err)
	fmt.Println(rep.Reasons[0])
	fmt.Println("skipped:", m.Stats().SkippedReconciles)
	// Output:
	// not authorised (1 reasons): nothing destroyed <nil>
	// reservation: incomplete pod listing
	// skipped: 1
}

// Maintain is the one periodic call besides Allocate: while a malformed
// record elsewhere withholds authorisation, adoption waits; once it is
// gone, the next pass adopts the instance, and when its pod ends a later
// pass reclaims it.
func ExampleManager_Maintain() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{Seed: 1})
	gpu, _ := node.Device(0)
	pod := reservation.Pod{UID: "uid-a", Namespace: "default", Name: "trainer", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` +
			gpu.UUID + `","profile":"1g.5gb","placement":{"start":0,"size":1}}]`},
		DeviceRequests: []int{1}}
	first := realize.NewManager(node, realize.Options{})
	res, err := first.Allocate(ctx, realize.AllocateRequest{Pod: pod, Snapshot: reservation.Snapshot{Pods: []reservation.Pod{pod}, Complete: true}})
	if err != nil {
		fmt.Println(err)
		return
	}
	pod.Annotations[reservation.AnnotationKey] = res.Annotation

	// The plugin restarts while another pod's record is malformed.
	broken := reservation.Pod{UID: "uid-b", Namespace: "default", Name: "broken", Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: `[{`}, DeviceRequests: []int{1}}
	m := realize.NewManager(node, realize.Options{})
	for _, pods := range [][]reservation.Pod{{pod, broken}, {pod}} {
		rep, _ := m.Maintain(ctx, reservation.Snapshot{Pods: pods, Complete: true})
		fmt.Println("authorised:", rep.Adopt.Authorized, "adopted:", len(rep.Adopt.Adopted), "settled:", rep.Settled)
	}
	pod.Phase = reservation.PodSucceeded
	rep, _ := m.Maintain(ctx, reservation.Snapshot{Pods: []reservation.Pod{pod}, Complete: true})
	fmt.Println("adoption ran:", rep.Adopt != nil, "released:", len(rep.Reconcile.Released), "live:", len(node.Snapshot()))
	// Output:
	// authorised: false adopted: 0 settled: false
	// authorised: true adopted: 1 settled: true
	// adoption ran: false released: 1 live: 0
}

// A DRA kubelet plugin's life on one node: prepare a ResourceClaim's
// device, lose the checkpoint in a restart and adopt the instance at the
// claim's exact placement, then unprepare it.
func ExampleManager_Prepare() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{Seed: 1}) // one A100-SXM4-40GB
	gpu, _ := node.Device(0)

	// The scheduler allocated request 0 of claim "uid-c" a 2g.10gb device
	// at slots [2,4); only it writes a claim's allocation.
	claim := realize.Holder{UID: "uid-c", Namespace: "default", Name: "trainer-gpu",
		Devices: []realize.Want{{Allocation: reservation.Allocation{ContainerIndex: 0, DeviceIndex: 0,
			GPUUUID: gpu.UUID, Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}}}}}
	listing := func() realize.Demand {
		return realize.Demand{Complete: true, Holders: []realize.Holder{claim}, AdoptAtPlacement: true}
	}

	m := realize.NewManager(node, realize.Options{})
	devs, err := m.Prepare(ctx, listing(), "uid-c") // NodePrepareResources
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("prepare:", devs[0].Key, devs[0].Origin, "owner", devs[0].Entry.ContainerIndex, devs[0].Entry.DeviceIndex)

	// The plugin restarts without its checkpoint: adoption finds the
	// instance at the claim's exact placement.
	m = realize.NewManager(node, realize.Options{})
	mr, err := m.MaintainDemand(ctx, listing())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("adopted:", len(mr.Adopt.Adopted), "settled:", mr.Settled)
	again, err := m.Prepare(ctx, listing(), "uid-c") // kubelet prepares again
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("prepare again:", again[0].Origin, "same MIG UUID:", again[0].Runtime == devs[0].Runtime)

	rep, err := m.Unprepare(ctx, listing(), "uid-c") // NodeUnprepareResources
	fmt.Println("unprepare: released", len(rep.Released), err, "live:", len(node.Snapshot()))
	rep, err = m.Unprepare(ctx, listing(), "uid-c")
	fmt.Println("again: released", len(rep.Released), err)
	// Output:
	// prepare: gpu0/2g.10gb@[2,4) created owner 0 0
	// adopted: 1 settled: true
	// prepare again: managed same MIG UUID: true
	// unprepare: released 1 <nil> live: 0
	// again: released 0 <nil>
}
