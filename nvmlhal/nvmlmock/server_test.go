package nvmlmock_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func started(t *testing.T, model nvmlmock.Model, opts nvmlmock.Options) (*nvmlmock.Server, nvml.Device) {
	t.Helper()
	srv := nvmlmock.New(model, opts)
	if ret := srv.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	t.Cleanup(func() { srv.Shutdown() })
	dev, ret := srv.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return srv, dev
}

func info(t *testing.T, dev nvml.Device, index int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	in, ret := dev.GetGpuInstanceProfileInfo(index)
	if ret != nvml.SUCCESS {
		t.Fatalf("profile index %d: %v", index, ret)
	}
	return in
}

func create(dev nvml.Device, in nvml.GpuInstanceProfileInfo, start, size uint32) (nvml.GpuInstance, nvml.Return) {
	return dev.CreateGpuInstanceWithPlacement(&in, &nvml.GpuInstancePlacement{Start: start, Size: size})
}

func TestUninitialised(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	if _, ret := srv.DeviceGetCount(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("DeviceGetCount before Init = %v, want ERROR_UNINITIALIZED", ret)
	}
	if ret := srv.Shutdown(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Shutdown before Init = %v, want ERROR_UNINITIALIZED", ret)
	}
	if _, _, ret := srv.GPU(0).GetMigMode(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("GetMigMode before Init = %v, want ERROR_UNINITIALIZED", ret)
	}
}

func TestProfileTables(t *testing.T) {
	for _, model := range nvmlmock.DGXModels {
		t.Run(model.String(), func(t *testing.T) {
			_, dev := started(t, model, nvmlmock.Options{})
			found := 0
			for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				in, ret := dev.GetGpuInstanceProfileInfo(idx)
				if ret == nvml.ERROR_NOT_SUPPORTED {
					continue
				}
				if ret != nvml.SUCCESS {
					t.Fatalf("index %d: %v", idx, ret)
				}
				found++
				if int(in.Id) == idx {
					t.Errorf("index %d has Id %d; real drivers' Ids differ from indexes", idx, in.Id)
				}
				v3, ret := dev.(interface {
					GetGpuInstanceProfileInfoV3(int) (nvml.GpuInstanceProfileInfo_v3, nvml.Return)
				}).GetGpuInstanceProfileInfoV3(idx)
				if ret != nvml.SUCCESS || v3.Id != in.Id || v3.MemorySizeMB != in.MemorySizeMB {
					t.Errorf("V3 of index %d = %+v, %v; want V1's data", idx, v3, ret)
				}
				pls, ret := dev.GetGpuInstancePossiblePlacements(&in)
				if ret != nvml.SUCCESS || len(pls) == 0 {
					t.Fatalf("placements of index %d: %v, %v", idx, pls, ret)
				}
				want := map[uint32]uint32{1: 1, 2: 2, 3: 4, 4: 4, 7: 8}[in.SliceCount]
				if idx == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2 {
					want = 2
				}
				for _, p := range pls {
					if p.Size != want || p.Start+p.Size > 8 {
						t.Errorf("index %d placement %+v, want size %d on 8 slots", idx, p, want)
					}
				}
			}
			if found != 7 {
				t.Errorf("supported profiles = %d, want 7", found)
			}
			if _, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_COUNT); ret != nvml.ERROR_INVALID_ARGUMENT {
				t.Errorf("index COUNT = %v, want ERROR_INVALID_ARGUMENT", ret)
			}
		})
	}
}

func TestPlacementChecks(t *testing.T) {
	_, dev := started(t, nvmlmock.DGXH100, nvmlmock.Options{})
	g3 := info(t, dev, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	g1 := info(t, dev, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	me := info(t, dev, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
	if _, ret := create(dev, g3, 4, 4); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for _, tc := range []struct {
		name        string
		in          nvml.GpuInstanceProfileInfo
		start, size uint32
		want        nvml.Return
	}{
		{"overlap", g1, 6, 1, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"same placement again", g3, 4, 4, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"illegal start", g3, 2, 4, nvml.ERROR_INVALID_ARGUMENT},
		{"lax size", g3, 0, 3, nvml.ERROR_INVALID_ARGUMENT},
		{"slot 7 for 1g", g1, 7, 1, nvml.ERROR_INVALID_ARGUMENT},
		{"index used as Id", nvml.GpuInstanceProfileInfo{Id: nvml.GPU_INSTANCE_PROFILE_1_SLICE}, 0, 1, nvml.ERROR_INVALID_ARGUMENT},
	} {
		if _, ret := create(dev, tc.in, tc.start, tc.size); ret != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, ret, tc.want)
		}
	}
	if _, ret := create(dev, me, 0, 1); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := create(dev, me, 1, 1); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("second +me = %v, want ERROR_INSUFFICIENT_RESOURCES (instance count 1)", ret)
	}
	if _, ret := dev.CreateGpuInstance(&g1); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("create without placement = %v, want refused", ret)
	}
}

