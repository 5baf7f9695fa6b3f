package kube

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// ErrBindInProgress: [SchedulerView.Reserve] was called for a pod that is
// already reserved or being bound; the first call's claim is kept.
var ErrBindInProgress = errors.New("kube: pod is already being bound")

// SchedulerViewOptions configures a [SchedulerView]. The zero value works.
type SchedulerViewOptions struct {
	// Resource is the extended resource the device plugin serves, whose
	// container limits are the device requests of the trust rule
	// ([reservation.ValidateRequests]); empty means [ResourceGPU].
	Resource corev1.ResourceName
	// Clock decides when a deleting pod passes its deletion deadline
	// ([reservation.Pod.Released]) and stamps [NodeClaim.Since]; nil is
	// the real clock.
	Clock clock.PassiveClock
	// Logger receives reservations the ledger cannot count (untrusted,
	// malformed or conflicting entries); nil discards them.
	Logger *slog.Logger
}

// SchedulerView keeps a [placement.Ledger] current for a scheduler from
// shared informers of nodes and pods, and records the scheduler's own
// binds, so that the ledger never double-books and never holds a dead
// pod's slots.
//
// # Model
//
// Node registrations are applied with [placement.Ledger.SetNode]; a
// malformed, empty or deleted registration leaves the node without GPUs
// but keeps its pods' reservations. A node event whose resourceVersion is
// older than the one applied last for the node is ignored, so the handlers
// may be fed an event again, ahead of or behind the informer. A pod occupies slots while it is bound
// (spec.nodeName), carries hami.io/vgpu-mig-allocations and is not
// [reservation.Pod.Released] at the view's clock; it then occupies exactly
// the entries the trust rule keeps ([reservation.ValidateRequests] over the
// container limits of [SchedulerViewOptions.Resource]). Other entries are
// reported and ignored. A deleting pod keeps its slots until its containers
// are terminated or its deletion deadline passes, the rule the device
// plugin reclaims by; call [SchedulerView.Refresh] before deciding so that
// deadlines passed since the last event take effect.
//
// Pod events are applied in the informer's order, and an event whose
// resourceVersion is older than the one applied last for the pod is
// ignored. A fresh listing ([SchedulerView.ObservePods]) is applied the
// same way and may run ahead of the informer, whose older events are then
// ignored. Between [SchedulerView.Reserve] and [SchedulerView.Bound] or
// [SchedulerView.Forget] the pod's events are held back, except one that
// shows the pod bound to another node than the one reserved: another
// scheduler (a previous leader, ahead of this one's informer) bound it,
// so the reservation is dropped and the pod's record counts at once, and
// Bound and Forget then change nothing. After Bound only events showing
// the pod bound are applied, because the bind is newer than any view of
// the pod that shows it unbound. So a lagging informer never
// deletes a reservation the scheduler made, and a pod that ends after its
// bind frees its slots as soon as that is observed.
//
// # Held until the pod ends
//
// Once the view holds a bound pod's slots (from its record as first
// applied, or from [SchedulerView.Bound]), it holds exactly those until
// the pod ends: deleted, terminal, or released while deleting. A later
// version whose record is removed, unreadable, or schedules other entries
// (changed or moved; a record that only gains or loses runtime identities
// is the same) keeps them, and the view follows only what the API server
// and the kubelet write: its deletion deadline and its admission, which
// lifts its claim. The record is writable by anyone who may update the
// pod, while the node's device plugin keeps what it handed out, so a view
// that freed or moved the slots would place the next pod on a live
// instance and the node would refuse it. This holds for fresh reads
// ([SchedulerView.ObservePods]) too. A view that never held the pod (a
// scheduler started after the record was removed) does not count it:
// nothing it may read says what the pod holds; the node's device plugin
// still refuses a pod placed there, so the residual is that pod's failed
// start, not a shared device.
//
// # Concurrency
//
// A SchedulerView is safe for concurrent use. It starts no goroutines: the
// informers it registers with ([SchedulerView.Register]) run its handlers on
// their own goroutines, owned by the caller's informer factory.
type SchedulerView struct {
	ledger   *placement.Ledger
	resource corev1.ResourceName
	clock    clock.PassiveClock
	log      *slog.Logger

	mu    sync.RWMutex         // read-locked by the scheduler's per-node checks (Claims), which run in parallel
	pods  map[string]*viewPod  // by UID: bound pods with a record, and pods being bound
	nodes map[string]*viewNode // by name
	regs  []cache.ResourceEventHandlerRegistration
	// synced: every registration of regs has synced, so HasSynced, which
	// schedulers call every cycle, need not ask them again.
	synced atomic.Bool

	byNode   map[string]map[string]*viewPod // pods by node, then UID
	deadline map[string]time.Time           // by UID: deletion deadlines still to pass
	// seen is the resourceVersion of the last event or fresh read of
	// every pod the view does not hold in pods, by UID; a pod in pods
	// keeps its own (viewPod.seen), which saves a map entry per MIG pod.
	// See seenVersion.
	seen    map[string]string
	changed chan struct{}           // closed on the next event; nil until Reflects asks for it
	resBuf  []placement.Reservation // ledgerReservations' buffer

	// Pods deleted while a fresh read ([SchedulerView.ObservePods]) was
	// in flight, so that its listing, which may predate the deletion,
	// does not bring them back: UID -> deletion count when deleted. Kept
	// while a read that began before the deletion is in flight.
	deletions uint64            // pod deletions applied so far
	reads     map[uint64]int    // fresh reads in flight, by deletions when they began
	tombs     map[string]uint64 // deleted UIDs a read in flight may still list
}

