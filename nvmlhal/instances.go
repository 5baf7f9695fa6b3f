package nvmlhal

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// Instances lists every live GPU instance on the GPU with its compute
// instances, ordered by placement start. GPU instances are found by walking
// the GPU instance profiles (not the MIG device handles, which exist only
// for compute instances), so a GPU instance without a compute instance is
// listed too; the profiles come from the cached table (see
// [Backend.GIProfiles]). A compute instance whose MIG device handle cannot
// be found is listed with an empty MIGUUID.
//
// On a GPU whose MIG mode is off (a pending enable included) it fails with
// realize.ErrMIGDisabled whose Cause is a [*MIGModeError], without asking
// for instances, rather than listing nothing: an empty list reads as
// "every instance is gone", which a caller must not infer from a GPU in
// MIG mode off (where some drivers answer GetGpuInstances with SUCCESS and
// no instances, others with NOT_SUPPORTED).
func (b *Backend) Instances(ctx context.Context, gpu int) ([]realize.Instance, error) {
	dev, unlock, err := b.begin(ctx, "Instances", gpu)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cur, pend, err := migModes("GetMigMode", gpu, dev)
	if err != nil {
		return nil, err
	}
	if cur == capability.MIGDisabled {
		return nil, kindError("Instances", gpu, realize.ErrMIGDisabled, &MIGModeError{Current: cur, Pending: pend})
	}
	uuids, err := migUUIDs(gpu, dev)
	if err != nil {
		return nil, err
	}
	table, err := b.profileTable(gpu, dev)
	if err != nil {
		return nil, err
	}
	var out []realize.Instance
	for _, e := range table {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info := e.raw
		gis, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, hwError("GetGpuInstances", gpu, dev, ret)
		}
		for _, gi := range gis {
			inst, err := describeGI(gpu, dev, e.gi.Index, gi, uuids)
			if err != nil {
				return nil, err
			}
			out = append(out, inst)
		}
	}
	slices.SortFunc(out, func(a, b realize.Instance) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.GIID, b.GIID))
	})
	return out, nil
}

// ciKey identifies a compute instance on one GPU.
type ciKey struct{ gi, ci uint32 }

// describeGI reads one GPU instance and walks its compute instance profiles.
func describeGI(gpu int, dev nvml.Device, p capability.GIProfileIndex, gi nvml.GpuInstance, uuids map[ciKey]string) (realize.Instance, error) {
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return realize.Instance{}, hwError("GpuInstance.GetInfo", gpu, dev, ret)
	}
	inst := realize.Instance{
		GPU:       gpu,
		Profile:   p,
		Placement: capability.Placement{Start: info.Placement.Start, Size: info.Placement.Size},
		GIID:      info.Id,
	}
	seen := make(map[uint32]bool)
	for c := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		prof, ret := gi.GetComputeInstanceProfileInfo(c, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return realize.Instance{}, hwError("GetComputeInstanceProfileInfo", gpu, dev, ret)
		}
		cis, ret := gi.GetComputeInstances(&prof)
		if ret != nvml.SUCCESS {
			return realize.Instance{}, hwError("GetComputeInstances", gpu, dev, ret)
		}
		for _, ci := range cis {
			ciInfo, ret := ci.GetInfo()
			if ret != nvml.SUCCESS {
				return realize.Instance{}, hwError("ComputeInstance.GetInfo", gpu, dev, ret)
			}
			// Two CI profile indexes may share an NVML profile Id.
			if seen[ciInfo.Id] {
				continue
			}
			seen[ciInfo.Id] = true
			inst.ComputeInstances = append(inst.ComputeInstances, realize.ComputeInstance{
				ID:         ciInfo.Id,
				Profile:    capability.CIProfileIndex(c),
				SliceCount: prof.SliceCount,
				MIGUUID:    uuids[ciKey{info.Id, ciInfo.Id}],
			})
		}
	}
	slices.SortFunc(inst.ComputeInstances, func(a, b realize.ComputeInstance) int { return cmp.Compare(a.ID, b.ID) })
	return inst, nil
}

