package capability

import "strings"

// Limits are the limits of a whole GPU that placement decisions count
// against: properties of the hardware, read from the GPU's full profile
// table (every profile NVML reports, allowlisted or not). An allowlist
// narrows which profiles a GPU publishes, never these: on an RTX PRO 6000
// that publishes only 1g.24gb and 1g.24gb+me.all, four 1g.24gb still fit.
//
// The zero value means unknown; see [GPU.HardwareLimits]. Limits is
// comparable.
type Limits struct {
	// Slots is the width of the GPU's memory-slot grid: the largest
	// placement end in the full table (4 on A30, 8 on A100 to GB200, 12
	// on RTX PRO 6000).
	Slots uint32
	// ComputeSlices is the number of compute slices of the whole GPU: the
	// largest SliceCount in the full table (7 on 8-slot parts, 4 on A30
	// and RTX PRO 6000).
	ComputeSlices uint32
	// AllMediaEngines reports whether the full table has "+me.all"
	// profiles (RTX PRO 6000 Blackwell): then media engines are handed out
	// per compute slice and can run out before the slots do.
	AllMediaEngines bool
}

// LimitsOf returns the limits of a GPU whose full profile table is ps. It
// must be given every profile the GPU supports: a filtered table gives
// limits that are too low.
func LimitsOf(ps []Profile) Limits {
	var l Limits
	for i := range ps {
		l = l.widen(&ps[i])
	}
	return l
}

func (l Limits) widen(p *Profile) Limits {
	l.ComputeSlices = max(l.ComputeSlices, p.SliceCount)
	for _, pl := range p.Placements {
		l.Slots = max(l.Slots, pl.End())
	}
	if p.Variant == VariantMEAll {
		l.AllMediaEngines = true
	} else if n, err := ParseProfileName(p.Name); err == nil && n.Variant == VariantMEAll {
		l.AllMediaEngines = true
	}
	return l
}

// modelLimits are the limits of the MIG-capable GPU families, by a
// substring of the NVML device name (or of the HAMi chart's model string),
// from mig-hardware-facts: the grid and compute slices every table of the
// family shares. The first match wins; "H20" covers H200 and GH200, "B200"
// GB200. A30 is matched by [isA30].
var modelLimits = []struct {
	names  []string
	limits Limits
}{
	{[]string{"RTX PRO 6000"}, Limits{Slots: 12, ComputeSlices: 4, AllMediaEngines: true}},
	{[]string{"A100", "A800", "H100", "H800", "H20", "B200"}, Limits{Slots: 8, ComputeSlices: 7}},
}

// ModelLimits returns the limits of the GPU family the device name
// belongs to, and false for a name of no known MIG-capable family. The
// names are NVML's ("NVIDIA A100-SXM4-40GB", "NVIDIA H200") or the HAMi
// chart's ("A100-PCIE-40GB", "H200-SXM5").
func ModelLimits(deviceName string) (Limits, bool) {
	for _, m := range modelLimits {
		for _, n := range m.names {
			if strings.Contains(deviceName, n) {
				return m.limits, true
			}
		}
	}
	if isA30(deviceName) {
		return Limits{Slots: 4, ComputeSlices: 4}, true
	}
	return Limits{}, false
}

// isA30 reports whether the name is an A30's ("NVIDIA A30",
// "NVIDIA A30-PCIE-24GB", "A30-24GB"), not an "RTX A3000"'s.
func isA30(name string) bool {
	i := strings.Index(name, "A30")
	if i < 0 || (i > 0 && name[i-1] != ' ') {
		return false
	}
	rest := name[i+3:]
	return rest == "" || rest[0] == '-' || rest[0] == ' '
}

// HardwareLimits returns the GPU's [Limits]: g.Limits when discovery set
// them from the full table; otherwise (a GPU decoded from a node
// registration, which carries only the allowlisted profiles) the limits
// of its model family ([ModelLimits]). Either is widened to cover the
// published profiles, so a table wider than its family's is never cut
// short. Only for a GPU of no known family are the limits those of the
// published profiles alone, which may be lower than the hardware's. A GPU
// that publishes no profiles has zero limits.
func (g *GPU) HardwareLimits() Limits {
	if len(g.Profiles) == 0 {
		return Limits{}
	}
	l := g.Limits
	if l == (Limits{}) {
		l, _ = ModelLimits(g.Name)
	}
	for i := range g.Profiles {
		l = l.widen(&g.Profiles[i])
	}
	return l
}
