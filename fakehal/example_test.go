package fakehal_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

func Example() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, "A100-SXM4-40GB")})

	inst, err := node.CreateInstance(ctx, 1, capability.GIProfile2Slice, capability.Placement{Start: 2, Size: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("GPU %d GI %d at %v, CI %d\n", inst.GPU, inst.GIID, inst.Placement, inst.ComputeInstances[0].ID)

	// The hardware refuses an overlapping range, as NVML does.
	_, err = node.CreateInstance(ctx, 1, capability.GIProfile3Slice, capability.Placement{Start: 0, Size: 4})
	fmt.Println(errors.Is(err, realize.ErrOccupied), errors.Is(err, fakehal.ReturnInsufficientResources))

	// And an unpublished placement.
	_, err = node.CreateInstance(ctx, 1, capability.GIProfile1Slice, capability.Placement{Start: 7, Size: 1})
	fmt.Println(errors.Is(err, realize.ErrInvalidPlacement))
	// Output:
	// GPU 1 GI 6 at [2,4), CI 0
	// true true
	// true
}

func ExampleNode_CrashAfterGI() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{})
	node.CrashAfterGI(1)

	_, err := node.CreateInstance(ctx, 0, capability.GIProfile3Slice, capability.Placement{Start: 4, Size: 4})
	fmt.Println(errors.Is(err, fakehal.ErrCrashed))

	// The GI stays behind without a compute instance: a leak a restarted
	// manager must find.
	for _, inst := range node.Snapshot() {
		fmt.Printf("GI %d at %v with %d compute instances\n", inst.GIID, inst.Placement, len(inst.ComputeInstances))
	}
	// Output:
	// true
	// GI 1 at [4,8) with 0 compute instances
}

func ExampleNode_Inject() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: []string{"A30"}})

	// The second compute-instance creation fails; the fake rolls its GI
	// back, as CreateInstance promises.
	fault := node.Inject(fakehal.Fault{Op: fakehal.OpCreateCI, Nth: 2, Err: fakehal.ReturnInsufficientResources})
	_, err1 := node.CreateInstance(ctx, 0, capability.GIProfile2Slice, capability.Placement{Start: 0, Size: 2})
	_, err2 := node.CreateInstance(ctx, 0, capability.GIProfile2Slice, capability.Placement{Start: 2, Size: 2})
	fmt.Println(err1 == nil, errors.Is(err2, realize.ErrOccupied))
	fmt.Println("fired:", fault.Fired(), "instances:", len(node.Snapshot()), "GI destroys:", node.Calls(fakehal.OpDestroyGI))
	// Output:
	// true true
	// fired: 1 instances: 1 GI destroys: 1
}

func ExampleNode_StartProcess() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{GPUs: []string{"RTX PRO 6000"}})
	inst, _ := node.CreateInstance(ctx, 0, capability.GIProfile1Slice, capability.Placement{Start: 3, Size: 3})
	ci := inst.ComputeInstances[0]

	pid, _ := node.StartProcess(0, ci.MIGUUID)
	report, _ := node.Processes(ctx, 0)
	fmt.Println(report.Total, report.ByGPUInstance[inst.GIID])
	fmt.Println(errors.Is(node.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID), realize.ErrInUse))

	_ = node.StopProcess(pid)
	fmt.Println(node.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID), node.DestroyGPUInstance(ctx, 0, inst.GIID))
	// Output:
	// 1 1
	// true
	// <nil> <nil>
}

func ExampleNew() {
	node, err := fakehal.New(fakehal.Options{GPUs: []string{"A30", "RTX PRO 6000", "H200"}, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	devs, _ := node.Devices(context.Background())
	for _, d := range devs {
		fmt.Println(d.Index, d.Name, d.MemoryMB, d.MIGMode)
	}

	_, err = fakehal.New(fakehal.Options{GPUs: []string{"V100"}})
	fmt.Println(errors.Is(err, fakehal.ErrUnknownModel))
	// Output:
	// 0 NVIDIA A30 24576 enabled
	// 1 NVIDIA RTX PRO 6000 Blackwell Server Edition 97887 enabled
	// 2 NVIDIA H200 143771 enabled
	// true
}

func ExampleNode_EnableMIG() {
	ctx := context.Background()
	node := fakehal.MustNew(fakehal.Options{MIGDisabled: true})

	// A process holds the GPU, so the change waits for a reset.
	pid, _ := node.StartProcess(0, "")
	err := node.EnableMIG(ctx, 0)
	dev, _ := node.Device(0)
	fmt.Println(errors.Is(err, realize.ErrResetRequired), dev.MIGMode, dev.PendingMIGMode)

	_ = node.StopProcess(pid)
	_ = node.ResetGPU(0)
	dev, _ = node.Device(0)
	fmt.Println(dev.MIGMode, dev.PendingMIGMode)
	// Output:
	// true disabled enabled
	// enabled enabled
}
