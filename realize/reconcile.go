package realize

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/reservation"
)

// ReconcileReport says what one reconcile pass did.
type ReconcileReport struct {
	// Authorized is true when the snapshot authorised destruction: the
	// listing was complete and every active pod's annotation was valid
	// and conflict-free.
	Authorized bool
	// Reasons say why it was not authorised; empty when Authorized. They
	// are reservation's reasons: reservation.ErrIncompleteSnapshot, a
	// *reservation.PodError or a *reservation.ConflictError.
	Reasons []error
	// Released are the managed instances destroyed because their
	// reservation is gone.
	Released []ManagedInstance
	// Kept are managed instances whose reservation is gone but that could
	// not be destroyed (for example [ErrInUse]); they stay managed and the
	// next pass tries again.
	Kept []KeptInstance
	// Vanished are managed instances that were no longer on the hardware
	// (or whose GI ID now names a different instance); the manager forgot
	// them without destroying anything.
	Vanished []ManagedInstance
	// Deferred are managed instances whose pod is missing from the
	// listing but that are younger than [Options.AbsentPodGrace]: the
	// listing may lag behind the pod. A later pass releases them.
	Deferred []ManagedInstance
	// Retained are managed instances whose pod is still active but whose
	// record no longer names them (rewritten or emptied). The pod's
	// containers may still use them, so they stay managed and are released
	// once the pod ends.
	Retained []ManagedInstance
}

// KeptInstance is a managed instance a reconcile pass could not release.
type KeptInstance struct {
	Instance ManagedInstance
	Err      error // a [*ReleaseError]
}

// Reconcile releases managed instances whose reservation is no longer in
// snap's desired set (active pods: not deleting, not Succeeded or Failed),
// destroying their exact CI and then GI. Unmanaged instances and instances
// of active reservations are never touched, nor is the instance of a pod
// that is still active but whose record stopped naming it (Retained).
//
// When snap does not authorise destruction (incomplete listing, or any
// active pod with a malformed, invalid, legacy or conflicting annotation)
// nothing is destroyed:
// the report says why and the skipped pass is counted. An instance that
// cannot be destroyed ([ErrInUse]) stays managed and is listed in Kept.
// The error joins the [*ReleaseError] of every failure other than
// [ErrInUse], and ctx's error when ctx ended the pass.
func (m *Manager) Reconcile(ctx context.Context, snap reservation.Snapshot) (ReconcileReport, error) {
	want := desired(snap, nil)
	return m.reconcile(ctx, &want)
}

