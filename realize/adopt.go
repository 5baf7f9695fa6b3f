package realize

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// AdoptReport says what [Manager.Adopt] found and did.
type AdoptReport struct {
	// Authorized is true when the snapshot was trustworthy enough to clean
	// idle GPUs and adopt instances; Reasons say why not otherwise.
	Authorized bool
	Reasons    []error
	// GPUs describes every GPU of the node, in index order.
	GPUs []GPUReport
	// Adopted are live instances verified against a reservation's complete
	// runtime identity and now managed.
	Adopted []ManagedInstance
	// Pending are active reservations without runtime identity: scheduled
	// but not yet realized. They are left for Allocate.
	Pending []reservation.Entry
	// Unverified are active reservations with a runtime identity that were
	// not checked or adopted because the snapshot was not authorised; a
	// later Adopt with an authorised snapshot adopts them.
	Unverified []reservation.Entry
	// Rejected are reservations with a runtime identity that were not
	// adopted, with the reason (a mismatch with the hardware, a conflict, an
	// unknown GPU or profile).
	Rejected []Rejection
	// Leaks are unmanaged instances left on GPUs that were not cleaned. See
	// [Manager.CollectLeaks].
	Leaks []Leak
}

// GPUReport is one GPU's state at adoption.
type GPUReport struct {
	Index int
	UUID  string
	// Busy is true when the GPU carries work: active or withheld
	// reservations on it, processes, instances already managed, or an
	// instance whose MIG UUID a reservation names. Busy GPUs are never
	// cleaned.
	Busy bool
	// Reservations counts active and withheld reservation entries on it.
	Reservations int
	// Processes counts compute processes on it.
	Processes int
	// Cleaned counts the instances destroyed to make an idle GPU clean.
	Cleaned int
	// MIGMode is the MIG mode after adoption; MIGEnabledNow is true when
	// Adopt switched it on.
	MIGMode       capability.MIGMode
	MIGEnabledNow bool
	// MIGModeErr is why Adopt, with [Options.EnableMIG], could not switch
	// MIG mode on for this idle GPU: [ErrResetRequired] while the change
	// waits for a GPU reset, or the backend's refusal. The GPU stays out of
	// MIG use; Adopt's error does not include it.
	MIGModeErr error
	// Err is why the GPU could not be inspected, cleaned or switched to
	// MIG mode, or nil.
	Err error
}

// Rejection is a reservation Adopt did not adopt.
type Rejection struct {
	Entry reservation.Entry
	Err   error // matches ErrHardwareMismatch, ErrConflict, ErrNotFound, ErrMIGDisabled, reservation sentinels
}

// Leak is an unmanaged instance on a GPU.
type Leak struct {
	GPU       int
	GPUUUID   string
	GIID      uint32
	Profile   capability.GIProfileIndex
	Placement capability.Placement
	// ComputeInstances counts its CIs; 0 is a GI without a CI, typically
	// left by a crash between GI and CI creation.
	ComputeInstances int
	// Claimed is true when a reservation may own it: an active one at
	// exactly its placement (the not yet patched instance of a pending
	// reservation, left to Allocate), one naming one of its MIG devices, or
	// an untrusted pod's overlapping it. A claimed instance is never
	// collected. One that only overlaps an active reservation elsewhere is
	// not claimed: it blocks that reservation and belongs to no one.
	Claimed bool
	// Processes counts processes on it.
	Processes int
}

// String formats the leak as "gpu<index> GI <id> <placement> (<n> CIs)".
func (l Leak) String() string {
	return fmt.Sprintf("gpu%d GI %d %v (%d CIs)", l.GPU, l.GIID, l.Placement, l.ComputeInstances)
}

