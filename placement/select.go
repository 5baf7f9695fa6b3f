package placement

import (
	"math/bits"
	"slices"
	"strconv"

	"github.com/dynmig/dynmig/capability"
)

// Assignment is the placement chosen for one requested device: the
// scheduler-written fields of one hami.io/vgpu-mig-allocations entry, plus
// the GPU's position in the node. Assignment is comparable.
type Assignment struct {
	ContainerIndex int
	DeviceIndex    int
	GPU            int // position of the GPU in the []GPUState given to Select
	GPUUUID        string
	Profile        string
	Placement      capability.Placement
}

// String returns e.g. "c0/d1 GPU-abc 2g.10gb [2,4)".
func (a Assignment) String() string {
	return "c" + itoa(a.ContainerIndex) + "/d" + itoa(a.DeviceIndex) + " " + a.GPUUUID + " " + a.Profile + " " + a.Placement.String()
}

// DefaultMaxSteps is the default search bound, see [SelectorOptions].
const DefaultMaxSteps = 20000

// SelectorOptions configures a [Selector]. The zero value works.
type SelectorOptions struct {
	// Policy ranks candidates; nil means [DefaultPolicy].
	Policy Policy
	// MaxSteps bounds the backtracking search for pods with more than one
	// device, counted in candidates generated, per search phase (see
	// [Selector.Select]); 0 means [DefaultMaxSteps].
	MaxSteps int
}

// Selector chooses placements for whole pods. It keeps scratch space so that
// decisions do not allocate; a Selector is not safe for concurrent use (use
// one per goroutine, or a sync.Pool).
type Selector struct {
	policy   Policy
	maxSteps int

	used    []Occupancy
	eng     []Engines // media engines taken, per GPU, as used
	allowed []bool
	devs    []device
	order   []int    // search order of devs in backtracking
	choice  []option // per device (in devs order)
	levels  [][]option
	steps   int
	limited bool
	prefs   []string
	// unhealthy counts the GPUs the request's constraints allow but that
	// are unhealthy, for UnschedulableError.Unhealthy.
	unhealthy int
}

// device is one requested device, flattened in (container, device) order.
type device struct {
	container, index int
	mem              Memory
	profile          string
}

func (d *device) sameSpec(e *device) bool { return d.mem == e.mem && d.profile == e.profile }

// option is one candidate as the search stores it.
type option struct {
	gpu, prof, pl int32
	rank          int32
	cost          int64
}

// NewSelector returns a Selector with the given options.
func NewSelector(opts SelectorOptions) *Selector {
	s := &Selector{policy: opts.Policy, maxSteps: opts.MaxSteps}
	if s.policy == nil {
		s.policy = DefaultPolicy
	}
	if s.maxSteps <= 0 {
		s.maxSteps = DefaultMaxSteps
	}
	return s
}

// Policy returns the selector's policy.
func (s *Selector) Policy() Policy { return s.policy }

