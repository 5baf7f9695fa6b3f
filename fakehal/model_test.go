package fakehal_test

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// oracleGI is the test's own record of one live GPU instance.
type oracleGI struct {
	info  capability.GIProfileInfo
	at    capability.Placement
	id    uint32
	cis   []realize.ComputeInstance
	procs map[string][]uint32 // MIG UUID -> PIDs
}

// oracle predicts the fake's answers from the facts file's rules, written
// independently of the fake's code.
type oracle struct {
	model  fakehal.Model
	budget uint32
	gis    []*oracleGI
}

func (o *oracle) predictCreate(idx capability.GIProfileIndex, at capability.Placement) error {
	i := slices.IndexFunc(o.model.Profiles, func(p capability.GIProfileInfo) bool { return p.Index == idx })
	if i < 0 {
		return realize.ErrNotSupported
	}
	p := o.model.Profiles[i]
	if !slices.Contains(p.Placements, at) {
		return realize.ErrInvalidPlacement
	}
	var same, used uint32
	for _, g := range o.gis {
		if g.at.Start < at.Start+at.Size && at.Start < g.at.Start+g.at.Size {
			return realize.ErrOccupied
		}
		if g.info.Index == idx {
			same++
		}
		used += g.info.SliceCount
	}
	if same >= p.InstanceCount || used+p.SliceCount > o.budget {
		return realize.ErrOccupied
	}
	// Media engines are a budget of their own (the model's per-profile
	// engine table): a GPU refuses an instance whose engines are taken.
	if o.model.ProfileEngines != nil {
		var dec, enc, jpg, ofa uint32
		for _, e := range append([]fakehal.Engines{o.model.ProfileEngines[idx]}, o.engines()...) {
			dec, enc, jpg, ofa = dec+e.Decoders, enc+e.Encoders, jpg+e.JPEG, ofa+e.OFA
		}
		b := o.model.Engines
		if dec > b.Decoders || enc > b.Encoders || jpg > b.JPEG || ofa > b.OFA {
			return realize.ErrOccupied
		}
	}
	return nil
}

// engines lists the media engines of the live GPU instances.
func (o *oracle) engines() []fakehal.Engines {
	var out []fakehal.Engines
	for _, g := range o.gis {
		out = append(out, o.model.ProfileEngines[g.info.Index])
	}
	return out
}

