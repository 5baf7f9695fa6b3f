package fakehal

import (
	"strconv"

	"github.com/dynmig/dynmig/capability"
)

// Engines counts media engines: NVML's GpuInstanceProfileInfo
// DecoderCount, EncoderCount, JpegCount and OfaCount for a profile, or the
// engines of a whole GPU. Hardware refuses a GPU instance whose engines are
// already taken by other GPU instances, independently of free slots, with
// ERROR_INSUFFICIENT_RESOURCES (as for an occupied range). The zero value
// is no engines. Engines is comparable.
type Engines struct {
	Decoders uint32 // NVDEC
	Encoders uint32 // NVENC
	JPEG     uint32 // NVJPG
	OFA      uint32 // optical flow accelerators
}

// Add returns the engines of e and o together.
func (e Engines) Add(o Engines) Engines {
	return Engines{Decoders: e.Decoders + o.Decoders, Encoders: e.Encoders + o.Encoders, JPEG: e.JPEG + o.JPEG, OFA: e.OFA + o.OFA}
}

// Within reports whether every count of e is at most budget's.
func (e Engines) Within(budget Engines) bool {
	return e.Decoders <= budget.Decoders && e.Encoders <= budget.Encoders && e.JPEG <= budget.JPEG && e.OFA <= budget.OFA
}

// String returns the MIG User Guide's notation, e.g.
// "1 NVDEC / 0 NVENC / 1 JPEG / 1 OFA".
func (e Engines) String() string {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	return u(e.Decoders) + " NVDEC / " + u(e.Encoders) + " NVENC / " + u(e.JPEG) + " JPEG / " + u(e.OFA) + " OFA"
}

// profileEngines is a [Model.ProfileEngines] table.
type profileEngines = map[capability.GIProfileIndex]Engines

// Engine tables. Which rows are read from the MIG User Guide (R580) or a
// driver's `nvidia-smi mig -lgip` and which are inferred is said per
// table; the budgets are the per-GPU totals the full-GPU profile gets.
var (
	// A100 40GB and 80GB: read from the guide's A100 table (5 NVDEC, one
	// JPEG and one OFA that only 1g+me and 7g hold).
	a100Budget  = Engines{Decoders: 5, JPEG: 1, OFA: 1}
	a100Engines = profileEngines{
		capability.GIProfile1SliceRev1: {Decoders: 1, JPEG: 1, OFA: 1},
		capability.GIProfile1SliceRev2: {Decoders: 1},
		capability.GIProfile2Slice:     {Decoders: 1},
		capability.GIProfile3Slice:     {Decoders: 2},
		capability.GIProfile4Slice:     {Decoders: 2},
		capability.GIProfile7Slice:     {Decoders: 5, JPEG: 1, OFA: 1},
	}

	// Hopper: read from an H100 80GB HBM3 `nvidia-smi mig -lgip` (DEC
	// and JPEG per compute slice, the one OFA held by 1g+me and 7g).
	// H100 PCIe, H100 NVL, H200, H20, GH200 and H800 are inferred to be
	// the same GH100 engines (?); so are B200 and GB200 (?).
	hopperBudget  = Engines{Decoders: 7, JPEG: 7, OFA: 1}
	hopperEngines = profileEngines{
		capability.GIProfile1Slice:     {Decoders: 1, JPEG: 1},
		capability.GIProfile1SliceRev1: {Decoders: 1, JPEG: 1, OFA: 1},
		capability.GIProfile1SliceRev2: {Decoders: 1, JPEG: 1},
		capability.GIProfile2Slice:     {Decoders: 2, JPEG: 2},
		capability.GIProfile3Slice:     {Decoders: 3, JPEG: 3},
		capability.GIProfile4Slice:     {Decoders: 4, JPEG: 4},
		capability.GIProfile7Slice:     {Decoders: 7, JPEG: 7, OFA: 1},
	}

	// A30: read from the guide's A30 table. Its one JPEG and one OFA go
	// to 1g.6gb+me, 2g.12gb+me or 4g.24gb, so the two +me profiles
	// exclude each other although their slots may not overlap.
	a30Budget  = Engines{Decoders: 4, JPEG: 1, OFA: 1}
	a30Engines = profileEngines{
		capability.GIProfile1SliceRev1: {Decoders: 1, JPEG: 1, OFA: 1},
		capability.GIProfile2Slice:     {Decoders: 2},
		capability.GIProfile2SliceRev1: {Decoders: 2, JPEG: 1, OFA: 1},
		capability.GIProfile4Slice:     {Decoders: 4, JPEG: 1, OFA: 1},
	}

	// RTX PRO 6000 Blackwell (all editions): that a +me.all GPU instance
	// takes all four NVDEC and NVENC, excluding every other engine-bearing
	// GPU instance, is read from the guide; the rest is inferred (?): one
	// NVDEC, NVENC and JPEG per compute slice for plain and +gfx
	// profiles, the one OFA for +me, +me.all and 4g, nothing for -me.
	rtxBudget  = Engines{Decoders: 4, Encoders: 4, JPEG: 4, OFA: 1}
	rtxEngines = profileEngines{
		capability.GIProfile1Slice:      {Decoders: 1, Encoders: 1, JPEG: 1},
		capability.GIProfile1SliceRev1:  {Decoders: 1, Encoders: 1, JPEG: 1, OFA: 1},
		capability.GIProfile1SliceGFX:   {Decoders: 1, Encoders: 1, JPEG: 1},
		capability.GIProfile1SliceAllME: rtxBudget,
		capability.GIProfile2Slice:      {Decoders: 2, Encoders: 2, JPEG: 2},
		capability.GIProfile2SliceGFX:   {Decoders: 2, Encoders: 2, JPEG: 2},
		capability.GIProfile2SliceAllME: rtxBudget,
		capability.GIProfile4Slice:      rtxBudget,
		capability.GIProfile4SliceGFX:   rtxBudget,
	}
)
