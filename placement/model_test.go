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
)

// refGPU is the naive reference: the GPU's capability and the list of
// placements held on it, checked with interval arithmetic only.
type refGPU struct {
	cap  capability.GPU
	held []capability.Placement
}

func (r *refGPU) free(p capability.Placement) bool {
	for _, h := range r.held {
		if h.Overlaps(p) {
			return false
		}
	}
	return true
}

func (r *refGPU) mask() placement.Occupancy {
	var o placement.Occupancy
	for _, h := range r.held {
		for s := h.Start; s < h.End(); s++ {
			o |= 1 << s
		}
	}
	return o
}

// refDemand is the reference's reading of a container request on a GPU.
func refCovers(c placement.ContainerRequest, g *capability.GPU, p *capability.Profile) bool {
	if c.Profile != "" {
		return p.Name == c.Profile
	}
	var top uint64
	for _, q := range g.Profiles {
		top = max(top, q.MemoryMB)
	}
	var d uint64
	switch c.Memory.Kind {
	case placement.MiBDemand:
		d = c.Memory.MiB
	case placement.PercentDemand:
		d = min((g.MemoryMB*uint64(c.Memory.Percent)+99)/100, top)
	default:
		d = top
	}
	return p.MemoryMB >= d
}

// refBest returns the smallest profile (by CompareProfiles) with a free
// published placement for c on any GPU, or nil.
func refBest(gpus []*refGPU, c placement.ContainerRequest) *capability.Profile {
	var best *capability.Profile
	for _, g := range gpus {
		for i := range g.cap.Profiles {
			p := &g.cap.Profiles[i]
			if !refCovers(c, &g.cap, p) {
				continue
			}
			for _, pl := range p.Placements {
				if g.free(pl) && (best == nil || capability.CompareProfiles(p, best) < 0) {
					best = p
				}
			}
		}
	}
	return best
}

var modelNames = []string{"A100-SXM4-40GB", "A100-SXM4-80GB", "H100", "A30", "RTX PRO 6000", "B200"}

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

func drawRequest(t *rapid.T, gpus []*refGPU) placement.ContainerRequest {
	c := placement.ContainerRequest{Devices: 1}
	switch rapid.IntRange(0, 3).Draw(t, "kind") {
	case 0:
		c.Memory = placement.MiB(rapid.Uint64Range(1, 200_000).Draw(t, "mib"))
	case 1:
		c.Memory = placement.Percent(uint32(rapid.IntRange(1, 100).Draw(t, "pct")))
	case 2:
		g := gpus[rapid.IntRange(0, len(gpus)-1).Draw(t, "pgpu")]
		c.Profile = g.cap.Profiles[rapid.IntRange(0, len(g.cap.Profiles)-1).Draw(t, "pidx")].Name
	}
	return c
}

// TestSelectMatchesReference drives a node of random GPUs (mixed models,
// variants included) with random single-device arrivals and departures,
// checking every decision against the naive reference.
func TestSelectMatchesReference(t *testing.T) {
	policies := []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{},
		placement.FragmentationAware{Metric: placement.InstanceCapacity}, placement.FragmentationAware{Metric: placement.FreePlacements}}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "gpus")
		ref := make([]*refGPU, n)
		st := make([]placement.GPUState, n)
		for i := range n {
			model := rapid.SampledFrom(modelNames).Draw(t, "model")
			ref[i] = &refGPU{cap: fullGPU(t, model, i)}
			g, err := placement.NewGrid(&ref[i].cap)
			if err != nil {
				t.Fatal(err)
			}
			st[i] = placement.GPUState{Grid: g}
		}
		pol := rapid.SampledFrom(policies).Draw(t, "policy")
		sel := placement.NewSelector(placement.SelectorOptions{Policy: pol})
		type live struct {
			gpu int
			pl  capability.Placement
		}
		var lives []live
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(lives) > 0 && rapid.IntRange(0, 2).Draw(t, "op") == 0 {
				k := rapid.IntRange(0, len(lives)-1).Draw(t, "victim")
				v := lives[k]
				lives = slices.Delete(lives, k, k+1)
				r := ref[v.gpu]
				r.held = slices.DeleteFunc(r.held, func(p capability.Placement) bool { return p == v.pl })
				st[v.gpu].Used = st[v.gpu].Used.Release(v.pl)
				if st[v.gpu].Used != r.mask() {
					t.Fatalf("after release of %v: occupancy %v, reference %v", v.pl, st[v.gpu].Used, r.mask())
				}
				continue
			}
			c := drawRequest(t, ref)
			req := &placement.Request{Containers: []placement.ContainerRequest{c}}
			as, err := sel.Select(st, req, nil)
			want := refBest(ref, c)
			again, err2 := placement.NewSelector(placement.SelectorOptions{Policy: pol}).Select(st, req, nil)
			if !slices.Equal(as, again) || (err == nil) != (err2 == nil) {
				t.Fatalf("not deterministic: %v %v vs %v %v", as, err, again, err2)
			}
			if err != nil {
				if want != nil {
					t.Fatalf("request %+v pending (%v) but the reference fits %s", c, err, want.Name)
				}
				if !errors.Is(err, placement.ErrUnschedulable) {
					t.Fatalf("error %v is not ErrUnschedulable", err)
				}
				continue
			}
			if want == nil {
				t.Fatalf("request %+v placed %v but the reference finds no fit", c, as)
			}
			if len(as) != 1 {
				t.Fatalf("got %d assignments, want 1", len(as))
			}
			a := as[0]
			r := ref[a.GPU]
			p := r.cap.Profile(a.Profile)
			switch {
			case p == nil:
				t.Fatalf("profile %q not on GPU %d", a.Profile, a.GPU)
			case !p.HasPlacement(a.Placement):
				t.Fatalf("%v is not a published placement of %s", a.Placement, a.Profile)
			case !r.free(a.Placement):
				t.Fatalf("%v overlaps held %v", a.Placement, r.held)
			case !refCovers(c, &r.cap, p):
				t.Fatalf("%s does not cover %+v", a.Profile, c)
			case capability.CompareProfiles(p, want) != 0:
				t.Fatalf("chose %s, the smallest fitting profile is %s", p.Name, want.Name)
			case a.GPUUUID != r.cap.UUID:
				t.Fatalf("GPU UUID %q, want %q", a.GPUUUID, r.cap.UUID)
			}
			r.held = append(r.held, a.Placement)
			st[a.GPU].Used = st[a.GPU].Used.Take(a.Placement)
			if st[a.GPU].Used != r.mask() {
				t.Fatalf("occupancy %v, reference %v", st[a.GPU].Used, r.mask())
			}
			lives = append(lives, live{a.GPU, a.Placement})
		}
	})
}

