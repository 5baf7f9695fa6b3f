package nvmlmock

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// Model selects the DGX server a [Server] imitates: eight GPUs of one kind,
// with the profile table of ../shared/data/mig-hardware-facts.md.
type Model int

const (
	// DGXA100: 8 × A100-SXM4-40GB (go-nvml's dgxa100).
	DGXA100 Model = iota
	// DGXH100: 8 × H100 80GB HBM3 (go-nvml's dgxh100).
	DGXH100
	// DGXH200: 8 × H200 141GB (go-nvml's dgxh200).
	DGXH200
	// DGXB200: 8 × B200 180GB (go-nvml's dgxb200).
	DGXB200
	// A30: 8 × A30 24GB on the 4-slot grid (go-nvml's A30 GPU config).
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

// profileSpec is one GPU instance profile as the facts file gives it.
type profileSpec struct {
	index     int
	id        uint32 // NVML's profile Id, deliberately != index
	name      string // canonical name, as V3 reports it after "MIG "
	memMB     uint64
	sms       uint32
	instances uint32
	size      uint32   // placement size in memory slots
	starts    []uint32 // legal placement starts
}

// modelSpec is a GPU model: go-nvml's config (identity, engine counts,
// compute instance profiles) with the GPU instance profile table corrected.
type modelSpec struct {
	base    gpus.Config
	totalMB uint64
	slices  uint32 // compute slices on the GPU
	slots   uint32 // memory slots (placement grid width)
	// profiles of the GPU.
	profiles []profileSpec
}

var (
	all7  = []uint32{0, 1, 2, 3, 4, 5, 6}
	even4 = []uint32{0, 2, 4, 6}
	even3 = []uint32{0, 2, 4}
	half  = []uint32{0, 4}
	zero  = []uint32{0}
)

// eightSlot builds the profile table shared by the 8-slot datacenter parts:
// same indexes, IDs and placements as A100, per-model memory and SMs.
// mem and sms are indexed 1g, 1g+me, 1g REV2, 2g, 3g, 4g, 7g.
func eightSlot(names [7]string, mem [7]uint64, sms [7]uint32) []profileSpec {
	return []profileSpec{
		{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, name: names[0], memMB: mem[0], sms: sms[0], instances: 7, size: 1, starts: all7},
		{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, name: names[3], memMB: mem[3], sms: sms[3], instances: 3, size: 2, starts: even3},
		{index: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, name: names[4], memMB: mem[4], sms: sms[4], instances: 2, size: 4, starts: half},
		{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, name: names[5], memMB: mem[5], sms: sms[5], instances: 1, size: 4, starts: zero},
		{index: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, name: names[6], memMB: mem[6], sms: sms[6], instances: 1, size: 8, starts: zero},
		{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, name: names[1], memMB: mem[1], sms: sms[1], instances: 1, size: 1, starts: all7},
		{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, name: names[2], memMB: mem[2], sms: sms[2], instances: 4, size: 2, starts: even4},
	}
}

// specs holds the corrected tables. go-nvml's A100-40GB data already
// matches the facts file except for the profile IDs; its H100, H200 and
// B200 tables have 3g/7g placements of size 3/7, 1g REV2 placements of
// size 1, and memory and SM counts that no driver reports.
var specs = map[Model]modelSpec{
	DGXA100: {
		base: gpus.A100_SXM4_40GB, totalMB: 40960, slices: 7, slots: 8,
		profiles: eightSlot(
			[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
			[7]uint64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
			[7]uint32{14, 14, 14, 28, 42, 56, 98}),
	},
	DGXH100: {
		// Total memory is go-nvml's; the facts file does not give it.
		base: gpus.H100_SXM5_80GB, totalMB: 81920, slices: 7, slots: 8,
		profiles: eightSlot(
			[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
			[7]uint64{9984, 9984, 20096, 20096, 40448, 40448, 81152},
			[7]uint32{16, 16, 26, 32, 60, 64, 132}),
	},
	DGXH200: {
		// 143771 MiB is the total NVML reported on an H200; placements as
		// A100 are unconfirmed (?) in the facts file.
		base: gpus.H200_SXM5_141GB, totalMB: 143771, slices: 7, slots: 8,
		profiles: eightSlot(
			[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
			[7]uint64{16384, 16384, 33024, 33024, 71168, 71168, 143360},
			[7]uint32{16, 16, 26, 32, 60, 64, 132}),
	},
	DGXB200: {
		// Facts give 1g/2g memory and SMs; 3g/4g/7g memory follows the
		// 4/8 and 8/8 fractions and their SMs are go-nvml's (?). Total
		// memory is go-nvml's (?). Placements as A100 (?).
		base: gpus.B200_SXM5_180GB, totalMB: 184320, slices: 7, slots: 8,
		profiles: eightSlot(
			[7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
			[7]uint64{22528, 22528, 45312, 45312, 90624, 90624, 181248},
			[7]uint32{18, 18, 30, 36, 54, 72, 126}),
	},
}

func (m Model) spec() (modelSpec, bool) {
	switch m {
	case A30:
		return a30Spec, true
	case RTXPro6000:
		return rtxPro6000Spec, true
	}
	s, ok := specs[m]
	return s, ok
}

// a30Spec is the A30 table of the facts file on go-nvml's A30 config.
var a30Spec = modelSpec{
	base: gpus.A30_PCIE_24GB, totalMB: 24576, slices: 4, slots: 4,
	profiles: []profileSpec{
		{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 14, name: "1g.6gb", memMB: 5952, sms: 14, instances: 4, size: 1, starts: []uint32{0, 1, 2, 3}},
		{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 5, name: "2g.12gb", memMB: 11968, sms: 28, instances: 2, size: 2, starts: []uint32{0, 2}},
		{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 0, name: "4g.24gb", memMB: 24000, sms: 56, instances: 1, size: 4, starts: zero},
		{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 21, name: "1g.6gb+me", memMB: 5952, sms: 14, instances: 1, size: 1, starts: []uint32{0, 1, 2, 3}},
		{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, id: 6, name: "2g.12gb+me", memMB: 11968, sms: 28, instances: 1, size: 2, starts: []uint32{0, 2}},
	},
}

// rtxPro6000Spec is the RTX PRO 6000 Blackwell Server Edition table of the
// facts file. The total memory (97887 MiB) is a best guess (?); derived
// names agree with the table for it.
var rtxPro6000Spec = func() modelSpec {
	q := []uint32{0, 3, 6, 9}
	h := []uint32{0, 6}
	one := func(index int, id uint32, suffix string, instances uint32) profileSpec {
		return profileSpec{index: index, id: id, name: "1g.24gb" + suffix, memMB: 24192, sms: 46, instances: instances, size: 3, starts: q}
	}
	two := func(index int, id uint32, suffix string, instances uint32) profileSpec {
		return profileSpec{index: index, id: id, name: "2g.48gb" + suffix, memMB: 48512, sms: 94, instances: instances, size: 6, starts: h}
	}
	four := func(index int, id uint32, suffix string) profileSpec {
		return profileSpec{index: index, id: id, name: "4g.96gb" + suffix, memMB: 97408, sms: 188, instances: 1, size: 12, starts: zero}
	}
	return modelSpec{
		base: gpus.Config{
			Name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", Architecture: nvml.DEVICE_ARCH_BLACKWELL,
			Brand: nvml.BRAND_NVIDIA, MemoryMB: 97887, CudaMajor: 12, CudaMinor: 0,
		},
		totalMB: 97887, slices: 4, slots: 12,
		profiles: []profileSpec{
			one(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 14, "", 4),
			two(nvml.GPU_INSTANCE_PROFILE_2_SLICE, 5, "", 2),
			four(nvml.GPU_INSTANCE_PROFILE_4_SLICE, 0, ""),
			one(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 21, "+me", 1),
			one(nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, 47, "+gfx", 4),
			two(nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 35, "+gfx", 2),
			four(nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, 32, "+gfx"),
			one(nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 67, "-me", 4),
			two(nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, 66, "-me", 2),
			one(nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 65, "+me.all", 1),
			two(nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, 64, "+me.all", 1),
		},
	}
}()

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
	spec       profileSpec
	info       nvml.GpuInstanceProfileInfo
	placements []nvml.GpuInstancePlacement
	// ci holds the compute instance profiles, by CI profile index.
	ci map[int]nvml.ComputeInstanceProfileInfo
}

// buildProfiles turns a model spec into served profiles, keyed by index.
func buildProfiles(m modelSpec) map[int]*profile {
	out := make(map[int]*profile, len(m.profiles))
	for _, s := range m.profiles {
		info := m.base.MIGProfiles.GpuInstanceProfiles[s.index] // engine counts
		if info.SliceCount == 0 {
			info.SliceCount = sliceCountOf(s)
		}
		info.Id = s.id
		info.MemorySizeMB = s.memMB
		info.MultiprocessorCount = s.sms
		info.InstanceCount = s.instances
		p := &profile{spec: s, info: info, ci: make(map[int]nvml.ComputeInstanceProfileInfo)}
		for _, st := range s.starts {
			p.placements = append(p.placements, nvml.GpuInstancePlacement{Start: st, Size: s.size})
		}
		cis := m.base.MIGProfiles.ComputeInstanceProfiles[s.index]
		if cis == nil {
			cis = synthCI(info.SliceCount, s.sms)
		}
		for idx, ci := range cis {
			if ci.SliceCount == info.SliceCount {
				// The full-size CI has all of the GI's SMs.
				ci.MultiprocessorCount = s.sms
			}
			p.ci[idx] = ci
		}
		out[s.index] = p
	}
	return out
}

// sliceCountOf reads the compute slice count from the profile name.
func sliceCountOf(s profileSpec) uint32 {
	return uint32(s.name[0] - '0')
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
