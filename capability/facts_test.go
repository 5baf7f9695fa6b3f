package capability_test

import (
	"context"
	"fmt"

	"github.com/dynmig/dynmig/capability"
)

// fakeView is a HardwareView built from mig-hardware-facts.md tables. It is
// deliberately tiny: fakehal is the faithful fake; this one only serves
// Discover's tests.
type fakeView struct {
	devs     []capability.DeviceInfo
	profiles map[int][]capability.GIProfileInfo // by device index
	devErr   error
	gipErr   map[int]error
	calls    []int // GIProfiles calls, by index
}

func (f *fakeView) Devices(ctx context.Context) ([]capability.DeviceInfo, error) {
	if f.devErr != nil {
		return nil, f.devErr
	}
	return append([]capability.DeviceInfo(nil), f.devs...), nil
}

func (f *fakeView) GIProfiles(ctx context.Context, index int) ([]capability.GIProfileInfo, error) {
	f.calls = append(f.calls, index)
	if err := f.gipErr[index]; err != nil {
		return nil, err
	}
	ps, ok := f.profiles[index]
	if !ok {
		return nil, fmt.Errorf("no GPU %d", index)
	}
	return ps, nil
}

// add appends a MIG-enabled GPU with the given profile table.
func (f *fakeView) add(name string, totalMiB uint64, table []capability.GIProfileInfo) *capability.DeviceInfo {
	if f.profiles == nil {
		f.profiles = make(map[int][]capability.GIProfileInfo)
	}
	i := len(f.devs)
	f.devs = append(f.devs, capability.DeviceInfo{
		Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Name: name, MemoryMB: totalMiB,
		MIGMode: capability.MIGEnabled, PendingMIGMode: capability.MIGEnabled,
	})
	f.profiles[i] = table
	return &f.devs[i]
}

// starts returns placements of size at each start.
func starts(size uint32, ss ...uint32) []capability.Placement {
	out := make([]capability.Placement, len(ss))
	for i, s := range ss {
		out[i] = capability.Placement{Start: s, Size: size}
	}
	return out
}

func gip(idx capability.GIProfileIndex, id uint32, name string, slices, max, sms uint32, mib uint64, pl []capability.Placement) capability.GIProfileInfo {
	return capability.GIProfileInfo{Index: idx, ID: id, Name: name, SliceCount: slices,
		InstanceCount: max, MultiprocessorCount: sms, MemoryMB: mib, Placements: pl}
}

// withoutNames strips NVML names so that Discover derives them.
func withoutNames(t []capability.GIProfileInfo) []capability.GIProfileInfo {
	out := append([]capability.GIProfileInfo(nil), t...)
	for i := range out {
		out[i].Name = ""
	}
	return out
}

const a100_40Total = 40960

// a100_40 is the A100-SXM4-40GB table (newer driver memory).
var a100_40 = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 19, "1g.5gb", 1, 7, 14, 4864, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev1, 20, "1g.5gb+me", 1, 1, 14, 4864, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev2, 15, "1g.10gb", 1, 4, 14, 9856, starts(2, 0, 2, 4, 6)),
	gip(capability.GIProfile2Slice, 14, "2g.10gb", 2, 3, 28, 9856, starts(2, 0, 2, 4)),
	gip(capability.GIProfile3Slice, 9, "3g.20gb", 3, 2, 42, 19968, starts(4, 0, 4)),
	gip(capability.GIProfile4Slice, 5, "4g.20gb", 4, 1, 56, 19968, starts(4, 0)),
	gip(capability.GIProfile7Slice, 0, "7g.40gb", 7, 1, 98, 40192, starts(8, 0)),
}

const a100_80Total = 81920

// a100_80 is the A100-SXM4-80GB table; this driver names 7g "7g.80gb".
var a100_80 = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 19, "1g.10gb", 1, 7, 14, 9728, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 14, 9728, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev2, 15, "1g.20gb", 1, 4, 14, 19968, starts(2, 0, 2, 4, 6)),
	gip(capability.GIProfile2Slice, 14, "2g.20gb", 2, 3, 28, 19968, starts(2, 0, 2, 4)),
	gip(capability.GIProfile3Slice, 9, "3g.40gb", 3, 2, 42, 40192, starts(4, 0, 4)),
	gip(capability.GIProfile4Slice, 5, "4g.40gb", 4, 1, 56, 40192, starts(4, 0)),
	gip(capability.GIProfile7Slice, 0, "7g.80gb", 7, 1, 98, 80896, starts(8, 0)),
}

