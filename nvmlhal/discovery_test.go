package nvmlhal_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

func starts(size uint32, at ...uint32) []capability.Placement {
	out := make([]capability.Placement, len(at))
	for i, s := range at {
		out[i] = capability.Placement{Start: s, Size: size}
	}
	return out
}

// a100Table is the A100-SXM4-40GB table of mig-hardware-facts.md (newer
// driver memory), in the scheduler's profile order.
var a100Table = []struct {
	name       string
	index      capability.GIProfileIndex
	id         uint32
	memoryMB   uint64
	core       uint32
	sliceCount uint32
	sms        uint32
	max        uint32
	placements []capability.Placement
}{
	{"1g.5gb", capability.GIProfile1Slice, 19, 4864, 15, 1, 14, 7, starts(1, 0, 1, 2, 3, 4, 5, 6)},
	{"1g.5gb+me", capability.GIProfile1SliceRev1, 20, 4864, 15, 1, 14, 1, starts(1, 0, 1, 2, 3, 4, 5, 6)},
	{"1g.10gb", capability.GIProfile1SliceRev2, 15, 9856, 15, 1, 14, 4, starts(2, 0, 2, 4, 6)},
	{"2g.10gb", capability.GIProfile2Slice, 14, 9856, 29, 2, 28, 3, starts(2, 0, 2, 4)},
	{"3g.20gb", capability.GIProfile3Slice, 9, 19968, 43, 3, 42, 2, starts(4, 0, 4)},
	{"4g.20gb", capability.GIProfile4Slice, 5, 19968, 58, 4, 56, 1, starts(4, 0)},
	{"7g.40gb", capability.GIProfile7Slice, 0, 40192, 100, 7, 98, 1, starts(8, 0)},
}

