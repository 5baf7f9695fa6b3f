package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// rung picks a profile of the GPU's ladder, so that one workload describes
// every model: the same shapes on an A100 (1g, 2g, 3g, 7g) and an A30 (1g,
// 2g, 4g).
type rung int

const (
	small rung = iota // the smallest profile
	mid               // the second smallest (the smallest on short ladders)
	big               // the largest below the whole GPU
	whole             // the whole GPU
)

func (r rung) profile(ladder []capability.Profile) capability.Profile {
	n := len(ladder)
	switch r {
	case small:
		return ladder[0]
	case mid:
		if n >= 3 {
			return ladder[1]
		}
		return ladder[0]
	case big:
		return ladder[max(n-2, 0)]
	default:
		return ladder[n-1]
	}
}

// shape is one kind of pod: per container, how many devices of which rung.
type shape struct {
	name       string
	containers [][]rung // containers[i] lists one rung per device
}

// pattern is the mixed workload, repeated (with a numeric suffix) while the
// node has room for it: large jobs first, then interactive and inference
// pods, one of them with two containers.
var pattern = []shape{
	{name: "train", containers: [][]rung{{whole}}},
	{name: "finetune", containers: [][]rung{{big, big}}},
	{name: "notebook", containers: [][]rung{{big}}},
	{name: "dev-a", containers: [][]rung{{mid}}},
	{name: "dev-b", containers: [][]rung{{mid}}},
	{name: "infer", containers: [][]rung{{small}}},
	{name: "pipeline", containers: [][]rung{{small}, {small}}},
	{name: "dev-c", containers: [][]rung{{mid}}},
	{name: "dev-d", containers: [][]rung{{mid}}},
}

// workload builds the pods of the pattern that fit the node's slots by
// their sizes alone, repeating it while anything fits: a realistic mix
// that fills the node. Whether each really fits is the scheduler's call.
// On a small node (fewer than smallNode slots, such as two A30s) the
// shapes with big or whole-GPU devices are left out: they would take most
// of the node and crowd out the small pods whose ends the later steps show
// (a success, an Allocate after a restart, fragmentation).
func workload(ladder []capability.Profile, slots uint32) []*pod {
	var pods []*pod
	budget := slots
	for round := 0; ; round++ {
		added := false
		for _, sh := range pattern {
			p := sh.pod(ladder, round)
			need := sh.slots(ladder)
			if need > budget || slots < smallNode && sh.large() {
				continue
			}
			budget -= need
			pods = append(pods, p)
			added = true
		}
		if !added {
			return pods
		}
	}
}

// smallNode is the slot count below which [workload] leaves out large
// shapes: two 8-slot GPUs and more keep the whole pattern.
const smallNode = 16

// large reports whether the shape asks for a big or whole-GPU device.
func (sh shape) large() bool {
	for _, c := range sh.containers {
		if slices.Contains(c, big) || slices.Contains(c, whole) {
			return true
		}
	}
	return false
}

func (sh shape) slots(ladder []capability.Profile) uint32 {
	var n uint32
	for _, c := range sh.containers {
		for _, r := range c {
			n += r.profile(ladder).Placements[0].Size
		}
	}
	return n
}

// pod builds the pod with memory demands (nvidia.com/gpumem) equal to the
// rung's profile memory, or no memory demand (the whole GPU) for whole.
func (sh shape) pod(ladder []capability.Profile, round int) *pod {
	name := fmt.Sprintf("%s-%d", sh.name, round)
	p := &pod{Pod: reservation.Pod{UID: "uid-" + name, Namespace: "default", Name: name,
		Phase: reservation.PodPending, Annotations: map[string]string{}}}
	var demands []string
	for _, c := range sh.containers {
		cr := placement.ContainerRequest{Devices: len(c)}
		d := fmt.Sprintf("gpu=%d", len(c))
		if c[0] != whole {
			mib := c[0].profile(ladder).MemoryMB
			cr.Memory = placement.MiB(mib)
			d += fmt.Sprintf(" gpumem=%d", mib)
		}
		p.req.Containers = append(p.req.Containers, cr)
		p.DeviceRequests = append(p.DeviceRequests, cr.Devices) // the container's nvidia.com/gpu limit
		demands = append(demands, d)
	}
	p.demand = strings.Join(demands, "; ")
	if len(demands) > 1 && !slices.ContainsFunc(demands, func(d string) bool { return d != demands[0] }) {
		p.demand = fmt.Sprintf("%s x%d containers", demands[0], len(demands))
	}
	return p
}

// demandPod is a one-device pod asking for the memory of profile pr.
func demandPod(name string, pr capability.Profile) *pod {
	p := &pod{Pod: reservation.Pod{UID: "uid-" + name, Namespace: "default", Name: name,
		Phase: reservation.PodPending, Annotations: map[string]string{}}}
	p.req.Containers = []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(pr.MemoryMB)}}
	p.DeviceRequests = []int{1}
	p.demand = fmt.Sprintf("gpu=1 gpumem=%d", pr.MemoryMB)
	return p
}
