package reservation

import (
	"errors"
	"strconv"
)

// Sentinels for runtime identity updates; every [*RuntimeError] matches
// one of them.
var (
	// ErrNoEntry: no entry has the given (containerIndex, deviceIndex).
	ErrNoEntry = errors.New("reservation: no such allocation entry")
	// ErrSchedulerField: the update would change a scheduler-written field
	// (containerIndex, deviceIndex, gpuUUID, profile, placement).
	ErrSchedulerField = errors.New("reservation: scheduler-written field would change")
	// ErrRuntimeMismatch: the entry already holds a different runtime
	// identity; it is never overwritten.
	ErrRuntimeMismatch = errors.New("reservation: entry already has a different runtime identity")
	// ErrBadIdentity: the identity to write is itself malformed, or would
	// collide with another entry of the pod.
	ErrBadIdentity = errors.New("reservation: malformed runtime identity")
	// ErrBadRecord: the stored annotation value does not decode or
	// validate; Cause says why.
	ErrBadRecord = errors.New("reservation: stored record is malformed")
)

// RuntimeError reports a refused runtime identity update. It matches Kind
// and Cause (when set) with errors.Is and errors.As.
type RuntimeError struct {
	ContainerIndex, DeviceIndex int
	Field                       string // the field concerned, or ""
	Kind                        error  // one of the runtime update sentinels, such as ErrNoEntry

	Cause error // e.g. a decode or validation error, or nil
}

