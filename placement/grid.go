package placement

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/dynmig/dynmig/capability"
)

// Occupancy is the set of taken memory slots of one GPU's slot grid: bit i
// is set when slot i is covered by a reservation. A fit test of a placement
// is one AND against [capability.Placement.Mask].
//
// The zero value is an empty GPU. Occupancy is comparable.
type Occupancy uint64

// Fits reports whether p is valid, lies on a 64-slot grid and overlaps no
// taken slot. It does not check that p is a published placement; see
// [Grid.Legal].
func (o Occupancy) Fits(p capability.Placement) bool {
	m := p.Mask()
	return m != 0 && uint64(o)&m == 0
}

// Take returns o with the slots of p marked taken.
func (o Occupancy) Take(p capability.Placement) Occupancy { return o | Occupancy(p.Mask()) }

// Release returns o with the slots of p marked free.
func (o Occupancy) Release(p capability.Placement) Occupancy { return o &^ Occupancy(p.Mask()) }

// Count returns the number of taken slots.
func (o Occupancy) Count() int { return bits.OnesCount64(uint64(o)) }

// String lists the taken runs as half-open intervals, e.g. "{[0,2) [4,5)}";
// the empty occupancy is "{}".
func (o Occupancy) String() string {
	var b strings.Builder
	b.WriteByte('{')
	v := uint64(o)
	first := true
	for v != 0 {
		start := bits.TrailingZeros64(v)
		run := bits.TrailingZeros64(^(v >> start))
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(capability.Placement{Start: uint32(start), Size: uint32(run)}.String())
		if start+run >= 64 {
			break
		}
		v &^= ((uint64(1) << run) - 1) << start
	}
	b.WriteByte('}')
	return b.String()
}

// Grid is one GPU compiled for placement decisions: its identity plus its
// profile table as precomputed slot masks. A Grid is immutable after
// [NewGrid] and safe for concurrent use; GPUs with identical profile tables
// may share the compiled table (see [Ledger]).
type Grid struct {
	uuid     string
	name     string
	memoryMB uint64
	index    int
	shape    *shape
	// unhealthy is the GPU's [capability.GPU.Unhealthy]: new devices never
	// go on it, its reservations keep their slots.
	unhealthy bool
}

// shape is the part of a Grid that depends only on the profile table.
type shape struct {
	width    uint32
	full     uint64
	profiles []gridProfile
	src      []capability.Profile // the input table, in input order, for interning
	limits   capability.Limits    // the GPU's hardware limits, for interning
	caps     []capability.Profile // sorted copies; gridProfile.p points here
	frag     []weightedMask
	byEnd    [][]uint64 // per profile, placement masks ordered by end
	// maxMemory is the largest profile memory, the whole-GPU demand.
	maxMemory uint64
	// capTable[used] and strandTable[used] are capacityValue and stranded
	// for grids of up to tableSlots slots, nil otherwise.
	capTable    []int32
	strandTable []int16
	// engines are the table's media-engine rules (engines.go).
	engines engineTable
}

// tableSlots is the widest grid whose metric values are tabulated: 2^12
// entries of 6 bytes, 24 KiB per distinct profile table.
const tableSlots = 12

// gridProfile is one profile with its placements as masks, sorted by start.
type gridProfile struct {
	p          *capability.Profile
	placements []capability.Placement
	masks      []uint64
	union      uint64 // every slot the profile can ever occupy
	minSize    uint32
	highFirst  bool // the deployed v2.10 order tries this profile from the highest start
	memoryMB   uint64
	sliceCount uint32
}

// weightedMask is one distinct published placement with its size, for the
// [FreePlacements] metric.
type weightedMask struct {
	mask uint64
	size int64 // slots
}

// NewGrid compiles gpu for placement. It copies what it keeps, so the caller
// may reuse gpu. Profiles are ordered by [capability.CompareProfiles] and
// their placements by start. It fails with a [*GridError] (wrapping
// [ErrInvalidGrid]) when the UUID is empty, a profile name is empty or
// repeated, or a placement is invalid or ends beyond slot 64.
func NewGrid(gpu *capability.GPU) (*Grid, error) {
	if gpu.UUID == "" {
		return nil, &GridError{Reason: "empty GPU UUID"}
	}
	sh, err := internShape(gpu)
	if err != nil {
		return nil, err
	}
	return &Grid{uuid: gpu.UUID, name: gpu.Name, memoryMB: gpu.MemoryMB, index: gpu.Index, shape: sh,
		unhealthy: gpu.Unhealthy}, nil
}

