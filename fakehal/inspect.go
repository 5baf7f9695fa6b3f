package fakehal

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// Snapshot returns every live GPU instance on every GPU, ordered by GPU
// index then placement start, regardless of MIG mode and faults. It does
// not count as a call.
func (n *Node) Snapshot() []realize.Instance {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []realize.Instance
	for _, g := range n.gpus {
		out = append(out, g.instances()...)
	}
	return out
}

// NumGPUs returns the number of GPUs.
func (n *Node) NumGPUs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.gpus)
}

// Device returns GPU gpu's device info, without counting a call.
func (n *Node) Device(gpu int) (capability.DeviceInfo, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if gpu < 0 || gpu >= len(n.gpus) {
		return capability.DeviceInfo{}, false
	}
	return n.gpus[gpu].info, true
}

// AddGPUInstance creates a GPU instance without a compute instance, as a
// crashed device plugin or another tool would leave it. It applies every
// hardware rule of CreateInstance but no faults, and counts no call.
func (n *Node) AddGPUInstance(gpu int, profile capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, err := n.createGI(OpSetup, gpu, profile, at)
	if err != nil {
		return realize.Instance{}, err
	}
	_, gi, _ := n.findGI(OpSetup, gpu, id)
	return gi.instance(gpu), nil
}

// AddComputeInstance adds a compute instance of the given compute slices to
// GPU instance gi, as another tool might partition it (several CIs per GI
// are legal as long as their slices fit). Like AddGPUInstance it takes no
// faults and counts no call.
func (n *Node) AddComputeInstance(gpu int, gi uint32, computeSlices uint32) (realize.ComputeInstance, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g, inst, err := n.findGI(OpSetup, gpu, gi)
	if err != nil {
		return realize.ComputeInstance{}, err
	}
	ci, err := n.createCI(OpSetup, g, inst, computeSlices)
	if err != nil {
		return realize.ComputeInstance{}, err
	}
	return ci.public(), nil
}

// AddInstance creates a GPU instance with one full compute instance, as
// CreateInstance would but without faults or call counting: an instance
// "created by someone else" (another plugin generation, MIG Manager, an
// operator with nvidia-smi).
func (n *Node) AddInstance(gpu int, profile capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, err := n.createGI(OpSetup, gpu, profile, at)
	if err != nil {
		return realize.Instance{}, err
	}
	g, gi, _ := n.findGI(OpSetup, gpu, id)
	if _, err := n.createCI(OpSetup, g, gi, gi.profile.SliceCount); err != nil {
		_, _ = n.destroyGI(OpSetup, gpu, id)
		return realize.Instance{}, err
	}
	return gi.instance(gpu), nil
}

// ForceMIGMode sets GPU gpu's MIG mode at once, as if it had been set and
// the GPU reset: every instance is gone and nothing stays pending. A GPU
// that runs processes is ErrInUse.
func (n *Node) ForceMIGMode(gpu int, mode capability.MIGMode) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	g, err := n.gpu(OpSetup, gpu)
	if err != nil {
		return err
	}
	if n.processesOn(gpu, "") > 0 {
		return hwErr(OpSetup, gpu, realize.ErrInUse, ReturnInUse)
	}
	g.info.MIGMode, g.info.PendingMIGMode = mode, mode
	g.gis, g.ghosts = nil, nil
	return nil
}

// InvariantError is one hardware rule a node's state breaks, reported by
// [Node.Check].
type InvariantError struct {
	GPU    int
	Reason string
}

func (e *InvariantError) Error() string {
	return fmt.Sprintf("fakehal: GPU %d: %s", e.GPU, e.Reason)
}

// Check verifies the hardware invariants the node enforces and returns
// every violation joined (nil when none): GPU instances only at published
// placements of supported profiles and inside the grid, no two overlapping,
// distinct GI IDs, per-profile instance counts and the compute-slice budget
// respected, media engines within the GPU's, no GIs with MIG disabled, compute instances fitting their GI
// with distinct IDs, MIG UUIDs unique across the node, and processes only
// on live MIG devices. Tests call it after every step.
func (n *Node) Check() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	bad := func(gpu int, format string, args ...any) {
		errs = append(errs, &InvariantError{GPU: gpu, Reason: fmt.Sprintf(format, args...)})
	}
	uuids := map[string]bool{}
	for i, g := range n.gpus {
		if g.info.MIGMode != capability.MIGEnabled && len(g.gis) > 0 {
			bad(i, "%d GPU instances with MIG %v", len(g.gis), g.info.MIGMode)
		}
		perProfile := map[capability.GIProfileIndex]uint32{}
		giIDs := map[uint32]bool{}
		var slicesUsed uint32
		for j, gi := range g.gis {
			info, ok := g.profile(gi.profile.Index)
			switch {
			case !ok:
				bad(i, "GI %d: unsupported profile index %d", gi.id, gi.profile.Index)
			case !slices.Contains(info.Placements, gi.at) || !gi.at.Within(g.width):
				bad(i, "GI %d: placement %v not published for profile index %d", gi.id, gi.at, gi.profile.Index)
			}
			for _, other := range g.gis[j+1:] {
				if gi.at.Overlaps(other.at) {
					bad(i, "GI %d %v overlaps GI %d %v", gi.id, gi.at, other.id, other.at)
				}
			}
			if giIDs[gi.id] {
				bad(i, "duplicate GI ID %d", gi.id)
			}
			giIDs[gi.id] = true
			perProfile[gi.profile.Index]++
			if perProfile[gi.profile.Index] > info.InstanceCount && ok {
				bad(i, "more than %d GPU instances of profile index %d", info.InstanceCount, gi.profile.Index)
			}
			slicesUsed += gi.profile.SliceCount
			errs = append(errs, gi.check(i, uuids)...)
		}
		if slicesUsed > g.compute {
			bad(i, "%d compute slices used of %d", slicesUsed, g.compute)
		}
		var engines Engines
		for _, gi := range g.gis {
			engines = engines.Add(g.model.EnginesOf(gi.profile.Index))
		}
		if g.model.ProfileEngines != nil && !engines.Within(g.model.Engines) {
			bad(i, "media engines %v taken of %v", engines, g.model.Engines)
		}
	}
	for _, p := range n.procs {
		if p.migUUID != "" && !uuids[p.migUUID] {
			bad(p.gpu, "process %d on missing MIG device %s", p.pid, p.migUUID)
		}
	}
	return errors.Join(errs...)
}

func (gi *gpuInstance) check(gpu int, uuids map[string]bool) []error {
	var errs []error
	ciIDs := map[uint32]bool{}
	var used uint32
	for _, ci := range gi.cis {
		used += ci.slices
		if ciIDs[ci.id] {
			errs = append(errs, &InvariantError{GPU: gpu, Reason: fmt.Sprintf("GI %d: duplicate CI ID %d", gi.id, ci.id)})
		}
		ciIDs[ci.id] = true
		if uuids[ci.uuid] {
			errs = append(errs, &InvariantError{GPU: gpu, Reason: fmt.Sprintf("duplicate MIG UUID %s", ci.uuid)})
		}
		uuids[ci.uuid] = true
	}
	if used > gi.profile.SliceCount {
		errs = append(errs, &InvariantError{GPU: gpu, Reason: fmt.Sprintf("GI %d: CIs use %d of %d slices", gi.id, used, gi.profile.SliceCount)})
	}
	return errs
}
