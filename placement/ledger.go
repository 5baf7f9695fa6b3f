package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/dynmig/dynmig/capability"
)

// Reservation is one reserved MIG device as the ledger accounts it: the
// scheduler-written fields of a hami.io/vgpu-mig-allocations entry, keyed by
// the owning pod. The scheduler glue converts reservation.Allocation values
// to and from it. Reservation is comparable.
type Reservation struct {
	PodUID         string
	ContainerIndex int
	DeviceIndex    int
	GPUUUID        string
	Profile        string
	Placement      capability.Placement
}

// Reservations converts the assignments of one pod to reservations.
func Reservations(podUID string, as []Assignment) []Reservation {
	out := make([]Reservation, len(as))
	for i, a := range as {
		out[i] = Reservation{PodUID: podUID, ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement}
	}
	return out
}

// LedgerOptions configures a [Ledger]. The zero value works.
type LedgerOptions struct {
	// Policy and MaxSteps configure the selectors of [Ledger.Reserve] and
	// [Ledger.Evaluate]; see [SelectorOptions].
	Policy   Policy
	MaxSteps int
	// Score is the node scoring mode of [Ledger.Evaluate].
	Score ScoreMode
}

// Ledger is the scheduler's occupancy model: per node, per GPU, the slots
// taken by the reservations of active pods, rebuilt from pod annotations and
// kept current incrementally.
//
// Pods enter the ledger two ways. Observed pods (from an informer) are
// recorded with [Ledger.AddPod] / [Ledger.UpdatePod] and leave with
// [Ledger.DeletePod]. Scheduling decisions are assumed before the pod is
// bound: [Ledger.Reserve] chooses and records a placement atomically under
// the node's lock, so two concurrent decisions never take the same slots;
// [Ledger.Forget] drops an assumption that did not bind; a later AddPod of
// the same pod confirms it.
//
// A Ledger is safe for concurrent use. Operations on different pods and
// nodes proceed in parallel (one lock per node); operations on the same pod
// must be ordered by the caller, as informer handlers are. Locks are held
// only for bounded in-memory work (one placement decision at most), so the
// methods take no context.
type Ledger struct {
	opts LedgerOptions

	mu    sync.RWMutex // guards nodes
	nodes map[string]*nodeLedger

	idxMu   sync.Mutex // leaf lock: never held while taking another
	podNode map[string]string

	selectors sync.Pool
}

// nodeLedger is one node's GPUs, occupancy and pods.
type nodeLedger struct {
	mu   sync.RWMutex
	name string
	gpus []GPUState
	// Per GPU, per slot: reservations covering it. Each GPU's slice is
	// as long as its grid and grows only for a reservation beyond it,
	// rather than capability.MaxSlots long (8 slots on most models, 64
	// possible): it is a third of a 5,000-node ledger otherwise.
	counts [][]uint16
	pods   map[string]*podEntry
}

// podEntry is one pod's reservations on a node. A ledger holds one per
// MIG pod of the cluster, so it is kept small (80 bytes for the common
// single-device pod): the pod UID is the key it is stored under, and held
// carries no derived fields.
type podEntry struct {
	held    []held
	one     [1]held // backing store of held for single-device pods
	assumed bool
}

// held is a [Reservation] as a node keeps it, without the pod UID (its
// entry's key). Indexes fit an int32: checkPod refuses larger ones. Where
// it lies on the node (nodeLedger.locate) is derived from the node's GPUs
// rather than stored, which keeps it at 48 bytes.
type held struct {
	gpuUUID   string
	profile   string
	placement capability.Placement
	container int32
	device    int32
}

func newHeld(r Reservation) held {
	return held{gpuUUID: r.GPUUUID, profile: r.Profile, placement: r.Placement,
		container: int32(r.ContainerIndex), device: int32(r.DeviceIndex)}
}

// reservation returns h as the pod podUID's reservation.
func (h *held) reservation(podUID string) Reservation {
	return Reservation{PodUID: podUID, ContainerIndex: int(h.container), DeviceIndex: int(h.device),
		GPUUUID: h.gpuUUID, Profile: h.profile, Placement: h.placement}
}

// NewLedger returns an empty ledger.
func NewLedger(opts LedgerOptions) *Ledger {
	l := &Ledger{opts: opts, nodes: map[string]*nodeLedger{}, podNode: map[string]string{}}
	l.selectors.New = func() any { return NewSelector(SelectorOptions{Policy: opts.Policy, MaxSteps: opts.MaxSteps}) }
	return l
}

