package dradriver

import (
	"context"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/reservation"
)

// ErrNotAllocated: the claim handed to PrepareResourceClaims has no device
// of this driver in this node's pool.
var ErrNotAllocated = errors.New("dradriver: claim has no device allocated in this node's pool")

// ErrUnhealthyGPU: a claim's device would need a new MIG instance on a GPU
// whose health watch reported it unhealthy. Nothing is created; the
// kubelet retries. The GPU publishes no devices while it is unhealthy, so
// the scheduler places nothing new there.
var ErrUnhealthyGPU = errors.New("dradriver: GPU is unhealthy")

// ErrDeviceHeld: a claim's device overlaps a device that another
// checkpointed claim still holds (it was not unprepared yet). Nothing is
// created; the kubelet retries, and the claim is prepared once the kubelet
// has unprepared the other. The control plane can hand a device to a new
// claim before the node has released it (a force-deleted pod whose
// container still runs, kubernetes/kubernetes#141471): the driver is the
// last line of defence against two workloads on one device.
var ErrDeviceHeld = errors.New("dradriver: device is still held by another claim")

// DeviceHeldError names the device [ErrDeviceHeld] is about.
type DeviceHeldError struct {
	Device string // the refused claim's device
	Claim  string // UID of the checkpointed claim that holds it
	Held   string // that claim's overlapping device
}

func (e *DeviceHeldError) Error() string {
	return fmt.Sprintf("%v: %s overlaps %s of claim %s", ErrDeviceHeld, e.Device, e.Held, e.Claim)
}

// Unwrap returns [ErrDeviceHeld].
func (e *DeviceHeldError) Unwrap() error { return ErrDeviceHeld }

// ErrReallocated: the claim is checkpointed as prepared with other devices
// than its allocation now names. It was deallocated and allocated again
// under the same UID before the kubelet unprepared its earlier
// preparation, whose container may still run. Nothing is created or
// destroyed; the kubelet retries, and the claim is prepared afresh once
// the earlier preparation is unprepared.
var ErrReallocated = errors.New("dradriver: claim re-allocated before its earlier preparation was unprepared")

// ClaimError names the claim and device a preparation failed on.
type ClaimError struct {
	Claim  string // namespace/name (uid)
	Device string // DRA device name, or "" for the whole claim
	Err    error
}

func (e *ClaimError) Error() string {
	msg := "dradriver: claim " + e.Claim
	if e.Device != "" {
		msg += " device " + e.Device
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ClaimError) Unwrap() error { return e.Err }

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: for each claim
// it realizes exactly the allocated devices of this node's pool through
// the realize.Manager, in two checkpointed phases: the claim is recorded
// as PrepareStarted, with its devices, before anything is created, and as
// PrepareCompleted, with the runtime identities, once its instances exist
// and its CDI spec is written. It returns one CDI device per device. A
// claim already PrepareCompleted with the same devices gets the same MIG
// devices again (idempotent); one PrepareCompleted with other devices
// fails with [ErrReallocated]; one left PrepareStarted with other devices
// is first rolled back (it was never handed to a container). A device
// that overlaps a device another checkpointed claim holds fails the claim
// with a [*DeviceHeldError] before anything is written or created. A
// claim that fails gets its error in its result (wrapped in a
// [*ClaimError]); the kubelet retries it.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devs, err := d.prepare(ctx, claim)
		if err != nil {
			d.log.Warn("prepare failed", "claim", claimRef(claim), "err", err)
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	d.rebuild()
	return out, nil
}

func claimRef(c *resourceapi.ResourceClaim) string {
	return c.Namespace + "/" + c.Name + " (" + string(c.UID) + ")"
}

// sameDevices reports whether the checkpointed claim pc has exactly the
// devices want (indexes, names, admin access), runtime identities aside.
func sameDevices(pc *PreparedClaim, want []PreparedDevice) bool {
	return slices.EqualFunc(pc.Devices, want, func(a, b PreparedDevice) bool {
		return a.Request == b.Request && a.Device == b.Device && a.ContainerIndex == b.ContainerIndex &&
			a.DeviceIndex == b.DeviceIndex && a.AdminAccess == b.AdminAccess
	})
}

// prepare prepares one claim, as [Driver.PrepareResourceClaims] says:
// every error it returns is a [*ClaimError].
func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	ref, uid := claimRef(claim), string(claim.UID)
	cat := d.Catalog()
	if cat == nil {
		return nil, &ClaimError{Claim: ref, Err: ErrNotSetUp}
	}
	devs, ok := cat.ClaimDevices(claim)
	if !ok {
		return nil, &ClaimError{Claim: ref, Err: ErrNotAllocated}
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	want, realized, err := preparedDevices(ref, devs)
	if err != nil {
		return nil, err
	}
	completed, err := d.admit(ctx, ref, uid, devs, want)
	if err != nil {
		return nil, err
	}
	if !completed {
		started := PreparedClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: PrepareStarted, Devices: want}
		if err := d.putClaim(started); err != nil {
			return nil, &ClaimError{Claim: ref, Err: err}
		}
	}
	byOwner, err := d.realizeClaim(ctx, ref, uid, realized)
	if err != nil {
		return nil, err
	}
	pc := PreparedClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: PrepareCompleted, Devices: want}
	if err := d.writeCDI(ref, &pc, byOwner); err != nil {
		return nil, err
	}
	if err := d.putClaim(pc); err != nil {
		// The instances stay: a retry is idempotent, and after a crash
		// adoption at the allocated placement finds them again.
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	return d.kubeletDevices(pc), nil
}

