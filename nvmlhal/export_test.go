package nvmlhal

import "context"

// LockGPU exposes the per-GPU lock to the external tests.
func (b *Backend) LockGPU(ctx context.Context, gpu int) (func(), error) { return b.lockGPU(ctx, gpu) }
