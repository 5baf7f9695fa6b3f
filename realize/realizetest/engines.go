package realizetest

import (
	"context"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
)

// checkMediaEngines: hardware refuses a GPU instance whose media engines
// another instance already holds, however free its slots, with
// INSUFFICIENT_RESOURCES (ErrOccupied). Which pairs clash is derived with
// the scheduler's rules (package placement, [placement.Engines]) from the
// GPU's profile names and table, so a backend that passes refuses exactly
// what the scheduler never reserves.
var checkMediaEngines = checkFunc(func(ctx context.Context, e *env) error {
	grid, names, err := e.grid()
	if err != nil {
		return err
	}
	clashes := 0
	for _, p := range e.profiles {
		for _, q := range e.profiles {
			a, b, ok := e.enginePair(grid, names, p, q)
			if !ok {
				continue
			}
			clashes++
			first, ok := e.mustCreate(ctx, p, a)
			if !ok {
				continue
			}
			before := e.list(ctx)
			_, err := e.create(ctx, q, b)
			e.expectKind(fmt.Sprintf("CreateInstance(%s at %v) next to %s at %v, whose media engines it needs", q.Name, b, p.Name, a), err, e.gpu, realize.ErrOccupied)
			e.expectUnchanged(ctx, "a create refused for media engines", before)
			e.mustDestroy(ctx, first)
		}
	}
	if clashes == 0 {
		return skip("no two profiles of GPU %d contend for media engines", e.gpu)
	}
	return nil
})

// grid compiles the GPU under test as the scheduler would, and returns
// the names the scheduler knows its profiles by (the driver's, or derived
// when the driver reports none).
func (e *env) grid() (*placement.Grid, map[capability.GIProfileIndex]string, error) {
	gpu, errs := capability.GPUFromDevice(e.devs[e.gpu], e.profiles)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("GPU %d's profiles do not compile: %v", e.gpu, errs[0])
	}
	names := map[capability.GIProfileIndex]string{}
	for _, p := range gpu.Profiles {
		names[p.GIProfileIndex] = p.Name
	}
	g, err := placement.NewGrid(&gpu)
	return g, names, err
}

// enginePair finds disjoint placements a of p and b of q within every
// other limit (compute slices, instance count) at which q's media engines
// are taken by p. ok is false when there are none.
func (e *env) enginePair(grid *placement.Grid, names map[capability.GIProfileIndex]string, p, q capability.GIProfileInfo) (a, b capability.Placement, ok bool) {
	pn, qn := names[p.Index], names[q.Index]
	if pn == "" || qn == "" || grid.EnginesFit(grid.EnginesOf(pn), qn) {
		return a, b, false
	}
	if p.SliceCount+q.SliceCount > e.budget || (p.Index == q.Index && p.InstanceCount < 2) {
		return a, b, false
	}
	for _, a := range p.Placements {
		for _, b := range q.Placements {
			if !a.Overlaps(b) {
				return a, b, true
			}
		}
	}
	return a, b, false
}
