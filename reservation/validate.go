package reservation

import (
	"errors"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/capability"
)

// Validate checks the rules of the reservation contract that do not need
// the node's capability, for the entries of one pod:
//
//   - containerIndex and deviceIndex are not negative ([ErrNegativeIndex]);
//   - gpuUUID is "GPU-" followed by at least one character, without white
//     space, control characters or '[' ([ErrGPUUUID]; a legacy
//     "GPU-<uuid>[t-s]" identifier also matches [ErrLegacyIdentifier]);
//   - profile is a canonical name per capability.ParseProfileName
//     ([ErrProfile]);
//   - placement is non-empty and lies within capability.MaxSlots
//     ([ErrPlacement]);
//   - no two entries share (containerIndex, deviceIndex)
//     ([ErrDuplicateEntry]);
//   - the runtime identity is complete or absent ([ErrPartialRuntime]);
//   - a present migUUID is "MIG-" plus a lower-case 8-4-4-4-12 hex UUID, as
//     NVML R470 and later report it ([ErrMIGUUID]). The pre-R470 form
//     "MIG-GPU-<uuid>/<gi>/<ci>" is refused too, and also matches
//     [ErrLegacyIdentifier]: the deployed device plugin only writes what
//     current NVML returns, and a UUID NVML no longer reports could never
//     be verified at adoption;
//   - no two entries overlap on one GPU ([ErrOverlap]), and no two share a
//     MIG UUID or a GPU instance ID on one GPU ([ErrRuntimeConflict]).
//
// It returns nil or the errors.Join of one [*ValidationError] per problem,
// in entry order, at most [MaxProblems] of them. Validate does not allocate
// when allocs are valid.
func Validate(allocs []Allocation) error {
	var errs []error
	for i := range allocs {
		if errs = validateEntry(errs, allocs, i); len(errs) >= MaxProblems {
			break
		}
	}
	return joinProblems(errs)
}

// MaxProblems bounds the problems [Validate] and [ValidateAgainst] report
// for one record; validation stops once it is reached. A record with more
// is refused all the same, and every pair of a forged record of thousands
// of identical entries (a 256 KiB annotation holds about 2,400) is two
// problems: millions of errors, gigabytes, on every reconciliation.
const MaxProblems = 64

func joinProblems(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs[:min(len(errs), MaxProblems)]...)
}

// GPULookup finds a GPU's capability by UUID. It returns nil for an unknown
// GPU.
type GPULookup interface {
	GPU(uuid string) *capability.GPU
}

// GPUs is a [GPULookup] over a slice, such as a decoded node registration.
type GPUs []capability.GPU

// GPU returns the GPU with the given UUID, or nil.
func (g GPUs) GPU(uuid string) *capability.GPU {
	for i := range g {
		if g[i].UUID == uuid {
			return &g[i]
		}
	}
	return nil
}

// ValidateAgainst runs [Validate] and also checks every entry against the
// node's capability: the GPU exists ([ErrUnknownGPU]), publishes the profile
// ([ErrUnknownProfile]) and published the placement for that profile
// ([ErrUnpublishedPlacement]). Capability checks are skipped for an entry
// whose own fields already failed Validate.
func ValidateAgainst(allocs []Allocation, gpus GPULookup) error {
	var errs []error
	for i := range allocs {
		n := len(errs)
		errs = validateEntry(errs, allocs, i)
		if len(errs) == n {
			errs = validateCapability(errs, &allocs[i], i, gpus)
		}
		if len(errs) >= MaxProblems {
			break
		}
	}
	return joinProblems(errs)
}

func invalid(index, other int, field string, problem error, detail string, cause error) *ValidationError {
	return &ValidationError{Index: index, Other: other, Field: field, Problem: problem, Detail: detail, Cause: cause}
}

// validateEntry appends the problems of allocs[i], including conflicts with
// earlier entries.
func validateEntry(errs []error, allocs []Allocation, i int) []error {
	a := &allocs[i]
	if a.ContainerIndex < 0 {
		errs = append(errs, invalid(i, -1, "containerIndex", ErrNegativeIndex, strconv.Itoa(a.ContainerIndex), nil))
	}
	if a.DeviceIndex < 0 {
		errs = append(errs, invalid(i, -1, "deviceIndex", ErrNegativeIndex, strconv.Itoa(a.DeviceIndex), nil))
	}
	if err := checkGPUUUID(a.GPUUUID); err != nil {
		err.Index = i
		errs = append(errs, err)
	}
	if a.Profile == "" {
		errs = append(errs, invalid(i, -1, "profile", ErrProfile, "empty", nil))
	} else if _, err := capability.ParseProfileName(a.Profile); err != nil {
		errs = append(errs, invalid(i, -1, "profile", ErrProfile, strconv.Quote(a.Profile), err))
	}
	if !a.Placement.Within(capability.MaxSlots) {
		detail := "size 0"
		if a.Placement.Size > 0 {
			detail = "interval " + a.Placement.String() + " beyond slot " + strconv.Itoa(capability.MaxSlots)
		}
		errs = append(errs, invalid(i, -1, "placement", ErrPlacement, detail, nil))
	}
	errs = checkRuntime(errs, a, i)
	for j := 0; j < i; j++ {
		errs = checkPair(errs, allocs, j, i)
	}
	return errs
}

