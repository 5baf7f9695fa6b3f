package capability

// defaultAllowlist is the built-in policy. Order matters because the first
// entry whose model is a substring of the NVML name wins, and several model
// strings are substrings of other GPUs' names:
//
//   - "H200" and "H20" occur in "NVIDIA GH200 ...", so GH200 comes first,
//     and "GH200" occurs in "NVIDIA GH200 144G HBM3e", so that comes first
//     of all;
//   - "B200" occurs in "NVIDIA GB200", so GB200 precedes B200;
//   - "H20" occurs in "NVIDIA H200 ...", so H200 precedes H20;
//   - "NVIDIA H800" occurs in "NVIDIA H800 PCIe", which is meant: both
//     have the H100 80GB profiles;
//   - no A100 string occurs in "NVIDIA A800 ...", so the A800 names are
//     listed themselves.
//
// Real NVML names come first in each entry; the HAMi chart's strings follow
// as aliases so configs written for the chart keep matching. Profile lists
// are the chart's (plain profiles only), plus the names other drivers
// report for the same profile (7g.80gb next to the chart's 7g.79gb); the
// alias a GPU does not report shows up as a FindingUnresolved. The
// REV2 double-memory 1g profiles, 4g profiles on 7-slice parts and the
// +me/+gfx/-me variants are deliberately not allowed by default: allowing
// them changes which profile the "smallest that fits" rule picks (an A100's
// 1g.10gb would win over 2g.10gb with half the compute), so they are opt-in.
var defaultAllowlist = Allowlist{
	{ // GH200 144G HBM3e; before the 96GB entry, whose "GH200" is a
		// substring of its name. 1g.18gb and 2g.36gb were seen on hardware;
		// 3g.72gb and 7g.144gb follow NVIDIA's naming rule (?), and a name
		// the GPU does not report shows up as a FindingUnresolved.
		Models:   []string{"NVIDIA GH200 144G HBM3e", "GH200 144G"},
		Profiles: []string{"1g.18gb", "2g.36gb", "3g.72gb", "7g.144gb"},
	},
	{ // GH200 96GB (H100 on GH200).
		Models:   []string{"NVIDIA GH200 480GB", "GH200"},
		Profiles: []string{"1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"},
	},
	{ // GB200 186GB (?). Early drivers name 1g, 3g and 7g 1g.24gb,
		// 3g.95gb and 7g.189gb; current ones 1g.23gb, 3g.93gb, 7g.186gb.
		Models:   []string{"NVIDIA GB200"},
		Profiles: []string{"1g.23gb", "1g.24gb", "2g.47gb", "3g.93gb", "3g.95gb", "7g.186gb", "7g.189gb"},
	},
	{ // H200 141GB, SXM ("NVIDIA H200", "NVIDIA H200 141GB HBM3e") and NVL.
		Models:   []string{"NVIDIA H200", "H200 NVL", "H200-SXM5"},
		Profiles: []string{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"},
	},
	{ // H20 96GB; after H200 because "H20" is a substring of "H200".
		Models:   []string{"NVIDIA H20", "H20"},
		Profiles: []string{"1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"},
	},
	{ // B200 180GB; after GB200 because "B200" is a substring of "GB200".
		Models:   []string{"NVIDIA B200", "B200"},
		Profiles: []string{"1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"},
	},
	{ // H100 94GB: NVL (PCIe) and SXM5 94GB.
		Models:   []string{"NVIDIA H100 NVL", "H100-PCIE-94GB", "H100-SXM5-94GB"},
		Profiles: []string{"1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb"},
	},
	{ // H100 80GB: SXM5 reports "NVIDIA H100 80GB HBM3", PCIe "NVIDIA H100 PCIe";
		// the export variants "NVIDIA H800" and "NVIDIA H800 PCIe" (?) have
		// the same profiles.
		Models:   []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800", "H100-PCIE-80GB", "H100-SXM5-80GB"},
		Profiles: []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"},
	},
	{ // A100 80GB. By NVIDIA's naming rule 7g is "7g.80gb" and 3g "3g.40gb";
		// the chart's "7g.79gb" and the "3g.39gb" some drivers report are the
		// same profiles under naive rounding, kept so either driver works.
		// The export variants "NVIDIA A800-SXM4-80GB" and "NVIDIA A800 80GB
		// PCIe" have the same profiles.
		Models: []string{"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM-80GB",
			"NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe",
			"A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"},
		Profiles: []string{"1g.10gb", "2g.20gb", "3g.40gb", "3g.39gb", "7g.80gb", "7g.79gb"},
	},
	{ // A100 40GB.
		Models:   []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"},
		Profiles: []string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"},
	},
	{ // A30 24GB ("NVIDIA A30", "NVIDIA A30-PCIE-24GB"). The chart alias "A30"
		// also matches non-MIG boards such as "NVIDIA RTX A3000"; those
		// report MIG disabled, so the match is harmless.
		Models:   []string{"NVIDIA A30", "A30"},
		Profiles: []string{"1g.6gb", "2g.12gb", "4g.24gb"},
	},
	{ // RTX PRO 6000 Blackwell 96GB, 12-slot grid: Server, Workstation and
		// Max-Q Workstation editions have the same profiles.
		Models: []string{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
			"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Server Edition"},
		Profiles: []string{"1g.24gb", "2g.48gb", "4g.96gb"},
	},
}

// DefaultAllowlist returns the built-in policy: every model of the HAMi
// chart's default migProfileAllowlist under the names NVML reports (for
// example "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA A100
// 80GB PCIe", "NVIDIA A30"), with the chart's own strings kept as aliases;
// the A800 and H800 export variants and the RTX PRO 6000 Workstation
// editions, which the chart lacks; and GH200 and GB200 so that they are not
// mistaken for H200 or B200.
// Entries are ordered so that the first-match rule picks the right one.
//
// Only the plain profiles are allowed (as in the chart); variants, REV2 1g
// profiles and 4g profiles on 7-slice GPUs are opt-in through a custom
// config. Every call returns a fresh copy the caller may modify.
func DefaultAllowlist() Allowlist { return defaultAllowlist.Clone() }