// Adopt recovers the manager's state after a (re)start from snap and the
// live hardware, and prepares idle GPUs. It is safe to call again later,
// for example when a complete pod listing becomes available: instances
// already managed are left as they are.
//
// For each GPU, under its lock:
//
//  1. A GPU is busy when an active or withheld reservation names it or
//     one of its MIG devices, it runs processes, or the manager already
//     manages instances on it.
//  2. When snap authorises destruction, an idle GPU is cleaned: every
//     leftover CI and GI is destroyed, and, with [Options.EnableMIG], MIG
//     mode is switched on through [MIGModeSetter]. Without authorisation no
//     GPU is cleaned.
//  3. When snap is authorised, each active reservation with a complete
//     runtime identity is verified against the live instance with its GI
//     ID (profile, placement, GI ID, CI ID, MIG UUID) and adopted when
//     everything matches and no other owner claims it. Mismatches are
//     Rejected, never adopted and never destroyed. Without authorisation
//     such reservations are Unverified and nothing is adopted. Reservations
//     without runtime identity are Pending, left for Allocate. Pods with
//     malformed records or legacy v2.9 identifiers are reported in Reasons
//     and nothing of theirs is adopted.
//  4. Unmanaged instances left on GPUs that were not cleaned are Leaks.
//
// Adoption destroys nothing, but it takes ownership: a later reconcile
// destroys an adopted instance once its owner ends. On a partial listing,
// or one with an untrusted record, the pod that really owns an instance
// may be missing or unreadable while another pod's copy of its record
// looks valid, so adoption, like idle GPU cleanup, needs an authorised
// snapshot. Call Adopt again once an authorised snapshot is available if
// the first call had none; until then unadopted instances are left alone.
//
// The error joins the per-GPU failures (also in GPUReport.Err); Adopt fails
// as a whole only when the GPUs cannot be listed or ctx ends.
func (m *Manager) Adopt(ctx context.Context, snap reservation.Snapshot) (AdoptReport, error) {
	want := desired(snap, nil)
	return m.adopt(ctx, &want)
}

