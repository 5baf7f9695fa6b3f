package realize

import (
	"context"
	"errors"
	"time"

	"github.com/dynmig/dynmig/reservation"
)

// Demand is a protocol-neutral listing of what the node's holders want:
// the desired set the manager realizes, keeps, adopts and reclaims
// against. Either source fills it: the pod annotation protocol
// ([PodDemand]), or a DRA driver listing the ResourceClaims allocated to
// this node (one [Holder] per claim). A node's MIG devices must be managed
// by one manager fed with one protocol's listing: instances another source
// realized are, to this manager, unmanaged instances that may be
// collected.
//
// The zero value is an incomplete, empty listing: it authorises no
// destruction.
type Demand struct {
	// Complete is true when the listing holds every holder on the node:
	// the informer is synced and the list did not fail. An incomplete
	// listing never authorises destruction.
	Complete bool
	// Now is when the listing was taken; zero means the manager's clock
	// ([Options.Now]) when the pass runs. A holder missing from the
	// listing keeps its instances for [Options.AbsentPodGrace] counted to
	// this time.
	Now time.Time
	// Holders are the listed holders, in any order, including released
	// ones (whose identities keep their instances from being handed to
	// anyone else). A holder missing from a complete listing is gone.
	Holders []Holder
	// AdoptAtPlacement says that the source's GPU, profile and placement
	// come only from a trusted allocator (a ResourceClaim's status, which
	// only the scheduler writes), never from a holder's creator. Then
	// adoption, Prepare and Unprepare also take a live instance at exactly
	// a device's GPU, profile and placement, with one compute instance, as
	// the device's when the source records no runtime identity for it (a
	// checkpoint lost in a restart), provided it runs no process, no
	// released holder's device overlaps it and no other holder's identity
	// names it. It stays false for the annotation protocol, whose
	// placements a pod's creator can write.
	AdoptAtPlacement bool
}

// Holder is one record that holds MIG devices: a pod (annotation protocol)
// or a ResourceClaim (DRA). The zero value is an unreleased holder without
// UID, which never obtains anything.
type Holder struct {
	// UID is the holder's API UID: the pod's, or the ResourceClaim's. It
	// is Owner.PodUID of the holder's devices. An empty or duplicated UID
	// makes the holder untrusted.
	UID       string
	Namespace string
	Name      string
	// Released is true when no user of the holder can run any more (a
	// pod that is Succeeded, Failed, or deleting with its containers
	// terminated; a claim whose consumers all ended and that kubelet
	// unprepared or that is deallocated). Its devices are reclaimed, and
	// the runtime identities it records are never handed to another
	// holder.
	Released bool
	// Err, when not nil, says that the holder's record cannot be read or
	// trusted (malformed, legacy identifiers). Such a holder is Unknown:
	// its listed Devices are respected (never destroyed under, never
	// handed out) but not realized, and it withholds authorisation.
	Err error
	// Devices are the holder's devices.
	Devices []Want
}

// Want is one device a holder wants: the Allocation fields the scheduler
// writes (GPU UUID, profile, placement), an optional runtime identity the
// source recorded when it was realized, and the device's position. For a
// pod, ContainerIndex and DeviceIndex are the annotation's; for a
// ResourceClaim, ContainerIndex is the request's index in the claim's
// allocation and DeviceIndex the device's index within that request. The
// device's [Owner] is {Holder.UID, ContainerIndex, DeviceIndex}.
type Want struct {
	reservation.Allocation
	// Untrusted, when not nil, withholds this device only: it is a claim
	// to respect (nothing it names or overlaps is destroyed or collected)
	// but never realized, and it takes part in no conflict. The annotation
	// protocol uses it for entries that fail the trust rule
	// (reservation.ValidateRequests) and for entries that lose an overlap
	// to another pod's record (reservation.ErrLaterConflict).
	Untrusted error
}

