package reservation

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/dynmig/dynmig/capability"
)

// Sentinels for the reasons a [DesiredSet] withholds authorisation.
var (
	// ErrNotAuthorized is matched by [DesiredSet.Verdict] when destructive
	// reconciliation must be skipped.
	ErrNotAuthorized = errors.New("reservation: destructive reconciliation not authorised")
	// ErrIncompleteSnapshot: the pod listing was not complete.
	ErrIncompleteSnapshot = errors.New("reservation: incomplete pod listing")
	// ErrConflict is matched by every [*ConflictError]: two pods claim the
	// same hardware.
	ErrConflict = errors.New("reservation: pods claim the same hardware")
	// ErrPodIdentity: an active pod has an empty UID, or two listed pods
	// share a UID.
	ErrPodIdentity = errors.New("reservation: pod without a unique UID")
	// ErrLaterConflict is matched by a [*ConflictError] that [Desired]
	// resolved: the second entry's record was first seen on the node
	// strictly after the first's ([Pod.RecordSeen]), so the second entry
	// is withheld and the first kept. It does not withhold authorisation.
	ErrLaterConflict = errors.New("reservation: record first seen after a conflicting one")
	// ErrUnscheduledConflict is matched, together with [ErrLaterConflict],
	// by a [*ConflictError] that [Desired] resolved because only the
	// first entry's record arrived on the node with a scheduler's binding
	// ([Pod.RecordScheduled]): the second entry is withheld and the first
	// kept, whatever the records' first observations.
	ErrUnscheduledConflict = errors.New("reservation: record did not arrive with a scheduler's binding, a conflicting one did")
)

// PodRef names a pod. It is comparable; the zero value names no pod.
type PodRef struct {
	UID       string
	Namespace string
	Name      string
}

// String returns "namespace/name (uid)".
func (p PodRef) String() string {
	return p.Namespace + "/" + p.Name + " (" + p.UID + ")"
}

// Ref returns the pod's reference.
func (p *Pod) Ref() PodRef { return PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name} }

// Active reports whether the pod may still start containers: it is not
// being deleted and has not reached Succeeded or Failed. Only an active pod
// is allocated for. Whether its hardware may be reclaimed is a different
// question, answered by [Pod.Released]: a deleting pod is no longer active
// but its containers may still run.
func (p *Pod) Active() bool {
	return !p.Deleting && p.Phase != PodSucceeded && p.Phase != PodFailed
}

// Released reports whether the pod's devices may be reclaimed at time now:
// the pod reached Succeeded or Failed, or it is deleting and either every
// container is terminated or its deletion deadline (the end of its grace
// period) is not after now. A zero now is unknown and never passes a
// deadline. A pod that is gone from the API is released by its absence,
// which callers handle: this predicate only judges listed pods.
//
// Until then the pod's valid, trusted reservations stay in the desired
// set: the kubelet may still run its containers, and NVML destroys an
// instance that no process holds a context on even while a container keeps
// its device nodes open.
func (p *Pod) Released(now time.Time) bool {
	if p.Phase == PodSucceeded || p.Phase == PodFailed {
		return true
	}
	if !p.Deleting {
		return false
	}
	return p.ContainersTerminated || !now.IsZero() && !p.DeletionDeadline.IsZero() && !now.Before(p.DeletionDeadline)
}

// Entry is one reservation of one active pod. It is comparable.
type Entry struct {
	PodUID    string
	Namespace string
	Name      string
	// Index is the entry's position in the pod's annotation array.
	Index int
	Allocation
}

// Pod returns the reference of the entry's pod.
func (e Entry) Pod() PodRef { return PodRef{UID: e.PodUID, Namespace: e.Namespace, Name: e.Name} }

// String returns "namespace/name (uid) entry i".
func (e Entry) String() string { return e.Pod().String() + " entry " + strconv.Itoa(e.Index) }

// PodError reports one problem with one active pod's reservation record:
// Err is a [*DecodeError], a [*ValidationError], a [*LegacyError] or
// [ErrPodIdentity]. It matches Err with errors.Is and errors.As.
type PodError struct {
	Pod PodRef
	// Index is the annotation entry concerned, or -1 for the whole record.
	Index int
	Err   error
}