// adopt runs adoption against a desired set, from either protocol.
func (m *Manager) adopt(ctx context.Context, want *desiredSet) (AdoptReport, error) {
	rep := AdoptReport{Authorized: want.Authorized, Reasons: want.Reasons}
	devs, err := m.hw.Devices(ctx)
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, dev := range devs {
		g, err := m.adoptGPU(ctx, want, dev, &rep)
		if err != nil {
			g.Err = err
			errs = append(errs, fmt.Errorf("realize: adopt GPU %d (%s): %w", dev.Index, dev.UUID, err))
		}
		rep.GPUs = append(rep.GPUs, g)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() == nil {
		m.stats.leaks.Store(int64(len(rep.Leaks)))
		m.reportOffNode(ctx, want, devs, &rep)
	}
	m.log.InfoContext(ctx, "adoption finished", "authorized", rep.Authorized, "adopted", len(rep.Adopted),
		"pending", len(rep.Pending), "unverified", len(rep.Unverified), "rejected", len(rep.Rejected), "leaks", len(rep.Leaks))
	return rep, errors.Join(errs...)
}

// reportOffNode reports the active reservations on GPUs the node does not
// have (a GPU that fell off the bus, a record naming another node's GPU):
// realized ones are Rejected with reservation.ErrUnknownGPU, never silently
// dropped; unrealized ones are Pending, and Allocate refuses them.
func (m *Manager) reportOffNode(ctx context.Context, want *desiredSet, devs []capability.DeviceInfo, rep *AdoptReport) {
	for _, e := range want.Active {
		if _, ok := deviceByUUID(devs, e.GPUUUID); ok {
			continue
		}
		if _, realized := e.Runtime(); !realized {
			rep.Pending = append(rep.Pending, e)
			continue
		}
		err := fmt.Errorf("%w: %s is not on this node", reservation.ErrUnknownGPU, e.GPUUUID)
		rep.Rejected = append(rep.Rejected, Rejection{Entry: e, Err: err})
		m.log.WarnContext(ctx, "reservation not adopted", "entry", e.String(), "err", err)
	}
}

// adoptGPU runs adoption for one GPU under its lock.
func (m *Manager) adoptGPU(ctx context.Context, want *desiredSet, dev capability.DeviceInfo, rep *AdoptReport) (GPUReport, error) {
	g := GPUReport{Index: dev.Index, UUID: dev.UUID, MIGMode: dev.MIGMode}
	unlock, err := m.locks.Lock(ctx, dev.Index)
	if err != nil {
		return g, err
	}
	defer unlock()

	active := entriesOn(want.Active, dev.UUID)
	g.Reservations = len(active) + len(entriesOn(want.Withheld, dev.UUID))
	procs, err := m.hw.Processes(ctx, dev.Index)
	if err != nil {
		return g, err
	}
	g.Processes = procs.Total
	insts, err := m.instances(ctx, dev)
	if err != nil {
		return g, err
	}
	g.Busy = g.Reservations > 0 || procs.Busy() || m.managesOn(dev.Index) || claimsAny(want, insts)
	if !g.Busy && want.Authorized {
		return g, m.cleanIdle(ctx, dev, insts, &g)
	}
	var gpu *capability.GPU
	for _, e := range active {
		rt, ok := e.Runtime()
		switch {
		case !ok && want.atPlacement && want.Authorized && dev.MIGMode == capability.MIGEnabled:
			if gpu == nil {
				if gpu, err = m.capabilityOf(ctx, dev); err != nil {
					return g, err
				}
			}
			rec, pending, err := m.adoptAt(want, dev, gpu, insts, procs, e)
			m.noteAdoption(ctx, rep, e, rec, err)
			if pending {
				rep.Pending = append(rep.Pending, e)
			}
			continue
		case !ok:
			rep.Pending = append(rep.Pending, e)
			continue
		case !want.Authorized:
			rep.Unverified = append(rep.Unverified, e)
			continue
		}
		if gpu == nil && dev.MIGMode == capability.MIGEnabled {
			if gpu, err = m.capabilityOf(ctx, dev); err != nil {
				return g, err
			}
		}
		rec, err := m.adoptEntry(want, dev, gpu, insts, e, rt)
		m.noteAdoption(ctx, rep, e, rec, err)
	}
	rep.Leaks = append(rep.Leaks, m.leaksOn(want, dev, insts, procs)...)
	return g, nil
}

// noteAdoption reports one entry's adoption: rejected with err, adopted as
// rec, or neither (already managed, or pending).
func (m *Manager) noteAdoption(ctx context.Context, rep *AdoptReport, e reservation.Entry, rec *record, err error) {
	switch {
	case err != nil:
		rep.Rejected = append(rep.Rejected, Rejection{Entry: e, Err: err})
		if errors.Is(err, ErrConflict) {
			m.stats.conflicts.Add(1)
		}
		m.log.WarnContext(ctx, "reservation not adopted", "entry", e.String(), "err", err)
	case rec != nil:
		rep.Adopted = append(rep.Adopted, rec.ManagedInstance)
		m.stats.adoptions.Add(1)
		m.log.InfoContext(ctx, "adopted instance", instanceAttrs(rec)...)
	}
}

// adoptAt adopts, for an active entry without runtime identity from a
// source whose placements only a trusted allocator writes
// (Demand.AdoptAtPlacement), the live instance at exactly its placement
// when it has the entry's profile and one compute instance, runs no
// process, and no released holder's device overlaps it, and no other
// holder's runtime identity names it, and no managed record or other
// holder's device conflicts with it. A busy instance, or one a released
// holder may have left, could be an ended claim's whose record was lost:
// it is not handed over by placement (a busy one stays unmanaged and, while
// the entry is listed, claimed; Prepare replaces an idle one). pending is
// true when nothing is there to adopt yet (or only a GI without a CI, the
// remnant of a create that crashed, which Prepare replaces): the entry is
// left to Prepare. The caller holds the GPU's lock and has checked that the
// set is authorised.
func (m *Manager) adoptAt(want *desiredSet, dev capability.DeviceInfo, gpu *capability.GPU, insts []Instance, procs ProcessReport, e reservation.Entry) (rec *record, pending bool, err error) {
	owner := entryOwner(&e)
	key := Key{GPU: dev.Index, Profile: e.Profile, Placement: e.Placement}
	if r := m.lookup(key); r != nil {
		if r.Owner == owner {
			return nil, false, nil
		}
		return nil, false, &ConflictError{Key: key, Owner: owner, Holder: r.Owner, Reason: "key is managed for another reservation"}
	}
	gi, ok := findAt(insts, e.Placement)
	if !ok || len(gi.ComputeInstances) == 0 {
		return nil, true, nil
	}
	prof := gpu.Profile(e.Profile)
	if prof == nil {
		return nil, false, fmt.Errorf("%w: GPU %d does not support %q", reservation.ErrUnknownProfile, gpu.Index, e.Profile)
	}
	if gi.Profile != prof.GIProfileIndex || len(gi.ComputeInstances) != 1 {
		return nil, false, fmt.Errorf("%w: GI %d at %v has profile index %d and %d compute instances, want %d with one",
			ErrHardwareMismatch, gi.GIID, gi.Placement, gi.Profile, len(gi.ComputeInstances), prof.GIProfileIndex)
	}
	if n := procs.ByGPUInstance[gi.GIID]; n > 0 {
		return nil, true, nil // not provably the entry's: left unmanaged while busy
	}
	if o, ok := want.endedOverlap(e.GPUUUID, e.Placement, owner); ok {
		return nil, false, &ConflictError{Key: key, Owner: owner, Holder: entryOwner(&o),
			Reason: fmt.Sprintf("the live GI %d may be the released holder's %s", gi.GIID, o.String())}
	}
	ci := gi.ComputeInstances[0]
	rt := reservation.RuntimeIdentity{MIGUUID: ci.MIGUUID, GPUInstanceID: gi.GIID, ComputeInstanceID: ci.ID}
	if o, ok := want.endedOwner(ci.MIGUUID, owner); ok {
		return nil, false, &ConflictError{Key: key, Owner: owner, Holder: o, Reason: "the live instance " + ci.MIGUUID + " belongs to an ended holder"}
	}
	if o, ok := want.namedByOther(ci.MIGUUID, owner); ok {
		return nil, false, &ConflictError{Key: key, Owner: owner, Holder: o, Reason: "another holder names the live instance " + ci.MIGUUID}
	}
	if err := m.adoptable(want, key, owner, e, rt); err != nil {
		return nil, false, err
	}
	rec = &record{ManagedInstance: ManagedInstance{Key: key, Owner: owner, GPUUUID: e.GPUUUID,
		GIIndex: gi.Profile, Runtime: rt, Origin: OriginAdopted}}
	m.store(rec)
	return rec, false, nil
}

// adoptable checks that no managed record other than one at key names rt or
// overlaps key, and that no other active or untrusted holder's entry
// overlaps it.
func (m *Manager) adoptable(want *desiredSet, key Key, owner Owner, e reservation.Entry, rt reservation.RuntimeIdentity) error {
	if rec := m.recordByMIG(rt.MIGUUID); rec != nil {
		return &ConflictError{Key: key, Owner: owner, Holder: rec.Owner, Reason: "runtime identity names managed instance " + rec.Key.String()}
	}
	for _, r := range m.records() {
		if r.Key.GPU == key.GPU && r.Key.Placement.Overlaps(key.Placement) {
			return &ConflictError{Key: key, Owner: owner, Holder: r.Owner, Reason: "overlaps managed instance " + r.Key.String()}
		}
	}
	if c, ok := want.rival(e.GPUUUID, e.Placement, owner); ok {
		return &ConflictError{Key: key, Owner: owner, Holder: entryOwner(&c), Reason: "overlaps reservation " + c.String()}
	}
	return nil
}

// claimsAny reports whether a reservation names a MIG device of insts,
// even one whose entry names another GPU.
func claimsAny(want *desiredSet, insts []Instance) bool {
	for _, gi := range insts {
		if want.claimsMIG(gi) {
			return true
		}
	}
	return false
}

// instances lists the GPU's instances; a GPU with MIG disabled has none.
func (m *Manager) instances(ctx context.Context, dev capability.DeviceInfo) ([]Instance, error) {
	if dev.MIGMode != capability.MIGEnabled {
		return nil, nil
	}
	return m.hw.Instances(ctx, dev.Index)
}

func (m *Manager) capabilityOf(ctx context.Context, dev capability.DeviceInfo) (*capability.GPU, error) {
	infos, err := m.hw.GIProfiles(ctx, dev.Index)
	if err != nil {
		return nil, err
	}
	g, _ := capability.GPUFromDevice(dev, infos)
	return &g, nil
}

func entriesOn(list []reservation.Entry, gpuUUID string) []reservation.Entry {
	var out []reservation.Entry
	for _, e := range list {
		if e.GPUUUID == gpuUUID {
			out = append(out, e)
		}
	}
	return out
}

// managesOn reports whether any managed instance is on the GPU.
func (m *Manager) managesOn(gpu int) bool {
	for _, r := range m.records() {
		if r.Key.GPU == gpu {
			return true
		}
	}
	return false
}

// cleanIdle destroys every instance on an idle GPU and optionally enables
// MIG mode. The caller holds the GPU's lock.
func (m *Manager) cleanIdle(ctx context.Context, dev capability.DeviceInfo, insts []Instance, g *GPUReport) error {
	var errs []error
	for _, gi := range insts {
		if err := m.destroyUnmanaged(ctx, dev.Index, gi); err != nil {
			errs = append(errs, err)
			continue
		}
		g.Cleaned++
	}
	if g.Cleaned > 0 {
		m.log.InfoContext(ctx, "cleaned idle GPU", "gpu", dev.Index, "gpu_uuid", dev.UUID, "destroyed", g.Cleaned)
	}
	if dev.MIGMode == capability.MIGDisabled && m.enableMIG {
		m.enableMIGOn(ctx, dev, g)
	}
	return errors.Join(errs...)
}

// enableMIGOn switches MIG mode on for an idle GPU ([Options.EnableMIG]).
// A GPU whose mode cannot be switched stays out of MIG use with the cause
// in g.MIGModeErr, logged as a warning; it is not an error of the pass, so
// that one GPU waiting for its reset does not stop the node's others.
func (m *Manager) enableMIGOn(ctx context.Context, dev capability.DeviceInfo, g *GPUReport) {
	setter, ok := m.hw.(MIGModeSetter)
	var err error
	if !ok {
		err = fmt.Errorf("%w: backend cannot enable MIG mode", ErrNotSupported)
	} else {
		err = setter.EnableMIG(ctx, dev.Index)
	}
	switch {
	case err == nil:
		g.MIGMode, g.MIGEnabledNow = capability.MIGEnabled, true
		m.log.InfoContext(ctx, "enabled MIG mode on idle GPU", "gpu", dev.Index, "gpu_uuid", dev.UUID)
	case errors.Is(err, ErrResetRequired):
		g.MIGModeErr = err
		m.log.WarnContext(ctx, "MIG mode on this GPU waits for a GPU reset: it takes no MIG pods until an operator resets it (nvidia-smi -r -i INDEX, with DCGM and other NVML clients stopped) or reboots the node, then restarts this component",
			"gpu", dev.Index, "gpu_uuid", dev.UUID, "err", err)
	default:
		g.MIGModeErr = err
		m.log.WarnContext(ctx, "could not switch MIG mode on: the GPU takes no MIG pods", "gpu", dev.Index, "gpu_uuid", dev.UUID, "err", err)
	}
}

// destroyUnmanaged destroys every CI of gi, then gi.
func (m *Manager) destroyUnmanaged(ctx context.Context, gpu int, gi Instance) error {
	key := Key{GPU: gpu, Placement: gi.Placement}
	for _, ci := range gi.ComputeInstances {
		if err := m.hw.DestroyComputeInstance(ctx, gpu, gi.GIID, ci.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return &ReleaseError{Key: key, GIID: gi.GIID, Err: err}
		}
	}
	return m.destroyGI(ctx, key, Owner{}, gi.GIID)
}

// adoptEntry verifies one annotated runtime identity against the live
// instances and adopts it. It returns a nil record and nil error when the
// entry is already managed for the same owner.
func (m *Manager) adoptEntry(want *desiredSet, dev capability.DeviceInfo, gpu *capability.GPU, insts []Instance, e reservation.Entry, rt reservation.RuntimeIdentity) (*record, error) {
	owner := entryOwner(&e)
	key := Key{GPU: dev.Index, Profile: e.Profile, Placement: e.Placement}
	if gpu == nil { // MIG is off: no instance can be live
		return nil, fmt.Errorf("%w: GPU %d (%s) MIG mode %s", ErrMIGDisabled, dev.Index, dev.UUID, dev.MIGMode)
	}
	if rec := m.lookup(key); rec != nil {
		if rec.Owner == owner && rec.Runtime == rt {
			return nil, nil
		}
		return nil, &ConflictError{Key: key, Owner: owner, Holder: rec.Owner, Reason: "key is managed for another reservation or identity"}
	}
	if o, ok := want.endedOwner(rt.MIGUUID, owner); ok {
		return nil, &ConflictError{Key: key, Owner: owner, Holder: o, Reason: "runtime identity " + rt.MIGUUID + " belongs to an ended pod"}
	}
	if err := m.adoptable(want, key, owner, e, rt); err != nil {
		return nil, err
	}
	prof := gpu.Profile(e.Profile)
	if prof == nil {
		return nil, fmt.Errorf("%w: GPU %d does not support %q", reservation.ErrUnknownProfile, gpu.Index, e.Profile)
	}
	gi, ok := findGI(insts, rt.GPUInstanceID)
	if !ok {
		return nil, fmt.Errorf("%w: GI %d is not live on GPU %d", ErrNotFound, rt.GPUInstanceID, gpu.Index)
	}
	if why := verify(gi, prof.GIProfileIndex, e.Placement, rt); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrHardwareMismatch, why)
	}
	rec := &record{ManagedInstance: ManagedInstance{Key: key, Owner: owner, GPUUUID: e.GPUUUID,
		GIIndex: gi.Profile, Runtime: rt, Origin: OriginAdopted}}
	m.store(rec)
	return rec, nil
}

