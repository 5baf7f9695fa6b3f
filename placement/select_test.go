package placement_test

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

func pl(start, size uint32) capability.Placement {
	return capability.Placement{Start: start, Size: size}
}

func TestSelectChoosesSmallestProfile(t *testing.T) {
	tests := []struct {
		name        string
		model       string
		mem         placement.Memory
		profile     string
		pref        []string
		wantProfile string
	}{
		{name: "MiB exactly 1g", model: "A100-SXM4-40GB", mem: placement.MiB(4864), wantProfile: "1g.5gb"},
		{name: "MiB just above 1g", model: "A100-SXM4-40GB", mem: placement.MiB(4865), wantProfile: "1g.10gb"},
		{name: "fewer slices win at equal memory", model: "A100-SXM4-40GB", mem: placement.MiB(9000), wantProfile: "1g.10gb"},
		{name: "percent", model: "A100-SXM4-40GB", mem: placement.Percent(40), wantProfile: "3g.20gb"},
		{name: "100 percent is the full GPU", model: "A100-SXM4-40GB", mem: placement.Percent(100), wantProfile: "7g.40gb"},
		{name: "whole GPU", model: "A100-SXM4-40GB", wantProfile: "7g.40gb"},
		{name: "whole GPU on a 12-slot grid", model: "RTX PRO 6000", wantProfile: "4g.96gb"},
		{name: "4-slot grid", model: "A30", mem: placement.MiB(6000), wantProfile: "2g.12gb"},
		{name: "named profile", model: "A100-SXM4-40GB", profile: "4g.20gb", wantProfile: "4g.20gb"},
		{name: "preference first", model: "A100-SXM4-40GB", mem: placement.MiB(1000), pref: []string{"4g"}, wantProfile: "4g.20gb"},
		{name: "preference by full name", model: "A100-SXM4-40GB", mem: placement.MiB(1000), pref: []string{"2g.10gb"}, wantProfile: "2g.10gb"},
		{name: "preference that cannot cover", model: "A100-SXM4-40GB", mem: placement.MiB(30000), pref: []string{"1g"}, wantProfile: "7g.40gb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := node(t, tc.model, 1)
			req := &placement.Request{Preference: tc.pref, Containers: []placement.ContainerRequest{{Devices: 1, Memory: tc.mem, Profile: tc.profile}}}
			as, err := placement.Select(gpus, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := as[0].Profile; got != tc.wantProfile {
				t.Fatalf("profile = %s, want %s", got, tc.wantProfile)
			}
		})
	}
}

