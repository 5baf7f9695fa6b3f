package realizetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

var checkDiscovery = checkFunc(func(ctx context.Context, e *env) error {
	uuids := map[string]bool{}
	for i, d := range e.devs {
		if d.Index != i {
			e.failf("Devices()[%d].Index = %d, want %d", i, d.Index, i)
		}
		if !strings.HasPrefix(d.UUID, "GPU-") || uuids[d.UUID] {
			e.failf("Devices()[%d].UUID = %q: want a distinct GPU-...", i, d.UUID)
		}
		uuids[d.UUID] = true
		if d.MIGMode == capability.MIGUnknown {
			e.failf("Devices()[%d].MIGMode is unknown", i)
		}
	}
	again, err := e.r.Devices(ctx)
	if err != nil || !slices.Equal(again, e.devs) {
		e.failf("Devices() not stable: %v then %v (err %v)", e.devs, again, err)
	}

	seen := map[capability.GIProfileIndex]bool{}
	for _, p := range e.profiles {
		what := fmt.Sprintf("GIProfiles(%d) index %d (%s)", e.gpu, p.Index, p.Name)
		switch {
		case p.Index < 0 || p.Index >= capability.GIProfileCount:
			e.failf("%s: index out of range", what)
		case seen[p.Index]:
			e.failf("%s: listed twice", what)
		case p.SliceCount == 0 || p.InstanceCount == 0 || p.MemoryMB == 0:
			e.failf("%s: zero slice count, instance count or memory", what)
		case len(p.Placements) == 0:
			e.failf("%s: no placements", what)
		}
		seen[p.Index] = true
		for _, at := range p.Placements {
			if !at.Within(capability.MaxSlots) || at.Size != p.Placements[0].Size {
				e.failf("%s: placement %v invalid or of a different size than %v", what, at, p.Placements[0])
			}
		}
	}
	profAgain, err := e.r.GIProfiles(ctx, e.gpu)
	if err != nil || !slices.EqualFunc(profAgain, e.profiles, sameProfile) {
		e.failf("GIProfiles(%d) not stable between calls (err %v)", e.gpu, err)
	}
	_, err = e.r.GIProfiles(ctx, len(e.devs))
	e.expectKind(fmt.Sprintf("GIProfiles(%d), past the last GPU", len(e.devs)), err, len(e.devs), realize.ErrNotFound)
	return nil
})

func sameProfile(a, b capability.GIProfileInfo) bool {
	return a.Index == b.Index && a.ID == b.ID && a.Name == b.Name && a.SliceCount == b.SliceCount &&
		a.InstanceCount == b.InstanceCount && a.MultiprocessorCount == b.MultiprocessorCount &&
		a.MemoryMB == b.MemoryMB && slices.Equal(a.Placements, b.Placements)
}

var checkCreateEveryPlacement = checkFunc(func(ctx context.Context, e *env) error {
	for _, p := range e.profiles {
		for _, at := range p.Placements {
			inst, ok := e.mustCreate(ctx, p, at)
			if !ok {
				continue
			}
			e.expectListed(ctx, inst)
			e.mustDestroy(ctx, inst)
			if left := e.list(ctx); len(left) != 0 {
				e.failf("after destroying %s at %v, Instances lists %d instances", p.Name, at, len(left))
				return nil
			}
		}
	}
	return nil
})

var checkExactPlacement = checkFunc(func(ctx context.Context, e *env) error {
	p := e.smallest()
	ats := e.disjoint(p)
	var made []realize.Instance
	for _, at := range slices.Backward(ats) {
		if inst, ok := e.mustCreate(ctx, p, at); ok {
			made = append(made, inst)
		}
	}
	ids := map[uint32]bool{}
	for _, inst := range made {
		if ids[inst.GIID] {
			e.failf("GI ID %d given to two live instances", inst.GIID)
		}
		ids[inst.GIID] = true
		e.expectListed(ctx, inst)
	}
	if got := len(e.list(ctx)); got != len(made) {
		e.failf("Instances lists %d instances, want %d", got, len(made))
	}
	return nil
})

var checkOverlap = checkFunc(func(ctx context.Context, e *env) error {
	for _, p := range e.profiles {
		at := p.Placements[0]
		inst, ok := e.mustCreate(ctx, p, at)
		if !ok {
			continue
		}
		before := e.list(ctx)
		for _, q := range e.profiles {
			for _, b := range q.Placements {
				if !b.Overlaps(at) {
					continue
				}
				_, err := e.create(ctx, q, b)
				e.expectKind(fmt.Sprintf("CreateInstance(%s at %v) over %s at %v", q.Name, b, p.Name, at), err, e.gpu, realize.ErrOccupied)
			}
		}
		e.expectUnchanged(ctx, "refused overlapping creates", before)
		e.mustDestroy(ctx, inst)
	}
	return nil
})

