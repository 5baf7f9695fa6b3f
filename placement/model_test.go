package placement_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/placementtest"
)

// fullGPU builds a GPU of model with every profile, variants included.
func fullGPU(t fataler, model string, i int) capability.GPU {
	t.Helper()
	m, ok := fakehal.LookupModel(model)
	if !ok {
		t.Fatalf("unknown model %q", model)
	}
	g, errs := capability.GPUFromDevice(capability.DeviceInfo{Index: i, UUID: "GPU-" + strconv.Itoa(i), Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}, m.Profiles)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return g
}

// TestSelectChurnMatchesOracle drives a node drawn by placementtest
// (built-in models and arbitrary grids, variants, unhealthy GPUs) through
// random arrivals and departures. Every arrival, a pod of several
// containers and devices with any demand and constraints, is held to
// placementtest.CheckCase (the exhaustive oracle: no overlap, published
// placements only, smallest profile, no refusal when a fit exists, the
// right reason, determinism, inputs unchanged), and the placements chosen
// are then held on the node, so later decisions see the churned state.
func TestSelectChurnMatchesOracle(t *testing.T) {
	policies := []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{},
		placement.FragmentationAware{Metric: placement.InstanceCapacity}, placement.FragmentationAware{Metric: placement.FreePlacements}}
	rapid.Check(t, func(t *rapid.T) {
		node := placementtest.NodeGen(4, fakehal.Tables()).Draw(t, "node")
		pol := rapid.SampledFrom(policies).Draw(t, "policy")
		sel := placementtest.Selector(placement.SelectorOptions{Policy: pol})
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			if held := heldCount(node); held > 0 && rapid.IntRange(0, 2).Draw(t, "depart") == 0 {
				k := rapid.IntRange(0, held-1).Draw(t, "departing instance")
				release(&node, k)
				continue
			}
			req := placementtest.RequestGen(node, 4).Draw(t, "pod")
			err := placementtest.CheckCase(sel, placementtest.Case{Node: node, Request: req}, placementtest.Options{Tables: fakehal.Tables()})
			if errors.Is(err, placementtest.ErrUndecided) {
				continue
			}
			if err != nil {
				t.Fatalf("policy %v: %v", pol, err)
			}
			as, err := sel.Allocate(&node, &req)
			if err != nil {
				continue
			}
			for _, a := range as {
				node.Held[a.GPU] = append(node.Held[a.GPU], placementtest.Instance{Profile: a.Profile, Placement: a.Placement})
			}
		}
	})
}

func heldCount(n placementtest.Node) int {
	c := 0
	for _, h := range n.Held {
		c += len(h)
	}
	return c
}

// release drops the k-th held instance of the node, counting GPU by GPU.
func release(n *placementtest.Node, k int) {
	for g := range n.Held {
		if k < len(n.Held[g]) {
			n.Held[g] = slices.Delete(slices.Clone(n.Held[g]), k, k+1)
			return
		}
		k -= len(n.Held[g])
	}
}
