package capability

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
)

// FindingKind classifies a [Finding]. The zero value is not a kind.
type FindingKind uint8

const (
	// FindingNoMatch: the GPU is in MIG mode but its NVML name matches no
	// allowlist entry, so it publishes no profiles.
	FindingNoMatch FindingKind = iota + 1
	// FindingMIGDisabled: MIG mode is disabled or unknown (for example a
	// board without MIG), so the GPU publishes no profiles.
	FindingMIGDisabled
	// FindingModePending: a MIG mode change waits for a GPU reset; the GPU
	// is discovered in its current mode.
	FindingModePending
	// FindingUnresolved: an allowlisted profile name is not among the
	// profiles NVML reports for the GPU, so it is omitted. Expected for
	// alias names such as 7g.79gb next to 7g.80gb.
	FindingUnresolved
	// FindingBadProfile: NVML reported a profile that cannot be used (no
	// valid name, no slices, no or invalid placements, or a name another
	// profile of the GPU already has); it is left out.
	FindingBadProfile
	// FindingNoProfiles: the GPU is in MIG mode and matches an entry, but
	// none of the entry's profiles resolved.
	FindingNoProfiles
	// FindingResolved: an allowlisted name the GPU does not report denotes
	// one of its profiles under another naming (HAMi's chart lists A100
	// 80GB's 7g.80gb as 7g.79gb), so the GPU publishes that profile under
	// the driver's name, Finding.Resolved (see [ResolveProfileName]).
	FindingResolved
)

var findingNames = [...]string{
	FindingNoMatch:     "no-match",
	FindingMIGDisabled: "mig-disabled",
	FindingModePending: "mode-pending",
	FindingUnresolved:  "unresolved",
	FindingBadProfile:  "bad-profile",
	FindingNoProfiles:  "no-profiles",
	FindingResolved:    "resolved",
}

// String returns a short kebab-case name such as "no-match".
func (k FindingKind) String() string {
	if int(k) < len(findingNames) && findingNames[k] != "" {
		return findingNames[k]
	}
	return "FindingKind(" + strconv.Itoa(int(k)) + ")"
}

// Finding is one thing [Discover] left out or noticed about a GPU, so that
// nothing is dropped silently. Finding is comparable when Err is.
type Finding struct {
	Kind  FindingKind
	GPU   int    // NVML device index
	UUID  string // GPU UUID
	Model string // NVML device name
	// Entry is the allowlist entry that matched the GPU, or -1.
	Entry int
	// Profile is the profile name concerned (FindingUnresolved,
	// FindingBadProfile when a name is known), else "".
	Profile string
	// Resolved is the driver's name of the profile an allowlisted name
	// resolved to (FindingResolved), else "".
	Resolved string
	// Err is the cause for FindingBadProfile (a [*ProfileNameError] or a
	// [*ProfileInfoError]), else nil.
	Err error
}

