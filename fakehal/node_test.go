package fakehal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func pl(start, size uint32) capability.Placement {
	return capability.Placement{Start: start, Size: size}
}

// A100 profile indexes, for brevity.
const (
	p1g    = capability.GIProfile1Slice
	p1gMe  = capability.GIProfile1SliceRev1
	p1gDbl = capability.GIProfile1SliceRev2
	p2g    = capability.GIProfile2Slice
	p3g    = capability.GIProfile3Slice
	p4g    = capability.GIProfile4Slice
	p7g    = capability.GIProfile7Slice
)

func newNode(t *testing.T, opts fakehal.Options) *fakehal.Node {
	t.Helper()
	n, err := fakehal.New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := n.Check(); err != nil {
			t.Errorf("Check() at end of test: %v", err)
		}
	})
	return n
}

func TestNewZeroOptions(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	devs, err := n.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("len(Devices) = %d, want 1", len(devs))
	}
	d := devs[0]
	if d.Name != fakehal.DefaultModel || d.MIGMode != capability.MIGEnabled || d.PendingMIGMode != capability.MIGEnabled || d.MemoryMB != 40960 {
		t.Errorf("device = %+v, want a MIG-enabled %s with 40960 MiB", d, fakehal.DefaultModel)
	}
	if !strings.HasPrefix(d.UUID, "GPU-") || len(d.UUID) != len("GPU-")+36 {
		t.Errorf("UUID = %q, want GPU-<uuid>", d.UUID)
	}
}

func TestUUIDsAreSeeded(t *testing.T) {
	uuids := func(seed uint64) []string {
		n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "A100"), Seed: seed})
		inst, err := n.CreateInstance(ctx, 1, p2g, pl(2, 2))
		if err != nil {
			t.Fatal(err)
		}
		devs, _ := n.Devices(ctx)
		return []string{devs[0].UUID, devs[1].UUID, inst.ComputeInstances[0].MIGUUID}
	}
	a, b, c := uuids(7), uuids(7), uuids(8)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("same seed: UUID %d differs: %s vs %s", i, a[i], b[i])
		}
		if a[i] == c[i] {
			t.Errorf("different seeds: UUID %d equal: %s", i, a[i])
		}
	}
	if a[0] == a[1] {
		t.Errorf("two GPUs share UUID %s", a[0])
	}
	if !strings.HasPrefix(a[2], "MIG-") {
		t.Errorf("MIG UUID = %q, want MIG-<uuid>", a[2])
	}
}

