package placement_test

import (
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// exampleA100 is an A100-40GB with its four chart-default profiles.
func exampleA100(uuid string) capability.GPU {
	return capability.GPU{UUID: uuid, Name: "NVIDIA A100-SXM4-40GB", MemoryMB: 40960, Profiles: []capability.Profile{
		{Name: "1g.5gb", MemoryMB: 4864, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}},
		{Name: "2g.10gb", MemoryMB: 9856, SliceCount: 2, Placements: []capability.Placement{{Start: 0, Size: 2}, {Start: 2, Size: 2}, {Start: 4, Size: 2}}},
		{Name: "3g.20gb", MemoryMB: 19968, SliceCount: 3, Placements: []capability.Placement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}},
		{Name: "7g.40gb", MemoryMB: 40192, SliceCount: 7, Placements: []capability.Placement{{Start: 0, Size: 8}}},
	}}
}

func ExampleSelect() {
	gpu := exampleA100("GPU-a")
	grid, err := placement.NewGrid(&gpu)
	if err != nil {
		panic(err)
	}
	// Slot 2 is taken by an earlier reservation.
	node := []placement.GPUState{{Grid: grid, Used: placement.Occupancy(0).Take(capability.Placement{Start: 2, Size: 1})}}
	req := &placement.Request{Containers: []placement.ContainerRequest{
		{Devices: 1, Memory: placement.MiB(8000)},
		{Devices: 1, Memory: placement.Percent(10)},
	}}
	as, err := placement.Select(node, req, nil)
	if err != nil {
		panic(err)
	}
	for _, a := range as {
		fmt.Println(a)
	}
	// Output:
	// c0/d0 GPU-a 2g.10gb [0,2)
	// c1/d0 GPU-a 1g.5gb [3,4)
}

func ExampleSelect_unschedulable() {
	gpu := exampleA100("GPU-a")
	grid, _ := placement.NewGrid(&gpu)
	// Slots 1, 3 and 5 taken: four free slots, but no 2-slot placement.
	used := placement.Occupancy(0b101010)
	_, err := placement.Select([]placement.GPUState{{Grid: grid, Used: used}}, &placement.Request{
		Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(9000)}},
	}, nil)
	fmt.Println(errors.Is(err, placement.ErrFragmented))
	fmt.Println(err)
	// Output:
	// true
	// placement: free slots but no legal placement: container 0 device 0 (9000 MiB): 3 free slots, 2 needed
}

func ExampleLedger() {
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("node-a", []capability.GPU{exampleA100("GPU-a")}); err != nil {
		panic(err)
	}
	// A running pod observed by the informer.
	_ = l.AddPod("node-a", "pod-1", []placement.Reservation{
		{GPUUUID: "GPU-a", Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}},
	})
	// Schedule a new pod: choose and assume atomically, before binding.
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(9000)}}}
	score, _ := l.Evaluate("node-a", req)
	as, err := l.Reserve("node-a", "pod-2", req)
	if err != nil {
		panic(err)
	}
	fmt.Println("score", score, "->", as[0])
	gpus, _ := l.Node("node-a")
	fmt.Println("taken", gpus[0].Used)
	// Binding failed: forget the assumption.
	l.Forget("pod-2")
	gpus, _ = l.Node("node-a")
	fmt.Println("taken", gpus[0].Used)
	// Output:
	// score 75 -> c0/d0 GPU-a 2g.10gb [0,2)
	// taken {[0,2) [4,8)}
	// taken {[4,8)}
}

func ExampleOccupancy() {
	var o placement.Occupancy
	o = o.Take(capability.Placement{Start: 0, Size: 2})
	fmt.Println(o, o.Fits(capability.Placement{Start: 2, Size: 2}), o.Fits(capability.Placement{Start: 1, Size: 1}))
	// Output: {[0,2)} true false
}

func ExampleFragmentationAware() {
	gpu := exampleA100("GPU-a")
	grid, _ := placement.NewGrid(&gpu)
	// One 1g instance at slot 0. First fit puts the next at slot 1 as
	// well; the deployed v2.10 order goes to slot 6; the default keeps
	// [2,8) whole by completing the [0,2) pair.
	node := []placement.GPUState{{Grid: grid, Used: 0b1}}
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(4000)}}}
	for _, pol := range []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{}} {
		as, _ := placement.Select(node, req, pol)
		fmt.Println(pol, as[0].Placement)
	}
	// Output:
	// first-fit [1,2)
	// v2.10 [6,7)
	// frag-aware [1,2)
}

func ExampleGrid_Stranded() {
	gpu := exampleA100("GPU-a")
	grid, _ := placement.NewGrid(&gpu)
	for _, used := range []placement.Occupancy{0, 0b1, 0b11, 0b101} {
		fmt.Printf("%-12v capacity %2d stranded %d\n", used, grid.Capacity(used), grid.Stranded(used))
	}
	// Output:
	// {}           capacity 13 stranded 0
	// {[0,1)}      capacity  9 stranded 3
	// {[0,2)}      capacity  8 stranded 2
	// {[0,1) [2,3)} capacity  7 stranded 2
}
