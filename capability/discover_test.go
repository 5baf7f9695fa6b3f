package capability_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// wantProfile is the scheduler-facing part of a discovered profile plus the
// identity that realization needs.
type wantProfile struct {
	name       string
	memoryMB   uint64
	core       uint32
	slices     uint32
	placements []capability.Placement
	index      capability.GIProfileIndex
	max        uint32
}

func checkProfiles(t *testing.T, got []capability.Profile, want []wantProfile) {
	t.Helper()
	if len(got) != len(want) {
		names := make([]string, len(got))
		for i := range got {
			names[i] = got[i].Name
		}
		t.Fatalf("got %d profiles %v, want %d", len(got), names, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.MemoryMB != w.memoryMB || g.Core != w.core || g.SliceCount != w.slices ||
			g.GIProfileIndex != w.index || g.MaxInstances != w.max || !reflect.DeepEqual(g.Placements, w.placements) {
			t.Errorf("profile %d: got %s mem %d core %d slices %d idx %d max %d %v, want %+v",
				i, g.Name, g.MemoryMB, g.Core, g.SliceCount, g.GIProfileIndex, g.MaxInstances, g.Placements, w)
		}
	}
}

func TestDiscoverA100_40GBReproducesFactsTable(t *testing.T) {
	// Every profile allowed, so the whole facts table comes back.
	policy := capability.Allowlist{{
		Models:   []string{"A100-SXM4-40GB"},
		Profiles: []string{"7g.40gb", "4g.20gb", "3g.20gb", "2g.10gb", "1g.10gb", "1g.5gb+me", "1g.5gb"},
	}}
	want := []wantProfile{
		{"1g.5gb", 4864, 15, 1, starts(1, 0, 1, 2, 3, 4, 5, 6), capability.GIProfile1Slice, 7},
		{"1g.5gb+me", 4864, 15, 1, starts(1, 0, 1, 2, 3, 4, 5, 6), capability.GIProfile1SliceRev1, 1},
		{"1g.10gb", 9856, 15, 1, starts(2, 0, 2, 4, 6), capability.GIProfile1SliceRev2, 4},
		{"2g.10gb", 9856, 29, 2, starts(2, 0, 2, 4), capability.GIProfile2Slice, 3},
		{"3g.20gb", 19968, 43, 3, starts(4, 0, 4), capability.GIProfile3Slice, 2},
		{"4g.20gb", 19968, 58, 4, starts(4, 0), capability.GIProfile4Slice, 1},
		{"7g.40gb", 40192, 100, 7, starts(8, 0), capability.GIProfile7Slice, 1},
	}
	for _, tc := range []struct {
		name  string
		table []capability.GIProfileInfo
	}{
		{name: "NVML names", table: a100_40},
		{name: "derived names", table: withoutNames(a100_40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hw fakeView
			hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, tc.table)
			gpus, report, err := capability.Discover(context.Background(), &hw, policy)
			if err != nil {
				t.Fatal(err)
			}
			if len(report.Findings) != 0 {
				t.Errorf("got findings %v, want none", report.Findings)
			}
			if len(gpus) != 1 {
				t.Fatalf("got %d GPUs, want 1", len(gpus))
			}
			g := gpus[0]
			if g.UUID != "GPU-00000000" || g.Name != "NVIDIA A100-SXM4-40GB" || g.MemoryMB != a100_40Total || g.MIGMode != capability.MIGEnabled {
				t.Errorf("got GPU %+v", g)
			}
			if got := g.Width(); got != 8 {
				t.Errorf("got width %d, want 8", got)
			}
			checkProfiles(t, g.Profiles, want)
			if p := g.Profile("1g.5gb+me"); p == nil || p.Variant != capability.VariantME || p.CIProfileIndex != capability.CIProfile1Slice {
				t.Errorf("got +me profile %+v, want VariantME with the 1-slice CI profile", p)
			}
		})
	}
}

