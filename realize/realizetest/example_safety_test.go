package realizetest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
	"github.com/dynmig/dynmig/reservation"
)

// An embedder asserts the manager's safety invariants on its own plugin
// loop: record every grant, release ended pods, observe the hardware after
// every step.
func ExampleSafety() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{Seed: 1})
	m := realize.NewManager(node, realize.Options{})
	safety := realizetest.NewSafety()

	gpu, _ := node.Device(0)
	entry := reservation.Allocation{GPUUUID: gpu.UUID, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}
	pod := reservation.Pod{UID: "uid-a", Namespace: "ns", Name: "a", Phase: reservation.PodRunning, DeviceRequests: []int{1},
		Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{entry})}}
	snap := reservation.Snapshot{Pods: []reservation.Pod{pod}, Complete: true}

	res, err := m.Allocate(ctx, realize.AllocateRequest{Pod: pod, Snapshot: snap})
	fmt.Println("allocate:", err, len(res.Devices), "device")
	fmt.Println("grant:", safety.Grant(pod, res.Devices))
	fmt.Println("observe:", safety.Observe(ctx, node))

	// A forger copies the record; handing it the same device is unsafe.
	forger := pod
	forger.UID = "uid-b"
	fmt.Println("forged grant unsafe:", errors.Is(safety.Grant(forger, res.Devices), realizetest.ErrUnsafe))
	// Output:
	// allocate: <nil> 1 device
	// grant: <nil>
	// observe: <nil>
	// forged grant unsafe: true
}

// The state machine's reference model predicts each NVML answer.
func ExampleModel() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: []string{"A30"}})
	dev, _ := node.Device(0)
	profiles, _ := node.GIProfiles(ctx, 0)
	model, _ := realizetest.NewModel(dev, profiles)

	var me1, me2 capability.GIProfileInfo
	for _, p := range profiles {
		switch p.Name {
		case "1g.6gb+me":
			me1 = p
		case "2g.12gb+me":
			me2 = p
		}
	}
	at := capability.Placement{Start: 0, Size: 1}
	fmt.Println("1g.6gb+me at [0,1):", model.CreateOutcome(me1.Index, at))
	inst, err := node.CreateInstance(ctx, 0, me1.Index, at)
	fmt.Println("created:", err, model.Created(me1.Index, at, inst))
	// The media engines are taken, although [2,4) is free.
	fmt.Println("2g.12gb+me at [2,4):", model.CreateOutcome(me2.Index, capability.Placement{Start: 2, Size: 2}))
	fmt.Println("unpublished [1,3):", model.CreateOutcome(me2.Index, capability.Placement{Start: 1, Size: 2}))
	// Output:
	// 1g.6gb+me at [0,1): <nil>
	// created: <nil> <nil>
	// 2g.12gb+me at [2,4): realize: placement occupied
	// unpublished [1,3): realize: invalid placement
}
