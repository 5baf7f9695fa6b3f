package reservation

import (
	"errors"
	"strconv"
	"strings"
)

// LegacyDevicesAnnotationKey is the pod annotation in which HAMi records
// allocated devices: "UUID,Type,memMiB,cores:" per device and ";" between
// containers. v2.9 MIG pods carry "GPU-<uuid>[<geometry>-<slot>]" there.
const LegacyDevicesAnnotationKey = "hami.io/vgpu-devices-allocated"

// LegacyDevice is one v2.9 template/slot device identifier found in a
// [LegacyDevicesAnnotationKey] value. It is comparable.
type LegacyDevice struct {
	ContainerIndex int    // position of the ';'-separated container group
	DeviceIndex    int    // position of the device within the group
	ID             string // verbatim, "GPU-<uuid>[<geometry>-<slot>]"
	GPUUUID        string // the part before '['
	// Geometry and Slot are the numbers inside the brackets, or -1 when
	// they are not decimal numbers (the identifier is refused either way).
	Geometry, Slot int
}

// LegacyError reports a legacy identifier that cannot be adopted. It
// matches [ErrLegacyIdentifier].
type LegacyError struct {
	Device LegacyDevice
}

func (e *LegacyError) Error() string {
	return "reservation: container " + strconv.Itoa(e.Device.ContainerIndex) +
		" device " + strconv.Itoa(e.Device.DeviceIndex) + ": " + strconv.Quote(e.Device.ID) +
		" is a v2.9 template/slot identifier: it proves no physical placement or runtime identity, not adoptable"
}

// Unwrap returns [ErrLegacyIdentifier].
func (e *LegacyError) Unwrap() error { return ErrLegacyIdentifier }

// IsLegacyIdentifier reports whether id is a v2.9 MIG device identifier
// "GPU-<uuid>[<geometry>-<slot>]": a "GPU-" prefix and a bracketed suffix.
func IsLegacyIdentifier(id string) bool {
	_, ok := parseLegacyID(id)
	return ok
}

func parseLegacyID(id string) (LegacyDevice, bool) {
	open := strings.IndexByte(id, '[')
	if !strings.HasPrefix(id, "GPU-") || open <= len("GPU-") || !strings.HasSuffix(id, "]") {
		return LegacyDevice{}, false
	}
	d := LegacyDevice{ID: id, GPUUUID: id[:open], Geometry: -1, Slot: -1}
	g, s, ok := strings.Cut(id[open+1:len(id)-1], "-")
	if ok && isDecimal(g) && isDecimal(s) {
		gi, err1 := strconv.Atoi(g)
		si, err2 := strconv.Atoi(s)
		if err1 == nil && err2 == nil {
			d.Geometry, d.Slot = gi, si
		}
	}
	return d, true
}

// ParseLegacyDevices scans a [LegacyDevicesAnnotationKey] value for v2.9
// template/slot identifiers. It returns them in order, with an error that
// joins one [*LegacyError] per identifier (nil when there are none).
// Devices with plain GPU UUIDs (HAMi-core sharing) are not reported. The
// scan is lenient about the other comma-separated fields: only the
// identifier matters for refusing adoption.
func ParseLegacyDevices(value string) ([]LegacyDevice, error) {
	var devs []LegacyDevice
	var errs []error
	for ci, group := range strings.Split(value, ";") {
		di := 0
		for _, dev := range strings.Split(group, ":") {
			if strings.TrimSpace(dev) == "" {
				continue
			}
			id, _, _ := strings.Cut(dev, ",")
			if d, ok := parseLegacyID(strings.TrimSpace(id)); ok {
				d.ContainerIndex, d.DeviceIndex = ci, di
				devs = append(devs, d)
				errs = append(errs, &LegacyError{Device: d})
			}
			di++
		}
	}
	return devs, errors.Join(errs...)
}
