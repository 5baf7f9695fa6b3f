package realize

import (
	"strconv"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// Key identifies one managed MIG instance on a node: the physical GPU's NVML
// index, the reserved profile name and the reserved placement. Two
// reservations with the same Key name the same hardware instance.
//
// The zero value is GPU 0 with an empty profile and an invalid placement; it
// never names a managed instance. Key is comparable and can be a map key.
type Key struct {
	GPU       int                  // NVML device index
	Profile   string               // profile name as reserved, e.g. "2g.10gb"
	Placement capability.Placement // reserved slot interval [Start, Start+Size)
}

// String formats k as "gpu<index>/<profile>@[start,end)", for example
// "gpu0/2g.10gb@[2,4)".
func (k Key) String() string {
	return "gpu" + strconv.Itoa(k.GPU) + "/" + k.Profile + "@" + k.Placement.String()
}

// Owner is the reservation a managed instance belongs to: one device of one
// container of one pod (annotation protocol), or one device of one request
// of one ResourceClaim (DRA, see [Demand]). The zero value is an owner with
// an empty UID, which the manager never accepts. Owner is comparable.
type Owner struct {
	// PodUID is the holder's UID: a pod's, or a ResourceClaim's.
	PodUID string
	// ContainerIndex is the pod's container index, or the claim's request
	// index.
	ContainerIndex int
	// DeviceIndex is the device's index within the container's or the
	// request's devices.
	DeviceIndex int
}

// String formats o as "<podUID>/c<container>/d<device>".
func (o Owner) String() string {
	return o.PodUID + "/c" + strconv.Itoa(o.ContainerIndex) + "/d" + strconv.Itoa(o.DeviceIndex)
}

// ownerOf returns the owner of entry a of the pod with the given UID.
func ownerOf(podUID string, a reservation.Allocation) Owner {
	return Owner{PodUID: podUID, ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex}
}

// Origin says how an instance came under the manager's control. The zero
// value is unknown and never reported by the manager.
type Origin uint8

const (
	// OriginCreated: this manager created the instance.
	OriginCreated Origin = iota + 1
	// OriginAdopted: the instance existed on the hardware and was verified
	// against a reservation's complete runtime identity (at startup, or on
	// Allocate after a restart).
	OriginAdopted
	// OriginManaged: returned by an Allocate that found the instance
	// already managed for the same owner (a repeated Allocate).
	OriginManaged
)

// String returns "created", "adopted", "managed" or "unknown".
func (o Origin) String() string {
	switch o {
	case OriginCreated:
		return "created"
	case OriginAdopted:
		return "adopted"
	case OriginManaged:
		return "managed"
	}
	return "unknown"
}

// ManagedInstance is the manager's record of one instance it controls.
type ManagedInstance struct {
	Key     Key
	Owner   Owner
	GPUUUID string                    // physical GPU UUID, "GPU-..."
	GIIndex capability.GIProfileIndex // NVML GPU instance profile index
	Runtime reservation.RuntimeIdentity
	Origin  Origin // OriginCreated or OriginAdopted
}