func TestDiscoverDefaultPolicy(t *testing.T) {
	var hw fakeView
	hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
	hw.add("NVIDIA A100-SXM4-80GB", a100_80Total, a100_80)
	hw.add("NVIDIA A30", a30Total, withoutNames(a30))
	hw.add("NVIDIA RTX PRO 6000 Blackwell Server Edition", rtxProTotal, rtxPro)
	hw.add("NVIDIA H100 80GB HBM3", h100Total, withoutNames(h100))
	hw.add("NVIDIA H200 NVL", h200Total, h200)

	gpus, report, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		gpu   int
		names []string
		cores []uint32
		width uint32
	}{
		{gpu: 0, names: []string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}, cores: []uint32{15, 29, 43, 100}, width: 8},
		{gpu: 1, names: []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}, cores: []uint32{15, 29, 43, 100}, width: 8},
		{gpu: 2, names: []string{"1g.6gb", "2g.12gb", "4g.24gb"}, cores: []uint32{25, 50, 100}, width: 4},
		{gpu: 3, names: []string{"1g.24gb", "2g.48gb", "4g.96gb"}, cores: []uint32{25, 50, 100}, width: 12},
		{gpu: 4, names: []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}, cores: []uint32{13, 25, 46, 100}, width: 8},
		{gpu: 5, names: []string{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"}, cores: []uint32{13, 25, 46, 100}, width: 8},
	}
	if len(gpus) != len(tests) {
		t.Fatalf("got %d GPUs, want %d", len(gpus), len(tests))
	}
	for _, tc := range tests {
		g := gpus[tc.gpu]
		var names []string
		var cores []uint32
		for _, p := range g.Profiles {
			names = append(names, p.Name)
			cores = append(cores, p.Core)
		}
		if !reflect.DeepEqual(names, tc.names) || !reflect.DeepEqual(cores, tc.cores) {
			t.Errorf("GPU %d %q: got %v cores %v, want %v cores %v", tc.gpu, g.Name, names, cores, tc.names, tc.cores)
		}
		if got := g.Width(); got != tc.width {
			t.Errorf("GPU %d: got width %d, want %d", tc.gpu, got, tc.width)
		}
	}
	// The 3g.39gb and 7g.79gb aliases name the same profiles as the
	// driver's 3g.40gb and 7g.80gb: resolved, and said so.
	a100_80Entry := entryOf(t, "NVIDIA A100-SXM4-80GB")
	want := []capability.Finding{{
		Kind: capability.FindingResolved, GPU: 1, UUID: "GPU-00000001",
		Model: "NVIDIA A100-SXM4-80GB", Entry: a100_80Entry, Profile: "3g.39gb", Resolved: "3g.40gb",
	}, {
		Kind: capability.FindingResolved, GPU: 1, UUID: "GPU-00000001",
		Model: "NVIDIA A100-SXM4-80GB", Entry: a100_80Entry, Profile: "7g.79gb", Resolved: "7g.80gb",
	}}
	if !reflect.DeepEqual(report.Findings, want) {
		t.Errorf("got findings %v, want %v", report.Findings, want)
	}
}

// entryOf returns the default entry matching name.
func entryOf(t *testing.T, name string) int {
	t.Helper()
	i, _, ok := capability.DefaultAllowlist().Match(name)
	if !ok {
		t.Fatalf("no default entry for %q", name)
	}
	return i
}