func TestSelectPolicies(t *testing.T) {
	// Two A100s: GPU 0 holds 1g.5gb at slot 0, GPU 1 is empty.
	tests := []struct {
		name   string
		policy placement.Policy
		want   placement.Assignment
	}{
		{name: "first fit takes the lowest start on the first GPU", policy: placement.FirstFit{},
			want: placement.Assignment{GPU: 0, Profile: "1g.5gb", Placement: pl(1, 1)}},
		{name: "v2.10 takes 1g from the highest start", policy: placement.V210{},
			want: placement.Assignment{GPU: 0, Profile: "1g.5gb", Placement: pl(6, 1)}},
		{name: "frag-aware fills slot 1, completing the [0,2) pair", policy: placement.FragmentationAware{},
			want: placement.Assignment{GPU: 0, Profile: "1g.5gb", Placement: pl(1, 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := node(t, "A100-SXM4-40GB", 2)
			gpus[0].Used = gpus[0].Used.Take(pl(0, 1))
			as, err := placement.Select(gpus, oneDevice(4000), tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			got := as[0]
			got.GPUUUID = ""
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSelectFragAwareAvoidsStranding(t *testing.T) {
	// A30 with slot 2 taken: a 1g at 3 leaves the [0,2) pair whole; a 1g at
	// 0 or 1 would strand a slot.
	gpus := node(t, "A30", 1)
	gpus[0].Used = gpus[0].Used.Take(pl(2, 1))
	as, err := placement.Select(gpus, oneDevice(5000), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := as[0].Placement, pl(3, 1); got != want {
		t.Fatalf("placement = %v, want %v", got, want)
	}
	// Across GPUs: a hole on a split GPU is preferred to breaking an empty
	// one, even when the empty one comes first.
	gpus = node(t, "A100-SXM4-40GB", 2)
	gpus[1].Used = gpus[1].Used.Take(pl(4, 4))
	as, err = placement.Select(gpus, oneDevice(4000), nil)
	if err != nil {
		t.Fatal(err)
	}
	if as[0].GPU != 1 {
		t.Fatalf("placed on GPU %d, want the already split GPU 1", as[0].GPU)
	}
}

func TestSelectUnschedulableReasons(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		used     []capability.Placement
		req      placement.Request
		wantErr  error
		wantCont int
	}{
		{name: "no profile large enough", model: "A30", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(30000)}}},
			wantErr: placement.ErrNoProfile},
		{name: "unknown named profile", model: "A30", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Profile: "3g.20gb"}}},
			wantErr: placement.ErrNoProfile},
		{name: "capacity", model: "A100-SXM4-40GB", used: []capability.Placement{pl(0, 4), pl(4, 4)},
			req: *oneDevice(1000), wantErr: placement.ErrCapacity},
		{name: "slot 7 alone is capacity for 1g", model: "A100-SXM4-40GB", used: []capability.Placement{pl(0, 4), pl(4, 1), pl(5, 1), pl(6, 1)},
			req: *oneDevice(1000), wantErr: placement.ErrCapacity},
		{name: "fragmentation", model: "A100-SXM4-40GB", used: []capability.Placement{pl(1, 1), pl(3, 1), pl(5, 1)},
			req: *oneDevice(9900), wantErr: placement.ErrFragmented},
		{name: "fragmentation for 3g", model: "A100-SXM4-40GB", used: []capability.Placement{pl(0, 1), pl(2, 2), pl(4, 1)},
			req: *oneDevice(19000), wantErr: placement.ErrFragmented},
		{name: "excluded by UUID", model: "A30", req: placement.Request{UseUUIDs: []string{"GPU-other"}, Containers: []placement.ContainerRequest{{Devices: 1}}},
			wantErr: placement.ErrExcluded, wantCont: -1},
		{name: "excluded by type", model: "A30", req: placement.Request{NoUseTypes: []string{"a30"}, Containers: []placement.ContainerRequest{{Devices: 1}}},
			wantErr: placement.ErrExcluded, wantCont: -1},
		{name: "second container does not fit", model: "A30", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(100)}, {Devices: 1, Memory: placement.MiB(25000)}}},
			wantErr: placement.ErrNoProfile, wantCont: 1},
		{name: "each fits alone, not together", model: "A30", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 2, Memory: placement.MiB(11000)}, {Devices: 1, Memory: placement.MiB(100)}}},
			wantErr: placement.ErrCapacity, wantCont: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := node(t, tc.model, 1)
			for _, p := range tc.used {
				gpus[0].Used = gpus[0].Used.Take(p)
			}
			as, err := placement.Select(gpus, &tc.req, nil)
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, placement.ErrUnschedulable) {
				t.Fatalf("Select = %v, %v; want %v", as, err, tc.wantErr)
			}
			var ue *placement.UnschedulableError
			if !errors.As(err, &ue) || ue.Container != tc.wantCont {
				t.Fatalf("error %#v: container = %d, want %d", err, ue.Container, tc.wantCont)
			}
		})
	}
}

