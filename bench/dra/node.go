package dra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/dynmig/dynmig/placement"
)

// DefaultFeatures returns the DRA feature set a [Node] uses unless
// [NodeOptions] says otherwise: partitionable devices (KEP-4815 counters) and
// prioritized lists (firstAvailable), which the allocator's "stable"
// implementation serves.
func DefaultFeatures() structured.Features {
	return structured.Features{PartitionableDevices: true, PrioritizedList: true}
}

// ErrDisagree reports a DRA rejection that dynmig's exhaustive scan can place
// on the same occupancy: the models would not answer the same question.
var ErrDisagree = errors.New("dra: allocator rejected a request dynmig can place")

// NodeOptions configures a [Node]. The zero value works.
type NodeOptions struct {
	// Features are the DRA features the allocator gets; nil means
	// [DefaultFeatures]. Enabling more (e.g. ConsumableCapacity) makes
	// NewAllocator pick the "incubating" or "experimental" implementation.
	Features *structured.Features
	// CELCache is shared between decisions, as the scheduler shares it; nil
	// means a fresh cache of 64 entries.
	CELCache *cel.Cache
	// Order is the order the driver publishes the devices in; the zero
	// Order keeps the model's slices.
	Order Order
	// Layout is how the devices are cut into slices and in which order
	// the allocator reads the slices; the zero value is [OrderedPool].
	Layout Layout
	// ShuffleSeed seeds the random slice order of the shuffled layouts.
	ShuffleSeed uint64
	// RefreshEvery makes a refreshed order republish after every
	// RefreshEvery-th change of the occupancy (an allocation or a
	// release) instead of after each: a driver batching its updates, or
	// a scheduler seeing them late. 0 means 1.
	RefreshEvery int
}

// PublishStats counts a node's republications the way the resourceslice
// controller of k8s.io/dynamic-resource-allocation would send them: a
// republication that changes at most one slice updates it in place; one
// that changes more increases the pool generation and so rewrites every
// slice of the pool, counter slices included, and until the scheduler has
// seen them all the pool is incomplete and nothing on the node can be
// allocated.
type PublishStats struct {
	// Publications counts republications after the first publication.
	Publications int
	// ChangedSlices counts device slices whose devices or their order
	// changed.
	ChangedSlices int
	// SliceWrites counts ResourceSlice updates: the changed slice, or
	// every slice when the generation increased.
	SliceWrites int
	// GenerationBumps counts republications that increased the pool
	// generation (more than one slice changed).
	GenerationBumps int
}

// Node is the DRA view of one node: the model plus the allocated devices
// (the scheduler's AllocatedState). It is not safe for concurrent use.
type Node struct {
	model     *Model
	features  structured.Features
	cache     *cel.Cache
	allocated sets.Set[structured.DeviceID]
	node      *v1.Node
	classes   classLister
	claims    []*resourceapi.ResourceClaim
	used      []placement.GPUState
	// published are the pool's slices as the driver last published them
	// (counter slices first); stale when a refreshed order's occupancy
	// changed since. gen is their pool generation.
	published []*resourceapi.ResourceSlice
	stale     bool
	gen       int64
	// republished is set once the node published its own slices.
	republished bool
	every       int   // RefreshEvery, at least 1
	pubErr      error // the first failed republication
	changes     int   // occupancy changes since the last republication
	stats       PublishStats
	order       Order
	layout      Layout
	rng         *rand.Rand
	view        []*resourceapi.ResourceSlice // scratch: the slices in the scheduler's order
}

// NewNode returns the node of m with nothing allocated.
func NewNode(m *Model, opts NodeOptions) *Node {
	n := &Node{
		model:     m,
		features:  DefaultFeatures(),
		cache:     opts.CELCache,
		allocated: sets.New[structured.DeviceID](),
		node:      &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.node}},
		classes:   classLister{m.class},
		claims:    make([]*resourceapi.ResourceClaim, 1),
		used:      make([]placement.GPUState, len(m.grids)),
	}
	if opts.Features != nil {
		n.features = *opts.Features
	}
	n.order, n.layout, n.gen, n.published = opts.Order, opts.Layout, 1, m.slices
	n.every = max(opts.RefreshEvery, 1)
	n.stale = opts.Order.GPU != nil || opts.Layout != OrderedPool
	if n.layout.Shuffled() {
		n.rng = rand.New(rand.NewPCG(opts.ShuffleSeed, shuffleStream))
	}
	if n.cache == nil {
		n.cache = cel.NewCache(64, cel.Features{
			EnableConsumableCapacity: n.features.ConsumableCapacity,
			EnableListTypeAttributes: n.features.ListTypeAttributes,
		})
	}
	for i, g := range m.grids {
		n.used[i].Grid = g
	}
	return n
}

