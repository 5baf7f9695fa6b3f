package schedplugin

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// DefaultPreemption's dry run removes every pod of lower priority than the
// preemptor from a node, asks the filters once, then puts the pods back one
// at a time (those whose eviction would violate a PodDisruptionBudget
// first, each group by decreasing priority, then earlier start) and keeps
// each one after which the preemptor still fits. Left to that order, the
// first pods put back keep the halves of the GPUs they sit on, and the
// preemptor ends with whatever placement is left, at whatever cost. So on
// the first Filter after the removals DynMIG pins the placements whose
// victims cost least (victimCost), and from then on the preemptor fits the
// node only while the pinned placements are free: the reprieve keeps every
// pod outside them and evicts the pods inside.

// errPinTaken is Filter's refusal, during a preemption dry run, when a pod
// put back takes a placement pinned for the preemptor.
var errPinTaken = errors.New("schedplugin: a pod put back takes the placement chosen for the preemptor")

// pin is the placement chosen for the preemptor on one node of a dry run.
// Every clone of the node's overlay shares it: the dry run filters on
// clones (one per Filter with nominated pods), and the choice made on the
// first must hold for the rest of the reprieve.
type pin struct {
	mu   sync.Mutex
	done bool                   // chosen (as may still be nil)
	as   []placement.Assignment // nil: no pin, Filter places the pod as usual
}

// pinned returns the placements pinned for req on o, choosing them on the
// first call after a removal; nil when o was never removed from or no
// placement can be freed for every device (Filter then places req on o as
// usual).
func (p *Plugin) pinned(o *overlay, req *placement.Request) []placement.Assignment {
	if o.pin == nil {
		return nil
	}
	o.pin.mu.Lock()
	defer o.pin.mu.Unlock()
	if !o.pin.done {
		o.pin.as, o.pin.done = p.choosePin(o, req), true
	}
	return o.pin.as
}

// pinFree reports whether every pinned placement is free on gpus: its
// slots, and the media engines of all of them on each GPU together.
func pinFree(gpus []placement.GPUState, as []placement.Assignment) bool {
	for i, a := range as {
		g := gpus[a.GPU]
		if !g.Used.Fits(a.Placement) {
			return false
		}
		eng := g.Engines
		for _, b := range as[:i] {
			if b.GPU == a.GPU {
				eng = eng.Add(g.Grid.EnginesOf(b.Profile))
			}
		}
		if !g.Grid.EnginesFit(eng, a.Profile) {
			return false
		}
	}
	return true
}

// victim is a pod the dry run removed, as the pin's choice sees it.
type victim struct {
	prio      int32
	start     time.Time
	violating bool // its eviction violates a PodDisruptionBudget
	rs        []placement.Reservation
}

// victimCost orders victim sets the way DefaultPreemption orders nodes,
// with the count before the sum of priorities: fewer PodDisruptionBudget
// violations, then a lower highest priority (no victim of higher priority
// than necessary), then fewer victims, then a lower sum of priorities,
// then a later earliest start (older pods are kept, as upstream's reprieve
// keeps them).
type victimCost struct {
	violations int
	top        int32
	count      int
	sum        int64
	earliest   time.Time // the earliest start among the victims; zero for none
}

func (c victimCost) add(v *victim) victimCost {
	if v.violating {
		c.violations++
	}
	if c.count == 0 || v.start.Before(c.earliest) {
		c.earliest = v.start
	}
	c.top, c.count, c.sum = max(c.top, v.prio), c.count+1, c.sum+int64(v.prio)
	return c
}

func (c victimCost) compare(d victimCost) int {
	return cmp.Or(cmp.Compare(c.violations, d.violations), cmp.Compare(c.top, d.top), cmp.Compare(c.count, d.count),
		cmp.Compare(c.sum, d.sum), -c.earliest.Compare(d.earliest))
}

// choice is one candidate placement for one device of the preemptor.
type choice struct {
	a      placement.Assignment
	prof   *capability.Profile // the smaller (capability.CompareProfiles) serves the device as well and keeps more free
	policy int64               // the placement policy's cost
	cost   victimCost
	adds   []int // the victims it adds, by index
}