// bindState is where a pod stands with the scheduler's own bind.
type bindState uint8

const (
	notBinding bindState = iota
	binding              // reserved, not bound yet: events are held back
	bound                // bound by this view's owner: only bound views apply
)

// viewPod is what the view keeps of a pod; one exists per bound MIG pod,
// so what only a claim needs lives in claim, what the maps it is stored
// in already hold (its UID) is not repeated, and the fields are ordered
// to pack (96 bytes).
type viewPod struct {
	namespace, name string
	node            string      // the node it is indexed under in byNode
	seen            string      // resourceVersion of the last event or fresh read, when hasSeen
	version         uint64      // resourceVersion of the last applied event; 0 unknown
	held            *corev1.Pod // newest event held back while binding
	claim           *viewClaim  // nil once every entry is realized, or the pod was admitted
	state           bindState
	hasSeen         bool
	gone            bool // deleted while being bound
	ours            bool // bound through Bound
	untrust         bool // some entries failed the trust rule
	// admitted: the kubelet admitted the pod ([Admitted]); it holds no
	// claim.
	admitted bool
}

// ref returns the pod's reference; uid is its key.
func (p *viewPod) ref(uid string) reservation.PodRef {
	return reservation.PodRef{UID: uid, Namespace: p.namespace, Name: p.name}
}

// viewClaim is what a pod being bound, or bound with unrealized entries,
// needs for its claim on the node ([SchedulerView.Claims]).
type viewClaim struct {
	created time.Time
	since   time.Time // when bound through Bound or first seen unrealized
	// entries are the trusted entries while some lack a runtime
	// identity, nil otherwise (the ledger has its own copy).
	entries []reservation.Allocation
}

type viewNode struct {
	applied bool // reg was applied to the ledger
	version string
	reg     string
	gpus    []string // GPU UUIDs of the usable registration
}

// NewSchedulerView returns a view that keeps ledger current. It applies
// nothing until registered with informers ([SchedulerView.Register]) or
// fed through its handlers.
func NewSchedulerView(ledger *placement.Ledger, opts SchedulerViewOptions) *SchedulerView {
	if opts.Resource == "" {
		opts.Resource = ResourceGPU
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SchedulerView{ledger: ledger, resource: opts.Resource, clock: opts.Clock, log: log,
		pods: map[string]*viewPod{}, nodes: map[string]*viewNode{}, seen: map[string]string{},
		reads: map[uint64]int{}, tombs: map[string]uint64{},
		byNode: map[string]map[string]*viewPod{}, deadline: map[string]time.Time{}}
}

// Ledger returns the ledger the view keeps current.
func (v *SchedulerView) Ledger() *placement.Ledger { return v.ledger }

// Register adds the view's handlers to the factory's node and pod
// informers. Call it before starting the factory; [SchedulerView.HasSynced]
// then reports when both initial listings were applied.
func (v *SchedulerView) Register(factory informers.SharedInformerFactory) error {
	nr, err := factory.Core().V1().Nodes().Informer().AddEventHandler(v.NodeHandler())
	if err != nil {
		return err
	}
	pr, err := factory.Core().V1().Pods().Informer().AddEventHandler(v.PodHandler())
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.regs = append(v.regs, nr, pr)
	v.synced.Store(false)
	v.mu.Unlock()
	return nil
}

// HasSynced reports whether every registration's initial listing has been
// applied. A view that was never registered is not synced.
func (v *SchedulerView) HasSynced() bool {
	if v.synced.Load() {
		return true // a registration that has synced stays synced
	}
	v.mu.RLock()
	regs := slices.Clone(v.regs)
	v.mu.RUnlock()
	for _, r := range regs {
		if !r.HasSynced() {
			return false
		}
	}
	if len(regs) == 0 {
		return false
	}
	v.mu.Lock()
	// Unless Register added one meanwhile.
	v.synced.Store(len(v.regs) == len(regs))
	v.mu.Unlock()
	return true
}

// NodeHandler returns the handler that applies node registrations.
func (v *SchedulerView) NodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.applyNode(obj, false) },
		UpdateFunc: func(_, obj any) { v.applyNode(obj, false) },
		DeleteFunc: func(obj any) { v.applyNode(obj, true) },
	}
}

