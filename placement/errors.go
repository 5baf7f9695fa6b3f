package placement

import (
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
)

// Sentinels callers branch on with errors.Is.
var (
	// ErrInvalidGrid is wrapped by every [*GridError].
	ErrInvalidGrid = errors.New("placement: invalid GPU capability")
	// ErrInvalidRequest is wrapped by every [*RequestError].
	ErrInvalidRequest = errors.New("placement: invalid request")

	// ErrUnschedulable matches every [*UnschedulableError]; the reason
	// sentinels below say why.
	ErrUnschedulable = errors.New("placement: unschedulable")
	// ErrExcluded: the request's GPU UUID or type constraints exclude every
	// GPU of the node.
	ErrExcluded = errors.New("placement: every GPU excluded by constraints")
	// ErrNoProfile: no allowed GPU has a profile large enough for the
	// demand (or the named profile).
	ErrNoProfile = errors.New("placement: no profile large enough")
	// ErrCapacity: not enough free slots for the demand, even if the GPUs
	// were rearranged.
	ErrCapacity = errors.New("placement: not enough free slots")
	// ErrFragmented: enough free slots, but no published placement of a
	// fitting profile is free.
	ErrFragmented = errors.New("placement: free slots but no legal placement")
	// ErrSearchLimit: a multi-device pod was not placed within the search
	// bound ([SelectorOptions.MaxSteps]); a placement may exist.
	ErrSearchLimit = errors.New("placement: search bound reached")

	// ErrConflict is wrapped by every [*ConflictError].
	ErrConflict = errors.New("placement: conflicting reservations")
	// ErrInvalidReservation is wrapped by every [*ReservationError].
	ErrInvalidReservation = errors.New("placement: invalid reservation")
	// ErrUnknownNode: the ledger has no node of that name.
	ErrUnknownNode = errors.New("placement: unknown node")
	// ErrPodExists: the pod already holds reservations in the ledger.
	ErrPodExists = errors.New("placement: pod already has reservations")
)

// GridError reports GPU capability that cannot be compiled into a [Grid].
type GridError struct {
	UUID    string // the GPU, may be empty
	Profile string // the profile, empty when the GPU as a whole is at fault
	Reason  string
}

func (e *GridError) Error() string {
	s := "placement: GPU " + quoteOr(e.UUID, "<no uuid>")
	if e.Profile != "" {
		s += " profile " + e.Profile
	}
	return s + ": " + e.Reason
}

// Unwrap returns [ErrInvalidGrid].
func (e *GridError) Unwrap() error { return ErrInvalidGrid }

// RequestError reports a malformed [Request]: which container (or -1 for a
// pod-level field), which field, and why.
type RequestError struct {
	Container int    // container index, -1 for pod-level fields
	Field     string // e.g. "Devices", "Memory.Percent", "UseUUIDs[2]"
	Reason    string
}

func (e *RequestError) Error() string {
	if e.Container < 0 {
		return fmt.Sprintf("placement: invalid request: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("placement: invalid request: container %d: %s: %s", e.Container, e.Field, e.Reason)
}

// Unwrap returns [ErrInvalidRequest].
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

// UnschedulableError says why a pod does not fit a node. errors.Is matches
// both [ErrUnschedulable] and Reason.
type UnschedulableError struct {
	// Reason is one of ErrExcluded, ErrNoProfile, ErrCapacity,
	// ErrFragmented, ErrSearchLimit.
	Reason error
	// Container and Device identify the first device that cannot be placed
	// on its own; both are -1 when every device fits alone but not all
	// together.
	Container, Device int
	// DemandMiB is that device's largest memory demand over the allowed
	// GPUs (0 for pod-wide reasons or exact-profile requests).
	DemandMiB uint64
	// FreeSlots and NeededSlots are the free slots the device could use and
	// the slots its smallest fitting profile needs (pod totals for
	// pod-wide reasons), on the GPU that came closest.
	FreeSlots, NeededSlots int
	// Unhealthy counts the GPUs the pod's constraints allow that were
	// skipped because they are unhealthy ([Grid.Healthy]); the message
	// names them, so a pending pod says why it is not on them.
	Unhealthy int
}

func (e *UnschedulableError) Error() string {
	who := "pod"
	if e.Container >= 0 {
		who = fmt.Sprintf("container %d device %d", e.Container, e.Device)
	}
	s := fmt.Sprintf("%v: %s", e.Reason, who)
	if e.DemandMiB > 0 {
		s += fmt.Sprintf(" (%d MiB)", e.DemandMiB)
	}
	if e.NeededSlots > 0 {
		slots := "slots"
		if e.FreeSlots == 1 {
			slots = "slot"
		}
		s += fmt.Sprintf(": %d free %s, %d needed", e.FreeSlots, slots, e.NeededSlots)
	}
	switch {
	case e.Unhealthy == 1:
		s += "; 1 GPU unhealthy, no new pods on it"
	case e.Unhealthy > 1:
		s += fmt.Sprintf("; %d GPUs unhealthy, no new pods on them", e.Unhealthy)
	}
	return s
}

// Unwrap returns the reason.
func (e *UnschedulableError) Unwrap() error { return e.Reason }

// Is reports whether target is [ErrUnschedulable].
func (e *UnschedulableError) Is(target error) bool { return target == ErrUnschedulable }

// ReservationError reports a reservation the [Ledger] cannot account
// exactly: an unknown GPU or profile, a placement that is not published, or
// a repeated (container, device) pair.
type ReservationError struct {
	PodUID                    string
	ContainerIndex, DeviceIdx int
	GPUUUID                   string
	Reason                    string
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("placement: pod %s container %d device %d on %s: %s",
		quoteOr(e.PodUID, "<no uid>"), e.ContainerIndex, e.DeviceIdx, quoteOr(e.GPUUUID, "<no gpu>"), e.Reason)
}

// Unwrap returns [ErrInvalidReservation].
func (e *ReservationError) Unwrap() error { return ErrInvalidReservation }

// Conflict is one overlap between reservations of two different pods on
// the same GPU or, when Other is empty, one reservation the node's current
// table no longer describes (see [Ledger.Conflicts]).
type Conflict struct {
	Node    string
	GPUUUID string
	PodUID  string // the pod being added
	Other   string // the pod already holding an overlapping slot; "" for a table mismatch
	// Placement is the added pod's placement; OtherPlacement the other's.
	Placement, OtherPlacement capability.Placement
	// Reason says why the table does not describe the reservation; empty
	// for an overlap.
	Reason string
}

// String describes the conflict.
func (c Conflict) String() string {
	if c.Other == "" {
		return fmt.Sprintf("node %s GPU %s: pod %s %v no longer fits the table: %s",
			c.Node, c.GPUUUID, c.PodUID, c.Placement, c.Reason)
	}
	return fmt.Sprintf("node %s GPU %s: pod %s %v overlaps pod %s %v",
		c.Node, c.GPUUUID, c.PodUID, c.Placement, c.Other, c.OtherPlacement)
}

// ConflictError reports reservations that overlap another pod's. For
// observed pods the ledger still records them (the slots are taken in
// reality, so counting them is the safe side); assumed pods are refused.
type ConflictError struct {
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	if len(e.Conflicts) == 1 {
		return "placement: conflicting reservations: " + e.Conflicts[0].String()
	}
	return fmt.Sprintf("placement: %d conflicting reservations, first: %s", len(e.Conflicts), e.Conflicts[0])
}

// Unwrap returns [ErrConflict].
func (e *ConflictError) Unwrap() error { return ErrConflict }

func quoteOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return fmt.Sprintf("%q", s)
}
