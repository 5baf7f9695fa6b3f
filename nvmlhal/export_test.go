package nvmlhal

import "context"

// LockGPU exposes the per-GPU lock to the external tests.
func (b *Backend) LockGPU(ctx context.Context, gpu int) (func(), error) {
	return b.locks.Lock(ctx, gpu)
}

// ProfileName exposes the V2/V3 profile name decoder to the fuzz test.
var ProfileName = profileName