func checkGPUUUID(s string) *ValidationError {
	if s == "" {
		return invalid(0, -1, "gpuUUID", ErrGPUUUID, "empty", nil)
	}
	if IsLegacyIdentifier(s) {
		return invalid(0, -1, "gpuUUID", ErrGPUUUID, strconv.Quote(s)+" is a v2.9 template/slot identifier", ErrLegacyIdentifier)
	}
	if len(s) <= len("GPU-") || !strings.HasPrefix(s, "GPU-") {
		return invalid(0, -1, "gpuUUID", ErrGPUUUID, strconv.Quote(s)+` does not start with "GPU-"`, nil)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '[' || c == ']' || c == ',' || c == ';' || c == ':' {
			return invalid(0, -1, "gpuUUID", ErrGPUUUID, strconv.Quote(s)+" contains "+quoteByte(c), nil)
		}
	}
	return nil
}

func checkRuntime(errs []error, a *Allocation, i int) []error {
	present := 0
	if a.MIGUUID != "" {
		present++
	}
	if a.GPUInstanceID.Valid {
		present++
	}
	if a.ComputeInstanceID.Valid {
		present++
	}
	if present != 0 && present != 3 {
		errs = append(errs, invalid(i, -1, missingRuntimeField(a), ErrPartialRuntime,
			strconv.Itoa(present)+" of migUUID, gpuInstanceID, computeInstanceID present", nil))
	}
	if a.MIGUUID != "" && !IsMIGUUID(a.MIGUUID) {
		var cause error
		detail := strconv.Quote(a.MIGUUID)
		if IsLegacyMIGUUID(a.MIGUUID) {
			cause = ErrLegacyIdentifier
			detail += " is the pre-R470 MIG-GPU-<uuid>/<gi>/<ci> form"
		}
		errs = append(errs, invalid(i, -1, "migUUID", ErrMIGUUID, detail, cause))
	}
	return errs
}

// missingRuntimeField names the first absent runtime field.
func missingRuntimeField(a *Allocation) string {
	switch {
	case a.MIGUUID == "":
		return "migUUID"
	case !a.GPUInstanceID.Valid:
		return "gpuInstanceID"
	}
	return "computeInstanceID"
}

// checkPair reports conflicts of allocs[i] with the earlier allocs[j].
func checkPair(errs []error, allocs []Allocation, j, i int) []error {
	a, b := &allocs[i], &allocs[j]
	if a.ContainerIndex == b.ContainerIndex && a.DeviceIndex == b.DeviceIndex {
		errs = append(errs, invalid(i, j, "deviceIndex", ErrDuplicateEntry,
			"containerIndex "+strconv.Itoa(a.ContainerIndex)+", deviceIndex "+strconv.Itoa(a.DeviceIndex), nil))
	}
	if a.MIGUUID != "" && a.MIGUUID == b.MIGUUID {
		errs = append(errs, invalid(i, j, "migUUID", ErrRuntimeConflict, "same MIG UUID", nil))
	}
	if a.GPUUUID != b.GPUUUID || a.GPUUUID == "" {
		return errs
	}
	if a.Placement.Overlaps(b.Placement) {
		errs = append(errs, invalid(i, j, "placement", ErrOverlap,
			a.Placement.String()+" overlaps "+b.Placement.String()+" on "+a.GPUUUID, nil))
	}
	if a.GPUInstanceID.Valid && b.GPUInstanceID.Valid && a.GPUInstanceID.ID == b.GPUInstanceID.ID {
		errs = append(errs, invalid(i, j, "gpuInstanceID", ErrRuntimeConflict,
			"GPU instance "+strconv.FormatUint(uint64(a.GPUInstanceID.ID), 10)+" claimed twice on "+a.GPUUUID, nil))
	}
	return errs
}

func validateCapability(errs []error, a *Allocation, i int, gpus GPULookup) []error {
	var gpu *capability.GPU
	if gpus != nil {
		gpu = gpus.GPU(a.GPUUUID)
	}
	if gpu == nil {
		return append(errs, invalid(i, -1, "gpuUUID", ErrUnknownGPU, a.GPUUUID, nil))
	}
	pr := gpu.Profile(a.Profile)
	if pr == nil {
		return append(errs, invalid(i, -1, "profile", ErrUnknownProfile, a.Profile+" on "+a.GPUUUID, nil))
	}
	if !pr.HasPlacement(a.Placement) {
		return append(errs, invalid(i, -1, "placement", ErrUnpublishedPlacement,
			a.Placement.String()+" for "+a.Profile+" on "+a.GPUUUID, nil))
	}
	return errs
}

// IsMIGUUID reports whether s is a MIG device UUID as current NVML reports
// it: "MIG-" followed by a lower-case 8-4-4-4-12 hex UUID.
func IsMIGUUID(s string) bool {
	return len(s) == 4+36 && strings.HasPrefix(s, "MIG-") && isUUID(s[4:])
}

// IsLegacyMIGUUID reports whether s has the pre-R470 MIG device UUID form
// "MIG-GPU-<uuid>/<gi>/<ci>", which [Validate] refuses.
func IsLegacyMIGUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "MIG-GPU-")
	if !ok || len(rest) < 36 || !isUUID(rest[:36]) {
		return false
	}
	gi, ci, ok := strings.Cut(rest[36:], "/")
	if !ok || gi != "" {
		return false
	}
	gi, ci, ok = strings.Cut(ci, "/")
	return ok && isDecimal(gi) && isDecimal(ci)
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isUUID reports whether s is a lower-case 8-4-4-4-12 hex UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