func TestSelectConstraints(t *testing.T) {
	gpus := node(t, "A100-SXM4-40GB", 3)
	tests := []struct {
		name    string
		req     placement.Request
		wantGPU int
	}{
		{name: "use UUID", req: placement.Request{UseUUIDs: []string{gpus[2].Grid.UUID()}}, wantGPU: 2},
		{name: "nouse UUID", req: placement.Request{NoUseUUIDs: []string{gpus[0].Grid.UUID(), gpus[1].Grid.UUID()}}, wantGPU: 2},
		{name: "use type substring, any case", req: placement.Request{UseTypes: []string{"a100-sxm4"}}, wantGPU: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Containers = []placement.ContainerRequest{{Devices: 1}}
			as, err := placement.Select(gpus, &tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if as[0].GPU != tc.wantGPU {
				t.Fatalf("GPU = %d, want %d", as[0].GPU, tc.wantGPU)
			}
		})
	}
}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name      string
		req       placement.Request
		wantField string
		wantCont  int
	}{
		{name: "negative devices", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: -1}}}, wantField: "Devices"},
		{name: "zero MiB", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1}, {Devices: 1, Memory: placement.MiB(0)}}}, wantField: "Memory.MiB", wantCont: 1},
		{name: "percent 0", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.Percent(0)}}}, wantField: "Memory.Percent"},
		{name: "percent 101", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.Percent(101)}}}, wantField: "Memory.Percent"},
		{name: "unknown kind", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.Memory{Kind: 9}}}}, wantField: "Memory.Kind"},
		{name: "too many devices", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: placement.MaxDevices + 1}}}, wantField: "Devices"},
		{name: "device count sum overflows", req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1}, {Devices: math.MaxInt}}}, wantField: "Devices", wantCont: 1},
		{name: "empty UUID entry", req: placement.Request{UseUUIDs: []string{"GPU-a", " "}}, wantField: "UseUUIDs[1]", wantCont: -1},
		{name: "empty preference", req: placement.Request{Preference: []string{""}}, wantField: "Preference[0]", wantCont: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			var re *placement.RequestError
			if !errors.As(err, &re) || !errors.Is(err, placement.ErrInvalidRequest) {
				t.Fatalf("Validate = %v, want a RequestError", err)
			}
			if re.Field != tc.wantField || re.Container != tc.wantCont {
				t.Fatalf("field %q container %d, want %q %d", re.Field, re.Container, tc.wantField, tc.wantCont)
			}
			if _, err := placement.Select(node(t, "A30", 1), &tc.req, nil); !errors.Is(err, placement.ErrInvalidRequest) {
				t.Fatalf("Select err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	if _, err := placement.Select(nil, &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1}}}, nil); !errors.Is(err, placement.ErrNoProfile) {
		t.Fatalf("no GPUs: err = %v, want ErrNoProfile", err)
	}
	empty := placement.Request{Containers: []placement.ContainerRequest{{Devices: 0}}}
	if as, err := placement.Select(node(t, "A30", 1), &empty, nil); err != nil || len(as) != 0 {
		t.Fatalf("empty request: %v, %v", as, err)
	}
}

func TestSelectMultiDevice(t *testing.T) {
	tests := []struct {
		name  string
		model string
		gpus  int
		used  map[int][]capability.Placement
		req   placement.Request
		want  []placement.Assignment // GPUUUID ignored
	}{
		{name: "several devices on one GPU", model: "A100-SXM4-40GB", gpus: 1,
			req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 2, Memory: placement.MiB(19000)}}},
			want: []placement.Assignment{{ContainerIndex: 0, DeviceIndex: 0, Profile: "3g.20gb", Placement: pl(4, 4)},
				{ContainerIndex: 0, DeviceIndex: 1, Profile: "3g.20gb", Placement: pl(0, 4)}}},
		{name: "across GPUs", model: "A100-SXM4-40GB", gpus: 2,
			req: placement.Request{Containers: []placement.ContainerRequest{{Devices: 1}, {Devices: 1}}},
			want: []placement.Assignment{{ContainerIndex: 0, DeviceIndex: 0, GPU: 0, Profile: "7g.40gb", Placement: pl(0, 8)},
				{ContainerIndex: 1, DeviceIndex: 0, GPU: 1, Profile: "7g.40gb", Placement: pl(0, 8)}}},
		{name: "greedy would strand the 3g; the search packs it", model: "A100-SXM4-40GB", gpus: 1,
			used: map[int][]capability.Placement{0: {pl(0, 2)}},
			req:  placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(9000)}, {Devices: 1, Memory: placement.MiB(19000)}}},
			want: []placement.Assignment{{ContainerIndex: 0, DeviceIndex: 0, Profile: "1g.10gb", Placement: pl(2, 2)},
				{ContainerIndex: 1, DeviceIndex: 0, Profile: "3g.20gb", Placement: pl(4, 4)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpus := node(t, tc.model, tc.gpus)
			for g, ps := range tc.used {
				for _, p := range ps {
					gpus[g].Used = gpus[g].Used.Take(p)
				}
			}
			as, err := placement.Select(gpus, &tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range as {
				as[i].GPUUUID = ""
			}
			if !slices.Equal(as, tc.want) {
				t.Fatalf("got %v\nwant %v", as, tc.want)
			}
		})
	}
}

