package nvmlhal

import (
	"context"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// noInstance is NVML's "not in a MIG device" GPU/compute instance ID in
// ProcessInfo (and what go-nvml fills in for v1 process structs).
const noInstance = 0xFFFFFFFF

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// Processes reports the processes on the GPU: the compute, graphics and
// MPS client processes NVML lists for the physical device and, when MIG is
// enabled, those it lists for each MIG device handle, counted once each.
// Graphics and MPS clients are not in NVML's compute list, so without
// them a +gfx instance running a renderer would look idle. A driver or
// device that cannot list graphics or MPS processes (NOT_SUPPORTED,
// FUNCTION_NOT_FOUND) contributes none of that kind. Any NVML failure is an error, never an
// empty report: callers use Busy to decide whether destructive cleanup is
// safe. It holds the GPU's lock: a compute instance destroyed by this
// backend in the middle of the MIG device scan would leave a stale handle
// that NVML answers with INVALID_ARGUMENT.
func (b *Backend) Processes(ctx context.Context, gpu int) (realize.ProcessReport, error) {
	dev, unlock, err := b.begin(ctx, "Processes", gpu)
	if err != nil {
		return realize.ProcessReport{}, err
	}
	defer unlock()
	return processes(gpu, dev)
}

// procKey is one process in one GPU instance (noInstance outside MIG).
type procKey struct{ pid, gi uint32 }

// processLists are NVML's per-kind process queries; only the compute list
// is required.
var processLists = []struct {
	op       string
	list     func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return)
	required bool
}{
	{"GetComputeRunningProcesses", nvml.Device.GetComputeRunningProcesses, true},
	{"GetGraphicsRunningProcesses", nvml.Device.GetGraphicsRunningProcesses, false},
	{"GetMPSComputeRunningProcesses", nvml.Device.GetMPSComputeRunningProcesses, false},
}

// listProcesses calls every process query on h and gives each process to
// add. gone is true when h turned out to be a stale MIG handle.
func listProcesses(gpu int, dev, h nvml.Device, mig bool, add func(nvml.ProcessInfo)) (gone bool, err error) {
	for _, l := range processLists {
		procs, ret := l.list(h)
		switch {
		case ret == nvml.SUCCESS:
		case mig && goneHandle(ret):
			return true, nil // its compute instance was destroyed meanwhile
		case !l.required && (ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND):
			continue
		default:
			op := l.op
			if mig {
				op = "MigDevice." + op
			}
			return false, hwError(op, gpu, dev, ret)
		}
		for _, p := range procs {
			add(p)
		}
	}
	return false, nil
}

func processes(gpu int, dev nvml.Device) (realize.ProcessReport, error) {
	seen := make(map[procKey]bool)
	_, err := listProcesses(gpu, dev, dev, false, func(p nvml.ProcessInfo) { seen[procKey{p.Pid, p.GpuInstanceId}] = true })
	if err != nil {
		return realize.ProcessReport{}, err
	}
	cur, _, err := migModes("GetMigMode", gpu, dev)
	if err != nil {
		return realize.ProcessReport{}, err
	}
	if cur == capability.MIGEnabled {
		err := scanMIG(gpu, dev, func(k ciKey, h nvml.Device) (bool, error) {
			_, err := listProcesses(gpu, dev, h, true, func(p nvml.ProcessInfo) { seen[procKey{p.Pid, k.gi}] = true })
			return err != nil, err
		})
		if err != nil {
			return realize.ProcessReport{}, err
		}
	}
	return report(seen), nil
}

// report counts processes. A PID seen both without a GPU instance (a
// driver that fills no instance IDs on the physical device) and inside one
// is counted in its GPU instance only.
func report(seen map[procKey]bool) realize.ProcessReport {
	inMIG := make(map[uint32]bool)
	for k := range seen {
		if k.gi != noInstance {
			inMIG[k.pid] = true
		}
	}
	var r realize.ProcessReport
	for k := range seen {
		if k.gi == noInstance {
			if !inMIG[k.pid] {
				r.Total++
			}
			continue
		}
		r.Total++
		if r.ByGPUInstance == nil {
			r.ByGPUInstance = make(map[uint32]int)
		}
		r.ByGPUInstance[k.gi]++
	}
	return r
}

// EnableMIG turns MIG mode on for an idle GPU. Call it only when the
// operator asked for it: enabling MIG may reset the GPU. A GPU already in
// MIG mode is left alone. A GPU with compute processes is refused with
// realize.ErrInUse and untouched. When the driver leaves the change
// pending (a GPU reset or VM reboot is needed, or another client held the
// device) the error is realize.ErrResetRequired; the mode takes effect
// after the reset.
func (b *Backend) EnableMIG(ctx context.Context, gpu int) error {
	const op = "SetMigMode"
	dev, unlock, err := b.begin(ctx, op, gpu)
	if err != nil {
		return err
	}
	defer unlock()
	c, p, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return hwError("GetMigMode", gpu, nil, ret)
	}
	switch {
	case c == nvml.DEVICE_MIG_ENABLE && p == nvml.DEVICE_MIG_ENABLE:
		return nil
	case c != nvml.DEVICE_MIG_ENABLE && p == nvml.DEVICE_MIG_ENABLE:
		return kindError(op, gpu, realize.ErrResetRequired, nil)
	}
	procs, err := processes(gpu, dev)
	if err != nil {
		return err
	}
	if procs.Busy() {
		return kindError(op, gpu, realize.ErrInUse, &ArgumentError{Field: "gpu", Reason: strconv.Itoa(procs.Total) + " compute processes running"})
	}
	activation, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS {
		return hwError(op, gpu, nil, ret)
	}
	c, p, ret = dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return hwError("GetMigMode", gpu, nil, ret)
	}
	if c == nvml.DEVICE_MIG_ENABLE {
		b.log.Info("nvmlhal: enabled MIG mode", "gpu", gpu)
		return nil
	}
	var cause error
	if activation != nvml.SUCCESS {
		cause = &ReturnError{Return: activation}
	}
	if p == nvml.DEVICE_MIG_ENABLE {
		b.log.Warn("nvmlhal: MIG mode pending until GPU reset", "gpu", gpu, "activation", returnName(activation))
		return kindError(op, gpu, realize.ErrResetRequired, cause)
	}
	return kindError(op, gpu, nil, cause)
}