// PodDemand returns the annotation protocol's demand for snap: one holder
// per listed pod, released as reservation.Pod.Released says at snap.Now,
// with the pod's decoded hami.io/vgpu-mig-allocations entries as devices.
// A pod whose record reservation.Desired cannot trust (malformed, invalid,
// legacy identifiers, duplicate UID) carries the reasons in Err; entries
// the trust rule withholds, and entries that lose an overlap to a record
// that arrived with a scheduler's binding or was first seen earlier
// (reservation.Pod.RecordScheduled, reservation.Pod.RecordSeen: errors
// matching reservation.ErrLaterConflict), carry theirs in Untrusted. The
// manager's snapshot methods ([Manager.Adopt], [Manager.Reconcile],
// [Manager.CollectLeaks], [Manager.Maintain]) act on the same desired set
// as their Demand forms applied to PodDemand(snap); the conflicts between
// pods that reservation.Desired left unresolved are found again from the
// devices.
func PodDemand(snap reservation.Snapshot) Demand {
	set := reservation.Desired(snap)
	recordErrs := make(map[string][]error)
	for _, r := range set.Reasons {
		if pe, ok := r.(*reservation.PodError); ok {
			recordErrs[pe.Pod.UID] = append(recordErrs[pe.Pod.UID], pe)
		}
	}
	// Desired reports exactly one error per entry that lost a conflict.
	type slot struct {
		uid   string
		index int
	}
	lost := make(map[slot]error)
	for _, u := range set.Untrusted {
		if pe, ok := u.(*reservation.PodError); ok && errors.Is(pe, reservation.ErrLaterConflict) {
			lost[slot{pe.Pod.UID, pe.Index}] = pe
		}
	}
	d := Demand{Complete: snap.Complete, Holders: make([]Holder, 0, len(snap.Pods))}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		h := Holder{UID: p.UID, Namespace: p.Namespace, Name: p.Name, Released: p.Released(snap.Now)}
		allocs, decodeErr := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
		if !h.Released {
			if errs := recordErrs[p.UID]; len(errs) > 0 {
				h.Err = errors.Join(errs...)
			} else if decodeErr != nil && p.RequestsDevices() {
				h.Err = decodeErr
			}
		}
		if decodeErr == nil && len(allocs) > 0 {
			h.Devices = make([]Want, len(allocs))
			for j, a := range allocs {
				h.Devices[j] = Want{Allocation: a}
			}
			if !h.Released && h.Err == nil {
				markUntrusted(p, allocs, h.Devices)
				for j := range h.Devices {
					if err := lost[slot{p.UID, j}]; err != nil && h.Devices[j].Untrusted == nil {
						h.Devices[j].Untrusted = err
					}
				}
			}
		}
		d.Holders = append(d.Holders, h)
	}
	return d
}

// markUntrusted applies the trust rule to a valid record as
// reservation.Desired does: entries for containers that do not request
// them are withheld, and so is every entry once the problems reach
// reservation.MaxProblems (past the cap nothing was checked).
func markUntrusted(p *reservation.Pod, allocs []reservation.Allocation, devs []Want) {
	err := reservation.ValidateRequests(allocs, p.DeviceRequests)
	if err == nil {
		return
	}
	problems := flattenJoin(err)
	for _, e := range problems {
		var ve *reservation.ValidationError
		if errors.As(e, &ve) && ve.Index >= 0 && ve.Index < len(devs) {
			devs[ve.Index].Untrusted = &reservation.PodError{Pod: p.Ref(), Index: ve.Index, Err: e}
		}
	}
	if len(problems) >= reservation.MaxProblems {
		for j := range devs {
			if devs[j].Untrusted == nil {
				devs[j].Untrusted = &reservation.PodError{Pod: p.Ref(), Index: j, Err: reservation.ErrNotRequested}
			}
		}
	}
}