func TestNewErrors(t *testing.T) {
	one := []capability.Placement{{Start: 0, Size: 1}}
	custom := func(profiles ...capability.GIProfileInfo) fakehal.Options {
		return fakehal.Options{Models: []fakehal.Model{{Name: "custom", Profiles: profiles}}}
	}
	good := capability.GIProfileInfo{Index: 0, SliceCount: 1, InstanceCount: 1, Placements: one}
	with := func(change func(*capability.GIProfileInfo)) capability.GIProfileInfo {
		p := good
		change(&p)
		return p
	}
	tests := []struct {
		name string
		opts fakehal.Options
		want error
	}{
		{name: "unknown model", opts: fakehal.Options{GPUs: []string{"A100", "V100"}}, want: fakehal.ErrUnknownModel},
		{name: "custom model without placements", opts: custom(with(func(p *capability.GIProfileInfo) { p.Placements = nil })), want: fakehal.ErrInvalidModel},
		{name: "custom model without profiles", opts: custom(), want: fakehal.ErrInvalidModel},
		{name: "profile index out of range", opts: custom(with(func(p *capability.GIProfileInfo) { p.Index = capability.GIProfileCount })), want: fakehal.ErrInvalidModel},
		{name: "negative profile index", opts: custom(with(func(p *capability.GIProfileInfo) { p.Index = -1 })), want: fakehal.ErrInvalidModel},
		{name: "duplicate profile index", opts: custom(good, good), want: fakehal.ErrInvalidModel},
		{name: "zero slice count", opts: custom(with(func(p *capability.GIProfileInfo) { p.SliceCount = 0 })), want: fakehal.ErrInvalidModel},
		{name: "zero instance count", opts: custom(with(func(p *capability.GIProfileInfo) { p.InstanceCount = 0 })), want: fakehal.ErrInvalidModel},
		{name: "empty placement", opts: custom(with(func(p *capability.GIProfileInfo) { p.Placements = []capability.Placement{{Start: 0, Size: 0}} })), want: fakehal.ErrInvalidModel},
		{name: "placement past the widest grid", opts: custom(with(func(p *capability.GIProfileInfo) {
			p.Placements = []capability.Placement{{Start: capability.MaxSlots, Size: 1}}
		})), want: fakehal.ErrInvalidModel},
		{name: "valid custom model", opts: custom(good), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fakehal.New(tt.opts)
			if !errors.Is(err, tt.want) {
				t.Errorf("New: got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEveryModelBuilds(t *testing.T) {
	for _, m := range fakehal.Models() {
		n := newNode(t, fakehal.Options{GPUs: []string{m.Name}})
		profs, err := n.GIProfiles(ctx, 0)
		if err != nil {
			t.Fatalf("%s: GIProfiles: %v", m.Name, err)
		}
		if len(profs) != len(m.Profiles) {
			t.Errorf("%s: %d profiles, want %d", m.Name, len(profs), len(m.Profiles))
		}
		// Every published placement of every profile is creatable on an
		// idle GPU, and destroyable again.
		for _, p := range profs {
			for _, at := range p.Placements {
				inst, err := n.CreateInstance(ctx, 0, p.Index, at)
				if err != nil {
					t.Errorf("%s: create %s at %v: %v", m.Name, p.Name, at, err)
					continue
				}
				ci := inst.ComputeInstances[0]
				if ci.SliceCount != p.SliceCount {
					t.Errorf("%s %s: CI spans %d slices, want %d", m.Name, p.Name, ci.SliceCount, p.SliceCount)
				}
				if err := n.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID); err != nil {
					t.Fatal(err)
				}
				if err := n.DestroyGPUInstance(ctx, 0, inst.GIID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// create is one setup step of a table test.
type create struct {
	profile capability.GIProfileIndex
	at      capability.Placement
}

func TestCreateInstanceRules(t *testing.T) {
	// A custom 8-slot part whose 1g profile also publishes slot 7, so that
	// the compute-slice budget (7) bites before slots run out.
	eightOnes := fakehal.Model{Name: "budget-test", MemoryMB: 40960, Profiles: []capability.GIProfileInfo{
		{Index: p1g, ID: 19, Name: "1g.5gb", SliceCount: 1, InstanceCount: 8, MultiprocessorCount: 14, MemoryMB: 4864,
			Placements: []capability.Placement{pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1), pl(4, 1), pl(5, 1), pl(6, 1), pl(7, 1)}},
		{Index: p7g, ID: 0, Name: "7g.40gb", SliceCount: 7, InstanceCount: 1, MultiprocessorCount: 98, MemoryMB: 40192,
			Placements: []capability.Placement{pl(0, 8)}},
	}}
	tests := []struct {
		name     string
		model    string
		disabled bool
		setup    []create
		gpu      int
		create   create
		wantErr  error
		wantCode fakehal.Return
		wantGIID uint32
	}{
		{name: "3g at 0", model: "A100", create: create{p3g, pl(0, 4)}, wantGIID: 2},
		{name: "3g at 4 is GI 1, as the driver numbers it", model: "A100", create: create{p3g, pl(4, 4)}, wantGIID: 1},
		{name: "7g", model: "A100", create: create{p7g, pl(0, 8)}, wantGIID: 0},
		{name: "2g at 2 as in the design's example", model: "A100", create: create{p2g, pl(2, 2)}, wantGIID: 6},
		{name: "1g at 6", model: "A100", create: create{p1g, pl(6, 1)}, wantGIID: 9},
		{name: "1g.10gb at 6 reaches slot 7", model: "A100", setup: []create{{p4g, pl(0, 4)}}, create: create{p1gDbl, pl(6, 2)}, wantGIID: 4},
		{name: "3g next to 4g uses all 7 slices", model: "A100", setup: []create{{p4g, pl(0, 4)}}, create: create{p3g, pl(4, 4)}, wantGIID: 1},
		{name: "touching intervals do not overlap", model: "A100", setup: []create{{p2g, pl(0, 2)}}, create: create{p2g, pl(2, 2)}, wantGIID: 6},
		{name: "A30 4g", model: "A30", create: create{p4g, pl(0, 4)}, wantGIID: 0},
		{name: "A30 2g at 2", model: "A30", create: create{p2g, pl(2, 2)}, wantGIID: 2},
		{name: "RTX PRO 2g at 6", model: "RTX PRO 6000", create: create{p2g, pl(6, 6)}, wantGIID: 2},
		{name: "RTX PRO 1g at 3", model: "RTX PRO 6000", create: create{p1g, pl(3, 3)}, wantGIID: 4},

		{name: "overlap", model: "A100", setup: []create{{p2g, pl(2, 2)}}, create: create{p3g, pl(0, 4)}, wantErr: realize.ErrOccupied, wantCode: fakehal.ReturnInsufficientResources},
		{name: "same placement twice", model: "A100", setup: []create{{p1g, pl(3, 1)}}, create: create{p1g, pl(3, 1)}, wantErr: realize.ErrOccupied, wantCode: fakehal.ReturnInsufficientResources},
		{name: "second 1g+me", model: "A100", setup: []create{{p1gMe, pl(0, 1)}}, create: create{p1gMe, pl(1, 1)}, wantErr: realize.ErrOccupied, wantCode: fakehal.ReturnInsufficientResources},
		{name: "second 4g.96gb on RTX PRO", model: "RTX PRO 6000", setup: []create{{p4g, pl(0, 12)}}, create: create{p4g, pl(0, 12)}, wantErr: realize.ErrOccupied, wantCode: fakehal.ReturnInsufficientResources},
		{name: "compute-slice budget", model: "budget-test",
			setup:  []create{{p1g, pl(0, 1)}, {p1g, pl(1, 1)}, {p1g, pl(2, 1)}, {p1g, pl(3, 1)}, {p1g, pl(4, 1)}, {p1g, pl(5, 1)}, {p1g, pl(6, 1)}},
			create: create{p1g, pl(7, 1)}, wantErr: realize.ErrOccupied, wantCode: fakehal.ReturnInsufficientResources},
		{name: "1g at slot 7 unpublished", model: "A100", create: create{p1g, pl(7, 1)}, wantErr: realize.ErrInvalidPlacement, wantCode: fakehal.ReturnInvalidArgument},
		{name: "3g at 2 unpublished", model: "A100", create: create{p3g, pl(2, 4)}, wantErr: realize.ErrInvalidPlacement, wantCode: fakehal.ReturnInvalidArgument},
		{name: "3g with the wrong size", model: "A100", create: create{p3g, pl(0, 3)}, wantErr: realize.ErrInvalidPlacement, wantCode: fakehal.ReturnInvalidArgument},
		{name: "unpublished beats occupied", model: "A100", setup: []create{{p7g, pl(0, 8)}}, create: create{p2g, pl(1, 2)}, wantErr: realize.ErrInvalidPlacement, wantCode: fakehal.ReturnInvalidArgument},
		{name: "8-slice profile unsupported on A100", model: "A100", create: create{capability.GIProfile8Slice, pl(0, 8)}, wantErr: realize.ErrNotSupported, wantCode: fakehal.ReturnNotSupported},
		{name: "+gfx unsupported on A30", model: "A30", create: create{capability.GIProfile1SliceGFX, pl(0, 1)}, wantErr: realize.ErrNotSupported, wantCode: fakehal.ReturnNotSupported},
		{name: "MIG disabled", model: "A100", disabled: true, create: create{p1g, pl(0, 1)}, wantErr: realize.ErrMIGDisabled, wantCode: fakehal.ReturnNotSupported},
		{name: "no such GPU", model: "A100", gpu: 1, create: create{p1g, pl(0, 1)}, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnInvalidArgument},
		{name: "negative GPU", model: "A100", gpu: -1, create: create{p1g, pl(0, 1)}, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, fakehal.Options{GPUs: []string{tt.model}, Models: []fakehal.Model{eightOnes}, MIGDisabled: tt.disabled})
			for _, s := range tt.setup {
				if _, err := n.CreateInstance(ctx, 0, s.profile, s.at); err != nil {
					t.Fatalf("setup create %d at %v: %v", s.profile, s.at, err)
				}
			}
			before := n.Snapshot()
			got, err := n.CreateInstance(ctx, tt.gpu, tt.create.profile, tt.create.at)
			if tt.wantErr != nil {
				checkHWErr(t, err, tt.wantErr, tt.wantCode)
				if after := n.Snapshot(); len(after) != len(before) {
					t.Errorf("failed create changed the hardware: %d instances, want %d", len(after), len(before))
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateInstance: %v", err)
			}
			if got.GIID != tt.wantGIID || got.Placement != tt.create.at || got.Profile != tt.create.profile || got.GPU != tt.gpu {
				t.Errorf("got %+v, want GI %d %v profile %d on GPU %d", got, tt.wantGIID, tt.create.at, tt.create.profile, tt.gpu)
			}
			if len(got.ComputeInstances) != 1 || got.ComputeInstances[0].ID != 0 {
				t.Errorf("compute instances = %+v, want one with ID 0", got.ComputeInstances)
			}
		})
	}
}

// checkHWErr checks that err is a *realize.HardwareError matching kind and
// carrying the NVML code.
func checkHWErr(t *testing.T, err, kind error, code fakehal.Return) {
	t.Helper()
	var he *realize.HardwareError
	if !errors.As(err, &he) {
		t.Fatalf("error %v (%T) is not a *realize.HardwareError", err, err)
	}
	if !errors.Is(err, kind) {
		t.Errorf("error %v: got Kind %v, want %v", err, he.Kind, kind)
	}
	if !errors.Is(err, code) {
		t.Errorf("error %v: got Cause %v, want %v", err, he.Cause, code)
	}
}

func TestAllSevenOneSliceInstancesFillAnA100(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	var ids []uint32
	for s := range uint32(7) {
		inst, err := n.CreateInstance(ctx, 0, p1g, pl(s, 1))
		if err != nil {
			t.Fatalf("1g at %d: %v", s, err)
		}
		ids = append(ids, inst.GIID)
	}
	// The driver numbers the upper half first: [4,5) is GI 7, [0,1) GI 11.
	for i, id := range ids {
		if want := uint32(7 + (i+4)%8); id != want {
			t.Errorf("1g at %d: GI ID %d, want %d", i, id, want)
		}
	}
	_, err := n.CreateInstance(ctx, 0, p1gDbl, pl(6, 2))
	checkHWErr(t, err, realize.ErrOccupied, fakehal.ReturnInsufficientResources)
}

func TestDestroyRules(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	inst, err := n.CreateInstance(ctx, 0, p2g, pl(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	ci := inst.ComputeInstances[0]
	pid, err := n.StartProcess(0, ci.MIGUUID)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		do       func() error
		wantErr  error
		wantCode fakehal.Return
	}{
		{name: "GI with a CI", do: func() error { return n.DestroyGPUInstance(ctx, 0, inst.GIID) }, wantErr: realize.ErrInUse, wantCode: fakehal.ReturnInUse},
		{name: "CI with a process", do: func() error { return n.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID) }, wantErr: realize.ErrInUse, wantCode: fakehal.ReturnInUse},
		{name: "stop the process", do: func() error { return n.StopProcess(pid) }},
		{name: "stop it again", do: func() error { return n.StopProcess(pid) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnNotFound},
		{name: "unknown CI", do: func() error { return n.DestroyComputeInstance(ctx, 0, inst.GIID, 1) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnNotFound},
		{name: "unknown GI", do: func() error { return n.DestroyComputeInstance(ctx, 0, 9, 0) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnNotFound},
		{name: "CI", do: func() error { return n.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID) }},
		{name: "CI again", do: func() error { return n.DestroyComputeInstance(ctx, 0, inst.GIID, ci.ID) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnNotFound},
		{name: "GI", do: func() error { return n.DestroyGPUInstance(ctx, 0, inst.GIID) }},
		{name: "GI again", do: func() error { return n.DestroyGPUInstance(ctx, 0, inst.GIID) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnNotFound},
		{name: "GI on unknown GPU", do: func() error { return n.DestroyGPUInstance(ctx, 3, 0) }, wantErr: realize.ErrNotFound, wantCode: fakehal.ReturnInvalidArgument},
	}
	for _, s := range steps {
		err := s.do()
		if s.wantErr == nil {
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			continue
		}
		t.Run(s.name, func(t *testing.T) { checkHWErr(t, err, s.wantErr, s.wantCode) })
	}
	if got := n.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot() = %+v, want empty", got)
	}
}

func TestInstancesListsGIsWithoutCIs(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "H100")})
	bare, err := n.AddGPUInstance(1, p3g, pl(4, 4))
	if err != nil {
		t.Fatal(err)
	}
	full, err := n.AddInstance(1, p2g, pl(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.Instances(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].GIID != full.GIID || got[1].GIID != bare.GIID || len(got[1].ComputeInstances) != 0 || len(got[0].ComputeInstances) != 1 {
		t.Errorf("Instances = %+v, want the 2g with a CI then the bare 3g", got)
	}
	if other, _ := n.Instances(ctx, 0); len(other) != 0 {
		t.Errorf("GPU 0 Instances = %+v, want none", other)
	}
	// A second, partial CI in a GI someone else partitioned.
	g, err := n.AddGPUInstance(0, p3g, pl(0, 4))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, nil, nil, realize.ErrOccupied} {
		_, err := n.AddComputeInstance(0, g.GIID, 1)
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Errorf("AddComputeInstance #%d: got %v, want %v", i, err, want)
		}
	}
	if n.Calls(fakehal.OpCreateGI) != 0 {
		t.Errorf("setup helpers counted %d create calls, want 0", n.Calls(fakehal.OpCreateGI))
	}
}

func TestProcesses(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "A30")})
	a, _ := n.CreateInstance(ctx, 0, p2g, pl(0, 2))
	b, _ := n.CreateInstance(ctx, 0, p1g, pl(2, 1))
	for _, uuid := range []string{a.ComputeInstances[0].MIGUUID, a.ComputeInstances[0].MIGUUID, b.ComputeInstances[0].MIGUUID, ""} {
		if _, err := n.StartProcess(0, uuid); err != nil {
			t.Fatal(err)
		}
	}
	_, err := n.StartProcess(1, a.ComputeInstances[0].MIGUUID)
	checkHWErr(t, err, realize.ErrNotFound, fakehal.ReturnNotFound)

	tests := []struct {
		gpu  int
		want realize.ProcessReport
	}{
		{gpu: 0, want: realize.ProcessReport{Total: 4, ByGPUInstance: map[uint32]int{a.GIID: 2, b.GIID: 1}}},
		{gpu: 1, want: realize.ProcessReport{}},
	}
	for _, tt := range tests {
		got, err := n.Processes(ctx, tt.gpu)
		if err != nil {
			t.Fatal(err)
		}
		if got.Total != tt.want.Total || len(got.ByGPUInstance) != len(tt.want.ByGPUInstance) || got.Busy() != tt.want.Busy() {
			t.Errorf("GPU %d: Processes = %+v, want %+v", tt.gpu, got, tt.want)
		}
		for gi, c := range tt.want.ByGPUInstance {
			if got.ByGPUInstance[gi] != c {
				t.Errorf("GPU %d GI %d: %d processes, want %d", tt.gpu, gi, got.ByGPUInstance[gi], c)
			}
		}
	}
	_, err = n.Processes(ctx, 2)
	checkHWErr(t, err, realize.ErrNotFound, fakehal.ReturnInvalidArgument)
}

func TestMIGMode(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "A100"), MIGDisabled: true})
	_, err := n.Instances(ctx, 0)
	checkHWErr(t, err, realize.ErrMIGDisabled, fakehal.ReturnNotSupported)
	if profs, err := n.GIProfiles(ctx, 0); err != nil || len(profs) != 0 {
		t.Errorf("GIProfiles with MIG disabled = %d profiles, %v; want none (NVML answers profile queries only in MIG mode)", len(profs), err)
	}

	// GPU 0 is idle: the change applies at once.
	if err := n.EnableMIG(ctx, 0); err != nil {
		t.Fatalf("EnableMIG(idle): %v", err)
	}
	if profs, err := n.GIProfiles(ctx, 0); err != nil || len(profs) == 0 {
		t.Errorf("GIProfiles once MIG is enabled = %d profiles, %v; want the table", len(profs), err)
	}
	// GPU 1 runs a process: the change stays pending.
	pid, _ := n.StartProcess(1, "")
	checkHWErr(t, n.EnableMIG(ctx, 1), realize.ErrResetRequired, fakehal.ReturnResetRequired)
	d, _ := n.Device(1)
	if d.MIGMode != capability.MIGDisabled || d.PendingMIGMode != capability.MIGEnabled {
		t.Errorf("busy GPU modes = %v pending %v, want disabled pending enabled", d.MIGMode, d.PendingMIGMode)
	}
	checkHWErr(t, n.ResetGPU(1), realize.ErrInUse, fakehal.ReturnInUse)
	_ = n.StopProcess(pid)
	if err := n.ResetGPU(1); err != nil {
		t.Fatal(err)
	}
	if d, _ := n.Device(1); d.MIGMode != capability.MIGEnabled {
		t.Errorf("after reset MIG %v, want enabled", d.MIGMode)
	}
	if err := n.EnableMIG(ctx, 1); err != nil {
		t.Errorf("EnableMIG when enabled: %v, want nil", err)
	}

	// Leaving MIG mode with instances is refused; a reset clears them.
	if _, err := n.CreateInstance(ctx, 0, p7g, pl(0, 8)); err != nil {
		t.Fatal(err)
	}
	checkHWErr(t, n.DisableMIG(ctx, 0), realize.ErrInUse, fakehal.ReturnInUse)
	if err := n.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	if got := n.Snapshot(); len(got) != 0 {
		t.Errorf("after reset Snapshot = %+v, want empty", got)
	}
}

