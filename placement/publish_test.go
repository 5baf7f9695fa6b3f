package placement_test

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// occupancies returns every occupancy of a grid of up to 12 slots, or 4096
// random ones of a wider grid.
func occupancies(g *placement.Grid) []placement.Occupancy {
	var out []placement.Occupancy
	if g.Width() <= 12 {
		for u := range uint64(1) << g.Width() {
			out = append(out, placement.Occupancy(u))
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4096 {
		out = append(out, placement.Occupancy(rng.Uint64())&g.Full())
	}
	return out
}

// TestPublishOrderIsTheDefaultPolicy checks, on every occupancy of each
// model's grid, that PublishOrder lists every published placement once, in
// profile order, with the default policy's cost (NotFree when blocked),
// sorted by cost then start, so that the first free device of a profile
// is the one the default policy chooses on that GPU.
func TestPublishOrderIsTheDefaultPolicy(t *testing.T) {
	models := []struct {
		name string
		gpu  func(t *testing.T) capability.GPU
	}{
		{name: "A100 plain", gpu: func(t *testing.T) capability.GPU { return plainGPU(t, "A100-SXM4-40GB", 0) }},
		{name: "A100 all profiles", gpu: func(t *testing.T) capability.GPU { return fullGPU(t, "A100-SXM4-40GB", 0) }},
		{name: "H100 all profiles", gpu: func(t *testing.T) capability.GPU { return fullGPU(t, "H100", 0) }},
		{name: "A30 all profiles", gpu: func(t *testing.T) capability.GPU { return fullGPU(t, "A30", 0) }},
		{name: "RTX PRO 6000 all profiles", gpu: func(t *testing.T) capability.GPU { return fullGPU(t, "RTX PRO 6000", 0) }},
	}
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			gpu := m.gpu(t)
			g, err := placement.NewGrid(&gpu)
			if err != nil {
				t.Fatal(err)
			}
			sel := placement.NewSelector(placement.SelectorOptions{})
			for _, used := range occupancies(g) {
				got, err := placement.PublishOrder(&gpu, used)
				if err != nil {
					t.Fatalf("PublishOrder(%v): %v", used, err)
				}
				i := 0
				for pi := range g.Profiles() {
					p := &g.Profiles()[pi]
					n := len(p.Placements)
					if i+n > len(got) {
						t.Fatalf("used %v: %d entries, want at least %d", used, len(got), i+n)
					}
					run := got[i : i+n]
					i += n
					checkProfileRun(t, g, used, p, run)
					// The default policy's choice on this GPU alone.
					as, err := sel.Select([]placement.GPUState{{Grid: g, Used: used}},
						&placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: p.Name}}}, nil)
					switch {
					case err == nil && (run[0].Cost == placement.NotFree || as[0].Placement != run[0].Placement):
						t.Errorf("used %v, %s: default policy chose %v, first published %v (cost %d)", used, p.Name, as[0].Placement, run[0].Placement, run[0].Cost)
					case err != nil && run[0].Cost != placement.NotFree:
						t.Errorf("used %v, %s: default policy rejects (%v), first published %v is free", used, p.Name, err, run[0].Placement)
					}
				}
				if i != len(got) {
					t.Fatalf("used %v: %d entries, want %d", used, len(got), i)
				}
			}
		})
	}
}

// checkProfileRun checks one profile's entries of PublishOrder.
func checkProfileRun(t *testing.T, g *placement.Grid, used placement.Occupancy, p *capability.Profile, run []placement.PublishedPlacement) {
	t.Helper()
	seen := map[capability.Placement]bool{}
	for k, e := range run {
		if e.Profile != p.Name || !p.HasPlacement(e.Placement) || seen[e.Placement] {
			t.Fatalf("used %v, %s: entry %d is %+v", used, p.Name, k, e)
		}
		seen[e.Placement] = true
		want := int64(placement.NotFree)
		if used.Fits(e.Placement) {
			want = placement.FragmentationAware{}.Cost(placement.Candidate{Grid: g, Used: used, Profile: p, Placement: e.Placement})
		}
		if e.Cost != want {
			t.Errorf("used %v, %s %v: cost got %d, want %d", used, p.Name, e.Placement, e.Cost, want)
		}
		if k > 0 {
			prev := run[k-1]
			if c := cmp.Or(cmp.Compare(prev.Cost, e.Cost), cmp.Compare(prev.Placement.Start, e.Placement.Start)); c >= 0 {
				t.Errorf("used %v, %s: %v (cost %d) before %v (cost %d)", used, p.Name, prev.Placement, prev.Cost, e.Placement, e.Cost)
			}
		}
	}
}

