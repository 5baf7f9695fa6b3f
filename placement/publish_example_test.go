package placement_test

import (
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// A driver publishing an A30's MIG devices for the structured allocator
// lists them in PublishOrder's order and republishes after each change.
// With slot 0 taken, the next 1g.6gb goes to slot 1, next to it, rather
// than splitting the free [2,4) that a 2g.12gb could still use.
func ExamplePublishOrder() {
	a30 := capability.GPU{Name: "NVIDIA A30", MemoryMB: 24576, Profiles: []capability.Profile{
		{Name: "1g.6gb", MemoryMB: 5952, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}}},
		{Name: "2g.12gb", MemoryMB: 11968, SliceCount: 2, Placements: []capability.Placement{{Start: 0, Size: 2}, {Start: 2, Size: 2}}},
		{Name: "4g.24gb", MemoryMB: 24000, SliceCount: 4, Placements: []capability.Placement{{Start: 0, Size: 4}}},
	}}
	used := placement.Occupancy(0).Take(capability.Placement{Start: 0, Size: 1})
	order, err := placement.PublishOrder(&a30, used)
	if err != nil {
		panic(err)
	}
	for _, p := range order {
		free := "free"
		if p.Cost == placement.NotFree {
			free = "blocked"
		}
		fmt.Println(p.Profile, p.Placement, free)
	}
	// Output:
	// 1g.6gb [1,2) free
	// 1g.6gb [2,3) free
	// 1g.6gb [3,4) free
	// 1g.6gb [0,1) blocked
	// 2g.12gb [2,4) free
	// 2g.12gb [0,2) blocked
	// 4g.24gb [0,4) blocked
}

// A driver publishing two A30s for the structured allocator keeps each
// profile's devices together, in PublishNode's order, and republishes after
// each change. With slot 0 of the second GPU taken, its free slots come
// first for 1g.6gb: the allocator fills the hole, as the default policy
// does, and keeps the first GPU whole.
func ExamplePublishNode() {
	a30 := capability.GPU{Name: "NVIDIA A30", MemoryMB: 24576, Profiles: []capability.Profile{
		{Name: "1g.6gb", MemoryMB: 5952, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}}},
		{Name: "2g.12gb", MemoryMB: 11968, SliceCount: 2, Placements: []capability.Placement{{Start: 0, Size: 2}, {Start: 2, Size: 2}}},
		{Name: "4g.24gb", MemoryMB: 24000, SliceCount: 4, Placements: []capability.Placement{{Start: 0, Size: 4}}},
	}}
	var node []placement.GPUState
	for _, uuid := range []string{"GPU-a", "GPU-b"} {
		gpu := a30
		gpu.UUID = uuid
		g, err := placement.NewGrid(&gpu)
		if err != nil {
			panic(err)
		}
		node = append(node, placement.GPUState{Grid: g})
	}
	node[1].Used = node[1].Used.Take(capability.Placement{Start: 0, Size: 1})
	for _, p := range placement.PublishNode(node) {
		if p.Profile == "1g.6gb" {
			state := "free"
			if p.Cost == placement.NotFree {
				state = "blocked"
			}
			fmt.Println(p.Profile, "GPU", p.GPU, p.Placement, state)
		}
	}
	// Output:
	// 1g.6gb GPU 1 [1,2) free
	// 1g.6gb GPU 1 [2,3) free
	// 1g.6gb GPU 1 [3,4) free
	// 1g.6gb GPU 0 [0,1) free
	// 1g.6gb GPU 0 [1,2) free
	// 1g.6gb GPU 0 [2,3) free
	// 1g.6gb GPU 0 [3,4) free
	// 1g.6gb GPU 1 [0,1) blocked
}
