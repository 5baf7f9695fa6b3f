package realize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// AllocateRequest asks the manager to realize one container's reservation.
type AllocateRequest struct {
	// Pod is the pod whose container is being started, with its
	// hami.io/vgpu-mig-allocations annotation as the scheduler (and
	// possibly an earlier Allocate) wrote it.
	Pod reservation.Pod
	// ContainerIndex selects the container: init containers first, then
	// regular containers, as in the annotation.
	ContainerIndex int
	// Snapshot is the current listing of the node's pods. Allocate first
	// reconciles against it (destructively only when it authorises that)
	// and uses it to refuse reservations that overlap another active
	// pod's. Pod is added to it when the listing lags behind.
	Snapshot reservation.Snapshot
	// PatchOptions are passed to the annotation patch, e.g. the pod's
	// resourceVersion for optimistic concurrency.
	PatchOptions reservation.PatchOptions
}

// Device is one realized MIG device of an Allocate.
type Device struct {
	// Index is the entry's position in the annotation array.
	Index int
	// Entry is the reservation entry with its runtime identity filled in.
	Entry reservation.Allocation
	// Key is the manager key of the instance.
	Key Key
	// Runtime is the instance's identity: expose Runtime.MIGUUID to the
	// container.
	Runtime reservation.RuntimeIdentity
	// Origin says whether this call created the instance, adopted it, or
	// found it already managed for the same owner.
	Origin Origin
}

// AllocateResult is what a device plugin needs after a successful
// Allocate: the devices to expose and the annotation patch to persist.
type AllocateResult struct {
	// Devices are the container's devices, ordered by DeviceIndex.
	Devices []Device
	// Annotation is the pod's new hami.io/vgpu-mig-allocations value, with
	// the runtime identity of the container's entries filled in.
	Annotation string
	// Patch is the JSON merge patch that sets Annotation on the pod, or
	// nil when the annotation already holds every identity.
	Patch []byte
	// Reconcile is the report of the reconcile pass that ran first.
	Reconcile ReconcileReport
}

// step is one resolved entry of an Allocate.
type step struct {
	index   int
	entry   reservation.Allocation
	owner   Owner
	key     Key
	profile capability.Profile
}

// Allocate realizes the reservation of one container of req.Pod and
// returns the runtime identities and the annotation patch: it reconciles
// against req.Snapshot, then, one entry at a time under that GPU's lock,
// creates the GI and CI at exactly the reserved placement, or returns the
// instance already managed for the entry. The package documentation's
// "Safety rules" say what it checks before creating anything, what it
// refuses with [ErrConflict] and what it rolls back on failure. A repeated
// Allocate returns the same MIG UUIDs, also when two run at once for the
// same container.
//
// Errors are an [*EntryError] for a failed entry (matching its cause:
// [ErrConflict], [ErrMIGDisabled], reservation.ErrUnknownGPU,
// reservation.ErrUnknownProfile, reservation.ErrUnpublishedPlacement, a
// [*HardwareError], a context error), a reservation decode or validation
// error for a malformed annotation, one matching
// reservation.ErrNotRequested when the container's entries fail the trust
// rule (reservation.ValidateRequests against req.Pod.DeviceRequests),
// [ErrNoReservation], [ErrInactivePod] or [ErrInvalidRequest].
func (m *Manager) Allocate(ctx context.Context, req AllocateRequest) (AllocateResult, error) {
	pod := &req.Pod
	if pod.UID == "" || req.ContainerIndex < 0 {
		return AllocateResult{}, fmt.Errorf("%w: pod UID %q, container %d", ErrInvalidRequest, pod.UID, req.ContainerIndex)
	}
	if !pod.Active() {
		return AllocateResult{}, fmt.Errorf("%w: pod %s/%s (%s) phase %q deleting=%t",
			ErrInactivePod, pod.Namespace, pod.Name, pod.UID, pod.Phase, pod.Deleting)
	}
	entries, err := podEntries(pod)
	if err != nil {
		return AllocateResult{}, fmt.Errorf("realize: pod %s/%s (%s) annotation %s: %w", pod.Namespace, pod.Name, pod.UID, reservation.AnnotationKey, err)
	}
	mine := containerEntries(entries, req.ContainerIndex)
	if len(mine) == 0 {
		return AllocateResult{}, fmt.Errorf("%w: pod %s/%s (%s) container %d", ErrNoReservation, pod.Namespace, pod.Name, pod.UID, req.ContainerIndex)
	}
	if err := unrequested(pod, entries, mine); err != nil {
		return AllocateResult{}, fmt.Errorf("realize: pod %s/%s (%s) container %d: %w", pod.Namespace, pod.Name, pod.UID, req.ContainerIndex, err)
	}

	// One call per container at a time: a concurrent call for the same
	// container could otherwise return as managed an instance this call's
	// rollback then destroys.
	unlockOwner, err := m.owners.lock(ctx, containerRef{podUID: pod.UID, container: req.ContainerIndex})
	if err != nil {
		return AllocateResult{}, err
	}
	defer unlockOwner()

	want := desired(req.Snapshot, pod)
	rep, _ := m.reconcile(ctx, &want) // failures are in the report; they do not block this pod
	res := AllocateResult{Reconcile: rep}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if want.IsUnknown(pod.UID) {
		return res, m.untrusted(ctx, pod, &want, mine, entries)
	}

	steps, err := m.plan(ctx, pod.UID, entries, mine)
	if err != nil {
		return res, err
	}
	devices, created, err := m.realizeSteps(ctx, &want, pod.UID, steps)
	if err != nil {
		return res, err
	}
	annotation, patch, err := patchFor(pod, entries, devices, req.PatchOptions)
	if err != nil {
		// What this call created would be handed to no one: undo it.
		err = fmt.Errorf("realize: pod %s/%s (%s) container %d: annotation patch: %w", pod.Namespace, pod.Name, pod.UID, req.ContainerIndex, err)
		return res, m.rollbackAfter(ctx, err, created)
	}
	res.Devices, res.Annotation, res.Patch = devices, annotation, patch
	return res, nil
}