func TestModeChangeNeedsReset(t *testing.T) {
	n := newNode(t, fakehal.Options{MIGDisabled: true, ModeChangeNeedsReset: true})
	checkHWErr(t, n.EnableMIG(ctx, 0), realize.ErrResetRequired, fakehal.ReturnResetRequired)
	if err := n.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	if d, _ := n.Device(0); d.MIGMode != capability.MIGEnabled || d.PendingMIGMode != capability.MIGEnabled {
		t.Errorf("after reset: %v pending %v, want enabled", d.MIGMode, d.PendingMIGMode)
	}
}

func TestStateSurvivesANewClient(t *testing.T) {
	n := newNode(t, fakehal.Options{GPUs: fakehal.Repeat(2, "H200")})
	var r realize.Realizer = n
	inst, err := r.CreateInstance(ctx, 1, p3g, pl(4, 4))
	if err != nil {
		t.Fatal(err)
	}
	// A "restarted plugin" is just another user of the same hardware.
	var again realize.Realizer = n
	got, err := again.Instances(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GIID != inst.GIID || got[0].ComputeInstances[0].MIGUUID != inst.ComputeInstances[0].MIGUUID {
		t.Errorf("Instances = %+v, want %+v", got, inst)
	}
}

func TestMIGUUIDsChangeOnRecreate(t *testing.T) {
	n := newNode(t, fakehal.Options{})
	seen := map[string]bool{}
	for range 5 {
		inst, err := n.CreateInstance(ctx, 0, p1g, pl(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		u := inst.ComputeInstances[0].MIGUUID
		if seen[u] {
			t.Fatalf("MIG UUID %s reused after recreate", u)
		}
		seen[u] = true
		if err := n.DestroyComputeInstance(ctx, 0, inst.GIID, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.DestroyGPUInstance(ctx, 0, inst.GIID); err != nil {
			t.Fatal(err)
		}
	}
}