// migUUIDs maps every live compute instance of the GPU to its MIG device
// UUID by scanning the MIG device handles (see scanMIG for what is
// skipped). A handle that goes stale between the scan and its UUID query
// is left out as well: its compute instance is gone.
func migUUIDs(gpu int, dev nvml.Device) (map[ciKey]string, error) {
	out := make(map[ciKey]string)
	err := scanMIG(gpu, dev, func(k ciKey, h nvml.Device) (bool, error) {
		uuid, ret := h.GetUUID()
		if goneHandle(ret) {
			return false, nil
		}
		if ret != nvml.SUCCESS {
			return false, hwError("MigDevice.GetUUID", gpu, dev, ret)
		}
		out[k] = uuid
		return false, nil
	})
	return out, err
}

// goneHandle reports whether a MIG device query failed because there is no
// device behind the index or handle (any more): NOT_FOUND, or
// INVALID_ARGUMENT, which NVML returns for an index without a MIG device
// and for a handle whose compute instance was destroyed (by another NVML
// client, say, in the middle of the scan). go-nvlib and NVIDIA's DRA driver
// skip both.
func goneHandle(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT
}

// scanMIG calls visit for each MIG device of dev until visit returns true.
// GetMaxMigDeviceCount is the largest possible count, not the number that
// exist: indexes without a device, and handles that go stale before their
// identity is read, are skipped (goneHandle), so a scan racing another
// client's destroy neither fails nor makes a successful create roll back.
func scanMIG(gpu int, dev nvml.Device, visit func(ciKey, nvml.Device) (stop bool, err error)) error {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return hwError("GetMaxMigDeviceCount", gpu, dev, ret)
	}
	for i := range n {
		h, ret := dev.GetMigDeviceHandleByIndex(i)
		if goneHandle(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return hwError("GetMigDeviceHandleByIndex", gpu, dev, ret)
		}
		k, ret := migKey(h)
		if goneHandle(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return hwError("MigDevice.GetGpuInstanceId", gpu, dev, ret)
		}
		stop, err := visit(k, h)
		if stop || err != nil {
			return err
		}
	}
	return nil
}

// migKey reads which compute instance a MIG device handle is.
func migKey(h nvml.Device) (ciKey, nvml.Return) {
	gi, ret := h.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return ciKey{}, ret
	}
	ci, ret := h.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return ciKey{}, ret
	}
	return ciKey{uint32(gi), uint32(ci)}, nvml.SUCCESS
}

// migUUID resolves the MIG device UUID of compute instance k. NVML's header
// documents ComputeInstanceInfo.Device as the parent device, but some
// bindings and mocks hand back the MIG device there, so that handle is used
// when it proves to be the MIG device of k; otherwise the MIG handles are
// scanned.
func migUUID(gpu int, dev nvml.Device, k ciKey, ciDev nvml.Device) (string, error) {
	if ciDev != nil {
		if isMIG, ret := ciDev.IsMigDeviceHandle(); ret == nvml.SUCCESS && isMIG {
			if got, ret := migKey(ciDev); ret == nvml.SUCCESS && got == k {
				if uuid, ret := ciDev.GetUUID(); ret == nvml.SUCCESS && strings.HasPrefix(uuid, "MIG-") {
					return uuid, nil
				}
			}
		}
	}
	var uuid string
	err := scanMIG(gpu, dev, func(got ciKey, h nvml.Device) (bool, error) {
		if got != k {
			return false, nil
		}
		u, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return true, hwError("MigDevice.GetUUID", gpu, dev, ret)
		}
		uuid = u
		return true, nil
	})
	if err != nil {
		return "", err
	}
	if uuid == "" {
		return "", kindError("resolve MIG device", gpu, realize.ErrNotFound, &MIGDeviceError{GIID: k.gi, CIID: k.ci})
	}
	return uuid, nil
}

// MIGDeviceError reports a compute instance without a MIG device handle.
type MIGDeviceError struct{ GIID, CIID uint32 }

func (e *MIGDeviceError) Error() string {
	return "nvmlhal: no MIG device for GPU instance " + u32(e.GIID) + " compute instance " + u32(e.CIID)
}

