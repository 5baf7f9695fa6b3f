package placement

import (
	"strconv"

	"github.com/dynmig/dynmig/capability"
)

// Candidate is one legal, free way to place one device: a published
// placement of a profile on a GPU of the node, given the slots already taken
// there (including devices of the same pod chosen earlier).
type Candidate struct {
	GPU       int       // position of the GPU in the node's []GPUState
	Grid      *Grid     // the GPU
	Used      Occupancy // slots taken before this choice
	Profile   *capability.Profile
	Placement capability.Placement
}

// Policy ranks the candidates of one device. Selection always prefers the
// preferred and then the smallest profile (see [Request]); among candidates
// of that profile it takes the lowest Cost, then the lowest GPU position,
// then the lowest start. Cost must be a pure function of its argument
// (determinism) and must not allocate (the decision is zero-allocation).
type Policy interface {
	Cost(c Candidate) int64
	String() string
}

// FirstFit takes the first GPU in node order and on it the lowest start.
type FirstFit struct{}

// Cost orders by GPU position, then start.
func (FirstFit) Cost(c Candidate) int64 { return int64(c.GPU)<<32 | int64(c.Placement.Start) }

// String returns "first-fit".
func (FirstFit) String() string { return "first-fit" }

// V210 is the placement order of the deployed HAMi v2.10 scheduler: GPUs in
// node order; profiles with 1 or 3 compute slices from the highest start,
// all others from the lowest.
type V210 struct{}

// Cost orders by GPU position, then start, descending for 1- and 3-slice
// profiles.
func (V210) Cost(c Candidate) int64 {
	start := int64(c.Placement.Start)
	if c.Profile.SliceCount == 1 || c.Profile.SliceCount == 3 {
		start = int64(capability.MaxSlots) - start
	}
	return int64(c.GPU)<<32 | start
}

// String returns "v2.10".
func (V210) String() string { return "v2.10" }

// FragMetric chooses what [FragmentationAware] minimises.
type FragMetric uint8

const (
	// Stranding is the default (the zero value). A candidate's cost is
	// first the increase of stranded slots on its GPU, the free slots
	// outside the largest free published placement (negative when the
	// choice fills a hole), then the loss of instance capacity, the sum
	// over profiles of how many more instances of it could still be
	// created. It won on the heavy-churn traces.
	Stranding FragMetric = iota
	// InstanceCapacity minimises only the loss of instance capacity.
	InstanceCapacity
	// FreePlacements minimises the slot-weighted number of distinct free
	// published placements the choice blocks.
	FreePlacements
)

// FragmentationAware is the default policy: it keeps the most future
// placements open. The cost of a candidate is computed on its GPU alone
// (only that GPU changes) from the GPU's published placements, as [Stranding]
// describes; see the package documentation for the metric and how it was
// chosen. Ties go to the lowest GPU position and start, which packs small
// profiles onto the GPUs already in use.
//
// The zero value uses [Stranding]. Costs come from per-profile-table lookup
// tables for grids of up to 12 slots.
type FragmentationAware struct {
	Metric FragMetric
}

// Cost returns the candidate's cost under the metric.
func (f FragmentationAware) Cost(c Candidate) int64 {
	sh := c.Grid.shape
	m := c.Placement.Mask()
	used := uint64(c.Used) & sh.full
	after := used | m
	switch f.Metric {
	case InstanceCapacity:
		return sh.capacity(used) - sh.capacity(after)
	case FreePlacements:
		var loss int64
		for i := range sh.frag {
			w := &sh.frag[i]
			if w.mask&m != 0 && w.mask&used == 0 {
				loss += w.size
			}
		}
		return loss
	}
	strand := sh.stranded(after) - sh.stranded(used) + capability.MaxSlots
	return strand<<32 | (sh.capacity(used) - sh.capacity(after))
}

// String returns "frag-aware", with the metric when it is not the default.
func (f FragmentationAware) String() string {
	switch f.Metric {
	case InstanceCapacity:
		return "frag-aware(capacity)"
	case FreePlacements:
		return "frag-aware(placements)"
	case Stranding:
		return "frag-aware"
	}
	return "frag-aware(" + strconv.Itoa(int(f.Metric)) + ")"
}

// DefaultPolicy is the policy used when none is given.
var DefaultPolicy Policy = FragmentationAware{}