func TestInstancesAndMIGDevices(t *testing.T) {
	for _, opts := range []nvmlmock.Options{{}, {CIInfoDevice: true}} {
		srv, dev := started(t, nvmlmock.DGXB200, opts)
		g2 := info(t, dev, nvml.GPU_INSTANCE_PROFILE_2_SLICE)
		var cis []nvml.ComputeInstance
		var gis []nvml.GpuInstance
		for _, start := range []uint32{0, 2, 4} {
			gi, ret := create(dev, g2, start, 2)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			prof, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			ci, ret := gi.CreateComputeInstance(&prof)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			if _, ret := gi.CreateComputeInstance(&prof); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("second full CI = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
			}
			if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
				t.Errorf("destroy GI with a CI = %v, want ERROR_IN_USE", ret)
			}
			gis, cis = append(gis, gi), append(cis, ci)
		}
		maxDevs, _ := dev.GetMaxMigDeviceCount()
		if maxDevs != 7 {
			t.Errorf("GetMaxMigDeviceCount = %d, want 7", maxDevs)
		}
		if _, ret := dev.GetMigDeviceHandleByIndex(maxDevs); ret != nvml.ERROR_INVALID_ARGUMENT {
			t.Errorf("handle past max = %v", ret)
		}
		uuids := make(map[string]bool)
		for i := range maxDevs {
			h, ret := dev.GetMigDeviceHandleByIndex(i)
			if ret == nvml.ERROR_NOT_FOUND {
				continue
			}
			u, _ := h.GetUUID()
			if !strings.HasPrefix(u, "MIG-") || uuids[u] {
				t.Errorf("MIG UUID %q bad or repeated", u)
			}
			uuids[u] = true
		}
		if len(uuids) != 3 {
			t.Errorf("MIG devices = %d, want 3", len(uuids))
		}
		ciInfo, _ := cis[1].GetInfo()
		isMIG, _ := ciInfo.Device.IsMigDeviceHandle()
		if isMIG != opts.CIInfoDevice {
			t.Errorf("CI info Device is MIG handle = %v with %+v", isMIG, opts)
		}
		giInfo, _ := gis[1].GetInfo()
		if err := srv.StartMIGProcess(0, giInfo.Id, ciInfo.Id, 99); err != nil {
			t.Fatal(err)
		}
		if ret := cis[1].Destroy(); ret != nvml.ERROR_IN_USE {
			t.Errorf("destroy CI with a process = %v, want ERROR_IN_USE", ret)
		}
		srv.StopProcess(0, 99)
		if ret := cis[1].Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if ret := cis[1].Destroy(); ret != nvml.ERROR_INVALID_ARGUMENT {
			t.Errorf("destroy a destroyed CI = %v, want ERROR_INVALID_ARGUMENT", ret)
		}
		if ret := gis[1].Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if _, ret := dev.GetGpuInstanceById(int(giInfo.Id)); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("lookup of a destroyed GI = %v, want ERROR_NOT_FOUND", ret)
		}
		missing := 0
		for i := range maxDevs {
			if _, ret := dev.GetMigDeviceHandleByIndex(i); ret == nvml.ERROR_NOT_FOUND {
				missing++
			}
		}
		if missing != 5 {
			t.Errorf("free MIG device indexes = %d, want 5", missing)
		}
		if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_IN_USE {
			t.Errorf("disable MIG with GPU instances = %v, want ERROR_IN_USE", ret)
		}
	}
}

// TestDriver580 checks the driver-580 mode against what driver 580.159.04
// answered on an H200 with MIG off (mig-hardware-facts).
func TestDriver580(t *testing.T) {
	srv, dev := started(t, nvmlmock.DGXH200, nvmlmock.Options{MIGDisabled: true, Driver580: true})
	if v, _ := srv.SystemGetDriverVersion(); v != "580.159.04" {
		t.Errorf("driver version %q, want 580.159.04", v)
	}
	for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		_, ret := dev.GetGpuInstanceProfileInfo(idx)
		want := nvml.SUCCESS
		switch {
		case idx >= 17:
			want = nvml.ERROR_INVALID_ARGUMENT
		case idx == 5 || idx == 6 || idx == 8 || idx >= 10:
			want = nvml.ERROR_NOT_SUPPORTED
		}
		if ret != want {
			t.Errorf("profile index %d: %v, want %v", idx, ret, want)
		}
	}
	v1 := info(t, dev, 0)
	d := dev.(*nvmlmock.Device)
	v3, ret := d.GetGpuInstanceProfileInfoV3(0)
	if ret != nvml.SUCCESS || v3.Version != 0 || v3.Name[0] != 0 || v3.Id != v1.Id || v3.SliceCount != 1 || v3.MemorySizeMB != 16384 {
		t.Errorf("V3 = %+v, %v; want SUCCESS, version 0, empty name, V1's numbers", v3, ret)
	}
	if got := cString(v3.Name[8:]); got != "MIG 7g.0gb" {
		t.Errorf("V3 Name[8:] = %q, want the driver's garbage \"MIG 7g.0gb\"", got)
	}
	v2, ret := d.GetGpuInstanceProfileInfoV2(0)
	if ret != nvml.SUCCESS || v2.Version != 0 || cString(v2.Name[:]) != "MIG 1g.18gb" {
		t.Errorf("V2 = %q version %d, %v; want \"MIG 1g.18gb\", version 0", cString(v2.Name[:]), v2.Version, ret)
	}
	gis, ret := dev.GetGpuInstances(&v1)
	if ret != nvml.SUCCESS || len(gis) != 0 {
		t.Errorf("GetGpuInstances with MIG off = %d, %v; want SUCCESS with none", len(gis), ret)
	}
	if _, ret := create(dev, v1, 0, 1); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("create with MIG off = %v, want NOT_SUPPORTED", ret)
	}
}

func cString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}
