package nvmlhal_test

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
)

func benchBackend(b *testing.B) (*nvmlhal.Backend, *nvmlmock.Server) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	be := nvmlhal.New(nvmlhal.Options{NVML: srv})
	if err := be.Init(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Shutdown(context.Background()) })
	return be, srv
}

// Baseline: the bare NVML calls of one create/destroy round trip on the
// strict mock (profile info, GI with placement, full CI, destroy both),
// without the backend's placement check, MIG UUID lookup and error mapping.
func BenchmarkRoundTripRawNVML(b *testing.B) {
	_, srv := benchBackend(b)
	dev := srv.GPU(0)
	for b.Loop() {
		info, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
		gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 6, Size: 1})
		if ret != nvml.SUCCESS {
			b.Fatal(ret)
		}
		ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		if ret != nvml.SUCCESS {
			b.Fatal(ret)
		}
		ci.Destroy()
		gi.Destroy()
	}
}

// The same round trip through the backend, with six neighbours live so
// the MIG device scan has work to do.
func BenchmarkRoundTripBackend(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := context.Background()
	for s := range uint32(6) {
		if _, err := be.CreateInstance(ctx, 0, p1g, at(s, 1)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		inst, err := be.CreateInstance(ctx, 0, p1g, at(6, 1))
		if err != nil {
			b.Fatal(err)
		}
		if err := be.DestroyComputeInstance(ctx, 0, inst.GIID, inst.ComputeInstances[0].ID); err != nil {
			b.Fatal(err)
		}
		if err := be.DestroyGPUInstance(ctx, 0, inst.GIID); err != nil {
			b.Fatal(err)
		}
	}
}

// Listing a full GPU (seven 1g instances): profile walk, CI profile walk
// and one MIG device scan.
func BenchmarkInstancesFullGPU(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := context.Background()
	for s := range uint32(7) {
		if _, err := be.CreateInstance(ctx, 0, p1g, at(s, 1)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := be.Instances(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// benchDiscover discovers a DGX H200 (8 GPUs) under driver 580's measured
// query latencies, either with a fresh backend each time (every GPU's
// profile table read from NVML: the cost before the table was cached) or
// with one backend (the table read once, then from the cache).
func benchDiscover(b *testing.B, fresh bool) {
	ctx := context.Background()
	srv := nvmlmock.New(nvmlmock.DGXH200, nvmlmock.Options{Driver580: true, Latency: nvmlmock.MeasuredLatency})
	newBE := func() *nvmlhal.Backend {
		be := nvmlhal.New(nvmlhal.Options{NVML: srv})
		if err := be.Init(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Shutdown(ctx) })
		return be
	}
	be := newBE()
	if _, _, err := capability.Discover(ctx, be, capability.DefaultAllowlist()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if fresh {
			b.StopTimer()
			be = newBE()
			b.StartTimer()
		}
		gpus, _, err := capability.Discover(ctx, be, capability.DefaultAllowlist())
		if err != nil || len(gpus) != 8 || len(gpus[7].Profiles) != 4 {
			b.Fatal(gpus, err)
		}
	}
}

// Baseline: discovery reads every GPU's profile table from NVML.
func BenchmarkDiscover8GPUsUncached(b *testing.B) { benchDiscover(b, true) }

// Discovery with the table cached per GPU UUID and driver version.
func BenchmarkDiscover8GPUsCached(b *testing.B) { benchDiscover(b, false) }
