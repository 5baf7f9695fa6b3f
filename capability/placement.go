package capability

import "strconv"

// MaxSlots is the widest slot grid a [Placement.Mask] can represent. Every
// MIG-capable GPU known today has at most 12 memory slots.
const MaxSlots = 64

// Placement is a half-open interval of memory slots [Start, Start+Size) on
// one GPU's placement grid, exactly as NVML reports it in
// GetGpuInstancePossiblePlacements. Placement units are memory slots, not
// compute slices: an A100 3g profile has Size 4 and 7g has Size 8.
//
// The zero value is the empty interval at slot 0; it is not [Placement.Valid].
// Placement is comparable and can be used as a map key.
type Placement struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

// End returns the first slot after the interval, Start+Size. For a valid
// placement it does not overflow.
func (p Placement) End() uint32 { return p.Start + p.Size }

// Valid reports whether p is non-empty and its end fits in uint32.
func (p Placement) Valid() bool {
	return p.Size > 0 && p.Start+p.Size > p.Start
}

// Within reports whether p is valid and lies entirely inside a grid of width
// slots, that is End() <= width.
func (p Placement) Within(width uint32) bool {
	return p.Valid() && p.End() <= width
}

// Overlaps reports whether p and q share at least one slot. Empty intervals
// overlap nothing; touching intervals such as [0,2) and [2,4) do not overlap.
func (p Placement) Overlaps(q Placement) bool {
	return p.Size > 0 && q.Size > 0 && p.Start < q.End() && q.Start < p.End()
}

// Contains reports whether slot lies inside [Start, End).
func (p Placement) Contains(slot uint32) bool {
	return slot >= p.Start && slot < p.End()
}

// Covers reports whether q lies entirely inside p. An empty q is covered by
// any p whose bounds include q.Start.
func (p Placement) Covers(q Placement) bool {
	return q.Start >= p.Start && q.End() <= p.End()
}

// Mask returns the placement as a bitmask with bit i set for every slot i in
// [Start, End). It returns 0 when p is invalid or ends beyond [MaxSlots]; two
// placements on one grid overlap exactly when their masks share a bit.
func (p Placement) Mask() uint64 {
	if !p.Within(MaxSlots) {
		return 0
	}
	if p.Size == MaxSlots {
		return ^uint64(0)
	}
	return ((uint64(1) << p.Size) - 1) << p.Start
}

// String formats p as the half-open interval "[Start,End)", for example
// "[2,4)".
func (p Placement) String() string {
	b := make([]byte, 0, 16)
	b = append(b, '[')
	b = strconv.AppendUint(b, uint64(p.Start), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(p.Start)+uint64(p.Size), 10)
	b = append(b, ')')
	return string(b)
}
