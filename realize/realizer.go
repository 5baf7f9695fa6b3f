package realize

import (
	"context"

	"github.com/dynmig/dynmig/capability"
)

// Realizer is the smallest hardware interface the [Manager] needs for one
// node. Backends (fakehal, nvmlhal) implement it; every call takes ctx and
// must be safe for concurrent use. Errors are [*HardwareError] values that
// match the package sentinels with errors.Is.
//
// GPUs are addressed by NVML device index. Placements are half-open slot
// intervals [Start, Start+Size) on the GPU's grid.
type Realizer interface {
	capability.HardwareView

	// Instances lists every live GPU instance on the GPU, including GPU
	// instances without a compute instance, with their compute instances.
	// On a GPU whose MIG mode is off it fails with ErrMIGDisabled, as NVML's
	// GetGpuInstances does (NOT_SUPPORTED); callers check the mode first.
	Instances(ctx context.Context, gpu int) ([]Instance, error)

	// CreateInstance creates a GPU instance of profile at exactly the given
	// placement and one compute instance spanning it (shared engines). If
	// the compute instance cannot be created the backend destroys the GPU
	// instance it just created before returning the error. An occupied or
	// overlapping range is ErrOccupied, an unpublished placement
	// ErrInvalidPlacement, MIG disabled ErrMIGDisabled.
	CreateInstance(ctx context.Context, gpu int, profile capability.GIProfileIndex, at capability.Placement) (Instance, error)

	// DestroyComputeInstance destroys exactly compute instance ci of GPU
	// instance gi. Processes on it are ErrInUse; a missing one ErrNotFound.
	DestroyComputeInstance(ctx context.Context, gpu int, gi, ci uint32) error

	// DestroyGPUInstance destroys exactly GPU instance gi. Live compute
	// instances or processes are ErrInUse; a missing one ErrNotFound.
	DestroyGPUInstance(ctx context.Context, gpu int, gi uint32) error

	// Processes reports the compute processes on the GPU and on each of its
	// MIG devices.
	Processes(ctx context.Context, gpu int) (ProcessReport, error)
}

// MIGModeSetter is implemented by backends that can enable MIG mode. The
// manager calls it only when its options ask for it, and only on an idle
// GPU. A change that needs a GPU reset is reported as ErrResetRequired.
type MIGModeSetter interface {
	EnableMIG(ctx context.Context, gpu int) error
}

// Instance is one live GPU instance and its compute instances.
type Instance struct {
	GPU       int                       // NVML device index
	Profile   capability.GIProfileIndex // GPU instance profile index
	Placement capability.Placement      // the GI's slot interval
	GIID      uint32                    // GPU instance ID (driver-assigned)
	// ComputeInstances are the GI's compute instances; empty for a GI
	// without a CI, exactly one for an instance the manager created.
	ComputeInstances []ComputeInstance
}

// ComputeInstance is one compute instance inside a GPU instance.
type ComputeInstance struct {
	ID         uint32                    // CI ID, unique within the GI
	Profile    capability.CIProfileIndex // CI profile index
	SliceCount uint32                    // compute slices the CI spans
	MIGUUID    string                    // the MIG device UUID, "MIG-..."
}

// ProcessReport counts compute processes on one GPU.
type ProcessReport struct {
	// Total counts every compute process on the GPU, in MIG devices or not.
	Total int
	// ByGPUInstance counts processes per GPU instance ID; nil when none.
	ByGPUInstance map[uint32]int
}

// Busy reports whether any process runs on the GPU.
func (r ProcessReport) Busy() bool { return r.Total > 0 }