var checkDisjointPairs = checkFunc(func(ctx context.Context, e *env) error {
	for _, p := range e.profiles {
		for _, a := range p.Placements {
			first, ok := e.mustCreate(ctx, p, a)
			if !ok {
				continue
			}
			for _, q := range e.profiles {
				for _, b := range q.Placements {
					if b.Overlaps(a) {
						continue
					}
					e.pair(ctx, p, a, q, b)
				}
			}
			e.mustDestroy(ctx, first)
		}
	}
	return nil
})

// pair creates q at b next to p at a and checks the outcome.
func (e *env) pair(ctx context.Context, p capability.GIProfileInfo, a capability.Placement, q capability.GIProfileInfo, b capability.Placement) {
	what := fmt.Sprintf("CreateInstance(%s at %v) next to %s at %v", q.Name, b, p.Name, a)
	inst, err := e.create(ctx, q, b)
	overBudget := p.SliceCount+q.SliceCount > e.budget
	plain := p.Index.Variant() == capability.VariantNone && q.Index.Variant() == capability.VariantNone
	withinCount := p.Index != q.Index || q.InstanceCount >= 2
	switch {
	case overBudget:
		e.expectKind(what+fmt.Sprintf(" (%d+%d compute slices of %d)", p.SliceCount, q.SliceCount, e.budget), err, e.gpu, realize.ErrOccupied)
	case err == nil:
	case plain && withinCount:
		e.failf("%s: %v, want success: the ranges are disjoint and within every limit", what, err)
	default:
		e.expectKind(what, err, e.gpu, realize.ErrOccupied)
	}
	if err == nil {
		e.mustDestroy(ctx, inst)
	}
}

var checkInstanceCount = checkFunc(func(ctx context.Context, e *env) error {
	for _, p := range e.profiles {
		free := disjointAll(p.Placements)
		if uint32(len(free)) <= p.InstanceCount || (p.InstanceCount+1)*p.SliceCount > e.budget {
			continue
		}
		for _, at := range free[:p.InstanceCount] {
			e.mustCreate(ctx, p, at)
		}
		next := free[p.InstanceCount]
		_, err := e.create(ctx, p, next)
		e.expectKind(fmt.Sprintf("CreateInstance(%s at %v) beyond its instance count %d", p.Name, next, p.InstanceCount), err, e.gpu, realize.ErrOccupied)
		return nil
	}
	return skip("no profile on GPU %d allows fewer instances than it has disjoint placements", e.gpu)
})

// disjointAll returns the placements, in order, that do not overlap an
// earlier one.
func disjointAll(ats []capability.Placement) []capability.Placement {
	var out []capability.Placement
	for _, at := range ats {
		if !slices.ContainsFunc(out, at.Overlaps) {
			out = append(out, at)
		}
	}
	return out
}

var checkUnpublished = checkFunc(func(ctx context.Context, e *env) error {
	for _, p := range e.profiles {
		size := p.Placements[0].Size
		var bad []capability.Placement
		for s := uint32(0); s+size <= e.width; s++ {
			if at := (capability.Placement{Start: s, Size: size}); !slices.Contains(p.Placements, at) {
				bad = append(bad, at)
			}
		}
		first := p.Placements[0]
		bad = append(bad,
			capability.Placement{Start: first.Start, Size: size + 1},
			capability.Placement{Start: e.width, Size: size},
			capability.Placement{},
		)
		for _, at := range bad {
			if slices.Contains(p.Placements, at) {
				continue
			}
			_, err := e.create(ctx, p, at)
			e.expectKind(fmt.Sprintf("CreateInstance(%s at unpublished %v)", p.Name, at), err, e.gpu, realize.ErrInvalidPlacement)
		}
	}
	if left := e.list(ctx); len(left) != 0 {
		e.failf("refused creates left %d instances", len(left))
	}
	return nil
})

var checkUnsupportedProfile = checkFunc(func(ctx context.Context, e *env) error {
	for idx := range capability.GIProfileCount {
		if slices.ContainsFunc(e.profiles, func(p capability.GIProfileInfo) bool { return p.Index == idx }) {
			continue
		}
		_, err := e.r.CreateInstance(ctx, e.gpu, idx, capability.Placement{Start: 0, Size: e.width})
		e.expectKind(fmt.Sprintf("CreateInstance(unsupported profile index %d)", idx), err, e.gpu, realize.ErrNotSupported)
		if err == nil {
			e.failf("CreateInstance(unsupported profile index %d) created an instance", idx)
		}
		return nil
	}
	return skip("GPU %d supports every profile index", e.gpu)
})