// TestSelectPodMatchesReference checks multi-device pods: all or nothing,
// no overlap among themselves or with held slots, published placements
// only, and a pod that fits on one GPU alone is never left pending.
func TestSelectPodMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(t, "gpus")
		model := rapid.SampledFrom(modelNames).Draw(t, "model")
		ref := make([]*refGPU, n)
		st := make([]placement.GPUState, n)
		for i := range n {
			ref[i] = &refGPU{cap: plainGPU(t, model, i)}
			g, err := placement.NewGrid(&ref[i].cap)
			if err != nil {
				t.Fatal(err)
			}
			st[i] = placement.GPUState{Grid: g}
			// Random pre-existing occupancy from published placements.
			for range rapid.IntRange(0, 4).Draw(t, "pre") {
				ps := ref[i].cap.Profiles
				p := ps[rapid.IntRange(0, len(ps)-1).Draw(t, "pp")]
				pl := p.Placements[rapid.IntRange(0, len(p.Placements)-1).Draw(t, "ppl")]
				if ref[i].free(pl) {
					ref[i].held = append(ref[i].held, pl)
					st[i].Used = st[i].Used.Take(pl)
				}
			}
		}
		var req placement.Request
		for range rapid.IntRange(1, 3).Draw(t, "containers") {
			c := drawRequest(t, ref)
			c.Devices = rapid.IntRange(0, 4).Draw(t, "devices")
			req.Containers = append(req.Containers, c)
		}
		as, err := placement.Select(st, &req, nil)
		if err != nil {
			if !errors.Is(err, placement.ErrUnschedulable) {
				t.Fatalf("error %v is not ErrUnschedulable", err)
			}
			for g := range ref {
				if fitsAlone(ref[g], req) {
					t.Fatalf("pending (%v) but GPU %d alone fits the pod", err, g)
				}
			}
			return
		}
		if len(as) != req.DeviceCount() {
			t.Fatalf("got %d assignments, want %d", len(as), req.DeviceCount())
		}
		for _, a := range as {
			r := ref[a.GPU]
			p := r.cap.Profile(a.Profile)
			if p == nil || !p.HasPlacement(a.Placement) || !r.free(a.Placement) || !refCovers(req.Containers[a.ContainerIndex], &r.cap, p) {
				t.Fatalf("bad assignment %v (held %v)", a, r.held)
			}
			r.held = append(r.held, a.Placement)
		}
	})
}

// fitsAlone is an exhaustive search for the whole pod on one GPU.
func fitsAlone(r *refGPU, req placement.Request) bool {
	var devs []placement.ContainerRequest
	for _, c := range req.Containers {
		for range c.Devices {
			devs = append(devs, c)
		}
	}
	held := slices.Clone(r.held)
	var rec func(k int) bool
	rec = func(k int) bool {
		if k == len(devs) {
			return true
		}
		for i := range r.cap.Profiles {
			p := &r.cap.Profiles[i]
			if !refCovers(devs[k], &r.cap, p) {
				continue
			}
			for _, pl := range p.Placements {
				ok := true
				for _, h := range held {
					ok = ok && !h.Overlaps(pl)
				}
				if ok {
					held = append(held, pl)
					if rec(k + 1) {
						return true
					}
					held = held[:len(held)-1]
				}
			}
		}
		return false
	}
	return rec(0)
}