// CreateInstance creates a GPU instance of the profile at exactly the given
// placement (CreateGpuInstanceWithPlacement; NVML never chooses), then one
// compute instance spanning it: the compute instance profile whose slice
// count equals the GPU instance's, with shared engines. If anything after
// the GPU instance fails, what was created is destroyed again before the
// error returns; a failed rollback is joined to the error (errors.Join).
//
// Errors: a placement the GPU does not publish for the profile is
// realize.ErrInvalidPlacement (checked before NVML is asked, and NVML's
// INVALID_ARGUMENT maps to it too); an occupied or overlapping range
// realize.ErrOccupied; MIG off realize.ErrMIGDisabled; a profile the GPU
// does not support realize.ErrNotSupported.
func (b *Backend) CreateInstance(ctx context.Context, gpu int, profile capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	const op = "CreateGpuInstanceWithPlacement"
	if profile < 0 || profile >= capability.GIProfileCount {
		return realize.Instance{}, kindError(op, gpu, realize.ErrNotSupported, &ArgumentError{Field: "profile", Reason: "index " + u32(uint32(profile)) + " outside NVML's range"})
	}
	if !at.Valid() {
		return realize.Instance{}, kindError(op, gpu, realize.ErrInvalidPlacement, &ArgumentError{Field: "placement", Reason: at.String() + " is empty or wraps"})
	}
	dev, unlock, err := b.begin(ctx, op, gpu)
	if err != nil {
		return realize.Instance{}, err
	}
	defer unlock()

	info, ret := dev.GetGpuInstanceProfileInfo(int(profile))
	if ret != nvml.SUCCESS {
		return realize.Instance{}, hwError("GetGpuInstanceProfileInfo", gpu, dev, ret)
	}
	if err := checkPlacement(gpu, dev, &info, profile, at); err != nil {
		return realize.Instance{}, err
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: at.Start, Size: at.Size})
	if ret != nvml.SUCCESS {
		return realize.Instance{}, createError(op, gpu, dev, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		err := hwError("GpuInstance.GetInfo", gpu, dev, ret)
		return realize.Instance{}, errors.Join(err, b.destroyGI(gpu, dev, gi))
	}
	inst := realize.Instance{GPU: gpu, Profile: profile, Placement: at, GIID: giInfo.Id}
	ci, err := b.createFullCI(gpu, dev, gi, giInfo.Id, info.SliceCount)
	if err != nil {
		return realize.Instance{}, errors.Join(err, b.destroyGI(gpu, dev, gi))
	}
	inst.ComputeInstances = []realize.ComputeInstance{ci}
	b.log.Info("nvmlhal: created MIG instance", "gpu", gpu, "profile", int(profile), "placement", at.String(),
		"gi", inst.GIID, "ci", ci.ID, "mig", ci.MIGUUID)
	return inst, nil
}

// checkPlacement refuses a placement NVML does not list for the profile,
// so that an illegal request never reaches CreateGpuInstanceWithPlacement.
func checkPlacement(gpu int, dev nvml.Device, info *nvml.GpuInstanceProfileInfo, profile capability.GIProfileIndex, at capability.Placement) error {
	placements, ret := dev.GetGpuInstancePossiblePlacements(info)
	if ret != nvml.SUCCESS {
		return hwError("GetGpuInstancePossiblePlacements", gpu, dev, ret)
	}
	for _, p := range placements {
		if p.Start == at.Start && p.Size == at.Size {
			return nil
		}
	}
	return kindError("CreateGpuInstanceWithPlacement", gpu, realize.ErrInvalidPlacement, placementError(profile, at))
}

// createFullCI creates the compute instance spanning GPU instance gi and
// resolves its MIG device. On failure after the CI exists it destroys it.
func (b *Backend) createFullCI(gpu int, dev nvml.Device, gi nvml.GpuInstance, giID, slices uint32) (realize.ComputeInstance, error) {
	idx, ok := capability.FullCIProfileIndex(slices)
	if !ok {
		return realize.ComputeInstance{}, kindError("CreateComputeInstance", gpu, realize.ErrNotSupported,
			&ArgumentError{Field: "profile", Reason: "no compute instance profile spans " + u32(slices) + " slices"})
	}
	prof, ret := gi.GetComputeInstanceProfileInfo(int(idx), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return realize.ComputeInstance{}, hwError("GetComputeInstanceProfileInfo", gpu, dev, ret)
	}
	ci, ret := gi.CreateComputeInstance(&prof)
	if ret != nvml.SUCCESS {
		return realize.ComputeInstance{}, hwError("CreateComputeInstance", gpu, dev, ret)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return realize.ComputeInstance{}, errors.Join(hwError("ComputeInstance.GetInfo", gpu, dev, ret), destroyCI(gpu, dev, ci))
	}
	uuid, err := migUUID(gpu, dev, ciKey{giID, ciInfo.Id}, ciInfo.Device)
	if err != nil {
		return realize.ComputeInstance{}, errors.Join(err, destroyCI(gpu, dev, ci))
	}
	return realize.ComputeInstance{ID: ciInfo.Id, Profile: idx, SliceCount: prof.SliceCount, MIGUUID: uuid}, nil
}