func (c *choice) better(d *choice) bool {
	return cmp.Or(c.cost.compare(d.cost), capability.CompareProfiles(c.prof, d.prof), cmp.Compare(c.policy, d.policy),
		cmp.Compare(c.a.GPU, d.a.GPU), cmp.Compare(c.a.Placement.Start, d.a.Placement.Start)) < 0
}

// choosePin chooses a placement for every device of req on o, device by
// device, each the cheapest given the victims and placements chosen
// before it; nil when some device has no free placement.
func (p *Plugin) choosePin(o *overlay, req *placement.Request) []placement.Assignment {
	vs := p.victims(o)
	gpus := slices.Clone(o.gpus)
	chosen := make([]bool, len(vs))
	cost := victimCost{top: math.MinInt32}
	var as []placement.Assignment
	for ci, cr := range req.Containers {
		for d := range cr.Devices {
			c, ok := p.cheapest(gpus, req, cr, vs, chosen, cost)
			if !ok {
				return nil
			}
			c.a.ContainerIndex, c.a.DeviceIndex = ci, d
			for _, i := range c.adds {
				chosen[i] = true
			}
			g := &gpus[c.a.GPU]
			g.Used, g.Engines = g.Used.Take(c.a.Placement), g.Engines.Add(g.Grid.EnginesOf(c.a.Profile))
			cost, as = c.cost, append(as, c.a)
		}
	}
	return as
}

// cheapest returns the cheapest free placement for a device of cr on
// gpus, given the victims chosen so far and their cost.
func (p *Plugin) cheapest(gpus []placement.GPUState, req *placement.Request, cr placement.ContainerRequest, vs []victim, chosen []bool, cost victimCost) (choice, bool) {
	pol := p.opts.Ledger.Policy
	if pol == nil {
		pol = placement.DefaultPolicy
	}
	var best choice
	found := false
	for gi, g := range gpus {
		if g.Grid == nil || !g.Grid.Healthy() || !req.Allows(g.Grid) {
			continue
		}
		profiles := g.Grid.Profiles()
		for pi := range profiles {
			prof := &profiles[pi]
			if !covers(g.Grid, prof, cr) || !g.Grid.EnginesFit(g.Engines, prof.Name) {
				continue
			}
			for _, pl := range prof.Placements {
				if !g.Used.Fits(pl) {
					continue
				}
				c := choice{a: placement.Assignment{GPU: gi, GPUUUID: g.Grid.UUID(), Profile: prof.Name, Placement: pl}, prof: prof,
					policy: pol.Cost(placement.Candidate{GPU: gi, Grid: g.Grid, Used: g.Used, Profile: prof, Placement: pl})}
				c.cost, c.adds = evictedFor(&g, &c.a, vs, chosen, cost)
				if !found || c.better(&best) {
					best, found = c, true
				}
			}
		}
	}
	return best, found
}

// covers reports whether prof can serve a device of cr on g, as the
// selector decides it: the named profile, or one whose memory covers the
// demand.
func covers(g *placement.Grid, prof *capability.Profile, cr placement.ContainerRequest) bool {
	if cr.Profile != "" {
		return prof.Name == cr.Profile
	}
	return prof.MemoryMB >= cr.Memory.On(g)
}

// evictedFor returns the cost of the victims with a placed on g, and the
// victims it adds: it puts the victims not yet chosen back in the order
// of the reprieve (vs's order) and evicts each one that overlaps a, or
// whose media engines leave too few for a.
func evictedFor(g *placement.GPUState, a *placement.Assignment, vs []victim, chosen []bool, cost victimCost) (victimCost, []int) {
	var adds []int
	eng := g.Engines
	for i := range vs {
		if chosen[i] {
			continue
		}
		overlaps, held := false, placement.Engines{}
		for _, r := range vs[i].rs {
			if r.GPUUUID != a.GPUUUID {
				continue
			}
			overlaps = overlaps || !placement.Occupancy(0).Take(r.Placement).Fits(a.Placement)
			held = held.Add(g.Grid.EnginesOf(r.Profile))
		}
		if overlaps || !g.Grid.EnginesFit(eng.Add(held), a.Profile) {
			adds, cost = append(adds, i), cost.add(&vs[i])
			continue
		}
		eng = eng.Add(held)
	}
	return cost, adds
}