func (e *PodError) Error() string {
	msg := "reservation: pod " + e.Pod.String()
	if e.Index >= 0 {
		msg += " entry " + strconv.Itoa(e.Index)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *PodError) Unwrap() error { return e.Err }

// ConflictError reports two active pods whose otherwise valid records claim
// the same hardware. It matches [ErrConflict] and Problem ([ErrOverlap] or
// [ErrRuntimeConflict]) with errors.Is, [ErrLaterConflict] when Later is
// set, and [ErrUnscheduledConflict] when Unscheduled is set too.
type ConflictError struct {
	Problem       error
	First, Second Entry
	Detail        string
	// Later is set when [Desired] resolved the conflict: Second's entry
	// is withheld and First's kept. Second's record either did not arrive
	// with a scheduler's binding while First's did (Unscheduled), or was
	// first seen strictly after First's ([Pod.RecordSeen]).
	Later bool
	// Unscheduled is set when [Desired] resolved the conflict by
	// [Pod.RecordScheduled]: First's record arrived on the node with a
	// scheduler's binding and Second's did not. Later is set too.
	Unscheduled bool
}

func (e *ConflictError) Error() string {
	msg := "reservation: " + e.First.String() + " and " + e.Second.String() + ": " + e.Detail
	switch {
	case e.Unscheduled:
		msg += "; the second record did not arrive with a scheduler's binding and is withheld"
	case e.Later:
		msg += "; the second record was first seen later and is withheld"
	}
	return msg
}

// Unwrap returns [ErrConflict] and Problem, [ErrLaterConflict] when Later
// is set, and [ErrUnscheduledConflict] when Unscheduled is set.
func (e *ConflictError) Unwrap() []error {
	errs := []error{ErrConflict, e.Problem}
	if e.Later {
		errs = append(errs, ErrLaterConflict)
	}
	if e.Unscheduled {
		errs = append(errs, ErrUnscheduledConflict)
	}
	return errs
}

// DesiredSet is the node's desired allocation set computed by [Desired]:
// the reservations the realization manager must keep, and whether it may
// destroy instances outside them.
//
// The zero value is an empty set that authorises nothing. Its lookup
// methods scan linearly: a node holds tens of entries, not thousands.
type DesiredSet struct {
	// Active are the valid reservations of unreleased, trusted pods that
	// pass the trust rule ([ValidateRequests]), sorted by GPU UUID,
	// placement start and size, pod UID, container and device index.
	Active []Entry
	// Authorized reports whether destructive reconciliation may run:
	// the listing was complete and every unreleased pod's record was valid
	// and conflict-free, but for the conflicts [Desired] resolved by the
	// records' first observations. Reasons is empty exactly when
	// Authorized is true.
	Authorized bool
	// Reasons explain a withheld authorisation: [ErrIncompleteSnapshot],
	// [*PodError] values in pod listing order (at most [MaxProblems] per
	// pod), then [*ConflictError] values (at most MaxProblems; every pod in
	// a conflict is in Unknown all the same).
	Reasons []error
	// Unknown are unreleased pods whose records cannot be trusted
	// (malformed, invalid, legacy identifiers, conflicting), sorted by
	// UID. What they might own is unknown: never destroy it, never hand it
	// out.
	Unknown []PodRef
	// Withheld are the decodable entries of Unknown pods, the entries
	// that fail the trust rule and the entries that lose a conflict to
	// another record, in the same order as Active. They are claims to
	// respect (never destroyed under), not reservations to realize or
	// grant.
	Withheld []Entry
	// Untrusted are the [*PodError] values of entries that are withheld
	// without withholding authorisation: first, in pod listing order and
	// at most [MaxProblems] per pod, those that fail the trust rule, each
	// matching [ErrInvalid] and [ErrNotRequested], preceded, for a pod
	// that requests no MIG device, by the problems of its record that
	// name no entry (Index -1: a [*DecodeError], a [*LegacyError]); then those that lose a conflict to another record (see
	// [Desired]), each wrapping a [*ConflictError] whose Second is the
	// entry and that matches [ErrLaterConflict], exactly one per losing
	// entry (not capped, so that callers can map them back to entries),
	// in the order a scan of the conflicting pairs finds them. Such
	// entries are fully known, so they do not withhold authorisation:
	// otherwise anyone allowed to create a pod could stop all reclamation
	// on a node by annotating a pod that requests no GPU, or by copying
	// another pod's record.
	Untrusted []error
}

// Desired computes the desired allocation set of one node from a pod
// listing. Pods released at snap.Now ([Pod.Released]: Succeeded, Failed,
// or deleting with every container terminated or the grace period over)
// are ignored; a deleting pod whose containers may still run keeps its
// reservations. Each remaining pod's hami.io/vgpu-mig-allocations value is
// decoded strictly and validated; legacy v2.9 identifiers in
// hami.io/vgpu-devices-allocated are refused as not adoptable. A pod that
// requests a MIG device and whose record fails goes to Unknown and its
// problems to Reasons. A pod that requests none owns nothing, whatever its
// record says: its decodable entries go to Withheld and its problems to
// Untrusted, and it withholds nothing. Other pods'
// reservations stay in Active. Two valid pods claiming overlapping
// placements on one GPU, the same MIG UUID or the same GPU instance both
// go to Unknown. Any reason, or an incomplete listing, withholds
// authorisation.
//
// The trust rule ([ValidateRequests]) then applies to each valid record:
// entries for containers that do not request them go to Withheld, their
// errors to Untrusted, and take part in no conflict; the pod's other
// entries stay in Active.
//
// # Scheduled, then earlier, records win overlaps
//
// When two entries' placements overlap on one GPU and exactly one of the
// two pods has [Pod.RecordScheduled], and the other pod lacks
// [Pod.RecordStarted] (its containers may hold a device an observer that
// lost its record handed out), that pod's entry stays in Active and
// the other's goes to Withheld, its [*PodError] (wrapping a
// [*ConflictError] that matches [ErrLaterConflict] and
// [ErrUnscheduledConflict]) to Untrusted. Otherwise, when both pods carry
// a [Pod.RecordSeen] that is not zero and one is strictly earlier, the
// earlier pod's entry stays in Active and the later one is withheld the
// same way (matching [ErrLaterConflict]). Neither pod goes to Unknown for
// that pair and authorisation is not withheld. An entry withheld by
// either rule takes part in no other conflict: it is never realized, so a
// record that lost cannot make others untrusted. Whatever it names or
// overlaps is still never destroyed ([DesiredSet.Claimed]). Without both
// times, or with equal ones, both pods go to Unknown. Conflicts over one
// MIG UUID or one GPU instance ID are never resolved here: the observer
// resolves them from its own record of who was handed the instance before
// building the snapshot. See the package documentation for the facts
// these rules rely on.
func Desired(snap Snapshot) DesiredSet {
	var set DesiredSet
	if !snap.Complete {
		set.Reasons = append(set.Reasons, ErrIncompleteSnapshot)
	}
	unknown := make(map[string]PodRef)
	seen := make(map[string]*Pod) // the trusted pods
	trusted := set.addPods(snap, seen, unknown)
	// First the overlaps the records' binding and first observations
	// resolve, then the other conflicts of entries that lost none.
	lost := set.addConflicts(trusted, seen, unknown)
	for i, e := range trusted {
		if _, bad := unknown[e.PodUID]; bad || lost[i] {
			set.Withheld = append(set.Withheld, e)
		} else {
			set.Active = append(set.Active, e)
		}
	}
	for _, p := range unknown {
		set.Unknown = append(set.Unknown, p)
	}
	slices.SortFunc(set.Unknown, func(a, b PodRef) int { return cmp.Compare(a.UID, b.UID) })
	slices.SortFunc(set.Active, compareEntries)
	slices.SortFunc(set.Withheld, compareEntries)
	set.Authorized = len(set.Reasons) == 0
	return set
}

// addPods sorts the entries of the snapshot's pods not released, as
// [Desired] says: it returns the trusted ones, adding their pods to seen,
// withholds the others in set with their reasons, and adds the pods whose
// records withhold authorisation to unknown.
func (set *DesiredSet) addPods(snap Snapshot, seen map[string]*Pod, unknown map[string]PodRef) []Entry {
	// A UID listed twice cannot say which pod owns what, whatever the
	// order or phase of the two.
	listed := make(map[string]int, len(snap.Pods))
	for i := range snap.Pods {
		listed[snap.Pods[i].UID]++
	}
	var trusted []Entry
	for i := range snap.Pods {
		pod := &snap.Pods[i]
		if pod.Released(snap.Now) {
			continue
		}
		allocs, entries, reasons := podEntries(pod)
		if len(reasons) > 0 && !pod.RequestsDevices() && listed[pod.UID] == 1 && pod.UID != "" {
			// A pod that requests no MIG device owns none: whatever its
			// record holds is untrusted, never a reason to withhold
			// authorisation (see the package's trust rule).
			withheld, untrusted := untrustedRecord(pod, entries, reasons)
			set.Withheld = append(set.Withheld, withheld...)
			set.Untrusted = append(set.Untrusted, untrusted...)
			continue
		}
		if listed[pod.UID] > 1 || pod.UID == "" {
			reasons = append(reasons, &PodError{Pod: pod.Ref(), Index: -1, Err: ErrPodIdentity})
		}
		if len(reasons) == 0 {
			kept, withheld, untrusted := applyTrustRule(pod, allocs, entries)
			seen[pod.UID] = pod
			trusted = append(trusted, kept...)
			set.Withheld = append(set.Withheld, withheld...)
			set.Untrusted = append(set.Untrusted, untrusted...)
			continue
		}
		set.Reasons = append(set.Reasons, reasons...)
		unknown[pod.UID] = pod.Ref()
		set.Withheld = append(set.Withheld, entries...)
	}
	return trusted
}

// addConflicts applies [Desired]'s conflict rules to the trusted entries
// of the pods in seen: it returns which entries lost a resolved conflict
// (each loser's error goes to Untrusted), and adds the pods of the other
// conflicts to unknown and up to [MaxProblems] of those conflicts to
// Reasons.
func (set *DesiredSet) addConflicts(trusted []Entry, seen map[string]*Pod, unknown map[string]PodRef) []bool {
	pairs := conflictPairs(trusted)
	lost := make([]bool, len(trusted))
	for _, p := range pairs {
		w, l, unscheduled, ok := resolve(trusted, p.j, p.i, seen)
		if !ok {
			continue
		}
		if !lost[l] {
			c := conflictOf(&trusted[w], &trusted[l])
			c.Later, c.Unscheduled = true, unscheduled
			set.Untrusted = append(set.Untrusted, &PodError{Pod: trusted[l].Pod(), Index: trusted[l].Index, Err: c})
		}
		lost[l] = true
	}
	conflicts := 0
	for _, p := range pairs {
		if lost[p.i] || lost[p.j] {
			continue // the loser is withheld: no claim of its can be realized
		}
		a, b := &trusted[p.j], &trusted[p.i]
		unknown[a.PodUID], unknown[b.PodUID] = a.Pod(), b.Pod()
		if conflicts < MaxProblems {
			set.Reasons = append(set.Reasons, conflictOf(a, b))
			conflicts++
		}
	}
	return lost
}

// resolve resolves the conflict of trusted[i] and trusted[j]: it returns
// the winner's and the loser's indexes and true when the two overlap and
// either exactly one pod's record arrived with a scheduler's binding and
// the other's was not first seen on a started pod (unscheduled is then
// true), or both pods' first observations are known and differ.
func resolve(trusted []Entry, i, j int, pods map[string]*Pod) (winner, loser int, unscheduled, ok bool) {
	if conflictProblem(&trusted[i], &trusted[j]) != ErrOverlap {
		return 0, 0, false, false
	}
	pi, pj := pods[trusted[i].PodUID], pods[trusted[j].PodUID]
	switch {
	case pi.RecordScheduled && !pj.RecordScheduled && !pj.RecordStarted:
		return i, j, true, true
	case pj.RecordScheduled && !pi.RecordScheduled && !pi.RecordStarted:
		return j, i, true, true
	}
	ti, tj := pi.RecordSeen, pj.RecordSeen
	switch {
	case ti.IsZero() || tj.IsZero() || ti.Equal(tj):
		return 0, 0, false, false
	case ti.Before(tj):
		return i, j, false, true
	}
	return j, i, false, true
}

// applyTrustRule splits a valid record's entries into those the trust rule
// keeps, those it withholds, and the errors of the withheld ones.
func applyTrustRule(pod *Pod, allocs []Allocation, entries []Entry) (kept, withheld []Entry, errs []error) {
	err := ValidateRequests(allocs, pod.DeviceRequests)
	if err == nil {
		return entries, nil, nil
	}
	problems := flatten(err)
	bad := make([]bool, len(entries))
	for _, e := range problems {
		var ve *ValidationError
		if errors.As(e, &ve) {
			bad[ve.Index] = true
			errs = append(errs, &PodError{Pod: pod.Ref(), Index: ve.Index, Err: e})
		}
	}
	capped := len(problems) >= MaxProblems // past the cap nothing was checked: keep none of the rest
	for i, e := range entries {
		if bad[i] || capped {
			withheld = append(withheld, e)
		} else {
			kept = append(kept, e)
		}
	}
	return kept, withheld, errs
}

// untrustedRecord reports the record of a pod that requests no MIG device
// and that fails decoding, validation or carries legacy identifiers: its
// decodable entries are withheld, each with its trust rule error; the
// problems that name no withheld entry (a record that does not decode,
// legacy identifiers) are reported once each for the whole record (Index
// -1). At most [MaxProblems] errors are returned.
func untrustedRecord(pod *Pod, entries []Entry, problems []error) (withheld []Entry, untrusted []error) {
	for _, p := range problems {
		var pe *PodError
		if errors.As(p, &pe) && (errors.Is(pe.Err, ErrMalformed) || errors.As(pe.Err, new(*LegacyError))) {
			untrusted = append(untrusted, &PodError{Pod: pe.Pod, Index: -1, Err: pe.Err})
		}
	}
	for i := range entries {
		if len(untrusted) >= MaxProblems {
			break
		}
		untrusted = append(untrusted, &PodError{Pod: pod.Ref(), Index: i, Err: &ValidationError{Index: i, Other: -1,
			Field: "containerIndex", Problem: ErrNotRequested, Detail: "the pod requests no MIG device"}})
	}
	return entries, untrusted[:min(len(untrusted), MaxProblems)]
}

// RequestsDevices reports whether any container of the pod requests a MIG
// device ([Pod.DeviceRequests]).
func (p *Pod) RequestsDevices() bool {
	for _, n := range p.DeviceRequests {
		if n > 0 {
			return true
		}
	}
	return false
}

// podEntries decodes and validates one active pod's record.
func podEntries(pod *Pod) ([]Allocation, []Entry, []error) {
	ref := pod.Ref()
	var reasons []error
	if legacy := pod.Annotations[LegacyDevicesAnnotationKey]; legacy != "" {
		devs, _ := ParseLegacyDevices(legacy)
		for _, d := range devs {
			reasons = append(reasons, &PodError{Pod: ref, Index: -1, Err: &LegacyError{Device: d}})
		}
	}
	allocs, err := DecodeString(pod.Annotations[AnnotationKey])
	if err != nil {
		var de *DecodeError
		index := -1
		if errors.As(err, &de) {
			index = de.Index
		}
		return nil, nil, append(reasons, &PodError{Pod: ref, Index: index, Err: err})
	}
	entries := make([]Entry, len(allocs))
	for i, a := range allocs {
		entries[i] = Entry{PodUID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Index: i, Allocation: a}
	}
	if err := Validate(allocs); err != nil {
		for _, e := range flatten(err) {
			index := -1
			var ve *ValidationError
			if errors.As(e, &ve) {
				index = ve.Index
			}
			reasons = append(reasons, &PodError{Pod: ref, Index: index, Err: e})
		}
	}
	return allocs, entries, reasons
}

// flatten undoes errors.Join.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, isValidation := err.(*ValidationError); !isValidation {
			return j.Unwrap()
		}
	}
	return []error{err}
}

