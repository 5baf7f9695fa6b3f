package realize

import (
	"errors"
	"fmt"
)

// Sentinels that backend errors match with errors.Is.
var (
	// ErrOccupied: the placement overlaps a live GPU instance
	// (NVML ERROR_INSUFFICIENT_RESOURCES).
	ErrOccupied = errors.New("realize: placement occupied")
	// ErrInvalidPlacement: the GPU does not publish this placement for the
	// profile (NVML ERROR_INVALID_ARGUMENT on create).
	ErrInvalidPlacement = errors.New("realize: invalid placement")
	// ErrInUse: compute instances or processes prevent a destroy
	// (NVML ERROR_IN_USE).
	ErrInUse = errors.New("realize: in use")
	// ErrNotFound: no such GPU, GPU instance or compute instance
	// (NVML ERROR_NOT_FOUND).
	ErrNotFound = errors.New("realize: not found")
	// ErrMIGDisabled: MIG mode is off on the GPU.
	ErrMIGDisabled = errors.New("realize: MIG mode disabled")
	// ErrNotSupported: the GPU or driver does not support the operation
	// (NVML ERROR_NOT_SUPPORTED).
	ErrNotSupported = errors.New("realize: not supported")
	// ErrResetRequired: a MIG mode change is pending until the GPU is reset.
	ErrResetRequired = errors.New("realize: GPU reset required")
)

// HardwareError is the error a backend returns for a failed hardware call.
// It matches Kind (one of the package sentinels, or nil when the failure
// maps to none) and Cause (the backend's own error, such as an nvml.Return)
// with errors.Is and errors.As.
type HardwareError struct {
	Op    string // backend operation, e.g. "CreateGpuInstanceWithPlacement"
	GPU   int    // NVML device index, -1 when not GPU-specific
	Kind  error  // package sentinel, or nil
	Cause error  // backend cause, or nil
}

func (e *HardwareError) Error() string {
	msg := fmt.Sprintf("realize: %s on GPU %d", e.Op, e.GPU)
	if e.Kind != nil {
		msg += ": " + e.Kind.Error()
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns Kind and Cause.
func (e *HardwareError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}