var checkDestroyInUse = checkFunc(func(ctx context.Context, e *env) error {
	p := e.smallest()
	inst, ok := e.mustCreate(ctx, p, p.Placements[len(p.Placements)-1])
	if !ok {
		return nil
	}
	err := e.r.DestroyGPUInstance(ctx, e.gpu, inst.GIID)
	e.expectKind("DestroyGPUInstance of a GI with a compute instance", err, e.gpu, realize.ErrInUse)
	e.expectListed(ctx, inst)
	ci := inst.ComputeInstances[0]
	if err := e.r.DestroyComputeInstance(ctx, e.gpu, inst.GIID, ci.ID); err != nil {
		e.failf("DestroyComputeInstance(GI %d, CI %d): %v", inst.GIID, ci.ID, err)
		return nil
	}
	bare := inst
	bare.ComputeInstances = nil
	e.expectListed(ctx, bare)
	if err := e.r.DestroyGPUInstance(ctx, e.gpu, inst.GIID); err != nil {
		e.failf("DestroyGPUInstance(GI %d) without CIs: %v", inst.GIID, err)
		return nil
	}
	delete(e.created, inst.GIID)
	if left := e.list(ctx); len(left) != 0 {
		e.failf("destroyed GI still listed: %+v", left)
	}
	return nil
})

var checkNotFound = checkFunc(func(ctx context.Context, e *env) error {
	p := e.smallest()
	live, ok := e.mustCreate(ctx, p, p.Placements[0])
	if !ok {
		return nil
	}
	gone, ok := e.mustCreate(ctx, p, p.Placements[len(p.Placements)-1])
	if !ok || gone.GIID == live.GIID {
		return nil
	}
	e.mustDestroy(ctx, gone)
	ci := gone.ComputeInstances[0].ID
	err := e.r.DestroyComputeInstance(ctx, e.gpu, gone.GIID, ci)
	e.expectKind("DestroyComputeInstance of a destroyed GI", err, e.gpu, realize.ErrNotFound)
	err = e.r.DestroyGPUInstance(ctx, e.gpu, gone.GIID)
	e.expectKind("DestroyGPUInstance of a destroyed GI", err, e.gpu, realize.ErrNotFound)
	err = e.r.DestroyComputeInstance(ctx, e.gpu, live.GIID, live.ComputeInstances[0].ID+1)
	e.expectKind("DestroyComputeInstance of an unknown CI in a live GI", err, e.gpu, realize.ErrNotFound)
	unused := uint32(0)
	for unused == live.GIID {
		unused++
	}
	err = e.r.DestroyGPUInstance(ctx, e.gpu, unused)
	e.expectKind(fmt.Sprintf("DestroyGPUInstance of unused GI ID %d", unused), err, e.gpu, realize.ErrNotFound)
	e.expectListed(ctx, live)

	for _, gpu := range []int{len(e.devs), -1} {
		_, err := e.r.Instances(ctx, gpu)
		e.expectKind(fmt.Sprintf("Instances(%d)", gpu), err, gpu, realize.ErrNotFound)
		_, err = e.r.CreateInstance(ctx, gpu, p.Index, p.Placements[0])
		e.expectKind(fmt.Sprintf("CreateInstance(GPU %d)", gpu), err, gpu, realize.ErrNotFound)
		err = e.r.DestroyComputeInstance(ctx, gpu, live.GIID, 0)
		e.expectKind(fmt.Sprintf("DestroyComputeInstance(GPU %d)", gpu), err, gpu, realize.ErrNotFound)
		err = e.r.DestroyGPUInstance(ctx, gpu, live.GIID)
		e.expectKind(fmt.Sprintf("DestroyGPUInstance(GPU %d)", gpu), err, gpu, realize.ErrNotFound)
		_, err = e.r.Processes(ctx, gpu)
		e.expectKind(fmt.Sprintf("Processes(%d)", gpu), err, gpu, realize.ErrNotFound)
	}
	return nil
})

