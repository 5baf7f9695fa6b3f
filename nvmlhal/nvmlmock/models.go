package nvmlmock

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

// Model selects the DGX server a [Server] imitates: eight GPUs of one kind,
// with the profile table of the fakehal preset named by [Model.Preset].
type Model int

const (
	// DGXA100: 8 × "NVIDIA A100-SXM4-40GB" (go-nvml's dgxa100).
	DGXA100 Model = iota
	// DGXH100: 8 × "NVIDIA H100 80GB HBM3" (go-nvml's dgxh100).
	DGXH100
	// DGXH200: 8 × "NVIDIA H200" (go-nvml's dgxh200).
	DGXH200
	// DGXB200: 8 × "NVIDIA B200" (go-nvml's dgxb200).
	DGXB200
	// A30: 8 × "NVIDIA A30" on the 4-slot grid (go-nvml's A30 GPU config).
	A30
	// RTXPro6000: 8 × RTX PRO 6000 Blackwell Server Edition on the
	// 12-slot grid, with the +gfx, -me and +me.all variants. go-nvml has
	// no such GPU; identity and compute instance profiles are made up
	// here.
	RTXPro6000
)

// DGXModels are the four servers go-nvml ships, all on the 8-slot grid.
var DGXModels = []Model{DGXA100, DGXH100, DGXH200, DGXB200}

// Models lists every model, for table tests over all of them.
var Models = []Model{DGXA100, DGXH100, DGXH200, DGXB200, A30, RTXPro6000}

func (m Model) String() string {
	switch m {
	case DGXA100:
		return "dgxa100"
	case DGXH100:
		return "dgxh100"
	case DGXH200:
		return "dgxh200"
	case DGXB200:
		return "dgxb200"
	case A30:
		return "a30"
	case RTXPro6000:
		return "rtxpro6000"
	}
	return "Model(?)"
}

// Preset returns the name of the fakehal preset ([fakehal.LookupModel]) whose
// table the model serves: one source of truth for the profile tables of the
// fake backend and of this mock.
func (m Model) Preset() string {
	switch m {
	case DGXA100:
		return "NVIDIA A100-SXM4-40GB"
	case DGXH100:
		return "NVIDIA H100 80GB HBM3"
	case DGXH200:
		return "NVIDIA H200"
	case DGXB200:
		return "NVIDIA B200"
	case A30:
		return "NVIDIA A30"
	case RTXPro6000:
		return "NVIDIA RTX PRO 6000 Blackwell Server Edition"
	}
	return ""
}

// modelSpec is a GPU model: the fakehal preset's table (names, memory, SMs,
// instance counts, placements, media engines) on go-nvml's config, which
// contributes only what is NVML-specific and absent from the preset: PCI
// identity, copy engine counts and compute instance profiles.
type modelSpec struct {
	base   gpus.Config
	preset fakehal.Model
	slices uint32 // compute slices on the GPU
}

// base is go-nvml's GPU config for each model. The RTX PRO 6000 has none in
// go-nvml; its identity is made up here and its compute instance profiles
// are synthesized (synthCI).
func (m Model) base() (gpus.Config, bool) {
	switch m {
	case DGXA100:
		return gpus.A100_SXM4_40GB, true
	case DGXH100:
		return gpus.H100_SXM5_80GB, true
	case DGXH200:
		return gpus.H200_SXM5_141GB, true
	case DGXB200:
		return gpus.B200_SXM5_180GB, true
	case A30:
		return gpus.A30_PCIE_24GB, true
	case RTXPro6000:
		return gpus.Config{Architecture: nvml.DEVICE_ARCH_BLACKWELL, Brand: nvml.BRAND_NVIDIA, CudaMajor: 12, CudaMinor: 0}, true
	}
	return gpus.Config{}, false
}