// PodHandler returns the handler that applies pod events.
func (v *SchedulerView) PodHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.applyPodEvent(obj) },
		UpdateFunc: func(_, obj any) { v.applyPodEvent(obj) },
		DeleteFunc: v.deletePodEvent,
	}
}

func (v *SchedulerView) applyNode(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	reg := node.Annotations[capability.NodeRegisterAnnotation]
	if deleted {
		reg = ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.notify()
	n := v.nodes[node.Name]
	if n == nil {
		n = &viewNode{}
		v.nodes[node.Name] = n
	}
	if !deleted && n.version != "" && older(node.ResourceVersion, n.version) {
		// Older than the version applied: an event delivered twice (a
		// scheduler's queueing hint applies events ahead of the informer).
		return
	}
	n.version = node.ResourceVersion
	if deleted {
		n.version = ""
		if len(v.byNode[node.Name]) == 0 {
			// Nothing to keep: node names come and go (autoscaling).
			delete(v.nodes, node.Name)
			v.ledger.RemoveNode(node.Name)
			return
		}
	}
	if n.applied && n.reg == reg && !deleted {
		// Keep the newest object's copy: a string kept from an older
		// object would hold a registration's bytes (about 6 KB for eight
		// GPUs) beside the informer's current copy.
		n.reg = reg
		return
	}
	v.applyRegistration(n, node, reg, deleted)
}

// applyRegistration makes reg, node's registration (none when deleted),
// what the ledger and n hold for the node. v.mu is held.
func (v *SchedulerView) applyRegistration(n *viewNode, node *corev1.Node, reg string, deleted bool) {
	n.applied = !deleted
	n.reg, n.gpus = reg, nil
	gpus, err := NodeGPUs(node)
	if err != nil {
		// A malformed entry takes out its GPU only: gpus holds the
		// others (none when the value as a whole is unusable).
		v.log.Warn("node registration partly unusable; those GPUs get no MIG pods", "node", node.Name, "usable", len(gpus), "err", err)
	}
	if deleted {
		gpus = nil
	}
	for _, g := range gpus {
		n.gpus = append(n.gpus, g.UUID)
	}
	// Without GPUs the node's pods stay recorded, so their slots are
	// still taken when a usable registration comes back.
	if err := v.ledger.SetNode(node.Name, gpus); err != nil && len(gpus) > 0 {
		v.log.Warn("node registration applied with problems", "node", node.Name, "err", err)
	}
}

func (v *SchedulerView) applyPodEvent(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.notify()
	v.observe(pod)
}

// observe applies one version of a pod, from an event or a fresh read,
// unless the view has applied a newer one: a fresh read may be ahead of
// the informer. v.mu is held.
func (v *SchedulerView) observe(pod *corev1.Pod) {
	uid := string(pod.UID)
	if seen, ok := v.seenVersion(uid); ok && older(pod.ResourceVersion, seen) {
		return
	}
	v.setSeen(uid, pod.ResourceVersion)
	v.applyPod(pod)
}

// seenVersion returns the resourceVersion of the pod uid's last event or
// fresh read, and whether the view has seen one since the pod's deletion.
// It is kept in the pod's viewPod while the view holds one, in v.seen
// otherwise; put and drop move it. v.mu is held.
func (v *SchedulerView) seenVersion(uid string) (string, bool) {
	if p := v.pods[uid]; p != nil {
		return p.seen, p.hasSeen
	}
	rv, ok := v.seen[uid]
	return rv, ok
}

// setSeen records rv as the pod uid's last seen resourceVersion. v.mu is
// held.
func (v *SchedulerView) setSeen(uid, rv string) {
	if p := v.pods[uid]; p != nil {
		p.seen, p.hasSeen = rv, true
		return
	}
	v.seen[uid] = rv
}

// forgetSeen forgets the pod uid's seen resourceVersion. v.mu is held.
func (v *SchedulerView) forgetSeen(uid string) {
	delete(v.seen, uid)
	if p := v.pods[uid]; p != nil {
		p.seen, p.hasSeen = "", false
	}
}

// notify wakes [SchedulerView.Reflects] waiters. v.mu is held.
func (v *SchedulerView) notify() {
	if v.changed != nil {
		close(v.changed)
		v.changed = nil
	}
}

// changes returns the channel notify closes, made when first asked for
// after a change: events that nobody waits for make none. v.mu is held.
func (v *SchedulerView) changes() <-chan struct{} {
	if v.changed == nil {
		v.changed = make(chan struct{})
	}
	return v.changed
}

func (v *SchedulerView) deletePodEvent(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	uid := string(pod.UID)
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.notify()
	v.forgetSeen(uid)
	v.deletions++
	if len(v.reads) > 0 {
		v.tombs[uid] = v.deletions
	}
	v.ledger.DeletePod(uid)
	if p := v.pods[uid]; p != nil && p.state == binding {
		// UIDs are never reused: the bind cannot succeed, and Bound must
		// not bring the pod back.
		p.gone, p.held = true, nil
		return
	}
	v.drop(uid)
}

// applyPod applies one observed version of a pod. v.mu is held.
func (v *SchedulerView) applyPod(pod *corev1.Pod) {
	uid := string(pod.UID)
	p := v.pods[uid]
	version := resourceVersion(pod)
	if p != nil {
		switch {
		case p.gone:
			return
		case p.state == binding && (pod.Spec.NodeName == "" || pod.Spec.NodeName == p.node):
			p.held = pod
			return
		case p.state == binding:
			// Bound to another node than the one this view's owner is
			// binding it to: someone else (a previous leader) bound it,
			// so the owner's bind cannot succeed, and the slots it holds
			// there count from now on, for decisions on that node made
			// before the bind fails. The assumption is dropped.
			v.ledger.Forget(uid)
			v.drop(uid)
			p = nil
		case p.state == bound && pod.Spec.NodeName == "":
			return // older than the bind
		case version != 0 && p.version != 0 && version < p.version:
			return // older than what was applied
		}
	}
	v.applyVersion(uid, p, pod, version)
}

// applyVersion applies a version of the pod uid (p when the view holds it)
// that is not older than what was applied. v.mu is held.
func (v *SchedulerView) applyVersion(uid string, p *viewPod, pod *corev1.Pod, version uint64) {
	view := podViewBare(pod, v.resource)
	_, annotated := pod.Annotations[reservation.AnnotationKey]
	now := v.clock.Now()
	if pod.Spec.NodeName == "" || view.Released(now) {
		if p != nil {
			v.ledger.DeletePod(uid)
			v.drop(uid)
		}
		return
	}
	if !annotated {
		// Removed from a bound pod that still runs: held until it ends.
		if v.holds(p, pod) {
			v.log.Warn("pod reservation removed while the pod runs; keeping what it last held", "pod", view.Ref().String())
			v.keepHeld(uid, p, pod, view, version)
		}
		return
	}
	allocs, err := PodAllocations(pod)
	if err != nil {
		// The record is unreadable: what the pod holds is unknown, so
		// whatever it was last known to hold stays taken.
		v.log.Warn("pod reservation unreadable; keeping what it last held", "pod", view.Ref().String(), "err", err)
		if v.holds(p, pod) {
			v.keepHeld(uid, p, pod, view, version)
		}
		return
	}
	kept, untrusted := trusted(allocs, view.DeviceRequests)
	if untrusted != nil {
		v.log.Warn("pod reservation entries not requested by their containers are ignored", "pod", view.Ref().String(), "err", untrusted)
	}
	if v.holds(p, pod) && !v.sameHeld(uid, kept) {
		// Changed or moved after the bind: the node keeps what the pod
		// was handed, and so does the view.
		v.log.Warn("pod reservation changed while the pod runs; keeping what it last held", "pod", view.Ref().String())
		v.keepHeld(uid, p, pod, view, version)
		return
	}
	v.record(uid, p, pod, view, kept, untrusted != nil, version, now)
}

// record makes kept, the trusted entries of the pod's record, what the pod
// uid holds (p when the view holds it already), with its claim while some
// entry is not realized. v.mu is held.
func (v *SchedulerView) record(uid string, p *viewPod, pod *corev1.Pod, view reservation.Pod, kept []reservation.Allocation, untrusted bool, version uint64, now time.Time) {
	if p == nil {
		p = &viewPod{}
	}
	admitted := Admitted(pod)
	unrealized := anyUnrealized(kept)
	c := p.claim
	if p.node != pod.Spec.NodeName || len(kept) > 0 && !unrealized || admitted {
		c = nil // the claim, and when it began, end
	}
	switch {
	case unrealized:
		if c == nil {
			c = &viewClaim{}
		}
		c.entries = kept
		if c.since.IsZero() && !admitted {
			c.since = now
		}
	case c != nil:
		c.entries = nil // no trusted entries: no claim, but when it began is kept
	}
	if c != nil {
		c.created = view.Created
	}
	if p.node != pod.Spec.NodeName {
		v.unindex(uid, p) // under the node it had
	}
	p.namespace, p.name, p.node, p.version, p.claim = view.Namespace, view.Name, pod.Spec.NodeName, version, c
	p.state, p.untrust, p.admitted = notBinding, untrusted, admitted
	var deadline time.Time
	if view.Deleting {
		deadline = view.DeletionDeadline
	}
	v.put(uid, p, deadline)
	rs := v.ledgerReservations(uid, kept)
	err := v.ledger.UpdatePod(p.node, uid, rs)
	clear(rs)
	if err != nil {
		// Before the node's registration is seen (informers deliver pods
		// and nodes in any order) every reservation on it reads as "GPU
		// not on node"; the ledger counts them once the node arrives, so
		// that is not worth a warning.
		level := slog.LevelWarn
		if gpus, ok := v.ledger.Node(p.node); !ok || len(gpus) == 0 {
			level = slog.LevelDebug
		}
		v.log.Log(context.Background(), level, "pod reservation recorded with problems", "pod", view.Ref().String(), "err", err)
	}
}

// TrustedEntries returns the entries of a pod's record that the trust rule
// keeps ([reservation.ValidateRequests] over requests, the pod's
// DeviceRequests), which are the only ones the scheduler counts, and the
// rule's error naming the others; they occupy nothing. Past
// [reservation.MaxProblems] failing entries it keeps none, as nothing
// beyond the cap was checked. Tools that show the scheduler's view (migctl)
// apply it through this function, so that they agree with [SchedulerView].
func TrustedEntries(allocs []reservation.Allocation, requests []int) ([]reservation.Allocation, error) {
	return trusted(allocs, requests)
}

// holds reports whether the view holds p as a bound pod on pod's node,
// whose slots are then held until the pod ends (see "Held until the pod
// ends" in [SchedulerView]'s documentation).
func (v *SchedulerView) holds(p *viewPod, pod *corev1.Pod) bool {
	return p != nil && p.state != binding && p.node == pod.Spec.NodeName
}

// sameHeld reports whether kept schedules exactly what the ledger holds
// for the pod uid: the record changed at most in its runtime identities.
func (v *SchedulerView) sameHeld(uid string, kept []reservation.Allocation) bool {
	rs := v.ledgerReservations(uid, kept)
	defer clear(rs)
	return v.ledger.Holds(uid, rs)
}

// ledgerReservations converts kept, the entries of the pod uid, into the
// view's buffer, which the next call reuses (the ledger copies what it
// records): one allocation less per pod event. Clear it after use, so that
// it does not keep the record's strings. v.mu is held.
func (v *SchedulerView) ledgerReservations(uid string, kept []reservation.Allocation) []placement.Reservation {
	v.resBuf = schedule.AppendLedgerReservations(v.resBuf[:0], uid, kept)
	return v.resBuf
}

// keepHeld applies a version of the held pod p whose record the view
// does not follow (removed, changed or unreadable): its slots and claim
// stay as they were, while what the API server and the kubelet set
// still applies: the version, a deletion deadline, and admission, which
// lifts the claim. v.mu is held.
func (v *SchedulerView) keepHeld(uid string, p *viewPod, pod *corev1.Pod, view reservation.Pod, version uint64) {
	p.version = max(p.version, version)
	if view.Deleting && !view.DeletionDeadline.IsZero() {
		v.deadline[uid] = view.DeletionDeadline
	}
	if Admitted(pod) {
		p.admitted, p.claim = true, nil
	}
}

// trusted returns the entries the trust rule keeps, and the rule's error.
func trusted(allocs []reservation.Allocation, requests []int) ([]reservation.Allocation, error) {
	err := reservation.ValidateRequests(allocs, requests)
	if err == nil {
		return allocs, nil
	}
	bad := make([]bool, len(allocs))
	n := 0
	for _, ve := range validationErrors(err) {
		if ve.Index >= 0 && ve.Index < len(allocs) {
			bad[ve.Index] = true
			n++
		}
	}
	if n >= reservation.MaxProblems {
		return nil, err // past the cap nothing was checked: count none
	}
	var kept []reservation.Allocation
	for i, a := range allocs {
		if !bad[i] {
			kept = append(kept, a)
		}
	}
	return kept, err
}

// validationErrors returns the *reservation.ValidationError values joined
// in err, in order.
func validationErrors(err error) []*reservation.ValidationError {
	if ve, ok := err.(*reservation.ValidationError); ok {
		return []*reservation.ValidationError{ve}
	}
	var out []*reservation.ValidationError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, validationErrors(e)...)
		}
	}
	return out
}

