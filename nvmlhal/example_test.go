package nvmlhal_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

// Discover a GPU's profiles, create one MIG instance at an exact
// placement, and see an overlapping request refused. A real node passes
// nvmlhal.Options{} (the system library) instead of a strict mock.
func Example() {
	ctx := context.Background()
	b := nvmlhal.New(nvmlhal.Options{NVML: nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})})
	if err := b.Init(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer b.Shutdown(ctx)

	infos, err := b.GIProfiles(ctx, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, in := range infos {
		fmt.Printf("index %d %-9s id %2d %5d MiB %v\n", in.Index, in.Name, in.ID, in.MemoryMB, in.Placements)
	}

	inst, err := b.CreateInstance(ctx, 0, capability.GIProfile3Slice, capability.Placement{Start: 4, Size: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created GI", inst.GIID, "at", inst.Placement, "MIG device", inst.ComputeInstances[0].MIGUUID)

	_, err = b.CreateInstance(ctx, 0, capability.GIProfile1Slice, capability.Placement{Start: 5, Size: 1})
	fmt.Println("1g at [5,6) occupied:", errors.Is(err, realize.ErrOccupied))

	fmt.Println(b.DestroyComputeInstance(ctx, 0, inst.GIID, inst.ComputeInstances[0].ID), b.DestroyGPUInstance(ctx, 0, inst.GIID))
	// Output:
	// index 0 1g.5gb    id 19  4864 MiB [[0,1) [1,2) [2,3) [3,4) [4,5) [5,6) [6,7)]
	// index 1 2g.10gb   id 14  9856 MiB [[0,2) [2,4) [4,6)]
	// index 2 3g.20gb   id  9 19968 MiB [[0,4) [4,8)]
	// index 3 4g.20gb   id  5 19968 MiB [[0,4)]
	// index 4 7g.40gb   id  0 40192 MiB [[0,8)]
	// index 7 1g.5gb+me id 20  4864 MiB [[0,1) [1,2) [2,3) [3,4) [4,5) [5,6) [6,7)]
	// index 9 1g.10gb   id 15  9856 MiB [[0,2) [2,4) [4,6) [6,8)]
	// created GI 0 at [4,8) MIG device MIG-00000000-0000-4000-8000-000000000001
	// 1g at [5,6) occupied: true
	// <nil> <nil>
}

// errors.Is branches on the realize sentinel; errors.As recovers the raw
// NVML return code.
func ExampleReturnError() {
	ctx := context.Background()
	b := nvmlhal.New(nvmlhal.Options{NVML: nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})})
	if err := b.Init(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer b.Shutdown(ctx)

	_, err := b.CreateInstance(ctx, 0, capability.GIProfile7Slice, capability.Placement{Start: 0, Size: 8})
	fmt.Println(err)
	inst, _ := b.Instances(ctx, 0)
	err = b.DestroyGPUInstance(ctx, 0, inst[0].GIID)
	var re *nvmlhal.ReturnError
	fmt.Println(errors.Is(err, realize.ErrInUse), errors.As(err, &re), re)
	// Output:
	// <nil>
	// true true nvml: ERROR_IN_USE (compute instances or processes on it, or another NVML client holding the GPU)
}

// A program that initialised NVML itself keeps ownership: it need not call
// Init, and Shutdown does not close its initialisation.
func ExampleBackend_Shutdown() {
	ctx := context.Background()
	lib := nvmlmock.New(nvmlmock.DGXH200, nvmlmock.Options{})
	lib.Init() // the embedding program's own initialisation

	b := nvmlhal.New(nvmlhal.Options{NVML: lib})
	devs, err := b.Devices(ctx)
	fmt.Println(len(devs), devs[0].Name, err)
	fmt.Println(errors.Is(b.Shutdown(ctx), nvmlhal.ErrNotInitialized), lib.Inits())
	lib.Shutdown()
	// Output:
	// 8 NVIDIA H200 <nil>
	// true 1
}