// preparedDevices returns the checkpoint entries of a claim's devices,
// runtime identities and CDI names still unset, and how many of them are
// realized (not admin access). A device name that does not decode fails.
func preparedDevices(ref string, devs []ClaimDevice) ([]PreparedDevice, int, error) {
	want := make([]PreparedDevice, 0, len(devs))
	realized := 0
	for _, cd := range devs {
		var dne *DeviceNameError
		if errors.As(cd.Err, &dne) {
			return nil, 0, &ClaimError{Claim: ref, Device: cd.Device, Err: cd.Err}
		}
		want = append(want, PreparedDevice{Request: cd.Request, Device: cd.Device, ContainerIndex: cd.ContainerIndex,
			DeviceIndex: cd.DeviceIndex, Partition: cd.Partition, AdminAccess: cd.AdminAccess})
		if !cd.AdminAccess {
			realized++
		}
	}
	return want, realized, nil
}

// admit decides whether the claim uid may be prepared with the devices
// want, and reports whether it is already PrepareCompleted with them. A
// claim not completed with them needs every device publishable; one
// completed with other devices was reallocated; one started with other
// devices is rolled back first. Then no device may overlap another
// checkpointed claim's, and a claim not completed needs healthy GPUs.
func (d *Driver) admit(ctx context.Context, ref, uid string, devs []ClaimDevice, want []PreparedDevice) (bool, error) {
	ck := d.Checkpoint()
	prev, had := ck.Claim(uid)
	completed := had && prev.State == PrepareCompleted
	same := had && sameDevices(prev, want)
	if !completed || !same {
		// A prepared claim is handed its devices again even when the
		// allowlist no longer publishes them; nothing new is.
		for _, cd := range devs {
			if cd.Err != nil {
				return false, &ClaimError{Claim: ref, Device: cd.Device, Err: cd.Err}
			}
		}
	}
	switch {
	case completed && !same:
		return false, &ClaimError{Claim: ref, Err: ErrReallocated}
	case had && !completed && !same:
		// Never handed to a container: roll the earlier attempt back.
		if _, err := d.mgr.Unprepare(ctx, d.unprepareDemand(uid), uid); err != nil {
			return false, &ClaimError{Claim: ref, Err: err}
		}
	}
	for _, cd := range devs {
		if cd.AdminAccess {
			continue
		}
		if pc, pd, held := ck.Holds(cd.Partition, uid); held {
			return false, &ClaimError{Claim: ref, Device: cd.Device, Err: &DeviceHeldError{Device: cd.Device, Claim: pc.UID, Held: pd.Device}}
		}
		if !completed {
			if err := d.checkHealth(cd); err != nil {
				return false, &ClaimError{Claim: ref, Device: cd.Device, Err: err}
			}
		}
	}
	return completed, nil
}

