package fakehal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// TestCatalogueFacts pins the corrections of the hardware facts: per-model
// figures a table copied from a sibling would get wrong.
func TestCatalogueFacts(t *testing.T) {
	tests := []struct {
		model   string
		profile string
		sms     uint32
		mib     uint64
	}{
		{model: "NVIDIA H100 PCIe", profile: "1g.10gb", sms: 14, mib: 9984},
		{model: "NVIDIA H100 PCIe", profile: "1g.20gb", sms: 14, mib: 20096},
		{model: "NVIDIA H100 PCIe", profile: "2g.20gb", sms: 30, mib: 20096},
		{model: "NVIDIA H100 PCIe", profile: "3g.40gb", sms: 46, mib: 40448},
		{model: "NVIDIA H100 PCIe", profile: "4g.40gb", sms: 62, mib: 40448},
		{model: "NVIDIA H100 PCIe", profile: "7g.80gb", sms: 114, mib: 81152},
		{model: "NVIDIA H100 80GB HBM3", profile: "7g.80gb", sms: 132, mib: 81152},
		{model: "NVIDIA H200", profile: "1g.18gb", sms: 16, mib: 16384},
		{model: "NVIDIA H200", profile: "1g.35gb", sms: 26, mib: 33280},
		{model: "NVIDIA H200", profile: "2g.35gb", sms: 32, mib: 33280},
		{model: "NVIDIA H200", profile: "3g.71gb", sms: 60, mib: 71424},
		{model: "NVIDIA H200", profile: "4g.71gb", sms: 64, mib: 71424},
		{model: "NVIDIA H200", profile: "7g.141gb", sms: 132, mib: 143360},
		{model: "NVIDIA GH200 144G HBM3e", profile: "1g.18gb", sms: 16, mib: 17920},
		{model: "NVIDIA GH200 144G HBM3e", profile: "1g.36gb", sms: 26, mib: 36096},
		{model: "NVIDIA GH200 144G HBM3e", profile: "2g.36gb", sms: 32, mib: 36096},
		{model: "NVIDIA B200", profile: "1g.23gb", sms: 18, mib: 20992},
		{model: "NVIDIA H20", profile: "7g.96gb", sms: 78, mib: 96768},
		{model: "NVIDIA A800-SXM4-80GB", profile: "7g.80gb", sms: 98, mib: 80896},
		{model: "NVIDIA A800 80GB PCIe", profile: "3g.40gb", sms: 42, mib: 40192},
		{model: "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", profile: "1g.24gb+me.all", sms: 46, mib: 24192},
		{model: "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", profile: "4g.96gb", sms: 188, mib: 97408},
	}
	for _, tt := range tests {
		m, ok := fakehal.LookupModel(tt.model)
		if !ok {
			t.Errorf("LookupModel(%q): not found", tt.model)
			continue
		}
		p, ok := profileNamed(m, tt.profile)
		if !ok {
			t.Errorf("%s: no profile %s", tt.model, tt.profile)
			continue
		}
		if p.MultiprocessorCount != tt.sms || p.MemoryMB != tt.mib {
			t.Errorf("%s %s: got %d SMs %d MiB, want %d SMs %d MiB", tt.model, tt.profile, p.MultiprocessorCount, p.MemoryMB, tt.sms, tt.mib)
		}
	}
}

func profileNamed(m fakehal.Model, name string) (capability.GIProfileInfo, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return capability.GIProfileInfo{}, false
}

// TestCatalogueTotals pins the totals NVML reports on real GPUs.
func TestCatalogueTotals(t *testing.T) {
	for name, want := range map[string]uint64{
		"NVIDIA H100 80GB HBM3": 81559, "NVIDIA H200": 143771, "NVIDIA B200": 183359,
		"NVIDIA GB200": 189471, "NVIDIA H20": 97871,
	} {
		m, _ := fakehal.LookupModel(name)
		if m.MemoryMB != want {
			t.Errorf("%s: MemoryMB %d, want %d", name, m.MemoryMB, want)
		}
	}
}

