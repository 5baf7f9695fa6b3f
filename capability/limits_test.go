package capability_test

import (
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestModelLimits(t *testing.T) {
	eight := capability.Limits{Slots: 8, ComputeSlices: 7}
	tests := []struct {
		name string
		want capability.Limits
		ok   bool
	}{
		{"NVIDIA A100-SXM4-40GB", eight, true},
		{"A100-PCIE-80GB", eight, true},
		{"NVIDIA A800 80GB PCIe", eight, true},
		{"NVIDIA H100 80GB HBM3", eight, true},
		{"NVIDIA H800 PCIe", eight, true},
		{"NVIDIA H20", eight, true},
		{"NVIDIA H200", eight, true},
		{"H200-SXM5", eight, true},
		{"NVIDIA GH200 144G HBM3e", eight, true},
		{"NVIDIA B200", eight, true},
		{"NVIDIA GB200", eight, true},
		{"NVIDIA A30", capability.Limits{Slots: 4, ComputeSlices: 4}, true},
		{"NVIDIA A30-PCIE-24GB", capability.Limits{Slots: 4, ComputeSlices: 4}, true},
		{"A30", capability.Limits{Slots: 4, ComputeSlices: 4}, true},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", capability.Limits{Slots: 12, ComputeSlices: 4, AllMediaEngines: true}, true},
		{"NVIDIA RTX A3000", capability.Limits{}, false},
		{"Tesla T4", capability.Limits{}, false},
		{"", capability.Limits{}, false},
	}
	for _, tt := range tests {
		got, ok := capability.ModelLimits(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ModelLimits(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestHardwareLimitsNeverBelowPublished: the limits cover the published
// profiles even when the recorded or model limits are smaller, and a GPU
// of no known family falls back to its published profiles.
func TestHardwareLimitsNeverBelowPublished(t *testing.T) {
	wide := []capability.Profile{{Name: "2g.48gb", SliceCount: 2, Placements: []capability.Placement{{Start: 6, Size: 6}}}}
	tests := []struct {
		name string
		gpu  capability.GPU
		want capability.Limits
	}{
		{"recorded", capability.GPU{Name: "X", Profiles: wide, Limits: capability.Limits{Slots: 12, ComputeSlices: 4, AllMediaEngines: true}},
			capability.Limits{Slots: 12, ComputeSlices: 4, AllMediaEngines: true}},
		{"model family", capability.GPU{Name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", Profiles: wide},
			capability.Limits{Slots: 12, ComputeSlices: 4, AllMediaEngines: true}},
		{"recorded too small", capability.GPU{Name: "X", Profiles: wide, Limits: capability.Limits{Slots: 4, ComputeSlices: 1}},
			capability.Limits{Slots: 12, ComputeSlices: 2}},
		{"unknown family", capability.GPU{Name: "Z80", Profiles: wide}, capability.Limits{Slots: 12, ComputeSlices: 2}},
		{"no profiles", capability.GPU{Name: "NVIDIA A100-SXM4-40GB"}, capability.Limits{}},
	}
	for _, tt := range tests {
		if got := tt.gpu.HardwareLimits(); got != tt.want {
			t.Errorf("%s: HardwareLimits() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// Discovery reads a GPU's limits from its full table, so an allowlist
// that publishes only 1g.5gb on an A100 leaves the grid 8 slots wide.
func ExampleGPU_HardwareLimits() {
	infos := []capability.GIProfileInfo{
		{Index: capability.GIProfile1Slice, Name: "MIG 1g.5gb", SliceCount: 1, MemoryMB: 4864, MultiprocessorCount: 14,
			Placements: []capability.Placement{{Start: 0, Size: 1}, {Start: 6, Size: 1}}},
		{Index: capability.GIProfile7Slice, Name: "MIG 7g.40gb", SliceCount: 7, MemoryMB: 40192, MultiprocessorCount: 98,
			Placements: []capability.Placement{{Start: 0, Size: 8}}},
	}
	gpu, _ := capability.GPUFromDevice(capability.DeviceInfo{UUID: "GPU-a", Name: "NVIDIA A100-SXM4-40GB", MemoryMB: 40960, MIGMode: capability.MIGEnabled}, infos)
	gpu.Profiles = gpu.Profiles[:1] // as an allowlist of 1g.5gb alone
	fmt.Printf("%+v\n", gpu.HardwareLimits())
	gpu.Limits = capability.Limits{} // as decoded from a node registration
	fmt.Printf("%+v\n", gpu.HardwareLimits())
	// Output:
	// {Slots:8 ComputeSlices:7 AllMediaEngines:false}
	// {Slots:8 ComputeSlices:7 AllMediaEngines:false}
}
