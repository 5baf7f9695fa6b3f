package placement

import (
	"math/bits"

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

// FragWeight chooses how [FragmentationAware] weighs a lost placement.
type FragWeight uint8

const (
	// WeightSlots weighs each distinct published placement by its size in
	// slots, so losing a large contiguous range costs more than losing a
	// small one. The zero value and the default: it won on the heavy-churn
	// traces (see the package documentation).
	WeightSlots FragWeight = iota
	// WeightCount weighs each published (profile, placement) pair as 1:
	// the plain count of still-free legal placements.
	WeightCount
	// WeightSlotsSquared weighs each distinct placement by its size
	// squared, protecting the full-GPU placement most.
	WeightSlotsSquared
)

// FragmentationAware is the default policy. It keeps the most future
// placements open: the cost of a candidate is the total weight of the
// published placements on that GPU that are free before the choice and
// blocked after it (see [FragWeight]). Only the chosen GPU changes, so this
// is also the change of the node-wide metric. Ties go to the GPU with fewer
// free slots left (bin-packing), then to the GPU position and start.
//
// The zero value uses [WeightSlots].
type FragmentationAware struct {
	Weight FragWeight
}

// Cost returns the weight of the placements the candidate blocks, scaled so
// the bin-packing tie-break fits underneath.
func (f FragmentationAware) Cost(c Candidate) int64 {
	sh := c.Grid.shape
	m := c.Placement.Mask()
	used := uint64(c.Used)
	var loss int64
	for i := range sh.frag {
		w := &sh.frag[i]
		if w.mask&m == 0 || w.mask&used != 0 {
			continue
		}
		switch f.Weight {
		case WeightCount:
			loss += w.profiles
		case WeightSlotsSquared:
			loss += w.size * w.size
		default:
			loss += w.size
		}
	}
	freeAfter := int64(bits.OnesCount64(sh.full &^ (used | m)))
	return loss<<8 | freeAfter
}

// String returns "frag-aware", with the weighting when not the default.
func (f FragmentationAware) String() string {
	switch f.Weight {
	case WeightCount:
		return "frag-aware(count)"
	case WeightSlotsSquared:
		return "frag-aware(slots²)"
	}
	return "frag-aware"
}

// DefaultPolicy is the policy used when none is given.
var DefaultPolicy Policy = FragmentationAware{}
