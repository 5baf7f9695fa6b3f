package reservation

import (
	"time"

	"github.com/dynmig/dynmig/capability"
)

// AnnotationKey is the pod annotation holding the allocation array.
const AnnotationKey = "hami.io/vgpu-mig-allocations"

// OptionalID is a GPU or compute instance ID that may be absent. On the
// wire, presence rather than value marks it, because 0 is a valid ID. The
// zero value is absent. OptionalID is comparable.
type OptionalID struct {
	ID    uint32
	Valid bool // the ID is present
}

// SomeID returns a present ID.
func SomeID(id uint32) OptionalID { return OptionalID{ID: id, Valid: true} }

// Allocation is one entry of the hami.io/vgpu-mig-allocations array: one
// MIG device reserved for one container. The scheduler writes the first five
// fields; the device plugin later fills the runtime identity (MIGUUID,
// GPUInstanceID, ComputeInstanceID), all three together or none.
//
// The zero value is an entry that fails validation (empty gpuUUID).
// Allocation is comparable.
type Allocation struct {
	ContainerIndex    int                  // index into init containers then regular containers
	DeviceIndex       int                  // index of the device within the container's request
	GPUUUID           string               // physical GPU UUID, "GPU-..."
	Profile           string               // profile name as published in migProfiles
	Placement         capability.Placement // reserved slot interval [start, start+size)
	MIGUUID           string               // "MIG-...", empty until realized
	GPUInstanceID     OptionalID           // absent until realized
	ComputeInstanceID OptionalID           // absent until realized
}

// RuntimeIdentity is the identity of a realized MIG device.
type RuntimeIdentity struct {
	MIGUUID           string
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}

// Runtime returns the entry's runtime identity and true when all three
// runtime fields are present.
func (a Allocation) Runtime() (RuntimeIdentity, bool) {
	if a.MIGUUID == "" || !a.GPUInstanceID.Valid || !a.ComputeInstanceID.Valid {
		return RuntimeIdentity{}, false
	}
	return RuntimeIdentity{a.MIGUUID, a.GPUInstanceID.ID, a.ComputeInstanceID.ID}, true
}

// PodPhase mirrors corev1.PodPhase without importing Kubernetes.
type PodPhase string

// Pod phases, as in corev1.
const (
	PodPending   PodPhase = "Pending"
	PodRunning   PodPhase = "Running"
	PodSucceeded PodPhase = "Succeeded"
	PodFailed    PodPhase = "Failed"
	PodUnknown   PodPhase = "Unknown"
)

// Pod is the small view of a Kubernetes pod that reservation needs. The
// kube package converts corev1.Pod into it. Every field but Annotations,
// RecordSeen and RecordScheduled is set by the API server or the kubelet;
// RecordSeen and RecordScheduled are the observer's own. Annotations are
// writable by whoever may update the pod and are trusted only as far as
// [ValidateRequests] allows.
//
// The zero value is a pending pod without UID, reservation or device
// request.
type Pod struct {
	UID         string
	Namespace   string
	Name        string
	Phase       PodPhase
	Deleting    bool              // metadata.deletionTimestamp is set
	Annotations map[string]string // at least AnnotationKey when present

	// Created is metadata.creationTimestamp; zero when unknown.
	Created time.Time
	// DeletionDeadline is metadata.deletionTimestamp: the moment the
	// pod's grace period ends. Zero when the pod is not deleting, or when
	// the deadline is unknown.
	DeletionDeadline time.Time
	// ContainersTerminated is true when every container of the pod (init
	// and regular) has a status and every status is terminated.
	ContainersTerminated bool
	// DeviceRequests holds, per containerIndex (init containers first,
	// then regular containers), the number of MIG devices the container
	// requests of the device plugin's resource (its limit). Nil means the
	// pod requests none; see [ValidateRequests].
	DeviceRequests []int
	// RecordSeen is when the observer that lists the pods (a device
	// plugin's pod cache) first saw the pod with its current reservation
	// claim: the record's scheduled fields, whatever runtime identities
	// were added since. It is the observer's own clock, never a value the
	// pod's creator can write. Zero means unknown: the observer keeps no
	// such history. [Desired] lets the earlier of two overlapping records
	// win when both times are known and differ.
	RecordSeen time.Time
	// RecordScheduled reports that the pod's current claim arrived on the
	// node with the binding of a scheduler whose extender writes records
	// (the observer is told which: any scheduler's binding sets the
	// condition, and other schedulers keep whatever record the pod's
	// creator wrote): the observer's first sight of the pod already
	// carried the claim and the PodScheduled=True condition,
	// which the API server sets when it binds a pod and which the pod's
	// creator cannot write (a pod created with spec.nodeName preset has
	// its status cleared on create, and only the kubelet writes it, after
	// admission). A claim that changed since the observer first saw the
	// pod is not scheduled. False means not, or unknown. Of two
	// overlapping records [Desired] keeps the one scheduled so when the
	// other is not, unless the other is RecordStarted.
	RecordScheduled bool
	// RecordStarted reports that the observer first saw the pod, with its
	// current claim, only after the kubelet had admitted it (its status,
	// which only the kubelet writes, shows it Running or a container
	// created): as after a restart that lost the observer's node-local
	// record. A device may then have been handed to its containers at that
	// claim by an earlier observer, whatever whoever bound the pod, so
	// another record's arrival with a binding does not outrank it
	// ([Desired]). False means not, or unknown.
	RecordStarted bool
}

// Snapshot is a listing of the pods assigned to one node. Complete is false
// when the listing failed, was partial, or the cache was not yet synced; an
// incomplete snapshot never authorises destructive reconciliation.
//
// Now is when the listing was taken, the time [Pod.Released] compares
// deletion deadlines with. The zero Now is unknown: a deleting pod is then
// held until its containers are terminated or it leaves the listing.
type Snapshot struct {
	Pods     []Pod
	Complete bool
	Now      time.Time
}
