package placement

import "math/bits"

// ScoreMode chooses how [NodeScore] ranks nodes that fit a pod.
type ScoreMode uint8

const (
	// BinPack prefers nodes whose GPUs end up fuller, keeping whole GPUs
	// and whole nodes free for large profiles. The zero value.
	BinPack ScoreMode = iota
	// Spread prefers emptier nodes.
	Spread
)

// String returns "bin-pack" or "spread".
func (m ScoreMode) String() string {
	if m == Spread {
		return "spread"
	}
	return "bin-pack"
}

// MaxNodeScore is the highest score [NodeScore] returns, Kubernetes'
// framework.MaxNodeScore.
const MaxNodeScore = 100

// NodeScore scores a node for a pod whose devices would take as (from
// [Selector.Select] on the same gpus), in 0..[MaxNodeScore]. With BinPack it
// is the share of the node's slots taken after the placement, rounded down;
// with Spread, MaxNodeScore minus that. A node without slots scores 0. It
// does not allocate.
func NodeScore(gpus []GPUState, as []Assignment, mode ScoreMode) int64 {
	var total, taken int64
	for g := range gpus {
		if gpus[g].Grid == nil {
			continue
		}
		used := uint64(gpus[g].Used)
		for i := range as {
			if as[i].GPU == g {
				used |= as[i].Placement.Mask()
			}
		}
		full := gpus[g].Grid.shape.full
		total += int64(bits.OnesCount64(full))
		taken += int64(bits.OnesCount64(used & full))
	}
	if total == 0 {
		return 0
	}
	s := taken * MaxNodeScore / total
	if mode == Spread {
		s = MaxNodeScore - s
	}
	return s
}