// untrusted refuses a pod that the desired set could not trust: its record
// conflicts with another pod's or carries legacy identifiers.
func (m *Manager) untrusted(ctx context.Context, pod *reservation.Pod, want *desiredSet, mine []int, entries []reservation.Allocation) error {
	reasons := errors.Join(want.podReasons(pod.UID)...)
	if errors.Is(reasons, reservation.ErrConflict) {
		e := entries[mine[0]]
		m.stats.conflicts.Add(1)
		err := &ConflictError{Key: Key{GPU: -1, Profile: e.Profile, Placement: e.Placement}, Owner: ownerOf(pod.UID, e),
			Reason: "the pod's reservation conflicts with another active pod's", Cause: reasons}
		m.log.WarnContext(ctx, "reservation refused", "pod", pod.UID, "err", err)
		return err
	}
	return fmt.Errorf("realize: pod %s/%s (%s) is not trusted: %w", pod.Namespace, pod.Name, pod.UID, reasons)
}

// containerEntries returns the positions of the container's entries,
// ordered by DeviceIndex.
func containerEntries(entries []reservation.Allocation, container int) []int {
	var out []int
	for i := range entries {
		if entries[i].ContainerIndex == container {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b int) int { return cmp.Compare(entries[a].DeviceIndex, entries[b].DeviceIndex) })
	return out
}

