package capability

import "math"

// GIProfileIndex is an NVML GPU instance profile index, the
// nvml.GPU_INSTANCE_PROFILE_* constant passed to GetGpuInstanceProfileInfo.
// It is stable across GPU families, unlike the profile ID NVML returns, which
// must be treated as opaque.
type GIProfileIndex int

// NVML GPU instance profile indexes (go-nvml v0.13.4-1).
const (
	GIProfile1Slice      GIProfileIndex = 0
	GIProfile2Slice      GIProfileIndex = 1
	GIProfile3Slice      GIProfileIndex = 2
	GIProfile4Slice      GIProfileIndex = 3
	GIProfile7Slice      GIProfileIndex = 4
	GIProfile8Slice      GIProfileIndex = 5
	GIProfile6Slice      GIProfileIndex = 6
	GIProfile1SliceRev1  GIProfileIndex = 7  // +me
	GIProfile2SliceRev1  GIProfileIndex = 8  // +me
	GIProfile1SliceRev2  GIProfileIndex = 9  // 1 compute slice, double memory
	GIProfile1SliceGFX   GIProfileIndex = 10 // +gfx
	GIProfile2SliceGFX   GIProfileIndex = 11 // +gfx
	GIProfile4SliceGFX   GIProfileIndex = 12 // +gfx
	GIProfile1SliceNoME  GIProfileIndex = 13 // -me
	GIProfile2SliceNoME  GIProfileIndex = 14 // -me
	GIProfile1SliceAllME GIProfileIndex = 15 // +me.all
	GIProfile2SliceAllME GIProfileIndex = 16 // +me.all
	GIProfile3SliceGFX   GIProfileIndex = 17 // +gfx
	GIProfileCount       GIProfileIndex = 18
)

// Variant returns the name suffix variant NVIDIA uses for profiles of index i.
func (i GIProfileIndex) Variant() Variant {
	switch i {
	case GIProfile1SliceRev1, GIProfile2SliceRev1:
		return VariantME
	case GIProfile1SliceGFX, GIProfile2SliceGFX, GIProfile4SliceGFX, GIProfile3SliceGFX:
		return VariantGFX
	case GIProfile1SliceNoME, GIProfile2SliceNoME:
		return VariantNoME
	case GIProfile1SliceAllME, GIProfile2SliceAllME:
		return VariantMEAll
	}
	return VariantNone
}

// CIProfileIndex is an NVML compute instance profile index, the
// nvml.COMPUTE_INSTANCE_PROFILE_* constant.
type CIProfileIndex int

// NVML compute instance profile indexes (go-nvml v0.13.4-1).
const (
	CIProfile1Slice     CIProfileIndex = 0
	CIProfile2Slice     CIProfileIndex = 1
	CIProfile3Slice     CIProfileIndex = 2
	CIProfile4Slice     CIProfileIndex = 3
	CIProfile7Slice     CIProfileIndex = 4
	CIProfile8Slice     CIProfileIndex = 5
	CIProfile6Slice     CIProfileIndex = 6
	CIProfile1SliceRev1 CIProfileIndex = 7
	CIProfile7SliceNVL  CIProfileIndex = 8
)

// FullCIProfileIndex returns the compute instance profile that spans a whole
// GPU instance of sliceCount compute slices, and false when NVML has none.
func FullCIProfileIndex(sliceCount uint32) (CIProfileIndex, bool) {
	switch sliceCount {
	case 1:
		return CIProfile1Slice, true
	case 2:
		return CIProfile2Slice, true
	case 3:
		return CIProfile3Slice, true
	case 4:
		return CIProfile4Slice, true
	case 6:
		return CIProfile6Slice, true
	case 7:
		return CIProfile7Slice, true
	case 8:
		return CIProfile8Slice, true
	}
	return 0, false
}

// DeriveProfileName computes the canonical name of a GPU instance profile by
// NVIDIA's rule when the driver does not report one (pre-V3 profile info):
//
//	GB = round(ceil(profileMiB/totalMiB * 8) / 8 * ceil(totalMiB/1024))
//
// with the suffix from the profile index. Naive rounding of profileMiB/1024
// gives wrong names such as "7g.79gb" for "7g.80gb". It returns the zero
// ProfileName when an input is zero.
func DeriveProfileName(index GIProfileIndex, sliceCount uint32, profileMiB, totalMiB uint64) ProfileName {
	if sliceCount == 0 || profileMiB == 0 || totalMiB == 0 {
		return ProfileName{}
	}
	eighths := math.Ceil(float64(profileMiB) / float64(totalMiB) * 8)
	totalGiB := math.Ceil(float64(totalMiB) / 1024)
	gb := math.Round(eighths / 8 * totalGiB)
	return ProfileName{Compute: sliceCount, MemoryGB: uint32(gb), Variant: index.Variant()}
}

// Core returns the profile's compute share in percent as the wire format
// defines it: ceil(profileSMs*100/maxSMs), where maxSMs is the largest
// multiprocessor count among the GPU's GPU instance profiles. It returns 0
// when maxSMs is 0.
func Core(profileSMs, maxSMs uint32) uint32 {
	if maxSMs == 0 {
		return 0
	}
	return uint32((uint64(profileSMs)*100 + uint64(maxSMs) - 1) / uint64(maxSMs))
}