func TestDiscoveryReproducesA100Facts(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts nvmlmock.Options
	}{
		{name: "V3 names", opts: nvmlmock.Options{}},
		{name: "derived names (pre-V3 driver)", opts: nvmlmock.Options{NoV3: true}},
		{name: "driver 580 (V3 name empty, V2 right)", opts: nvmlmock.Options{Driver580: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b, _ := newBackend(t, nvmlmock.DGXA100, tc.opts)
			devs, err := b.Devices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(devs), 8; got != want {
				t.Fatalf("devices = %d, want %d", got, want)
			}
			dev := devs[3]
			if dev.Index != 3 || !strings.HasPrefix(dev.UUID, "GPU-") || dev.Name != "NVIDIA A100-SXM4-40GB" ||
				dev.MemoryMB != 40960 || dev.MIGMode != capability.MIGEnabled || dev.PendingMIGMode != capability.MIGEnabled {
				t.Errorf("device 3 = %+v", dev)
			}
			infos, err := b.GIProfiles(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if tc.opts.NoV3 && in.Name != "" {
					t.Errorf("profile index %d: Name = %q from a driver without V3, want \"\"", in.Index, in.Name)
				}
				if !tc.opts.NoV3 && in.Name == "" {
					t.Errorf("profile index %d: no driver name, want the V2 name", in.Index)
				}
			}
			gpu, errs := capability.GPUFromDevice(dev, infos)
			if len(errs) > 0 {
				t.Fatalf("GPUFromDevice: %v", errs)
			}
			if got, want := len(gpu.Profiles), len(a100Table); got != want {
				t.Fatalf("profiles = %d, want %d", got, want)
			}
			for i, want := range a100Table {
				got := gpu.Profiles[i]
				if got.Name != want.name || got.GIProfileIndex != want.index || got.GIProfileID != want.id ||
					got.MemoryMB != want.memoryMB || got.Core != want.core || got.SliceCount != want.sliceCount ||
					got.Multiprocessors != want.sms || got.MaxInstances != want.max || !slices.Equal(got.Placements, want.placements) {
					t.Errorf("profile %d = %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// The corrected H100/H200/B200 tables: the driver's names (V3, or V2 on
// driver 580 whose V3 name is empty) and the names NVIDIA's rule derives
// from its memory agree, 3g is size 4 and 7g size 8, and Ids are not
// indexes.
func TestDiscoveryEightSlotModels(t *testing.T) {
	want := map[nvmlmock.Model][]string{
		nvmlmock.DGXA100: {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		nvmlmock.DGXH100: {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		nvmlmock.DGXH200: {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		nvmlmock.DGXB200: {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
	}
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			var named [3][]string
			for i, opts := range []nvmlmock.Options{{}, {NoV3: true}, {Driver580: true}} {
				b, _ := newBackend(t, model, opts)
				if !opts.NoV3 {
					infos, err := b.GIProfiles(context.Background(), 0)
					if err != nil {
						t.Fatal(err)
					}
					for _, in := range infos {
						if in.Name == "" {
							t.Errorf("%+v: profile index %d has no driver name", opts, in.Index)
						}
					}
				}
				gpu := discoverGPU0(t, b)
				for _, p := range gpu.Profiles {
					named[i] = append(named[i], p.Name)
					if p.GIProfileID == uint32(p.GIProfileIndex) {
						t.Errorf("%s: Id %d equals index", p.Name, p.GIProfileID)
					}
					wantSize := map[uint32]uint32{1: 1, 2: 2, 3: 4, 4: 4, 7: 8}[p.SliceCount]
					if p.GIProfileIndex == capability.GIProfile1SliceRev2 {
						wantSize = 2
					}
					for _, pl := range p.Placements {
						if pl.Size != wantSize || pl.End() > 8 {
							t.Errorf("%s: placement %v, want size %d within 8 slots", p.Name, pl, wantSize)
						}
					}
				}
				if gpu.Width() != 8 {
					t.Errorf("width = %d, want 8", gpu.Width())
				}
			}
			if !slices.Equal(named[0], want[model]) {
				t.Errorf("V3 names = %v, want %v", named[0], want[model])
			}
			if !slices.Equal(named[1], want[model]) {
				t.Errorf("derived names = %v, want %v", named[1], want[model])
			}
			if !slices.Equal(named[2], want[model]) {
				t.Errorf("driver 580 names = %v, want %v", named[2], want[model])
			}
		})
	}
}

// The 4-slot A30 and the 12-slot RTX PRO 6000 with every variant: names
// from V3 and derived ones agree, and each variant is its own profile.
func TestDiscoveryOtherGrids(t *testing.T) {
	for _, tc := range []struct {
		model nvmlmock.Model
		width uint32
		names []string
	}{
		{nvmlmock.A30, 4, []string{"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"}},
		{nvmlmock.RTXPro6000, 12, []string{
			"1g.24gb", "1g.24gb+gfx", "1g.24gb+me", "1g.24gb+me.all", "1g.24gb-me",
			"2g.48gb", "2g.48gb+gfx", "2g.48gb+me.all", "2g.48gb-me", "4g.96gb", "4g.96gb+gfx"}},
	} {
		t.Run(tc.model.String(), func(t *testing.T) {
			for _, opts := range []nvmlmock.Options{{}, {NoV3: true}} {
				b, _ := newBackend(t, tc.model, opts)
				gpu := discoverGPU0(t, b)
				var names []string
				for _, p := range gpu.Profiles {
					names = append(names, p.Name)
				}
				if !slices.Equal(names, tc.names) {
					t.Errorf("NoV3=%v: names = %v, want %v", opts.NoV3, names, tc.names)
				}
				if gpu.Width() != tc.width {
					t.Errorf("width = %d, want %d", gpu.Width(), tc.width)
				}
			}
		})
	}
}

func TestDiscoveryMIGDisabled(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{MIGDisabled: true})
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := devs[0].MIGMode; got != capability.MIGDisabled {
		t.Errorf("MIGMode = %v, want disabled", got)
	}
	infos, err := b.GIProfiles(ctx, 0)
	if err != nil || len(infos) != 0 {
		t.Errorf("GIProfiles on a MIG-disabled GPU = %v, %v; want none, nil", infos, err)
	}
	// The backend says MIG is off instead of listing nothing
	// (realize.Realizer), with no NVML code: NVML was not asked.
	insts, err := b.Instances(ctx, 0)
	if insts != nil {
		t.Errorf("Instances on a MIG-disabled GPU = %v, want nil", insts)
	}
	checkMIGOff(t, err, 0, capability.MIGDisabled)
}

// checkMIGOff checks an error the backend decided from the MIG mode:
// realize.ErrMIGDisabled whose Cause is a *MIGModeError, with no NVML
// return code.
func checkMIGOff(t *testing.T, err error, gpu int, pending capability.MIGMode) {
	t.Helper()
	var me *nvmlhal.MIGModeError
	if !errors.Is(err, realize.ErrMIGDisabled) || !errors.As(err, &me) || me.Current != capability.MIGDisabled || me.Pending != pending {
		t.Errorf("err = %v, want ErrMIGDisabled from a MIGModeError (pending %v)", err, pending)
	}
	var re *nvmlhal.ReturnError
	if errors.As(err, &re) {
		t.Errorf("err = %v carries NVML code %v that NVML never returned", err, re)
	}
	var he *realize.HardwareError
	if !errors.As(err, &he) || he.Op != "Instances" || he.GPU != gpu {
		t.Errorf("HardwareError = %+v, want Op Instances GPU %d", he, gpu)
	}
}

// Driver 580.159.04 answers GetGpuInstances with SUCCESS and no instances
// while MIG is off: the backend still says MIG is off, never "no
// instances", and discovery lists the table with the driver's V2 names.
func TestDriver580MIGOff(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, nvmlmock.DGXH200, nvmlmock.Options{MIGDisabled: true, Driver580: true})
	_, err := b.Instances(ctx, 2)
	checkMIGOff(t, err, 2, capability.MIGDisabled)
	infos, err := b.GIProfiles(ctx, 2)
	if err != nil || len(infos) != 7 {
		t.Fatalf("GIProfiles with MIG off on driver 580 = %d profiles, %v; want H200's 7", len(infos), err)
	}
	for _, in := range infos {
		if in.Name == "" {
			t.Errorf("profile index %d: no driver name", in.Index)
		}
	}
}

// A GPU whose MIG enable waits for a reset is still off: Instances is
// ErrMIGDisabled until the reset, then lists the (empty) GPU.
func TestInstancesMIGPendingEnable(t *testing.T) {
	ctx := context.Background()
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{MIGDisabled: true, ResetRequired: true})
	if err := b.EnableMIG(ctx, 3); !errors.Is(err, realize.ErrResetRequired) {
		t.Fatalf("EnableMIG = %v, want ErrResetRequired", err)
	}
	_, err := b.Instances(ctx, 3)
	checkMIGOff(t, err, 3, capability.MIGEnabled)
	if err := srv.ResetGPU(3); err != nil {
		t.Fatal(err)
	}
	insts, err := b.Instances(ctx, 3)
	if err != nil || len(insts) != 0 {
		t.Errorf("Instances after reset = %v, %v; want none, nil", insts, err)
	}
}

func TestDiscoveryUnknownGPU(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	for _, gpu := range []int{-1, 8} {
		_, err := b.GIProfiles(ctx, gpu)
		if !errors.Is(err, realize.ErrNotFound) {
			t.Errorf("GIProfiles(%d) = %v, want ErrNotFound", gpu, err)
		}
		var he *realize.HardwareError
		if !errors.As(err, &he) || he.GPU != gpu {
			t.Errorf("GIProfiles(%d) error %v does not name the GPU", gpu, err)
		}
	}
}

func TestUninitialisedLibrary(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv})
	_, err := b.Devices(context.Background())
	var re *nvmlhal.ReturnError
	if !errors.As(err, &re) || re.Return != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Devices before Init = %v, want ERROR_UNINITIALIZED", err)
	}
}

// A backend over the system library refuses calls before Init instead of
// letting go-nvml call an unresolved symbol (which ends the process). It
// needs no GPU: no NVML call is made.
func TestSystemLibraryBeforeInit(t *testing.T) {
	ctx := context.Background()
	b := nvmlhal.New(nvmlhal.Options{})
	if _, err := b.Devices(ctx); returnCode(err) != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Devices before Init = %v, want ERROR_UNINITIALIZED", err)
	}
	if _, err := b.Instances(ctx, 0); returnCode(err) != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Instances before Init = %v, want ERROR_UNINITIALIZED", err)
	}
	if _, err := b.CreateInstance(ctx, 0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1}); returnCode(err) != nvml.ERROR_UNINITIALIZED {
		t.Errorf("CreateInstance before Init = %v, want ERROR_UNINITIALIZED", err)
	}
	if err := b.Shutdown(ctx); !errors.Is(err, nvmlhal.ErrNotInitialized) {
		t.Errorf("Shutdown before Init = %v, want ErrNotInitialized", err)
	}
}

