package placement

import (
	"strconv"

	"github.com/dynmig/dynmig/capability"
)

// Engines counts the media engines of one GPU that placement tracks: the
// engines that can run out before the slots do. A GPU refuses a GPU
// instance whose media engines are already taken, independently of free
// slots (NVML ERROR_INSUFFICIENT_RESOURCES), and the registration wire
// format carries no engine counts, so they are derived on the scheduler
// side from the profile names and the profile table (see [Grid.EnginesOf]).
// The zero value is no engines taken. Engines is comparable.
//
// The rules, and where they come from:
//
//   - A GPU has one optical-flow accelerator and one JPEG set that only the
//     "+me" and "+me.all" profiles and the whole-GPU profile hold (read from
//     the MIG User Guide's engine columns for A30 and A100 and from an H100's
//     nvidia-smi output; inferred for H200, H20, B200 and GB200). So at most
//     one such GPU instance per GPU: on an A30, 1g.6gb+me and 2g.12gb+me
//     exclude each other although their slots do not overlap.
//   - On GPUs whose full table has "+me.all" profiles (RTX PRO 6000
//     Blackwell) a "+me.all" instance takes all NVDEC/NVENC engines and
//     excludes every other engine-bearing instance (read from the guide);
//     plain, "+gfx" and "+me" instances take one per compute slice and "-me"
//     ones none (inferred). There the decoder budget is the GPU's compute
//     slices.
//   - Elsewhere decoders are not tracked: the guide's per-profile counts
//     (A100, A30, Hopper) never exceed the GPU's within the slot limits.
//
// The budget, whether decoders are tracked and which instance spans the
// whole GPU are properties of the hardware: they come from the GPU's
// [capability.GPU.HardwareLimits], never from the published (allowlisted)
// profiles, so narrowing the allowlist never lowers how many instances of
// the remaining profiles fit.
//
// placement's tests check these rules against fakehal's per-profile engine
// tables on every combination of every built-in model.
type Engines struct {
	Decoders uint8 // NVDEC (and NVENC, JPEG where handed out per slice)
	OFA      uint8 // the optical-flow/JPEG set of "+me" and whole-GPU profiles
}

// Add returns e and o together.
func (e Engines) Add(o Engines) Engines {
	return Engines{Decoders: e.Decoders + o.Decoders, OFA: e.OFA + o.OFA}
}

// Sub returns e without o, never below zero.
func (e Engines) Sub(o Engines) Engines {
	return Engines{Decoders: e.Decoders - min(e.Decoders, o.Decoders), OFA: e.OFA - min(e.OFA, o.OFA)}
}

// String returns e.g. "2 dec, 1 ofa".
func (e Engines) String() string {
	return strconv.Itoa(int(e.Decoders)) + " dec, " + strconv.Itoa(int(e.OFA)) + " ofa"
}

// engineTable is a profile table's engine rules: per compiled profile (in
// shape order) what an instance takes, and what the GPU has.
type engineTable struct {
	demand []Engines
	budget Engines
	// decoders reports whether Decoders are tracked at all.
	decoders bool
}

// deriveEngines applies the rules of [Engines] to a compiled table on a
// GPU of the given width and limits. The budget and whether decoders are
// tracked come from the GPU's limits, never from the table: an allowlist
// that leaves out profiles must not lower what the remaining ones can use.
func deriveEngines(ps []gridProfile, width uint32, lim capability.Limits) engineTable {
	t := engineTable{demand: make([]Engines, len(ps)), budget: Engines{OFA: 1}}
	slices := lim.ComputeSlices
	t.decoders = lim.AllMediaEngines
	for i := range ps {
		slices = max(slices, ps[i].sliceCount)
		if variantOf(ps[i].p) == capability.VariantMEAll {
			t.decoders = true
		}
	}
	if t.decoders {
		t.budget.Decoders = uint8(min(slices, 255))
	}
	for i := range ps {
		gp := &ps[i]
		var d Engines
		whole := gp.minSize >= width
		switch variantOf(gp.p) {
		case capability.VariantNoME:
			// No media engines.
		case capability.VariantMEAll:
			d = Engines{Decoders: t.budget.Decoders, OFA: 1}
		case capability.VariantME:
			d = Engines{Decoders: uint8(min(gp.sliceCount, 255)), OFA: 1}
		default:
			d.Decoders = uint8(min(gp.sliceCount, 255))
			if whole {
				d = Engines{Decoders: t.budget.Decoders, OFA: 1}
			}
		}
		if !t.decoders {
			d.Decoders = 0
		}
		t.demand[i] = d
	}
	return t
}

func variantOf(p *capability.Profile) capability.Variant {
	if n, err := capability.ParseProfileName(p.Name); err == nil {
		return n.Variant
	}
	return p.Variant
}

// fits reports whether profile i's engines are free under used.
func (t *engineTable) fits(used Engines, i int) bool {
	d := t.demand[i]
	return used.OFA+d.OFA <= t.budget.OFA && (!t.decoders || used.Decoders+d.Decoders <= t.budget.Decoders)
}

// EnginesOf returns the media engines an instance of the named profile
// takes on this GPU, as derived by the rules of [Engines]; zero for a
// profile the GPU does not publish.
func (g *Grid) EnginesOf(profile string) Engines {
	if i := g.profileIndex(profile); i >= 0 {
		return g.shape.engines.demand[i]
	}
	return Engines{}
}

// heldEngines returns the media engines a reservation already on the GPU
// takes. For a published profile that is [Grid.EnginesOf]. A profile the
// table no longer publishes (the allowlist narrowed after the pod was
// placed) still runs with its engines, so they are derived from its name
// and placement by the rules of [Engines]; when neither tells, every engine
// counts as taken, so that selection never adds an instance the GPU would
// refuse.
func (g *Grid) heldEngines(profile string, at capability.Placement) Engines {
	if i := g.profileIndex(profile); i >= 0 {
		return g.shape.engines.demand[i]
	}
	t := &g.shape.engines
	name, err := capability.ParseProfileName(profile)
	if err != nil || at.Size >= g.Width() {
		return t.budget
	}
	var d Engines
	switch name.Variant {
	case capability.VariantNoME:
		// No media engines.
	case capability.VariantMEAll:
		d = t.budget
	case capability.VariantME:
		d = Engines{Decoders: uint8(min(name.Compute, 255)), OFA: 1}
	default:
		d.Decoders = uint8(min(name.Compute, 255))
	}
	if !t.decoders {
		d.Decoders = 0
	}
	return d
}

// EngineBudget returns the media engines of the whole GPU. Decoders is 0
// when decoders are not tracked on this GPU.
func (g *Grid) EngineBudget() Engines { return g.shape.engines.budget }

// EnginesFit reports whether an instance of the named profile may be added
// to a GPU whose instances take used: false when its media engines are
// taken (or the profile is not published).
func (g *Grid) EnginesFit(used Engines, profile string) bool {
	i := g.profileIndex(profile)
	return i >= 0 && g.shape.engines.fits(used, i)
}