// spec builds the model's table from its fakehal preset as driver
// generation drv reports it.
func (m Model) spec(drv fakehal.Driver) (modelSpec, bool) {
	base, ok := m.base()
	if !ok {
		return modelSpec{}, false
	}
	preset, ok := fakehal.LookupModel(m.Preset())
	if !ok {
		return modelSpec{}, false
	}
	preset = preset.ForDriver(drv)
	// go-nvml's names are not what drivers report ("NVIDIA H200 141GB
	// HBM3e", "Mock NVIDIA A100-SXM4-40GB"); nor are its totals.
	base.Name, base.MemoryMB = preset.Name, preset.MemoryMB
	s := modelSpec{base: base, preset: preset}
	for _, p := range preset.Profiles {
		s.slices = max(s.slices, p.SliceCount)
	}
	return s, true
}

// ciIndexes are the CI profile indexes by slice count.
var ciIndexes = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// synthCI makes compute instance profiles for a GI profile go-nvml has no
// table for: CIs of 1, 2 and all of the GI's slices.
func synthCI(slices, sms uint32) map[int]nvml.ComputeInstanceProfileInfo {
	out := make(map[int]nvml.ComputeInstanceProfileInfo)
	for _, k := range []uint32{1, 2, slices} {
		idx, ok := ciIndexes[k]
		if !ok || k > slices {
			continue
		}
		out[idx] = nvml.ComputeInstanceProfileInfo{
			Id: uint32(idx), SliceCount: k, InstanceCount: slices / k, MultiprocessorCount: sms * k / slices,
		}
	}
	return out
}

// profile is one supported GPU instance profile of a device, ready to serve.
type profile struct {
	spec       capability.GIProfileInfo
	engines    fakehal.Engines
	info       nvml.GpuInstanceProfileInfo
	placements []nvml.GpuInstancePlacement
	// ci holds the compute instance profiles, by CI profile index.
	ci map[int]nvml.ComputeInstanceProfileInfo
}

// buildProfiles turns a model spec into served profiles, keyed by index.
func buildProfiles(m modelSpec) map[int]*profile {
	out := make(map[int]*profile, len(m.preset.Profiles))
	for _, s := range m.preset.Profiles {
		idx := int(s.Index)
		eng := m.preset.EnginesOf(s.Index)
		info := nvml.GpuInstanceProfileInfo{
			Id: s.ID, SliceCount: s.SliceCount, InstanceCount: s.InstanceCount,
			MultiprocessorCount: s.MultiprocessorCount, MemorySizeMB: s.MemoryMB,
			CopyEngineCount: m.base.MIGProfiles.GpuInstanceProfiles[idx].CopyEngineCount,
			DecoderCount:    eng.Decoders, EncoderCount: eng.Encoders, JpegCount: eng.JPEG, OfaCount: eng.OFA,
		}
		if info.CopyEngineCount == 0 {
			info.CopyEngineCount = s.SliceCount
		}
		p := &profile{spec: s, engines: eng, info: info, ci: make(map[int]nvml.ComputeInstanceProfileInfo)}
		for _, pl := range s.Placements {
			p.placements = append(p.placements, nvml.GpuInstancePlacement{Start: pl.Start, Size: pl.Size})
		}
		cis := m.base.MIGProfiles.ComputeInstanceProfiles[idx]
		if cis == nil {
			cis = synthCI(info.SliceCount, s.MultiprocessorCount)
		}
		for ci, c := range cis {
			if c.SliceCount > info.SliceCount {
				continue
			}
			if c.SliceCount == info.SliceCount {
				// The full-size CI has all of the GI's SMs.
				c.MultiprocessorCount = s.MultiprocessorCount
			}
			p.ci[ci] = c
		}
		out[idx] = p
	}
	return out
}

// v3Name encodes a canonical name the way the V3 struct carries it.
func v3Name(name string) [96]int8 {
	var out [96]int8
	for i, c := range []byte("MIG " + name) {
		if i == len(out)-1 {
			break
		}
		out[i] = int8(c)
	}
	return out
}
