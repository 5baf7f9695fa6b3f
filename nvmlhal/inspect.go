package nvmlhal

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
)

// Inspection is what a read-only look at one GPU finds: its identity and
// every GPU instance profile with the engine counts NVML reports for it.
// [Backend.Inspect] returns it; package nvmlhal/selfcheck compares it with
// the fake hardware's preset for the GPU.
type Inspection struct {
	Device capability.DeviceInfo
	// DriverVersion is NVML's system driver version, "" when unknown.
	DriverVersion string
	Profiles      []InspectedProfile
}

// InspectedProfile is one GPU instance profile as NVML reports it.
type InspectedProfile struct {
	capability.GIProfileInfo
	// Media and copy engines of an instance of the profile
	// (GpuInstanceProfileInfo DecoderCount, EncoderCount, JpegCount,
	// OfaCount, CopyEngineCount).
	Decoders, Encoders, JPEG, OFA, CopyEngines uint32
	// ComputeProfiles are the compute instance profiles (shared engines)
	// of a live GPU instance of this profile, in CI profile index order;
	// nil when the GPU has no such instance: NVML answers compute instance
	// profile queries only on a GPU instance, and Inspect creates none.
	ComputeProfiles []CIProfileInfo
}

// CIProfileInfo is NVML's ComputeInstanceProfileInfo for one CI profile
// index.
type CIProfileInfo struct {
	Index               capability.CIProfileIndex
	ID                  uint32
	SliceCount          uint32
	InstanceCount       uint32
	MultiprocessorCount uint32
}

// Inspect reads GPU gpu and its profile table without changing anything:
// it never changes the MIG mode and never creates or destroys an instance,
// so it is safe on a production node. The compute instance profiles are
// read only from GPU instances that already exist. It holds the GPU's
// lock while it lists GPU instances.
func (b *Backend) Inspect(ctx context.Context, gpu int) (Inspection, error) {
	dev, unlock, err := b.begin(ctx, "Inspect", gpu)
	if err != nil {
		return Inspection{}, err
	}
	defer unlock()
	info, err := b.deviceInfo(gpu)
	if err != nil {
		return Inspection{}, err
	}
	out := Inspection{Device: info}
	if v, ret := b.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		out.DriverVersion = v
	}
	err = b.walkProfiles(gpu, dev, func(gi capability.GIProfileInfo, raw nvml.GpuInstanceProfileInfo) error {
		p := InspectedProfile{GIProfileInfo: gi, Decoders: raw.DecoderCount, Encoders: raw.EncoderCount,
			JPEG: raw.JpegCount, OFA: raw.OfaCount, CopyEngines: raw.CopyEngineCount}
		if info.MIGMode == capability.MIGEnabled {
			cis, err := liveCIProfiles(gpu, dev, &raw)
			if err != nil {
				return err
			}
			p.ComputeProfiles = cis
		}
		out.Profiles = append(out.Profiles, p)
		return nil
	})
	if err != nil {
		return Inspection{}, err
	}
	return out, nil
}

// liveCIProfiles reads the CI profiles of the first live GPU instance of
// the profile, or nil when there is none.
func liveCIProfiles(gpu int, dev nvml.Device, info *nvml.GpuInstanceProfileInfo) ([]CIProfileInfo, error) {
	gis, ret := dev.GetGpuInstances(info)
	if ret == nvml.ERROR_NOT_SUPPORTED || len(gis) == 0 {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, hwError("GetGpuInstances", gpu, dev, ret)
	}
	out := []CIProfileInfo{}
	for c := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		ci, ret := gis[0].GetComputeInstanceProfileInfo(c, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, hwError("GetComputeInstanceProfileInfo", gpu, dev, ret)
		}
		out = append(out, CIProfileInfo{Index: capability.CIProfileIndex(c), ID: ci.Id, SliceCount: ci.SliceCount,
			InstanceCount: ci.InstanceCount, MultiprocessorCount: ci.MultiprocessorCount})
	}
	return out, nil
}