// Conflicts finds the hardware that entries of two different holders
// claim: overlapping placements on one GPU ([ErrOverlap]), one MIG UUID, or
// one GPU instance ID on one GPU ([ErrRuntimeConflict]). A holder is
// whatever Entry.PodUID names: a pod for the annotation protocol, or
// another record kind (such as a ResourceClaim) for callers that build
// entries themselves. Entries of one holder never conflict with each other
// here; [Validate] checks those.
//
// It returns every holder with an entry in a conflict, sorted by UID
// (what they own is unknown: [Desired] puts them in Unknown unless the
// records' first observations resolve the conflict; Conflicts does not
// know them), and the first
// [MaxProblems] conflicts, in the order [Desired] reports them. Its cost is
// linear in the entries but for entries sharing a GPU or a MIG UUID.
func Conflicts(entries []Entry) (holders []PodRef, conflicts []*ConflictError) {
	seen := make(map[string]bool)
	conflicts = crossPodConflicts(entries, func(e *Entry) {
		if !seen[e.PodUID] {
			seen[e.PodUID] = true
			holders = append(holders, e.Pod())
		}
	})
	slices.SortFunc(holders, func(a, b PodRef) int { return cmp.Compare(a.UID, b.UID) })
	return holders, conflicts
}

// crossPodConflicts finds hardware claimed by entries of two different
// pods, calls claimant for both entries of every such pair, and returns the
// first [MaxProblems] pairs as errors, ordered as a scan of every pair (i,
// j<i) would find them. A pair is one conflict, reported as overlap before
// MIG UUID before GPU instance ID.
//
// Only entries that can conflict are compared: those on one GPU (a pod's
// valid entries on one GPU do not overlap, so at most [capability.MaxSlots]
// of each pod) and those naming one MIG UUID (unique within a pod). Forged
// records of thousands of entries on distinct GPUs therefore cost linear
// time, not the square of every pod's entries.
func crossPodConflicts(entries []Entry, claimant func(*Entry)) []*ConflictError {
	found := conflictPairs(entries)
	out := make([]*ConflictError, 0, min(len(found), MaxProblems))
	for _, p := range found {
		claimant(&entries[p.j])
		claimant(&entries[p.i])
		if len(out) < MaxProblems {
			out = append(out, conflictOf(&entries[p.j], &entries[p.i]))
		}
	}
	return out
}