var checkMIGUUIDs = checkFunc(func(ctx context.Context, e *env) error {
	p := e.smallest()
	var made []realize.Instance
	for _, at := range e.disjoint(p) {
		if inst, ok := e.mustCreate(ctx, p, at); ok {
			made = append(made, inst)
		}
	}
	if len(made) == 0 {
		return nil
	}
	uuidsOf := func(insts []realize.Instance) map[uint32]string {
		m := map[uint32]string{}
		for _, inst := range insts {
			for _, ci := range inst.ComputeInstances {
				m[inst.GIID] = ci.MIGUUID
			}
		}
		return m
	}
	first := uuidsOf(e.list(ctx))
	seen := map[string]uint32{}
	for gi, u := range first {
		if other, dup := seen[u]; dup {
			e.failf("MIG UUID %s shared by GI %d and GI %d", u, gi, other)
		}
		seen[u] = gi
	}
	for _, inst := range made {
		if first[inst.GIID] != inst.ComputeInstances[0].MIGUUID {
			e.failf("GI %d: created with MIG UUID %s, listed with %q", inst.GIID, inst.ComputeInstances[0].MIGUUID, first[inst.GIID])
		}
	}
	// Destroy and recreate the last one; the others must not change.
	last := made[len(made)-1]
	e.mustDestroy(ctx, last)
	again, ok := e.mustCreate(ctx, p, last.Placement)
	if !ok {
		return nil
	}
	second := uuidsOf(e.list(ctx))
	for _, inst := range made[:len(made)-1] {
		if second[inst.GIID] != first[inst.GIID] {
			e.failf("GI %d: MIG UUID changed from %s to %s when a neighbour was recreated", inst.GIID, first[inst.GIID], second[inst.GIID])
		}
		if second[inst.GIID] == again.ComputeInstances[0].MIGUUID {
			e.failf("recreated instance got GI %d's MIG UUID %s", inst.GIID, second[inst.GIID])
		}
	}
	return nil
})

