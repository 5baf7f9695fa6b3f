package fakehal

import (
	"errors"
	"strconv"

	"github.com/dynmig/dynmig/realize"
)

// ErrCrashed is the cause of an error returned by a call that a
// [Fault] with Crash set cut off: the hardware performed the operation, but
// the caller "died" before it could learn the result. It is wrapped in a
// [*realize.HardwareError] whose Kind is nil.
var ErrCrashed = errors.New("fakehal: caller crashed after the hardware acted")

// ErrUnknownModel is returned by [New] for a GPU model name that matches
// neither [Options.Models] nor a built-in model.
var ErrUnknownModel = errors.New("fakehal: unknown GPU model")

// ErrInvalidModel is returned by [New] for a custom model whose profile
// table could not describe real hardware.
var ErrInvalidModel = errors.New("fakehal: invalid GPU model")

// Return mimics an NVML return code (nvml.Return in go-nvml). It is the
// Cause of every [*realize.HardwareError] the fake returns for a hardware
// refusal, so tests can check both the sentinel (errors.Is with a realize
// sentinel) and the exact code (errors.Is with a Return constant). Values
// and strings equal go-nvml's.
type Return int32

// NVML return codes the fake uses (values as in go-nvml v0.13.4-1).
const (
	ReturnSuccess               Return = 0
	ReturnInvalidArgument       Return = 2
	ReturnNotSupported          Return = 3
	ReturnNotFound              Return = 6
	ReturnGPUIsLost             Return = 15
	ReturnResetRequired         Return = 16
	ReturnInUse                 Return = 19
	ReturnInsufficientResources Return = 23
	ReturnUnknown               Return = 999
)

// Error returns the code's go-nvml name, e.g. "ERROR_IN_USE".
func (r Return) Error() string {
	switch r {
	case ReturnSuccess:
		return "SUCCESS"
	case ReturnInvalidArgument:
		return "ERROR_INVALID_ARGUMENT"
	case ReturnNotSupported:
		return "ERROR_NOT_SUPPORTED"
	case ReturnNotFound:
		return "ERROR_NOT_FOUND"
	case ReturnGPUIsLost:
		return "ERROR_GPU_IS_LOST"
	case ReturnResetRequired:
		return "ERROR_RESET_REQUIRED"
	case ReturnInUse:
		return "ERROR_IN_USE"
	case ReturnInsufficientResources:
		return "ERROR_INSUFFICIENT_RESOURCES"
	case ReturnUnknown:
		return "ERROR_UNKNOWN"
	}
	return "Return(" + strconv.Itoa(int(r)) + ")"
}

// String is Error.
func (r Return) String() string { return r.Error() }

// hwErr builds the error a real backend would return for a refused call.
func hwErr(op Op, gpu int, kind error, cause error) error {
	return &realize.HardwareError{Op: string(op), GPU: gpu, Kind: kind, Cause: cause}
}

// sentinelReturns maps each realize sentinel to the NVML code a real driver
// returns for it. ErrMIGDisabled is NOT_SUPPORTED on real hardware.
var sentinelReturns = []struct {
	kind error
	code Return
}{
	{realize.ErrOccupied, ReturnInsufficientResources},
	{realize.ErrInvalidPlacement, ReturnInvalidArgument},
	{realize.ErrInUse, ReturnInUse},
	{realize.ErrNotFound, ReturnNotFound},
	{realize.ErrMIGDisabled, ReturnNotSupported},
	{realize.ErrNotSupported, ReturnNotSupported},
	{realize.ErrResetRequired, ReturnResetRequired},
}

// injectedErr turns the error a [Fault] asks for into what a backend would
// return: a *realize.HardwareError is returned as is; a realize sentinel
// gets its NVML code as cause; a [Return] gets the sentinel it
// unambiguously means; anything else becomes the cause with no Kind.
func injectedErr(op Op, gpu int, err error) error {
	var he *realize.HardwareError
	if errors.As(err, &he) {
		return err
	}
	for _, s := range sentinelReturns {
		if errors.Is(err, s.kind) {
			return hwErr(op, gpu, s.kind, s.code)
		}
	}
	var r Return
	if errors.As(err, &r) {
		return hwErr(op, gpu, kindOfReturn(op, r), err)
	}
	return hwErr(op, gpu, nil, err)
}

// kindOfReturn is the realize sentinel an nvmlhal-like backend would map r
// to for op, or nil.
func kindOfReturn(op Op, r Return) error {
	switch r {
	case ReturnInsufficientResources:
		return realize.ErrOccupied
	case ReturnInUse:
		return realize.ErrInUse
	case ReturnNotFound:
		return realize.ErrNotFound
	case ReturnNotSupported:
		return realize.ErrNotSupported
	case ReturnResetRequired:
		return realize.ErrResetRequired
	case ReturnInvalidArgument:
		if op == OpCreateGI {
			return realize.ErrInvalidPlacement
		}
	}
	return nil
}