// Select chooses a profile and a free published placement for every device
// of every container of req on the node's gpus, all or nothing, and appends
// the assignments to dst in (container, device) order. It never changes
// gpus. Equal inputs give equal results.
//
// For each device the candidate profiles are those whose memory covers the
// demand (see [Memory.On]) or the named [ContainerRequest.Profile]; they are
// tried preferred first (see [Request]), then by NVML memory, slice count
// and name, so the smallest fitting profile wins. Among the candidates of
// that profile the policy's lowest cost wins, then the lowest GPU position
// and start.
//
// The search is bounded. A single-device pod is an exhaustive linear scan
// over every GPU, profile and placement, so it is pending only when no
// placement exists. A multi-device pod is first placed greedily, device by
// device in order, with the policy's choice each; if that fails, each GPU is
// searched alone for a packing of all devices, then all GPUs together, each
// phase by depth-first backtracking over candidates in the same order, with
// interchangeable devices kept in canonical order, and stopping after
// MaxSteps candidates. So the work is at most (GPUs+1) x MaxSteps candidate
// evaluations; when a phase is stopped early and nothing was found, the
// error's reason is [ErrSearchLimit].
//
// Unhealthy GPUs ([Grid.Healthy]) are never chosen, as if the request's
// constraints excluded them: when no healthy allowed GPU is left the
// reason is [ErrExcluded]. The error counts them
// ([UnschedulableError.Unhealthy]) so that a pending pod's reason says so.
//
// A pod that cannot be placed gets an [*UnschedulableError]; a malformed
// request a [*RequestError].
func (s *Selector) Select(gpus []GPUState, req *Request, dst []Assignment) ([]Assignment, error) {
	if err := req.Validate(); err != nil {
		return dst, err
	}
	s.reset(gpus, req)
	if len(s.devs) == 0 {
		return dst, nil
	}
	if s.greedy(gpus) || s.backtrack(gpus) {
		for i := range s.devs {
			dst = append(dst, s.assignment(gpus, i))
		}
		return dst, nil
	}
	return dst, s.explain(gpus)
}

// Select is a convenience wrapper: a fresh [Selector] with policy pol (nil
// means [DefaultPolicy]) and a new result slice.
func Select(gpus []GPUState, req *Request, pol Policy) ([]Assignment, error) {
	return NewSelector(SelectorOptions{Policy: pol}).Select(gpus, req, nil)
}

func (s *Selector) reset(gpus []GPUState, req *Request) {
	s.prefs = req.Preference
	s.used = s.used[:0]
	s.eng = s.eng[:0]
	s.allowed = s.allowed[:0]
	s.unhealthy = 0
	for i := range gpus {
		s.used = append(s.used, gpus[i].Used)
		s.eng = append(s.eng, gpus[i].Engines)
		allowed, healthy := selectable(&gpus[i], req)
		s.allowed = append(s.allowed, allowed && healthy)
		if allowed && !healthy {
			s.unhealthy++
		}
	}
	s.devs = s.devs[:0]
	for c, cr := range req.Containers {
		for d := 0; d < cr.Devices; d++ {
			s.devs = append(s.devs, device{container: c, index: d, mem: cr.Memory, profile: cr.Profile})
		}
	}
	s.choice = slices.Grow(s.choice[:0], len(s.devs))[:len(s.devs)]
	s.steps, s.limited = 0, false
}

// selectable reports whether new devices of req may go on g: it has a
// grid and the request's constraints allow it (allowed), and it is healthy
// ([Grid.Healthy]; an unhealthy GPU's reservations still count in its
// Used). Both must hold.
func selectable(g *GPUState, req *Request) (allowed, healthy bool) {
	if g.Grid == nil || !req.Allows(g.Grid) {
		return false, true
	}
	return true, g.Grid.Healthy()
}

func (s *Selector) assignment(gpus []GPUState, i int) Assignment {
	o := s.choice[i]
	g := gpus[o.gpu].Grid
	gp := &g.shape.profiles[o.prof]
	return Assignment{
		ContainerIndex: s.devs[i].container, DeviceIndex: s.devs[i].index,
		GPU: int(o.gpu), GPUUUID: g.uuid, Profile: gp.p.Name, Placement: gp.placements[o.pl],
	}
}

// covers reports whether profile gp can serve device d on grid g.
func covers(gp *gridProfile, d *device, g *Grid) bool {
	if d.profile != "" {
		return gp.p.Name == d.profile
	}
	return gp.memoryMB >= d.mem.On(g)
}

// less is the selection order of two options.
func less(gpus []GPUState, a, b *option) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	sa, sb := gpus[a.gpu].Grid.shape, gpus[b.gpu].Grid.shape
	if sa == sb {
		if a.prof != b.prof {
			return a.prof < b.prof
		}
	} else if c := capability.CompareProfiles(sa.profiles[a.prof].p, sb.profiles[b.prof].p); c != 0 {
		return c < 0
	}
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	return sa.profiles[a.prof].placements[a.pl].Start < sb.profiles[b.prof].placements[b.pl].Start
}

