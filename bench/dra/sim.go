package dra

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

// PolicyName is the name DRA results carry in a [sim.Result].
const PolicyName = "dra-structured"

// Run replays evs (see package placement/sim for the trace format) on one
// node of gpus with the DRA structured allocator: each arrival is one claim
// allocated by a fresh allocator over the current state and committed; a
// departure releases its devices and so their counters. Rejections are
// classified as [Node.Explain] does, so the result lines up with
// [sim.Run]'s for dynmig's policies, utilisation included. It fails with
// the trace's [*sim.TraceError], a model error, a fatal allocator error, or
// [ErrDisagree].
func Run(ctx context.Context, gpus []capability.GPU, evs []sim.Event, opts NodeOptions) (sim.Result, error) {
	if err := sim.Validate(evs); err != nil {
		return sim.Result{}, err
	}
	m, err := NewModel("node-0", gpus)
	if err != nil {
		return sim.Result{}, err
	}
	n := NewNode(m, opts)
	res := sim.Result{Policy: PolicyName}
	var total int
	for _, g := range m.grids {
		total += int(g.Width())
	}
	held := map[string][]Device{}
	req := placement.Request{Containers: make([]placement.ContainerRequest, 1)}
	taken := 0
	var area, sum float64
	for i := range evs {
		ev := &evs[i]
		if i > 0 {
			area += (ev.T - evs[i-1].T) * float64(taken)
		}
		switch ev.Op {
		case sim.Arrive:
			res.Arrivals++
			req.Containers[0] = containerOf(ev)
			devs, err := n.arrive(ctx, ev.ID, &req)
			if err != nil {
				if cerr := count(&res, err); cerr != nil {
					return res, fmt.Errorf("dra: event %d (%s): %w", i+1, ev.ID, cerr)
				}
				break
			}
			res.Accepted++
			held[ev.ID] = devs
			for _, d := range devs {
				taken += int(d.Placement.Size)
			}
		case sim.Depart:
			for _, d := range held[ev.ID] {
				taken -= int(d.Placement.Size)
			}
			n.Release(held[ev.ID])
			delete(held, ev.ID)
		}
		sum += float64(taken)
	}
	switch {
	case total == 0 || len(evs) == 0:
	case evs[len(evs)-1].T > evs[0].T:
		res.Utilisation = area / (evs[len(evs)-1].T - evs[0].T) / float64(total)
	default:
		res.Utilisation = sum / float64(len(evs)) / float64(total)
	}
	return res, nil
}

// arrive allocates and commits one arrival, or returns why not: an
// [*placement.UnschedulableError] for a rejection, anything else is fatal.
func (n *Node) arrive(ctx context.Context, id string, req *placement.Request) ([]Device, error) {
	claim, err := n.model.Claim(id, req.Containers[0])
	if err != nil {
		if errors.Is(err, placement.ErrNoProfile) {
			return nil, &placement.UnschedulableError{Reason: placement.ErrNoProfile, Container: 0, Device: 0}
		}
		return nil, err
	}
	devs, err := n.Allocate(ctx, claim)
	if err != nil {
		return nil, err
	}
	if devs == nil {
		return nil, n.Explain(req)
	}
	if err := n.Commit(devs); err != nil {
		return nil, err
	}
	return devs, nil
}

// count records a rejection in r, or returns err when it is not one.
func count(r *sim.Result, err error) error {
	var ue *placement.UnschedulableError
	if !errors.As(err, &ue) {
		return err
	}
	switch {
	case errors.Is(err, placement.ErrCapacity):
		r.Capacity++
	case errors.Is(err, placement.ErrFragmented):
		r.Fragmented++
	case errors.Is(err, placement.ErrNoProfile):
		r.NoProfile++
	default:
		r.Other++
	}
	return nil
}

// containerOf turns an arrival into the container demand the simulator
// places: Devices (at least 1) of Profile, MemoryMB, Percent or a whole GPU.
func containerOf(ev *sim.Event) placement.ContainerRequest {
	c := placement.ContainerRequest{Devices: max(ev.Devices, 1), Profile: ev.Profile}
	switch {
	case ev.MemoryMB > 0:
		c.Memory = placement.MiB(ev.MemoryMB)
	case ev.Percent > 0:
		c.Memory = placement.Percent(ev.Percent)
	}
	return c
}

// Compare runs dynmig's policies (with [sim.Compare]) and then the DRA
// allocator on the same trace and GPUs, one result per policy, DRA last.
func Compare(ctx context.Context, gpus []capability.GPU, evs []sim.Event, pols []placement.Policy, opts NodeOptions) ([]sim.Result, error) {
	rs, err := sim.Compare(gpus, evs, pols)
	if err != nil {
		return nil, err
	}
	r, err := Run(ctx, gpus, evs, opts)
	if err != nil {
		return nil, err
	}
	return append(rs, r), nil
}
