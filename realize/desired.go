package realize

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// desiredSet wraps reservation's desired allocation set with the lookups
// the manager needs.
type desiredSet struct {
	reservation.DesiredSet
	// ended maps the MIG UUIDs that released pods' annotations name to
	// their owners. A live instance they name may still be in use by the
	// ended pod and is never handed to another pod.
	ended map[string]Owner
	// listed holds the UID of every pod in the listing, in any phase.
	listed map[string]bool
	// active holds the UID of every listed pod that is not released
	// (reservation.Pod.Released at the snapshot's time): its containers
	// may still run.
	active map[string]bool
	// at is when the listing was taken (reservation.Snapshot.Now,
	// Demand.Now); zero when unknown. An instance's absence from the
	// listing is judged at this time, not when the pass runs: an instance
	// taken over after the listing cannot be in it.
	at time.Time
	// atPlacement: Demand.AdoptAtPlacement. Adoption may take over a live
	// instance at exactly an active entry's placement when the entry
	// records no runtime identity.
	atPlacement bool
	// endedAt are the devices of released holders of a Demand: a live
	// instance they overlap may be theirs, so it is never adopted by
	// placement for another holder.
	endedAt []reservation.Entry
}

// sortSet orders a desired set built outside reservation.Desired as
// reservation.Desired does.
func sortSet(s *reservation.DesiredSet) {
	slices.SortFunc(s.Unknown, func(a, b reservation.PodRef) int { return cmp.Compare(a.UID, b.UID) })
	slices.SortFunc(s.Active, compareEntries)
	slices.SortFunc(s.Withheld, compareEntries)
}

func compareEntries(a, b reservation.Entry) int {
	return cmp.Or(
		cmp.Compare(a.GPUUUID, b.GPUUUID),
		cmp.Compare(a.Placement.Start, b.Placement.Start),
		cmp.Compare(a.Placement.Size, b.Placement.Size),
		cmp.Compare(a.PodUID, b.PodUID),
		cmp.Compare(a.ContainerIndex, b.ContainerIndex),
		cmp.Compare(a.DeviceIndex, b.DeviceIndex),
	)
}

// desired builds the desired set of snap. extra, when not nil, is a pod
// that is being allocated: it is added when the snapshot does not list it,
// so that a lagging cache does not make its instances look orphaned.
func desired(snap reservation.Snapshot, extra *reservation.Pod) desiredSet {
	if extra != nil && !listed(snap.Pods, extra.UID) {
		snap.Pods = append(snap.Pods[:len(snap.Pods):len(snap.Pods)], *extra)
	}
	listed := make(map[string]bool, len(snap.Pods))
	active := make(map[string]bool, len(snap.Pods))
	for i := range snap.Pods {
		listed[snap.Pods[i].UID] = true
		if !snap.Pods[i].Released(snap.Now) {
			active[snap.Pods[i].UID] = true
		}
	}
	return desiredSet{DesiredSet: reservation.Desired(snap), ended: endedClaims(snap), listed: listed, active: active, at: snap.Now}
}

// endedClaims collects the runtime identities named by released pods.
// Undecodable records are skipped: they name nothing.
func endedClaims(snap reservation.Snapshot) map[string]Owner {
	var out map[string]Owner
	for i := range snap.Pods {
		p := &snap.Pods[i]
		if !p.Released(snap.Now) {
			continue
		}
		entries, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.MIGUUID == "" {
				continue
			}
			if out == nil {
				out = make(map[string]Owner)
			}
			out[e.MIGUUID] = ownerOf(p.UID, e)
		}
	}
	return out
}

// endedOwner returns the ended pod, other than self's, whose annotation
// names migUUID.
func (d *desiredSet) endedOwner(migUUID string, self Owner) (Owner, bool) {
	o, ok := d.ended[migUUID]
	return o, ok && o.PodUID != self.PodUID
}

// namedByOther returns the owner of an active or withheld entry, other
// than self, whose runtime identity names migUUID.
func (d *desiredSet) namedByOther(migUUID string, self Owner) (Owner, bool) {
	for _, list := range [][]reservation.Entry{d.Active, d.Withheld} {
		for i := range list {
			if list[i].MIGUUID == migUUID && entryOwner(&list[i]) != self {
				return entryOwner(&list[i]), true
			}
		}
	}
	return Owner{}, false
}

// endedOverlap returns a released holder's device, other than self's
// holder's, that overlaps at on gpuUUID.
func (d *desiredSet) endedOverlap(gpuUUID string, at capability.Placement, self Owner) (reservation.Entry, bool) {
	for _, e := range d.endedAt {
		if e.GPUUUID == gpuUUID && e.Placement.Overlaps(at) && e.PodUID != self.PodUID {
			return e, true
		}
	}
	return reservation.Entry{}, false
}