// demandSet builds the manager's desired set from a neutral demand with
// reservation's rules: an incomplete listing, a holder whose record is
// unreadable (Err), whose devices fail reservation.Validate or whose UID
// is empty or duplicated, and holders whose trusted devices conflict,
// withhold authorisation; their devices are withheld, never realized or
// destroyed under. Untrusted devices are withheld alone.
func demandSet(d Demand) desiredSet {
	var set reservation.DesiredSet
	if !d.Complete {
		set.Reasons = append(set.Reasons, reservation.ErrIncompleteSnapshot)
	}
	count := make(map[string]int, len(d.Holders))
	for i := range d.Holders {
		count[d.Holders[i].UID]++
	}
	out := desiredSet{listed: make(map[string]bool, len(d.Holders)), active: make(map[string]bool, len(d.Holders)),
		atPlacement: d.AdoptAtPlacement, at: d.Now}
	unknown := make(map[string]reservation.PodRef)
	var trusted []reservation.Entry
	for i := range d.Holders {
		h := &d.Holders[i]
		ref := reservation.PodRef{UID: h.UID, Namespace: h.Namespace, Name: h.Name}
		out.listed[h.UID] = true
		entries, allocs := holderEntries(h)
		if h.Released {
			out.addEnded(entries)
			continue
		}
		out.active[h.UID] = true
		if reasons := holderReasons(h, ref, allocs, count[h.UID] > 1); len(reasons) > 0 {
			set.Reasons = append(set.Reasons, reasons...)
			unknown[h.UID] = ref
			set.Withheld = append(set.Withheld, entries...)
			continue
		}
		trusted = appendTrusted(&set, trusted, h, ref, entries)
	}
	withholdConflicts(&set, trusted, unknown)
	sortSet(&set)
	set.Authorized = len(set.Reasons) == 0
	out.DesiredSet = set
	return out
}

// holderEntries returns the entries and allocations of h's devices.
func holderEntries(h *Holder) ([]reservation.Entry, []reservation.Allocation) {
	entries := make([]reservation.Entry, len(h.Devices))
	allocs := make([]reservation.Allocation, len(h.Devices))
	for j := range h.Devices {
		allocs[j] = h.Devices[j].Allocation
		entries[j] = reservation.Entry{PodUID: h.UID, Namespace: h.Namespace, Name: h.Name, Index: j, Allocation: allocs[j]}
	}
	return entries, allocs
}

// addEnded records the entries of a released holder: their placements,
// and their owners by MIG UUID.
func (out *desiredSet) addEnded(entries []reservation.Entry) {
	out.endedAt = append(out.endedAt, entries...)
	for j := range entries {
		if m := entries[j].MIGUUID; m != "" {
			if out.ended == nil {
				out.ended = make(map[string]Owner)
			}
			out.ended[m] = entryOwner(&entries[j])
		}
	}
}

// holderReasons returns why the active holder h withholds authorisation:
// an unreadable record, an empty or repeated UID (dup), or devices that
// fail reservation.Validate (unless all of them are untrusted).
func holderReasons(h *Holder, ref reservation.PodRef, allocs []reservation.Allocation, dup bool) []error {
	var reasons []error
	if h.Err != nil {
		reasons = append(reasons, &reservation.PodError{Pod: ref, Index: -1, Err: h.Err})
	}
	if h.UID == "" || dup {
		reasons = append(reasons, &reservation.PodError{Pod: ref, Index: -1, Err: reservation.ErrPodIdentity})
	}
	if err := reservation.Validate(allocs); err != nil && !allUntrusted(h.Devices) {
		for _, e := range flattenJoin(err) {
			index := -1
			var ve *reservation.ValidationError
			if errors.As(e, &ve) {
				index = ve.Index
			}
			reasons = append(reasons, &reservation.PodError{Pod: ref, Index: index, Err: e})
		}
	}
	return reasons
}