// String describes the finding in one line.
func (f Finding) String() string {
	s := fmt.Sprintf("GPU %d (%s, %q): %s", f.GPU, f.UUID, f.Model, f.Kind)
	if f.Entry >= 0 {
		s += " entry " + strconv.Itoa(f.Entry)
	}
	if f.Profile != "" {
		s += " profile " + f.Profile
	}
	if f.Resolved != "" {
		s += " resolved to the driver's " + f.Resolved
	}
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

// DiscoveryReport lists the [Finding] values of one [Discover] call, ordered
// by GPU index, then as discovered (profiles in allowlist order). The zero
// value is an empty report.
type DiscoveryReport struct {
	Findings []Finding
}

// Of returns the findings of kind k.
func (r DiscoveryReport) Of(k FindingKind) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// Discover reads every GPU from hw and returns its MIG capability under
// policy, one [GPU] per device in NVML index order.
//
// A GPU in MIG mode whose NVML name matches an allowlist entry (see
// [Allowlist.Match]) gets exactly the entry's profiles that NVML resolves
// (an entry's name the driver does not report resolves to the driver's
// profile it denotes under another naming, see [ResolveProfileName], and
// is published under the driver's name with a FindingResolved),
// built by [GPUFromDevice] (so core = ceil(profileSMs*100/maxSMs) with maxSMs
// over all the GPU's GI profiles, allowlisted or not) and ordered by
// [CompareProfiles]. Every other GPU is returned with no profiles. Whatever
// is left out is in the report: allowlisted names the GPU does not
// resolve, GPUs matching no entry, GPUs with MIG disabled or a mode change
// pending, and unusable NVML profiles.
//
// Errors from hw are [*HardwareError] values naming the call and GPU index;
// on error no GPUs are returned. Discover checks ctx between GPUs and
// returns ctx.Err() when it is done. It only reads from hw.
func Discover(ctx context.Context, hw HardwareView, policy Allowlist) ([]GPU, DiscoveryReport, error) {
	var report DiscoveryReport
	devs, err := hw.Devices(ctx)
	if err != nil {
		return nil, report, &HardwareError{Op: "Devices", GPU: -1, Err: err}
	}
	gpus := make([]GPU, 0, len(devs))
	for _, dev := range devs {
		if err := ctx.Err(); err != nil {
			return nil, DiscoveryReport{}, err
		}
		gpu, err := discoverGPU(ctx, hw, policy, dev, &report)
		if err != nil {
			return nil, DiscoveryReport{}, err
		}
		gpus = append(gpus, gpu)
	}
	sortByIndex(gpus, report.Findings)
	return gpus, report, nil
}

// sortByIndex orders gpus by Index and findings stably by GPU, in case the
// view lists devices out of order.
func sortByIndex(gpus []GPU, findings []Finding) {
	slices.SortStableFunc(gpus, func(a, b GPU) int { return cmp.Compare(a.Index, b.Index) })
	slices.SortStableFunc(findings, func(a, b Finding) int { return cmp.Compare(a.GPU, b.GPU) })
}

// usableProfiles returns the usable profiles of a GPU's table, by name
// and in table order: the first of a name, and only with placements. Each
// other one is noted as a FindingBadProfile.
func usableProfiles(profiles []Profile, note func(k FindingKind, profile string, err error)) (map[string]*Profile, []Profile) {
	byName := make(map[string]*Profile, len(profiles))
	for i := range profiles {
		p := &profiles[i]
		switch {
		case byName[p.Name] != nil:
			note(FindingBadProfile, p.Name, &ProfileInfoError{Index: p.GIProfileIndex,
				Reason: fmt.Sprintf("same name %s as profile index %d", p.Name, byName[p.Name].GIProfileIndex)})
		case len(p.Placements) == 0:
			note(FindingBadProfile, p.Name, &ProfileInfoError{Index: p.GIProfileIndex, Reason: "no placements"})
		default:
			byName[p.Name] = p
		}
	}
	usable := make([]Profile, 0, len(byName))
	for i := range profiles {
		if p := &profiles[i]; byName[p.Name] == p {
			usable = append(usable, *p)
		}
	}
	return byName, usable
}

// discoverGPU returns dev as a GPU with the profiles of its allowlist
// entry, noting in report what it leaves out and why.
func discoverGPU(ctx context.Context, hw HardwareView, policy Allowlist, dev DeviceInfo, report *DiscoveryReport) (GPU, error) {
	entry, _, matched := policy.Match(dev.Name)
	note := func(k FindingKind, profile string, err error) {
		report.Findings = append(report.Findings, Finding{
			Kind: k, GPU: dev.Index, UUID: dev.UUID, Model: dev.Name,
			Entry: entry, Profile: profile, Err: err,
		})
	}
	bare := GPU{UUID: dev.UUID, Index: dev.Index, Name: dev.Name, MemoryMB: dev.MemoryMB, NUMA: dev.NUMA, MIGMode: dev.MIGMode}
	if dev.PendingMIGMode != dev.MIGMode {
		note(FindingModePending, "", nil)
	}
	if dev.MIGMode != MIGEnabled {
		note(FindingMIGDisabled, "", nil)
		return bare, nil
	}
	if !matched {
		note(FindingNoMatch, "", nil)
		return bare, nil
	}
	infos, err := hw.GIProfiles(ctx, dev.Index)
	if err != nil {
		return GPU{}, &HardwareError{Op: "GIProfiles", GPU: dev.Index, Err: err}
	}
	all, errs := GPUFromDevice(dev, infos)
	for _, err := range errs {
		note(FindingBadProfile, "", err)
	}
	byName, usable := usableProfiles(all.Profiles, note)
	gpu := bare
	gpu.Limits = all.Limits
	published := make(map[string]bool, len(byName))
	for _, name := range policy[entry].Profiles {
		p := byName[name]
		if p == nil {
			if r, _, ok := ResolveProfileName(name, usable, dev.MemoryMB); ok {
				p = byName[r.Name]
				report.Findings = append(report.Findings, Finding{Kind: FindingResolved, GPU: dev.Index, UUID: dev.UUID,
					Model: dev.Name, Entry: entry, Profile: name, Resolved: p.Name})
			}
		}
		switch {
		case p == nil:
			note(FindingUnresolved, name, nil)
		case !published[p.Name]: // an unvalidated policy may list a name twice
			published[p.Name] = true
			gpu.Profiles = append(gpu.Profiles, *p)
		}
	}
	if len(gpu.Profiles) == 0 {
		note(FindingNoProfiles, "", nil)
	}
	SortProfiles(gpu.Profiles)
	return gpu, nil
}
