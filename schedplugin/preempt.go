package schedplugin

import (
	"context"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
)

// The framework asks what-if questions through PreFilterExtensions: the
// preemption dry run removes victims from a node and adds them back one by
// one, and a pod's Filter on a node with nominated pods adds those first.
// The ledger holds what MIG pods occupy, not the NodeInfo, so the plugin
// keeps a cycle-local copy of each node's occupancy that those calls
// change (see "Preemption" in the package documentation). Copies are made
// lazily, for the nodes AddPod and RemovePod touch; Filter on any other
// node reads the ledger as before, without allocating.

// overlay is the cycle-local occupancy of one node: the ledger's GPUs when
// the overlay was made, less the ledger pods removed, plus the pods added
// that the ledger does not count (nominated pods).
type overlay struct {
	gpus    []placement.GPUState
	removed map[string]*corev1.Pod             // ledger pods removed, by UID
	added   map[string][]placement.Reservation // pods added that the ledger does not count, by UID
	others  map[string]*corev1.Pod             // other pods removed, by UID: their budgets count (victims.go)
	pin     *pin                               // made by the first removal, shared by the clones (victims.go)
}

func (o *overlay) clone() *overlay {
	return &overlay{gpus: slices.Clone(o.gpus), removed: maps.Clone(o.removed), added: maps.Clone(o.added),
		others: maps.Clone(o.others), pin: o.pin}
}

// apply marks rs taken (take) or free (!take) in the overlay's GPUs.
// Reservations on GPUs the node does not have are ignored.
func (o *overlay) apply(rs []placement.Reservation, take bool) {
	for _, r := range rs {
		i := slices.IndexFunc(o.gpus, func(g placement.GPUState) bool { return g.Grid != nil && g.Grid.UUID() == r.GPUUUID })
		if i < 0 {
			continue
		}
		g := &o.gpus[i]
		if take {
			g.Used = g.Used.Take(r.Placement)
			g.Engines = g.Engines.Add(g.Grid.EnginesOf(r.Profile))
		} else {
			g.Used = g.Used.Release(r.Placement)
			g.Engines = g.Engines.Sub(g.Grid.EnginesOf(r.Profile))
		}
	}
}

// overlays are the cycle's node copies, by node name.
type overlays struct {
	mu    sync.Mutex
	nodes map[string]*overlay
}

// get returns node's overlay, or nil when AddPod and RemovePod have not
// touched the node.
func (os *overlays) get(node string) *overlay {
	os.mu.Lock()
	defer os.mu.Unlock()
	return os.nodes[node]
}

// cloneInto copies every overlay into dst, which is a fresh clone's.
func (os *overlays) cloneInto(dst *overlays) {
	os.mu.Lock()
	defer os.mu.Unlock()
	if len(os.nodes) == 0 {
		return
	}
	dst.nodes = make(map[string]*overlay, len(os.nodes))
	for n, o := range os.nodes {
		dst.nodes[n] = o.clone()
	}
}

// PreFilterExtensions returns the plugin itself: AddPod and RemovePod
// change the cycle-local occupancy Filter reads.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

var _ fwk.PreFilterExtensions = (*Plugin)(nil)

// AddPod adds pi's MIG devices to the cycle-local occupancy of the node:
// a pod the ledger counts on the node (a reprieved victim) takes its
// recorded slots back; any other MIG pod (a nominated pod, which is not
// bound) takes the placements the plugin would choose for it with the
// node's terminating pods gone, so that no pod of lower priority takes the
// slots preemption freed for it.
func (p *Plugin) AddPod(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, pi fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	pod, uid, o := p.extended(cs, pi, ni)
	if o == nil {
		return nil
	}
	if rs, ok := p.ledgerPod(uid); ok {
		if _, removed := o.removed[uid]; removed {
			delete(o.removed, uid)
			o.apply(rs, true)
		}
		return nil
	}
	if _, removed := o.others[uid]; removed {
		delete(o.others, uid)
		return nil
	}
	if _, ok := o.added[uid]; ok {
		return nil
	}
	if rs := p.intended(o, pod, ni); len(rs) > 0 {
		o.added[uid] = rs
		o.apply(rs, true)
	}
	return nil
}

// RemovePod frees pi's MIG devices in the cycle-local occupancy of the
// node: the slots the ledger records for it, or those AddPod gave it.
func (p *Plugin) RemovePod(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, pi fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	pod, uid, o := p.extended(cs, pi, ni)
	if o == nil {
		return nil
	}
	if rs, ok := o.added[uid]; ok {
		delete(o.added, uid)
		o.apply(rs, false)
		return nil
	}
	if _, removed := o.removed[uid]; removed {
		return nil
	}
	if rs, ok := p.ledgerPod(uid); ok {
		o.removed[uid] = pod
		o.apply(rs, false)
		if o.pin == nil {
			o.pin = &pin{}
		}
		return nil
	}
	o.others[uid] = pod
	return nil
}

