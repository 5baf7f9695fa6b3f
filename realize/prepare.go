package realize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// Prepare realizes every device of the holder holderUID of d, for a DRA
// driver's NodePrepareResources, and returns them ordered by
// (ContainerIndex, DeviceIndex); Device.Index is the device's position in
// Holder.Devices.
//
// It follows Allocate's rules (the package documentation's "Safety
// rules"): it reconciles against d, checks every device before creating
// anything, creates only the exact placement, returns an instance already
// managed for a device, adopts one its recorded runtime identity names
// (or, with d.AdoptAtPlacement, the idle one at its placement, as Adopt
// would) and on failure destroys only what it created. It writes no
// record: the caller persists each Device.Runtime and reports it in later
// demands. A repeated call returns the same MIG UUIDs.
//
// Errors are an [*EntryError] for a failed device (its PodUID is the
// holder's UID, its Index the device's position), [ErrConflict] for a
// conflicting holder, an error matching reservation.ErrNotRequested or the
// device's own Untrusted error for an untrusted device, one wrapping the
// holder's Err or reservation's validation errors for an unreadable
// holder, [ErrNoReservation] when d lists no such holder or it has no
// device, [ErrInactivePod] when it is released, and [ErrInvalidRequest]
// for an empty UID.
func (m *Manager) Prepare(ctx context.Context, d Demand, holderUID string) ([]Device, error) {
	if holderUID == "" {
		return nil, fmt.Errorf("%w: empty holder UID", ErrInvalidRequest)
	}
	h, ok := d.holder(holderUID)
	if !ok || len(h.Devices) == 0 {
		return nil, fmt.Errorf("%w: holder %s has no listed device", ErrNoReservation, holderUID)
	}
	if h.Released {
		return nil, fmt.Errorf("%w: holder %s/%s (%s) is released", ErrInactivePod, h.Namespace, h.Name, h.UID)
	}
	unlock, err := m.owners.lock(ctx, holderRef(holderUID))
	if err != nil {
		return nil, err
	}
	defer unlock()

	want := demandSet(d)
	_, _ = m.reconcile(ctx, &want) // failures are in the report; they do not block this holder
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries := make([]reservation.Allocation, len(h.Devices))
	mine := make([]int, len(h.Devices))
	for i := range h.Devices {
		entries[i], mine[i] = h.Devices[i].Allocation, i
	}
	slices.SortFunc(mine, func(a, b int) int {
		return cmp.Or(cmp.Compare(entries[a].ContainerIndex, entries[b].ContainerIndex), cmp.Compare(entries[a].DeviceIndex, entries[b].DeviceIndex))
	})
	if want.IsUnknown(holderUID) {
		return nil, m.untrustedHolder(ctx, h, &want, entries, mine)
	}
	var untrusted []error
	for _, i := range mine {
		if err := h.Devices[i].Untrusted; err != nil {
			untrusted = append(untrusted, err)
		}
	}
	if len(untrusted) > 0 {
		return nil, fmt.Errorf("realize: holder %s/%s (%s): untrusted device: %w", h.Namespace, h.Name, h.UID, errors.Join(untrusted...))
	}
	steps, err := m.plan(ctx, holderUID, entries, mine)
	if err != nil {
		return nil, err
	}
	devices, _, err := m.realizeSteps(ctx, &want, holderUID, steps)
	return devices, err
}

// holderRef is the lock a whole holder's Prepare and Unprepare take. Its
// container index cannot be an Allocate's.
func holderRef(uid string) containerRef { return containerRef{podUID: uid, container: -1} }

// untrustedHolder refuses a holder the desired set could not trust.
func (m *Manager) untrustedHolder(ctx context.Context, h *Holder, want *desiredSet, entries []reservation.Allocation, mine []int) error {
	reasons := errors.Join(want.podReasons(h.UID)...)
	if errors.Is(reasons, reservation.ErrConflict) {
		e := entries[mine[0]]
		m.stats.conflicts.Add(1)
		err := &ConflictError{Key: Key{GPU: -1, Profile: e.Profile, Placement: e.Placement}, Owner: ownerOf(h.UID, e),
			Reason: "the holder's devices conflict with another holder's", Cause: reasons}
		m.log.WarnContext(ctx, "holder refused", "holder", h.UID, "err", err)
		return err
	}
	return fmt.Errorf("realize: holder %s/%s (%s) is not trusted: %w", h.Namespace, h.Name, h.UID, reasons)
}

