package placement_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
)

// fitCount returns how many instances of the named profile fit on an
// empty GPU: placements taken by earliest end (optimal for intervals),
// each only while its media engines are free. All instances of one profile
// take the same engines, so the order does not matter for the engines.
func fitCount(g *placement.Grid, name string) int {
	p := g.Profile(name)
	if p == nil {
		return 0
	}
	pls := slices.Clone(p.Placements)
	slices.SortFunc(pls, func(a, b capability.Placement) int { return cmp.Compare(a.End(), b.End()) })
	var used placement.Occupancy
	var eng placement.Engines
	n := 0
	for _, pl := range pls {
		if used.Fits(pl) && g.EnginesFit(eng, name) {
			used = used.Take(pl)
			eng = eng.Add(g.EnginesOf(name))
			n++
		}
	}
	return n
}

// TestCapacityIndependentOfAllowlist: capacity is a property of the
// hardware. For every built-in table (every model at every driver
// generation) and every subset of its profiles, the number of instances
// of each remaining profile that fit an empty GPU equals that under the
// full table, whether the GPU comes from discovery under an allowlist of
// the subset (limits read from the full table) or is decoded from a node
// registration (no limits: the model family's).
func TestCapacityIndependentOfAllowlist(t *testing.T) {
	seen := map[string]bool{}
	for _, table := range fakehal.Tables() {
		key := fmt.Sprint(table.MemoryMB, table.Profiles)
		if seen[key] {
			continue
		}
		seen[key] = true
		t.Run(table.Name, func(t *testing.T) {
			dev := capability.DeviceInfo{UUID: "GPU-full", Name: table.Name, MemoryMB: table.MemoryMB, MIGMode: capability.MIGEnabled}
			full, errs := capability.GPUFromDevice(dev, table.Profiles)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			fg, err := placement.NewGrid(&full)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for _, p := range full.Profiles {
				want[p.Name] = fitCount(fg, p.Name)
			}
			node := fakehal.MustNew(fakehal.Options{GPUs: []string{table.Name}, Driver: driverOf(t, table)})
			n := len(full.Profiles)
			for mask := 1; mask < 1<<n; mask++ {
				var names []string
				for i, p := range full.Profiles {
					if mask&(1<<i) != 0 {
						names = append(names, p.Name)
					}
				}
				discovered, _, err := capability.Discover(t0, node, capability.Allowlist{{Models: []string{table.Name}, Profiles: names}})
				if err != nil {
					t.Fatal(err)
				}
				decoded := discovered[0]
				decoded.Limits = capability.Limits{}
				for _, gpu := range []capability.GPU{discovered[0], decoded} {
					g, err := placement.NewGrid(&gpu)
					if err != nil {
						t.Fatal(err)
					}
					if g.Width() != fg.Width() || g.EngineBudget() != fg.EngineBudget() {
						t.Errorf("allowlist %v (limits %+v): %d slots, budget %v; full table %d slots, budget %v",
							names, gpu.Limits, g.Width(), g.EngineBudget(), fg.Width(), fg.EngineBudget())
					}
					for _, name := range names {
						if got := fitCount(g, name); got != want[name] {
							t.Errorf("allowlist %v (limits %+v): %d × %s fit, full table %d", names, gpu.Limits, got, name, want[name])
						}
					}
				}
			}
		})
	}
}

// driverOf returns the driver generation whose table fakehal reports as
// table.
func driverOf(t *testing.T, table capability.ModelTable) fakehal.Driver {
	m, _ := fakehal.LookupModel(table.Name)
	for _, d := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		if slices.EqualFunc(m.ForDriver(d).Profiles, table.Profiles, func(a, b capability.GIProfileInfo) bool {
			return a.Name == b.Name && a.MemoryMB == b.MemoryMB
		}) {
			return d
		}
	}
	t.Fatalf("%s: no driver generation reports this table", table.Name)
	return 0
}

// The issue this guards against: an RTX PRO 6000 whose allowlist holds
// only 1g.24gb and 1g.24gb+me.all still takes four 1g.24gb, as the
// hardware does; the media-engine budget is the GPU's, not the table's.
func TestCapacityRTXNarrowAllowlist(t *testing.T) {
	node := fakehal.MustNew(fakehal.Options{GPUs: []string{"RTX PRO 6000"}})
	gpus, _, err := capability.Discover(t0, node, capability.Allowlist{{Models: []string{"RTX PRO 6000"}, Profiles: []string{"1g.24gb", "1g.24gb+me.all"}}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := placement.NewGrid(&gpus[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := fitCount(g, "1g.24gb"); got != 4 {
		t.Errorf("%d × 1g.24gb fit, want 4", got)
	}
	if got, want := g.EngineBudget(), (placement.Engines{Decoders: 4, OFA: 1}); got != want {
		t.Errorf("budget %v, want %v", got, want)
	}
}
