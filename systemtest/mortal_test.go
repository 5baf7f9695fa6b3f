package systemtest_test

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// errDead is the cause of every call a dead device plugin makes.
var errDead = errors.New("systemtest: the device plugin process died")

// mortal is the hardware as one device-plugin process sees it: the fake
// node, until a call is cut off by a crash fault (fakehal.ErrCrashed). Then
// the process is dead: no later call of it reaches the hardware, just as a
// killed plugin makes no rollback or cleanup calls. The state machine then
// starts a new plugin over the same node.
type mortal struct {
	*fakehal.Node
	dead atomic.Bool
}

var _ realize.Realizer = (*mortal)(nil)

func (m *mortal) gate(op string) error {
	if m.dead.Load() {
		return &realize.HardwareError{Op: op, GPU: -1, Cause: errDead}
	}
	return nil
}

func (m *mortal) observe(err error) error {
	if errors.Is(err, fakehal.ErrCrashed) {
		m.dead.Store(true)
	}
	return err
}

func (m *mortal) Devices(ctx context.Context) ([]capability.DeviceInfo, error) {
	if err := m.gate("Devices"); err != nil {
		return nil, err
	}
	d, err := m.Node.Devices(ctx)
	return d, m.observe(err)
}

func (m *mortal) GIProfiles(ctx context.Context, gpu int) ([]capability.GIProfileInfo, error) {
	if err := m.gate("GIProfiles"); err != nil {
		return nil, err
	}
	p, err := m.Node.GIProfiles(ctx, gpu)
	return p, m.observe(err)
}

func (m *mortal) Instances(ctx context.Context, gpu int) ([]realize.Instance, error) {
	if err := m.gate("Instances"); err != nil {
		return nil, err
	}
	in, err := m.Node.Instances(ctx, gpu)
	return in, m.observe(err)
}

func (m *mortal) CreateInstance(ctx context.Context, gpu int, profile capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	if err := m.gate("CreateInstance"); err != nil {
		return realize.Instance{}, err
	}
	in, err := m.Node.CreateInstance(ctx, gpu, profile, at)
	return in, m.observe(err)
}

func (m *mortal) DestroyComputeInstance(ctx context.Context, gpu int, gi, ci uint32) error {
	if err := m.gate("DestroyComputeInstance"); err != nil {
		return err
	}
	return m.observe(m.Node.DestroyComputeInstance(ctx, gpu, gi, ci))
}

func (m *mortal) DestroyGPUInstance(ctx context.Context, gpu int, gi uint32) error {
	if err := m.gate("DestroyGPUInstance"); err != nil {
		return err
	}
	return m.observe(m.Node.DestroyGPUInstance(ctx, gpu, gi))
}

func (m *mortal) Processes(ctx context.Context, gpu int) (realize.ProcessReport, error) {
	if err := m.gate("Processes"); err != nil {
		return realize.ProcessReport{}, err
	}
	r, err := m.Node.Processes(ctx, gpu)
	return r, m.observe(err)
}
