package placementtest_test

import (
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/placementtest"
)

// a100 is the plain-profile table of one A100-SXM4-40GB at position i.
func a100(i int) capability.GPU {
	m, _ := fakehal.LookupModel("A100-SXM4-40GB")
	g, _ := capability.GPUFromDevice(capability.DeviceInfo{Index: i, UUID: placementtest.UUIDOf(i), Name: m.Name,
		MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}, m.Profiles)
	return g
}

// The oracle says whether a pod fits and, when it does not, why.
func ExampleOracle() {
	node := placementtest.Node{
		GPUs: []capability.GPU{a100(0)},
		Held: [][]placementtest.Instance{{{Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}}},
	}
	one := placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(10000)}}}
	two := placement.Request{Containers: []placement.ContainerRequest{{Devices: 2, Profile: "3g.20gb"}}}

	v := placementtest.Oracle(&node, &one)
	fmt.Println(placementtest.FormatRequest(&one), "fits:", v.Fits, "smallest:", v.Smallest.Name)
	v = placementtest.Oracle(&node, &two)
	fmt.Println(placementtest.FormatRequest(&two), "fits:", v.Fits, "reason:", v.Reason)
	// Output:
	// c0: 1 x 10000MiB fits: true smallest: 3g.20gb
	// c0: 2 x 3g.20gb fits: false reason: placement: not enough free slots
}

// A scheduler checks its allocator on one case (Check runs many under
// rapid); here the default selector, and a broken one that ignores the
// instances already on the GPU.
func ExampleCheckCase() {
	c := placementtest.Case{
		Node: placementtest.Node{
			GPUs: []capability.GPU{a100(0)},
			Held: [][]placementtest.Instance{{{Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}}}},
		},
		Request: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.Percent(40)}}},
	}
	good := placementtest.Selector(placement.SelectorOptions{})
	fmt.Println("selector:", placementtest.CheckCase(good, c, placementtest.Options{Tables: fakehal.Tables()}))

	forgetful := placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
		return good.Allocate(&placementtest.Node{GPUs: n.GPUs}, r)
	})
	err := placementtest.CheckCase(forgetful, c, placementtest.Options{Tables: fakehal.Tables()})
	fmt.Println("forgetful:", err != nil)
	// Output:
	// selector: <nil>
	// forgetful: true
}
