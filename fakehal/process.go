package fakehal

import (
	"context"
	"slices"

	"github.com/dynmig/dynmig/realize"
)

// process is one simulated compute process.
type process struct {
	pid     uint32
	gpu     int
	migUUID string // "" for a process on the whole GPU
	giID    uint32 // valid when migUUID != ""
}

// StartProcess simulates a compute process on GPU gpu: on the MIG device
// migUUID, or on the whole GPU when migUUID is "" (a process that holds the
// device, as a non-MIG workload or a monitoring client would). It returns
// the process ID, which [Node.StopProcess] takes. An unknown GPU or MIG
// device is ErrNotFound. Processes survive nothing: a compute instance with
// processes cannot be destroyed (ErrInUse) and [Node.ResetGPU] refuses a
// GPU that runs any.
func (n *Node) StartProcess(gpu int, migUUID string) (uint32, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.gpu(OpStartProcess, gpu); err != nil {
		return 0, err
	}
	p := &process{gpu: gpu, migUUID: migUUID}
	if migUUID != "" {
		gi, ok := n.gpus[gpu].ownerOf(migUUID)
		if !ok {
			return 0, hwErr(OpStartProcess, gpu, realize.ErrNotFound, ReturnNotFound)
		}
		p.giID = gi.id
	}
	n.nextPID++
	p.pid = n.nextPID
	n.procs = append(n.procs, p)
	return p.pid, nil
}

// StopProcess ends a process started by [Node.StartProcess]. An unknown
// PID is ErrNotFound.
func (n *Node) StopProcess(pid uint32) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.procs, func(p *process) bool { return p.pid == pid })
	if i < 0 {
		return hwErr(OpStopProcess, -1, realize.ErrNotFound, ReturnNotFound)
	}
	n.procs = slices.Delete(n.procs, i, i+1)
	return nil
}

func (g *gpuState) ownerOf(migUUID string) (*gpuInstance, bool) {
	for _, gi := range g.gis {
		for _, ci := range gi.cis {
			if ci.uuid == migUUID {
				return gi, true
			}
		}
	}
	return nil, false
}

// processesOn counts processes on the GPU's MIG device migUUID, or on the
// whole GPU (every process) when migUUID is "". Callers hold n.mu.
func (n *Node) processesOn(gpu int, migUUID string) int {
	count := 0
	for _, p := range n.procs {
		if p.gpu == gpu && (migUUID == "" || p.migUUID == migUUID) {
			count++
		}
	}
	return count
}

// Processes reports the compute processes on the GPU: Total counts all of
// them, ByGPUInstance those on MIG devices by GPU instance ID (nil when
// there are none).
func (n *Node) Processes(ctx context.Context, gpu int) (realize.ProcessReport, error) {
	eff, err := n.enter(ctx, OpProcesses, gpu)
	if err != nil {
		return realize.ProcessReport{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.gpu(OpProcesses, gpu); err != nil {
		return realize.ProcessReport{}, err
	}
	if eff.crash {
		return realize.ProcessReport{}, hwErr(OpProcesses, gpu, nil, ErrCrashed)
	}
	var r realize.ProcessReport
	for _, p := range n.procs {
		if p.gpu != gpu {
			continue
		}
		r.Total++
		if p.migUUID != "" {
			if r.ByGPUInstance == nil {
				r.ByGPUInstance = map[uint32]int{}
			}
			r.ByGPUInstance[p.giID]++
		}
	}
	return r, nil
}
