package dradriver

import (
	"errors"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/capability"
)

// Partition is one MIG device the driver can publish: a GPU instance
// profile at an exact placement, covering the memory slots
// [Placement.Start, Placement.Start+Placement.Size) (half-open) of the GPU
// with UUID GPUUUID. Partition is comparable; its device name is
// [Partition.DeviceName].
type Partition struct {
	GPUUUID   string // "GPU-" and a lower-case RFC 4122 UUID
	Profile   string // canonical profile name, e.g. "1g.6gb+me"
	Placement capability.Placement
}

// String returns the device name, or a description of p when p has none.
func (p Partition) String() string {
	if n, err := p.DeviceName(); err == nil {
		return n
	}
	return p.GPUUUID + "/" + p.Profile + "@" + p.Placement.String()
}

// ErrDeviceName is wrapped by every [*DeviceNameError].
var ErrDeviceName = errors.New("dradriver: malformed device name")

// DeviceNameError reports a device name that does not decode, or a
// partition that has no device name.
type DeviceNameError struct {
	Name   string // the device name, or the partition's description
	Reason string
}

func (e *DeviceNameError) Error() string {
	return "dradriver: device name " + strconv.Quote(e.Name) + ": " + e.Reason
}

// Unwrap returns [ErrDeviceName].
func (e *DeviceNameError) Unwrap() error { return ErrDeviceName }

// variantTags spell the profile variants in device names, where only
// lower-case letters, digits and '-' are allowed: "+me" is "me",
// "+me.all" "meall", "-me" "nome" and "+gfx" "gfx".
var variantTags = map[capability.Variant]string{
	capability.VariantNone:  "",
	capability.VariantME:    "me",
	capability.VariantMEAll: "meall",
	capability.VariantNoME:  "nome",
	capability.VariantGFX:   "gfx",
}

const (
	namePrefix = "mig-"
	uuidLen    = 36 // 8-4-4-4-12 hex digits
	gpuPrefix  = "GPU-"
)

// DeviceName returns the partition's DRA device name:
//
//	mig-<GPU UUID without "GPU-">-<G>g<M>gb<variant>-<start>-<size>
//
// for example "mig-5e1b2c3d-0000-4000-8000-000000000001-1g6gbme-3-1" for
// a 1g.6gb+me instance at slot 3 of that GPU. The name is a DNS label (at
// most 62 characters) that names the GPU by UUID, so a device name keeps
// its meaning when GPUs are renumbered, and [ParseDeviceName] inverts it.
// It fails with a [*DeviceNameError] for a GPU UUID that is not "GPU-"
// and a lower-case UUID, a profile name that is not canonical
// ([capability.ParseProfileName]), or a placement that is empty or ends
// beyond [capability.MaxSlots].
func (p Partition) DeviceName() (string, error) {
	bad := func(reason string) (string, error) {
		return "", &DeviceNameError{Name: p.GPUUUID + "/" + p.Profile + "@" + p.Placement.String(), Reason: reason}
	}
	uuid, ok := strings.CutPrefix(p.GPUUUID, gpuPrefix)
	if !ok || !isUUID(uuid) {
		return bad(`GPU UUID is not "GPU-" and a lower-case UUID`)
	}
	pn, err := capability.ParseProfileName(p.Profile)
	if err != nil {
		return bad("profile name is not canonical")
	}
	if !p.Placement.Within(capability.MaxSlots) {
		return bad("placement is empty or ends beyond the slot grid")
	}
	var b strings.Builder
	b.Grow(62)
	b.WriteString(namePrefix)
	b.WriteString(uuid)
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(uint64(pn.Compute), 10))
	b.WriteByte('g')
	b.WriteString(strconv.FormatUint(uint64(pn.MemoryGB), 10))
	b.WriteString("gb")
	b.WriteString(variantTags[pn.Variant])
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(uint64(p.Placement.Start), 10))
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(uint64(p.Placement.Size), 10))
	return b.String(), nil
}

// ParseDeviceName decodes a device name made by [Partition.DeviceName]. It
// accepts exactly the names DeviceName makes (no leading zeros, no upper
// case), so a decoded partition's DeviceName is the input again. A name
// that does not decode is a [*DeviceNameError]. Decoding says nothing
// about whether the node publishes the partition: see [Catalog.Lookup].
func ParseDeviceName(name string) (Partition, error) {
	bad := func(reason string) (Partition, error) {
		return Partition{}, &DeviceNameError{Name: name, Reason: reason}
	}
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return bad(`want prefix "mig-"`)
	}
	if len(rest) < uuidLen+1 || !isUUID(rest[:uuidLen]) || rest[uuidLen] != '-' {
		return bad("want a lower-case GPU UUID after the prefix")
	}
	uuid, rest := rest[:uuidLen], rest[uuidLen+1:]
	fields := strings.Split(rest, "-")
	if len(fields) != 3 {
		return bad("want <profile>-<start>-<size> after the GPU UUID")
	}
	profile, ok := decodeProfile(fields[0])
	if !ok {
		return bad("malformed profile")
	}
	start, ok1 := parseSlot(fields[1])
	size, ok2 := parseSlot(fields[2])
	pl := capability.Placement{Start: start, Size: size}
	if !ok1 || !ok2 || !pl.Within(capability.MaxSlots) {
		return bad("malformed placement")
	}
	return Partition{GPUUUID: gpuPrefix + uuid, Profile: profile, Placement: pl}, nil
}

// decodeProfile turns "1g6gbme" back into "1g.6gb+me".
func decodeProfile(s string) (string, bool) {
	g, rest, ok := strings.Cut(s, "g")
	if !ok {
		return "", false
	}
	m, tag, ok := strings.Cut(rest, "gb")
	if !ok {
		return "", false
	}
	name := g + "g." + m + "gb"
	found := false
	for v, t := range variantTags {
		if t == tag {
			name += v.Suffix()
			found = true
			break
		}
	}
	if !found {
		return "", false
	}
	pn, err := capability.ParseProfileName(name)
	if err != nil || pn.String() != name {
		return "", false
	}
	return name, true
}

// parseSlot parses a slot number without sign or leading zeros.
func parseSlot(s string) (uint32, bool) {
	if s == "" || len(s) > 2 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var v uint32
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + uint32(s[i]-'0')
	}
	return v, true
}

// isUUID reports whether s is a lower-case 8-4-4-4-12 hex UUID.
func isUUID(s string) bool {
	if len(s) != uuidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