func destroyCI(gpu int, dev nvml.Device, ci nvml.ComputeInstance) error {
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		return hwError("ComputeInstance.Destroy", gpu, dev, ret)
	}
	return nil
}

// destroyGI is the rollback of a GPU instance this call created.
func (b *Backend) destroyGI(gpu int, dev nvml.Device, gi nvml.GpuInstance) error {
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		b.log.Error("nvmlhal: rollback left a GPU instance behind", "gpu", gpu, "ret", returnName(ret))
		return hwError("GpuInstance.Destroy", gpu, dev, ret)
	}
	return nil
}

// DestroyComputeInstance destroys exactly compute instance ci of GPU
// instance gi. A GPU or compute instance that does not exist is
// realize.ErrNotFound; processes on it realize.ErrInUse.
func (b *Backend) DestroyComputeInstance(ctx context.Context, gpu int, gi, ci uint32) error {
	dev, g, unlock, err := b.beginGI(ctx, "DestroyComputeInstance", gpu, gi)
	if err != nil {
		return err
	}
	defer unlock()
	c, ret := g.GetComputeInstanceById(int(ci))
	if ret != nvml.SUCCESS {
		return lookupError("GetComputeInstanceById", gpu, dev, ret)
	}
	if err := destroyCI(gpu, dev, c); err != nil {
		return err
	}
	b.log.Info("nvmlhal: destroyed compute instance", "gpu", gpu, "gi", gi, "ci", ci)
	return nil
}

// DestroyGPUInstance destroys exactly GPU instance gi. Live compute
// instances or processes are realize.ErrInUse (NVML's IN_USE); a GPU
// instance that does not exist is realize.ErrNotFound.
func (b *Backend) DestroyGPUInstance(ctx context.Context, gpu int, gi uint32) error {
	dev, g, unlock, err := b.beginGI(ctx, "DestroyGPUInstance", gpu, gi)
	if err != nil {
		return err
	}
	defer unlock()
	if ret := g.Destroy(); ret != nvml.SUCCESS {
		return hwError("GpuInstance.Destroy", gpu, dev, ret)
	}
	b.log.Info("nvmlhal: destroyed GPU instance", "gpu", gpu, "gi", gi)
	return nil
}

// beginGI is [Backend.begin] for a call on GPU instance gi: it also looks
// the instance up, releasing the lock again when that fails.
func (b *Backend) beginGI(ctx context.Context, op string, gpu int, gi uint32) (nvml.Device, nvml.GpuInstance, func(), error) {
	dev, unlock, err := b.begin(ctx, op, gpu)
	if err != nil {
		return nil, nil, nil, err
	}
	g, ret := dev.GetGpuInstanceById(int(gi))
	if ret != nvml.SUCCESS {
		unlock()
		return nil, nil, nil, lookupError("GetGpuInstanceById", gpu, dev, ret)
	}
	return dev, g, unlock, nil
}

// lookupError maps a failed by-ID lookup: NVML reports an unknown ID as
// NOT_FOUND or INVALID_ARGUMENT depending on the driver; both are
// realize.ErrNotFound.
func lookupError(op string, gpu int, dev nvml.Device, ret nvml.Return) error {
	if ret == nvml.ERROR_INVALID_ARGUMENT {
		return &realize.HardwareError{Op: op, GPU: gpu, Kind: realize.ErrNotFound, Cause: &ReturnError{Return: ret}}
	}
	return hwError(op, gpu, dev, ret)
}
