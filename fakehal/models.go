package fakehal

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/capability"
)

// Model is the MIG profile table of one GPU model, as NVML reports it, used
// to build fake GPUs. The data follows ../shared/data/mig-hardware-facts.md
// and the MIG User Guide (R580); Confirmed is false for tables that were not
// confirmed on hardware, and Note then says what is unconfirmed.
type Model struct {
	// Name is the NVML device name real drivers report.
	Name string
	// Aliases are other names that select the model: HAMi chart strings,
	// go-nvml mock names, short forms. Matching is case-insensitive.
	Aliases []string
	// PCIDeviceID is the PCI device ID (the upper half of NVML's
	// pciDeviceId) where a model is told apart by it, else 0.
	PCIDeviceID uint16
	// MemoryMB is the GPU's total memory as NVML reports it.
	MemoryMB uint64
	// Profiles are the GPU instance profiles the model supports, with the
	// canonical names a V3-capable driver reports.
	Profiles []capability.GIProfileInfo
	// Engines are the media engines of the whole GPU: the budget every
	// GPU instance's engines come out of (see [Engines]). The zero value
	// models a GPU whose engines are not limited.
	Engines Engines
	// ProfileEngines are the media engines a GPU instance of each profile
	// takes, by profile index, from the MIG User Guide's per-profile
	// engine columns. A profile not listed takes none.
	ProfileEngines map[capability.GIProfileIndex]Engines
	// Older are the tables earlier driver generations report where they
	// differ from the current one; [Options.Driver] selects one.
	Older []DriverTable
	// Confirmed reports whether the profile table was confirmed on hardware.
	Confirmed bool
	// Note says what is unconfirmed or estimated about the table; "" for a
	// confirmed table.
	Note string
}

// Driver names a driver generation whose profile tables differ from the
// current drivers' for some models (H200's 2g/3g/7g memory, B200's and
// GB200's 1g memory, GB200's profile names). The zero value is [DriverCurrent].
type Driver uint8

const (
	// DriverCurrent is the profile table current (R580) drivers report.
	DriverCurrent Driver = iota
	// DriverEarly is the table of the first drivers that supported the
	// model (R570 for B200 and GB200; a 2024 driver for H200).
	DriverEarly
)

// String returns "current" or "early".
func (d Driver) String() string {
	switch d {
	case DriverCurrent:
		return "current"
	case DriverEarly:
		return "early"
	}
	return "Driver(" + strconv.Itoa(int(d)) + ")"
}

// DriverTable is what one driver generation reports for a model where it
// differs from the current drivers: total memory and the profile table.
type DriverTable struct {
	Driver   Driver
	MemoryMB uint64
	Profiles []capability.GIProfileInfo
}

// ForDriver returns the model as driver generation d reports it: the
// matching entry of Older, or the model itself when d reports the current
// table. The result is a copy.
func (m Model) ForDriver(d Driver) Model {
	out := m.clone()
	for _, t := range m.Older {
		if t.Driver == d {
			out.MemoryMB = t.MemoryMB
			out.Profiles = cloneProfiles(t.Profiles)
		}
	}
	return out
}

// EnginesOf returns the media engines a GPU instance of profile index p
// takes on this model.
func (m *Model) EnginesOf(p capability.GIProfileIndex) Engines { return m.ProfileEngines[p] }

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
	m.Profiles = cloneProfiles(m.Profiles)
	m.ProfileEngines = maps.Clone(m.ProfileEngines)
	m.Older = slices.Clone(m.Older)
	for i := range m.Older {
		m.Older[i].Profiles = cloneProfiles(m.Older[i].Profiles)
	}
	return m
}

func cloneProfiles(ps []capability.GIProfileInfo) []capability.GIProfileInfo {
	ps = slices.Clone(ps)
	for i := range ps {
		ps[i].Placements = slices.Clone(ps[i].Placements)
	}
	return ps
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

// Tables returns the profile table of every built-in model at every
// driver generation that reports a different one ([Model.ForDriver]), in
// a fixed order: the input of the property generators in placementtest
// and reservationtest. The result is a copy the caller may modify.
func Tables() []capability.ModelTable {
	var out []capability.ModelTable
	for _, m := range Models() {
		out = append(out, capability.ModelTable{Name: m.Name, MemoryMB: m.MemoryMB, Profiles: m.Profiles})
		for _, o := range m.Older {
			e := m.ForDriver(o.Driver)
			out = append(out, capability.ModelTable{Name: e.Name, MemoryMB: e.MemoryMB, Profiles: e.Profiles})
		}
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