// entryPair names two entries by index, j < i.
type entryPair struct{ i, j int }

// conflictPairs returns every pair of entries of two different pods that
// conflict, ordered as a scan of every pair (i, j<i) would find them; see
// crossPodConflicts for what is compared.
func conflictPairs(entries []Entry) []entryPair {
	var found []entryPair
	check := func(group []int, sameGPU bool) {
		for x, i := range group {
			for _, j := range group[:x] {
				a, b := &entries[j], &entries[i]
				if a.PodUID == b.PodUID || !sameGPU && a.GPUUUID == b.GPUUUID {
					continue // the same GPU's pairs are the sameGPU pass's
				}
				if conflictProblem(a, b) != nil {
					found = append(found, entryPair{i, j})
				}
			}
		}
	}
	byGPU := map[string][]int{}
	byMIG := map[string][]int{}
	for i := range entries {
		byGPU[entries[i].GPUUUID] = append(byGPU[entries[i].GPUUUID], i)
		if m := entries[i].MIGUUID; m != "" {
			byMIG[m] = append(byMIG[m], i)
		}
	}
	for _, g := range byGPU {
		check(g, true)
	}
	for _, g := range byMIG {
		check(g, false)
	}
	slices.SortFunc(found, func(p, q entryPair) int { return cmp.Or(cmp.Compare(p.i, q.i), cmp.Compare(p.j, q.j)) })
	return found
}

