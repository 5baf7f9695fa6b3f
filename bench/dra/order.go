package dra

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

// Order is the order in which a driver publishes a node's devices. The
// structured allocator takes, for each (sub-)request, the first device in
// slice order that its selector matches and whose counters are free; the
// selector names one profile, so only the order among one profile's devices
// matters.
//
// GPU lists one GPU's devices in publication order given its occupancy,
// each with a cost (see [placement.PublishedPlacement]); Merge says how the
// GPUs' lists combine into the node's one ordered list. A static order is
// computed once, on the empty node; a refreshed one (Refresh) is
// republished from the current occupancy after every allocation and release
// (or every [NodeOptions].RefreshEvery-th), as [PublishStats] describes.
//
// The zero Order is the model's own (GPU, profile, start) layout, which
// equals [placement.FirstFit].
type Order struct {
	Name    string
	GPU     func(g *capability.GPU, used placement.Occupancy) ([]placement.PublishedPlacement, error)
	Merge   Merge
	Refresh bool
}

// Merge is how the per-GPU lists of an [Order] combine.
type Merge uint8

const (
	// GPUByGPU publishes the GPUs one after the other, in node order: the
	// allocator fills one GPU before the next.
	GPUByGPU Merge = iota
	// Interleaved publishes every GPU's first device, then every GPU's
	// second, and so on: the allocator spreads over the GPUs.
	Interleaved
	// ByCost sorts all devices by (cost, GPU position, position in its
	// GPU's list): with [placement.PublishOrder] and Refresh, the default
	// policy's choice across GPUs.
	ByCost
)

// String returns the order's name, or "current" for the zero Order.
func (o Order) String() string {
	if o.Name == "" {
		return "current"
	}
	return o.Name
}

// Orders returns the published orders the bench compares:
//
//   - "current": the model's (GPU, profile, start) layout, first fit;
//   - "reverse": each profile's placements from the highest start, GPU by GPU;
//   - "nvidia": the NVIDIA DRA driver's order, [NVIDIAOrder];
//   - "static-cost": [placement.PublishOrder] on the empty GPU, published
//     once, GPU by GPU;
//   - "static-cost-spread": the same, GPUs interleaved;
//   - "refreshed": [placement.PublishOrder] on the current occupancy,
//     republished after every change, merged by cost.
func Orders() []Order {
	return []Order{
		{Name: "current", GPU: byStart(false)},
		{Name: "reverse", GPU: byStart(true)},
		{Name: "nvidia", GPU: NVIDIAOrder},
		{Name: "static-cost", GPU: placement.PublishOrder},
		{Name: "static-cost-spread", GPU: placement.PublishOrder, Merge: Interleaved},
		{Name: "refreshed", GPU: placement.PublishOrder, Merge: ByCost, Refresh: true},
	}
}

// byStart lists each profile's placements by start, ascending or
// descending, with the position as cost.
func byStart(descending bool) func(*capability.GPU, placement.Occupancy) ([]placement.PublishedPlacement, error) {
	return func(g *capability.GPU, _ placement.Occupancy) ([]placement.PublishedPlacement, error) {
		grid, err := placement.NewGrid(g)
		if err != nil {
			return nil, err
		}
		var out []placement.PublishedPlacement
		for _, p := range grid.Profiles() {
			pls := slices.Clone(p.Placements)
			if descending {
				slices.Reverse(pls)
			}
			for _, pl := range pls {
				out = append(out, placement.PublishedPlacement{Profile: p.Name, Placement: pl, Cost: int64(len(out))})
			}
		}
		return out, nil
	}
}

// NVIDIAOrder is the order of the NVIDIA DRA driver (k8s-dra-driver-gpu,
// gpu-kubelet-plugin with DynamicMIG): one device slice per GPU, GPUs by PCI
// bus ID, and within a GPU the devices sorted by name,
// "gpu-<minor>-mig-<profile without dots>-<profile ID>-<placement start>",
// as strings. Within one profile that is the start in decimal compared as a
// string ("10" before "2"); the full-GPU device it also publishes is not a
// MIG device and matches no profile selector. Costs are positions.
func NVIDIAOrder(g *capability.GPU, _ placement.Occupancy) ([]placement.PublishedPlacement, error) {
	grid, err := placement.NewGrid(g)
	if err != nil {
		return nil, err
	}
	var out []placement.PublishedPlacement
	for _, p := range grid.Profiles() {
		pls := slices.Clone(p.Placements)
		slices.SortStableFunc(pls, func(a, b capability.Placement) int {
			return cmp.Compare(strconv.FormatUint(uint64(a.Start), 10), strconv.FormatUint(uint64(b.Start), 10))
		})
		for _, pl := range pls {
			out = append(out, placement.PublishedPlacement{Profile: p.Name, Placement: pl, Cost: int64(len(out))})
		}
	}
	return out, nil
}

