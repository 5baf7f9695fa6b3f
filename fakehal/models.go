package fakehal

import (
	"slices"
	"strings"

	"github.com/dynmig/dynmig/capability"
)

// Model is the MIG profile table of one GPU model, as NVML reports it, used
// to build fake GPUs. The data follows ../shared/data/mig-hardware-facts.md;
// Confirmed is false for tables that were not confirmed on hardware.
type Model struct {
	// Name is the NVML device name real drivers report.
	Name string
	// Aliases are other names that select the model: HAMi chart strings,
	// go-nvml mock names, short forms. Matching is case-insensitive.
	Aliases []string
	// MemoryMB is the GPU's total memory as NVML reports it.
	MemoryMB uint64
	// Profiles are the GPU instance profiles the model supports, with the
	// canonical names a V3-capable driver reports.
	Profiles []capability.GIProfileInfo
	// Confirmed reports whether the profile table was confirmed on hardware.
	Confirmed bool
}

// Width returns the model's slot grid width.
func (m *Model) Width() uint32 {
	var w uint32
	for _, p := range m.Profiles {
		for _, pl := range p.Placements {
			w = max(w, pl.End())
		}
	}
	return w
}

// clone returns a deep copy so callers cannot alter the built-in tables.
func (m Model) clone() Model {
	m.Aliases = slices.Clone(m.Aliases)
	m.Profiles = slices.Clone(m.Profiles)
	for i := range m.Profiles {
		m.Profiles[i].Placements = slices.Clone(m.Profiles[i].Placements)
	}
	return m
}

// Models returns every built-in model, in a fixed order. The result is a
// copy the caller may modify.
func Models() []Model {
	out := make([]Model, len(models))
	for i, m := range models {
		out[i] = m.clone()
	}
	return out
}

// LookupModel returns the built-in model whose Name or one of its Aliases
// equals name, ignoring case.
func LookupModel(name string) (Model, bool) {
	for i := range models {
		if models[i].matches(name) {
			return models[i].clone(), true
		}
	}
	return Model{}, false
}

// matches reports whether the model answers to name.
func (m *Model) matches(name string) bool {
	if strings.EqualFold(m.Name, name) {
		return true
	}
	return slices.ContainsFunc(m.Aliases, func(a string) bool { return strings.EqualFold(a, name) })
}

// starts returns placements of size at each start.
func starts(size uint32, at ...uint32) []capability.Placement {
	ps := make([]capability.Placement, len(at))
	for i, s := range at {
		ps[i] = capability.Placement{Start: s, Size: size}
	}
	return ps
}

// Placement tables of the 8-slot parts (A100, H100, H20, H200, B200, GB200).
var (
	slots8x1g    = starts(1, 0, 1, 2, 3, 4, 5, 6)
	slots8x1gDbl = starts(2, 0, 2, 4, 6) // 1g REV2: one compute slice, two memory slots
	slots8x2g    = starts(2, 0, 2, 4)
	slots8x3g    = starts(4, 0, 4)
	slots8x4g    = starts(4, 0)
	slots8x7g    = starts(8, 0)
)

// gi is a short constructor for the tables below.
func gi(idx capability.GIProfileIndex, id uint32, name string, slices uint32, mib uint64, sms, maxCount uint32, pl []capability.Placement) capability.GIProfileInfo {
	return capability.GIProfileInfo{
		Index: idx, ID: id, Name: name, SliceCount: slices, InstanceCount: maxCount,
		MultiprocessorCount: sms, MemoryMB: mib, Placements: pl,
	}
}

// eightSlot builds the usual 8-slot table: 1g, 1g+me, 1g REV2, 2g, 3g, 4g,
// 7g with the A100/Hopper/Blackwell profile IDs 19, 20, 15, 14, 9, 5, 0.
func eightSlot(names [7]string, mib [7]uint64, sms [7]uint32) []capability.GIProfileInfo {
	return []capability.GIProfileInfo{
		gi(capability.GIProfile1Slice, 19, names[0], 1, mib[0], sms[0], 7, slots8x1g),
		gi(capability.GIProfile1SliceRev1, 20, names[1], 1, mib[1], sms[1], 1, slots8x1g),
		gi(capability.GIProfile1SliceRev2, 15, names[2], 1, mib[2], sms[2], 4, slots8x1gDbl),
		gi(capability.GIProfile2Slice, 14, names[3], 2, mib[3], sms[3], 3, slots8x2g),
		gi(capability.GIProfile3Slice, 9, names[4], 3, mib[4], sms[4], 2, slots8x3g),
		gi(capability.GIProfile4Slice, 5, names[5], 4, mib[5], sms[5], 1, slots8x4g),
		gi(capability.GIProfile7Slice, 0, names[6], 7, mib[6], sms[6], 1, slots8x7g),
	}
}