// anyUnrealized reports whether some entry lacks a runtime identity.
func anyUnrealized(allocs []reservation.Allocation) bool {
	for _, a := range allocs {
		if _, ok := a.Runtime(); !ok {
			return true
		}
	}
	return false
}

// unrealizedCounts returns, per container with an entry lacking a runtime
// identity, its number of entries, sorted; nil when all are realized.
func unrealizedCounts(allocs []reservation.Allocation) []int {
	var pending []int
	for _, a := range allocs {
		if _, ok := a.Runtime(); !ok && !slices.Contains(pending, a.ContainerIndex) {
			pending = append(pending, a.ContainerIndex)
		}
	}
	if pending == nil {
		return nil
	}
	counts := make([]int, 0, len(pending))
	for _, c := range pending {
		n := 0
		for _, a := range allocs {
			if a.ContainerIndex == c {
				n++
			}
		}
		counts = append(counts, n)
	}
	slices.Sort(counts)
	return counts
}

func resourceVersion(pod *corev1.Pod) uint64 {
	n, err := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Refresh frees the slots of deleting pods whose deletion deadline has
// passed at the view's clock. Schedulers call it before each decision.
func (v *SchedulerView) Refresh() {
	now := v.clock.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	for uid, d := range v.deadline {
		if !now.Before(d) {
			v.ledger.DeletePod(uid)
			v.drop(uid)
		}
	}
}

// ObservePods applies a fresh listing of pods: list must read them from
// the API server with a consistent read begun after ObservePods was called
// (a List with resourceVersion "", the default: a quorum read). Each listed
// pod is applied as an informer event would be, unless the view has
// already applied a newer version of it or seen it deleted meanwhile (UIDs
// are never reused); pods the listing lacks are left alone, since a
// listing never deletes anything. ObservePods returns list's error
// unchanged, having applied nothing.
//
// A scheduler calls it to make its view at least as new as the API server
// at one moment, typically for the pods of the node it is about to bind
// to: writes of another scheduler (a previous leader) that its informer
// has not delivered yet then count. Later informer events older than what
// it applied are ignored. ctx is passed to list.
func (v *SchedulerView) ObservePods(ctx context.Context, list func(context.Context) ([]corev1.Pod, error)) error {
	v.mu.Lock()
	began := v.deletions
	v.reads[began]++
	v.mu.Unlock()
	pods, err := list(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.endRead(began)
	if err != nil {
		return err
	}
	defer v.notify()
	for i := range pods {
		uid, rv := string(pods[i].UID), pods[i].ResourceVersion
		if n, deleted := v.tombs[uid]; deleted && n > began {
			continue // deleted while the read was in flight
		}
		if seen, _ := v.seenVersion(uid); rv != "" && seen == rv {
			continue // applied already: the informer is not behind on it
		}
		v.observe(&pods[i])
	}
	return nil
}

// endRead ends the fresh read begun at deletion count began and drops the
// tombstones no read in flight needs. v.mu is held.
func (v *SchedulerView) endRead(began uint64) {
	if v.reads[began]--; v.reads[began] <= 0 {
		delete(v.reads, began)
	}
	if len(v.reads) == 0 {
		clear(v.tombs)
		return
	}
	oldest := uint64(math.MaxUint64)
	for b := range v.reads {
		oldest = min(oldest, b)
	}
	// A read begun at b lists pods deleted after it began: tombstones
	// numbered above b.
	maps.DeleteFunc(v.tombs, func(_ string, n uint64) bool { return n <= oldest })
}

// Unrealized reports whether the view holds pod uid bound with a
// reservation some entry of which is not realized: a pod that may hold a
// node's claim ([SchedulerView.Claims]). It is false once the pod is seen
// realized, released or deleted, and for a pod being bound.
func (v *SchedulerView) Unrealized(uid string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.pods[uid]
	return p != nil && p.state != binding && !p.admitted && p.claim != nil && anyUnrealized(p.claim.entries)
}

// RegisteredGPUs returns how many GPUs of the node's registration the view
// applied (unhealthy ones included; entries that could not be read are
// not), and whether the node carries a registration annotation at all. A
// node the view does not know, or that was deleted, has neither.
func (v *SchedulerView) RegisteredGPUs(node string) (gpus int, annotated bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := v.nodes[node]
	if n == nil || !n.applied {
		return 0, false
	}
	return len(n.gpus), n.reg != ""
}

// put records p as the pod uid and indexes it by node and by its
// deletion deadline (zero when none), taking over the seen
// resourceVersion (seenVersion). A p the view held already must not be
// indexed under another node than p.node: unindex it before changing its
// node. v.mu is held.
func (v *SchedulerView) put(uid string, p *viewPod, deadline time.Time) {
	old := v.pods[uid]
	switch {
	case old != nil && old != p:
		v.unindex(uid, old)
		p.seen, p.hasSeen = old.seen, old.hasSeen
	case old == nil:
		p.seen, p.hasSeen = v.seen[uid]
		delete(v.seen, uid)
	}
	v.pods[uid] = p
	// A pod that stays on its node stays in its node's map: emptying the
	// map would drop it, and every event would allocate it anew.
	if ps := v.byNode[p.node]; ps[uid] != p {
		if ps == nil {
			ps = map[string]*viewPod{}
			v.byNode[p.node] = ps
		}
		ps[uid] = p
	}
	delete(v.deadline, uid)
	if !deadline.IsZero() {
		v.deadline[uid] = deadline
	}
}

// drop forgets the pod uid, keeping its seen resourceVersion. v.mu is
// held.
func (v *SchedulerView) drop(uid string) {
	p := v.pods[uid]
	delete(v.pods, uid)
	if p == nil {
		return
	}
	if p.hasSeen {
		v.seen[uid] = p.seen
	}
	v.unindex(uid, p)
	// A node only pods named (spec.nodeName is written by the pod's
	// creator) is forgotten with its last pod, or every name ever used
	// would stay in the ledger.
	if n := v.nodes[p.node]; len(v.byNode[p.node]) == 0 && (n == nil || !n.applied) {
		delete(v.nodes, p.node)
		v.ledger.RemoveNode(p.node)
	}
}

// unindex removes p, the pod uid, from byNode under p.node, and its
// deletion deadline. v.mu is held.
func (v *SchedulerView) unindex(uid string, p *viewPod) {
	if ps := v.byNode[p.node]; ps[uid] == p {
		delete(ps, uid)
		if len(ps) == 0 {
			delete(v.byNode, p.node)
		}
	}
	delete(v.deadline, uid)
}

// Reserve chooses placements for pod on node and assumes them in the
// ledger under the node's lock ([placement.Ledger.Reserve]); from now on
// the pod's events are held back until [SchedulerView.Bound] or
// [SchedulerView.Forget]. It fails with [ErrBindInProgress] when the pod is
// already reserved or being bound, or with the ledger's error, recording
// nothing.
func (v *SchedulerView) Reserve(node string, pod *corev1.Pod, req *placement.Request) ([]placement.Assignment, error) {
	uid := string(pod.UID)
	v.mu.Lock()
	defer v.mu.Unlock()
	if p := v.pods[uid]; p != nil && p.state == binding {
		return nil, ErrBindInProgress
	}
	as, err := v.ledger.Reserve(node, uid, req)
	if err != nil {
		return nil, err
	}
	prev := v.pods[uid]
	p := &viewPod{namespace: pod.Namespace, name: pod.Name, node: node, claim: &viewClaim{created: pod.CreationTimestamp.Time}, state: binding}
	if prev != nil {
		p.version = prev.version
	}
	v.put(uid, p, time.Time{})
	return as, nil
}

// Forget drops the reservation of a pod whose bind failed and applies the
// newest event held back meanwhile.
func (v *SchedulerView) Forget(uid string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.pods[uid]
	if p == nil || p.state != binding {
		return
	}
	v.ledger.Forget(uid)
	v.drop(uid)
	if p.held != nil && !p.gone {
		v.applyPod(p.held)
	}
}

// Bound records that pod was bound to node with the reservation as, which
// the caller wrote to the pod before binding it. The reservation is a fact
// from now on: events showing the pod unbound are older and ignored, and
// the pod holds the node's claim ([SchedulerView.Claims]) until its
// reservation is seen realized. A pod deleted meanwhile stays deleted.
func (v *SchedulerView) Bound(pod *corev1.Pod, node string, as []placement.Assignment) {
	uid := string(pod.UID)
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.pods[uid]
	if p == nil || p.state != binding {
		return
	}
	if p.gone {
		v.drop(uid)
		return
	}
	held := p.held
	if p.claim == nil {
		p.claim = &viewClaim{created: pod.CreationTimestamp.Time}
	}
	p.state, p.held, p.ours = bound, nil, true
	p.claim.since, p.claim.entries = v.clock.Now(), schedule.Allocations(as)
	if err := v.ledger.AddPod(node, uid, placement.Reservations(uid, as)); err != nil {
		v.log.Warn("confirming reservation", "pod", p.ref(uid).String(), "err", err)
	}
	if held != nil && held.Spec.NodeName != "" {
		v.applyPod(held)
	}
}

// NodeClaim is a bound pod whose reservation on the node is not realized
// yet, which the device plugin must tell apart from any other such pod.
type NodeClaim struct {
	Pod     reservation.PodRef
	Created time.Time // metadata.creationTimestamp, set by the API server
	// Since is when this view's owner bound the pod, or when the view
	// first saw it bound with an unrealized reservation.
	Since time.Time
	// Pending lists, sorted, the number of entries of each container whose
	// reservation is not realized: the device counts the device plugin
	// matches Allocate calls against.
	Pending []int
	// Ours is true when the pod was bound through [SchedulerView.Bound].
	Ours bool
}

// Blocking returns the claim among a node's claims ([SchedulerView.Claims])
// that keeps the pod uid, asking for req, off the node, and whether there
// is one: a claim younger than timeout blocks every other MIG pod; an
// older one is stale, handed to stale (when not nil), and blocks only a
// pod the device plugin could confuse with it: one with a container
// requesting as many devices as one of the claim's unrealized containers
// holds, since the device plugin matches an Allocate to the
// earliest-created pod's unrealized container of that size. The pod's own
// claim never blocks it.
func Blocking(claims []NodeClaim, uid string, req *placement.Request, now time.Time, timeout time.Duration, stale func(NodeClaim)) (NodeClaim, bool) {
	for _, c := range claims {
		if c.Pod.UID == uid {
			continue
		}
		if now.Sub(c.Since) < timeout {
			return c, true
		}
		if stale != nil {
			stale(c)
		}
		if c.confusable(req) {
			return c, true
		}
	}
	return NodeClaim{}, false
}

// confusable reports whether the device plugin could match an Allocate of
// req's pod to one of the claim's unrealized containers.
func (c NodeClaim) confusable(req *placement.Request) bool {
	for _, rc := range req.Containers {
		if rc.Devices > 0 && slices.Contains(c.Pending, rc.Devices) {
			return true
		}
	}
	return false
}

// Claims returns the node's claims, earliest created first (then by UID):
// pods bound through [SchedulerView.Bound], and pods that provably request
// the MIG resource with entries on the node's GPUs (trusted entries only,
// every one on a GPU of the node's registration), whose reservation is not
// realized and that are not released. A pod the kubelet admitted
// ([Admitted]) claims nothing: its devices were handed out, so an owner
// who strips the runtime identity from its record cannot lock the node.
// Pods with entries the trust rule rejects claim nothing by those entries,
// whatever their annotations say.
func (v *SchedulerView) Claims(node string) []NodeClaim {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []NodeClaim
	gpus := v.nodes[node]
	for uid, p := range v.byNode[node] {
		if p.state == binding {
			continue
		}
		if p.claim == nil {
			continue
		}
		pending := unrealizedCounts(p.claim.entries)
		if pending == nil || p.admitted || !p.ours && !onNode(p.claim.entries, gpus) {
			continue
		}
		out = append(out, NodeClaim{Pod: p.ref(uid), Created: p.claim.created, Since: p.claim.since, Pending: pending, Ours: p.ours})
	}
	slices.SortFunc(out, func(a, b NodeClaim) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Pod.UID, b.Pod.UID))
	})
	return out
}

