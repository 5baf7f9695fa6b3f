package dradriver

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/realize"
)

// Demand returns the realize demand of the current claim listing and
// checkpoint ([Catalog.Demand]): every checkpointed claim holds its
// checkpointed devices until its unprepare, whatever the listing or the
// API server says of it.
func (d *Driver) Demand() realize.Demand {
	claims, complete := d.claims()
	d.mu.Lock()
	cat, ck := d.cat, d.ck
	d.mu.Unlock()
	if cat == nil {
		return realize.Demand{}
	}
	return cat.Demand(claims, complete, ck)
}

// Maintain runs one maintenance pass: it unprepares the stale
// PrepareStarted claims (below), then adopts until settled, reconciles
// and collects leaks when due against the current listing and checkpoint.
// No checkpointed claim's instance is destroyed by it: only the claim's
// unprepare does that. Run calls it every MaintainInterval. A pass that
// switched MIG mode on for a GPU (Config.Manager.EnableMIG) discovers the
// GPUs again and republishes them.
//
// A PrepareStarted claim was never handed to a container, so the kubelet
// may never unprepare it (its pod was deleted while the preparation kept
// failing). With Config.Client, such a claim that a read from the API
// server confirms gone (not found, or its name now belongs to another UID)
// is unprepared by the driver itself.
func (d *Driver) Maintain(ctx context.Context) (realize.MaintainReport, error) {
	d.cleanStale(ctx)
	// The demand is read between claim operations, so that it holds every
	// claim whose preparation began; one that begins later creates
	// instances that realize's AbsentPodGrace protects from this pass.
	d.opMu.Lock()
	dem := d.Demand()
	d.opMu.Unlock()
	rep, err := d.mgr.MaintainDemand(ctx, dem)
	if rep.Adopt != nil {
		d.log.Info("adoption", "authorized", rep.Adopt.Authorized, "settled", rep.Settled, "adopted", len(rep.Adopt.Adopted),
			"pending", len(rep.Adopt.Pending), "rejected", len(rep.Adopt.Rejected), "leaks", len(rep.Adopt.Leaks), "err", err)
	}
	if len(rep.Reconcile.Released) > 0 || !rep.Reconcile.Authorized {
		d.log.Info("reconcile", "authorized", rep.Reconcile.Authorized, "released", len(rep.Reconcile.Released), "reasons", len(rep.Reconcile.Reasons))
	}
	if rep.MIGSwitchedOn() { // Config.Manager.EnableMIG: the GPU's profiles exist from now on
		err = errors.Join(err, d.Rediscover(ctx))
	}
	return rep, err
}

// cleanStale unprepares the PrepareStarted claims the API server confirms
// gone; see [Driver.Maintain].
func (d *Driver) cleanStale(ctx context.Context) {
	if d.cfg.Client == nil || !d.isSetUp() {
		return
	}
	for _, pc := range d.Checkpoint().Claims {
		if pc.State != PrepareStarted || pc.Name == "" {
			continue
		}
		claim, err := d.cfg.Client.ResourceV1().ResourceClaims(pc.Namespace).Get(ctx, pc.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			d.log.Warn("stale claim check", "claim", pc.UID, "err", err)
			continue
		case string(claim.UID) == pc.UID:
			continue
		}
		if err := d.unprepareIf(ctx, pc.UID, PrepareStarted); err != nil {
			d.log.Warn("unprepare stale claim", "claim", pc.UID, "err", err)
		} else {
			d.log.Info("unprepared stale claim the kubelet never received", "claim", pc.Namespace+"/"+pc.Name, "uid", pc.UID)
		}
	}
}
