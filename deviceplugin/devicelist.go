package deviceplugin

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// DeviceListStrategy says how an Allocate response hands a container its
// MIG devices; the names are those of NVIDIA's device plugin
// (-device-list-strategy). The zero value is [DeviceListEnvVar].
type DeviceListStrategy string

const (
	// DeviceListEnvVar sets [VisibleDevicesEnv] to the MIG UUIDs. The
	// NVIDIA container toolkit in legacy mode acts on it; so does it on a
	// pod that sets the variable itself (see the package documentation,
	// "Device lists").
	DeviceListEnvVar DeviceListStrategy = "envvar"
	// DeviceListVolumeMounts sets [VisibleDevicesEnv] to
	// [VolumeMountsRoot] and mounts /dev/null at VolumeMountsRoot/<MIG
	// UUID> per device, which the toolkit reads instead of the variable
	// with accept-nvidia-visible-devices-as-volume-mounts = true.
	DeviceListVolumeMounts DeviceListStrategy = "volume-mounts"
	// DeviceListCDICRI names each device's CDI device, [CDIKind]=<MIG
	// UUID>, in the response's CDIDevices (device plugin API v1beta1,
	// Kubernetes 1.29 and later); the container runtime applies the
	// plugin's CDI spec of the instance (Config.CDIDir).
	DeviceListCDICRI DeviceListStrategy = "cdi-cri"
	// DeviceListCDIAnnotations names the same CDI devices in the
	// container annotation CDI defines ("cdi.k8s.io/..."), for runtimes
	// that resolve CDI devices from annotations.
	DeviceListCDIAnnotations DeviceListStrategy = "cdi-annotations"
)

// VolumeMountsRoot is the directory under which [DeviceListVolumeMounts]
// mounts one file per device, and the value of [VisibleDevicesEnv] that
// tells the NVIDIA container toolkit to read it.
const VolumeMountsRoot = "/var/run/nvidia-container-devices"

// CDI names of the MIG devices the plugin hands out under a CDI strategy:
// "<CDIVendor>/<CDIClass>=<MIG UUID>". The vendor differs from the DRA
// driver's, so the two never define the same device.
const (
	CDIVendor = "dynmig.io"
	CDIClass  = "mig"
	CDIKind   = CDIVendor + "/" + CDIClass
)

// CDIAnnotationPlugin is the plugin name in the CDI annotation key
// [DeviceListCDIAnnotations] sets: "cdi.k8s.io/dynmig_<first MIG UUID>".
const CDIAnnotationPlugin = "dynmig"

// ErrDeviceListStrategy: the device list strategy is not one of the
// DeviceList constants.
var ErrDeviceListStrategy = errors.New("deviceplugin: unknown device list strategy")

// DeviceListStrategies lists the strategies in the order flags show them.
func DeviceListStrategies() []DeviceListStrategy {
	return []DeviceListStrategy{DeviceListEnvVar, DeviceListVolumeMounts, DeviceListCDICRI, DeviceListCDIAnnotations}
}

// ParseDeviceListStrategy returns the strategy named s; "" is
// [DeviceListEnvVar].
func ParseDeviceListStrategy(s string) (DeviceListStrategy, error) {
	if s == "" {
		return DeviceListEnvVar, nil
	}
	for _, d := range DeviceListStrategies() {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrDeviceListStrategy, s)
}

// CDI reports whether the strategy hands out CDI device names, which need
// the plugin's CDI specs.
func (d DeviceListStrategy) CDI() bool {
	return d == DeviceListCDICRI || d == DeviceListCDIAnnotations
}

// CDIName returns the qualified CDI device name of a MIG device:
// "<CDIKind>=<MIG UUID>". A MIG UUID names one instance from its creation
// to its destruction, so a runtime never resolves a name to a spec of
// another instance.
func CDIName(migUUID string) string {
	return parser.QualifiedName(CDIVendor, CDIClass, migUUID)
}

// containerResponse is the Allocate response of one container given the
// MIG devices uuids under strategy d (which [New] checked).
func containerResponse(d DeviceListStrategy, uuids []string) (*v1beta1.ContainerAllocateResponse, error) {
	out := &v1beta1.ContainerAllocateResponse{}
	switch d {
	case DeviceListVolumeMounts:
		out.Envs = map[string]string{VisibleDevicesEnv: VolumeMountsRoot}
		for _, u := range uuids {
			out.Mounts = append(out.Mounts, &v1beta1.Mount{
				HostPath: "/dev/null", ContainerPath: path.Join(VolumeMountsRoot, u),
			})
		}
	case DeviceListCDICRI:
		for _, u := range uuids {
			out.CdiDevices = append(out.CdiDevices, &v1beta1.CDIDevice{Name: CDIName(u)})
		}
	case DeviceListCDIAnnotations:
		if len(uuids) == 0 {
			break
		}
		names := make([]string, len(uuids))
		for i, u := range uuids {
			names[i] = CDIName(u)
		}
		// The first instance's UUID makes the key unique per container.
		a, err := cdi.UpdateAnnotations(nil, CDIAnnotationPlugin, uuids[0], names)
		if err != nil {
			return nil, fmt.Errorf("deviceplugin: CDI annotation for %v: %w", uuids, err)
		}
		out.Annotations = a
	default:
		out.Envs = map[string]string{VisibleDevicesEnv: strings.Join(uuids, ",")}
	}
	return out, nil
}
