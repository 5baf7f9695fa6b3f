package systemtest_test

import (
	"context"
	"errors"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// errReadOnly answers every hardware change through an observer.
var errReadOnly = errors.New("systemtest: the observer only reads the hardware")

// observer is the fake node as the safety model observes it after a step:
// its instances and the model's processes, read without going through
// fakehal's fault injection, so that observing neither fails nor shifts
// which call an injected fault hits.
type observer struct{ s *system }

var _ realize.Realizer = observer{}

func (o observer) Devices(context.Context) ([]capability.DeviceInfo, error) {
	devs := make([]capability.DeviceInfo, 0, numGPUs)
	for i := range o.s.node.NumGPUs() {
		d, ok := o.s.node.Device(i)
		if !ok {
			return nil, &realize.HardwareError{Op: "Devices", GPU: i, Cause: errReadOnly}
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func (o observer) GIProfiles(context.Context, int) ([]capability.GIProfileInfo, error) {
	return nil, &realize.HardwareError{Op: "GIProfiles", GPU: -1, Cause: errReadOnly}
}

func (o observer) Instances(_ context.Context, gpu int) ([]realize.Instance, error) {
	var out []realize.Instance
	for _, in := range o.s.node.Snapshot() {
		if in.GPU == gpu {
			out = append(out, in)
		}
	}
	return out, nil
}

func (o observer) CreateInstance(context.Context, int, capability.GIProfileIndex, capability.Placement) (realize.Instance, error) {
	return realize.Instance{}, &realize.HardwareError{Op: "CreateInstance", GPU: -1, Cause: errReadOnly}
}

func (o observer) DestroyComputeInstance(context.Context, int, uint32, uint32) error {
	return &realize.HardwareError{Op: "DestroyComputeInstance", GPU: -1, Cause: errReadOnly}
}

func (o observer) DestroyGPUInstance(context.Context, int, uint32) error {
	return &realize.HardwareError{Op: "DestroyGPUInstance", GPU: -1, Cause: errReadOnly}
}

// Processes counts the processes the model started on the GPU's MIG
// devices.
func (o observer) Processes(_ context.Context, gpu int) (realize.ProcessReport, error) {
	var r realize.ProcessReport
	live := o.s.liveByMIG()
	for _, pr := range o.s.procs {
		in, ok := live[pr.mig]
		if !ok || in.GPU != gpu {
			continue
		}
		if r.ByGPUInstance == nil {
			r.ByGPUInstance = map[uint32]int{}
		}
		r.ByGPUInstance[in.GIID]++
		r.Total++
	}
	return r, nil
}
