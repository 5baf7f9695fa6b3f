package nvmlhal

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// LockGPU exposes the per-GPU lock to the external tests.
func (b *Backend) LockGPU(ctx context.Context, gpu int) (func(), error) {
	return b.locks.Lock(ctx, gpu)
}

// ProfileName exposes the V2/V3 profile name decoder to the fuzz test.
var ProfileName = profileName

// TrustedName exposes the rule that decides whether a versioned profile
// answer's name may be used.
func TrustedName(v1 nvml.GpuInstanceProfileInfo, id, slices uint32, memoryMB uint64, name [96]int8) (string, bool) {
	return trustedName(&v1, versioned{id: id, slices: slices, memoryMB: memoryMB, name: name})
}

// SysfsBusID exposes the bus ID conversion.
var SysfsBusID = sysfsBusID

// NewOwned builds a backend that owns its library, as New does with
// Options.NVML nil, but over lib, with newLib making the next one.
func NewOwned(lib nvml.Interface, newLib func() nvml.Interface) *Backend {
	b := New(Options{NVML: lib})
	b.owned, b.newLib = true, newLib
	return b
}