// greedy places the devices in order, each at the policy's best candidate.
func (s *Selector) greedy(gpus []GPUState) bool {
	for i := range s.devs {
		o, ok := s.best(gpus, &s.devs[i])
		if !ok {
			// Undo so that explain and backtrack start from the input.
			s.restore(gpus)
			return false
		}
		s.choice[i] = o
		s.take(gpus, o)
	}
	return true
}

// best returns the best candidate for d over all allowed GPUs under s.used.
func (s *Selector) best(gpus []GPUState, d *device) (option, bool) {
	var best option
	found := false
	for g := range gpus {
		if !s.allowed[g] {
			continue
		}
		grid := gpus[g].Grid
		sh := grid.shape
		used := uint64(s.used[g])
		// The GPU's own first feasible profile in (rank, order).
		bp, br := -1, int32(0)
		for pi := range sh.profiles {
			gp := &sh.profiles[pi]
			if !covers(gp, d, grid) {
				continue
			}
			r := int32(preferenceRank(s.prefs, gp.p.Name))
			if bp >= 0 && r >= br {
				continue
			}
			if !anyFree(gp, used) || !sh.engines.fits(s.eng[g], pi) {
				continue
			}
			bp, br = pi, r
			if r == 0 {
				break
			}
		}
		if bp < 0 {
			continue
		}
		o := option{gpu: int32(g), prof: int32(bp), rank: br, pl: -1}
		if found && classWorse(gpus, &o, &best) {
			continue
		}
		gp := &sh.profiles[bp]
		for j, m := range gp.masks {
			if used&m != 0 {
				continue
			}
			c := o
			c.pl = int32(j)
			c.cost = s.policy.Cost(Candidate{GPU: g, Grid: grid, Used: Occupancy(used), Profile: gp.p, Placement: gp.placements[j]})
			if !found || less(gpus, &c, &best) {
				best, found = c, true
			}
		}
	}
	return best, found
}

// classWorse reports whether a's (rank, profile) class is strictly after b's.
func classWorse(gpus []GPUState, a, b *option) bool {
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	sa, sb := gpus[a.gpu].Grid.shape, gpus[b.gpu].Grid.shape
	if sa == sb {
		return a.prof > b.prof
	}
	return capability.CompareProfiles(sa.profiles[a.prof].p, sb.profiles[b.prof].p) > 0
}

func anyFree(gp *gridProfile, used uint64) bool {
	for _, m := range gp.masks {
		if used&m == 0 {
			return true
		}
	}
	return false
}

// backtrack runs the bounded search phases for multi-device pods.
func (s *Selector) backtrack(gpus []GPUState) bool {
	if len(s.devs) < 2 {
		return false
	}
	s.searchOrder(gpus)
	for len(s.levels) < len(s.devs) {
		s.levels = append(s.levels, nil)
	}
	for g := range gpus {
		if s.allowed[g] && s.runPhase(gpus, g) {
			return true
		}
	}
	return s.runPhase(gpus, -1)
}

// runPhase searches with a fresh step budget, on GPU only (or all GPUs when
// only < 0).
func (s *Selector) runPhase(gpus []GPUState, only int) bool {
	s.steps = 0
	ok := s.dfs(gpus, 0, only)
	if !ok {
		s.restore(gpus)
	}
	return ok
}

// take records option o in the search state: its slots and its media
// engines (engines.go).
func (s *Selector) take(gpus []GPUState, o option) {
	sh := gpus[o.gpu].Grid.shape
	s.used[o.gpu] |= Occupancy(sh.profiles[o.prof].masks[o.pl])
	s.eng[o.gpu] = s.eng[o.gpu].Add(sh.engines.demand[o.prof])
}