func TestDiscoverReportsWhatItLeavesOut(t *testing.T) {
	var hw fakeView
	hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
	t4 := hw.add("Tesla T4", 15360, nil)
	t4.MIGMode, t4.PendingMIGMode = capability.MIGDisabled, capability.MIGDisabled
	hw.add("NVIDIA L40S", 46068, a100_40) // MIG on, but no entry
	pending := hw.add("NVIDIA A30", a30Total, a30)
	pending.PendingMIGMode = capability.MIGDisabled
	unknown := hw.add("NVIDIA A30-PCIE-24GB", a30Total, a30)
	unknown.MIGMode, unknown.PendingMIGMode = capability.MIGUnknown, capability.MIGUnknown

	policy := capability.Allowlist{
		{Models: []string{"A100"}, Profiles: []string{"1g.5gb", "9g.99gb", "7g.40gb"}},
		{Models: []string{"A30"}, Profiles: []string{"8g.1gb"}},
	}
	gpus, report, err := capability.Discover(context.Background(), &hw, policy)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 5 {
		t.Fatalf("got %d GPUs, want every device (5)", len(gpus))
	}
	for i, g := range gpus {
		if g.Index != i {
			t.Errorf("GPU %d has index %d", i, g.Index)
		}
		if i > 0 && len(g.Profiles) != 0 {
			t.Errorf("GPU %d: got %d profiles, want none", i, len(g.Profiles))
		}
	}
	if got := len(gpus[0].Profiles); got != 2 {
		t.Errorf("GPU 0: got %d profiles, want 2", got)
	}
	type short struct {
		kind    capability.FindingKind
		gpu     int
		entry   int
		profile string
	}
	var got []short
	for _, f := range report.Findings {
		got = append(got, short{f.Kind, f.GPU, f.Entry, f.Profile})
	}
	want := []short{
		{capability.FindingUnresolved, 0, 0, "9g.99gb"},
		{capability.FindingMIGDisabled, 1, -1, ""},
		{capability.FindingNoMatch, 2, -1, ""},
		{capability.FindingModePending, 3, 1, ""},
		{capability.FindingUnresolved, 3, 1, "8g.1gb"},
		{capability.FindingNoProfiles, 3, 1, ""},
		{capability.FindingMIGDisabled, 4, 1, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got findings\n%v\nwant\n%v", got, want)
	}
	if got := report.Of(capability.FindingMIGDisabled); len(got) != 2 {
		t.Errorf("got %d mig-disabled findings, want 2", len(got))
	}
	// MIG-disabled GPUs are not asked for profiles.
	for _, i := range hw.calls {
		if i == 1 || i == 4 {
			t.Errorf("GIProfiles called for MIG-disabled GPU %d", i)
		}
	}
}

func TestDiscoverBadProfiles(t *testing.T) {
	table := append([]capability.GIProfileInfo(nil), a100_40...)
	table[0].Name = "MIG 1g.5gb"                                                   // NVML V3 prefix: accepted
	table[1].Name = "one slice"                                                    // junk name
	table[2].Placements = nil                                                      // no placements
	table[5].Name = "3g.20gb"                                                      // 4g: collides with index 2's name
	table[3].SliceCount = 0                                                        // no slices
	table = append(table, gip(capability.GIProfile8Slice, 1, "", 8, 1, 0, 0, nil)) // nothing derivable
	var hw fakeView
	hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, table)
	policy := capability.Allowlist{{Models: []string{"A100"}, Profiles: []string{"1g.5gb", "1g.10gb", "3g.20gb", "7g.40gb"}}}
	gpus, report, err := capability.Discover(context.Background(), &hw, policy)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range gpus[0].Profiles {
		names = append(names, p.Name)
	}
	if want := []string{"1g.5gb", "3g.20gb", "7g.40gb"}; !reflect.DeepEqual(names, want) {
		t.Errorf("got profiles %v, want %v", names, want)
	}
	bad := report.Of(capability.FindingBadProfile)
	if len(bad) != 5 {
		t.Fatalf("got %d bad-profile findings %v, want 5", len(bad), bad)
	}
	var nameErr *capability.ProfileNameError
	if !errors.As(bad[0].Err, &nameErr) {
		t.Errorf("got %v, want a *ProfileNameError first", bad[0].Err)
	}
	for _, f := range bad {
		if !errors.Is(f.Err, capability.ErrProfileName) && !errors.Is(f.Err, capability.ErrProfileInfo) {
			t.Errorf("finding %v: error matches neither ErrProfileName nor ErrProfileInfo", f)
		}
	}
	// Discover's own checks name the NVML profile index.
	for _, want := range []capability.GIProfileIndex{table[2].Index, table[5].Index} {
		found := false
		for _, f := range bad {
			var infoErr *capability.ProfileInfoError
			found = found || errors.As(f.Err, &infoErr) && infoErr.Index == want
		}
		if !found {
			t.Errorf("no *ProfileInfoError for profile index %d in %v", want, bad)
		}
	}
	if got := report.Of(capability.FindingUnresolved); len(got) != 1 || got[0].Profile != "1g.10gb" {
		t.Errorf("got unresolved %v, want 1g.10gb", got)
	}
	// The collision keeps the first in CompareProfiles order: the real 3g
	// (3 slices) before the renamed 4g (4 slices, same memory).
	if p := gpus[0].Profile("3g.20gb"); p == nil || p.GIProfileIndex != capability.GIProfile3Slice {
		t.Errorf("got %+v, want the first 3g.20gb in profile order", p)
	}
}

