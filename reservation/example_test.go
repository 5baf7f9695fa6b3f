package reservation_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

func ExampleDecode() {
	value := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":4,"computeInstanceID":0}]`
	allocs, err := reservation.Decode([]byte(value))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := reservation.Validate(allocs); err != nil {
		fmt.Println(err)
		return
	}
	a := allocs[0]
	id, realized := a.Runtime()
	fmt.Println(a.Profile, a.Placement, realized, id)
	fmt.Println(string(reservation.Encode(allocs)) == value)
	// Output:
	// 2g.10gb [2,4) true MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d gi=4 ci=0
	// true
}

func ExampleDecodeError() {
	_, err := reservation.DecodeString(`[{"containerIndex":0,"deviceIndex":-1}]`)
	var de *reservation.DecodeError
	if errors.As(err, &de) && errors.Is(err, reservation.ErrRange) {
		fmt.Printf("entry %d field %s: %s\n", de.Index, de.Field, de.Reason)
	}
	// Output:
	// entry 0 field deviceIndex: negative number
}

func ExampleValidate() {
	allocs := []reservation.Allocation{
		{GPUUUID: "GPU-a", Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}},
		{DeviceIndex: 1, GPUUUID: "GPU-a", Profile: "1g.5gb", Placement: capability.Placement{Start: 3, Size: 1},
			MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
	}
	err := reservation.Validate(allocs)
	fmt.Println(errors.Is(err, reservation.ErrOverlap), errors.Is(err, reservation.ErrPartialRuntime))
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fmt.Println(e)
	}
	// Output:
	// true true
	// reservation: invalid allocation: entry 1 field "gpuInstanceID": partial runtime identity: 1 of migUUID, gpuInstanceID, computeInstanceID present
	// reservation: invalid allocation: entry 1 field "placement": overlapping placements: [3,4) overlaps [2,4) on GPU-a (conflicts with entry 0)
}

func ExampleSetRuntime() {
	value := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}}]`
	id := reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 13, ComputeInstanceID: 0}
	p, err := reservation.SetRuntime(value, 0, 0, id, reservation.PatchOptions{ResourceVersion: "42"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Changed)
	fmt.Println(p.Value)
	fmt.Println(string(p.Patch))

	// A different identity for a realized entry is refused.
	id.GPUInstanceID = 14
	_, err = reservation.SetRuntime(p.Value, 0, 0, id, reservation.PatchOptions{})
	fmt.Println(errors.Is(err, reservation.ErrRuntimeMismatch))
	// Output:
	// true
	// [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1},"migUUID":"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d","gpuInstanceID":13,"computeInstanceID":0}]
	// {"metadata":{"resourceVersion":"42","annotations":{"hami.io/vgpu-mig-allocations":"[{\"containerIndex\":0,\"deviceIndex\":0,\"gpuUUID\":\"GPU-a\",\"profile\":\"1g.5gb\",\"placement\":{\"start\":6,\"size\":1},\"migUUID\":\"MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d\",\"gpuInstanceID\":13,\"computeInstanceID\":0}]"}}}
	// true
}

func ExampleDesired() {
	snap := reservation.Snapshot{Complete: true, Pods: []reservation.Pod{
		{UID: "u1", Namespace: "ml", Name: "train", Phase: reservation.PodRunning, Annotations: map[string]string{
			reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"3g.20gb","placement":{"start":4,"size":4}}]`,
		}, DeviceRequests: []int{1}}, // its one container requests one device
		{UID: "u4", Namespace: "ml", Name: "squatter", Phase: reservation.PodRunning, Annotations: map[string]string{
			reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1}}]`,
		}}, // requests no device: its entry is withheld, not granted

		{UID: "u2", Namespace: "ml", Name: "broken", Phase: reservation.PodRunning, Annotations: map[string]string{
			reservation.AnnotationKey: `[{"containerIndex":"0"}]`,
		}, DeviceRequests: []int{1}}, // requests a device: what it owns is unknown
		{UID: "u3", Namespace: "ml", Name: "finished", Phase: reservation.PodSucceeded, Annotations: map[string]string{
			reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"3g.20gb","placement":{"start":0,"size":4}}]`,
		}},
	}}
	set := reservation.Desired(snap)
	for _, e := range set.Active {
		fmt.Println("keep", e.Namespace+"/"+e.Name, e.GPUUUID, e.Profile, e.Placement)
	}
	fmt.Println("authorised:", set.Authorized)
	for _, r := range set.Reasons {
		fmt.Println("why:", r)
	}
	for _, u := range set.Untrusted {
		fmt.Println("untrusted:", errors.Is(u, reservation.ErrNotRequested), u)
	}
	fmt.Println("claimed [0,4):", set.Claimed("GPU-a", capability.Placement{Start: 0, Size: 4}))
	// Output:
	// keep ml/train GPU-a 3g.20gb [4,8)
	// authorised: false
	// why: reservation: pod ml/broken (u2) entry 0: reservation: malformed annotation: entry 0 field "containerIndex" at offset 19: found a string, want a number
	// untrusted: true reservation: pod ml/squatter (u4) entry 0: reservation: invalid allocation: entry 0 field "containerIndex": device not requested by the container: container 0 requests no MIG device
	// claimed [0,4): true
}