func listed(pods []reservation.Pod, uid string) bool {
	for i := range pods {
		if pods[i].UID == uid {
			return true
		}
	}
	return false
}

// podEntries decodes and validates a pod's allocation annotation. A pod
// without the annotation has no entries.
func podEntries(p *reservation.Pod) ([]reservation.Allocation, error) {
	entries, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
	if err != nil {
		return nil, err
	}
	if err := reservation.Validate(entries); err != nil {
		return nil, err
	}
	return entries, nil
}

func entryOwner(e *reservation.Entry) Owner {
	return Owner{PodUID: e.PodUID, ContainerIndex: e.ContainerIndex, DeviceIndex: e.DeviceIndex}
}

// wants reports whether the desired set still holds r's reservation, at
// the same GPU, profile and placement.
func (d *desiredSet) wants(r *record) bool {
	e, ok := d.Lookup(r.Owner.PodUID, r.Owner.ContainerIndex, r.Owner.DeviceIndex)
	return ok && e.GPUUUID == r.GPUUUID && e.Profile == r.Key.Profile && e.Placement == r.Key.Placement
}

// rival returns another owner's active entry, or withheld entry of an
// untrusted pod, on gpuUUID that overlaps at, if any. Entries withheld only
// by the trust rule (their container does not request them) are no rival:
// the scheduler ignores them too, so letting them block a placement would
// let any pod creator deny others' devices. Nor are entries that lost an
// overlap to a record that arrived with a scheduler's binding or was first
// seen earlier (reservation.ErrLaterConflict): the winner's placement is
// its own, and a copy must not deny it. They still cannot obtain or
// destroy anything: they are never realized, and a live instance they name
// is never handed out or collected.
func (d *desiredSet) rival(gpuUUID string, at capability.Placement, self Owner) (reservation.Entry, bool) {
	overlaps := func(e *reservation.Entry) bool {
		return e.GPUUUID == gpuUUID && e.Placement.Overlaps(at) && entryOwner(e) != self
	}
	for i := range d.Active {
		if overlaps(&d.Active[i]) {
			return d.Active[i], true
		}
	}
	for i := range d.Withheld {
		if e := &d.Withheld[i]; overlaps(e) && d.IsUnknown(e.PodUID) {
			return *e, true
		}
	}
	return reservation.Entry{}, false
}

// mayOwn reports whether a reservation may own the unmanaged instance gi
// on gpuUUID: an active entry at exactly its placement (a pending
// reservation's instance whose patch was lost), any entry naming one of its
// MIG devices, or an untrusted pod's entry overlapping it (what such a pod
// owns is unknown). An active entry that merely overlaps gi cannot own it:
// its own instance would sit at its own placement.
func (d *desiredSet) mayOwn(gpuUUID string, gi Instance) bool {
	if _, ok := d.At(gpuUUID, gi.Placement); ok {
		return true
	}
	for _, e := range d.Withheld {
		if e.GPUUUID == gpuUUID && e.Placement.Overlaps(gi.Placement) {
			return true
		}
	}
	return d.claimsMIG(gi)
}

// claimsMIG reports whether an active or withheld entry names one of gi's
// MIG devices: whatever its placement says, the pod may be using it.
func (d *desiredSet) claimsMIG(gi Instance) bool {
	for _, ci := range gi.ComputeInstances {
		if d.ClaimedMIG(ci.MIGUUID) {
			return true
		}
	}
	return false
}

// podReasons returns the reasons the set gives about one pod.
func (d *desiredSet) podReasons(uid string) []error {
	var out []error
	for _, r := range d.Reasons {
		switch e := r.(type) {
		case *reservation.PodError:
			if e.Pod.UID == uid {
				out = append(out, r)
			}
		case *reservation.ConflictError:
			if e.First.PodUID == uid || e.Second.PodUID == uid {
				out = append(out, r)
			}
		}
	}
	return out
}

// unrequested returns the trust-rule problems (reservation.ValidateRequests)
// of the container's entries, at positions mine, or nil: an entry for a
// container that does not request it is never realized.
func unrequested(pod *reservation.Pod, entries []reservation.Allocation, mine []int) error {
	err := reservation.ValidateRequests(entries, pod.DeviceRequests)
	if err == nil {
		return nil
	}
	var errs []error
	for _, e := range flattenJoin(err) {
		var ve *reservation.ValidationError
		if errors.As(e, &ve) && slices.Contains(mine, ve.Index) {
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

// flattenJoin undoes errors.Join.
func flattenJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, single := err.(*reservation.ValidationError); !single {
			return j.Unwrap()
		}
	}
	return []error{err}
}
