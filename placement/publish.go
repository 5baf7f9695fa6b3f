package placement

import (
	"cmp"
	"math"
	"slices"

	"github.com/dynmig/dynmig/capability"
)

// PublishedPlacement is one partitionable device a Kubernetes DRA driver
// publishes for a GPU: a profile at one of its published placements,
// covering the memory slots [Placement.Start, Placement.Start+Placement.Size)
// (half-open), with the default policy's cost of creating it.
type PublishedPlacement struct {
	Profile   string // profile name, as in [capability.Profile.Name]
	Placement capability.Placement
	// Cost is [FragmentationAware.Cost] (the default policy, [Stranding]
	// metric) of creating this instance under the occupancy PublishOrder
	// was given; lower is better. It is [NotFree] when the placement
	// overlaps a taken slot.
	Cost int64
}

// NotFree is the [PublishedPlacement.Cost] of a placement that overlaps a
// taken slot.
const NotFree = math.MaxInt64

// PublishOrder returns every (profile, published placement) pair of g in the
// order a DRA driver should publish them as KEP-4815 partitionable devices
// while the GPU's taken slots are used (0 for an empty GPU). The structured
// allocator of Kubernetes takes, for each request, the first device in slice
// order that its selector matches and whose counters are free; a request's
// selector names one profile, so only the order within one profile matters,
// and in this order the allocator on one GPU chooses what the default
// policy chooses.
//
// Profiles come in [capability.CompareProfiles] order. Within a profile the
// placements that fit under used come first, by increasing Cost, ties to
// the lowest start; then those that overlap used (Cost [NotFree]), by start.
// Duplicate placements are listed once.
//
// The order depends on used: to keep the allocator choosing as the default
// policy does, a driver republishes after every instance it creates or
// destroys. Published once and never again, the order for the empty GPU is
// no better than publishing by start, and on an 8-slot grid worse
// (BENCHMARKS.md, "DRA published order"); a driver that cannot republish
// should publish by start.
//
// To reproduce the default policy's choice across the GPUs of a node, a
// driver merges the GPUs' orders by (Cost, GPU position, start) and keeps
// all devices of one profile in one ResourceSlice: kube-scheduler hands the
// allocator a pool's slices in its informer cache's order, which is not the
// published one, so an order holds only within a slice, and a request's
// selector names one profile. (A slice holds at most 64 devices that
// consume counters; a profile with more is split, and the order between its
// slices is lost.) Publishing one slice per GPU leaves the choice of GPU to
// that unordered listing.
//
// PublishOrder fails with a [*GridError] for a profile table [NewGrid]
// rejects (an empty or repeated profile name, a placement that is invalid
// or ends beyond slot 64); g.UUID is not needed. With n placements in all
// it makes n cost evaluations, each two table lookups on grids of up to 12
// slots (O(n) otherwise), and sorts each profile's placements:
// O(n log n), plus O(n) allocation for the result. The profile table is
// compiled as [NewGrid] compiles it, and the compiled table reused while a
// [Grid] of the same table is alive.
func PublishOrder(g *capability.GPU, used Occupancy) ([]PublishedPlacement, error) {
	sh, err := internShape(g)
	if err != nil {
		return nil, err
	}
	return sh.publishOrder(uint64(used)), nil
}

// publishOrder is [PublishOrder] on a compiled table.
func (sh *shape) publishOrder(used uint64) []PublishedPlacement {
	n := 0
	for i := range sh.profiles {
		n += len(sh.profiles[i].placements)
	}
	out := make([]PublishedPlacement, 0, n)
	for i := range sh.profiles {
		gp := &sh.profiles[i]
		first := len(out)
		for j, m := range gp.masks {
			c := int64(NotFree)
			if used&m == 0 {
				c = sh.fragCost(used, m)
			}
			out = append(out, PublishedPlacement{Profile: gp.p.Name, Placement: gp.placements[j], Cost: c})
		}
		// gp.placements are sorted by start, so a stable sort by cost
		// breaks ties by start.
		slices.SortStableFunc(out[first:], func(a, b PublishedPlacement) int { return cmp.Compare(a.Cost, b.Cost) })
	}
	return out
}

// fragCost is [FragmentationAware.Cost] with the [Stranding] metric of
// taking mask m under used.
func (sh *shape) fragCost(used, m uint64) int64 {
	used &= sh.full
	after := used | m
	strand := sh.stranded(after) - sh.stranded(used) + capability.MaxSlots
	return strand<<32 | (sh.capacity(used) - sh.capacity(after))
}

// NodePlacement is one device of a node in [PublishNode]'s order: a
// [PublishedPlacement] on the GPU at position GPU of the node's GPUs.
type NodePlacement struct {
	GPU int
	PublishedPlacement
}

// PublishNode returns the devices of all of a node's GPUs in the order a
// DRA driver should publish them for the current occupancy, so that the
// structured allocator chooses exactly what the default policy chooses on
// the node: grouped by profile name (groups in the order the profiles first
// appear, GPU by GPU, each GPU's in [capability.CompareProfiles] order),
// and within a group by (Cost, GPU position, start), Cost as
// [PublishOrder] computes it on each GPU. A driver publishes each group in
// one ResourceSlice (several groups may share one; see [PublishOrder] for
// why) and republishes after every change of occupancy.
//
// GPUs without a Grid are skipped; GPUs that are not [Grid.Healthy] are
// included, as they still carry their reservations, and a driver leaves
// out or taints what it does not offer. With n devices in all it makes n
// cost evaluations and sorts: O(n log n), plus O(n) allocation.
func PublishNode(gpus []GPUState) []NodePlacement {
	var out []NodePlacement
	groups := map[string]int{}
	for gi := range gpus {
		g := gpus[gi].Grid
		if g == nil {
			continue
		}
		for _, pp := range g.shape.publishOrder(uint64(gpus[gi].Used)) {
			if _, ok := groups[pp.Profile]; !ok {
				groups[pp.Profile] = len(groups)
			}
			out = append(out, NodePlacement{GPU: gi, PublishedPlacement: pp})
		}
	}
	// Each GPU's entries are in (Cost, start) order per profile, so a
	// stable sort by (group, Cost, GPU) leaves starts in order.
	slices.SortStableFunc(out, func(a, b NodePlacement) int {
		return cmp.Or(cmp.Compare(groups[a.Profile], groups[b.Profile]), cmp.Compare(a.Cost, b.Cost), cmp.Compare(a.GPU, b.GPU))
	})
	return out
}