// plan resolves each entry to a GPU index and checks it against the GPU's
// MIG mode and capability, before anything is created.
func (m *Manager) plan(ctx context.Context, podUID string, entries []reservation.Allocation, mine []int) ([]step, error) {
	devs, err := m.hw.Devices(ctx)
	if err != nil {
		return nil, err
	}
	gpus := make(map[string]*capability.GPU)
	steps := make([]step, 0, len(mine))
	for _, i := range mine {
		e := entries[i]
		s := step{index: i, entry: e, owner: ownerOf(podUID, e), key: Key{GPU: -1, Profile: e.Profile, Placement: e.Placement}}
		fail := func(err error) error {
			return &EntryError{PodUID: podUID, Index: i, Owner: s.owner, Key: s.key, Err: err}
		}
		gpu, ok := gpus[e.GPUUUID]
		if !ok {
			dev, found := deviceByUUID(devs, e.GPUUUID)
			if !found {
				return nil, fail(fmt.Errorf("%w: %s is not on this node", reservation.ErrUnknownGPU, e.GPUUUID))
			}
			s.key.GPU = dev.Index
			// NVML answers profile queries only in MIG mode.
			if dev.MIGMode != capability.MIGEnabled {
				return nil, fail(fmt.Errorf("%w: GPU %d (%s) MIG mode %s", ErrMIGDisabled, dev.Index, dev.UUID, dev.MIGMode))
			}
			if gpu, err = m.capabilityOf(ctx, dev); err != nil {
				return nil, fail(err)
			}
			gpus[e.GPUUUID] = gpu
		}
		s.key.GPU = gpu.Index
		prof := gpu.Profile(e.Profile)
		if prof == nil {
			return nil, fail(fmt.Errorf("%w: GPU %d (%s) does not support %q", reservation.ErrUnknownProfile, gpu.Index, gpu.UUID, e.Profile))
		}
		if !prof.HasPlacement(e.Placement) {
			return nil, fail(fmt.Errorf("%w: GPU %d does not publish %v for %s", reservation.ErrUnpublishedPlacement, gpu.Index, e.Placement, e.Profile))
		}
		s.profile = *prof
		steps = append(steps, s)
	}
	return steps, nil
}

func deviceByUUID(devs []capability.DeviceInfo, uuid string) (capability.DeviceInfo, bool) {
	for _, d := range devs {
		if d.UUID == uuid {
			return d, true
		}
	}
	return capability.DeviceInfo{}, false
}

// realizeSteps realizes each step in order and rolls back what it created
// when one fails. It returns the devices and the records it created.
func (m *Manager) realizeSteps(ctx context.Context, want *desiredSet, podUID string, steps []step) ([]Device, []*record, error) {
	devices := make([]Device, 0, len(steps))
	var created []*record
	for _, s := range steps {
		d, rec, err := m.realizeOne(ctx, want, s)
		if err != nil {
			err = &EntryError{PodUID: podUID, Index: s.index, Owner: s.owner, Key: s.key, Err: err}
			if errors.Is(err, ErrConflict) {
				m.stats.conflicts.Add(1)
				m.log.WarnContext(ctx, "reservation refused", "key", s.key.String(), "owner", s.owner.String(), "err", err)
			}
			return nil, nil, m.rollbackAfter(ctx, err, created)
		}
		if d.Origin == OriginCreated {
			created = append(created, rec)
		}
		devices = append(devices, d)
	}
	return devices, created, nil
}

// rollbackAfter destroys what a failed attempt created and returns err,
// joined with the rollback's [*ReleaseError] values when that fails too.
func (m *Manager) rollbackAfter(ctx context.Context, err error, created []*record) error {
	if len(created) == 0 {
		return err
	}
	m.stats.rollbacks.Add(1)
	if rbErr := m.rollback(ctx, created); rbErr != nil {
		return errors.Join(err, rbErr)
	}
	return err
}