func TestPublishOrderNeedsNoUUID(t *testing.T) {
	gpu := plainGPU(t, "A30", 0)
	gpu.UUID = ""
	got, err := placement.PublishOrder(&gpu, 0)
	if err != nil {
		t.Fatalf("PublishOrder without a UUID: %v", err)
	}
	n := 0
	for _, p := range gpu.Profiles {
		n += len(p.Placements)
	}
	if len(got) != n {
		t.Errorf("entries: got %d, want %d", len(got), n)
	}
}

func TestPublishOrderListsDuplicatesOnce(t *testing.T) {
	gpu := capability.GPU{Profiles: []capability.Profile{{Name: "1g.6gb", MemoryMB: 5952, SliceCount: 1,
		Placements: []capability.Placement{{Start: 1, Size: 1}, {Start: 0, Size: 1}, {Start: 1, Size: 1}}}}}
	got, err := placement.PublishOrder(&gpu, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pls []capability.Placement
	for _, e := range got {
		pls = append(pls, e.Placement)
	}
	slices.SortFunc(pls, func(a, b capability.Placement) int { return cmp.Compare(a.Start, b.Start) })
	if want := []capability.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}}; !slices.Equal(pls, want) {
		t.Errorf("placements: got %v, want %v", pls, want)
	}
}

func TestPublishOrderRejectsBadTables(t *testing.T) {
	tests := []struct {
		name     string
		profiles []capability.Profile
	}{
		{name: "empty profile name", profiles: []capability.Profile{{MemoryMB: 1, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}}}}},
		{name: "repeated profile", profiles: []capability.Profile{
			{Name: "1g.6gb", MemoryMB: 1, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}}},
			{Name: "1g.6gb", MemoryMB: 1, SliceCount: 1, Placements: []capability.Placement{{Start: 1, Size: 1}}},
		}},
		{name: "empty placement", profiles: []capability.Profile{{Name: "1g.6gb", MemoryMB: 1, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 0}}}}},
		{name: "beyond slot 64", profiles: []capability.Profile{{Name: "1g.6gb", MemoryMB: 1, SliceCount: 1, Placements: []capability.Placement{{Start: 63, Size: 2}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := placement.PublishOrder(&capability.GPU{UUID: "GPU-x", Profiles: tt.profiles}, 0)
			var ge *placement.GridError
			if !errors.As(err, &ge) || !errors.Is(err, placement.ErrInvalidGrid) {
				t.Fatalf("PublishOrder: got %v, %v; want a *GridError", got, err)
			}
			if got != nil {
				t.Errorf("result with an error: got %v, want nil", got)
			}
		})
	}
}

// TestPublishNodeIsTheDefaultPolicy checks, on random occupancies of
// 4-GPU nodes, that PublishNode groups each profile's devices together and
// that the first free device of each group is the default policy's choice
// on the node.
func TestPublishNodeIsTheDefaultPolicy(t *testing.T) {
	for _, model := range []string{"A100-SXM4-40GB", "A30", "RTX PRO 6000"} {
		t.Run(model, func(t *testing.T) {
			st := node(t, model, 4)
			st = append(st, placement.GPUState{}) // no grid: skipped
			total := 0
			for _, s := range st[:4] {
				for _, p := range s.Grid.Profiles() {
					total += len(p.Placements)
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			sel := placement.NewSelector(placement.SelectorOptions{})
			for range 300 {
				for i := range st[:4] {
					st[i].Used = placement.Occupancy(rng.Uint64()&rng.Uint64()) & st[i].Grid.Full()
				}
				got := placement.PublishNode(st)
				if len(got) != total {
					t.Fatalf("entries: got %d, want %d", len(got), total)
				}
				done := map[string]bool{}
				for i := 0; i < len(got); {
					p := got[i].Profile
					if done[p] {
						t.Fatalf("profile %s in two groups", p)
					}
					done[p] = true
					j := i
					for j < len(got) && got[j].Profile == p {
						j++
					}
					first := -1
					for k := i; k < j; k++ {
						e := got[k]
						if k > i {
							prev := got[k-1]
							if cmp.Or(cmp.Compare(prev.Cost, e.Cost), cmp.Compare(prev.GPU, e.GPU), cmp.Compare(prev.Placement.Start, e.Placement.Start)) >= 0 {
								t.Fatalf("%s: %+v before %+v", p, prev, e)
							}
						}
						if first < 0 && e.Cost != placement.NotFree {
							first = k
						}
					}
					as, err := sel.Select(st, &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: p}}}, nil)
					switch {
					case err != nil && first >= 0:
						t.Errorf("%s: default policy rejects (%v), first free published %+v", p, err, got[first])
					case err == nil && first < 0:
						t.Errorf("%s: default policy chose %v, nothing free published", p, as[0])
					case err == nil && (as[0].GPU != got[first].GPU || as[0].Placement != got[first].Placement):
						t.Errorf("%s: default policy chose GPU %d %v, first free published GPU %d %v", p, as[0].GPU, as[0].Placement, got[first].GPU, got[first].Placement)
					}
					i = j
				}
			}
		})
	}
}
