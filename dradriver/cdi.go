package dradriver

import (
	"fmt"

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
	GPUUUID string // the parent GPU, "GPU-..."
	// MIGUUID is the realized MIG device, "MIG-..."; "" for a device
	// with admin access, which exposes its parent GPU instead.
	MIGUUID string
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

// ClaimSpec returns the CDI spec of a claim's devices: one CDI device per
// MIG device whose container edits set NVIDIA_VISIBLE_DEVICES to its MIG
// UUID (the NVIDIA container runtime hook then exposes exactly that MIG
// device), with its qualified CDI names in the same order.
func ClaimSpec(claimUID string, devs []CDIDevice) (*cdispec.Spec, []string, error) {
	spec := &cdispec.Spec{Kind: CDIKind}
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		name := cdiName(claimUID, d.Device)
		if err := parser.ValidateDeviceName(name); err != nil {
			return nil, nil, fmt.Errorf("driver: CDI device for claim %s device %s: %w", claimUID, d.Device, err)
		}
		visible := d.MIGUUID
		if visible == "" {
			visible = d.GPUUUID
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name: name,
			ContainerEdits: cdispec.ContainerEdits{
				Env: []string{"NVIDIA_VISIBLE_DEVICES=" + visible},
			},
		})
		ids = append(ids, parser.QualifiedName(CDIVendor, CDIClass, name))
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, err
	}
	spec.Version = v
	return spec, ids, nil
}

// write writes the claim's spec file atomically and returns the qualified
// CDI device names, in the order of devs.
func (w *cdiWriter) write(claimUID string, devs []CDIDevice) ([]string, error) {
	if len(devs) == 0 {
		return nil, w.remove(claimUID)
	}
	spec, ids, err := ClaimSpec(claimUID, devs)
	if err != nil {
		return nil, err
	}
	if err := w.cache.WriteSpec(spec, specName(claimUID)+".json"); err != nil {
		return nil, fmt.Errorf("driver: write CDI spec of claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// remove deletes the claim's spec file; a missing one is not an error.
func (w *cdiWriter) remove(claimUID string) error {
	if err := w.cache.RemoveSpec(specName(claimUID) + ".json"); err != nil {
		return fmt.Errorf("driver: remove CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}