var checkProcesses = checkFunc(func(ctx context.Context, e *env) error {
	idle, err := e.r.Processes(ctx, e.gpu)
	if err != nil || idle.Total != 0 || len(idle.ByGPUInstance) != 0 {
		e.failf("Processes(%d) on the idle GPU = %+v, %v; want none", e.gpu, idle, err)
	}
	if e.b.StartProcess == nil {
		if len(e.errs) > 0 {
			return nil
		}
		return skip("Backend.StartProcess is nil")
	}
	p := e.smallest()
	ats := e.disjoint(p)
	if len(ats) < 2 {
		return skip("the smallest profile fits only once")
	}
	busy, ok1 := e.mustCreate(ctx, p, ats[0])
	calm, ok2 := e.mustCreate(ctx, p, ats[1])
	if !ok1 || !ok2 {
		return nil
	}
	ci := busy.ComputeInstances[0]
	stop, err := e.b.StartProcess(ctx, e.gpu, ci.MIGUUID)
	if err != nil {
		e.failf("StartProcess(%s): %v", ci.MIGUUID, err)
		return nil
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()
	r, err := e.r.Processes(ctx, e.gpu)
	if err != nil || r.Total != 1 || r.ByGPUInstance[busy.GIID] != 1 || r.ByGPUInstance[calm.GIID] != 0 || !r.Busy() {
		e.failf("Processes with one process on GI %d = %+v, %v; want Total 1, GI %d: 1", busy.GIID, r, err, busy.GIID)
	}
	err = e.r.DestroyComputeInstance(ctx, e.gpu, busy.GIID, ci.ID)
	e.expectKind("DestroyComputeInstance with a process", err, e.gpu, realize.ErrInUse)
	err = e.r.DestroyGPUInstance(ctx, e.gpu, busy.GIID)
	e.expectKind("DestroyGPUInstance with a process", err, e.gpu, realize.ErrInUse)
	e.expectListed(ctx, busy)
	stopped = true
	if err := stop(); err != nil {
		e.failf("stopping the process: %v", err)
		return nil
	}
	if r, err := e.r.Processes(ctx, e.gpu); err != nil || r.Total != 0 {
		e.failf("Processes after the process stopped = %+v, %v; want none", r, err)
	}
	return nil
})

var checkConcurrency = checkFunc(func(ctx context.Context, e *env) error {
	p := e.smallest()
	ats := e.disjoint(p)
	insts := make([]realize.Instance, len(ats))
	errs := make([]error, len(ats))
	var wg sync.WaitGroup
	for i, at := range ats {
		wg.Go(func() { insts[i], errs[i] = e.r.CreateInstance(ctx, e.gpu, p.Index, at) })
	}
	wg.Wait()
	ids := map[uint32]bool{}
	for i, err := range errs {
		if err != nil {
			e.failf("parallel CreateInstance(%s at %v): %v", p.Name, ats[i], err)
			continue
		}
		e.created[insts[i].GIID] = true
		if ids[insts[i].GIID] || insts[i].Placement != ats[i] {
			e.failf("parallel create at %v: got GI %d at %v (duplicate ID or wrong place)", ats[i], insts[i].GIID, insts[i].Placement)
		}
		ids[insts[i].GIID] = true
	}
	destroyErrs := make([]error, len(ats))
	for i, err := range errs {
		if err == nil {
			wg.Go(func() { destroyErrs[i] = e.destroyConcurrently(ctx, insts[i]) })
		}
	}
	wg.Wait()
	for i, err := range destroyErrs {
		if err != nil {
			e.failf("parallel destroy: %v", err)
		} else if errs[i] == nil {
			delete(e.created, insts[i].GIID)
		}
	}

	// Racing creates of one range: exactly one winner.
	big := slices.MaxFunc(e.profiles, func(a, b capability.GIProfileInfo) int {
		return compareUint(a.Placements[0].Size, b.Placements[0].Size)
	})
	const racers = 4
	won := make([]realize.Instance, racers)
	raceErrs := make([]error, racers)
	var mu sync.Mutex
	for i := range racers {
		wg.Go(func() {
			inst, err := e.r.CreateInstance(ctx, e.gpu, big.Index, big.Placements[0])
			mu.Lock()
			defer mu.Unlock()
			won[i], raceErrs[i] = inst, err
			if err == nil {
				e.created[inst.GIID] = true
			}
		})
	}
	wg.Wait()
	winners := 0
	for _, err := range raceErrs {
		switch {
		case err == nil:
			winners++
		default:
			e.expectKind(fmt.Sprintf("racing CreateInstance(%s at %v)", big.Name, big.Placements[0]), err, e.gpu, realize.ErrOccupied)
		}
	}
	if winners != 1 {
		e.failf("%d of %d racing creates of %s at %v won, want exactly 1", winners, racers, big.Name, big.Placements[0])
	}
	return nil
})

var checkCanceled = checkFunc(func(ctx context.Context, e *env) error {
	done, cancel := context.WithCancel(ctx)
	cancel()
	p := e.smallest()
	inst, err := e.r.CreateInstance(done, e.gpu, p.Index, p.Placements[0])
	if err == nil {
		e.created[inst.GIID] = true
		e.failf("CreateInstance with a done context succeeded")
	} else if !errors.Is(err, context.Canceled) {
		e.failf("CreateInstance with a done context: %v, want context.Canceled", err)
	}
	if _, err := e.r.Instances(done, e.gpu); !errors.Is(err, context.Canceled) {
		e.failf("Instances with a done context: %v, want context.Canceled", err)
	}
	if left := e.list(ctx); len(left) != 0 {
		e.failf("a create with a done context left %d instances", len(left))
	}
	return nil
})

var checkMIGDisabled = checkFunc(func(ctx context.Context, e *env) error {
	for _, d := range e.devs {
		if d.MIGMode != capability.MIGDisabled {
			continue
		}
		profs, err := e.r.GIProfiles(ctx, d.Index)
		if err != nil || len(profs) == 0 {
			profs = e.profiles // NVML may not list profiles without MIG; try ours
		}
		p := profs[0]
		_, err = e.r.CreateInstance(ctx, d.Index, p.Index, p.Placements[0])
		e.expectKind(fmt.Sprintf("CreateInstance on MIG-disabled GPU %d", d.Index), err, d.Index, realize.ErrMIGDisabled)
		insts, err := e.r.Instances(ctx, d.Index)
		if err == nil {
			e.failf("Instances on MIG-disabled GPU %d listed %d instances, want ErrMIGDisabled", d.Index, len(insts))
			return nil
		}
		e.expectKind(fmt.Sprintf("Instances on MIG-disabled GPU %d", d.Index), err, d.Index, realize.ErrMIGDisabled)
		return nil
	}
	return skip("no GPU has MIG disabled")
})

// destroyConcurrently is destroy without bookkeeping, safe to call from
// several goroutines.
func (e *env) destroyConcurrently(ctx context.Context, inst realize.Instance) error {
	for _, ci := range inst.ComputeInstances {
		if err := e.r.DestroyComputeInstance(ctx, e.gpu, inst.GIID, ci.ID); err != nil {
			return fmt.Errorf("DestroyComputeInstance(GPU %d, GI %d, CI %d): %w", e.gpu, inst.GIID, ci.ID, err)
		}
	}
	if err := e.r.DestroyGPUInstance(ctx, e.gpu, inst.GIID); err != nil {
		return fmt.Errorf("DestroyGPUInstance(GPU %d, GI %d): %w", e.gpu, inst.GIID, err)
	}
	return nil
}