const a30Total = 24576

var a30 = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 14, "1g.6gb", 1, 4, 14, 5952, starts(1, 0, 1, 2, 3)),
	gip(capability.GIProfile1SliceRev1, 21, "1g.6gb+me", 1, 1, 14, 5952, starts(1, 0, 1, 2, 3)),
	gip(capability.GIProfile2Slice, 5, "2g.12gb", 2, 2, 28, 11968, starts(2, 0, 2)),
	gip(capability.GIProfile2SliceRev1, 6, "2g.12gb+me", 2, 1, 28, 11968, starts(2, 0, 2)),
	gip(capability.GIProfile4Slice, 0, "4g.24gb", 4, 1, 56, 24000, starts(4, 0)),
}

const rtxProTotal = 97887

var rtxPro = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 14, "1g.24gb", 1, 4, 46, 24192, starts(3, 0, 3, 6, 9)),
	gip(capability.GIProfile1SliceRev1, 21, "1g.24gb+me", 1, 1, 46, 24192, starts(3, 0, 3, 6, 9)),
	gip(capability.GIProfile1SliceGFX, 47, "1g.24gb+gfx", 1, 4, 46, 24192, starts(3, 0, 3, 6, 9)),
	gip(capability.GIProfile1SliceAllME, 65, "1g.24gb+me.all", 1, 1, 46, 24192, starts(3, 0, 3, 6, 9)),
	gip(capability.GIProfile1SliceNoME, 67, "1g.24gb-me", 1, 4, 46, 24192, starts(3, 0, 3, 6, 9)),
	gip(capability.GIProfile2Slice, 5, "2g.48gb", 2, 2, 94, 48512, starts(6, 0, 6)),
	gip(capability.GIProfile2SliceGFX, 35, "2g.48gb+gfx", 2, 2, 94, 48512, starts(6, 0, 6)),
	gip(capability.GIProfile2SliceAllME, 64, "2g.48gb+me.all", 2, 1, 94, 48512, starts(6, 0, 6)),
	gip(capability.GIProfile2SliceNoME, 66, "2g.48gb-me", 2, 2, 94, 48512, starts(6, 0, 6)),
	gip(capability.GIProfile4Slice, 0, "4g.96gb", 4, 1, 188, 97408, starts(12, 0)),
	gip(capability.GIProfile4SliceGFX, 32, "4g.96gb+gfx", 4, 1, 188, 97408, starts(12, 0)),
}

const h100Total = 81559

var h100 = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 19, "1g.10gb", 1, 7, 16, 9984, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 16, 9984, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev2, 15, "1g.20gb", 1, 4, 26, 20096, starts(2, 0, 2, 4, 6)),
	gip(capability.GIProfile2Slice, 14, "2g.20gb", 2, 3, 32, 20096, starts(2, 0, 2, 4)),
	gip(capability.GIProfile3Slice, 9, "3g.40gb", 3, 2, 60, 40448, starts(4, 0, 4)),
	gip(capability.GIProfile4Slice, 5, "4g.40gb", 4, 1, 64, 40448, starts(4, 0)),
	gip(capability.GIProfile7Slice, 0, "7g.80gb", 7, 1, 132, 81152, starts(8, 0)),
}

// h200 is an H200 SXM as driver 580.159.04 reports it.
const h200Total = 143771

var h200 = []capability.GIProfileInfo{
	gip(capability.GIProfile1Slice, 19, "1g.18gb", 1, 7, 16, 16384, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev1, 20, "1g.18gb+me", 1, 1, 16, 16384, starts(1, 0, 1, 2, 3, 4, 5, 6)),
	gip(capability.GIProfile1SliceRev2, 15, "1g.35gb", 1, 4, 26, 33280, starts(2, 0, 2, 4, 6)),
	gip(capability.GIProfile2Slice, 14, "2g.35gb", 2, 3, 32, 33280, starts(2, 0, 2, 4)),
	gip(capability.GIProfile3Slice, 9, "3g.71gb", 3, 2, 60, 71424, starts(4, 0, 4)),
	gip(capability.GIProfile4Slice, 5, "4g.71gb", 4, 1, 64, 71424, starts(4, 0)),
	gip(capability.GIProfile7Slice, 0, "7g.141gb", 7, 1, 132, 143360, starts(8, 0)),
}