func (e *RuntimeError) Error() string {
	msg := "reservation: runtime identity for container " + strconv.Itoa(e.ContainerIndex) +
		" device " + strconv.Itoa(e.DeviceIndex)
	if e.Field != "" {
		msg += " field " + strconv.Quote(e.Field)
	}
	msg += ": " + e.Kind.Error()
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns Kind and Cause.
func (e *RuntimeError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// String returns "MIG-... gi=N ci=M".
func (id RuntimeIdentity) String() string {
	return id.MIGUUID + " gi=" + strconv.FormatUint(uint64(id.GPUInstanceID), 10) +
		" ci=" + strconv.FormatUint(uint64(id.ComputeInstanceID), 10)
}

// String returns "<id>" when present and "absent" otherwise.
func (o OptionalID) String() string {
	if !o.Valid {
		return "absent"
	}
	return strconv.FormatUint(uint64(o.ID), 10)
}

// String returns a short description such as
// "container 0 device 1: 2g.10gb [2,4) on GPU-... as MIG-... gi=4 ci=0";
// the runtime part is left out when the identity is not complete.
func (a Allocation) String() string {
	s := "container " + strconv.Itoa(a.ContainerIndex) + " device " + strconv.Itoa(a.DeviceIndex) + ": " +
		a.Profile + " " + a.Placement.String() + " on " + a.GPUUUID
	if id, ok := a.Runtime(); ok {
		s += " as " + id.String()
	}
	return s
}

// WithRuntime returns a with the runtime identity id set.
func (a Allocation) WithRuntime(id RuntimeIdentity) Allocation {
	a.MIGUUID = id.MIGUUID
	a.GPUInstanceID = SomeID(id.GPUInstanceID)
	a.ComputeInstanceID = SomeID(id.ComputeInstanceID)
	return a
}

// Scheduled returns a without its runtime identity: the fields the
// scheduler writes.
func (a Allocation) Scheduled() Allocation {
	a.MIGUUID = ""
	a.GPUInstanceID = OptionalID{}
	a.ComputeInstanceID = OptionalID{}
	return a
}

// SameScheduled reports whether the records have and want (annotation
// values) both decode and hold the same entries, runtime identities aside:
// whether have is want as the scheduler wrote it, perhaps realized since.
func SameScheduled(have, want string) bool {
	h, err := DecodeString(have)
	if err != nil {
		return false
	}
	w, err := DecodeString(want)
	if err != nil || len(h) != len(w) {
		return false
	}
	for i := range h {
		if h[i].Scheduled() != w[i].Scheduled() {
			return false
		}
	}
	return true
}

// ApplyRuntime sets the runtime identity of the entry (containerIndex,
// deviceIndex) in allocs, in place. It reports whether anything changed:
// setting the identity an entry already holds is a no-op. It refuses, with
// a [*RuntimeError], a malformed identity, a missing entry, and an entry
// that already holds a different or partial identity.
func ApplyRuntime(allocs []Allocation, containerIndex, deviceIndex int, id RuntimeIdentity) (changed bool, err error) {
	fail := func(field string, kind, cause error) (bool, error) {
		return false, &RuntimeError{ContainerIndex: containerIndex, DeviceIndex: deviceIndex, Field: field, Kind: kind, Cause: cause}
	}
	if !IsMIGUUID(id.MIGUUID) {
		return fail("migUUID", ErrBadIdentity, nil)
	}
	i := indexOf(allocs, containerIndex, deviceIndex)
	if i < 0 {
		return fail("", ErrNoEntry, nil)
	}
	a := &allocs[i]
	if cur, ok := a.Runtime(); ok {
		if cur == id {
			return false, nil
		}
		return fail(runtimeDiff(cur, id), ErrRuntimeMismatch, nil)
	}
	if a.MIGUUID != "" || a.GPUInstanceID.Valid || a.ComputeInstanceID.Valid {
		return fail(missingRuntimeField(a), ErrRuntimeMismatch, ErrPartialRuntime)
	}
	*a = a.WithRuntime(id)
	return true, nil
}

func indexOf(allocs []Allocation, containerIndex, deviceIndex int) int {
	for i := range allocs {
		if allocs[i].ContainerIndex == containerIndex && allocs[i].DeviceIndex == deviceIndex {
			return i
		}
	}
	return -1
}

func runtimeDiff(a, b RuntimeIdentity) string {
	switch {
	case a.MIGUUID != b.MIGUUID:
		return "migUUID"
	case a.GPUInstanceID != b.GPUInstanceID:
		return "gpuInstanceID"
	}
	return "computeInstanceID"
}

// PatchOptions tunes [SetRuntime]. The zero value builds an unconditional
// patch.
type PatchOptions struct {
	// ResourceVersion, when set, is carried as metadata.resourceVersion so
	// that the API server applies the patch only to that version of the pod
	// (optimistic concurrency); a conflict then means: re-read and retry.
	ResourceVersion string
}

// RuntimePatch is the result of [SetRuntime].
type RuntimePatch struct {
	// Value is the new annotation value.
	Value string
	// Patch is a JSON merge patch (application/merge-patch+json) setting
	// metadata.annotations[AnnotationKey] to Value.
	Patch []byte
	// Changed is false when the entry already held the identity: Value
	// equals the canonical encoding of the old value and sending Patch is
	// harmless but unnecessary.
	Changed bool
}

// SetRuntime fills the runtime identity id into the entry (containerIndex,
// deviceIndex) of the annotation value and returns the new value with its
// merge patch. The value must decode strictly and validate; the result is
// validated again, so an identity that would collide with another entry of
// the pod is refused. Only the three runtime fields ever change; see
// [SetRuntimeFor] to also assert the scheduler-written fields.
func SetRuntime(value string, containerIndex, deviceIndex int, id RuntimeIdentity, opts PatchOptions) (RuntimePatch, error) {
	allocs, err := DecodeString(value)
	if err != nil {
		return RuntimePatch{}, &RuntimeError{ContainerIndex: containerIndex, DeviceIndex: deviceIndex, Kind: ErrBadRecord, Cause: err}
	}
	return setRuntime(allocs, containerIndex, deviceIndex, id, opts)
}

// SetRuntimeFor is [SetRuntime] for the realized allocation want, which
// must carry a complete runtime identity. It refuses with
// [ErrSchedulerField] when the stored entry's scheduler-written fields
// differ from want's: the record changed since the device was realized.
func SetRuntimeFor(value string, want Allocation, opts PatchOptions) (RuntimePatch, error) {
	id, ok := want.Runtime()
	if !ok {
		return RuntimePatch{}, &RuntimeError{ContainerIndex: want.ContainerIndex, DeviceIndex: want.DeviceIndex,
			Field: missingRuntimeField(&want), Kind: ErrBadIdentity, Cause: ErrPartialRuntime}
	}
	allocs, err := DecodeString(value)
	if err != nil {
		return RuntimePatch{}, &RuntimeError{ContainerIndex: want.ContainerIndex, DeviceIndex: want.DeviceIndex, Kind: ErrBadRecord, Cause: err}
	}
	if i := indexOf(allocs, want.ContainerIndex, want.DeviceIndex); i >= 0 {
		if field := schedulerDiff(allocs[i], want); field != "" {
			return RuntimePatch{}, &RuntimeError{ContainerIndex: want.ContainerIndex, DeviceIndex: want.DeviceIndex,
				Field: field, Kind: ErrSchedulerField}
		}
	}
	return setRuntime(allocs, want.ContainerIndex, want.DeviceIndex, id, opts)
}

func schedulerDiff(have, want Allocation) string {
	switch {
	case have.GPUUUID != want.GPUUUID:
		return "gpuUUID"
	case have.Profile != want.Profile:
		return "profile"
	case have.Placement != want.Placement:
		return "placement"
	}
	return ""
}

func setRuntime(allocs []Allocation, containerIndex, deviceIndex int, id RuntimeIdentity, opts PatchOptions) (RuntimePatch, error) {
	if err := Validate(allocs); err != nil {
		return RuntimePatch{}, &RuntimeError{ContainerIndex: containerIndex, DeviceIndex: deviceIndex, Kind: ErrBadRecord, Cause: err}
	}
	changed, err := ApplyRuntime(allocs, containerIndex, deviceIndex, id)
	if err != nil {
		return RuntimePatch{}, err
	}
	if err := Validate(allocs); err != nil {
		return RuntimePatch{}, &RuntimeError{ContainerIndex: containerIndex, DeviceIndex: deviceIndex,
			Field: "migUUID", Kind: ErrBadIdentity, Cause: err}
	}
	value := EncodeString(allocs)
	return RuntimePatch{Value: value, Patch: AnnotationPatch(value, opts), Changed: changed}, nil
}

// AnnotationPatch returns the JSON merge patch body that sets the pod's
// [AnnotationKey] annotation to value:
//
//	{"metadata":{"annotations":{"hami.io/vgpu-mig-allocations":"..."}}}
//
// with "resourceVersion" added to metadata when opts carries one.
func AnnotationPatch(value string, opts PatchOptions) []byte {
	b := make([]byte, 0, len(value)+len(value)/8+96)
	b = append(b, `{"metadata":{`...)
	if opts.ResourceVersion != "" {
		b = append(b, `"resourceVersion":`...)
		b = appendJSONString(b, opts.ResourceVersion)
		b = append(b, ',')
	}
	b = append(b, `"annotations":{`...)
	b = appendJSONString(b, AnnotationKey)
	b = append(b, ':')
	b = appendJSONString(b, value)
	return append(b, "}}}"...)
}
