package nvmlmock_test

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

// The strict server refuses what real NVML refuses, where go-nvml's lax
// mock would say SUCCESS.
func Example() {
	srv := nvmlmock.New(nvmlmock.DGXH100, nvmlmock.Options{})
	srv.Init()
	defer srv.Shutdown()
	dev, _ := srv.DeviceGetHandleByIndex(0)

	g3, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	g1, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	fmt.Println("3g: index", nvml.GPU_INSTANCE_PROFILE_3_SLICE, "Id", g3.Id, "SMs", g3.MultiprocessorCount)

	gi, ret := dev.CreateGpuInstanceWithPlacement(&g3, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	fmt.Println("3g at [4,8):", ret)
	_, ret = dev.CreateGpuInstanceWithPlacement(&g1, &nvml.GpuInstancePlacement{Start: 5, Size: 1})
	fmt.Println("1g at [5,6):", ret)
	_, ret = dev.CreateGpuInstanceWithPlacement(&g3, &nvml.GpuInstancePlacement{Start: 0, Size: 3})
	fmt.Println("3g at [0,3):", ret)

	ci, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	gi.CreateComputeInstance(&ci)
	fmt.Println("destroy GI with a CI:", gi.Destroy())
	mig, _ := dev.GetMigDeviceHandleByIndex(0)
	uuid, _ := mig.GetUUID()
	fmt.Println("MIG device 0:", uuid)
	// Output:
	// 3g: index 2 Id 9 SMs 60
	// 3g at [4,8): SUCCESS
	// 1g at [5,6): ERROR_INSUFFICIENT_RESOURCES
	// 3g at [0,3): ERROR_INVALID_ARGUMENT
	// destroy GI with a CI: ERROR_IN_USE
	// MIG device 0: MIG-01000000-0000-4000-8000-000000000001
}