// TestUnconfirmedModelsSaySo checks that every table not confirmed on
// hardware carries a note saying what is unconfirmed, and confirmed ones
// none, so whatever prints a model can say so.
func TestUnconfirmedModelsSaySo(t *testing.T) {
	for _, m := range fakehal.Models() {
		if m.Confirmed == (m.Note != "") {
			t.Errorf("%s: Confirmed %v with Note %q", m.Name, m.Confirmed, m.Note)
		}
	}
	for _, name := range []string{"NVIDIA H20", "NVIDIA H800", "NVIDIA H800 PCIe", "NVIDIA GB200", "NVIDIA B200", "NVIDIA GH200 144G HBM3e", "NVIDIA H200 NVL"} {
		if m, _ := fakehal.LookupModel(name); m.Confirmed {
			t.Errorf("%s: Confirmed, want unconfirmed", name)
		}
	}
	// Confirmed on an H200 SXM at driver 580.159.04: IDs, memory, SMs,
	// placements and media engines.
	if m, _ := fakehal.LookupModel("NVIDIA H200"); !m.Confirmed {
		t.Error("NVIDIA H200: unconfirmed, want confirmed")
	}
	if m, _ := fakehal.LookupModel("NVIDIA GH200 144G HBM3e"); m.PCIDeviceID != 0x2348 {
		t.Errorf("GH200 144G: PCI device ID %#x, want 0x2348", m.PCIDeviceID)
	}
}

// TestModelEngines checks the engine tables: every profile's engines fit
// the GPU's, engines are listed only for profiles the model has, and the
// full-GPU profile takes every OFA.
func TestModelEngines(t *testing.T) {
	for _, m := range fakehal.Models() {
		if m.ProfileEngines == nil {
			t.Errorf("%s: no engine table", m.Name)
			continue
		}
		have := map[capability.GIProfileIndex]bool{}
		for _, p := range m.Profiles {
			have[p.Index] = true
			if e := m.EnginesOf(p.Index); !e.Within(m.Engines) {
				t.Errorf("%s %s: engines %v exceed the GPU's %v", m.Name, p.Name, e, m.Engines)
			}
		}
		for idx := range m.ProfileEngines {
			if !have[idx] {
				t.Errorf("%s: engines for profile index %d it does not have", m.Name, idx)
			}
		}
	}
}