// leaksOn lists the unmanaged instances on a GPU. The caller holds the
// GPU's lock.
func (m *Manager) leaksOn(want *desiredSet, dev capability.DeviceInfo, insts []Instance, procs ProcessReport) []Leak {
	var out []Leak
	for _, gi := range insts {
		if m.managedGI(dev.Index, gi) {
			continue
		}
		out = append(out, Leak{GPU: dev.Index, GPUUUID: dev.UUID, GIID: gi.GIID, Profile: gi.Profile,
			Placement: gi.Placement, ComputeInstances: len(gi.ComputeInstances),
			Claimed:   want.mayOwn(dev.UUID, gi),
			Processes: procs.ByGPUInstance[gi.GIID]})
	}
	return out
}

// managedGI reports whether gi is a managed instance.
func (m *Manager) managedGI(gpu int, gi Instance) bool {
	for _, r := range m.records() {
		if r.Key.GPU == gpu && r.Runtime.GPUInstanceID == gi.GIID && r.Key.Placement == gi.Placement {
			return true
		}
	}
	return false
}

// LeakReport says what [Manager.CollectLeaks] found and did.
type LeakReport struct {
	// Authorized and Reasons as in [ReconcileReport]; nothing is collected
	// without authorisation.
	Authorized bool
	Reasons    []error
	// Collected are the unmanaged instances destroyed.
	Collected []Leak
	// Left are the unmanaged instances found but not collected: claimed by
	// a reservation, running processes, on a GPU with processes outside
	// any GPU instance, or whose destroy failed (see Err).
	Left []Leak
	// Err joins the destroy failures, or nil.
	Err error
}