// extended returns the pod AddPod or RemovePod is given, its UID and the
// overlay of its node; the overlay is nil when the cycle is not a MIG
// pod's or the ledger does not know the node.
func (p *Plugin) extended(cs fwk.CycleState, pi fwk.PodInfo, ni fwk.NodeInfo) (*corev1.Pod, string, *overlay) {
	s := readState(cs)
	pod, node := pi.GetPod(), ni.Node()
	if s == nil || !s.mig || pod == nil || node == nil {
		return nil, "", nil
	}
	return pod, string(pod.UID), p.overlayFor(s, node.Name)
}

// overlayFor returns node's overlay in s, made from the ledger on first
// use, or nil when the ledger does not know the node. The framework runs
// AddPod and RemovePod of one state on one goroutine (each dry run and
// each Filter with nominated pods works on a clone of its own).
func (p *Plugin) overlayFor(s *cycleState, node string) *overlay {
	s.ov.mu.Lock()
	defer s.ov.mu.Unlock()
	if o := s.ov.nodes[node]; o != nil {
		return o
	}
	gpus, ok := p.view.Ledger().Node(node)
	if !ok {
		return nil
	}
	if s.ov.nodes == nil {
		s.ov.nodes = map[string]*overlay{}
	}
	o := &overlay{gpus: gpus, removed: map[string]*corev1.Pod{}, added: map[string][]placement.Reservation{},
		others: map[string]*corev1.Pod{}}
	s.ov.nodes[node] = o
	return o
}

// ledgerPod returns the reservations the ledger holds for the pod uid.
func (p *Plugin) ledgerPod(uid string) ([]placement.Reservation, bool) {
	rs, _, ok := p.view.Ledger().Pod(uid)
	return rs, ok
}

// intended returns the placements the plugin would choose for pod, a MIG
// pod the ledger does not count, on o with the slots of the node's
// terminating pods free: the preemptor's victims end after it was
// nominated, and the slots they free are its. Pods a preemption dry run
// removed count as they are on the node: the placement a nominated pod was
// promised does not move with another preemptor's what-if, so it stays put
// through a dry run's reprieve and the placement pinned for that preemptor
// (victims.go) is chosen around it. Nil when pod asks for no MIG device or
// does not fit even so.
func (p *Plugin) intended(o *overlay, pod *corev1.Pod, ni fwk.NodeInfo) []placement.Reservation {
	req, err := kube.ParseRequestFor(pod, p.opts.Resource)
	if err != nil || req.DeviceCount() == 0 {
		return nil
	}
	scratch := &overlay{gpus: slices.Clone(o.gpus)}
	for uid, removed := range o.removed {
		if rs, ok := p.ledgerPod(uid); ok && removed.DeletionTimestamp == nil {
			scratch.apply(rs, true)
		}
	}
	for _, other := range ni.GetPods() {
		op := other.GetPod()
		if op == nil || op.DeletionTimestamp == nil {
			continue
		}
		if _, removed := o.removed[string(op.UID)]; removed {
			continue // freed above
		}
		if rs, ok := p.ledgerPod(string(op.UID)); ok {
			scratch.apply(rs, false)
		}
	}
	sel := placement.NewSelector(placement.SelectorOptions{Policy: p.opts.Ledger.Policy, MaxSteps: p.opts.Ledger.MaxSteps})
	as, err := sel.Select(scratch.gpus, &req, nil)
	if err != nil {
		return nil
	}
	return placement.Reservations(string(pod.UID), as)
}

// evaluateOverlay is Ledger.Evaluate on a cycle-local occupancy. During
// a preemption dry run with a pinned placement (victims.go) the pod fits
// exactly when the pinned placements are free.
func (p *Plugin) evaluateOverlay(o *overlay, req *placement.Request) (int64, error) {
	if as := p.pinned(o, req); as != nil {
		if !pinFree(o.gpus, as) {
			return 0, errPinTaken
		}
		return placement.NodeScore(o.gpus, as, p.opts.Ledger.Score), nil
	}
	sel := placement.NewSelector(placement.SelectorOptions{Policy: p.opts.Ledger.Policy, MaxSteps: p.opts.Ledger.MaxSteps})
	var buf [8]placement.Assignment
	as, err := sel.Select(o.gpus, req, buf[:0])
	if err != nil {
		return 0, err
	}
	return placement.NodeScore(o.gpus, as, p.opts.Ledger.Score), nil
}

// evaluate is Filter's placement decision for s's request on node: on the
// cycle-local occupancy when AddPod or RemovePod changed the node, on the
// ledger otherwise.
func (p *Plugin) evaluate(s *cycleState, node string) (int64, error) {
	if o := s.ov.get(node); o != nil {
		return p.evaluateOverlay(o, &s.req)
	}
	return p.view.Ledger().Evaluate(node, &s.req)
}