// conflictProblem returns the problem ([ErrOverlap], [ErrRuntimeConflict])
// of two entries of different pods, or nil. It does not allocate.
func conflictProblem(a, b *Entry) error {
	switch {
	case a.GPUUUID == b.GPUUUID && a.Placement.Overlaps(b.Placement):
		return ErrOverlap
	case a.MIGUUID != "" && a.MIGUUID == b.MIGUUID,
		a.GPUUUID == b.GPUUUID && a.GPUInstanceID.Valid && b.GPUInstanceID.Valid && a.GPUInstanceID.ID == b.GPUInstanceID.ID:
		return ErrRuntimeConflict
	}
	return nil
}

// conflictOf describes the conflict of a pair conflictProblem found.
func conflictOf(a, b *Entry) *ConflictError {
	c := &ConflictError{Problem: conflictProblem(a, b), First: *a, Second: *b}
	switch {
	case c.Problem == ErrOverlap:
		c.Detail = a.Placement.String() + " overlaps " + b.Placement.String() + " on " + a.GPUUUID
	case a.MIGUUID != "" && a.MIGUUID == b.MIGUUID:
		c.Detail = "both claim " + a.MIGUUID
	default:
		c.Detail = "both claim GPU instance " + strconv.FormatUint(uint64(a.GPUInstanceID.ID), 10) + " on " + a.GPUUUID
	}
	return c
}

