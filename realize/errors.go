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
	msg := "realize: " + e.Op
	if e.GPU >= 0 {
		msg += fmt.Sprintf(" on GPU %d", e.GPU)
	}
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

// Manager sentinels. Errors from [Manager] match them with errors.Is; the
// typed errors below carry the detail.
var (
	// ErrConflict: a reservation claims an instance that belongs to
	// another owner, names a runtime identity that is not the instance at
	// its key, or overlaps another active pod's reservation. Nothing is
	// created or destroyed.
	ErrConflict = errors.New("realize: reservation conflict")
	// ErrNoReservation: the pod has no reservation entry for the container.
	ErrNoReservation = errors.New("realize: no reservation for container")
	// ErrInactivePod: the pod is deleting or has terminated; nothing is
	// realized for it.
	ErrInactivePod = errors.New("realize: pod is not active")
	// ErrHardwareMismatch: the hardware returned or lists an instance that
	// does not match what was requested or recorded.
	ErrHardwareMismatch = errors.New("realize: hardware state does not match")
)

// ConflictError details an [ErrConflict]: who asked, for what, and who or
// what holds it.
type ConflictError struct {
	Key    Key    // the key the reservation names
	Owner  Owner  // the reservation that was refused
	Holder Owner  // the current owner, zero when Reason is not about ownership
	Reason string // what conflicts
	// Cause is reservation's account of the conflict (matching
	// reservation.ErrConflict), or nil.
	Cause error
}

func (e *ConflictError) Error() string {
	msg := "realize: reservation conflict: " + e.Owner.String() + " claims " + e.Key.String() + ": " + e.Reason
	if e.Holder.PodUID != "" {
		msg += " (held by " + e.Holder.String() + ")"
	}
	return msg
}

// Unwrap returns [ErrConflict] and Cause.
func (e *ConflictError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrConflict}
	}
	return []error{ErrConflict, e.Cause}
}

// EntryError reports why one reservation entry of an Allocate could not be
// realized. It names the entry by its position in the annotation array and
// its (containerIndex, deviceIndex), and matches Err with errors.Is and
// errors.As (Err is a sentinel of this package or of reservation, a
// [*ConflictError], a [*HardwareError] or a context error).
type EntryError struct {
	PodUID string
	Index  int // position of the entry in the annotation array
	Owner  Owner
	Key    Key // as far as it was resolved
	Err    error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("realize: pod %s entry %d (container %d, device %d) %s: %v",
		e.PodUID, e.Index, e.Owner.ContainerIndex, e.Owner.DeviceIndex, e.Key, e.Err)
}

// Unwrap returns Err.
func (e *EntryError) Unwrap() error { return e.Err }

// ReleaseError reports a failed destroy of a managed or leaked instance.
// It matches Err (usually a [*HardwareError]) with errors.Is and errors.As.
type ReleaseError struct {
	Key   Key
	Owner Owner // zero for an unmanaged instance
	GIID  uint32
	Err   error
}

func (e *ReleaseError) Error() string {
	return fmt.Sprintf("realize: release %s (GI %d) of %s: %v", e.Key, e.GIID, e.Owner, e.Err)
}

// Unwrap returns Err.
func (e *ReleaseError) Unwrap() error { return e.Err }

// ErrInvalidRequest: an Allocate request without a pod UID or with a
// negative container index.
var ErrInvalidRequest = errors.New("realize: invalid request")
