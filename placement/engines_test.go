package placement_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
)

func fullGrid(t *testing.T, model string, index int) *placement.Grid {
	t.Helper()
	gpu := fullGPU(t, model, index)
	g, err := placement.NewGrid(&gpu)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestEnginesAgreeWithFakehal walks every combination of GPU instances on
// one GPU of every built-in model, with every profile, and checks that the
// scheduler-side engine rules refuse exactly what fakehal's per-profile
// engine tables refuse, so the scheduler never reserves a combination the
// node would refuse, nor refuses one it would accept.
func TestEnginesAgreeWithFakehal(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range fakehal.Models() {
		if seen[m.Profiles[0].Name+m.Profiles[len(m.Profiles)-1].Name] {
			continue // same table as a model already walked
		}
		seen[m.Profiles[0].Name+m.Profiles[len(m.Profiles)-1].Name] = true
		t.Run(m.Name, func(t *testing.T) {
			n := fakehal.MustNew(fakehal.Options{GPUs: []string{m.Name}})
			w := &engineWalk{t: t, node: n, model: m, grid: fullGrid(t, m.Name, 0)}
			w.walk(nil, placement.Engines{}, 0)
			if w.refused == 0 && m.Name == "NVIDIA A30" {
				t.Error("walk met no engine refusal on A30")
			}
			t.Logf("%d states, %d engine refusals", w.states, w.refused)
		})
	}
}

var t0 = context.Background()

type engineWalk struct {
	t       *testing.T
	node    *fakehal.Node
	model   fakehal.Model
	grid    *placement.Grid
	states  int
	refused int
}

type placed struct {
	p  capability.GIProfileInfo
	at capability.Placement
	gi uint32
}

// slotsFit is fakehal's slot rules: no overlap, instance count, compute
// slices.
func (w *engineWalk) slotsFit(have []placed, p capability.GIProfileInfo, at capability.Placement) bool {
	var same, slices, total uint32
	for _, q := range w.model.Profiles {
		total = max(total, q.SliceCount)
	}
	for _, h := range have {
		if h.at.Overlaps(at) {
			return false
		}
		if h.p.Index == p.Index {
			same++
		}
		slices += h.p.SliceCount
	}
	return same < p.InstanceCount && slices+p.SliceCount <= total
}

func (w *engineWalk) walk(have []placed, used placement.Engines, minStart uint32) {
	w.states++
	for _, p := range w.model.Profiles {
		for _, at := range p.Placements {
			if !w.slotsFit(have, p, at) {
				continue
			}
			want := w.grid.EnginesFit(used, p.Name)
			inst, err := w.node.CreateInstance(t0, 0, p.Index, at)
			if got := err == nil; got != want {
				w.t.Fatalf("on %v: %s at %v: fakehal accepts %v (%v), placement says %v (used %v)", have, p.Name, at, got, err, want, used)
			}
			if err != nil {
				if !errors.Is(err, realize.ErrOccupied) {
					w.t.Fatalf("refusal %v, want ErrOccupied", err)
				}
				w.refused++
				continue
			}
			if at.Start >= minStart {
				w.walk(append(have, placed{p, at, inst.GIID}), used.Add(w.grid.EnginesOf(p.Name)), at.End())
			}
			if err := w.node.DestroyComputeInstance(t0, 0, inst.GIID, inst.ComputeInstances[0].ID); err != nil {
				w.t.Fatal(err)
			}
			if err := w.node.DestroyGPUInstance(t0, 0, inst.GIID); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

func TestEnginesOf(t *testing.T) {
	tests := []struct {
		model, profile string
		want           placement.Engines
	}{
		{"A30", "1g.6gb", placement.Engines{}},
		{"A30", "1g.6gb+me", placement.Engines{OFA: 1}},
		{"A30", "4g.24gb", placement.Engines{OFA: 1}},
		{"A100", "7g.40gb", placement.Engines{OFA: 1}},
		{"RTX PRO 6000", "1g.24gb", placement.Engines{Decoders: 1}},
		{"RTX PRO 6000", "2g.48gb+gfx", placement.Engines{Decoders: 2}},
		{"RTX PRO 6000", "1g.24gb-me", placement.Engines{}},
		{"RTX PRO 6000", "1g.24gb+me.all", placement.Engines{Decoders: 4, OFA: 1}},
		{"RTX PRO 6000", "4g.96gb", placement.Engines{Decoders: 4, OFA: 1}},
		{"RTX PRO 6000", "9g.1gb", placement.Engines{}},
	}
	for _, tt := range tests {
		if got := fullGrid(t, tt.model, 0).EnginesOf(tt.profile); got != tt.want {
			t.Errorf("%s %s: EnginesOf = %v, want %v", tt.model, tt.profile, got, tt.want)
		}
	}
	if got, want := fullGrid(t, "A100", 0).EngineBudget(), (placement.Engines{OFA: 1}); got != want {
		t.Errorf("A100 budget %v, want %v", got, want)
	}
}

// TestSelectRespectsEngines: the selector never places an instance whose
// media engines are taken, on the GPU's recorded engines or within the pod.
func TestSelectRespectsEngines(t *testing.T) {
	a30 := fullGrid(t, "A30", 0)
	rtx := fullGrid(t, "RTX PRO 6000", 0)
	rtx2 := fullGrid(t, "RTX PRO 6000", 1)
	one := func(profile string, n int) *placement.Request {
		return &placement.Request{Containers: []placement.ContainerRequest{{Devices: n, Profile: profile}}}
	}
	two := func(a, b string) *placement.Request {
		return &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: a}, {Devices: 1, Profile: b}}}
	}
	taken := func(g *placement.Grid, profile string, at capability.Placement) placement.GPUState {
		return placement.GPUState{Grid: g, Used: placement.Occupancy(0).Take(at), Engines: g.EnginesOf(profile)}
	}
	tests := []struct {
		name   string
		gpus   []placement.GPUState
		req    *placement.Request
		reason error // nil: placed
		gpuOf  []int // GPU of each device when placed
	}{
		{name: "A30 2g+me next to a 1g+me", gpus: []placement.GPUState{taken(a30, "1g.6gb+me", pl(0, 1))}, req: one("2g.12gb+me", 1), reason: placement.ErrCapacity},
		{name: "A30 plain 2g next to a 1g+me", gpus: []placement.GPUState{taken(a30, "1g.6gb+me", pl(0, 1))}, req: one("2g.12gb", 1), gpuOf: []int{0}},
		{name: "A30 both +me in one pod", gpus: []placement.GPUState{{Grid: a30}}, req: two("1g.6gb+me", "2g.12gb+me"), reason: placement.ErrFragmented},
		{name: "RTX +me.all then 1g", gpus: []placement.GPUState{taken(rtx, "1g.24gb+me.all", pl(0, 3))}, req: one("1g.24gb", 1), reason: placement.ErrCapacity},
		{name: "RTX +me.all then -me", gpus: []placement.GPUState{taken(rtx, "1g.24gb+me.all", pl(0, 3))}, req: one("2g.48gb-me", 1), gpuOf: []int{0}},
		{name: "RTX +me.all and 1g in one pod, two GPUs", gpus: []placement.GPUState{{Grid: rtx}, {Grid: rtx2}}, req: two("1g.24gb+me.all", "1g.24gb"), gpuOf: []int{0, 1}},
		{name: "RTX four 1g", gpus: []placement.GPUState{{Grid: rtx}}, req: one("1g.24gb", 4), gpuOf: []int{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as, err := placement.Select(tt.gpus, tt.req, nil)
			if tt.reason != nil {
				if !errors.Is(err, tt.reason) {
					t.Fatalf("Select = %v, %v; want %v", as, err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range as {
				if a.GPU != tt.gpuOf[i] {
					t.Errorf("device %d on GPU %d, want %d (%v)", i, a.GPU, tt.gpuOf[i], as)
				}
			}
		})
	}
}

func TestEnginesAddSub(t *testing.T) {
	a := placement.Engines{Decoders: 2, OFA: 1}
	if got := a.Add(a).Sub(a); got != a {
		t.Errorf("Add then Sub = %v, want %v", got, a)
	}
	if got := a.Sub(placement.Engines{Decoders: 5, OFA: 5}); got != (placement.Engines{}) {
		t.Errorf("Sub below zero = %v", got)
	}
	if got := a.String(); got != "2 dec, 1 ofa" {
		t.Errorf("String = %q", got)
	}
}

// The scheduler derives media engines from the profile names: on an
// RTX PRO 6000 a +me.all instance takes every decoder, so a plain 1g no
// longer fits beside it, a -me one does.
func ExampleGrid_EnginesOf() {
	m, _ := fakehal.LookupModel("RTX PRO 6000")
	gpu, _ := capability.GPUFromDevice(capability.DeviceInfo{UUID: "GPU-x", Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}, m.Profiles)
	g, _ := placement.NewGrid(&gpu)
	used := g.EnginesOf("1g.24gb+me.all")
	fmt.Println("budget", g.EngineBudget(), "| +me.all takes", used)
	fmt.Println(g.EnginesFit(used, "1g.24gb"), g.EnginesFit(used, "2g.48gb-me"))
	// Output:
	// budget 4 dec, 1 ofa | +me.all takes 4 dec, 1 ofa
	// false true
}