// UnprepareReport says what [Manager.Unprepare] did.
type UnprepareReport struct {
	// Adopted are the holder's live instances that were not managed (a
	// restart) and were taken over to be released.
	Adopted []ManagedInstance
	// Released are the holder's instances destroyed.
	Released []ManagedInstance
	// Vanished are the holder's managed instances that were already gone
	// from the hardware; they are forgotten.
	Vanished []ManagedInstance
	// Kept are the holder's instances that were not destroyed: in use
	// (processes), or named by another holder's runtime identity. They
	// stay managed; a later Unprepare or reconcile retries.
	Kept []KeptInstance
}

// Unprepare destroys the instances of the holder holderUID, for a DRA
// driver's NodeUnprepareResources: the kubelet says none of its users runs
// any more, so the holder counts as released whatever d says of it. d is
// the current listing (the holder may be missing from it); the holder's
// devices it lists, with their recorded runtime identities, let Unprepare
// take over instances a restart left unmanaged before destroying them.
//
// The package documentation's rule for Unprepare ("Safety rules") says
// what it destroys and what it keeps: an instance kept because it runs
// processes ([ErrInUse]) or because another listed holder's runtime
// identity names it ([ErrConflict]) is reported Kept, and the error joins
// their errors. Unprepare is idempotent: with nothing left of the holder
// it returns an empty report and nil.
func (m *Manager) Unprepare(ctx context.Context, d Demand, holderUID string) (UnprepareReport, error) {
	if holderUID == "" {
		return UnprepareReport{}, fmt.Errorf("%w: empty holder UID", ErrInvalidRequest)
	}
	unlock, err := m.owners.lock(ctx, holderRef(holderUID))
	if err != nil {
		return UnprepareReport{}, err
	}
	defer unlock()

	gone := demandSet(d.withReleased(holderUID, true))
	var rep UnprepareReport
	var errs []error
	if h, listed := d.holder(holderUID); listed {
		errs = append(errs, m.takeHolder(ctx, &gone, h, &rep)...)
	}
	for _, r := range m.records() {
		if r.Owner.PodUID != holderUID {
			continue
		}
		if err := m.unprepareOne(ctx, &gone, r, &rep); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// takeHolder takes the unprepared holder's live devices that are not
// managed (after a restart) under management, so that Unprepare can
// release them: an instance the device's recorded runtime identity names,
// verified exactly, or, with Demand.AdoptAtPlacement and no recorded
// identity, the instance at exactly its GPU, profile and placement with
// one compute instance (unless another holder's runtime identity names
// that one: then it is not the holder's). One that another holder's
// runtime identity names as well as the holder's is not provably the
// holder's ([ErrConflict]), one that runs processes
// cannot be destroyed yet ([ErrInUse]); both are errors, so kubelet
// retries. Another holder wanting the same placement does not stop it:
// under the protocol a prepared holder's identity is recorded before
// Prepare's answer, so an unrecorded instance there is not that holder's.
func (m *Manager) takeHolder(ctx context.Context, gone *desiredSet, h *Holder, rep *UnprepareReport) []error {
	if len(h.Devices) == 0 {
		return nil
	}
	devs, err := m.hw.Devices(ctx)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, dev := range devs {
		var mine []reservation.Entry
		for j, w := range h.Devices {
			if w.GPUUUID == dev.UUID && w.Untrusted == nil { // an untrusted device names nothing of the holder's
				mine = append(mine, reservation.Entry{PodUID: h.UID, Namespace: h.Namespace, Name: h.Name, Index: j, Allocation: w.Allocation})
			}
		}
		if len(mine) == 0 || dev.MIGMode != capability.MIGEnabled {
			continue
		}
		if err := m.takeOn(ctx, gone, dev, mine, rep); err != nil {
			errs = append(errs, fmt.Errorf("realize: unprepare holder %s on GPU %d (%s): %w", h.UID, dev.Index, dev.UUID, err))
		}
	}
	return errs
}

func (m *Manager) takeOn(ctx context.Context, gone *desiredSet, dev capability.DeviceInfo, mine []reservation.Entry, rep *UnprepareReport) error {
	unlock, err := m.locks.Lock(ctx, dev.Index)
	if err != nil {
		return err
	}
	defer unlock()
	insts, err := m.hw.Instances(ctx, dev.Index)
	if err != nil {
		return err
	}
	procs, err := m.hw.Processes(ctx, dev.Index)
	if err != nil {
		return err
	}
	gpu, err := m.capabilityOf(ctx, dev)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range mine {
		owner := entryOwner(&e)
		key := Key{GPU: dev.Index, Profile: e.Profile, Placement: e.Placement}
		prof := gpu.Profile(e.Profile)
		if m.lookup(key) != nil || prof == nil {
			continue // managed (the holder's is released next), or nothing of this profile can be live
		}
		gi, rt, recorded, ok := holderInstance(insts, prof, &e, gone.atPlacement)
		if !ok || m.managedGI(dev.Index, gi) {
			continue
		}
		_, named := gone.namedByOther(rt.MIGUUID, owner)
		_, endedNamed := gone.endedOwner(rt.MIGUUID, owner)
		if !recorded && (named || endedNamed) {
			continue // found by placement, but another holder's recorded instance: not this one's
		}
		if o, ok := gone.namedByOther(rt.MIGUUID, owner); ok {
			errs = append(errs, &ConflictError{Key: key, Owner: owner, Holder: o, Reason: "another holder names the live instance " + rt.MIGUUID})
			continue
		}
		if o, ok := gone.endedOwner(rt.MIGUUID, owner); ok {
			errs = append(errs, &ConflictError{Key: key, Owner: owner, Holder: o, Reason: "another released holder names the live instance " + rt.MIGUUID})
			continue
		}
		if n := procs.ByGPUInstance[gi.GIID]; n > 0 {
			errs = append(errs, &ReleaseError{Key: key, Owner: owner, GIID: gi.GIID,
				Err: fmt.Errorf("%w: %d processes run on the holder's unmanaged instance", ErrInUse, n)})
			continue
		}
		rec := &record{ManagedInstance: ManagedInstance{Key: key, Owner: owner, GPUUUID: e.GPUUUID,
			GIIndex: gi.Profile, Runtime: rt, Origin: OriginAdopted}}
		m.store(rec)
		rep.Adopted = append(rep.Adopted, rec.ManagedInstance)
		m.stats.adoptions.Add(1)
		m.log.InfoContext(ctx, "adopted instance to unprepare it", instanceAttrs(rec)...)
	}
	return errors.Join(errs...)
}

// holderInstance finds the live instance of the holder's entry e: the
// recorded one when e records a runtime identity (none when it is gone or
// does not match), else, with atPlacement, the one at e's placement with
// e's profile and one compute instance. It reports whether e's runtime
// identity was recorded, and false when no instance is found.
func holderInstance(insts []Instance, prof *capability.Profile, e *reservation.Entry, atPlacement bool) (Instance, reservation.RuntimeIdentity, bool, bool) {
	rt, recorded := e.Runtime()
	switch {
	case recorded:
		g, ok := findGI(insts, rt.GPUInstanceID)
		if !ok || verify(g, prof.GIProfileIndex, e.Placement, rt) != "" {
			return Instance{}, rt, true, false // gone, or not the recorded instance
		}
		return g, rt, true, true
	case atPlacement:
		g, ok := findAt(insts, e.Placement)
		if !ok || g.Profile != prof.GIProfileIndex || len(g.ComputeInstances) != 1 {
			return Instance{}, rt, false, false
		}
		ci := g.ComputeInstances[0]
		return g, reservation.RuntimeIdentity{MIGUUID: ci.MIGUUID, GPUInstanceID: g.GIID, ComputeInstanceID: ci.ID}, false, true
	}
	return Instance{}, rt, false, false
}

// unprepareOne destroys one managed instance of the unprepared holder
// under its GPU lock unless it is in use or another holder claims it.
func (m *Manager) unprepareOne(ctx context.Context, gone *desiredSet, r *record, rep *UnprepareReport) error {
	unlock, err := m.locks.Lock(ctx, r.Key.GPU)
	if err != nil {
		return err
	}
	defer unlock()
	if m.lookup(r.Key) != r {
		return nil // released by a concurrent reconcile
	}
	// Another holder wanting the same placement wants an instance of its
	// own; one naming this instance's identity may be using it.
	if o, ok := gone.namedByOther(r.Runtime.MIGUUID, r.Owner); ok {
		err := &ConflictError{Key: r.Key, Owner: r.Owner, Holder: o, Reason: "another holder names the instance " + r.Runtime.MIGUUID}
		rep.Kept = append(rep.Kept, KeptInstance{Instance: r.ManagedInstance, Err: err})
		m.stats.conflicts.Add(1)
		m.log.WarnContext(ctx, "not unpreparing an instance another holder claims", instanceAttrs(r)...)
		return err
	}
	vanished, err := m.release(ctx, r)
	switch {
	case err == nil && vanished:
		rep.Vanished = append(rep.Vanished, r.ManagedInstance)
	case err == nil:
		rep.Released = append(rep.Released, r.ManagedInstance)
		m.log.InfoContext(ctx, "unprepared instance", instanceAttrs(r)...)
	default:
		rep.Kept = append(rep.Kept, KeptInstance{Instance: r.ManagedInstance, Err: err})
		m.log.WarnContext(ctx, "could not unprepare instance; keeping it managed", append(instanceAttrs(r), "err", err)...)
		return err
	}
	return nil
}
