package dra_test

import (
	"context"
	"fmt"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// A 9000 MiB demand on one A100 becomes a prioritized list of the profiles
// that cover it, each chosen by a CEL selector on the "profile" attribute;
// the structured allocator picks the first free device of the first
// profile that fits, as first-fit does.
func ExampleNode_Allocate() {
	gpus, err := dra.PlainGPUs("A100-SXM4-40GB", 1)
	if err != nil {
		panic(err)
	}
	m, err := dra.NewModel("node-a", gpus)
	if err != nil {
		panic(err)
	}
	n := dra.NewNode(m, dra.NodeOptions{})
	claim, err := m.Claim("pod-a", placement.ContainerRequest{Devices: 1, Memory: placement.MiB(9000)})
	if err != nil {
		panic(err)
	}
	for _, sub := range claim.Spec.Devices.Requests[0].FirstAvailable {
		fmt.Println(sub.Name, sub.Selectors[0].CEL.Expression)
	}
	// An instance already holds [0,2): its counters are consumed.
	busy, _ := m.Lookup(0, "2g.10gb", capability.Placement{Start: 0, Size: 2})
	if err := n.Commit([]dra.Device{busy}); err != nil {
		panic(err)
	}
	devs, err := n.Allocate(context.Background(), claim)
	if err != nil {
		panic(err)
	}
	fmt.Println(devs[0].Name, devs[0].Profile, devs[0].Placement)
	// Output:
	// p0 device.attributes["gpu.nvidia.com"].profile == "1g.10gb"
	// p1 device.attributes["gpu.nvidia.com"].profile == "2g.10gb"
	// p2 device.attributes["gpu.nvidia.com"].profile == "3g.20gb"
	// p3 device.attributes["gpu.nvidia.com"].profile == "4g.20gb"
	// p4 device.attributes["gpu.nvidia.com"].profile == "7g.40gb"
	// gpu-0-1g-10gb-2 1g.10gb [2,4)
}