func ExampleParseLegacyDevices() {
	devs, err := reservation.ParseLegacyDevices("GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f[1-3],NVIDIA,9984,28:;")
	fmt.Println(devs[0].GPUUUID, devs[0].Geometry, devs[0].Slot, errors.Is(err, reservation.ErrLegacyIdentifier))
	// Output:
	// GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f 1 3 true
}

func ExampleCollector() {
	node := reservation.NodeReservations{
		Node:        "MIG-NODE-A",
		DeviceIndex: map[string]int{"GPU-xxxxxxxx": 0},
		Allocations: []reservation.Allocation{{
			GPUUUID: "GPU-xxxxxxxx", Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2},
			MIGUUID: "MIG-xxxxxxxx", GPUInstanceID: reservation.SomeID(4), ComputeInstanceID: reservation.SomeID(0),
		}},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(reservation.NewCollector(func() []reservation.NodeReservations {
		return []reservation.NodeReservations{node}
	}, reservation.CollectorOptions{}))
	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	var out strings.Builder
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Fprint(os.Stdout, out.String())
	// Output:
	// # HELP hami_node_gpu_mig_instance_info Realized MIG instance identity and scheduler placement
	// # TYPE hami_node_gpu_mig_instance_info gauge
	// hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",device_uuid="GPU-xxxxxxxx",gpu_instance_id="4",mig_uuid="MIG-xxxxxxxx",node="MIG-NODE-A",placement_size="2",placement_start="2",profile="2g.10gb"} 1
}

func ExampleValidateAgainst() {
	node := reservation.GPUs{{
		UUID: "GPU-a",
		Profiles: []capability.Profile{{
			Name:       "2g.10gb",
			Placements: []capability.Placement{{Start: 0, Size: 2}, {Start: 2, Size: 2}, {Start: 4, Size: 2}},
		}},
	}}
	allocs := []reservation.Allocation{
		{GPUUUID: "GPU-a", Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}},
		{DeviceIndex: 1, GPUUUID: "GPU-a", Profile: "2g.10gb", Placement: capability.Placement{Start: 5, Size: 2}},
		{DeviceIndex: 2, GPUUUID: "GPU-b", Profile: "2g.10gb", Placement: capability.Placement{Start: 0, Size: 2}},
	}
	err := reservation.ValidateAgainst(allocs, node)
	fmt.Println(errors.Is(err, reservation.ErrUnpublishedPlacement), errors.Is(err, reservation.ErrUnknownGPU))
	// Output:
	// true true
}

func ExampleDesiredSet_Verdict() {
	set := reservation.Desired(reservation.Snapshot{Complete: false})
	err := set.Verdict()
	fmt.Println(errors.Is(err, reservation.ErrNotAuthorized), errors.Is(err, reservation.ErrIncompleteSnapshot))
	// Output:
	// true true
}

// The trust rule: an entry counts only for a container that requests the
// MIG resource with the matching device count.
func ExampleValidateRequests() {
	allocs := []reservation.Allocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: "GPU-a", Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}},
		{ContainerIndex: 1, DeviceIndex: 0, GPUUUID: "GPU-a", Profile: "1g.5gb", Placement: capability.Placement{Start: 1, Size: 1}},
	}
	// Container 0 requests one nvidia.com/gpu; container 1 requests none.
	err := reservation.ValidateRequests(allocs, []int{1, 0})
	fmt.Println(errors.Is(err, reservation.ErrNotRequested))
	fmt.Println(err)
	fmt.Println(reservation.ValidateRequests(allocs, []int{1, 1}))
	// Output:
	// true
	// reservation: invalid allocation: entry 1 field "containerIndex": device not requested by the container: container 1 requests no MIG device
	// <nil>
}
