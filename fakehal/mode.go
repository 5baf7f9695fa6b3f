package fakehal

import (
	"context"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// EnableMIG turns MIG mode on. It is a no-op when MIG is already on (and
// cancels a pending disable). The change applies at once on a GPU without
// processes; with processes, or with [Options.ModeChangeNeedsReset], it
// stays pending and the call returns ErrResetRequired until
// [Node.ResetGPU].
func (n *Node) EnableMIG(ctx context.Context, gpu int) error {
	return n.setMIGMode(ctx, gpu, capability.MIGEnabled)
}

// DisableMIG turns MIG mode off, like EnableMIG. Live GPU instances are
// ErrInUse: NVML refuses to leave MIG mode while they exist.
func (n *Node) DisableMIG(ctx context.Context, gpu int) error {
	return n.setMIGMode(ctx, gpu, capability.MIGDisabled)
}

func (n *Node) setMIGMode(ctx context.Context, gpu int, mode capability.MIGMode) error {
	if _, err := n.enter(ctx, OpSetMIGMode, gpu); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	g, err := n.gpu(OpSetMIGMode, gpu)
	if err != nil {
		return err
	}
	if g.info.MIGMode == mode {
		g.info.PendingMIGMode = mode
		return nil
	}
	if mode == capability.MIGDisabled && len(g.gis) > 0 {
		return hwErr(OpSetMIGMode, gpu, realize.ErrInUse, ReturnInUse)
	}
	g.info.PendingMIGMode = mode
	if n.needsReset || n.processesOn(gpu, "") > 0 {
		return hwErr(OpSetMIGMode, gpu, realize.ErrResetRequired, ReturnResetRequired)
	}
	g.info.MIGMode = mode
	return nil
}

// ResetGPU resets GPU gpu as nvidia-smi -r would: a pending MIG mode takes
// effect and every GPU and compute instance is gone (MIG configuration does
// not survive a reset). A GPU that runs processes is ErrInUse. Faults do
// not apply.
func (n *Node) ResetGPU(gpu int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	g, err := n.gpu(OpResetGPU, gpu)
	if err != nil {
		return err
	}
	if n.processesOn(gpu, "") > 0 {
		return hwErr(OpResetGPU, gpu, realize.ErrInUse, ReturnInUse)
	}
	g.info.MIGMode = g.info.PendingMIGMode
	g.gis, g.ghosts = nil, nil
	return nil
}