// Model returns the node's model.
func (n *Node) Model() *Model { return n.model }

// NewAllocator returns a structured allocator over the node's current state,
// as the scheduler builds one per pod. It caches the pool's available
// counters, so it is only valid until the next Commit or Release.
func (n *Node) NewAllocator(ctx context.Context) (structured.Allocator, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         n.allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	slices, err := n.slices()
	if err != nil {
		return nil, err
	}
	return structured.NewAllocator(ctx, n.features, state, n.classes, slices, n.cache)
}

// Published returns the pool's slices as the driver publishes them for the
// current occupancy (counter slices first), before the scheduler reorders
// them. The caller must not modify them.
func (n *Node) Published() ([]*resourceapi.ResourceSlice, error) {
	if err := n.republish(); err != nil {
		return nil, err
	}
	return n.published, nil
}

// republish publishes the slices again when they are stale.
func (n *Node) republish() error {
	if n.pubErr != nil {
		return n.pubErr
	}
	if !n.stale {
		return nil
	}
	order := n.order
	if order.GPU == nil {
		order = Orders()[0]
	}
	s, err := n.model.publish(order, n.used, n.layout, n.gen)
	if err != nil {
		return err
	}
	if n.republished {
		n.stats.Publications++
		changed := changedSlices(n.published, s)
		n.stats.ChangedSlices += changed
		if changed > 1 {
			n.gen++
			for _, sl := range s {
				sl.Spec.Pool.Generation = n.gen
			}
			n.stats.GenerationBumps++
			n.stats.SliceWrites += len(s)
		} else {
			n.stats.SliceWrites += changed
		}
	}
	n.published, n.stale, n.republished = s, false, true
	return nil
}

// slices returns the pool's slices as the allocator gets them: republished
// first when the order is refreshed and the occupancy changed, and for a
// shuffled layout in this decision's random order (counter slices first).
func (n *Node) slices() ([]*resourceapi.ResourceSlice, error) {
	if err := n.republish(); err != nil {
		return nil, err
	}
	if !n.layout.Shuffled() {
		return n.published, nil
	}
	n.view = append(n.view[:0], n.published...)
	counters := 0
	for counters < len(n.view) && len(n.view[counters].Spec.SharedCounters) > 0 {
		counters++
	}
	devs := n.view[counters:]
	for k, i := range n.rng.Perm(len(devs)) {
		devs[k] = n.published[counters+i]
	}
	return n.view, nil
}

// AllocateWith asks a for claim on this node and returns the devices chosen,
// or nil when the claim cannot be allocated. An error is a fatal allocator
// error (bad CEL, unknown class) or a result naming an unknown device.
func (n *Node) AllocateWith(ctx context.Context, a structured.Allocator, claim *resourceapi.ResourceClaim) ([]Device, error) {
	n.claims[0] = claim
	res, err := a.Allocate(ctx, n.node, n.claims)
	n.claims[0] = nil
	if err != nil || len(res) == 0 {
		return nil, err
	}
	var out []Device
	for _, r := range res[0].Devices.Results {
		d, ok := n.model.DeviceNamed(r.Device)
		if !ok || r.Driver != DriverName || r.Pool != n.model.node {
			return nil, fmt.Errorf("dra: allocator returned unknown device %s/%s/%s", r.Driver, r.Pool, r.Device)
		}
		out = append(out, d)
	}
	return out, nil
}

// Allocate is one scheduling decision: a fresh allocator over the current
// state, then Allocate for claim. It does not commit the result.
func (n *Node) Allocate(ctx context.Context, claim *resourceapi.ResourceClaim) ([]Device, error) {
	a, err := n.NewAllocator(ctx)
	if err != nil {
		return nil, err
	}
	return n.AllocateWith(ctx, a, claim)
}