// victims returns the ledger pods removed from o in the order of the
// reprieve: those whose eviction violates a PodDisruptionBudget first,
// each group the more important first (higher priority, then earlier
// start, as upstream's). The other pods removed spend budgets too, in the
// same order, as upstream counts them, but free no placement.
func (p *Plugin) victims(o *overlay) []victim {
	type removed struct {
		pod *corev1.Pod
		victim
	}
	rm := make([]removed, 0, len(o.removed)+len(o.others))
	for _, pods := range []map[string]*corev1.Pod{o.removed, o.others} {
		for uid, pod := range pods {
			rs, _ := p.ledgerPod(uid)
			rm = append(rm, removed{pod, victim{prio: podPriority(pod), start: p.startTime(pod), rs: rs}})
		}
	}
	slices.SortFunc(rm, func(a, b removed) int {
		return cmp.Or(-cmp.Compare(a.prio, b.prio), a.start.Compare(b.start), cmp.Compare(a.pod.UID, b.pod.UID))
	})
	pods := make([]*corev1.Pod, len(rm))
	for i := range rm {
		pods[i] = rm[i].pod
	}
	for i, v := range violating(pods, p.budgets()) {
		rm[i].violating = v
	}
	var vs []victim
	for _, first := range []bool{true, false} {
		for i := range rm {
			if rm[i].violating == first && len(rm[i].rs) > 0 {
				vs = append(vs, rm[i].victim)
			}
		}
	}
	return vs
}

// podPriority is the pod's priority, 0 when unset (the admission
// default).
func podPriority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// startTime is the pod's start, now for a pod that has not started (as
// upstream's reprieve takes it).
func (p *Plugin) startTime(pod *corev1.Pod) time.Time {
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return p.opts.Clock.Now()
}

// budgets returns the cluster's PodDisruptionBudgets, none when the plugin
// has no lister or listing fails.
func (p *Plugin) budgets() []*policy.PodDisruptionBudget {
	if p.pdbs == nil {
		return nil
	}
	pdbs, err := p.pdbs.List(labels.Everything())
	if err != nil {
		p.log.Warn("listing PodDisruptionBudgets for preemption", "err", err)
		return nil
	}
	return pdbs
}

// violating reports, for pods in decreasing importance, whether evicting
// each would violate a PodDisruptionBudget, by DefaultPreemption's rule:
// each matching budget not already counting the pod as disrupted gives
// one disruption of those it allows to each pod in turn, and a pod that
// finds one exhausted violates it (its remaining budgets are not charged).
func violating(pods []*corev1.Pod, pdbs []*policy.PodDisruptionBudget) []bool {
	out := make([]bool, len(pods))
	if len(pdbs) == 0 {
		return out
	}
	allowed := make([]int32, len(pdbs))
	selectors := make([]labels.Selector, len(pdbs))
	for i, b := range pdbs {
		allowed[i] = b.Status.DisruptionsAllowed
		if s, err := metav1.LabelSelectorAsSelector(b.Spec.Selector); err == nil && !s.Empty() {
			selectors[i] = s // an invalid, nil or empty selector matches nothing
		}
	}
	for j, pod := range pods {
		if len(pod.Labels) == 0 {
			continue
		}
		for i, b := range pdbs {
			if selectors[i] == nil || b.Namespace != pod.Namespace || !selectors[i].Matches(labels.Set(pod.Labels)) {
				continue
			}
			if _, disrupted := b.Status.DisruptedPods[pod.Name]; disrupted {
				continue
			}
			if allowed[i]--; allowed[i] < 0 {
				out[j] = true
				break
			}
		}
	}
	return out
}