func onNode(allocs []reservation.Allocation, n *viewNode) bool {
	if n == nil || len(allocs) == 0 {
		return false
	}
	for _, a := range allocs {
		if !slices.Contains(n.gpus, a.GPUUUID) {
			return false
		}
	}
	return true
}

// Reflects reports whether the view has applied every listed pod and node
// at its listed resourceVersion or a newer one (for a node at the same
// version, the same registration), and holds no pod the listing lacks; if not, it also returns a channel that is closed when the
// view next changes. A caller that wants to read its own writes lists the
// API server after writing and waits until the view reflects the listing
// (see extender's Sync).
func (v *SchedulerView) Reflects(pods []corev1.Pod, nodes []corev1.Node) (bool, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	listed := make(map[string]bool, len(pods))
	for i := range pods {
		uid := string(pods[i].UID)
		listed[uid] = true
		seen, ok := v.seenVersion(uid)
		if !ok || !notOlder(seen, pods[i].ResourceVersion) {
			return false, v.changes()
		}
	}
	for uid, p := range v.pods {
		if !listed[uid] && p.state != binding {
			return false, v.changes()
		}
	}
	for i := range nodes {
		n := v.nodes[nodes[i].Name]
		rv := nodes[i].ResourceVersion
		if n == nil || !notOlder(n.version, rv) ||
			n.version == rv && n.reg != nodes[i].Annotations[capability.NodeRegisterAnnotation] {
			return false, v.changes()
		}
	}
	return true, nil
}

// older reports whether resourceVersion a is older than b; versions that
// are not numbers are never older.
func older(a, b string) bool {
	x, xerr := strconv.ParseUint(a, 10, 64)
	y, yerr := strconv.ParseUint(b, 10, 64)
	return xerr == nil && yerr == nil && x < y
}

// notOlder reports whether resourceVersion have is the same as or newer
// than want; versions that are not numbers compare only for equality.
func notOlder(have, want string) bool {
	h, herr := strconv.ParseUint(have, 10, 64)
	w, werr := strconv.ParseUint(want, 10, 64)
	if herr != nil || werr != nil {
		return have == want
	}
	return h >= w
}
