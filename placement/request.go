package placement

import (
	"strconv"
	"strings"
)

// MemoryKind says how a [Memory] demand is expressed.
type MemoryKind uint8

const (
	// WholeGPU demands the GPU's full memory, so the full-GPU profile is
	// chosen. It is the zero value: a container that sets neither
	// nvidia.com/gpumem nor nvidia.com/gpumem-percentage.
	WholeGPU MemoryKind = iota
	// MiBDemand demands an absolute amount (nvidia.com/gpumem).
	MiBDemand
	// PercentDemand demands a percentage of the physical GPU's memory
	// (nvidia.com/gpumem-percentage).
	PercentDemand
)

// Memory is one device's memory demand. The zero value demands a whole GPU.
// Memory is comparable.
type Memory struct {
	Kind    MemoryKind
	MiB     uint64 // for MiBDemand, > 0
	Percent uint32 // for PercentDemand, 1..100
}

// MiB returns a demand of n MiB.
func MiB(n uint64) Memory { return Memory{Kind: MiBDemand, MiB: n} }

// Percent returns a demand of pct percent of the GPU's memory.
func Percent(pct uint32) Memory { return Memory{Kind: PercentDemand, Percent: pct} }

// On returns the demand in MiB on g. A MiB demand is taken as is. A
// percentage is of the GPU's memory as NVML reports it, rounded up, but at
// most the largest profile's memory: the full-GPU profile holds a little less
// than the board (A100-40GB: 7g.40gb is 40192 of 40960 MiB), and 100% must
// still select it. A whole-GPU demand is the largest profile's memory.
func (m Memory) On(g *Grid) uint64 {
	top := g.shape.maxMemory
	switch m.Kind {
	case MiBDemand:
		return m.MiB
	case PercentDemand:
		base := g.memoryMB
		if base == 0 {
			base = top
		}
		return min((base*uint64(m.Percent)+99)/100, top)
	}
	return top
}

// String returns "whole GPU", "<n>MiB" or "<p>%".
func (m Memory) String() string {
	switch m.Kind {
	case MiBDemand:
		return strconv.FormatUint(m.MiB, 10) + "MiB"
	case PercentDemand:
		return strconv.FormatUint(uint64(m.Percent), 10) + "%"
	case WholeGPU:
		return "whole GPU"
	}
	return "MemoryKind(" + strconv.Itoa(int(m.Kind)) + ")"
}

// ContainerRequest is one container's MIG demand: Devices devices of Memory
// each (nvidia.com/gpu and nvidia.com/gpumem or gpumem-percentage). The
// zero value requests nothing.
type ContainerRequest struct {
	// Devices is the number of MIG devices; 0 means the container uses
	// none.
	Devices int
	// Memory is the per-device memory demand.
	Memory Memory
	// Profile, when set, names the exact profile every device of the
	// container must get; Memory is then ignored. The wire has no such
	// field: it serves tools (migctl, the simulator) that ask for a profile.
	Profile string
}

// Request is the MIG demand of a whole pod. Containers are indexed as on the
// wire: init containers first, then regular containers.
//
// Constraint lists mirror the pod annotations nvidia.com/use-gpuuuid,
// nvidia.com/nouse-gpuuuid, nvidia.com/use-gputype and
// nvidia.com/nouse-gputype: a GPU is allowed when its UUID is in UseUUIDs
// (if non-empty) and not in NoUseUUIDs, and its NVML name contains, ignoring
// case, one of UseTypes (if non-empty) and none of NoUseTypes. Substring
// matching is HAMi's rule, so "A100" selects "NVIDIA A100-SXM4-40GB".
//
// Preference mirrors nvidia.com/mig-profile-preference, split at commas: a
// profile matches an entry when its name equals it or starts with the entry
// followed by "." (so "4g" matches "4g.20gb"). Profiles matching the first
// entry are tried first, then the second entry's, then all others; within
// each group the usual order (memory, slice count, name) applies.
//
// The zero value requests nothing and selects nothing.
type Request struct {
	Containers []ContainerRequest
	Preference []string
	UseUUIDs   []string
	NoUseUUIDs []string
	UseTypes   []string
	NoUseTypes []string
}