// Layout is how a driver cuts its published order into ResourceSlices, and
// so what of the order the allocator sees: kube-scheduler lists a pool's
// slices from its informer cache, which iterates a Go map, and the
// allocator does not sort them, so only the order of devices within one
// slice is the driver's to choose.
type Layout uint8

const (
	// OrderedPool cuts the node's one ordered list into slices of at most
	// [resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures] devices and
	// hands them to the allocator in that order: the order as published,
	// whole. An idealisation when the node has more devices than one slice
	// holds (an 8-GPU A100 has 144 plain ones).
	OrderedPool Layout = iota
	// ShuffledPool is OrderedPool's slices in a random order per decision,
	// as the scheduler hands them over.
	ShuffledPool
	// PerGPU publishes one slice per GPU, as the NVIDIA DRA driver does,
	// each in the order's per-GPU list (for ByCost by cost), in a random
	// order per decision: the GPU order is the scheduler's, not the driver's.
	PerGPU
	// ByProfile keeps all devices of one profile in one slice, in the
	// node's order: profiles (in [capability.CompareProfiles] order) are
	// packed into slices of at most 64 devices without splitting one unless
	// it alone has more. Slices come in a random order per decision, but a
	// request's selector names one profile, so the allocator still sees
	// that profile's devices in the published order.
	ByProfile
)

// Layouts returns every layout.
func Layouts() []Layout { return []Layout{OrderedPool, ShuffledPool, PerGPU, ByProfile} }

// String returns "ordered-pool", "shuffled-pool", "per-GPU" or "by-profile".
func (l Layout) String() string {
	switch l {
	case OrderedPool:
		return "ordered-pool"
	case ShuffledPool:
		return "shuffled-pool"
	case PerGPU:
		return "per-GPU"
	case ByProfile:
		return "by-profile"
	}
	return "layout(" + strconv.Itoa(int(l)) + ")"
}

// Shuffled reports whether the allocator gets the layout's slices in a
// random order.
func (l Layout) Shuffled() bool { return l != OrderedPool }

// sequence is the node's devices (indexes into Model.devices) in the
// publication order o gives for the occupancy used, and per GPU its own
// list.
func (m *Model) sequence(o Order, used []placement.GPUState) ([]int, [][]int, error) {
	type entry struct {
		dev  int
		gpu  int
		pos  int
		cost int64
	}
	var all []entry
	perGPU := make([][]int, len(m.grids))
	for gi := range m.grids {
		var occ placement.Occupancy
		if o.Refresh {
			occ = used[gi].Used
		}
		pps, err := o.GPU(&m.gpus[gi], occ)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: order %s, GPU %d: %v", ErrModel, o, gi, err)
		}
		for pos, pp := range pps {
			d, ok := m.byKey[deviceKey{gi, pp.Profile, pp.Placement}]
			if !ok {
				return nil, nil, fmt.Errorf("%w: order %s lists %s %v, not a device of GPU %d", ErrModel, o, pp.Profile, pp.Placement, gi)
			}
			all = append(all, entry{dev: d, gpu: gi, pos: pos, cost: pp.Cost})
		}
		if len(pps) != m.perGPU[gi] {
			return nil, nil, fmt.Errorf("%w: order %s lists %d devices of GPU %d, want %d", ErrModel, o, len(pps), gi, m.perGPU[gi])
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int {
		switch o.Merge {
		case Interleaved:
			return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.gpu, b.gpu))
		case ByCost:
			return cmp.Or(cmp.Compare(a.cost, b.cost), cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.pos, b.pos))
		}
		return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.pos, b.pos))
	})
	seq := make([]int, len(all))
	for i, e := range all {
		seq[i] = e.dev
		perGPU[e.gpu] = append(perGPU[e.gpu], e.dev)
	}
	return seq, perGPU, nil
}