// Healthy reports whether the GPU may take new devices: false when the GPU
// was compiled with [capability.GPU.Unhealthy] set. An unhealthy GPU is
// never chosen by [Selector.Select]; its existing reservations still occupy
// their slots.
func (g *Grid) Healthy() bool { return !g.unhealthy }

// shapes interns compiled profile tables, so GPUs of one model share one
// table (and its lookup tables) process-wide: a map from the table's hash to
// the shapes with that hash, each compared in full before reuse. The map
// holds weak pointers: a table no Grid uses any more is collected, so a
// node that publishes a new table on every update (driver memory drift, a
// faulty or hostile registration) cannot grow the scheduler without bound.
var shapes struct {
	sync.Mutex
	m map[uint64][]weak.Pointer[shape]
	// sweepAt is the map size at which the next insert drops every
	// collected shape: twice the size left by the last sweep, so sweeping
	// costs amortised constant time per insert.
	sweepAt int
}

func internShape(gpu *capability.GPU) (*shape, error) {
	lim := gpu.HardwareLimits()
	h := tableHash(gpu.Profiles, lim)
	if sh := lookupShape(h, gpu.Profiles, lim, false); sh != nil {
		return sh, nil
	}
	sh, err := newShape(gpu, lim)
	if err != nil {
		return nil, err
	}
	shapes.Lock()
	defer shapes.Unlock()
	if old := lookupShapeLocked(h, gpu.Profiles, lim, true); old != nil {
		return old, nil
	}
	if shapes.m == nil {
		shapes.m = map[uint64][]weak.Pointer[shape]{}
	}
	if len(shapes.m) >= shapes.sweepAt {
		for k := range shapes.m {
			lookupShapeLocked(k, nil, capability.Limits{}, true)
		}
		shapes.sweepAt = 2*len(shapes.m) + 64
	}
	shapes.m[h] = append(shapes.m[h], weak.Make(sh))
	return sh, nil
}

func lookupShape(h uint64, ps []capability.Profile, lim capability.Limits, prune bool) *shape {
	shapes.Lock()
	defer shapes.Unlock()
	return lookupShapeLocked(h, ps, lim, prune)
}

// lookupShapeLocked returns the live shape of table ps on a GPU with
// limits lim, and with prune drops the collected shapes with hash h.
func lookupShapeLocked(h uint64, ps []capability.Profile, lim capability.Limits, prune bool) *shape {
	var found *shape
	for _, w := range shapes.m[h] {
		if sh := w.Value(); sh != nil && sh.limits == lim && sameTable(sh.src, ps) {
			found = sh
			break
		}
	}
	if prune {
		live := slices.DeleteFunc(shapes.m[h], func(w weak.Pointer[shape]) bool { return w.Value() == nil })
		if len(live) == 0 {
			delete(shapes.m, h)
		} else {
			shapes.m[h] = live
		}
	}
	return found
}

// tableHash is an FNV-1a hash of what a shape depends on.
func tableHash(ps []capability.Profile, lim capability.Limits) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for range 8 {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(uint64(lim.Slots)<<32 | uint64(lim.ComputeSlices))
	if lim.AllMediaEngines {
		mix(1)
	}
	for i := range ps {
		p := &ps[i]
		for j := 0; j < len(p.Name); j++ {
			h ^= uint64(p.Name[j])
			h *= 1099511628211
		}
		mix(p.MemoryMB)
		mix(uint64(p.SliceCount))
		for _, pl := range p.Placements {
			mix(uint64(pl.Start)<<32 | uint64(pl.Size))
		}
	}
	return h
}

// sameTable compares the fields a shape depends on, in input order.
func sameTable(a, b []capability.Profile) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].MemoryMB != b[i].MemoryMB || a[i].SliceCount != b[i].SliceCount ||
			!slices.Equal(a[i].Placements, b[i].Placements) {
			return false
		}
	}
	return true
}

