package capability

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ProfileFromInfo turns NVML's description of one GPU instance profile into
// a [Profile]. totalMiB is the GPU's total memory (used to derive the
// canonical name when the driver reports none) and maxSMs the largest
// MultiprocessorCount among all the GPU's GPU instance profiles (the 7g
// profile on 8-slot parts), from which Core is computed.
//
// The name comes from info.Name when set, with any "MIG " prefix removed,
// otherwise from [DeriveProfileName]. It fails with a [*ProfileNameError]
// when neither yields a valid name, and with a [*ProfileInfoError] when the
// info has no compute slices or a placement that is not valid.
//
// A profile without placements is accepted: it describes what NVML reports,
// and [GPUFromDevice] callers may want to see it. Such a profile cannot be
// realized or scheduled, so [Discover] leaves it out of what a GPU
// publishes and reports it as a [FindingBadProfile].
func ProfileFromInfo(info GIProfileInfo, totalMiB uint64, maxSMs uint32) (Profile, error) {
	if info.SliceCount == 0 {
		return Profile{}, &ProfileInfoError{Index: info.Index, Reason: "zero slice count"}
	}
	for _, p := range info.Placements {
		if !p.Within(MaxSlots) {
			return Profile{}, &ProfileInfoError{Index: info.Index, Reason: fmt.Sprintf("placement %v outside a %d-slot grid", p, MaxSlots)}
		}
	}
	name, err := profileName(info, totalMiB)
	if err != nil {
		return Profile{}, err
	}
	ci, _ := FullCIProfileIndex(info.SliceCount)
	return Profile{
		Name:            name.String(),
		MemoryMB:        info.MemoryMB,
		Core:            Core(info.MultiprocessorCount, maxSMs),
		SliceCount:      info.SliceCount,
		Placements:      slices.Clone(info.Placements),
		GIProfileIndex:  info.Index,
		GIProfileID:     info.ID,
		CIProfileIndex:  ci,
		Variant:         name.Variant,
		MaxInstances:    info.InstanceCount,
		Multiprocessors: info.MultiprocessorCount,
	}, nil
}

func profileName(info GIProfileInfo, totalMiB uint64) (ProfileName, error) {
	if info.Name != "" {
		return ParseProfileName(strings.TrimPrefix(info.Name, "MIG "))
	}
	n := DeriveProfileName(info.Index, info.SliceCount, info.MemoryMB, totalMiB)
	if !n.IsValid() {
		return ProfileName{}, &ProfileNameError{Name: "", Reason: fmt.Sprintf("cannot derive a name for profile index %d", info.Index)}
	}
	return n, nil
}

// ErrProfileInfo is the sentinel wrapped by every [*ProfileInfoError].
var ErrProfileInfo = errors.New("capability: unusable GPU instance profile info")

// ProfileInfoError reports NVML profile information that cannot describe a
// usable profile: no compute slices, a placement outside the grid, no
// placements, or a name another profile of the GPU already has. It matches
// [ErrProfileInfo].
type ProfileInfoError struct {
	Index  GIProfileIndex // the NVML profile index concerned
	Reason string         // what is wrong
}

func (e *ProfileInfoError) Error() string {
	return fmt.Sprintf("capability: GPU instance profile index %d: %s", e.Index, e.Reason)
}

// Unwrap returns [ErrProfileInfo].
func (e *ProfileInfoError) Unwrap() error { return ErrProfileInfo }

// MaxMultiprocessors returns the largest MultiprocessorCount among infos, the
// maxSMs of the core formula.
func MaxMultiprocessors(infos []GIProfileInfo) uint32 {
	var m uint32
	for _, in := range infos {
		m = max(m, in.MultiprocessorCount)
	}
	return m
}

// GPUFromDevice builds the capability of one GPU from its device info and
// every GPU instance profile it supports, without any allowlist filtering.
// Profiles whose info is unusable are left out and returned as errors, one
// per profile; the GPU is still usable with the rest. Profiles are ordered
// by [CompareProfiles]. Limits are those of every usable profile
// ([LimitsOf]).
func GPUFromDevice(dev DeviceInfo, infos []GIProfileInfo) (GPU, []error) {
	gpu := GPU{
		UUID:     dev.UUID,
		Index:    dev.Index,
		Name:     dev.Name,
		MemoryMB: dev.MemoryMB,
		NUMA:     dev.NUMA,
		MIGMode:  dev.MIGMode,
		Profiles: make([]Profile, 0, len(infos)),
	}
	maxSMs := MaxMultiprocessors(infos)
	var errs []error
	for _, in := range infos {
		p, err := ProfileFromInfo(in, dev.MemoryMB, maxSMs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gpu.Profiles = append(gpu.Profiles, p)
	}
	SortProfiles(gpu.Profiles)
	gpu.Limits = LimitsOf(gpu.Profiles)
	return gpu, errs
}

// CompareProfiles orders profiles the way the scheduler tries them: by
// MemoryMB, then SliceCount, then Name.
func CompareProfiles(a, b *Profile) int {
	return cmp.Or(
		cmp.Compare(a.MemoryMB, b.MemoryMB),
		cmp.Compare(a.SliceCount, b.SliceCount),
		strings.Compare(a.Name, b.Name),
	)
}

// SortProfiles sorts ps in place by [CompareProfiles].
func SortProfiles(ps []Profile) {
	slices.SortStableFunc(ps, func(a, b Profile) int { return CompareProfiles(&a, &b) })
}