func TestDiscoverHardwareErrors(t *testing.T) {
	boom := errors.New("nvml: unknown error")
	t.Run("Devices", func(t *testing.T) {
		hw := fakeView{devErr: boom}
		_, _, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
		var hwErr *capability.HardwareError
		if !errors.As(err, &hwErr) || hwErr.GPU != -1 || hwErr.Op != "Devices" || !errors.Is(err, boom) {
			t.Errorf("got %v, want a Devices HardwareError wrapping the cause", err)
		}
	})
	t.Run("GIProfiles", func(t *testing.T) {
		var hw fakeView
		hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
		hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
		hw.gipErr = map[int]error{1: boom}
		gpus, _, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
		var hwErr *capability.HardwareError
		if !errors.As(err, &hwErr) || hwErr.GPU != 1 || hwErr.Op != "GIProfiles" || !errors.Is(err, boom) {
			t.Errorf("got %v, want a GIProfiles HardwareError for GPU 1", err)
		}
		if gpus != nil {
			t.Errorf("got GPUs %v with an error", gpus)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		var hw fakeView
		hw.add("NVIDIA A100-SXM4-40GB", a100_40Total, a100_40)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := capability.Discover(ctx, &hw, capability.DefaultAllowlist()); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}

func TestDiscoverOrdersByIndex(t *testing.T) {
	var hw fakeView
	hw.add("NVIDIA A30", a30Total, a30)
	hw.add("Tesla T4", 15360, nil)
	hw.devs[1].MIGMode = capability.MIGDisabled
	hw.devs[1].PendingMIGMode = capability.MIGDisabled
	hw.devs[0].Index, hw.devs[1].Index = 1, 0
	hw.profiles = map[int][]capability.GIProfileInfo{1: a30}
	gpus, report, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].Index != 0 || gpus[1].Index != 1 || gpus[1].Name != "NVIDIA A30" {
		t.Errorf("got order %d %d, want by index", gpus[0].Index, gpus[1].Index)
	}
	if len(report.Findings) != 1 || report.Findings[0].GPU != 0 {
		t.Errorf("got %v", report.Findings)
	}
}

func TestFindingStrings(t *testing.T) {
	tests := []struct {
		kind capability.FindingKind
		want string
	}{
		{capability.FindingNoMatch, "no-match"},
		{capability.FindingMIGDisabled, "mig-disabled"},
		{capability.FindingModePending, "mode-pending"},
		{capability.FindingUnresolved, "unresolved"},
		{capability.FindingBadProfile, "bad-profile"},
		{capability.FindingNoProfiles, "no-profiles"},
		{0, "FindingKind(0)"},
		{99, "FindingKind(99)"},
	}
	for _, tc := range tests {
		if got := tc.kind.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	f := capability.Finding{Kind: capability.FindingUnresolved, GPU: 1, UUID: "GPU-1", Model: "NVIDIA A30", Entry: 2, Profile: "1g.6gb"}
	if got, want := f.String(), `GPU 1 (GPU-1, "NVIDIA A30"): unresolved entry 2 profile 1g.6gb`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDiscoverDefaultPolicyOlderDriverNames(t *testing.T) {
	// A driver that names the A100-80GB's profiles by naive rounding still
	// publishes them under the default policy.
	table := append([]capability.GIProfileInfo(nil), a100_80...)
	table[4].Name, table[6].Name = "3g.39gb", "7g.79gb"
	var hw fakeView
	hw.add("NVIDIA A100 80GB PCIe", a100_80Total, table)
	gpus, report, err := capability.Discover(context.Background(), &hw, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	var names, resolved []string
	for _, p := range gpus[0].Profiles {
		names = append(names, p.Name)
	}
	for _, f := range report.Of(capability.FindingResolved) {
		resolved = append(resolved, f.Profile+"="+f.Resolved)
	}
	if want := []string{"1g.10gb", "2g.20gb", "3g.39gb", "7g.79gb"}; !reflect.DeepEqual(names, want) {
		t.Errorf("got %v, want %v", names, want)
	}
	if want := []string{"3g.40gb=3g.39gb", "7g.80gb=7g.79gb"}; !reflect.DeepEqual(resolved, want) {
		t.Errorf("got resolved %v, want %v", resolved, want)
	}
	if len(report.Findings) != 2 {
		t.Errorf("findings %v, want the two resolutions", report.Findings)
	}
}

// The names HAMi's chart lists resolve to the driver's profiles wherever
// they denote the same profile: the chart's A100 80GB entry on a driver
// naming 7g.80gb publishes the full-GPU profile (the deployed chart lost
// it), and its B200 entry, which also matches GB200, resolves there too.
func TestDiscoverChartNames(t *testing.T) {
	chart := capability.Allowlist{
		{Models: []string{"A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"}, Profiles: []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"}},
		{Models: []string{"H200 NVL", "H200-SXM5"}, Profiles: []string{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"}},
		{Models: []string{"B200"}, Profiles: []string{"1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"}},
	}
	gb200 := []capability.GIProfileInfo{
		gip(capability.GIProfile1Slice, 19, "1g.23gb", 1, 7, 18, 22528, starts(1, 0, 1, 2, 3, 4, 5, 6)),
		gip(capability.GIProfile2Slice, 14, "2g.47gb", 2, 3, 38, 46592, starts(2, 0, 2, 4)),
		gip(capability.GIProfile3Slice, 9, "3g.93gb", 3, 2, 72, 93184, starts(4, 0, 4)),
		gip(capability.GIProfile7Slice, 0, "7g.186gb", 7, 1, 148, 186368, starts(8, 0)),
	}
	var hw fakeView
	hw.add("NVIDIA A100-SXM4-80GB", a100_80Total, a100_80)
	hw.add("NVIDIA GB200", 189471, gb200)
	hw.add("NVIDIA H200 NVL", h200Total, h200)
	gpus, report, err := capability.Discover(context.Background(), &hw, chart)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]string{
		{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"},
		{"1g.23gb", "2g.47gb", "3g.93gb", "7g.186gb"},
		{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"},
	} {
		var names []string
		for _, p := range gpus[i].Profiles {
			names = append(names, p.Name)
		}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("GPU %d %s: published %v, want %v", i, gpus[i].Name, names, want)
		}
	}
	var got []string
	for _, f := range report.Findings {
		got = append(got, fmt.Sprintf("%d %v %s=%s", f.GPU, f.Kind, f.Profile, f.Resolved))
	}
	want := []string{"0 resolved 7g.79gb=7g.80gb", "1 resolved 2g.45gb=2g.47gb", "1 resolved 3g.90gb=3g.93gb", "1 resolved 7g.180gb=7g.186gb"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findings %v, want %v", got, want)
	}
}

func TestResolveProfileName(t *testing.T) {
	gpu, _ := capability.GPUFromDevice(capability.DeviceInfo{Name: "A100-80", MemoryMB: a100_80Total, MIGMode: capability.MIGEnabled}, a100_80)
	tests := []struct {
		name, want string
		exact, ok  bool
	}{
		{"7g.80gb", "7g.80gb", true, true},
		{"7g.79gb", "7g.80gb", false, true},
		{"3g.39gb", "3g.40gb", false, true},
		{"1g.10gb+me", "1g.10gb+me", true, true},
		{"1g.11gb", "1g.10gb", false, true}, // the 1/8 profile, not the +me one
		{"1g.19gb", "1g.20gb", false, true}, // the 2/8 one
		{"1g.40gb", "", false, false},       // no 1-slice profile holds half the GPU
		{"2g.40gb", "", false, false},       // 2g holds a quarter
		{"7g.80gb-me", "", false, false},    // no such variant
		{"4g.40gb+gfx", "", false, false},   // no such variant
		{"seven", "", false, false},         // not a profile name
		{"5g.50gb", "", false, false},       // no 5-slice profile
	}
	for _, tt := range tests {
		p, exact, ok := capability.ResolveProfileName(tt.name, gpu.Profiles, a100_80Total)
		got := ""
		if p != nil {
			got = p.Name
		}
		if got != tt.want || exact != tt.exact || ok != tt.ok {
			t.Errorf("ResolveProfileName(%q) = %q, %v, %v; want %q, %v, %v", tt.name, got, exact, ok, tt.want, tt.exact, tt.ok)
		}
	}
	if _, _, ok := capability.ResolveProfileName("7g.79gb", gpu.Profiles, 0); ok {
		t.Error("resolved without the GPU's total memory")
	}
}