// CollectLeaks destroys unmanaged instances (leaked GIs, including GIs
// without a CI) that provably belong to no one. It is conservative: it
// runs only when snap authorises destruction, and on each GPU, under its
// lock, it destroys an unmanaged instance only when
//
//   - no reservation may own it (see Leak.Claimed: one at exactly its
//     placement, a pending reservation's not yet patched instance, is left
//     to Allocate; one naming one of its MIG devices),
//   - no process runs on it, and
//   - every process on the GPU is attributed to a GPU instance (otherwise
//     the GPU is skipped).
//
// Managed instances are never touched. Instances of other MIG tooling on
// the same GPUs would be collected: the design requires that the device
// plugin own MIG mutation on its GPUs (stop MIG Manager first).
func (m *Manager) CollectLeaks(ctx context.Context, snap reservation.Snapshot) (LeakReport, error) {
	want := desired(snap, nil)
	return m.collectLeaks(ctx, &want)
}

// collectLeaks runs leak collection against a desired set, from either
// protocol.
func (m *Manager) collectLeaks(ctx context.Context, want *desiredSet) (LeakReport, error) {
	rep := LeakReport{Authorized: want.Authorized, Reasons: want.Reasons}
	if !want.Authorized {
		m.stats.skippedReconciles.Add(1)
		m.log.WarnContext(ctx, "leak collection skipped: snapshot does not authorise destruction", "reasons", len(want.Reasons))
		return rep, nil
	}
	devs, err := m.hw.Devices(ctx)
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, dev := range devs {
		if err := m.collectOn(ctx, want, dev, &rep); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	rep.Err = errors.Join(errs...)
	if ctx.Err() == nil {
		m.stats.leaks.Store(int64(len(rep.Left)))
	}
	return rep, rep.Err
}

func (m *Manager) collectOn(ctx context.Context, want *desiredSet, dev capability.DeviceInfo, rep *LeakReport) error {
	if dev.MIGMode != capability.MIGEnabled {
		return nil
	}
	unlock, err := m.locks.Lock(ctx, dev.Index)
	if err != nil {
		return err
	}
	defer unlock()
	procs, err := m.hw.Processes(ctx, dev.Index)
	if err != nil {
		return err
	}
	insts, err := m.hw.Instances(ctx, dev.Index)
	if err != nil {
		return err
	}
	attributed := 0
	for _, n := range procs.ByGPUInstance {
		attributed += n
	}
	var errs []error
	for _, l := range m.leaksOn(want, dev, insts, procs) {
		if l.Claimed || l.Processes > 0 || attributed < procs.Total {
			rep.Left = append(rep.Left, l)
			continue
		}
		gi, _ := findGI(insts, l.GIID)
		if err := m.destroyUnmanaged(ctx, dev.Index, gi); err != nil {
			rep.Left = append(rep.Left, l)
			errs = append(errs, err)
			continue
		}
		m.stats.leaksCollected.Add(1)
		rep.Collected = append(rep.Collected, l)
		m.log.InfoContext(ctx, "collected leaked instance", "gpu", l.GPU, "gpu_uuid", l.GPUUUID, "gi", l.GIID,
			"placement", l.Placement.String(), "cis", l.ComputeInstances)
	}
	return errors.Join(errs...)
}