var (
	a100_40 = eightSlot(
		[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		[7]uint64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
		[7]uint32{14, 14, 14, 28, 42, 56, 98})
	a100_80 = eightSlot(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]uint64{9728, 9728, 19968, 19968, 40192, 40192, 80896},
		[7]uint32{14, 14, 14, 28, 42, 56, 98})
	h100_80 = eightSlot(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]uint64{9984, 9984, 20096, 20096, 40448, 40448, 81152},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	h100_94 = eightSlot(
		[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
		[7]uint64{11008, 11008, 22144, 22144, 47488, 47488, 95360},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// H20 and GH200 96GB: SM counts and exact memory unconfirmed (?); SMs
	// follow H100, which keeps the core shares proportional.
	h20_96 = eightSlot(
		[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
		[7]uint64{11264, 11264, 23552, 23552, 47616, 47616, 96768},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// H200 placements unconfirmed (?): as A100.
	h200 = eightSlot(
		[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		[7]uint64{16384, 16384, 33024, 33024, 71168, 71168, 143360},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// B200: 3g/4g/7g SM counts and memory unconfirmed (?), placements as
	// A100 (?).
	b200 = eightSlot(
		[7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
		[7]uint64{22528, 22528, 45312, 45312, 90624, 90624, 180480},
		[7]uint32{18, 18, 30, 36, 72, 96, 148})
	// GB200 (?): unconfirmed table.
	gb200 = eightSlot(
		[7]string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"},
		[7]uint64{22528, 22528, 46592, 46592, 93184, 93184, 186368},
		[7]uint32{18, 18, 32, 38, 72, 96, 148})

	rtxPro6000 = []capability.GIProfileInfo{
		gi(capability.GIProfile1Slice, 14, "1g.24gb", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceRev1, 21, "1g.24gb+me", 1, 24192, 46, 1, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceGFX, 47, "1g.24gb+gfx", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceAllME, 65, "1g.24gb+me.all", 1, 24192, 46, 1, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceNoME, 67, "1g.24gb-me", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile2Slice, 5, "2g.48gb", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceGFX, 35, "2g.48gb+gfx", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceAllME, 64, "2g.48gb+me.all", 2, 48512, 94, 1, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceNoME, 66, "2g.48gb-me", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile4Slice, 0, "4g.96gb", 4, 97408, 188, 1, starts(12, 0)),
		gi(capability.GIProfile4SliceGFX, 32, "4g.96gb+gfx", 4, 97408, 188, 1, starts(12, 0)),
	}

	a30 = []capability.GIProfileInfo{
		gi(capability.GIProfile1Slice, 14, "1g.6gb", 1, 5952, 14, 4, starts(1, 0, 1, 2, 3)),
		gi(capability.GIProfile1SliceRev1, 21, "1g.6gb+me", 1, 5952, 14, 1, starts(1, 0, 1, 2, 3)),
		gi(capability.GIProfile2Slice, 5, "2g.12gb", 2, 11968, 28, 2, starts(2, 0, 2)),
		gi(capability.GIProfile2SliceRev1, 6, "2g.12gb+me", 2, 11968, 28, 1, starts(2, 0, 2)),
		gi(capability.GIProfile4Slice, 0, "4g.24gb", 4, 24000, 56, 1, starts(4, 0)),
	}
)

// models is the built-in catalogue. Names are what real drivers report;
// aliases include the HAMi chart strings and go-nvml mock names.
var models = []Model{
	{Name: "NVIDIA A100-SXM4-40GB", Aliases: []string{"A100-SXM4-40GB", "A100-40GB", "A100"}, MemoryMB: 40960, Profiles: a100_40, Confirmed: true},
	{Name: "NVIDIA A100-PCIE-40GB", Aliases: []string{"A100-PCIE-40GB", "A100-40GB-PCIe"}, MemoryMB: 40960, Profiles: a100_40, Confirmed: true},
	{Name: "NVIDIA A100-SXM4-80GB", Aliases: []string{"A100-SXM4-80GB", "A100-80GB"}, MemoryMB: 81920, Profiles: a100_80, Confirmed: true},
	{Name: "NVIDIA A100 80GB PCIe", Aliases: []string{"A100-PCIE-80GB", "A100-80GB-PCIe"}, MemoryMB: 81920, Profiles: a100_80, Confirmed: true},
	{Name: "NVIDIA H100 80GB HBM3", Aliases: []string{"H100-SXM5-80GB", "H100", "H100-80GB"}, MemoryMB: 81559, Profiles: h100_80, Confirmed: true},
	{Name: "NVIDIA H100 PCIe", Aliases: []string{"H100-PCIE-80GB"}, MemoryMB: 81559, Profiles: h100_80, Confirmed: true},
	{Name: "NVIDIA H100 NVL", Aliases: []string{"H100-PCIE-94GB", "H100-SXM5-94GB", "H100-94GB"}, MemoryMB: 95830, Profiles: h100_94, Confirmed: true},
	{Name: "NVIDIA H20", Aliases: []string{"H20"}, MemoryMB: 97871, Profiles: h20_96},
	{Name: "NVIDIA GH200 96GB HBM3", Aliases: []string{"GH200", "H100 on GH200"}, MemoryMB: 97871, Profiles: h20_96},
	{Name: "NVIDIA H200", Aliases: []string{"H200-SXM5", "H200", "NVIDIA H200 141GB HBM3e"}, MemoryMB: 143771, Profiles: h200},
	{Name: "NVIDIA H200 NVL", Aliases: []string{"H200 NVL"}, MemoryMB: 143771, Profiles: h200},
	{Name: "NVIDIA B200", Aliases: []string{"B200", "NVIDIA B200 180GB HBM3e"}, MemoryMB: 183359, Profiles: b200},
	{Name: "NVIDIA GB200", Aliases: []string{"GB200"}, MemoryMB: 190464, Profiles: gb200},
	{Name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", Aliases: []string{"RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", "RTXPRO6000"}, MemoryMB: 97887, Profiles: rtxPro6000, Confirmed: true},
	{Name: "NVIDIA A30", Aliases: []string{"A30", "NVIDIA A30-PCIE-24GB", "A30-24GB"}, MemoryMB: 24576, Profiles: a30, Confirmed: true},
}