// The profile table is read from NVML once per GPU UUID and driver
// version: discovery, inspection and instance listing after the first read
// ask NVML no profile or placement query again.
func TestProfileTableCached(t *testing.T) {
	ctx := context.Background()
	b, srv := newBackend(t, nvmlmock.DGXH200, nvmlmock.Options{Driver580: true})
	first, _, err := capability.Discover(ctx, b, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	read := srv.ProfileQueries()
	if read == 0 {
		t.Fatal("discovery asked no profile query")
	}
	again, _, err := capability.Discover(ctx, b, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Instances(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspect(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := srv.ProfileQueries(); got != read {
		t.Errorf("%d profile queries after the first discovery, want none", got-read)
	}
	if len(again) != len(first) || len(again[0].Profiles) != len(first[0].Profiles) || again[0].Profiles[0].Name != first[0].Profiles[0].Name {
		t.Errorf("cached discovery %+v differs from the first %+v", again[0], first[0])
	}
	// Callers get their own copies.
	infos, _ := b.GIProfiles(ctx, 0)
	infos[0].Placements[0].Start = 99
	if infos, _ := b.GIProfiles(ctx, 0); infos[0].Placements[0].Start == 99 {
		t.Error("a caller's change reached the cached table")
	}
}

// A table read while the driver refuses profile queries (MIG off on
// drivers that answer NOT_SUPPORTED there) is empty and is not kept: once
// MIG is on, the table is read.
func TestProfileTableNotCachedWhenRefused(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{MIGDisabled: true})
	if infos, err := b.GIProfiles(ctx, 0); err != nil || len(infos) != 0 {
		t.Fatalf("GIProfiles with MIG off = %v, %v; want none", infos, err)
	}
	if err := b.EnableMIG(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if infos, err := b.GIProfiles(ctx, 0); err != nil || len(infos) != 7 {
		t.Errorf("GIProfiles after enabling MIG = %d profiles, %v; want 7", len(infos), err)
	}
}