// newShape compiles gpu's table on a GPU with limits lim: the grid is
// lim.Slots wide and the media-engine budget is lim's (see [Engines]),
// whatever subset of the GPU's profiles the table holds.
func newShape(gpu *capability.GPU, lim capability.Limits) (*shape, error) {
	src := make([]capability.Profile, len(gpu.Profiles))
	for i, p := range gpu.Profiles {
		p.Placements = slices.Clone(p.Placements)
		src[i] = p
	}
	caps := slices.Clone(src)
	capability.SortProfiles(caps)
	sh := &shape{src: src, caps: caps, profiles: make([]gridProfile, len(caps)), limits: lim, width: lim.Slots}
	seen := make(map[string]bool, len(caps))
	for i := range caps {
		pr := &caps[i]
		if pr.Name == "" {
			return nil, &GridError{UUID: gpu.UUID, Reason: fmt.Sprintf("profile %d has an empty name", i)}
		}
		if seen[pr.Name] {
			return nil, &GridError{UUID: gpu.UUID, Profile: pr.Name, Reason: "profile listed twice"}
		}
		seen[pr.Name] = true
		gp, err := compileProfile(gpu.UUID, pr)
		if err != nil {
			return nil, err
		}
		for _, pl := range gp.placements {
			sh.width = max(sh.width, pl.End())
		}
		sh.maxMemory = max(sh.maxMemory, pr.MemoryMB)
		sh.profiles[i] = gp
	}
	if sh.width == capability.MaxSlots {
		sh.full = ^uint64(0)
	} else {
		sh.full = (uint64(1) << sh.width) - 1
	}
	sh.frag = fragMasks(sh.profiles)
	sh.engines = deriveEngines(sh.profiles, sh.width, lim)
	sh.byEnd = byEndMasks(sh.profiles)
	if sh.width <= tableSlots {
		sh.capTable = make([]int32, 1<<sh.width)
		sh.strandTable = make([]int16, 1<<sh.width)
		for used := range sh.capTable {
			sh.capTable[used] = int32(sh.capacityValue(uint64(used)))
			sh.strandTable[used] = int16(sh.strandedValue(uint64(used)))
		}
	}
	return sh, nil
}

// compileProfile compiles one profile of the GPU uuid's table: its
// placements sorted by (start, size) without repeats (pr's are replaced by
// them), their masks, and the masks' union and smallest size.
func compileProfile(uuid string, pr *capability.Profile) (gridProfile, error) {
	pls := slices.Clone(pr.Placements)
	slices.SortFunc(pls, func(a, b capability.Placement) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Size, b.Size))
	})
	pls = slices.Compact(pls)
	pr.Placements = pls
	gp := gridProfile{p: pr, placements: pls, masks: make([]uint64, len(pls)),
		memoryMB: pr.MemoryMB, sliceCount: pr.SliceCount,
		highFirst: pr.SliceCount == 1 || pr.SliceCount == 3}
	for j, pl := range pls {
		if !pl.Within(capability.MaxSlots) {
			return gridProfile{}, &GridError{UUID: uuid, Profile: pr.Name, Reason: fmt.Sprintf("placement %v is not on a %d-slot grid", pl, capability.MaxSlots)}
		}
		gp.masks[j] = pl.Mask()
		gp.union |= gp.masks[j]
		if gp.minSize == 0 || pl.Size < gp.minSize {
			gp.minSize = pl.Size
		}
	}
	return gp, nil
}

// byEndMasks returns each profile's placement masks ordered by the
// placement's end, ties in table order.
func byEndMasks(profiles []gridProfile) [][]uint64 {
	byEnd := make([][]uint64, len(profiles))
	for i := range profiles {
		gp := &profiles[i]
		idx := make([]int, len(gp.masks))
		for j := range idx {
			idx[j] = j
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(gp.placements[a].End(), gp.placements[b].End()) })
		for _, j := range idx {
			byEnd[i] = append(byEnd[i], gp.masks[j])
		}
	}
	return byEnd
}

// fragMasks collects the distinct published placements with their weights.
func fragMasks(ps []gridProfile) []weightedMask {
	var out []weightedMask
	for i := range ps {
		for _, m := range ps[i].masks {
			if !slices.ContainsFunc(out, func(w weightedMask) bool { return w.mask == m }) {
				out = append(out, weightedMask{mask: m, size: int64(bits.OnesCount64(m))})
			}
		}
	}
	slices.SortFunc(out, func(a, b weightedMask) int { return cmp.Compare(a.mask, b.mask) })
	return out
}

