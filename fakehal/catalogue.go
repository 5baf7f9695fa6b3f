package fakehal

import "github.com/dynmig/dynmig/capability"

// Profile tables, from ../shared/data/mig-hardware-facts.md. SM counts and
// memory marked (?) there are estimates; the model's Note says so.
var (
	a100_40 = eightSlot(
		[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		[7]uint64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
		[7]uint32{14, 14, 14, 28, 42, 56, 98})
	a100_80 = eightSlot(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]uint64{9728, 9728, 19968, 19968, 40192, 40192, 80896},
		[7]uint32{14, 14, 14, 28, 42, 56, 98})
	// H100 SXM5 (132 SMs).
	h100_80 = eightSlot(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]uint64{9984, 9984, 20096, 20096, 40448, 40448, 81152},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// H100 PCIe: the SXM5 memory and placements on 114 SMs, as
	// `nvidia-smi mig -lgip` shows them on driver 570 (1g+me taken to
	// equal 1g).
	h100PCIe = eightSlot(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]uint64{9984, 9984, 20096, 20096, 40448, 40448, 81152},
		[7]uint32{14, 14, 14, 30, 46, 62, 114})
	h100_94 = eightSlot(
		[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
		[7]uint64{11008, 11008, 22144, 22144, 47488, 47488, 95360},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// GH200 96GB: an H100 (132 SMs) with 96GB; memory (?).
	gh200_96 = eightSlot(
		[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
		[7]uint64{11264, 11264, 23552, 23552, 47616, 47616, 96768},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// H20: GH200's memory table on 78 SMs. No per-profile SM count has
	// been seen: these are H100's scaled by 78/132 and rounded down, an
	// estimate that keeps 7g at the GPU's 78 SMs (?).
	h20_96 = eightSlot(
		[7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
		[7]uint64{11264, 11264, 23552, 23552, 47616, 47616, 96768},
		[7]uint32{9, 9, 15, 18, 35, 37, 78})
	// H200 at driver 580.159.04 (read on an H200 SXM, 2026-12-04):
	// 7g.141gb is 143360 MiB (140.00 GiB in nvidia-smi). IDs, SMs,
	// placements and media engines were confirmed there too.
	h200 = eightSlot(
		[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		[7]uint64{16384, 16384, 33280, 33280, 71424, 71424, 143360},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// H200 on an earlier driver (NVIDIA/mig-parted#120, 2024, pre-R570
	// nvidia-smi): 32.25 / 69.50 / 139.75 GiB; 1g was 16384 on both.
	h200Early = eightSlot(
		[7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		[7]uint64{16384, 16384, 33024, 33024, 71168, 71168, 143104},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// GH200 144G HBM3e (PCI 0x2348), from NVIDIA/mig-parted#139 (Oct
	// 2024): 1g.18gb 17920 MiB, 1g.36gb and 2g.36gb 36096 MiB, SMs as
	// H100. The 3g, 4g and 7g rows were not shown (?): their names follow
	// NVIDIA's rule from the 4/8 and 8/8 memory fractions, and their
	// memory (two 1g.36gb; the total less 512 MiB) and SMs (H100's) are
	// estimates.
	gh200_144 = eightSlot(
		[7]string{"1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"},
		[7]uint64{17920, 17920, 36096, 36096, 72192, 72192, 146432},
		[7]uint32{16, 16, 26, 32, 60, 64, 132})
	// B200: 1g.23gb is 20992 MiB on current drivers (22528 on early
	// ones, see b200Early); 3g/4g/7g memory follows the 4/8 and 8/8
	// fractions and their SM counts are estimates (?).
	b200 = eightSlot(
		[7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
		[7]uint64{20992, 20992, 45312, 45312, 90624, 90624, 180480},
		[7]uint32{18, 18, 30, 36, 72, 96, 148})
	b200Early = eightSlot(
		[7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
		[7]uint64{22528, 22528, 45312, 45312, 90624, 90624, 180480},
		[7]uint32{18, 18, 30, 36, 72, 96, 148})
	// GB200 (?): unconfirmed table. Early drivers named the same profiles
	// from the total in thousands of MiB (189471 MiB: 1g.24gb, 3g.95gb,
	// 4g.95gb, 7g.189gb), which NVIDIA's rule does not give.
	gb200 = eightSlot(
		[7]string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"},
		[7]uint64{22528, 22528, 46592, 46592, 93184, 93184, 186368},
		[7]uint32{18, 18, 32, 38, 72, 96, 148})
	// GB200 on early drivers: their 1g.24gb was 20480 MiB (20.00 GiB,
	// NVIDIA/gpu-operator#1303, Mar 2025); 1g.47gb was 46592 there too.
	gb200Early = eightSlot(
		[7]string{"1g.24gb", "1g.24gb+me", "1g.47gb", "2g.47gb", "3g.95gb", "4g.95gb", "7g.189gb"},
		[7]uint64{20480, 20480, 46592, 46592, 93184, 93184, 186368},
		[7]uint32{18, 18, 32, 38, 72, 96, 148})

	rtxPro6000 = []capability.GIProfileInfo{
		gi(capability.GIProfile1Slice, 14, "1g.24gb", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceRev1, 21, "1g.24gb+me", 1, 24192, 46, 1, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceGFX, 47, "1g.24gb+gfx", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceAllME, 65, "1g.24gb+me.all", 1, 24192, 46, 1, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile1SliceNoME, 67, "1g.24gb-me", 1, 24192, 46, 4, starts(3, 0, 3, 6, 9)),
		gi(capability.GIProfile2Slice, 5, "2g.48gb", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceGFX, 35, "2g.48gb+gfx", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceAllME, 64, "2g.48gb+me.all", 2, 48512, 94, 1, starts(6, 0, 6)),
		gi(capability.GIProfile2SliceNoME, 66, "2g.48gb-me", 2, 48512, 94, 2, starts(6, 0, 6)),
		gi(capability.GIProfile4Slice, 0, "4g.96gb", 4, 97408, 188, 1, starts(12, 0)),
		gi(capability.GIProfile4SliceGFX, 32, "4g.96gb+gfx", 4, 97408, 188, 1, starts(12, 0)),
	}

	a30 = []capability.GIProfileInfo{
		gi(capability.GIProfile1Slice, 14, "1g.6gb", 1, 5952, 14, 4, starts(1, 0, 1, 2, 3)),
		gi(capability.GIProfile1SliceRev1, 21, "1g.6gb+me", 1, 5952, 14, 1, starts(1, 0, 1, 2, 3)),
		gi(capability.GIProfile2Slice, 5, "2g.12gb", 2, 11968, 28, 2, starts(2, 0, 2)),
		gi(capability.GIProfile2SliceRev1, 6, "2g.12gb+me", 2, 11968, 28, 1, starts(2, 0, 2)),
		gi(capability.GIProfile4Slice, 0, "4g.24gb", 4, 24000, 56, 1, starts(4, 0)),
	}
)

// Families: a table with its engines, shared by the models built on it.
type family struct {
	memoryMB uint64
	profiles []capability.GIProfileInfo
	budget   Engines
	engines  profileEngines
}

func (f family) model(name string, aliases []string, confirmed bool, note string) Model {
	return Model{Name: name, Aliases: aliases, MemoryMB: f.memoryMB, Profiles: f.profiles,
		Engines: f.budget, ProfileEngines: f.engines, Confirmed: confirmed, Note: note}
}

var (
	famA100_40 = family{40960, a100_40, a100Budget, a100Engines}
	famA100_80 = family{81920, a100_80, a100Budget, a100Engines}
	famH100    = family{81559, h100_80, hopperBudget, hopperEngines}
	famH100PCI = family{81559, h100PCIe, hopperBudget, hopperEngines}
	famH100NVL = family{95830, h100_94, hopperBudget, hopperEngines}
	famH20     = family{97871, h20_96, hopperBudget, hopperEngines}
	famGH200   = family{97871, gh200_96, hopperBudget, hopperEngines}
	famH200    = family{143771, h200, hopperBudget, hopperEngines}
	famGH200L  = family{146944, gh200_144, hopperBudget, hopperEngines}
	famB200    = family{183359, b200, hopperBudget, hopperEngines}
	famGB200   = family{189471, gb200, hopperBudget, hopperEngines}
	famRTX6000 = family{97887, rtxPro6000, rtxBudget, rtxEngines}
	famA30     = family{24576, a30, a30Budget, a30Engines}
)

// Notes of the unconfirmed tables.
const (
	noteHopperEngines = "media engines inferred from H100"
	noteH800          = "H100 table assumed for the export variant; SM counts unconfirmed"
)

// models is the built-in catalogue. Names are what real drivers report;
// aliases include the HAMi chart strings and go-nvml mock names.
var models = []Model{
	famA100_40.model("NVIDIA A100-SXM4-40GB", []string{"A100-SXM4-40GB", "A100-40GB", "A100"}, true, ""),
	famA100_40.model("NVIDIA A100-PCIE-40GB", []string{"A100-PCIE-40GB", "A100-40GB-PCIe"}, true, ""),
	famA100_80.model("NVIDIA A100-SXM4-80GB", []string{"A100-SXM4-80GB", "A100-80GB"}, true, ""),
	famA100_80.model("NVIDIA A100 80GB PCIe", []string{"A100-PCIE-80GB", "A100-80GB-PCIe"}, true, ""),
	famA100_80.model("NVIDIA A800-SXM4-80GB", []string{"A800-SXM4-80GB", "A800"}, true, ""),
	famA100_80.model("NVIDIA A800 80GB PCIe", []string{"A800-PCIE-80GB"}, true, ""),
	famH100.model("NVIDIA H100 80GB HBM3", []string{"H100-SXM5-80GB", "H100", "H100-80GB"}, true, ""),
	famH100PCI.model("NVIDIA H100 PCIe", []string{"H100-PCIE-80GB"}, true, ""),
	famH100NVL.model("NVIDIA H100 NVL", []string{"H100-PCIE-94GB", "H100-SXM5-94GB", "H100-94GB"}, true, ""),
	famH100.model("NVIDIA H800", []string{"H800"}, false, noteH800),
	famH100PCI.model("NVIDIA H800 PCIe", []string{"H800-PCIE"}, false, "H100 PCIe table assumed for the export variant; SM counts unconfirmed"),
	famH20.model("NVIDIA H20", []string{"H20"}, false, "SM counts estimated (H100's scaled to 78 SMs); memory and placements unconfirmed"),
	famGH200.model("NVIDIA GH200 96GB HBM3", []string{"GH200", "H100 on GH200"}, false, "memory and placements unconfirmed"),
	// H200 SXM: table, placements and media engines confirmed at driver
	// 580.159.04; the early driver's memory is the Older table.
	withOlder(famH200.model("NVIDIA H200", []string{"H200-SXM5", "H200", "NVIDIA H200 141GB HBM3e"}, true, ""),
		DriverTable{Driver: DriverEarly, MemoryMB: 143771, Profiles: h200Early}),
	withOlder(famH200.model("NVIDIA H200 NVL", []string{"H200 NVL"}, false, "memory table, placements and media engines assumed equal to the H200 SXM's"),
		DriverTable{Driver: DriverEarly, MemoryMB: 143771, Profiles: h200Early}),
	withPCI(famGH200L.model("NVIDIA GH200 144G HBM3e", []string{"GH200 144G HBM3e", "GH200-144GB"}, false,
		"3g/4g/7g memory, names and SM counts, total memory, placements and media engines unconfirmed"), 0x2348),
	withOlder(famB200.model("NVIDIA B200", []string{"B200", "NVIDIA B200 180GB HBM3e"}, false,
		"3g/4g/7g memory and SM counts, placements and media engines unconfirmed"),
		DriverTable{Driver: DriverEarly, MemoryMB: 183359, Profiles: b200Early}),
	withOlder(famGB200.model("NVIDIA GB200", []string{"GB200"}, false,
		"table, placements and media engines unconfirmed"),
		DriverTable{Driver: DriverEarly, MemoryMB: 189471, Profiles: gb200Early}),
	famRTX6000.model("NVIDIA RTX PRO 6000 Blackwell Server Edition", []string{"RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", "RTXPRO6000"}, true, ""),
	famRTX6000.model("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", []string{"RTX PRO 6000 Blackwell Workstation Edition"}, true, ""),
	famRTX6000.model("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", []string{"RTX PRO 6000 Blackwell Max-Q Workstation Edition"}, true, ""),
	famA30.model("NVIDIA A30", []string{"A30", "NVIDIA A30-PCIE-24GB", "A30-24GB"}, true, ""),
}

func withPCI(m Model, id uint16) Model {
	m.PCIDeviceID = id
	return m
}

func withOlder(m Model, older ...DriverTable) Model {
	m.Older = older
	return m
}