func TestSelectSearchLimit(t *testing.T) {
	// V210's greedy pass places the 1g.10gb at the highest start, [6,8),
	// which leaves no room for the 3g; only the search finds [2,4) + [4,8).
	gpus := node(t, "A100-SXM4-40GB", 1)
	gpus[0].Used = gpus[0].Used.Take(pl(0, 2))
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(9000)}, {Devices: 1, Memory: placement.MiB(19000)}}}
	_, err := placement.NewSelector(placement.SelectorOptions{Policy: placement.V210{}, MaxSteps: 1}).Select(gpus, req, nil)
	if !errors.Is(err, placement.ErrSearchLimit) {
		t.Fatalf("bound 1: err = %v, want ErrSearchLimit", err)
	}
	as, err := placement.Select(gpus, req, placement.V210{})
	if err != nil {
		t.Fatalf("default bound: %v", err)
	}
	if as[0].Placement != pl(2, 2) || as[1].Placement != pl(4, 4) {
		t.Fatalf("got %v, want [2,4) and [4,8)", as)
	}
}

// TestSelectZeroAllocs enforces the hot-path target: a 1-device decision on
// an 8-GPU node allocates nothing, for every policy.
func TestSelectZeroAllocs(t *testing.T) {
	for _, pol := range []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{},
		placement.FragmentationAware{Metric: placement.InstanceCapacity}, placement.FragmentationAware{Metric: placement.FreePlacements}} {
		gpus := node(t, "A100-SXM4-40GB", 8)
		realistic(t, gpus, 7, 0.5)
		sel := placement.NewSelector(placement.SelectorOptions{Policy: pol})
		req := oneDevice(4000)
		dst := make([]placement.Assignment, 0, 1)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if dst, err = sel.Select(gpus, req, dst[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per decision, want 0", pol, allocs)
		}
		if n := placement.NodeScore(gpus, dst, placement.BinPack); n < 0 || n > placement.MaxNodeScore {
			t.Errorf("score %d out of range", n)
		}
		if a := testing.AllocsPerRun(100, func() { placement.NodeScore(gpus, dst, placement.BinPack) }); a != 0 {
			t.Errorf("NodeScore allocates %v", a)
		}
	}
}