// Commit marks devs allocated. It fails, changing nothing, when one is
// already allocated or overlaps an allocated device's slots.
func (n *Node) Commit(devs []Device) error {
	used := make(map[int]placement.Occupancy)
	for _, d := range devs {
		if n.allocated.Has(d.ID) {
			return fmt.Errorf("dra: device %s already allocated", d.Name)
		}
		u, ok := used[d.GPU]
		if !ok {
			u = n.used[d.GPU].Used
		}
		if !u.Fits(d.Placement) {
			return fmt.Errorf("dra: device %s overlaps allocated slots %v", d.Name, u)
		}
		used[d.GPU] = u.Take(d.Placement)
	}
	for _, d := range devs {
		n.allocated.Insert(d.ID)
	}
	for g, u := range used {
		n.used[g].Used = u
	}
	if len(devs) > 0 {
		n.changed()
	}
	return nil
}

// Release frees devs (their counters return to the pool).
func (n *Node) Release(devs []Device) {
	for _, d := range devs {
		if n.allocated.Has(d.ID) {
			n.allocated.Delete(d.ID)
			n.used[d.GPU].Used = n.used[d.GPU].Used.Release(d.Placement)
			n.changed()
		}
	}
}

// changed records an occupancy change: a refreshed order is republished
// at once after every n.every-th, as a driver watching its allocations
// would. An error is kept for the next decision.
func (n *Node) changed() {
	if !n.order.Refresh {
		return
	}
	if n.changes++; n.changes >= n.every {
		n.stale, n.changes = true, 0
		if err := n.republish(); err != nil && n.pubErr == nil {
			n.pubErr = err
		}
	}
}

// changedSlices counts the device slices of next whose devices differ from
// those of the slice of the same name in prev.
func changedSlices(prev, next []*resourceapi.ResourceSlice) int {
	old := map[string]*resourceapi.ResourceSlice{}
	for _, s := range prev {
		old[s.Name] = s
	}
	n := 0
	for _, s := range next {
		if len(s.Spec.Devices) == 0 {
			continue
		}
		o := old[s.Name]
		if o == nil || len(o.Spec.Devices) != len(s.Spec.Devices) {
			n++
			continue
		}
		for i := range s.Spec.Devices {
			if o.Spec.Devices[i].Name != s.Spec.Devices[i].Name {
				n++
				break
			}
		}
	}
	return n
}

// Stats returns the node's republication counts.
func (n *Node) Stats() PublishStats { return n.stats }

// Allocated returns how many devices are allocated.
func (n *Node) Allocated() int { return n.allocated.Len() }

// State returns the node's occupancy as dynmig's selector sees it: one
// GPUState per GPU with the slots of the allocated devices taken. The
// caller must not modify it; it changes with Commit and Release.
func (n *Node) State() []placement.GPUState { return n.used }

// Explain classifies why req cannot be placed on the current occupancy,
// with dynmig's definitions: the [*placement.UnschedulableError] of an
// exhaustive first-fit scan. It returns an error wrapping [ErrDisagree]
// when that scan places req.
func (n *Node) Explain(req *placement.Request) error {
	as, err := placement.Select(n.used, req, placement.FirstFit{})
	if err == nil {
		return fmt.Errorf("%w: %v", ErrDisagree, as)
	}
	return err
}

// classLister serves the one device class.
type classLister struct{ class *resourceapi.DeviceClass }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{l.class}, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != l.class.Name {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return l.class, nil
}

// Fill commits randomly chosen free devices, never of a GPU's full-size
// profile, until about fill (0..1) of each GPU's slots are taken or 64 draws
// failed on it: a deterministic (for equal seeds) occupancy with
// the scattered holes churn leaves. It returns the devices committed.
func (n *Node) Fill(seed uint64, fill float64) []Device {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var out []Device
	for g, grid := range n.model.grids {
		ps := grid.Profiles()
		target := int(fill * float64(grid.Width()))
		for miss := 0; miss < 64 && n.used[g].Used.Count() < target; {
			p := ps[rng.IntN(len(ps)-1)] // the last profile is the largest
			pl := p.Placements[rng.IntN(len(p.Placements))]
			d, ok := n.model.Lookup(g, p.Name, pl)
			if !ok || n.Commit([]Device{d}) != nil {
				miss++
				continue
			}
			out = append(out, d)
		}
	}
	return out
}
