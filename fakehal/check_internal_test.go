package fakehal

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// TestCheckCatchesCorruption corrupts a node's state directly (the public
// API cannot) to show that every invariant Check claims can fail.
func TestCheckCatchesCorruption(t *testing.T) {
	pl := func(s, n uint32) capability.Placement { return capability.Placement{Start: s, Size: n} }
	tests := []struct {
		name    string
		corrupt func(n *Node, g *gpuState)
	}{
		{name: "overlapping GIs", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile3Slice)
			g.gis = append(g.gis, &gpuInstance{id: 1, profile: p, at: pl(0, 4)}, &gpuInstance{id: 2, profile: p, at: pl(0, 4)})
		}},
		{name: "unpublished placement", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile3Slice)
			g.gis = append(g.gis, &gpuInstance{id: 1, profile: p, at: pl(2, 4)})
		}},
		{name: "unsupported profile", corrupt: func(n *Node, g *gpuState) {
			g.gis = append(g.gis, &gpuInstance{id: 1, profile: capability.GIProfileInfo{Index: capability.GIProfile8Slice, SliceCount: 8}, at: pl(0, 8)})
		}},
		{name: "duplicate GI ID", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile1Slice)
			g.gis = append(g.gis, &gpuInstance{id: 7, profile: p, at: pl(0, 1)}, &gpuInstance{id: 7, profile: p, at: pl(1, 1)})
		}},
		{name: "instance count", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile1SliceRev1)
			g.gis = append(g.gis, &gpuInstance{id: 7, profile: p, at: pl(0, 1)}, &gpuInstance{id: 8, profile: p, at: pl(1, 1)})
		}},
		{name: "compute-slice budget", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile3Slice)
			wide := p
			wide.SliceCount = 5
			g.gis = append(g.gis, &gpuInstance{id: 1, profile: p, at: pl(0, 4)}, &gpuInstance{id: 2, profile: wide, at: pl(4, 4)})
		}},
		{name: "GIs with MIG disabled", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile7Slice)
			g.gis = append(g.gis, &gpuInstance{id: 0, profile: p, at: pl(0, 8)})
			g.info.MIGMode = capability.MIGDisabled
		}},
		{name: "CI slices beyond the GI", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile1Slice)
			g.gis = append(g.gis, &gpuInstance{id: 7, profile: p, at: pl(0, 1), cis: []*computeInstance{{id: 0, slices: 2, uuid: "MIG-a"}}})
		}},
		{name: "duplicate CI ID and MIG UUID", corrupt: func(n *Node, g *gpuState) {
			p, _ := g.profile(capability.GIProfile2Slice)
			g.gis = append(g.gis, &gpuInstance{id: 3, profile: p, at: pl(0, 2), cis: []*computeInstance{{id: 0, slices: 1, uuid: "MIG-a"}, {id: 0, slices: 1, uuid: "MIG-a"}}})
		}},
		{name: "process on a missing MIG device", corrupt: func(n *Node, g *gpuState) {
			n.procs = append(n.procs, &process{pid: 1, gpu: 0, migUUID: "MIG-gone"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := MustNew(Options{})
			if err := n.Check(); err != nil {
				t.Fatalf("fresh node: %v", err)
			}
			tt.corrupt(n, n.gpus[0])
			var ie *InvariantError
			if err := n.Check(); !errors.As(err, &ie) {
				t.Errorf("Check() = %v, want an InvariantError", err)
			}
		})
	}
}
