package capability

// Profile is one MIG GPU instance profile as a GPU supports it. The first
// five fields are the scheduler-facing wire fields of a migProfiles entry in
// the node registration, in wire order; the rest is node-local identity that
// never goes on the wire (the JSON codec drops it).
//
// The zero value is an empty, invalid profile.
type Profile struct {
	// Name is the canonical profile name, e.g. "2g.10gb" or "1g.5gb+me".
	Name string `json:"name"`
	// MemoryMB is the memory NVML reports for the profile, in MiB.
	MemoryMB uint64 `json:"memoryMB"`
	// Core is the compute share in percent, see [Core].
	Core uint32 `json:"core"`
	// SliceCount is the number of compute slices.
	SliceCount uint32 `json:"sliceCount"`
	// Placements are every legal placement NVML reports for the profile,
	// occupied or not, in NVML's order.
	Placements []Placement `json:"placements"`

	// GIProfileIndex is the NVML GPU instance profile index.
	GIProfileIndex GIProfileIndex `json:"-"`
	// GIProfileID is NVML's profile Id for this device; opaque.
	GIProfileID uint32 `json:"-"`
	// CIProfileIndex is the compute instance profile spanning the whole GI.
	CIProfileIndex CIProfileIndex `json:"-"`
	// Variant is the engine variant (also encoded in Name's suffix).
	Variant Variant `json:"-"`
	// MaxInstances is NVML's InstanceCount, the most GIs of this profile.
	MaxInstances uint32 `json:"-"`
	// Multiprocessors is NVML's MultiprocessorCount (SMs) for the profile.
	Multiprocessors uint32 `json:"-"`
}

// HasPlacement reports whether p is one of the profile's published
// placements.
func (pr *Profile) HasPlacement(p Placement) bool {
	for _, q := range pr.Placements {
		if q == p {
			return true
		}
	}
	return false
}

// MIGMode is a GPU's MIG mode. The zero value is [MIGUnknown].
type MIGMode uint8

const (
	// MIGUnknown means the mode could not be read or the GPU does not
	// support MIG.
	MIGUnknown MIGMode = iota
	// MIGDisabled means MIG mode is off.
	MIGDisabled
	// MIGEnabled means MIG mode is on.
	MIGEnabled
)

// String returns "unknown", "disabled" or "enabled".
func (m MIGMode) String() string {
	switch m {
	case MIGDisabled:
		return "disabled"
	case MIGEnabled:
		return "enabled"
	}
	return "unknown"
}

// GPU is the MIG capability of one physical GPU: what the device plugin
// publishes and what the scheduler and realization manager check against.
//
// The zero value is a healthy GPU with no profiles.
type GPU struct {
	// UUID is the physical GPU UUID, "GPU-...".
	UUID string
	// Index is the NVML device index on the node.
	Index int
	// Name is the NVML device name, e.g. "NVIDIA A100-SXM4-40GB".
	Name string
	// MemoryMB is the GPU's total memory in MiB.
	MemoryMB uint64
	// NUMA is the GPU's NUMA node, or 0 when unknown.
	NUMA int
	// MIGMode is the current MIG mode.
	MIGMode MIGMode
	// Profiles are the allowlisted profiles NVML resolves, ordered by
	// MemoryMB, then SliceCount, then Name.
	Profiles []Profile
	// Limits are the whole GPU's limits from its full profile table,
	// allowlisted or not, as [Discover] and [GPUFromDevice] read them; zero
	// when unknown (a GPU decoded from a node registration). Read them
	// through [GPU.HardwareLimits]. They never go on the wire.
	Limits Limits
	// Unhealthy marks a GPU the device plugin reports unhealthy: in the
	// node registration its "health" is false or, as the deployed plugin
	// writes it, absent. Placement never chooses an unhealthy GPU for a new
	// reservation; reservations already on it keep their slots. The zero
	// value, false, is healthy, so GPUs from [Discover] are healthy.
	Unhealthy bool
}

// Width returns the width of the GPU's slot grid: the largest placement end
// among its profiles. A30 has 4 slots, A100 8 and RTX PRO 6000 12; never
// assume 8. It returns 0 for a GPU without placements.
func (g *GPU) Width() uint32 {
	var w uint32
	for i := range g.Profiles {
		for _, p := range g.Profiles[i].Placements {
			if e := p.End(); e > w {
				w = e
			}
		}
	}
	return w
}

// Profile returns the profile named name, or nil.
func (g *GPU) Profile(name string) *Profile {
	for i := range g.Profiles {
		if g.Profiles[i].Name == name {
			return &g.Profiles[i]
		}
	}
	return nil
}
