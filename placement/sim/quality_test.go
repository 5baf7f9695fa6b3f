package sim_test

import (
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

// plainGPUs builds n GPUs of a built-in model with its plain profiles.
func plainGPUs(t testing.TB, model string, n int) []capability.GPU {
	t.Helper()
	m, ok := fakehal.LookupModel(model)
	if !ok {
		t.Fatalf("unknown model %q", model)
	}
	out := make([]capability.GPU, n)
	for i := range out {
		dev := capability.DeviceInfo{Index: i, UUID: "GPU-" + model + "-" + string(rune('a'+i)), Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}
		g, errs := capability.GPUFromDevice(dev, m.Profiles)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		kept := g.Profiles[:0]
		for _, p := range g.Profiles {
			if p.Variant == capability.VariantNone {
				kept = append(kept, p)
			}
		}
		g.Profiles = kept
		out[i] = g
	}
	return out
}

func TestExplorePolicies(t *testing.T) {
	pols := []placement.Policy{placement.FirstFit{}, placement.V210{},
		placement.FragmentationAware{}, placement.FragmentationAware{Metric: 3}, placement.FragmentationAware{Metric: 4}, placement.FragmentationAware{Metric: 5}}
	for _, load := range []float64{1.0, 1.3} {
		score := map[string][3]int{}
		for _, model := range []string{"A100-SXM4-40GB", "H100", "A30", "RTX PRO 6000"} {
			gpus := plainGPUs(t, model, 8)
			for _, mix := range []sim.Mix{sim.UniformMix(&gpus[0]), sim.SkewedMix(&gpus[0])} {
				for seed := uint64(1); seed <= 10; seed++ {
					o := sim.HeavyChurn(seed)
					o.Load = load
					evs, err := sim.Generate(gpus, mix, o)
					if err != nil {
						t.Fatal(err)
					}
					rs, err := sim.Compare(gpus, evs, pols)
					if err != nil {
						t.Fatal(err)
					}
					line := fmt.Sprintf("%.1f %s %s %d:", load, model, mix.Name, seed)
					for _, r := range rs[2:] {
						da := r.Accepted - max(rs[0].Accepted, rs[1].Accepted)
						line += fmt.Sprintf(" %s %+d/%d", r.Policy, da, r.Fragmented)
						s := score[r.Policy]
						if da >= 0 {
							s[0]++
						}
						if 2*r.Fragmented <= rs[0].Fragmented {
							s[1]++
						}
						s[2]++
						score[r.Policy] = s
					}
					t.Log(line, " ff frag", rs[0].Fragmented)
				}
			}
		}
		t.Log(load, score)
	}
}