// untake reverses take.
func (s *Selector) untake(gpus []GPUState, o option) {
	sh := gpus[o.gpu].Grid.shape
	s.used[o.gpu] &^= Occupancy(sh.profiles[o.prof].masks[o.pl])
	s.eng[o.gpu] = s.eng[o.gpu].Sub(sh.engines.demand[o.prof])
}

// restore resets the search state to the input.
func (s *Selector) restore(gpus []GPUState) {
	for j := range gpus {
		s.used[j], s.eng[j] = gpus[j].Used, gpus[j].Engines
	}
}

// searchOrder orders devices for backtracking: larger demands first (they
// are the hardest to place), interchangeable devices adjacent.
func (s *Selector) searchOrder(gpus []GPUState) {
	var ref *Grid
	for g := range gpus {
		if s.allowed[g] {
			ref = gpus[g].Grid
			break
		}
	}
	s.order = s.order[:0]
	for i := range s.devs {
		s.order = append(s.order, i)
	}
	if ref == nil {
		return
	}
	size := func(d *device) uint64 {
		if d.profile != "" {
			if p := ref.Profile(d.profile); p != nil {
				return p.MemoryMB
			}
			return 0
		}
		return d.mem.On(ref)
	}
	slices.SortStableFunc(s.order, func(a, b int) int {
		da, db := &s.devs[a], &s.devs[b]
		if sa, sb := size(da), size(db); sa != sb {
			if sa > sb {
				return -1
			}
			return 1
		}
		return 0
	})
}

func (s *Selector) dfs(gpus []GPUState, depth, only int) bool {
	if depth == len(s.order) {
		return true
	}
	di := s.order[depth]
	opts, ok := s.options(gpus, depth, only)
	s.levels[depth] = opts
	if !ok {
		return false
	}
	slices.SortFunc(opts, func(a, b option) int {
		if less(gpus, &a, &b) {
			return -1
		}
		if less(gpus, &b, &a) {
			return 1
		}
		return 0
	})
	for k := range opts {
		o := opts[k]
		s.take(gpus, o)
		s.choice[di] = o
		if s.dfs(gpus, depth+1, only) {
			return true
		}
		s.untake(gpus, o)
		if s.steps > s.maxSteps {
			return false
		}
	}
	return false
}

// options lists, in the level's reused buffer and unsorted, where the
// device at depth can go now (on GPU only, when not negative), each with
// its policy cost. Each counts a step; it returns false, with what it
// listed so far, when the search runs out of steps.
func (s *Selector) options(gpus []GPUState, depth, only int) ([]option, bool) {
	d := &s.devs[s.order[depth]]
	opts := s.levels[depth][:0]
	// Interchangeable devices take candidates in increasing (GPU, start),
	// which removes permutations of the same packing.
	var floor *option
	if depth > 0 && s.devs[s.order[depth-1]].sameSpec(d) {
		floor = &s.choice[s.order[depth-1]]
	}
	for g := range gpus {
		if !s.allowed[g] || (only >= 0 && g != only) {
			continue
		}
		if floor != nil && int32(g) < floor.gpu {
			continue
		}
		grid := gpus[g].Grid
		sh := grid.shape
		used := uint64(s.used[g])
		for pi := range sh.profiles {
			gp := &sh.profiles[pi]
			if !covers(gp, d, grid) || !sh.engines.fits(s.eng[g], pi) {
				continue
			}
			r := int32(preferenceRank(s.prefs, gp.p.Name))
			for j, m := range gp.masks {
				if used&m != 0 {
					continue
				}
				if floor != nil && int32(g) == floor.gpu &&
					gp.placements[j].Start <= gpus[floor.gpu].Grid.shape.profiles[floor.prof].placements[floor.pl].Start {
					continue
				}
				s.steps++
				if s.steps > s.maxSteps {
					s.limited = true
					return opts, false
				}
				c := option{gpu: int32(g), prof: int32(pi), pl: int32(j), rank: r}
				c.cost = s.policy.Cost(Candidate{GPU: g, Grid: grid, Used: Occupancy(used), Profile: gp.p, Placement: gp.placements[j]})
				opts = append(opts, c)
			}
		}
	}
	return opts, true
}