// realizeClaim has the manager realize the claim uid's devices (none when
// realized is 0) and returns their runtime identities by (ContainerIndex,
// DeviceIndex).
func (d *Driver) realizeClaim(ctx context.Context, ref, uid string, realized int) (map[[2]int]reservation.RuntimeIdentity, error) {
	byOwner := map[[2]int]reservation.RuntimeIdentity{}
	if realized == 0 {
		return byOwner, nil
	}
	got, err := d.mgr.Prepare(ctx, d.Demand(), uid)
	if err != nil {
		// The claim stays PrepareStarted: what this call created is
		// rolled back, and a retry, the kubelet's unprepare or the
		// stale-claim cleanup finishes it.
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	for _, g := range got {
		byOwner[[2]int{g.Entry.ContainerIndex, g.Entry.DeviceIndex}] = g.Runtime
	}
	return byOwner, nil
}

// writeCDI sets the runtime identities of pc's devices from byOwner,
// writes the claim's CDI spec and sets their CDI device names. The
// instances stay when it fails: the kubelet retries.
func (d *Driver) writeCDI(ref string, pc *PreparedClaim, byOwner map[[2]int]reservation.RuntimeIdentity) error {
	cdiDevs := make([]CDIDevice, 0, len(pc.Devices))
	for i := range pc.Devices {
		pd := &pc.Devices[i]
		if !pd.AdminAccess {
			rt, ok := byOwner[[2]int{pd.ContainerIndex, pd.DeviceIndex}]
			if !ok {
				return &ClaimError{Claim: ref, Device: pd.Device, Err: fmt.Errorf("dradriver: the manager returned no instance for it")}
			}
			pd.Runtime = rt
		}
		cdev, err := d.cdiDevice(*pd)
		if err != nil {
			return &ClaimError{Claim: ref, Device: pd.Device, Err: err}
		}
		cdiDevs = append(cdiDevs, cdev)
	}
	common, err := d.commonEdits()
	if err != nil {
		return &ClaimError{Claim: ref, Err: err}
	}
	ids, err := d.cdi.write(pc.UID, cdiDevs, common)
	if err != nil {
		return &ClaimError{Claim: ref, Err: err}
	}
	for i := range pc.Devices {
		pc.Devices[i].CDIDevice = ids[i]
	}
	return nil
}

// cdiDevice returns the CDI device of a prepared device whose runtime
// identity is set: the whole GPU's edits or nodes for admin access, the
// MIG device's otherwise, from Config.CDIGenerator, else
// Config.DeviceNodes (none without either).
func (d *Driver) cdiDevice(pd PreparedDevice) (CDIDevice, error) {
	cdev := CDIDevice{Device: pd.Device, Request: pd.Request, GPUUUID: pd.Partition.GPUUUID}
	if !pd.AdminAccess {
		cdev.MIGUUID = pd.Runtime.MIGUUID
	}
	var err error
	if gen := d.cfg.CDIGenerator; gen != nil {
		in := CDIInstance{GPUUUID: cdev.GPUUUID, MIGUUID: cdev.MIGUUID, GPUInstanceID: pd.Runtime.GPUInstanceID, ComputeInstanceID: pd.Runtime.ComputeInstanceID}
		if g, ok := d.Catalog().GPU(cdev.GPUUUID); ok {
			in.GPU = g.Index
		}
		if pd.AdminAccess {
			cdev.Edits, err = gen.GPUEdits(in)
		} else {
			cdev.Edits, err = gen.DeviceEdits(in)
		}
		return cdev, err
	}
	src := d.cfg.DeviceNodes
	if src == nil {
		return cdev, nil
	}
	if pd.AdminAccess {
		cdev.Nodes, err = src.GPUNodes(pd.Partition.GPUUUID)
	} else {
		cdev.Nodes, err = src.MIGNodes(pd.Partition.GPUUUID, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID)
	}
	return cdev, err
}

// commonEdits returns the edits every claim's spec injects once:
// Config.CDIGenerator's, else Config.DeviceNodes' control nodes.
func (d *Driver) commonEdits() (cdispec.ContainerEdits, error) {
	if gen := d.cfg.CDIGenerator; gen != nil {
		return gen.CommonEdits()
	}
	if src := d.cfg.DeviceNodes; src != nil {
		nodes, err := src.ControlNodes()
		return cdispec.ContainerEdits{DeviceNodes: cdiNodes(nodes)}, err
	}
	return cdispec.ContainerEdits{}, nil
}

// kubeletDevices returns the kubelet's result for the prepared claim pc.
func (d *Driver) kubeletDevices(pc PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, len(pc.Devices))
	for i, pd := range pc.Devices {
		out[i] = kubeletplugin.Device{
			Requests:     []string{pd.Request},
			PoolName:     d.cfg.Node,
			DeviceName:   pd.Device,
			CDIDeviceIDs: []string{pd.CDIDevice},
		}
	}
	return out
}

// putClaim replaces (or adds) the checkpointed claim with pc's UID.
func (d *Driver) putClaim(pc PreparedClaim) error {
	return d.updateCheckpoint(func(ck *Checkpoint) {
		ck.Claims = slices.DeleteFunc(ck.Claims, func(c PreparedClaim) bool { return c.UID == pc.UID })
		ck.Claims = append(ck.Claims, pc)
	})
}

// checkHealth refuses a device that would need a new instance on an
// unhealthy GPU.
func (d *Driver) checkHealth(cd ClaimDevice) error {
	cat := d.Catalog()
	g, ok := cat.GPU(cd.Partition.GPUUUID)
	if ok && g.Unhealthy {
		return fmt.Errorf("%w: GPU %d (%s)", ErrUnhealthyGPU, g.Index, g.UUID)
	}
	return nil
}