// UUID returns the GPU UUID.
func (g *Grid) UUID() string { return g.uuid }

// Name returns the NVML device name, matched by GPU type constraints.
func (g *Grid) Name() string { return g.name }

// MemoryMB returns the GPU's total memory in MiB, the base of percentage
// and whole-GPU demands.
func (g *Grid) MemoryMB() uint64 { return g.memoryMB }

// Index returns the NVML device index.
func (g *Grid) Index() int { return g.index }

// Width returns the number of slots of the grid (4 on A30, 8 on A100 and
// Hopper, 12 on RTX PRO 6000).
func (g *Grid) Width() uint32 { return g.shape.width }

// Full returns the occupancy with every slot of the grid taken.
func (g *Grid) Full() Occupancy { return Occupancy(g.shape.full) }

// Profiles returns the grid's profiles ordered by
// [capability.CompareProfiles], placements ordered by start. The caller must
// not modify them.
func (g *Grid) Profiles() []capability.Profile { return g.shape.caps }

// Profile returns the profile named name, or nil.
func (g *Grid) Profile(name string) *capability.Profile {
	if i := g.profileIndex(name); i >= 0 {
		return g.shape.profiles[i].p
	}
	return nil
}

func (g *Grid) profileIndex(name string) int {
	for i := range g.shape.profiles {
		if g.shape.profiles[i].p.Name == name {
			return i
		}
	}
	return -1
}

// Legal reports whether p is a published placement of the profile named
// profile.
func (g *Grid) Legal(profile string, p capability.Placement) bool {
	i := g.profileIndex(profile)
	return i >= 0 && g.shape.profiles[i].p.HasPlacement(p)
}

// Capacity returns, summed over the grid's profiles, how many more
// instances of each could still be created under used: the quantity the
// default policy loses as little of as possible (see [Stranding]).
func (g *Grid) Capacity(used Occupancy) int { return int(g.shape.capacity(uint64(used))) }

// Stranded returns the free slots under used outside the largest free
// published placement: free space no single new instance can use. The
// default policy avoids increasing it (see [Stranding]).
func (g *Grid) Stranded(used Occupancy) int { return int(g.shape.stranded(uint64(used))) }

// String returns "UUID (name, N slots)".
func (g *Grid) String() string {
	return g.uuid + " (" + g.name + ", " + strconv.FormatUint(uint64(g.shape.width), 10) + " slots)"
}

// GPUState is one GPU of a node as a placement decision sees it: its
// compiled grid and the slots already taken. The zero value has no grid and
// is skipped by selection.
type GPUState struct {
	Grid *Grid
	Used Occupancy
	// Engines are the media engines the GPU's instances take (the sum of
	// [Grid.EnginesOf] over its reservations); selection never adds an
	// instance whose engines are taken. The zero value is none taken.
	Engines Engines
}

// capacityValue is the sum over profiles of the largest number of
// instances that could still be created under used (interval scheduling:
// taking free placements by earliest end is optimal).
func (sh *shape) capacityValue(used uint64) int64 {
	var v int64
	for i := range sh.byEnd {
		occ := used
		for _, m := range sh.byEnd[i] {
			if occ&m == 0 {
				occ |= m
				v++
			}
		}
	}
	return v
}

// strandedValue is the number of free slots outside the largest free
// published placement: free slots that no single new instance can use
// together. An empty GPU and a GPU whose free slots form one published
// placement strand nothing.
func (sh *shape) strandedValue(used uint64) int64 {
	var largest uint32
	for i := range sh.profiles {
		gp := &sh.profiles[i]
		for j, m := range gp.masks {
			if used&m == 0 && gp.placements[j].Size > largest {
				largest = gp.placements[j].Size
			}
		}
	}
	return int64(bits.OnesCount64(sh.full&^used)) - int64(largest)
}

// capacity returns capacityValue, from the table when there is one.
func (sh *shape) capacity(used uint64) int64 {
	if sh.capTable != nil {
		return int64(sh.capTable[used&sh.full])
	}
	return sh.capacityValue(used)
}

// stranded returns strandedValue, from the table when there is one.
func (sh *shape) stranded(used uint64) int64 {
	if sh.strandTable != nil {
		return int64(sh.strandTable[used&sh.full])
	}
	return sh.strandedValue(used)
}
