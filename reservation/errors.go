package reservation

import (
	"errors"
	"strconv"
	"strings"
)

// Decoding sentinels. Every [*DecodeError] matches [ErrMalformed] and
// exactly one of the kind sentinels below with errors.Is.
var (
	// ErrMalformed is matched by every error [Decode] returns.
	ErrMalformed = errors.New("reservation: malformed annotation")

	// ErrSyntax: the value is not valid JSON (bad token, unterminated
	// string, bad escape, raw control character, invalid UTF-8, leading
	// zero, nesting too deep).
	ErrSyntax = errors.New("reservation: JSON syntax error")
	// ErrTrailingData: valid JSON followed by anything but white space.
	ErrTrailingData = errors.New("reservation: trailing data after the array")
	// ErrType: a JSON value of the wrong type, including null, where the
	// format requires an array, object, number or string.
	ErrType = errors.New("reservation: wrong JSON type")
	// ErrRange: a number that is negative, fractional, has an exponent, or
	// does not fit the field (indexes: 0..2147483647; placement and
	// instance IDs: unsigned 32-bit).
	ErrRange = errors.New("reservation: number out of range")
	// ErrDuplicateKey: the same key twice in one object.
	ErrDuplicateKey = errors.New("reservation: duplicate key")
	// ErrUnknownKey: a key the format does not define (tolerated with
	// [DecodeOptions.AllowUnknownKeys] unless it differs from a known key
	// only in letter case).
	ErrUnknownKey = errors.New("reservation: unknown key")
	// ErrMissingField: a scheduler-written key (containerIndex,
	// deviceIndex, gpuUUID, profile, placement, placement.start,
	// placement.size) is absent.
	ErrMissingField = errors.New("reservation: missing field")
)

// DecodeError reports why an annotation value could not be decoded and
// where. It matches [ErrMalformed] and its Kind with errors.Is.
type DecodeError struct {
	// Index is the array entry the error is in, or -1 for the top level.
	Index int
	// Field is the JSON key path inside the entry, such as "profile" or
	// "placement.size"; empty when the problem is not inside a field.
	Field string
	// Offset is the byte offset in the input where the problem was found.
	Offset int
	// Kind is one of the kind sentinels, such as [ErrType].
	Kind error
	// Reason describes the problem.
	Reason string
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("reservation: malformed annotation")
	if e.Index >= 0 {
		b.WriteString(": entry ")
		b.WriteString(strconv.Itoa(e.Index))
	}
	if e.Field != "" {
		b.WriteString(" field ")
		b.WriteString(strconv.Quote(e.Field))
	}
	b.WriteString(" at offset ")
	b.WriteString(strconv.Itoa(e.Offset))
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns [ErrMalformed] and Kind.
func (e *DecodeError) Unwrap() []error {
	if e.Kind == nil {
		return []error{ErrMalformed}
	}
	return []error{ErrMalformed, e.Kind}
}

// Validation sentinels. Every [*ValidationError] matches [ErrInvalid] and
// its Problem with errors.Is.
var (
	// ErrInvalid is matched by every [*ValidationError].
	ErrInvalid = errors.New("reservation: invalid allocation")

	// ErrNegativeIndex: containerIndex or deviceIndex below zero.
	ErrNegativeIndex = errors.New("reservation: negative index")
	// ErrGPUUUID: gpuUUID empty or not of the form "GPU-...".
	ErrGPUUUID = errors.New("reservation: malformed GPU UUID")
	// ErrProfile: profile empty or not a canonical profile name (the
	// capability.ProfileNameError is the ValidationError's Cause).
	ErrProfile = errors.New("reservation: malformed profile")
	// ErrPlacement: placement size 0, or an interval that overflows or
	// ends beyond capability.MaxSlots.
	ErrPlacement = errors.New("reservation: invalid placement")
	// ErrDuplicateEntry: two entries share (containerIndex, deviceIndex).
	ErrDuplicateEntry = errors.New("reservation: duplicate entry")
	// ErrPartialRuntime: one or two of migUUID, gpuInstanceID,
	// computeInstanceID present.
	ErrPartialRuntime = errors.New("reservation: partial runtime identity")
	// ErrMIGUUID: migUUID not of the form "MIG-xxxxxxxx-xxxx-xxxx-xxxx-
	// xxxxxxxxxxxx" (lower-case hex). The legacy "MIG-GPU-<uuid>/<gi>/<ci>"
	// form also matches [ErrLegacyIdentifier].
	ErrMIGUUID = errors.New("reservation: malformed MIG UUID")
	// ErrOverlap: two entries claim overlapping placements on one GPU.
	ErrOverlap = errors.New("reservation: overlapping placements")
	// ErrRuntimeConflict: two entries claim the same MIG UUID, or the same
	// GPU instance ID on one GPU.
	ErrRuntimeConflict = errors.New("reservation: conflicting runtime identity")

	// ErrUnknownGPU: the GPU UUID is not one of the node's GPUs.
	ErrUnknownGPU = errors.New("reservation: unknown GPU")
	// ErrUnknownProfile: the GPU does not publish the profile.
	ErrUnknownProfile = errors.New("reservation: unknown profile")
	// ErrUnpublishedPlacement: the GPU never published the placement for
	// the profile.
	ErrUnpublishedPlacement = errors.New("reservation: unpublished placement")
)

// ErrLegacyIdentifier is matched by errors about v2.9 identifiers: device
// identifiers "GPU-<uuid>[<geometry>-<slot>]" and legacy MIG UUIDs
// "MIG-GPU-<uuid>/<gi>/<ci>". Neither proves a physical placement and a
// complete runtime identity, so such devices are never adopted.
var ErrLegacyIdentifier = errors.New("reservation: legacy identifier, not adoptable")

// ValidationError reports one problem with one allocation entry. It matches
// [ErrInvalid], Problem and Cause (when set) with errors.Is and errors.As.
type ValidationError struct {
	// Index is the offending entry's position in the slice.
	Index int
	// Other is the position of the entry it conflicts with (duplicates,
	// overlaps), or -1.
	Other int
	// Field is the wire key of the offending field, such as "placement".
	Field string
	// Problem is one of the validation sentinels, such as [ErrOverlap].
	Problem error
	// Detail describes the problem.
	Detail string
	// Cause is an underlying error, such as capability's profile name
	// error or [ErrLegacyIdentifier], or nil.
	Cause error
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("reservation: invalid allocation: entry ")
	b.WriteString(strconv.Itoa(e.Index))
	if e.Field != "" {
		b.WriteString(" field ")
		b.WriteString(strconv.Quote(e.Field))
	}
	b.WriteString(": ")
	if e.Problem != nil {
		b.WriteString(strings.TrimPrefix(e.Problem.Error(), "reservation: "))
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Other >= 0 {
		b.WriteString(" (conflicts with entry ")
		b.WriteString(strconv.Itoa(e.Other))
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns [ErrInvalid], Problem and Cause.
func (e *ValidationError) Unwrap() []error {
	errs := []error{ErrInvalid}
	if e.Problem != nil {
		errs = append(errs, e.Problem)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}
