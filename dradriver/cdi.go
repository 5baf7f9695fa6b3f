package dradriver

import (
	"fmt"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI names of the devices the driver hands to the kubelet:
// "<CDIVendor>/<CDIClass>=<claim UID>-<device name>".
const (
	CDIVendor = "k8s." + DriverName
	CDIClass  = "mig"
	CDIKind   = CDIVendor + "/" + CDIClass
)

// CDIDevice is one device to describe in a claim's CDI spec.
type CDIDevice struct {
	Device  string // DRA device name
	Request string // the allocation result's request, "<request>[/<subrequest>]"
	GPUUUID string // the parent GPU, "GPU-..."
	// MIGUUID is the realized MIG device, "MIG-..."; "" for a device
	// with admin access, which exposes its parent GPU instead.
	MIGUUID string
	// Nodes are the device nodes the container needs for it (see
	// [NodeSource]); none when the driver has no NodeSource.
	Nodes []DeviceNode
	// Edits are the device's container edits from a [CDIGenerator],
	// injected with Nodes; [ClaimSpecFrom] replaces any
	// NVIDIA_VISIBLE_DEVICES they set.
	Edits cdispec.ContainerEdits
}

// cdiWriter writes one transient CDI spec file per prepared claim into a
// directory the container runtime reads.
type cdiWriter struct {
	cache *cdi.Cache
}

// newCDIWriter returns a writer for dir. The cache does not watch the
// directory (no goroutine): it is only used to validate and write specs.
func newCDIWriter(dir string) (*cdiWriter, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty CDI directory", ErrConfig)
	}
	c, err := cdi.NewCache(cdi.WithAutoRefresh(false), cdi.WithSpecDirs(dir))
	if err != nil {
		return nil, err
	}
	return &cdiWriter{cache: c}, nil
}

// cdiName is the CDI device name of one of a claim's devices: unique per
// claim, so a runtime's cached spec is never mistaken for a later claim's.
func cdiName(claimUID, device string) string { return claimUID + "-" + device }

// specName is the claim's spec file name (without extension).
func specName(claimUID string) string {
	return cdi.GenerateTransientSpecName(CDIVendor, CDIClass, claimUID)
}

// ClaimSpec is [ClaimSpecWith] without common nodes.
func ClaimSpec(claimUID string, devs []CDIDevice) (*cdispec.Spec, []string, error) {
	return ClaimSpecWith(claimUID, devs, nil)
}

// ClaimSpecWith returns the CDI spec of a claim's devices, with their
// qualified CDI names in the same order: one CDI device per device, whose
// container edits inject its device nodes (a MIG device's capability
// nodes and its parent GPU's node) and set NVIDIA_VISIBLE_DEVICES to the
// MIG UUIDs (or, for admin access, GPU UUIDs) of every device of the same
// request, comma-separated, so that a container given several devices of
// one request sees them all whichever device's edits come last. common
// (nvidiactl, nvidia-uvm) is injected once for the spec's devices.
//
// The nodes grant access where the runtime does not act on
// NVIDIA_VISIBLE_DEVICES (the NVIDIA container toolkit in CDI mode,
// unprivileged pods); the variable serves runtimes that do (the toolkit's
// legacy mode), which then also mount the driver's libraries.
func ClaimSpecWith(claimUID string, devs []CDIDevice, common []DeviceNode) (*cdispec.Spec, []string, error) {
	return ClaimSpecFrom(claimUID, devs, cdispec.ContainerEdits{DeviceNodes: cdiNodes(common)})
}

// ClaimSpecFrom is [ClaimSpecWith] with each device's Edits (from a
// [CDIGenerator]) injected besides its Nodes, and common edits (a
// generator's CommonEdits: control nodes and, from NVIDIA's library, the
// driver's libraries and the toolkit's hooks) injected once for the spec.
func ClaimSpecFrom(claimUID string, devs []CDIDevice, common cdispec.ContainerEdits) (*cdispec.Spec, []string, error) {
	spec := &cdispec.Spec{Kind: CDIKind, ContainerEdits: common}
	visible := visibleByRequest(devs)
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		name := cdiName(claimUID, d.Device)
		if err := parser.ValidateDeviceName(name); err != nil {
			return nil, nil, fmt.Errorf("dradriver: CDI device for claim %s device %s: %w", claimUID, d.Device, err)
		}
		req, _, _ := strings.Cut(d.Request, "/")
		edits := d.Edits
		edits.Env = append(slices.DeleteFunc(slices.Clone(edits.Env), isVisibleDevices), "NVIDIA_VISIBLE_DEVICES="+strings.Join(visible[req], ","))
		edits.DeviceNodes = append(slices.Clip(edits.DeviceNodes), cdiNodes(d.Nodes)...)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
		ids = append(ids, parser.QualifiedName(CDIVendor, CDIClass, name))
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, err
	}
	spec.Version = v
	return spec, ids, nil
}

// visibleByRequest returns, per request, the MIG UUIDs (GPU UUIDs for
// admin access) of its devices, each once, in order.
func visibleByRequest(devs []CDIDevice) map[string][]string {
	visible := map[string][]string{}
	for _, d := range devs {
		id := d.MIGUUID
		if id == "" {
			id = d.GPUUUID
		}
		req, _, _ := strings.Cut(d.Request, "/")
		if !slices.Contains(visible[req], id) {
			visible[req] = append(visible[req], id)
		}
	}
	return visible
}

func isVisibleDevices(env string) bool { return strings.HasPrefix(env, "NVIDIA_VISIBLE_DEVICES=") }

func cdiNodes(nodes []DeviceNode) []*cdispec.DeviceNode {
	var out []*cdispec.DeviceNode
	for _, n := range nodes {
		cn := &cdispec.DeviceNode{Path: n.Path, Type: "c", Major: n.Major, Minor: n.Minor}
		if n.FileMode != 0 {
			mode := n.FileMode
			cn.FileMode = &mode
		}
		out = append(out, cn)
	}
	return out
}

// write writes the claim's spec file atomically and returns the qualified
// CDI device names, in the order of devs.
func (w *cdiWriter) write(claimUID string, devs []CDIDevice, common cdispec.ContainerEdits) ([]string, error) {
	if len(devs) == 0 {
		return nil, w.remove(claimUID)
	}
	spec, ids, err := ClaimSpecFrom(claimUID, devs, common)
	if err != nil {
		return nil, err
	}
	if err := w.cache.WriteSpec(spec, specName(claimUID)+".json"); err != nil {
		return nil, fmt.Errorf("dradriver: write CDI spec of claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// remove deletes the claim's spec file; a missing one is not an error.
func (w *cdiWriter) remove(claimUID string) error {
	if err := w.cache.RemoveSpec(specName(claimUID) + ".json"); err != nil {
		return fmt.Errorf("dradriver: remove CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}