// TestMediaEnginesRefused: the engine combinations hardware refuses,
// independent of free slots, fail with INSUFFICIENT_RESOURCES as an
// occupied range does; the ones it accepts succeed.
func TestMediaEnginesRefused(t *testing.T) {
	type create struct {
		profile capability.GIProfileIndex
		at      capability.Placement
	}
	tests := []struct {
		name   string
		model  string
		setup  []create
		create create
		ok     bool
	}{
		{name: "A30 1g+me then 2g+me", model: "A30", setup: []create{{p1gMe, pl(0, 1)}}, create: create{capability.GIProfile2SliceRev1, pl(2, 2)}},
		{name: "A30 2g+me then 1g+me", model: "A30", setup: []create{{capability.GIProfile2SliceRev1, pl(0, 2)}}, create: create{p1gMe, pl(3, 1)}},
		{name: "A30 1g+me next to plain 2g", model: "A30", setup: []create{{p1gMe, pl(0, 1)}}, create: create{p2g, pl(2, 2)}, ok: true},
		{name: "RTX +me.all then 1g", model: "RTX PRO 6000", setup: []create{{capability.GIProfile1SliceAllME, pl(0, 3)}}, create: create{p1g, pl(3, 3)}},
		{name: "RTX 1g then +me.all", model: "RTX PRO 6000", setup: []create{{p1g, pl(0, 3)}}, create: create{capability.GIProfile1SliceAllME, pl(3, 3)}},
		{name: "RTX 2g+me.all then 1g+gfx", model: "RTX PRO 6000", setup: []create{{capability.GIProfile2SliceAllME, pl(0, 6)}}, create: create{capability.GIProfile1SliceGFX, pl(6, 3)}},
		{name: "RTX +me.all then 1g+me", model: "RTX PRO 6000", setup: []create{{capability.GIProfile1SliceAllME, pl(0, 3)}}, create: create{p1gMe, pl(9, 3)}},
		{name: "RTX +me.all next to -me", model: "RTX PRO 6000", setup: []create{{capability.GIProfile1SliceAllME, pl(0, 3)}, {capability.GIProfile1SliceNoME, pl(3, 3)}}, create: create{capability.GIProfile2SliceNoME, pl(6, 6)}, ok: true},
		{name: "RTX four plain 1g", model: "RTX PRO 6000", setup: []create{{p1g, pl(0, 3)}, {p1g, pl(3, 3)}, {p1g, pl(6, 3)}}, create: create{p1g, pl(9, 3)}, ok: true},
		{name: "H100 1g+me next to six 1g", model: "H100", setup: []create{{p1g, pl(0, 1)}, {p1g, pl(1, 1)}, {p1g, pl(2, 1)}, {p1g, pl(3, 1)}, {p1g, pl(4, 1)}, {p1g, pl(5, 1)}}, create: create{p1gMe, pl(6, 1)}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, fakehal.Options{GPUs: []string{tt.model}})
			for _, c := range tt.setup {
				if _, err := n.CreateInstance(ctx, 0, c.profile, c.at); err != nil {
					t.Fatalf("setup %d at %v: %v", c.profile, c.at, err)
				}
			}
			_, err := n.CreateInstance(ctx, 0, tt.create.profile, tt.create.at)
			if tt.ok {
				if err != nil {
					t.Fatalf("create: %v, want success", err)
				}
				return
			}
			checkHWErr(t, err, realize.ErrOccupied, fakehal.ReturnInsufficientResources)
			if got := len(n.Snapshot()); got != len(tt.setup) {
				t.Errorf("%d instances after the refusal, want %d", got, len(tt.setup))
			}
		})
	}
}