func TestNodeScore(t *testing.T) {
	gpus := node(t, "A100-SXM4-40GB", 2)
	gpus[0].Used = gpus[0].Used.Take(pl(0, 4))
	as := []placement.Assignment{{GPU: 1, Placement: pl(0, 4)}}
	tests := []struct {
		name string
		mode placement.ScoreMode
		as   []placement.Assignment
		want int64
	}{
		{name: "bin-pack before", mode: placement.BinPack, want: 25},
		{name: "bin-pack after", mode: placement.BinPack, as: as, want: 50},
		{name: "spread after", mode: placement.Spread, as: as, want: 50},
		{name: "spread before", mode: placement.Spread, want: 75},
	}
	for _, tc := range tests {
		if got := placement.NodeScore(gpus, tc.as, tc.mode); got != tc.want {
			t.Errorf("%s: score %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOccupancy(t *testing.T) {
	var o placement.Occupancy
	o = o.Take(pl(0, 2)).Take(pl(4, 1))
	tests := []struct {
		name string
		got  any
		want any
	}{
		{name: "String", got: o.String(), want: "{[0,2) [4,5)}"},
		{name: "empty String", got: placement.Occupancy(0).String(), want: "{}"},
		{name: "full String", got: (^placement.Occupancy(0)).String(), want: "{[0,64)}"},
		{name: "Count", got: o.Count(), want: 3},
		{name: "Fits free", got: o.Fits(pl(2, 2)), want: true},
		{name: "Fits touching", got: o.Fits(pl(5, 3)), want: true},
		{name: "Fits overlap", got: o.Fits(pl(1, 2)), want: false},
		{name: "Fits invalid", got: o.Fits(pl(0, 0)), want: false},
		{name: "Release restores", got: o.Take(pl(2, 2)).Release(pl(2, 2)), want: o},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestNewGridErrors(t *testing.T) {
	base := plainGPU(t, "A30", 0)
	tests := []struct {
		name   string
		mutate func(g *capability.GPU)
	}{
		{name: "empty UUID", mutate: func(g *capability.GPU) { g.UUID = "" }},
		{name: "empty profile name", mutate: func(g *capability.GPU) { g.Profiles[0].Name = "" }},
		{name: "duplicate profile", mutate: func(g *capability.GPU) { g.Profiles[1].Name = g.Profiles[0].Name }},
		{name: "placement beyond 64 slots", mutate: func(g *capability.GPU) { g.Profiles[0].Placements = []capability.Placement{pl(63, 2)} }},
		{name: "empty placement", mutate: func(g *capability.GPU) { g.Profiles[0].Placements = []capability.Placement{pl(0, 0)} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := base
			g.Profiles = slices.Clone(base.Profiles)
			tc.mutate(&g)
			if _, err := placement.NewGrid(&g); !errors.Is(err, placement.ErrInvalidGrid) {
				t.Fatalf("NewGrid err = %v, want ErrInvalidGrid", err)
			}
		})
	}
	g, err := placement.NewGrid(&base)
	if err != nil {
		t.Fatal(err)
	}
	if g.Width() != 4 || g.Full() != 0b1111 || !g.Legal("2g.12gb", pl(2, 2)) || g.Legal("2g.12gb", pl(1, 2)) {
		t.Fatalf("grid %v: width %d full %v", g, g.Width(), g.Full())
	}
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{in: "", want: nil},
		{in: " , ,", want: nil},
		{in: "GPU-a", want: []string{"GPU-a"}},
		{in: " GPU-a ,GPU-b,, GPU-c ", want: []string{"GPU-a", "GPU-b", "GPU-c"}},
	}
	for _, tc := range tests {
		if got := placement.SplitList(tc.in); !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("SplitList(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func TestMemoryString(t *testing.T) {
	tests := []struct {
		m    placement.Memory
		want string
	}{
		{m: placement.Memory{}, want: "whole GPU"},
		{m: placement.MiB(4864), want: "4864MiB"},
		{m: placement.Percent(50), want: "50%"},
		{m: placement.Memory{Kind: 7}, want: "MemoryKind(7)"},
	}
	for _, tc := range tests {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// Grids of equal profile tables share one compiled table while any of them
// lives; tables no grid uses are dropped from the cache, so a stream of
// distinct tables (driver memory drift, a faulty registration) does not
// grow the process without bound.
func TestGridTablesInternedAndCollected(t *testing.T) {
	table := func(uuid string, mem uint64) *placement.Grid {
		gpu := capability.GPU{UUID: uuid, Profiles: []capability.Profile{{Name: "1g.5gb", MemoryMB: mem, SliceCount: 1, Placements: []capability.Placement{pl(0, 1)}}}}
		g, err := placement.NewGrid(&gpu)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	keep := table("GPU-keep", 1_000_000)
	for i := range 5000 {
		a, b := table("GPU-a", uint64(2_000_000+i)), table("GPU-b", uint64(2_000_000+i))
		if !placement.SameTable(a, b) {
			t.Fatalf("table %d: equal tables not shared", i)
		}
		if i%500 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	if again := table("GPU-again", 1_000_000); !placement.SameTable(again, keep) {
		t.Error("a live table was not reused")
	}
	if n := placement.InternedShapes(); n > 2000 {
		t.Errorf("%d tables cached after 5000 distinct ones were dropped, want the cache swept", n)
	}
	runtime.KeepAlive(keep)
}
