package capability

import "context"

// HardwareView is the read-only view of a node's GPUs that [Discover] needs.
// fakehal and nvmlhal implement it. Implementations must be safe for
// concurrent use and must not mutate hardware.
type HardwareView interface {
	// Devices lists the node's physical GPUs in NVML index order.
	Devices(ctx context.Context) ([]DeviceInfo, error)
	// GIProfiles lists every GPU instance profile the GPU at index supports,
	// with its possible placements. Profiles NVML reports as not supported
	// are left out.
	GIProfiles(ctx context.Context, index int) ([]GIProfileInfo, error)
}

// DeviceInfo describes one physical GPU as the hardware reports it.
type DeviceInfo struct {
	Index    int     // NVML device index
	UUID     string  // "GPU-..."
	Name     string  // NVML device name, e.g. "NVIDIA H100 80GB HBM3"
	MemoryMB uint64  // total memory in MiB
	NUMA     int     // NUMA node, 0 when unknown
	MIGMode  MIGMode // current MIG mode
	// PendingMIGMode is the mode that takes effect after a GPU reset; equal
	// to MIGMode when nothing is pending.
	PendingMIGMode MIGMode
}

// GIProfileInfo is NVML's GpuInstanceProfileInfo for one profile index,
// plus its possible placements.
type GIProfileInfo struct {
	Index GIProfileIndex // the profile index queried
	ID    uint32         // NVML's profile Id; opaque
	// Name is the canonical name from NVML's V3 profile info without the
	// "MIG " prefix, or "" when the driver does not report one (then
	// [DeriveProfileName] applies).
	Name                string
	SliceCount          uint32
	InstanceCount       uint32
	MultiprocessorCount uint32
	MemoryMB            uint64
	Placements          []Placement
}
