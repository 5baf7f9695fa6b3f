package realize

import (
	"context"
	"errors"
	"time"

	"github.com/dynmig/dynmig/reservation"
)

// MaintainReport says what one [Manager.Maintain] pass did.
type MaintainReport struct {
	// Adopt is the adoption pass, nil when adoption had already settled.
	Adopt *AdoptReport
	// Settled reports whether adoption has settled: some pass was
	// authorised, succeeded, and left nothing Rejected or Unverified.
	Settled bool
	// Reconcile is the reconcile pass, which runs every time.
	Reconcile ReconcileReport
	// Leaks is the leak collection, nil when none was due.
	Leaks *LeakReport
}

// MIGSwitchedOn reports whether the pass's adoption switched MIG mode on
// for a GPU ([Options.EnableMIG]): its profiles exist from now on, so the
// caller discovers the GPUs again.
func (r MaintainReport) MIGSwitchedOn() bool {
	if r.Adopt == nil {
		return false
	}
	for _, g := range r.Adopt.GPUs {
		if g.MIGEnabledNow {
			return true
		}
	}
	return false
}

// Maintain is the one periodic call a device plugin needs besides
// Allocate; call it at startup and then periodically (every
// reconcile interval, and whenever a pod ends) with a fresh listing. It:
//
//  1. runs [Manager.Adopt] until adoption settles: a pass that is
//     authorised, succeeds and leaves no entry Rejected or Unverified. An
//     unauthorised start (a pod with a malformed record, an incomplete
//     listing) or a passing ambiguity otherwise leaves live instances
//     unmanaged, and kubelet never calls Allocate again for a running
//     container, so only a later adoption takes them back and lets a
//     later reconcile reclaim them when their pods end;
//  2. runs [Manager.Reconcile];
//  3. runs [Manager.CollectLeaks] when [Options.LeakInterval] has passed
//     since the last collection, and right after adoption settles.
//
// Each step honours the snapshot's authorisation as the method it calls
// does. The error joins the steps' errors; a failed step does not stop the
// later ones (except when ctx ends). Maintain is safe for concurrent use;
// concurrent passes may both adopt or collect, which is harmless.
func (m *Manager) Maintain(ctx context.Context, snap reservation.Snapshot) (MaintainReport, error) {
	want := desired(snap, nil)
	return m.maintain(ctx, &want)
}

// maintain runs Maintain's passes against one desired set, from either
// protocol.
func (m *Manager) maintain(ctx context.Context, want *desiredSet) (MaintainReport, error) {
	var rep MaintainReport
	var errs []error
	collect := false
	if !m.adoptSettled.Load() {
		a, err := m.adopt(ctx, want)
		rep.Adopt = &a
		if err != nil {
			errs = append(errs, err)
		} else if a.Authorized && len(a.Rejected) == 0 && len(a.Unverified) == 0 {
			m.adoptSettled.Store(true)
			collect = true
			m.log.InfoContext(ctx, "adoption settled", "adopted", len(a.Adopted), "pending", len(a.Pending))
		}
	}
	rep.Settled = m.adoptSettled.Load()
	if ctx.Err() != nil {
		return rep, errors.Join(append(errs, ctx.Err())...)
	}
	r, err := m.reconcile(ctx, want)
	rep.Reconcile = r
	if err != nil {
		errs = append(errs, err)
	}
	now := m.now()
	m.leakMu.Lock()
	if collect || m.lastLeakPass.IsZero() || now.Sub(m.lastLeakPass) >= m.leakInterval {
		collect = true
		m.lastLeakPass = now
	}
	m.leakMu.Unlock()
	if collect && ctx.Err() == nil {
		l, err := m.collectLeaks(ctx, want)
		rep.Leaks = &l
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// defaultLeakInterval is Options.LeakInterval's zero value.
const defaultLeakInterval = 10 * time.Minute