// TestNodeAgainstOracle drives a node with random creates (published and
// unpublished placements, supported and unsupported profiles), destroys,
// processes and crashes, and compares every answer and the listing with
// the oracle; Check must hold throughout.
func TestNodeAgainstOracle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		modelName := rapid.SampledFrom([]string{"A100-SXM4-40GB", "A30", "RTX PRO 6000", "H100", "B200"}).Draw(t, "model")
		n := fakehal.MustNew(fakehal.Options{GPUs: []string{modelName}})
		m, _ := fakehal.LookupModel(modelName)
		o := &oracle{model: m}
		for _, p := range m.Profiles {
			o.budget = max(o.budget, p.SliceCount)
		}
		width := m.Width()
		anyGI := func(t *rapid.T) *oracleGI {
			if len(o.gis) == 0 {
				t.Skip("no GI")
			}
			return rapid.SampledFrom(o.gis).Draw(t, "gi")
		}

		t.Repeat(map[string]func(*rapid.T){
			"create": func(t *rapid.T) {
				idx := capability.GIProfileIndex(rapid.IntRange(0, int(capability.GIProfileCount)-1).Draw(t, "profile"))
				at := capability.Placement{
					Start: uint32(rapid.IntRange(0, int(width)).Draw(t, "start")),
					Size:  uint32(rapid.SampledFrom([]int{1, 2, 3, 4, 6, 8, 12}).Draw(t, "size")),
				}
				crash := rapid.IntRange(0, 9).Draw(t, "crash") == 0
				if crash {
					n.CrashAfterGI(1)
				}
				want := o.predictCreate(idx, at)
				inst, err := n.CreateInstance(ctx, 0, idx, at)
				if want != nil {
					n.ClearFaults()
					if !errors.Is(err, want) {
						t.Fatalf("create %d at %v: got %v, want %v", idx, at, err, want)
					}
					return
				}
				info := m.Profiles[slices.IndexFunc(m.Profiles, func(p capability.GIProfileInfo) bool { return p.Index == idx })]
				g := &oracleGI{info: info, at: at, procs: map[string][]uint32{}}
				switch {
				case crash:
					if !errors.Is(err, fakehal.ErrCrashed) {
						t.Fatalf("crashing create: %v", err)
					}
					insts, _ := n.Instances(ctx, 0)
					i := slices.IndexFunc(insts, func(x realize.Instance) bool { return x.Placement == at })
					if i < 0 {
						t.Fatalf("crashed create left no GI at %v", at)
					}
					g.id = insts[i].GIID
				case err != nil:
					t.Fatalf("create %d at %v: %v, want success", idx, at, err)
				default:
					g.id, g.cis = inst.GIID, inst.ComputeInstances
				}
				o.gis = append(o.gis, g)
			},
			"destroyCI": func(t *rapid.T) {
				g := anyGI(t)
				ciID := uint32(rapid.IntRange(0, 1).Draw(t, "ci"))
				err := n.DestroyComputeInstance(ctx, 0, g.id, ciID)
				i := slices.IndexFunc(g.cis, func(c realize.ComputeInstance) bool { return c.ID == ciID })
				switch {
				case i < 0:
					if !errors.Is(err, realize.ErrNotFound) {
						t.Fatalf("destroy missing CI: %v", err)
					}
				case len(g.procs[g.cis[i].MIGUUID]) > 0:
					if !errors.Is(err, realize.ErrInUse) {
						t.Fatalf("destroy busy CI: %v", err)
					}
				default:
					if err != nil {
						t.Fatalf("destroy CI: %v", err)
					}
					g.cis = slices.Delete(g.cis, i, i+1)
				}
			},
			"destroyGI": func(t *rapid.T) {
				g := anyGI(t)
				err := n.DestroyGPUInstance(ctx, 0, g.id)
				if len(g.cis) > 0 {
					if !errors.Is(err, realize.ErrInUse) {
						t.Fatalf("destroy GI with CIs: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("destroy bare GI: %v", err)
				}
				o.gis = slices.DeleteFunc(o.gis, func(x *oracleGI) bool { return x == g })
				if err := n.DestroyGPUInstance(ctx, 0, g.id); !errors.Is(err, realize.ErrNotFound) {
					t.Fatalf("destroy GI twice: %v", err)
				}
			},
			"startProcess": func(t *rapid.T) {
				g := anyGI(t)
				if len(g.cis) == 0 {
					t.Skip("no CI")
				}
				u := g.cis[0].MIGUUID
				pid, err := n.StartProcess(0, u)
				if err != nil {
					t.Fatal(err)
				}
				g.procs[u] = append(g.procs[u], pid)
			},
			"stopProcess": func(t *rapid.T) {
				g := anyGI(t)
				for u, pids := range g.procs {
					if len(pids) > 0 {
						if err := n.StopProcess(pids[0]); err != nil {
							t.Fatal(err)
						}
						g.procs[u] = pids[1:]
						return
					}
				}
				t.Skip("no process")
			},
			"": func(t *rapid.T) {
				if err := n.Check(); err != nil {
					t.Fatal(err)
				}
				insts, err := n.Instances(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(insts) != len(o.gis) {
					t.Fatalf("fake lists %d instances, oracle %d", len(insts), len(o.gis))
				}
				for _, g := range o.gis {
					i := slices.IndexFunc(insts, func(x realize.Instance) bool { return x.GIID == g.id })
					if i < 0 || insts[i].Placement != g.at || insts[i].Profile != g.info.Index || !slices.Equal(insts[i].ComputeInstances, g.cis) {
						t.Fatalf("GI %d: fake %+v, oracle %+v", g.id, insts, *g)
					}
				}
				total := 0
				for _, g := range o.gis {
					for _, pids := range g.procs {
						total += len(pids)
					}
				}
				if r, _ := n.Processes(ctx, 0); r.Total != total {
					t.Fatalf("Processes Total %d, oracle %d", r.Total, total)
				}
			},
		})
	})
}