// SetNode records or replaces the GPUs of a node (from its node registration)
// and rebuilds its occupancy from the pods the ledger holds for it. GPUs with
// identical profile tables share one compiled table. It fails, changing
// nothing, with a [*GridError] when a GPU cannot be compiled or two GPUs
// share a UUID; reservations
// that no longer resolve (unknown GPU or profile, unpublished placement,
// outside the grid) are returned as joined [*ReservationError]s, but the
// node is updated. Occupancy comes from what pods hold, never from the
// table: a reservation on one of the node's GPUs keeps its slots however
// the table changed (an allowlist that drops its profile, a grid narrower
// than its placement), until the pod is deleted; [Ledger.Conflicts] lists
// it meanwhile.
func (l *Ledger) SetNode(name string, gpus []capability.GPU) error {
	states := make([]GPUState, len(gpus))
	for i := range gpus {
		for j := range i {
			if gpus[j].UUID == gpus[i].UUID {
				return &GridError{UUID: gpus[i].UUID, Reason: fmt.Sprintf("GPUs %d and %d share the UUID", j, i)}
			}
		}
		g, err := NewGrid(&gpus[i])
		if err != nil {
			return err
		}
		states[i] = GPUState{Grid: g}
	}
	l.mu.Lock()
	n := l.nodeLocked(name)
	l.mu.Unlock()

	n.mu.Lock()
	defer n.mu.Unlock()
	n.gpus = states
	n.counts = make([][]uint16, len(states))
	width := 0
	for i := range states {
		width += int(states[i].Grid.Width())
	}
	// One backing array for the node; each GPU's slice is capped at its
	// width, so growing one (occupy) copies it instead of overwriting the
	// next GPU's.
	buf := make([]uint16, width)
	for i := range states {
		w := int(states[i].Grid.Width())
		n.counts[i], buf = buf[:w:w], buf[w:]
	}
	var errs []error
	for _, uid := range n.sortedPods() {
		e := n.pods[uid]
		errs = append(errs, n.resolve(uid, e.held)...)
		for i := range e.held {
			n.occupy(&e.held[i])
		}
	}
	return errors.Join(errs...)
}

func (l *Ledger) nodeLocked(name string) *nodeLedger {
	n, ok := l.nodes[name]
	if !ok {
		n = &nodeLedger{name: name, pods: map[string]*podEntry{}}
		l.nodes[name] = n
	}
	return n
}

func (l *Ledger) node(name string) *nodeLedger {
	l.mu.RLock()
	n := l.nodes[name]
	l.mu.RUnlock()
	return n
}

// RemoveNode forgets a node and every pod the ledger holds for it. The pods'
// reservations are gone for good: a caller that only feeds the ledger pod
// changes must add them again if the node returns. To take a node out of
// scheduling while keeping its pods (a registration that is briefly
// malformed, say), call SetNode with no GPUs instead.
func (l *Ledger) RemoveNode(name string) {
	l.mu.Lock()
	n := l.nodes[name]
	delete(l.nodes, name)
	l.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	uids := n.sortedPods()
	n.mu.Unlock()
	l.idxMu.Lock()
	for _, uid := range uids {
		if l.podNode[uid] == name {
			delete(l.podNode, uid)
		}
	}
	l.idxMu.Unlock()
}

// Nodes returns the names of the nodes the ledger knows, sorted.
func (l *Ledger) Nodes() []string {
	l.mu.RLock()
	out := make([]string, 0, len(l.nodes))
	for name := range l.nodes {
		out = append(out, name)
	}
	l.mu.RUnlock()
	sort.Strings(out)
	return out
}

// AddPod records the reservations of an observed pod on node, replacing any
// earlier record of the pod (assumed or observed, on any node); an assumed
// pod is thereby confirmed. A node the ledger does not know yet is created
// without GPUs; its reservations count once [Ledger.SetNode] arrives.
//
// Observed reservations are facts, so they are recorded even when they are
// wrong: overlaps with another pod are reported as a [*ConflictError], and
// unresolvable entries as [*ReservationError]s (joined), while every
// reservation that lies on a known GPU's grid occupies its slots. Repeated
// (container, device) pairs, and negative indexes or indexes over
// math.MaxInt32 (the annotation format's bound), are refused with a
// [*ReservationError] and nothing is recorded.
func (l *Ledger) AddPod(node, podUID string, rs []Reservation) error {
	if err := checkPod(podUID, rs); err != nil {
		return err
	}
	l.idxMu.Lock()
	old, had := l.podNode[podUID]
	l.podNode[podUID] = node
	l.idxMu.Unlock()
	if had && old != node {
		if n := l.node(old); n != nil {
			n.mu.Lock()
			n.remove(podUID)
			n.mu.Unlock()
		}
	}
	l.mu.Lock()
	n := l.nodeLocked(node)
	l.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.remove(podUID)
	_, err := n.add(podUID, rs, false)
	return err
}