func compareEntries(a, b Entry) int {
	return cmp.Or(
		cmp.Compare(a.GPUUUID, b.GPUUUID),
		cmp.Compare(a.Placement.Start, b.Placement.Start),
		cmp.Compare(a.Placement.Size, b.Placement.Size),
		cmp.Compare(a.PodUID, b.PodUID),
		cmp.Compare(a.ContainerIndex, b.ContainerIndex),
		cmp.Compare(a.DeviceIndex, b.DeviceIndex),
	)
}

// Verdict returns nil when destructive reconciliation is authorised, else
// an error matching [ErrNotAuthorized] and every reason.
func (s *DesiredSet) Verdict() error {
	if s.Authorized {
		return nil
	}
	if len(s.Reasons) == 0 {
		return ErrNotAuthorized
	}
	return errors.Join(append([]error{ErrNotAuthorized}, s.Reasons...)...)
}

// Lookup returns the active entry of a pod's container and device.
func (s *DesiredSet) Lookup(podUID string, containerIndex, deviceIndex int) (Entry, bool) {
	for _, e := range s.Active {
		if e.PodUID == podUID && e.ContainerIndex == containerIndex && e.DeviceIndex == deviceIndex {
			return e, true
		}
	}
	return Entry{}, false
}

// Container returns the active entries of one container of a pod, ordered
// by device index.
func (s *DesiredSet) Container(podUID string, containerIndex int) []Entry {
	var out []Entry
	for _, e := range s.Active {
		if e.PodUID == podUID && e.ContainerIndex == containerIndex {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.DeviceIndex, b.DeviceIndex) })
	return out
}

