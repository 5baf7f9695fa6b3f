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
// node of gpus with the DRA structured allocator, through [sim.Replay]: each
// arrival is one claim allocated by a fresh allocator over the current state
// and committed; a departure releases its devices and so their counters.
// Rejections are classified as [Node.Explain] does, so the result lines up
// with [sim.Run]'s for dynmig's policies, utilisation included. It fails with
// the trace's [*sim.TraceError], a model error, a fatal allocator error, or
// [ErrDisagree]; only an [*placement.UnschedulableError] counts as a
// rejection.
func Run(ctx context.Context, gpus []capability.GPU, evs []sim.Event, opts NodeOptions) (sim.Result, error) {
	// Validated before the model is built, so a bad trace is reported as
	// such whatever the GPUs; sim.Replay checks again, cheaply.
	if err := sim.Validate(evs); err != nil {
		return sim.Result{}, err
	}
	m, err := NewModel("node-0", gpus)
	if err != nil {
		return sim.Result{}, err
	}
	var slots int
	for _, g := range m.grids {
		slots += int(g.Width())
	}
	p := &placer{
		node: NewNode(m, opts),
		req:  placement.Request{Containers: make([]placement.ContainerRequest, 1)},
		held: map[string][]Device{},
	}
	res, err := sim.Replay(ctx, evs, slots, p)
	res.Policy = PolicyName
	if opts.Order.Name != "" {
		res.Policy += "/" + opts.Order.Name
	}
	if opts.Layout != OrderedPool {
		res.Policy += "/" + opts.Layout.String()
	}
	if p.fatal != nil {
		i := arrival(evs, p.arrivals)
		return res, fmt.Errorf("dra: event %d (%s): %w", i+1, evs[i].ID, p.fatal)
	}
	return res, err
}

// placer is the [sim.Placer] of [Run]: one claim per arrival on node. It
// lives only for one Run call.
type placer struct {
	node *Node
	req  placement.Request
	held map[string][]Device // devices of each accepted, present arrival
	// arrivals counts Arrive calls, to name the event of fatal.
	arrivals int
	// fatal is the first error that is not a rejection. Arrive hands
	// sim.Replay errFatal instead, which stops the replay whatever fatal
	// wraps (sim would count a placement.ErrInvalidRequest as a rejection).
	fatal error
}

// errFatal stops [sim.Replay] after [placer.fatal] is set; Run reports
// placer.fatal instead.
var errFatal = errors.New("dra: fatal error")

func (p *placer) Arrive(ctx context.Context, ev *sim.Event) (int, error) {
	p.arrivals++
	p.req.Containers[0] = sim.ContainerOf(ev)
	devs, err := p.node.arrive(ctx, ev.ID, &p.req)
	if err != nil {
		var ue *placement.UnschedulableError
		if errors.As(err, &ue) {
			return 0, err
		}
		p.fatal = err
		return 0, errFatal
	}
	p.held[ev.ID] = devs
	n := 0
	for _, d := range devs {
		n += int(d.Placement.Size)
	}
	return n, nil
}

func (p *placer) Depart(ev *sim.Event) {
	p.node.Release(p.held[ev.ID])
	delete(p.held, ev.ID)
}

// arrival returns the index in evs of the n-th (from 1) arrival.
func arrival(evs []sim.Event, n int) int {
	for i := range evs {
		if evs[i].Op == sim.Arrive {
			if n--; n == 0 {
				return i
			}
		}
	}
	return len(evs) - 1 // unreachable: Replay calls Arrive once per arrival
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
