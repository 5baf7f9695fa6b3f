package nvmlhal

import (
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// ReturnError is the raw return code of a failed NVML call. It is the Cause
// of every [*realize.HardwareError] this package returns for an NVML
// failure, so errors.As(err, &re) with re a *ReturnError yields the code.
// It unwraps to the nvml.Return itself, so errors.Is(err, nvml.ERROR_IN_USE)
// also works.
//
// nvml.Return implements error on its own, but its Error method calls into
// the loaded library (or a package-level fallback that go-nvml swaps at
// Init), so this type formats the code itself: the text does not change
// with the library's state and formatting never reaches cgo.
type ReturnError struct {
	Return nvml.Return
	// Meaning says what the code proves where NVML gives one code for
	// several causes, "" otherwise. See [Meaning].
	Meaning string
}

func (e *ReturnError) Error() string {
	if e.Meaning != "" {
		return "nvml: " + returnName(e.Return) + " (" + e.Meaning + ")"
	}
	return "nvml: " + returnName(e.Return)
}

// Meaning says what a code proves, for the codes NVML gives for several
// causes: INSUFFICIENT_RESOURCES on create does not prove an overlap (an
// exhausted instance count, compute slices or media engines give it too),
// and IN_USE can mean another NVML client holds the GPU rather than
// instances or processes of our own. "" for other codes.
func Meaning(ret nvml.Return, creating bool) string {
	switch {
	case ret == nvml.ERROR_INSUFFICIENT_RESOURCES && creating:
		return "an overlapping instance, or the profile's instance count, the compute slices or the media engines used up"
	case ret == nvml.ERROR_INSUFFICIENT_RESOURCES:
		return "compute slices or instance count used up"
	case ret == nvml.ERROR_IN_USE:
		return "compute instances or processes on it, or another NVML client holding the GPU"
	}
	return ""
}

// Unwrap returns the nvml.Return.
func (e *ReturnError) Unwrap() error { return e.Return }

// returnName spells the codes this backend meets; others by number.
func returnName(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_ALREADY_INITIALIZED:
		return "ERROR_ALREADY_INITIALIZED"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "ERROR_INSUFFICIENT_SIZE"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_RESET_REQUIRED:
		return "ERROR_RESET_REQUIRED"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case nvml.ERROR_IN_USE:
		return "ERROR_IN_USE"
	case nvml.ERROR_MEMORY:
		return "ERROR_MEMORY"
	case nvml.ERROR_NO_DATA:
		return "ERROR_NO_DATA"
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return "ERROR_INSUFFICIENT_RESOURCES"
	case nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
		return "ERROR_ARGUMENT_VERSION_MISMATCH"
	case nvml.ERROR_NOT_READY:
		return "ERROR_NOT_READY"
	case nvml.ERROR_GPU_NOT_FOUND:
		return "ERROR_GPU_NOT_FOUND"
	case nvml.ERROR_INVALID_STATE:
		return "ERROR_INVALID_STATE"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return "return code " + strconv.Itoa(int(r))
}

// kindOf maps an NVML return code to the realize sentinel callers branch
// on, given the operation's context. NOT_SUPPORTED is decided by the caller
// (it may mean MIG disabled), so it is passed in as notSupported.
func kindOf(ret nvml.Return, creating bool, notSupported error) error {
	switch ret {
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return realize.ErrOccupied
	case nvml.ERROR_INVALID_ARGUMENT:
		if creating {
			return realize.ErrInvalidPlacement
		}
	case nvml.ERROR_IN_USE:
		return realize.ErrInUse
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_GPU_NOT_FOUND:
		return realize.ErrNotFound
	case nvml.ERROR_NOT_SUPPORTED:
		return notSupported
	case nvml.ERROR_RESET_REQUIRED:
		return realize.ErrResetRequired
	}
	return nil
}

// hwError builds the error for a failed NVML call outside GPU instance
// creation. dev, when not nil, is asked for its MIG mode so that
// NOT_SUPPORTED on a GPU with MIG off reads as realize.ErrMIGDisabled.
func hwError(op string, gpu int, dev nvml.Device, ret nvml.Return) error {
	return &realize.HardwareError{Op: op, GPU: gpu, Kind: kindOf(ret, false, notSupportedKind(dev, ret)), Cause: &ReturnError{Return: ret, Meaning: Meaning(ret, false)}}
}

// createError is hwError for CreateGpuInstanceWithPlacement, where
// INVALID_ARGUMENT means an illegal placement and INSUFFICIENT_RESOURCES
// any exhausted resource (realize.ErrOccupied, whose Cause says so).
func createError(op string, gpu int, dev nvml.Device, ret nvml.Return) error {
	return &realize.HardwareError{Op: op, GPU: gpu, Kind: kindOf(ret, true, notSupportedKind(dev, ret)), Cause: &ReturnError{Return: ret, Meaning: Meaning(ret, true)}}
}

// notSupportedKind tells "MIG mode is off" from "not supported" for a
// NOT_SUPPORTED return. It costs one GetMigMode call, only on that path.
func notSupportedKind(dev nvml.Device, ret nvml.Return) error {
	if ret != nvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	if dev != nil {
		if cur, _, r := dev.GetMigMode(); r == nvml.SUCCESS && cur != nvml.DEVICE_MIG_ENABLE {
			return realize.ErrMIGDisabled
		}
	}
	return realize.ErrNotSupported
}

// MIGModeError is the Cause of a realize.ErrMIGDisabled error that this
// package decides from the GPU's MIG mode before asking NVML anything, so
// no NVML return code is involved: NVML's answer there differs between
// drivers (nvml.h documents NOT_SUPPORTED for GetGpuInstances with MIG
// off; driver 580.159.04 answers SUCCESS with no instances).
type MIGModeError struct {
	Current capability.MIGMode // the mode now
	Pending capability.MIGMode // the mode after the next GPU reset
}

func (e *MIGModeError) Error() string {
	s := "nvmlhal: MIG mode is " + e.Current.String()
	if e.Pending != e.Current {
		s += " (" + e.Pending.String() + " after a GPU reset)"
	}
	return s
}

// kindError is an error with a sentinel Kind and no NVML cause, for
// failures this package detects itself (an unknown GPU index, a placement
// the GPU does not publish).
func kindError(op string, gpu int, kind, cause error) error {
	return &realize.HardwareError{Op: op, GPU: gpu, Kind: kind, Cause: cause}
}

// ArgumentError reports a request this package refuses before calling NVML.
type ArgumentError struct {
	Field  string // the argument, e.g. "profile"
	Reason string
}

func (e *ArgumentError) Error() string { return "nvmlhal: " + e.Field + ": " + e.Reason }

// placementError explains an unpublished placement.
func placementError(profile capability.GIProfileIndex, at capability.Placement) error {
	return &ArgumentError{Field: "placement", Reason: "profile index " + strconv.Itoa(int(profile)) + " has no placement " + at.String()}
}