// Pod returns the active entries of a pod, ordered by container and device
// index.
func (s *DesiredSet) Pod(podUID string) []Entry {
	var out []Entry
	for _, e := range s.Active {
		if e.PodUID == podUID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.ContainerIndex, b.ContainerIndex), cmp.Compare(a.DeviceIndex, b.DeviceIndex))
	})
	return out
}

// At returns the active entry reserving exactly placement p on the GPU.
func (s *DesiredSet) At(gpuUUID string, p capability.Placement) (Entry, bool) {
	for _, e := range s.Active {
		if e.GPUUUID == gpuUUID && e.Placement == p {
			return e, true
		}
	}
	return Entry{}, false
}

// Claimed reports whether any active or withheld entry claims a slot of p
// on the GPU. An instance whose placement is claimed must not be
// destroyed.
func (s *DesiredSet) Claimed(gpuUUID string, p capability.Placement) bool {
	for _, list := range [][]Entry{s.Active, s.Withheld} {
		for _, e := range list {
			if e.GPUUUID == gpuUUID && e.Placement.Overlaps(p) {
				return true
			}
		}
	}
	return false
}

// ClaimedMIG reports whether any active or withheld entry names the MIG
// UUID.
func (s *DesiredSet) ClaimedMIG(migUUID string) bool {
	if migUUID == "" {
		return false
	}
	for _, list := range [][]Entry{s.Active, s.Withheld} {
		for _, e := range list {
			if e.MIGUUID == migUUID {
				return true
			}
		}
	}
	return false
}

// IsUnknown reports whether the pod's record could not be trusted.
func (s *DesiredSet) IsUnknown(podUID string) bool {
	for _, p := range s.Unknown {
		if p.UID == podUID {
			return true
		}
	}
	return false
}