// rollback destroys the instances one Allocate attempt created, newest
// first, on a context that survives the request's cancellation.
func (m *Manager) rollback(ctx context.Context, created []*record) error {
	ctx, cancel := m.detached(ctx)
	defer cancel()
	var errs []error
	for _, r := range slices.Backward(created) {
		if err := m.releaseLocked(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		m.log.InfoContext(ctx, "rolled back instance", instanceAttrs(r)...)
	}
	return errors.Join(errs...)
}

// releaseLocked takes r's GPU lock and releases r.
func (m *Manager) releaseLocked(ctx context.Context, r *record) error {
	unlock, err := m.locks.Lock(ctx, r.Key.GPU)
	if err != nil {
		return &ReleaseError{Key: r.Key, Owner: r.Owner, GIID: r.Runtime.GPUInstanceID, Err: err}
	}
	defer unlock()
	_, err = m.release(ctx, r)
	return err
}

// realizeOne realizes one step under its GPU's lock. It returns the record
// it created or adopted, if any.
func (m *Manager) realizeOne(ctx context.Context, want *desiredSet, s step) (Device, *record, error) {
	unlock, err := m.locks.Lock(ctx, s.key.GPU)
	if err != nil {
		return Device{}, nil, err
	}
	defer unlock()

	rt, hasRT := s.entry.Runtime()
	if rec := m.lookup(s.key); rec != nil {
		d, ok, err := m.reuse(ctx, s, rec, rt, hasRT)
		if err != nil || ok {
			return d, nil, err
		}
	}
	if err := m.checkClaims(want, s, rt, hasRT); err != nil {
		return Device{}, nil, err
	}
	insts, err := m.hw.Instances(ctx, s.key.GPU)
	if err != nil {
		return Device{}, nil, err
	}
	if hasRT {
		if gi, ok := findMIG(insts, rt.MIGUUID); !ok {
			// The annotated instance no longer exists (a GPU reset, a lost
			// patch): the identity is stale and the patch replaces it.
			m.log.InfoContext(ctx, "annotated instance no longer exists; creating it again",
				"key", s.key.String(), "owner", s.owner.String(), "stale_mig_uuid", rt.MIGUUID)
			hasRT = false
		} else if gi.Placement != s.key.Placement {
			return Device{}, nil, &ConflictError{Key: s.key, Owner: s.owner,
				Reason: fmt.Sprintf("runtime identity names live GI %d at %v, not this key's placement", gi.GIID, gi.Placement)}
		}
	}
	if gi, ok := findAt(insts, s.key.Placement); ok {
		d, rec, done, err := m.takeOver(ctx, want, s, gi, rt, hasRT)
		if err != nil || done {
			return d, rec, err
		}
	}
	return m.create(ctx, s)
}

// reuse handles an entry whose key is already managed. ok is false when
// the managed instance vanished from the hardware and must be created
// again.
func (m *Manager) reuse(ctx context.Context, s step, rec *record, rt reservation.RuntimeIdentity, hasRT bool) (Device, bool, error) {
	if rec.Owner != s.owner {
		return Device{}, false, &ConflictError{Key: s.key, Owner: s.owner, Holder: rec.Owner, Reason: "key is managed for another reservation"}
	}
	insts, err := m.hw.Instances(ctx, s.key.GPU)
	if err != nil {
		return Device{}, false, err
	}
	if hasRT && rt != rec.Runtime {
		// An annotation naming a live instance other than the managed one
		// is refused. One naming nothing live is stale: the instance was
		// recreated and the patch that recorded it was lost.
		if _, ok := findMIG(insts, rt.MIGUUID); ok {
			return Device{}, false, &ConflictError{Key: s.key, Owner: s.owner,
				Reason: fmt.Sprintf("annotation names live instance %s (GI %d, CI %d) but the key holds %s (GI %d, CI %d)",
					rt.MIGUUID, rt.GPUInstanceID, rt.ComputeInstanceID, rec.Runtime.MIGUUID, rec.Runtime.GPUInstanceID, rec.Runtime.ComputeInstanceID)}
		}
		m.log.InfoContext(ctx, "annotation holds a stale identity; the patch will replace it",
			append(instanceAttrs(rec), "stale_mig_uuid", rt.MIGUUID)...)
	}
	if gi, ok := findGI(insts, rec.Runtime.GPUInstanceID); ok && verify(gi, rec.GIIndex, s.key.Placement, rec.Runtime) == "" {
		return device(s, rec.Runtime, OriginManaged), true, nil
	}
	m.log.WarnContext(ctx, "managed instance vanished from the hardware; creating it again", instanceAttrs(rec)...)
	m.forget(rec)
	return Device{}, false, nil
}

// checkClaims refuses an entry that overlaps another owner's managed
// instance or active reservation on the same GPU, or whose runtime
// identity is another managed instance's.
func (m *Manager) checkClaims(want *desiredSet, s step, rt reservation.RuntimeIdentity, hasRT bool) error {
	for _, r := range m.records() {
		if r.Key.GPU == s.key.GPU && r.Key.Placement.Overlaps(s.key.Placement) && r.Owner != s.owner {
			return &ConflictError{Key: s.key, Owner: s.owner, Holder: r.Owner, Reason: "overlaps managed instance " + r.Key.String()}
		}
		if hasRT && r.Runtime.MIGUUID == rt.MIGUUID {
			return &ConflictError{Key: s.key, Owner: s.owner, Holder: r.Owner, Reason: "runtime identity names managed instance " + r.Key.String()}
		}
	}
	if c, ok := want.rival(s.entry.GPUUUID, s.key.Placement, s.owner); ok {
		return &ConflictError{Key: s.key, Owner: s.owner, Holder: entryOwner(&c),
			Reason: fmt.Sprintf("overlaps the reservation %s %v", c.Profile, c.Placement)}
	}
	return nil
}

// takeOver decides what to do with an unmanaged GI found at exactly the
// step's placement. done is true when it returns the device (adopted);
// false means the placement is free again and the caller creates.
//
// An instance the pod's annotation names exactly is adopted (the plugin
// restarted without adopting it); hasRT is true only when the annotated
// MIG device is live at this key. Any other unmanaged instance at the key
// is the remnant of a create that crashed before the pod was patched, or
// of an ended pod that is still listed; no one can prove who used it, so it
// is destroyed and created afresh rather than handed out: a GI without a CI
// at once (nothing can run on it), a complete instance only with an
// authorised snapshot, no process on it and no active reservation naming
// it. An instance the pod's annotation names is never adopted when an
// ended pod's record names it too.
func (m *Manager) takeOver(ctx context.Context, want *desiredSet, s step, gi Instance, rt reservation.RuntimeIdentity, hasRT bool) (Device, *record, bool, error) {
	if gi.Profile != s.profile.GIProfileIndex {
		return Device{}, nil, false, fmt.Errorf("%w: unmanaged GI %d of profile index %d occupies %v",
			ErrOccupied, gi.GIID, gi.Profile, s.key.Placement)
	}
	if len(gi.ComputeInstances) == 0 {
		return Device{}, nil, false, m.removeRemnant(ctx, s, gi)
	}
	if !want.Authorized {
		return Device{}, nil, false, &ConflictError{Key: s.key, Owner: s.owner,
			Reason: fmt.Sprintf("unmanaged GI %d occupies the key; taking it over needs an authorised snapshot", gi.GIID)}
	}
	// A process on an unmanaged instance means someone uses it.
	procs, err := m.hw.Processes(ctx, s.key.GPU)
	if err != nil {
		return Device{}, nil, false, err
	}
	if procs.ByGPUInstance[gi.GIID] > 0 {
		return Device{}, nil, false, fmt.Errorf("%w: unmanaged GI %d at %v runs processes", ErrOccupied, gi.GIID, s.key.Placement)
	}
	if !hasRT && want.atPlacement && m.ownsAt(want, s, gi) {
		// A claim's placement is the allocator's, not its creator's: the
		// idle instance at exactly it, that no released holder may have
		// left and no one else names, is this device's whose recorded
		// identity was lost (Demand.AdoptAtPlacement).
		ci := gi.ComputeInstances[0]
		rt = reservation.RuntimeIdentity{MIGUUID: ci.MIGUUID, GPUInstanceID: gi.GIID, ComputeInstanceID: ci.ID}
		rec := &record{ManagedInstance: ManagedInstance{Key: s.key, Owner: s.owner, GPUUUID: s.entry.GPUUUID,
			GIIndex: gi.Profile, Runtime: rt, Origin: OriginAdopted}}
		m.store(rec)
		m.stats.adoptions.Add(1)
		m.log.InfoContext(ctx, "adopted instance at the reserved placement", instanceAttrs(rec)...)
		return device(s, rt, OriginAdopted), rec, true, nil
	}
	if !hasRT {
		// Not the pod's own: a remnant (of a lost patch, or of an ended
		// pod that is still listed), unless an active entry names it.
		if want.claimsMIG(gi) {
			return Device{}, nil, false, &ConflictError{Key: s.key, Owner: s.owner,
				Reason: fmt.Sprintf("unmanaged GI %d at the key holds a MIG device another reservation names", gi.GIID)}
		}
		return Device{}, nil, false, m.removeRemnant(ctx, s, gi)
	}
	// Handing it out: never an ended pod's device to a copy of its record.
	for _, ci := range gi.ComputeInstances {
		if o, ok := want.endedOwner(ci.MIGUUID, s.owner); ok {
			return Device{}, nil, false, &ConflictError{Key: s.key, Owner: s.owner, Holder: o,
				Reason: "the live instance " + ci.MIGUUID + " belongs to an ended pod"}
		}
	}
	if why := verify(gi, s.profile.GIProfileIndex, s.key.Placement, rt); why != "" {
		return Device{}, nil, false, &ConflictError{Key: s.key, Owner: s.owner, Reason: "annotated runtime identity does not match the live instance: " + why}
	}
	rec := &record{ManagedInstance: ManagedInstance{Key: s.key, Owner: s.owner, GPUUUID: s.entry.GPUUUID,
		GIIndex: gi.Profile, Runtime: rt, Origin: OriginAdopted}}
	m.store(rec)
	m.stats.adoptions.Add(1)
	m.log.InfoContext(ctx, "adopted instance on allocate", instanceAttrs(rec)...)
	return device(s, rt, OriginAdopted), rec, true, nil
}

// ownsAt reports whether the unmanaged, idle instance gi at exactly the
// step's placement is the step's by placement alone: one compute instance,
// no released holder's device overlapping it, no ended holder's or other
// entry's runtime identity naming it.
func (m *Manager) ownsAt(want *desiredSet, s step, gi Instance) bool {
	if len(gi.ComputeInstances) != 1 {
		return false
	}
	mig := gi.ComputeInstances[0].MIGUUID
	_, ended := want.endedOverlap(s.entry.GPUUUID, s.key.Placement, s.owner)
	_, endedNamed := want.endedOwner(mig, s.owner)
	_, named := want.namedByOther(mig, s.owner)
	return !ended && !endedNamed && !named
}

// removeRemnant destroys an unmanaged instance at the step's key so that
// it can be created afresh. The caller holds the GPU's lock.
func (m *Manager) removeRemnant(ctx context.Context, s step, gi Instance) error {
	if err := m.destroyUnmanaged(ctx, s.key.GPU, gi); err != nil {
		return err
	}
	m.log.InfoContext(ctx, "removed unmanaged remnant at reserved placement", "key", s.key.String(),
		"owner", s.owner.String(), "gi", gi.GIID, "cis", len(gi.ComputeInstances))
	return nil
}

// create creates the step's instance at exactly its placement.
func (m *Manager) create(ctx context.Context, s step) (Device, *record, error) {
	inst, err := m.hw.CreateInstance(ctx, s.key.GPU, s.profile.GIProfileIndex, s.key.Placement)
	if err != nil {
		m.log.WarnContext(ctx, "create failed", "key", s.key.String(), "owner", s.owner.String(), "err", err)
		return Device{}, nil, err
	}
	if inst.Placement != s.key.Placement || inst.Profile != s.profile.GIProfileIndex ||
		len(inst.ComputeInstances) != 1 || inst.ComputeInstances[0].MIGUUID == "" {
		err := fmt.Errorf("%w: created GI %d at %v (profile index %d) with %d compute instances, want %v (profile index %d) with one",
			ErrHardwareMismatch, inst.GIID, inst.Placement, inst.Profile, len(inst.ComputeInstances), s.key.Placement, s.profile.GIProfileIndex)
		if inst.Placement == s.key.Placement { // what this call just created: undo it
			for _, ci := range inst.ComputeInstances {
				if e := m.hw.DestroyComputeInstance(ctx, s.key.GPU, inst.GIID, ci.ID); e != nil {
					err = errors.Join(err, e)
				}
			}
			if e := m.destroyGI(ctx, s.key, s.owner, inst.GIID); e != nil {
				err = errors.Join(err, e)
			}
		}
		return Device{}, nil, err
	}
	ci := inst.ComputeInstances[0]
	rt := reservation.RuntimeIdentity{MIGUUID: ci.MIGUUID, GPUInstanceID: inst.GIID, ComputeInstanceID: ci.ID}
	rec := &record{ManagedInstance: ManagedInstance{Key: s.key, Owner: s.owner, GPUUUID: s.entry.GPUUUID,
		GIIndex: inst.Profile, Runtime: rt, Origin: OriginCreated}}
	m.store(rec)
	m.stats.creates.Add(1)
	m.log.InfoContext(ctx, "created instance", instanceAttrs(rec)...)
	return device(s, rt, OriginCreated), rec, nil
}

func device(s step, rt reservation.RuntimeIdentity, o Origin) Device {
	return Device{Index: s.index, Entry: s.entry.WithRuntime(rt), Key: s.key, Runtime: rt, Origin: o}
}

// patchFor returns the pod's new annotation value and the merge patch that
// sets it, or a nil patch when the annotation already holds every identity.
// A stale identity (the annotated instance no longer existed and was
// created again) is replaced.
func patchFor(pod *reservation.Pod, entries []reservation.Allocation, devices []Device, opts reservation.PatchOptions) (string, []byte, error) {
	allocs := slices.Clone(entries)
	changed := false
	for _, d := range devices {
		if cur, ok := allocs[d.Index].Runtime(); ok && cur != d.Runtime {
			allocs[d.Index] = allocs[d.Index].Scheduled()
		}
		c, err := reservation.ApplyRuntime(allocs, d.Entry.ContainerIndex, d.Entry.DeviceIndex, d.Runtime)
		if err != nil {
			return "", nil, err
		}
		changed = changed || c
	}
	if !changed {
		return pod.Annotations[reservation.AnnotationKey], nil, nil
	}
	if err := reservation.Validate(allocs); err != nil {
		return "", nil, err
	}
	value := reservation.EncodeString(allocs)
	return value, reservation.AnnotationPatch(value, opts), nil
}

// findGI returns the live GI with the given ID.
func findGI(insts []Instance, id uint32) (Instance, bool) {
	for _, in := range insts {
		if in.GIID == id {
			return in, true
		}
	}
	return Instance{}, false
}

// findMIG returns the live GI holding the MIG device uuid.
func findMIG(insts []Instance, uuid string) (Instance, bool) {
	for _, in := range insts {
		for _, ci := range in.ComputeInstances {
			if ci.MIGUUID == uuid {
				return in, true
			}
		}
	}
	return Instance{}, false
}

// findAt returns the live GI at exactly placement p.
func findAt(insts []Instance, p capability.Placement) (Instance, bool) {
	for _, in := range insts {
		if in.Placement == p {
			return in, true
		}
	}
	return Instance{}, false
}

// verify checks a live GI against a recorded or annotated identity and
// returns what differs, or "" when it matches exactly: profile, placement,
// GI ID, a single CI with the CI ID and MIG UUID.
func verify(gi Instance, profile capability.GIProfileIndex, at capability.Placement, rt reservation.RuntimeIdentity) string {
	switch {
	case gi.GIID != rt.GPUInstanceID:
		return fmt.Sprintf("GI ID %d, want %d", gi.GIID, rt.GPUInstanceID)
	case gi.Profile != profile:
		return fmt.Sprintf("GI %d has profile index %d, want %d", gi.GIID, gi.Profile, profile)
	case gi.Placement != at:
		return fmt.Sprintf("GI %d is at %v, want %v", gi.GIID, gi.Placement, at)
	case len(gi.ComputeInstances) != 1:
		return fmt.Sprintf("GI %d has %d compute instances, want 1", gi.GIID, len(gi.ComputeInstances))
	case gi.ComputeInstances[0].ID != rt.ComputeInstanceID:
		return fmt.Sprintf("GI %d has CI %d, want %d", gi.GIID, gi.ComputeInstances[0].ID, rt.ComputeInstanceID)
	case gi.ComputeInstances[0].MIGUUID != rt.MIGUUID:
		return fmt.Sprintf("GI %d CI %d is %s, want %s", gi.GIID, rt.ComputeInstanceID, gi.ComputeInstances[0].MIGUUID, rt.MIGUUID)
	}
	return ""
}

func instanceAttrs(r *record) []any {
	return []any{
		slog.String("key", r.Key.String()),
		slog.String("owner", r.Owner.String()),
		slog.String("gpu_uuid", r.GPUUUID),
		slog.String("mig_uuid", r.Runtime.MIGUUID),
		slog.Uint64("gi", uint64(r.Runtime.GPUInstanceID)),
		slog.Uint64("ci", uint64(r.Runtime.ComputeInstanceID)),
		slog.String("origin", r.Origin.String()),
	}
}