// MaxDevices bounds the devices of one pod. It keeps a decision's work
// bounded; no GPU node has more MIG devices than this.
const MaxDevices = 256

// Validate checks r and returns a [*RequestError] naming the first bad field:
// a negative device count, more than [MaxDevices] devices in total, a
// MiB demand of 0, a percentage outside 1..100, an unknown memory kind, or
// an empty entry in a list.
func (r *Request) Validate() error {
	total := 0
	for i, c := range r.Containers {
		if c.Devices < 0 {
			return &RequestError{Container: i, Field: "Devices", Reason: "negative device count " + strconv.Itoa(c.Devices)}
		}
		// Compared before adding: a count near math.MaxInt would overflow
		// the sum and pass a check made after it.
		if c.Devices > MaxDevices-total {
			return &RequestError{Container: i, Field: "Devices", Reason: "more than " + strconv.Itoa(MaxDevices) + " devices in the pod"}
		}
		total += c.Devices
		if c.Devices == 0 || c.Profile != "" {
			continue
		}
		switch c.Memory.Kind {
		case WholeGPU:
		case MiBDemand:
			if c.Memory.MiB == 0 {
				return &RequestError{Container: i, Field: "Memory.MiB", Reason: "zero memory demand"}
			}
		case PercentDemand:
			if c.Memory.Percent < 1 || c.Memory.Percent > 100 {
				return &RequestError{Container: i, Field: "Memory.Percent", Reason: "percentage " + strconv.Itoa(int(c.Memory.Percent)) + " outside 1..100"}
			}
		default:
			return &RequestError{Container: i, Field: "Memory.Kind", Reason: "unknown memory kind " + strconv.Itoa(int(c.Memory.Kind))}
		}
	}
	lists := [...]struct {
		name string
		l    []string
	}{{"Preference", r.Preference}, {"UseUUIDs", r.UseUUIDs}, {"NoUseUUIDs", r.NoUseUUIDs}, {"UseTypes", r.UseTypes}, {"NoUseTypes", r.NoUseTypes}}
	for _, l := range lists {
		for j, s := range l.l {
			if strings.TrimSpace(s) == "" {
				return &RequestError{Container: -1, Field: l.name + "[" + strconv.Itoa(j) + "]", Reason: "empty entry"}
			}
		}
	}
	return nil
}

// DeviceCount returns the number of devices the pod requests.
func (r *Request) DeviceCount() int {
	n := 0
	for _, c := range r.Containers {
		n += max(c.Devices, 0)
	}
	return n
}

// Allows reports whether the request's UUID and type constraints allow g.
func (r *Request) Allows(g *Grid) bool {
	if len(r.UseUUIDs) > 0 && !contains(r.UseUUIDs, g.uuid) {
		return false
	}
	if contains(r.NoUseUUIDs, g.uuid) {
		return false
	}
	if len(r.UseTypes) > 0 && !anySubstringFold(g.name, r.UseTypes) {
		return false
	}
	return !anySubstringFold(g.name, r.NoUseTypes)
}

// SplitList splits a comma-separated annotation value such as
// nvidia.com/use-gpuuuid into trimmed entries, dropping empty ones. It
// returns nil for an empty value.
func SplitList(v string) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

func anySubstringFold(s string, subs []string) bool {
	for _, sub := range subs {
		if containsFold(s, strings.TrimSpace(sub)) {
			return true
		}
	}
	return false
}

// containsFold reports whether sub occurs in s ignoring case, without
// allocating.
func containsFold(s, sub string) bool {
	if sub == "" {
		return true
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// preferenceRank returns the index of the first entry of prefs that name
// matches, or len(prefs).
func preferenceRank(prefs []string, name string) int {
	for i, p := range prefs {
		p = strings.TrimSpace(p)
		if name == p || (len(name) > len(p) && name[len(p)] == '.' && name[:len(p)] == p) {
			return i
		}
	}
	return len(prefs)
}
