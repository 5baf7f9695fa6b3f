package placementtest

import (
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// DefaultOracleSteps bounds the oracle's exhaustive search, in candidates
// tried; see [OracleWithin].
const DefaultOracleSteps = 2_000_000

// Verdict is the oracle's answer for one pod on one node.
type Verdict struct {
	// Fits reports that every device of the pod has a free published
	// placement whose media engines are free, all at once; Witness is one
	// such placement, in (container, device) order.
	Fits    bool
	Witness []placement.Assignment
	// Unknown reports that the search bound was reached before an answer;
	// Fits is then false and Reason nil.
	Unknown bool
	// Reason says why the pod does not fit: placement.ErrExcluded (no
	// healthy GPU the constraints allow), placement.ErrNoProfile (a device
	// has no profile covering its demand, with a placement, on an allowed
	// GPU), placement.ErrCapacity or placement.ErrFragmented. For a device
	// that cannot be placed even alone, Container and Device name the first
	// one (in container, device order) and the reason is ErrCapacity when,
	// on every allowed GPU, every covering profile has fewer free slots in
	// the union of its placements than its smallest placement needs, else
	// ErrFragmented; a covering profile with a free placement whose media
	// engines are taken counts as no room (ErrCapacity: the GPU lacks the
	// resource however it is arranged). When every device fits alone but
	// not all together, Container and Device are -1 and the reason is
	// ErrCapacity when the devices' smallest sizes add up to more than the
	// free slots of the allowed GPUs' profile grids, else ErrFragmented.
	Reason            error
	Container, Device int
	// Smallest is, for a pod of exactly one device that fits, the profile
	// the placement rules pick: the first by preference rank (see
	// [placement.Request]), then [capability.CompareProfiles], among the
	// profiles that cover the demand and have a free published placement
	// on an allowed GPU. Nil otherwise.
	Smallest *capability.Profile
	// Steps is the number of candidates the search tried.
	Steps int
}

// Oracle is [OracleWithin] with [DefaultOracleSteps].
func Oracle(n *Node, req *placement.Request) Verdict {
	return OracleWithin(n, req, DefaultOracleSteps)
}

// OracleWithin decides by exhaustive depth-first search, over every
// allowed GPU, covering profile and free published placement of every
// device, whether req fits n, trying at most maxSteps candidates. It reads
// capability tables directly, not compiled grids, with interval arithmetic
// only, so it shares no code with the allocators it judges. req must be
// valid ([placement.Request.Validate]).
func OracleWithin(n *Node, req *placement.Request, maxSteps int) Verdict {
	o := oracle{n: n, req: req, maxSteps: maxSteps}
	return o.run()
}

type oracle struct {
	n        *Node
	req      *placement.Request
	maxSteps int
	steps    int
	allowed  []bool
	used     []placement.Occupancy
	grids    []*placement.Grid   // for the media-engine rules only
	eng      []placement.Engines // media engines taken, per GPU
	devs     []oracleDevice
	pick     []candidate
}

type oracleDevice struct {
	container, index int
	c                placement.ContainerRequest
}

type candidate struct {
	gpu, prof int
	pl        capability.Placement
}

func (o *oracle) run() Verdict {
	v := Verdict{Container: -1, Device: -1}
	anyGPU, anyAllowed := len(o.n.GPUs) > 0, false
	for i := range o.n.GPUs {
		a := allows(o.req, &o.n.GPUs[i])
		o.allowed = append(o.allowed, a)
		o.used = append(o.used, o.n.Used(i))
		g, _ := placement.NewGrid(&o.n.GPUs[i])
		o.grids = append(o.grids, g)
		o.eng = append(o.eng, o.n.engines(i, g))
		anyAllowed = anyAllowed || a
	}
	for c, cr := range o.req.Containers {
		for d := range cr.Devices {
			o.devs = append(o.devs, oracleDevice{container: c, index: d, c: cr})
		}
	}
	if len(o.devs) == 0 {
		v.Fits = true
		return v
	}
	switch {
	case !anyGPU:
		v.Reason = placement.ErrNoProfile
		return v
	case !anyAllowed:
		v.Reason = placement.ErrExcluded
		return v
	}
	if len(o.devs) == 1 {
		v.Smallest = o.smallest(o.devs[0].c)
	}
	o.pick = make([]candidate, len(o.devs))
	found := o.search(0)
	v.Steps = o.steps
	if found {
		v.Fits = true
		for i, d := range o.devs {
			p := o.pick[i]
			g := &o.n.GPUs[p.gpu]
			v.Witness = append(v.Witness, placement.Assignment{ContainerIndex: d.container, DeviceIndex: d.index,
				GPU: p.gpu, GPUUUID: g.UUID, Profile: g.Profiles[p.prof].Name, Placement: p.pl})
		}
		return v
	}
	if o.steps > o.maxSteps {
		v.Unknown = true
		v.Smallest = nil
		return v
	}
	v.Smallest = nil
	o.explain(&v)
	return v
}

// search places device k and the ones after it; devices of one container
// are interchangeable, so their candidates are kept in non-decreasing
// order (a canonical form of each packing).
func (o *oracle) search(k int) bool {
	if k == len(o.devs) {
		return true
	}
	d := &o.devs[k]
	for gi := range o.n.GPUs {
		if !o.allowed[gi] {
			continue
		}
		g := &o.n.GPUs[gi]
		for pi := range g.Profiles {
			p := &g.Profiles[pi]
			if !covers(d.c, g, p) {
				continue
			}
			for _, pl := range p.Placements {
				c := candidate{gpu: gi, prof: pi, pl: pl}
				if k > 0 && o.devs[k-1].container == d.container && less(c, o.pick[k-1]) {
					continue
				}
				o.steps++
				if o.steps > o.maxSteps {
					return false
				}
				if !o.used[gi].Fits(pl) || !o.enginesFit(gi, p.Name) {
					continue
				}
				o.pick[k] = c
				o.used[gi] = o.used[gi].Take(pl)
				before := o.eng[gi]
				o.eng[gi] = o.eng[gi].Add(o.grids[gi].EnginesOf(p.Name))
				ok := o.search(k + 1)
				o.used[gi] = o.used[gi].Release(pl)
				o.eng[gi] = before
				if ok {
					return true
				}
				if o.steps > o.maxSteps {
					return false
				}
			}
		}
	}
	return false
}

func less(a, b candidate) bool {
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	if a.prof != b.prof {
		return a.prof < b.prof
	}
	return a.pl.Start < b.pl.Start || (a.pl.Start == b.pl.Start && a.pl.Size < b.pl.Size)
}

// smallest is Verdict.Smallest for a single device with demand c.
func (o *oracle) smallest(c placement.ContainerRequest) *capability.Profile {
	var best *capability.Profile
	bestRank := 0
	for gi := range o.n.GPUs {
		if !o.allowed[gi] {
			continue
		}
		g := &o.n.GPUs[gi]
		for pi := range g.Profiles {
			p := &g.Profiles[pi]
			if !covers(c, g, p) || !anyFree(p, o.used[gi]) || !o.enginesFit(gi, p.Name) {
				continue
			}
			r := preferenceRank(o.req.Preference, p.Name)
			if best == nil || r < bestRank || (r == bestRank && capability.CompareProfiles(p, best) < 0) {
				best, bestRank = p, r
			}
		}
	}
	return best
}

// explain fills the reason of a pod that does not fit.
func (o *oracle) explain(v *Verdict) {
	needed, free := 0, 0
	for _, d := range o.devs {
		minSize, reason := o.explainDevice(d.c)
		if reason != nil {
			v.Reason, v.Container, v.Device = reason, d.container, d.index
			return
		}
		needed += minSize
	}
	for gi := range o.n.GPUs {
		if !o.allowed[gi] {
			continue
		}
		var grid placement.Occupancy
		for _, p := range o.n.GPUs[gi].Profiles {
			for _, pl := range p.Placements {
				grid = grid.Take(pl)
			}
		}
		free += (grid &^ o.used[gi]).Count()
	}
	v.Reason = placement.ErrFragmented
	if needed > free {
		v.Reason = placement.ErrCapacity
	}
}

// explainDevice returns the smallest placement size of the device's
// covering profiles and nil when it fits alone, else why not.
func (o *oracle) explainDevice(c placement.ContainerRequest) (int, error) {
	anyProfile, anyRoom := false, false
	minSize := -1
	fitsAlone := false
	for gi := range o.n.GPUs {
		if !o.allowed[gi] {
			continue
		}
		g := &o.n.GPUs[gi]
		for pi := range g.Profiles {
			p := &g.Profiles[pi]
			if !covers(c, g, p) || len(p.Placements) == 0 {
				continue
			}
			anyProfile = true
			var union placement.Occupancy
			smallest := p.Placements[0].Size
			for _, pl := range p.Placements {
				union = union.Take(pl)
				smallest = min(smallest, pl.Size)
			}
			if minSize < 0 || int(smallest) < minSize {
				minSize = int(smallest)
			}
			switch {
			case !anyFree(p, o.used[gi]):
				anyRoom = anyRoom || (union&^o.used[gi]).Count() >= int(smallest)
			case o.enginesFit(gi, p.Name):
				fitsAlone = true
			}
			// A free placement whose media engines are taken is no room:
			// the GPU lacks the resource whatever the arrangement.
		}
	}
	switch {
	case fitsAlone:
		return minSize, nil
	case !anyProfile:
		return 0, placement.ErrNoProfile
	case anyRoom:
		return 0, placement.ErrFragmented
	}
	return 0, placement.ErrCapacity
}

// enginesFit reports whether an instance of the profile may join GPU gi's
// instances without exceeding its media engines. The registration carries
// no engine counts, so the engine facts come from the placement package's
// documented rules ([placement.Grid.EnginesOf]); the oracle only adds them
// up.
func (o *oracle) enginesFit(gi int, profile string) bool {
	g := o.grids[gi]
	return g == nil || g.EnginesFit(o.eng[gi], profile)
}

func anyFree(p *capability.Profile, used placement.Occupancy) bool {
	for _, pl := range p.Placements {
		if used.Fits(pl) {
			return true
		}
	}
	return false
}

// covers reports whether profile p of g serves a device of container c:
// the named profile, or one whose memory covers the demand. A percentage
// is of the GPU's memory, rounded up, capped at the largest profile's
// memory; a whole GPU is the largest profile's memory.
func covers(c placement.ContainerRequest, g *capability.GPU, p *capability.Profile) bool {
	if c.Profile != "" {
		return p.Name == c.Profile
	}
	return p.MemoryMB >= Demand(c.Memory, g)
}

// Demand is the oracle's reading of a memory demand on g, in MiB, as
// [placement.Memory.On] documents it.
func Demand(m placement.Memory, g *capability.GPU) uint64 {
	var top uint64
	for _, q := range g.Profiles {
		top = max(top, q.MemoryMB)
	}
	switch m.Kind {
	case placement.MiBDemand:
		return m.MiB
	case placement.PercentDemand:
		base := g.MemoryMB
		if base == 0 {
			base = top
		}
		return min((base*uint64(m.Percent)+99)/100, top)
	}
	return top
}

// allows reports whether the pod may get a new device on g: g is healthy
// and the request's UUID and type constraints allow it (types match as
// case-insensitive substrings of the NVML name, HAMi's rule).
func allows(r *placement.Request, g *capability.GPU) bool {
	if g.Unhealthy {
		return false
	}
	if len(r.UseUUIDs) > 0 && !hasString(r.UseUUIDs, g.UUID) {
		return false
	}
	if hasString(r.NoUseUUIDs, g.UUID) {
		return false
	}
	name := strings.ToLower(g.Name)
	anyType := func(types []string) bool {
		for _, t := range types {
			if strings.Contains(name, strings.ToLower(strings.TrimSpace(t))) {
				return true
			}
		}
		return false
	}
	if len(r.UseTypes) > 0 && !anyType(r.UseTypes) {
		return false
	}
	return !anyType(r.NoUseTypes)
}

func hasString(l []string, s string) bool {
	for _, x := range l {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// preferenceRank is the index of the first preference entry matching name
// (equal, or a prefix followed by '.'), or len(prefs).
func preferenceRank(prefs []string, name string) int {
	for i, p := range prefs {
		p = strings.TrimSpace(p)
		if name == p || strings.HasPrefix(name, p+".") {
			return i
		}
	}
	return len(prefs)
}