// explain classifies why the pod does not fit, from the input occupancy.
func (s *Selector) explain(gpus []GPUState) error {
	e := s.explainReason(gpus)
	e.Unhealthy = s.unhealthy
	return e
}

func (s *Selector) explainReason(gpus []GPUState) *UnschedulableError {
	anyAllowed, anyGPU := false, false
	for g, a := range s.allowed {
		anyAllowed = anyAllowed || a
		anyGPU = anyGPU || gpus[g].Grid != nil
	}
	switch {
	case !anyGPU:
		return &UnschedulableError{Reason: ErrNoProfile, Container: -1, Device: -1}
	case !anyAllowed:
		return &UnschedulableError{Reason: ErrExcluded, Container: -1, Device: -1}
	}
	needed, free := 0, 0
	for i := range s.devs {
		d := &s.devs[i]
		e := s.explainDevice(gpus, d)
		if e != nil {
			return e
		}
		needed += s.minSlots(gpus, d)
	}
	var all uint64
	for g := range gpus {
		if s.allowed[g] {
			for pi := range gpus[g].Grid.shape.profiles {
				all |= gpus[g].Grid.shape.profiles[pi].union
			}
			free += bits.OnesCount64(all &^ uint64(gpus[g].Used))
			all = 0
		}
	}
	reason := ErrFragmented
	switch {
	case needed > free:
		reason = ErrCapacity
	case s.limited:
		reason = ErrSearchLimit
	}
	return &UnschedulableError{Reason: reason, Container: -1, Device: -1, FreeSlots: free, NeededSlots: needed}
}

// explainDevice returns why d cannot be placed alone, or nil if it can.
func (s *Selector) explainDevice(gpus []GPUState, d *device) *UnschedulableError {
	e := &UnschedulableError{Reason: ErrNoProfile, Container: d.container, Device: d.index}
	bestGap := 0
	haveGap := false
	for g := range gpus {
		if !s.allowed[g] {
			continue
		}
		grid := gpus[g].Grid
		used := uint64(gpus[g].Used)
		if d.profile == "" {
			e.DemandMiB = max(e.DemandMiB, d.mem.On(grid))
		}
		for pi := range grid.shape.profiles {
			gp := &grid.shape.profiles[pi]
			if !covers(gp, d, grid) || len(gp.masks) == 0 {
				continue
			}
			freeSlots := bits.OnesCount64(gp.union &^ used)
			gap := freeSlots - int(gp.minSize)
			if anyFree(gp, used) {
				if grid.shape.engines.fits(gpus[g].Engines, pi) {
					return nil
				}
				// Free slots, but its media engines are taken: capacity.
				gap = -1
			}
			if !haveGap || gap > bestGap {
				haveGap, bestGap = true, gap
				e.FreeSlots, e.NeededSlots = freeSlots, int(gp.minSize)
			}
		}
	}
	switch {
	case !haveGap:
		e.Reason = ErrNoProfile
	case bestGap >= 0:
		e.Reason = ErrFragmented
	default:
		e.Reason = ErrCapacity
	}
	return e
}

// minSlots is the fewest slots any fitting profile of d needs on an allowed
// GPU.
func (s *Selector) minSlots(gpus []GPUState, d *device) int {
	n := -1
	for g := range gpus {
		if !s.allowed[g] {
			continue
		}
		grid := gpus[g].Grid
		for pi := range grid.shape.profiles {
			gp := &grid.shape.profiles[pi]
			if covers(gp, d, grid) && len(gp.masks) > 0 && (n < 0 || int(gp.minSize) < n) {
				n = int(gp.minSize)
			}
		}
	}
	return max(n, 0)
}

func itoa(i int) string { return strconv.Itoa(i) }