func (m *Manager) reconcile(ctx context.Context, want *desiredSet) (ReconcileReport, error) {
	m.stats.reconciles.Add(1)
	rep := ReconcileReport{Authorized: want.Authorized, Reasons: want.Reasons}
	if !want.Authorized {
		m.stats.skippedReconciles.Add(1)
		if len(m.records()) > 0 {
			m.log.WarnContext(ctx, "reconcile skipped: snapshot does not authorise destruction", "reasons", len(want.Reasons), "first", want.Reasons[0].Error())
		}
		return rep, nil
	}
	var errs []error
	for _, r := range m.records() {
		if want.wants(r) {
			continue
		}
		if want.active[r.Owner.PodUID] {
			rep.Retained = append(rep.Retained, r.ManagedInstance)
			m.log.WarnContext(ctx, "active pod's record no longer names its managed instance; keeping it until the pod ends", instanceAttrs(r)...)
			continue
		}
		if m.young(want, r) {
			rep.Deferred = append(rep.Deferred, r.ManagedInstance)
			continue
		}
		if err := m.reconcileOne(ctx, want, r, &rep); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// young reports whether r's pod is absent from the listing and r was
// taken over less than the grace period before the listing was taken. A
// pass may run long after its listing (it waits for GPU locks and slow
// NVML calls); measured to the pass's own time, an instance created after
// the listing, which the listing cannot show, would count as departed.
func (m *Manager) young(want *desiredSet, r *record) bool {
	if want.listed[r.Owner.PodUID] || m.grace <= 0 {
		return false
	}
	at := want.at
	if at.IsZero() {
		at = m.now()
	}
	return at.Sub(r.since) < m.grace
}

// reconcileOne releases r under its GPU lock if it is still managed and
// still unwanted.
func (m *Manager) reconcileOne(ctx context.Context, want *desiredSet, r *record, rep *ReconcileReport) error {
	unlock, err := m.locks.Lock(ctx, r.Key.GPU)
	if err != nil {
		return err
	}
	defer unlock()
	if m.lookup(r.Key) != r || want.wants(r) {
		return nil // replaced or released by a concurrent call
	}
	vanished, err := m.release(ctx, r)
	switch {
	case err == nil && vanished:
		rep.Vanished = append(rep.Vanished, r.ManagedInstance)
	case err == nil:
		rep.Released = append(rep.Released, r.ManagedInstance)
		m.log.InfoContext(ctx, "released instance of a departed reservation", instanceAttrs(r)...)
	default:
		rep.Kept = append(rep.Kept, KeptInstance{Instance: r.ManagedInstance, Err: err})
		m.log.WarnContext(ctx, "could not release instance; keeping it managed", append(instanceAttrs(r), "err", err)...)
		if errors.Is(err, ErrInUse) {
			return nil
		}
		return err
	}
	return nil
}

// release destroys r's exact CI and then its GI and forgets r. The caller
// holds r's GPU lock. vanished is true when r's instance was no longer on
// the hardware (also when the GPU left MIG mode), or its GI ID now names
// another instance (another profile
// or placement, or only compute instances that are not r's): then nothing
// is destroyed and r is forgotten. A GI left without r's CI (a destroy
// that failed half way) is destroyed. On failure r stays managed.
func (m *Manager) release(ctx context.Context, r *record) (vanished bool, err error) {
	fail := func(err error) error {
		return &ReleaseError{Key: r.Key, Owner: r.Owner, GIID: r.Runtime.GPUInstanceID, Err: err}
	}
	insts, err := m.hw.Instances(ctx, r.Key.GPU)
	switch {
	case errors.Is(err, ErrMIGDisabled):
		insts = nil // MIG mode cannot be left while GPU instances exist: r's is gone
	case err != nil:
		return false, fail(err)
	}
	gi, ok := findGI(insts, r.Runtime.GPUInstanceID)
	ci, hasCI := findCI(gi, r.Runtime)
	// A GI whose compute instances are all someone else's is another
	// instance under a recycled GI ID: never ours to destroy.
	if !ok || gi.Placement != r.Key.Placement || gi.Profile != r.GIIndex || !hasCI && len(gi.ComputeInstances) > 0 {
		m.forget(r)
		m.log.WarnContext(ctx, "managed instance vanished; forgetting it", instanceAttrs(r)...)
		return true, nil
	}
	if hasCI {
		if err := m.hw.DestroyComputeInstance(ctx, r.Key.GPU, gi.GIID, ci.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return false, fail(err)
		}
	}
	if err := m.destroyGI(ctx, r.Key, r.Owner, gi.GIID); err != nil {
		return false, err
	}
	m.forget(r)
	return false, nil
}

// findCI returns gi's compute instance with rt's CI ID and MIG UUID.
func findCI(gi Instance, rt reservation.RuntimeIdentity) (ComputeInstance, bool) {
	for _, ci := range gi.ComputeInstances {
		if ci.ID == rt.ComputeInstanceID && ci.MIGUUID == rt.MIGUUID {
			return ci, true
		}
	}
	return ComputeInstance{}, false
}

// destroyGI destroys one GI (a missing one counts as destroyed) and counts
// it.
func (m *Manager) destroyGI(ctx context.Context, key Key, owner Owner, gi uint32) error {
	err := m.hw.DestroyGPUInstance(ctx, key.GPU, gi)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return &ReleaseError{Key: key, Owner: owner, GIID: gi, Err: err}
	}
	if err == nil {
		m.stats.destroys.Add(1)
	}
	return nil
}

// String summarises the report, e.g. "authorised: released 1, kept 0,
// vanished 0, deferred 0"; ", retained N" follows when N > 0.
func (r ReconcileReport) String() string {
	if !r.Authorized {
		return fmt.Sprintf("not authorised (%d reasons): nothing destroyed", len(r.Reasons))
	}
	s := fmt.Sprintf("authorised: released %d, kept %d, vanished %d, deferred %d", len(r.Released), len(r.Kept), len(r.Vanished), len(r.Deferred))
	if len(r.Retained) > 0 {
		s += fmt.Sprintf(", retained %d", len(r.Retained))
	}
	return s
}
