package dradriver

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/realize"
)

// unprepareDemand is the demand for unpreparing the claim uid: uid's
// holder is its checkpointed one alone (an unprepare depends only on the
// claim's own checkpoint and the hardware), or none when uid is not
// checkpointed, so that nothing is taken over for it by placement.
func (d *Driver) unprepareDemand(uid string) realize.Demand {
	dem := d.Demand()
	d.mu.Lock()
	_, checkpointed := d.ck.Claim(uid)
	d.mu.Unlock()
	if !checkpointed {
		dem.Holders = slices.DeleteFunc(dem.Holders, func(h realize.Holder) bool { return h.UID == uid })
	}
	return dem
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: for each
// claim it destroys exactly the claim's checkpointed instances (never one
// with processes, never one another claim names), then removes its CDI
// spec and its checkpoint entry. It depends only on the claim's own
// checkpoint entry and the hardware: neither the claim listing nor other
// claims hold it up. It works when the claim is gone from the API, and is
// idempotent: a claim with nothing left succeeds. A claim whose instances
// could not all be released (in use) gets an error and keeps its
// checkpoint entry; the kubelet retries.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.unprepareIf(ctx, string(c.UID), "")
		if err != nil {
			d.log.Warn("unprepare failed", "claim", c.String(), "err", err)
			err = &ClaimError{Claim: c.String(), Err: err}
		}
		out[c.UID] = err
	}
	d.rebuild()
	return out, nil
}

// unprepareIf unprepares the claim uid; with a non-empty state, only
// while it is checkpointed in that state.
func (d *Driver) unprepareIf(ctx context.Context, uid string, state ClaimState) error {
	if !d.isSetUp() {
		return ErrNotSetUp
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	if state != "" {
		if pc, ok := d.Checkpoint().Claim(uid); !ok || pc.State != state {
			return nil
		}
	}
	rep, err := d.mgr.Unprepare(ctx, d.unprepareDemand(uid), uid)
	if err != nil {
		return err
	}
	if n := len(rep.Released) + len(rep.Adopted); n > 0 {
		d.log.Info("unprepared", "claim", uid, "released", len(rep.Released), "vanished", len(rep.Vanished))
	}
	if err := d.cdi.remove(uid); err != nil {
		return err
	}
	if _, ok := d.Checkpoint().Claim(uid); !ok {
		return nil
	}
	return d.updateCheckpoint(func(ck *Checkpoint) {
		ck.Claims = slices.DeleteFunc(ck.Claims, func(c PreparedClaim) bool { return c.UID == uid })
	})
}