// appendTrusted appends h's trusted entries to trusted, and withholds its
// untrusted ones in set, each with its reason.
func appendTrusted(set *reservation.DesiredSet, trusted []reservation.Entry, h *Holder, ref reservation.PodRef, entries []reservation.Entry) []reservation.Entry {
	for j := range entries {
		if err := h.Devices[j].Untrusted; err != nil {
			set.Withheld = append(set.Withheld, entries[j])
			var pe *reservation.PodError
			if !errors.As(err, &pe) {
				err = &reservation.PodError{Pod: ref, Index: j, Err: err}
			}
			set.Untrusted = append(set.Untrusted, err)
			continue
		}
		trusted = append(trusted, entries[j])
	}
	return trusted
}

// withholdConflicts sorts the trusted entries into set's active and
// withheld ones: the entries of holders in unknown and of holders whose
// entries conflict are withheld, and the conflicts are reasons.
func withholdConflicts(set *reservation.DesiredSet, trusted []reservation.Entry, unknown map[string]reservation.PodRef) {
	claimants, conflicts := reservation.Conflicts(trusted)
	for _, c := range conflicts {
		set.Reasons = append(set.Reasons, c)
	}
	for _, p := range claimants {
		unknown[p.UID] = p
	}
	for _, e := range trusted {
		if _, bad := unknown[e.PodUID]; bad {
			set.Withheld = append(set.Withheld, e)
		} else {
			set.Active = append(set.Active, e)
		}
	}
	for _, p := range unknown {
		set.Unknown = append(set.Unknown, p)
	}
}

// allUntrusted reports whether devs are all untrusted: none of them is
// ever realized, so the shape of the record that holds them cannot
// withhold authorisation.
func allUntrusted(devs []Want) bool {
	for i := range devs {
		if devs[i].Untrusted == nil {
			return false
		}
	}
	return true
}

// holder returns the first listed holder with the UID.
func (d *Demand) holder(uid string) (*Holder, bool) {
	for i := range d.Holders {
		if d.Holders[i].UID == uid {
			return &d.Holders[i], true
		}
	}
	return nil, false
}

// withReleased returns a copy of d in which every holder with the UID is
// released or not.
func (d Demand) withReleased(uid string, released bool) Demand {
	hs := make([]Holder, len(d.Holders))
	copy(hs, d.Holders)
	for i := range hs {
		if hs[i].UID == uid {
			hs[i].Released = released
		}
	}
	d.Holders = hs
	return d
}

// AdoptDemand is [Manager.Adopt] for a neutral demand: the same passes and
// rules over d's holders. With d.AdoptAtPlacement, an active device
// without a runtime identity is adopted when an idle live instance sits at
// exactly its GPU, profile and placement with one compute instance, no
// released holder's device overlaps it and no other holder names it (the
// report lists it as Adopted; a released holder's overlap makes it
// Rejected with [ErrConflict]); otherwise it is Pending, left to
// [Manager.Prepare].
func (m *Manager) AdoptDemand(ctx context.Context, d Demand) (AdoptReport, error) {
	want := demandSet(d)
	return m.adopt(ctx, &want)
}

// ReconcileDemand is [Manager.Reconcile] for a neutral demand: it releases
// managed instances whose holder is released or gone from a complete,
// authorised listing (after [Options.AbsentPodGrace] when merely gone),
// and keeps those of unreleased holders.
func (m *Manager) ReconcileDemand(ctx context.Context, d Demand) (ReconcileReport, error) {
	want := demandSet(d)
	return m.reconcile(ctx, &want)
}

// CollectLeaksDemand is [Manager.CollectLeaks] for a neutral demand.
func (m *Manager) CollectLeaksDemand(ctx context.Context, d Demand) (LeakReport, error) {
	want := demandSet(d)
	return m.collectLeaks(ctx, &want)
}

// MaintainDemand is [Manager.Maintain] for a neutral demand: adoption until
// it settles, reconcile, and leak collection when due, all against d. A
// DRA driver calls it at startup and periodically with a fresh listing of
// the claims allocated to the node.
func (m *Manager) MaintainDemand(ctx context.Context, d Demand) (MaintainReport, error) {
	want := demandSet(d)
	return m.maintain(ctx, &want)
}