// TestDriverGenerations: Options.Driver picks the table a driver
// generation reports; the zero value is the current one.
func TestDriverGenerations(t *testing.T) {
	tests := []struct {
		driver  fakehal.Driver
		model   string
		index   capability.GIProfileIndex
		name    string
		mib     uint64
		totalMB uint64
	}{
		{driver: fakehal.DriverCurrent, model: "B200", index: p1g, name: "1g.23gb", mib: 20992, totalMB: 183359},
		{driver: fakehal.DriverEarly, model: "B200", index: p1g, name: "1g.23gb", mib: 22528, totalMB: 183359},
		{driver: fakehal.DriverCurrent, model: "GB200", index: p3g, name: "3g.93gb", mib: 93184, totalMB: 189471},
		{driver: fakehal.DriverEarly, model: "GB200", index: p1g, name: "1g.24gb", mib: 20480, totalMB: 189471},
		{driver: fakehal.DriverEarly, model: "GB200", index: capability.GIProfile1SliceRev2, name: "1g.47gb", mib: 46592, totalMB: 189471},
		{driver: fakehal.DriverCurrent, model: "H200", index: p7g, name: "7g.141gb", mib: 143360, totalMB: 143771},
		{driver: fakehal.DriverEarly, model: "H200", index: p7g, name: "7g.141gb", mib: 143104, totalMB: 143771},
		{driver: fakehal.DriverEarly, model: "H200", index: p3g, name: "3g.71gb", mib: 71168, totalMB: 143771},
		{driver: fakehal.DriverEarly, model: "H200", index: p1g, name: "1g.18gb", mib: 16384, totalMB: 143771},
		{driver: fakehal.DriverEarly, model: "GB200", index: p7g, name: "7g.189gb", mib: 186368, totalMB: 189471},
		{driver: fakehal.DriverEarly, model: "A100", index: p1g, name: "1g.5gb", mib: 4864, totalMB: 40960},
	}
	for _, tt := range tests {
		n := newNode(t, fakehal.Options{GPUs: []string{tt.model}, Driver: tt.driver})
		ps, err := n.GIProfiles(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		dev, _ := n.Device(0)
		found := false
		for _, p := range ps {
			if p.Index == tt.index {
				found = true
				if p.Name != tt.name || p.MemoryMB != tt.mib {
					t.Errorf("%s %v index %d: got %s %d MiB, want %s %d MiB", tt.model, tt.driver, tt.index, p.Name, p.MemoryMB, tt.name, tt.mib)
				}
			}
		}
		if !found || dev.MemoryMB != tt.totalMB {
			t.Errorf("%s %v: found %v, total %d MiB, want %d", tt.model, tt.driver, found, dev.MemoryMB, tt.totalMB)
		}
	}
	if got := fakehal.DriverEarly.String(); got != "early" {
		t.Errorf("DriverEarly.String() = %q", got)
	}
}

// TestEveryModelPublishesThroughDefaultAllowlist: a GPU of every built-in
// model, current or early driver, publishes profiles under the built-in
// allowlist, with only aliases of other drivers left unresolved or
// resolved to the driver's name.
func TestEveryModelPublishesThroughDefaultAllowlist(t *testing.T) {
	for _, drv := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		for _, m := range fakehal.Models() {
			n := newNode(t, fakehal.Options{GPUs: []string{m.Name}, Driver: drv})
			gpus, report, err := capability.Discover(ctx, n, capability.DefaultAllowlist())
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 1 || len(gpus[0].Profiles) < 3 {
				t.Errorf("%s (%v driver): published %+v, want at least three profiles", m.Name, drv, gpus)
			}
			for _, f := range report.Findings {
				if f.Kind != capability.FindingUnresolved && f.Kind != capability.FindingResolved {
					t.Errorf("%s (%v driver): finding %v", m.Name, drv, f)
				}
			}
		}
	}
}

// An A30 has one JPEG/OFA set: its two +me profiles exclude each other
// although their slots do not overlap, and the driver answers
// INSUFFICIENT_RESOURCES, as for an occupied range.
func ExampleEngines() {
	n := fakehal.MustNew(fakehal.Options{GPUs: []string{"A30"}})
	m, _ := fakehal.LookupModel("A30")
	fmt.Println("GPU:", m.Engines)
	fmt.Println("1g.6gb+me:", m.EnginesOf(capability.GIProfile1SliceRev1))
	_, err := n.CreateInstance(context.Background(), 0, capability.GIProfile1SliceRev1, capability.Placement{Start: 0, Size: 1})
	fmt.Println(err)
	_, err = n.CreateInstance(context.Background(), 0, capability.GIProfile2SliceRev1, capability.Placement{Start: 2, Size: 2})
	fmt.Println(errors.Is(err, realize.ErrOccupied), errors.Is(err, fakehal.ReturnInsufficientResources))
	// Output:
	// GPU: 4 NVDEC / 0 NVENC / 1 JPEG / 1 OFA
	// 1g.6gb+me: 1 NVDEC / 0 NVENC / 1 JPEG / 1 OFA
	// <nil>
	// true true
}

// Options.Driver picks the table a driver generation reports.
func ExampleDriver() {
	for _, drv := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		n := fakehal.MustNew(fakehal.Options{GPUs: []string{"GB200"}, Driver: drv})
		ps, _ := n.GIProfiles(context.Background(), 0)
		fmt.Println(drv, ps[0].Name, ps[len(ps)-1].Name)
	}
	// Output:
	// current 1g.23gb 7g.186gb
	// early 1g.24gb 7g.189gb
}
