package nvmlmock_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

// TestNamesAndTotals: the mock reports what real drivers report, not
// go-nvml's names and totals.
func TestNamesAndTotals(t *testing.T) {
	tests := []struct {
		model   nvmlmock.Model
		name    string
		totalMB uint64
	}{
		{model: nvmlmock.DGXA100, name: "NVIDIA A100-SXM4-40GB", totalMB: 40960},
		{model: nvmlmock.DGXH100, name: "NVIDIA H100 80GB HBM3", totalMB: 81559},
		{model: nvmlmock.DGXH200, name: "NVIDIA H200", totalMB: 143771},
		{model: nvmlmock.DGXB200, name: "NVIDIA B200", totalMB: 183359},
		{model: nvmlmock.A30, name: "NVIDIA A30", totalMB: 24576},
		{model: nvmlmock.RTXPro6000, name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", totalMB: 97887},
	}
	for _, tt := range tests {
		_, dev := started(t, tt.model, nvmlmock.Options{})
		name, _ := dev.GetName()
		mem, _ := dev.GetMemoryInfo()
		if name != tt.name || mem.Total>>20 != tt.totalMB {
			t.Errorf("%v: got %q %d MiB, want %q %d MiB", tt.model, name, mem.Total>>20, tt.name, tt.totalMB)
		}
	}
}

// TestTablesAreFakehalPresets: every profile the mock serves is the fakehal
// preset's, field by field, with the preset's media engines, so the two
// fakes cannot drift apart.
func TestTablesAreFakehalPresets(t *testing.T) {
	for _, drv := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		for _, model := range nvmlmock.Models {
			preset, ok := fakehal.LookupModel(model.Preset())
			if !ok {
				t.Fatalf("%v: no preset %q", model, model.Preset())
			}
			preset = preset.ForDriver(drv)
			_, dev := started(t, model, nvmlmock.Options{Driver: drv})
			served := 0
			for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				if _, ret := dev.GetGpuInstanceProfileInfo(idx); ret == nvml.SUCCESS {
					served++
				}
			}
			if served != len(preset.Profiles) {
				t.Errorf("%v: serves %d profiles, preset has %d", model, served, len(preset.Profiles))
			}
			for _, p := range preset.Profiles {
				in := info(t, dev, int(p.Index))
				e := preset.EnginesOf(p.Index)
				if in.Id != p.ID || in.SliceCount != p.SliceCount || in.InstanceCount != p.InstanceCount ||
					in.MultiprocessorCount != p.MultiprocessorCount || in.MemorySizeMB != p.MemoryMB ||
					in.DecoderCount != e.Decoders || in.EncoderCount != e.Encoders || in.JpegCount != e.JPEG || in.OfaCount != e.OFA {
					t.Errorf("%v (%v) %s: served %+v, preset %+v engines %v", model, drv, p.Name, in, p, e)
				}
				pls, _ := dev.GetGpuInstancePossiblePlacements(&in)
				if len(pls) != len(p.Placements) {
					t.Errorf("%v %s: %d placements, preset %d", model, p.Name, len(pls), len(p.Placements))
					continue
				}
				for i, pl := range pls {
					if pl.Start != p.Placements[i].Start || pl.Size != p.Placements[i].Size {
						t.Errorf("%v %s: placement %d = %+v, preset %v", model, p.Name, i, pl, p.Placements[i])
					}
				}
			}
		}
	}
}

// TestMediaEngines: combinations whose media engines are taken fail with
// INSUFFICIENT_RESOURCES although their slots are free, as on hardware.
func TestMediaEngines(t *testing.T) {
	type gi struct {
		index       int
		start, size uint32
	}
	tests := []struct {
		name  string
		model nvmlmock.Model
		setup []gi
		try   gi
		want  nvml.Return
	}{
		{name: "A30 1g+me excludes 2g+me", model: nvmlmock.A30, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 0, 1}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 2}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "A30 2g+me excludes 1g+me", model: nvmlmock.A30, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 2}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 0, 1}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "A30 1g+me beside plain 2g", model: nvmlmock.A30, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 0, 1}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 2}, want: nvml.SUCCESS},
		{name: "RTX +me.all excludes 1g", model: nvmlmock.RTXPro6000, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 0, 3}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 3, 3}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "RTX 2g+gfx excludes 2g+me.all", model: nvmlmock.RTXPro6000, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 0, 6}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, 6, 6}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "RTX +me.all beside -me", model: nvmlmock.RTXPro6000, setup: []gi{{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 0, 3}},
			try: gi{nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, 6, 6}, want: nvml.SUCCESS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, dev := started(t, tt.model, nvmlmock.Options{})
			for _, s := range tt.setup {
				if _, ret := create(dev, info(t, dev, s.index), s.start, s.size); ret != nvml.SUCCESS {
					t.Fatalf("setup %+v: %v", s, ret)
				}
			}
			if _, ret := create(dev, info(t, dev, tt.try.index), tt.try.start, tt.try.size); ret != tt.want {
				t.Errorf("create %+v = %v, want %v", tt.try, ret, tt.want)
			}
		})
	}
}