// UpdatePod is [Ledger.AddPod]: the pod's record is replaced as a whole.
func (l *Ledger) UpdatePod(node, podUID string, rs []Reservation) error {
	return l.AddPod(node, podUID, rs)
}

// DeletePod drops every reservation of the pod, assumed or observed, and
// reports whether it had any. Slots still covered by another pod's
// (conflicting) reservation stay taken.
func (l *Ledger) DeletePod(podUID string) bool {
	_, n := l.podLedger(podUID, true)
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.remove(podUID)
}

// Assume records reservations the caller chose for a pod that is not bound
// yet. Unlike AddPod it is strict: it fails, recording nothing, with
// [ErrPodExists] when the ledger already holds the pod, [ErrUnknownNode],
// a [*ReservationError] for an entry that does not resolve to a published
// placement, or a [*ConflictError] when a slot is taken.
func (l *Ledger) Assume(node, podUID string, rs []Reservation) error {
	if err := checkPod(podUID, rs); err != nil {
		return err
	}
	n := l.node(node)
	if n == nil {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	if err := l.claim(podUID, node); err != nil {
		return err
	}
	n.mu.Lock()
	ok, err := n.add(podUID, rs, true)
	n.mu.Unlock()
	if !ok {
		l.unclaim(podUID, node)
	}
	return err
}

// Reserve chooses placements for req on node and assumes them for the pod,
// atomically under the node's lock, and returns them. It fails with
// [ErrPodExists], [ErrUnknownNode], a [*RequestError] or an
// [*UnschedulableError], recording nothing.
func (l *Ledger) Reserve(node, podUID string, req *Request) ([]Assignment, error) {
	n := l.node(node)
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	if podUID == "" {
		return nil, &RequestError{Container: -1, Field: "PodUID", Reason: "empty pod UID"}
	}
	if err := l.claim(podUID, node); err != nil {
		return nil, err
	}
	sel := l.selectors.Get().(*Selector)
	defer l.selectors.Put(sel)
	n.mu.Lock()
	as, err := sel.Select(n.gpus, req, nil)
	if err == nil && len(as) > 0 {
		// Straight into the pod's entry: Reservations would build a
		// list only to copy it.
		e := newPodEntry(len(as), true)
		for i, a := range as {
			e.held[i] = held{gpuUUID: a.GPUUUID, profile: a.Profile, placement: a.Placement,
				container: int32(a.ContainerIndex), device: int32(a.DeviceIndex)}
		}
		_, err = n.insert(podUID, e)
	}
	n.mu.Unlock()
	if err != nil || len(as) == 0 {
		l.unclaim(podUID, node)
		if err != nil {
			return nil, err
		}
	}
	return as, nil
}

// Forget drops the pod's reservations if they are still only assumed (the
// pod was not observed since) and reports whether it did.
func (l *Ledger) Forget(podUID string) bool {
	node, n := l.podLedger(podUID, false)
	if n == nil {
		return false
	}
	n.mu.Lock()
	e := n.pods[podUID]
	dropped := e != nil && e.assumed && n.remove(podUID)
	n.mu.Unlock()
	if dropped {
		l.unclaim(podUID, node)
	}
	return dropped
}

// podLedger returns the node the pod is recorded on and its ledger (nil
// when the pod or its node is unknown), dropping the pod from the index
// when drop is set.
func (l *Ledger) podLedger(podUID string, drop bool) (string, *nodeLedger) {
	l.idxMu.Lock()
	node, ok := l.podNode[podUID]
	if drop {
		delete(l.podNode, podUID)
	}
	l.idxMu.Unlock()
	if !ok {
		return "", nil
	}
	return node, l.node(node)
}

// Evaluate decides whether req fits node now and scores the node for it
// (see [NodeScore]) without recording anything: the Filter and Score of a
// scheduler plugin in one call. It returns [ErrUnknownNode], a
// [*RequestError] or an [*UnschedulableError] when the pod does not fit.
func (l *Ledger) Evaluate(node string, req *Request) (int64, error) {
	n := l.node(node)
	if n == nil {
		return 0, fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	sel := l.selectors.Get().(*Selector)
	var buf [8]Assignment
	n.mu.RLock()
	as, err := sel.Select(n.gpus, req, buf[:0])
	score := int64(0)
	if err == nil {
		score = NodeScore(n.gpus, as, l.opts.Score)
	}
	n.mu.RUnlock()
	l.selectors.Put(sel)
	return score, err
}

// Node returns a copy of the node's GPUs with their current occupancy, and
// false when the ledger does not know the node.
func (l *Ledger) Node(name string) ([]GPUState, bool) {
	n := l.node(name)
	if n == nil {
		return nil, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Clone(n.gpus), true
}

// Pod returns the reservations the ledger holds for a pod, whether they are
// only assumed, and whether it holds any.
func (l *Ledger) Pod(podUID string) (rs []Reservation, assumed, ok bool) {
	l.idxMu.Lock()
	node, ok := l.podNode[podUID]
	l.idxMu.Unlock()
	n := l.node(node)
	if !ok || n == nil {
		return nil, false, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	e := n.pods[podUID]
	if e == nil {
		return nil, false, false
	}
	for i := range e.held {
		rs = append(rs, e.held[i].reservation(podUID))
	}
	return rs, e.assumed, true
}

// Holds reports whether the ledger holds exactly the reservations rs for
// the pod, assumed or observed, in any order: whether [Ledger.Pod] would
// return them, decided without building its list. An entry of rs with an
// empty PodUID counts as the pod's. A pod the ledger does not hold holds
// no reservations.
func (l *Ledger) Holds(podUID string, rs []Reservation) bool {
	l.idxMu.Lock()
	node, ok := l.podNode[podUID]
	l.idxMu.Unlock()
	n := l.node(node)
	if !ok || n == nil {
		return len(rs) == 0
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	e := n.pods[podUID]
	if e == nil {
		return len(rs) == 0
	}
	if len(e.held) != len(rs) {
		return false
	}
	for _, r := range rs {
		if r.PodUID == "" {
			r.PodUID = podUID
		}
		found := false
		for i := range e.held {
			if e.held[i].reservation(podUID) == r {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Conflicts lists, per node in name order, every overlap between
// reservations of different pods the ledger holds (sorted by pod), then
// every reservation the node's current table no longer describes (a GPU
// the registration lacks, a placement outside the grid, an unpublished
// profile or placement; Other is empty and Reason says why). Such a
// reservation still occupies its slots when its GPU is on the node: the pod
// holds them whatever the table says.
func (l *Ledger) Conflicts() []Conflict {
	var out []Conflict
	for _, name := range l.Nodes() {
		n := l.node(name)
		if n == nil {
			continue
		}
		n.mu.RLock()
		uids := n.sortedPods()
		for i, a := range uids {
			for _, b := range uids[i+1:] {
				out = append(out, n.overlaps(a, n.pods[a].held, b, n.pods[b].held)...)
			}
		}
		for _, uid := range uids {
			out = append(out, n.unfit(uid, n.pods[uid].held)...)
		}
		n.mu.RUnlock()
	}
	return out
}

// unfit lists the reservations of hs that the node's table does not
// describe, without changing them.
func (n *nodeLedger) unfit(podUID string, hs []held) []Conflict {
	var out []Conflict
	for i := range hs {
		h := &hs[i]
		for _, err := range n.resolve(podUID, hs[i:i+1]) {
			var re *ReservationError
			if errors.As(err, &re) {
				out = append(out, Conflict{Node: n.name, GPUUUID: h.gpuUUID, PodUID: podUID, Placement: h.placement, Reason: re.Reason})
			}
		}
	}
	return out
}

func (l *Ledger) claim(podUID, node string) error {
	l.idxMu.Lock()
	defer l.idxMu.Unlock()
	if on, ok := l.podNode[podUID]; ok {
		return fmt.Errorf("%w: pod %q on node %q", ErrPodExists, podUID, on)
	}
	l.podNode[podUID] = node
	return nil
}

func (l *Ledger) unclaim(podUID, node string) {
	l.idxMu.Lock()
	if l.podNode[podUID] == node {
		delete(l.podNode, podUID)
	}
	l.idxMu.Unlock()
}

// checkPod validates what needs no node: a pod UID, entries that belong to
// it, and unique (container, device) pairs.
func checkPod(podUID string, rs []Reservation) error {
	if podUID == "" {
		return &ReservationError{ContainerIndex: -1, DeviceIdx: -1, Reason: "empty pod UID"}
	}
	for i, r := range rs {
		bad := func(reason string) error {
			return &ReservationError{PodUID: podUID, ContainerIndex: r.ContainerIndex, DeviceIdx: r.DeviceIndex, GPUUUID: r.GPUUUID, Reason: reason}
		}
		switch {
		case r.PodUID != "" && r.PodUID != podUID:
			return bad(fmt.Sprintf("entry %d belongs to pod %q", i, r.PodUID))
		case r.ContainerIndex < 0 || r.DeviceIndex < 0:
			return bad(fmt.Sprintf("entry %d has a negative index", i))
		case r.ContainerIndex > math.MaxInt32 || r.DeviceIndex > math.MaxInt32:
			return bad(fmt.Sprintf("entry %d has an index over %d", i, math.MaxInt32))
		}
		for _, q := range rs[:i] {
			if q.ContainerIndex == r.ContainerIndex && q.DeviceIndex == r.DeviceIndex {
				return bad(fmt.Sprintf("entry %d repeats (container, device)", i))
			}
		}
	}
	return nil
}

// add records a pod. With strict (assume), any unresolved entry or overlap
// refuses the whole pod; otherwise everything is recorded and problems are
// returned. It reports whether the pod was recorded.
func (n *nodeLedger) add(podUID string, rs []Reservation, strict bool) (bool, error) {
	e := newPodEntry(len(rs), strict)
	for i, r := range rs {
		e.held[i] = newHeld(r)
	}
	return n.insert(podUID, e)
}

// newPodEntry returns an entry for a pod with count reservations, to be
// filled in; assumed is whether the pod is only assumed.
func newPodEntry(count int, assumed bool) *podEntry {
	e := &podEntry{assumed: assumed}
	if count == 1 {
		e.held = e.one[:]
	} else {
		e.held = make([]held, count)
	}
	return e
}

// insert records the entry e of pod podUID as add does, strictly when e is
// assumed.
func (n *nodeLedger) insert(podUID string, e *podEntry) (bool, error) {
	strict := e.assumed
	errs := n.resolve(podUID, e.held)
	errs = append(errs, n.selfOverlaps(podUID, e.held)...)
	var conflicts []Conflict
	for i := range e.held {
		h := &e.held[i]
		if g, mask := n.locate(h); g >= 0 && uint64(n.gpus[g].Used)&mask != 0 {
			conflicts = append(conflicts, n.conflictsWith(podUID, h)...)
		}
	}
	if len(conflicts) > 0 {
		errs = append(errs, &ConflictError{Conflicts: conflicts})
	}
	err := errors.Join(errs...)
	if strict && err != nil {
		return false, err
	}
	n.pods[podUID] = e
	for i := range e.held {
		n.occupy(&e.held[i])
	}
	return true, err
}

// selfOverlaps reports the entries of one pod that overlap each other:
// invalid entries, not conflicts.
func (n *nodeLedger) selfOverlaps(podUID string, hs []held) []error {
	var errs []error
	for i := range hs {
		a := &hs[i]
		ga, ma := n.locate(a)
		for j := range i {
			b := &hs[j]
			if gb, mb := n.locate(b); ga >= 0 && ga == gb && ma&mb != 0 {
				errs = append(errs, &ReservationError{PodUID: podUID, ContainerIndex: int(a.container), DeviceIdx: int(a.device),
					GPUUUID: a.gpuUUID, Reason: fmt.Sprintf("placement %v overlaps the same pod's container %d device %d", a.placement, b.container, b.device)})
			}
		}
	}
	return errs
}

// locate returns the position of h's GPU on the node and the slots h
// occupies there, or (-1, 0) when it occupies none: its GPU is not on the
// node, or its placement lies outside any grid. Everything else (an
// unpublished profile or placement, a placement beyond the GPU's grid)
// still occupies its slots: see [Ledger.SetNode]. It is derived, not
// stored, so it changes only with the node's GPUs, and SetNode recounts
// every reservation when they change.
func (n *nodeLedger) locate(h *held) (int, uint64) {
	if !h.placement.Within(capability.MaxSlots) {
		return -1, 0
	}
	for g := range n.gpus {
		if n.gpus[g].Grid.uuid == h.gpuUUID {
			return g, h.placement.Mask()
		}
	}
	return -1, 0
}

// resolve returns the problems of the pod podUID's reservations hs on the
// node: what the node's table does not describe.
func (n *nodeLedger) resolve(podUID string, hs []held) []error {
	var errs []error
	for i := range hs {
		h := &hs[i]
		bad := func(reason string) {
			errs = append(errs, &ReservationError{PodUID: podUID, ContainerIndex: int(h.container), DeviceIdx: int(h.device), GPUUUID: h.gpuUUID, Reason: reason})
		}
		g := slices.IndexFunc(n.gpus, func(s GPUState) bool { return s.Grid.uuid == h.gpuUUID })
		if g < 0 {
			bad("GPU not on node " + n.name)
			continue
		}
		grid := n.gpus[g].Grid
		if !h.placement.Within(capability.MaxSlots) {
			bad(fmt.Sprintf("placement %v outside any %d-slot grid", h.placement, capability.MaxSlots))
			continue
		}
		// From here on the reservation occupies its slots whatever the
		// table says (locate): the pod holds them on the hardware, and a
		// narrower table (an allowlist change) must not hand them to
		// another pod.
		if !h.placement.Within(grid.Width()) {
			bad(fmt.Sprintf("placement %v outside the %d-slot grid", h.placement, grid.Width()))
		} else if p := grid.Profile(h.profile); p == nil {
			bad(fmt.Sprintf("profile %q not published", h.profile))
		} else if !p.HasPlacement(h.placement) {
			bad(fmt.Sprintf("placement %v is not a published placement of %s", h.placement, h.profile))
		}
	}
	return errs
}

// conflictsWith lists the reservations of other pods overlapping h.
func (n *nodeLedger) conflictsWith(podUID string, h *held) []Conflict {
	var out []Conflict
	g, mask := n.locate(h)
	for _, uid := range n.sortedPods() {
		if uid == podUID {
			continue
		}
		for i := range n.pods[uid].held {
			o := &n.pods[uid].held[i]
			if og, omask := n.locate(o); og == g && omask&mask != 0 {
				out = append(out, Conflict{Node: n.name, GPUUUID: h.gpuUUID, PodUID: podUID, Other: uid, Placement: h.placement, OtherPlacement: o.placement})
			}
		}
	}
	return out
}

// overlaps lists the overlaps between the reservations ha of pod a and hb
// of pod b.
func (n *nodeLedger) overlaps(a string, ha []held, b string, hb []held) []Conflict {
	var out []Conflict
	for i := range ha {
		x := &ha[i]
		gx, mx := n.locate(x)
		for j := range hb {
			y := &hb[j]
			if gy, my := n.locate(y); gx >= 0 && gx == gy && mx&my != 0 {
				out = append(out, Conflict{Node: n.name, GPUUUID: x.gpuUUID, PodUID: a, Other: b, Placement: x.placement, OtherPlacement: y.placement})
			}
		}
	}
	return out
}

func (n *nodeLedger) occupy(h *held) {
	g, mask := n.locate(h)
	if g < 0 {
		return
	}
	c := n.counts[g]
	if end := int(h.placement.End()); end > len(c) {
		// A reservation outside the grid (see SetNode) keeps its slots.
		c = append(c, make([]uint16, end-len(c))...)
		n.counts[g] = c
	}
	for s := h.placement.Start; s < h.placement.End(); s++ {
		c[s]++
	}
	gs := &n.gpus[g]
	gs.Used |= Occupancy(mask)
	// The reservation's media engines are taken too (GPUState.Engines),
	// or selection would add an instance the GPU refuses.
	if gs.Grid != nil {
		gs.Engines = gs.Engines.Add(gs.Grid.heldEngines(h.profile, h.placement))
	}
}

// remove releases a pod's slots; a slot stays taken while another
// reservation still covers it.
func (n *nodeLedger) remove(podUID string) bool {
	e, ok := n.pods[podUID]
	if !ok {
		return false
	}
	delete(n.pods, podUID)
	for i := range e.held {
		h := &e.held[i]
		g, _ := n.locate(h)
		if g < 0 {
			continue
		}
		c := n.counts[g]
		for s := h.placement.Start; s < h.placement.End(); s++ {
			c[s]--
			if c[s] == 0 {
				n.gpus[g].Used &^= Occupancy(uint64(1) << s)
			}
		}
		if gs := &n.gpus[g]; gs.Grid != nil {
			gs.Engines = gs.Engines.Sub(gs.Grid.heldEngines(h.profile, h.placement))
		}
	}
	return true
}

func (n *nodeLedger) sortedPods() []string {
	out := make([]string, 0, len(n.pods))
	for uid := range n.pods {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}