// publish returns the pool's slices for the order and layout, generation
// gen: the model's counter slices, then the device slices.
func (m *Model) publish(o Order, used []placement.GPUState, l Layout, gen int64) ([]*resourceapi.ResourceSlice, error) {
	seq, byGPU, err := m.sequence(o, used)
	if err != nil {
		return nil, err
	}
	const limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	var groups [][]int
	switch l {
	case PerGPU:
		groups = byGPU
	case ByProfile:
		byProfile := map[string][]int{}
		for _, d := range seq {
			p := m.devices[d].Profile
			byProfile[p] = append(byProfile[p], d)
		}
		var cur []int
		for _, p := range m.profileNames() {
			list := byProfile[p]
			if len(cur)+len(list) > limit && len(cur) > 0 {
				groups, cur = append(groups, cur), nil
			}
			for len(list) > limit {
				groups, list = append(groups, list[:limit]), list[limit:]
			}
			cur = append(cur, list...)
		}
		if len(cur) > 0 {
			groups = append(groups, cur)
		}
	default:
		for len(seq) > limit {
			groups, seq = append(groups, seq[:limit]), seq[limit:]
		}
		groups = append(groups, seq)
	}
	var out []*resourceapi.ResourceSlice
	for _, s := range m.slices {
		if len(s.Spec.SharedCounters) > 0 {
			c := *s
			c.Spec.Pool.Generation = gen
			out = append(out, &c)
		}
	}
	for i, g := range groups {
		s := m.newSlice("devices", i)
		s.Spec.Pool.Generation = gen
		for _, d := range g {
			s.Spec.Devices = append(s.Spec.Devices, m.objects[d])
		}
		out = append(out, s)
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out, nil
}

// profileNames returns the names of the node's profiles, GPU by GPU in
// [capability.CompareProfiles] order, each once.
func (m *Model) profileNames() []string {
	var out []string
	for _, g := range m.grids {
		for _, p := range g.Profiles() {
			if !slices.Contains(out, p.Name) {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// SimRun replays evs as [Run] does with opts, but with a simulated
// allocator: each arrival takes what [placement.Select] chooses when a
// device's cost is its position in the slices the allocator would get
// (the same publication, republication and random slice order, drawn from
// the same seed), so the first free matching device in slice order. The
// package's tests check it against the allocator; it is thousands of times
// faster. opts.Features and opts.CELCache are unused. It also returns the
// node's republication counts.
func SimRun(gpus []capability.GPU, evs []sim.Event, opts NodeOptions) (sim.Result, PublishStats, error) {
	if err := sim.Validate(evs); err != nil {
		return sim.Result{}, PublishStats{}, err
	}
	m, err := NewModel("node-0", gpus)
	if err != nil {
		return sim.Result{}, PublishStats{}, err
	}
	n := NewNode(m, opts)
	slots := 0
	for _, g := range m.grids {
		slots += int(g.Width())
	}
	p := &listPlacer{node: n, pol: &listPolicy{pos: map[rankKey]int64{}},
		held: map[string][]Device{}, req: placement.Request{Containers: make([]placement.ContainerRequest, 1)}}
	p.sel = placement.NewSelector(placement.SelectorOptions{Policy: p.pol})
	res, err := sim.Replay(context.Background(), evs, slots, p)
	res.Policy = "sim/" + opts.Order.String() + "/" + opts.Layout.String()
	return res, n.Stats(), err
}

type rankKey struct {
	gpu     int
	profile string
	pl      capability.Placement
}

// listPolicy costs a device by its position in the slices the allocator
// gets.
type listPolicy struct{ pos map[rankKey]int64 }

func (p *listPolicy) Cost(c placement.Candidate) int64 {
	return p.pos[rankKey{c.GPU, c.Profile.Name, c.Placement}]
}

func (p *listPolicy) String() string { return "published-order" }

// listPlacer is [SimRun]'s [sim.Placer].
type listPlacer struct {
	node *Node
	sel  *placement.Selector
	pol  *listPolicy
	held map[string][]Device
	req  placement.Request
}

func (p *listPlacer) Arrive(_ context.Context, ev *sim.Event) (int, error) {
	sl, err := p.node.slices()
	if err != nil {
		return 0, err
	}
	i := int64(0)
	for _, s := range sl {
		for _, d := range s.Spec.Devices {
			dev := p.node.model.devices[p.node.model.byName[d.Name]]
			p.pol.pos[rankKey{dev.GPU, dev.Profile, dev.Placement}] = i
			i++
		}
	}
	p.req.Containers[0] = sim.ContainerOf(ev)
	as, err := p.sel.Select(p.node.used, &p.req, nil)
	if err != nil {
		return 0, err
	}
	devs := make([]Device, len(as))
	n := 0
	for k, a := range as {
		d, ok := p.node.model.Lookup(a.GPU, a.Profile, a.Placement)
		if !ok {
			return 0, fmt.Errorf("dra: selector chose %v, not a device", a)
		}
		devs[k] = d
		n += int(a.Placement.Size)
	}
	if err := p.node.Commit(devs); err != nil {
		return 0, err
	}
	p.held[ev.ID] = devs
	return n, nil
}

func (p *listPlacer) Depart(ev *sim.Event) {
	p.node.Release(p.held[ev.ID])
	delete(p.held, ev.ID)
}

// shuffleStream is the second PCG word of the slice shuffle.
const shuffleStream = 0x511ce5
