package capability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// NodeRegisterAnnotation is the node annotation the device plugin publishes
// its GPUs in.
const NodeRegisterAnnotation = "hami.io/node-nvidia-register"

// jsonSpace is the whitespace JSON allows around values.
const jsonSpace = " \t\r\n"

// Device modes of a [NodeDevice].
const (
	ModeHAMiCore = "hami-core"
	ModeMIG      = "mig"
	ModeMPS      = "mps"
)

// NodeDevice is one element of the hami.io/node-nvidia-register array, with
// the keys in wire order. MIGProfiles carries only the wire fields of each
// [Profile]; the identity fields are zero after decoding.
//
// The zero value is invalid (empty ID and mode).
type NodeDevice struct {
	ID      string `json:"id"`              // GPU UUID
	Index   int    `json:"index,omitempty"` // NVML index; 0 is omitted on the wire
	Count   int32  `json:"count"`           // MIG: the largest instance count among the profiles
	Devmem  int32  `json:"devmem"`          // MiB; MIG: the GPU's full memory
	Devcore int32  `json:"devcore"`         // percent; MIG: 100
	Type    string `json:"type"`            // NVML device name
	NUMA    int    `json:"numa,omitempty"`  // NUMA node; 0 is omitted on the wire
	Mode    string `json:"mode"`            // ModeHAMiCore, ModeMIG or ModeMPS
	// MIGProfiles are the published profiles, MIG mode only.
	MIGProfiles []Profile `json:"migProfiles,omitempty"`
	Health      bool      `json:"health"`
}

// DecodeNodeRegistration decodes and validates a hami.io/node-nvidia-register
// value. Decoding is strict: keys must be spelled exactly, appear once and
// be known (device: id, index, count, devmem, devcore, type, numa, mode,
// migProfiles, health; profile: name, memoryMB, core, sliceCount,
// placements; placement: start, size); all but index, numa and migProfiles
// are required; numbers must be integers in range. A null migProfiles reads
// as absent. Empty input (or only JSON whitespace) and "[]" decode to nil:
// no devices.
//
// Errors are [*RegistrationError] values (joined when there are several)
// naming the device's position in the array and the field.
func DecodeNodeRegistration(data []byte) ([]NodeDevice, error) {
	data = bytes.Trim(data, jsonSpace)
	if len(data) == 0 {
		return nil, nil
	}
	if devs, ok := decodeCanonical(data); ok {
		if err := ValidateNodeRegistration(devs); err != nil {
			return nil, err
		}
		return devs, nil
	}
	return decodeNodeRegistrationStrict(data)
}

// decodeCanonical is the fast path for input exactly as
// [EncodeNodeRegistration] (and the deployed Go device plugin) writes it.
// encoding/json alone is lax (case-insensitive keys, last duplicate wins,
// unknown keys ignored, absent keys zero), but when re-encoding the result
// reproduces the input byte for byte, the input had exactly the wire keys,
// once each, in wire order, so the strict decoder would read the same
// value. Anything else takes the strict path, which also names the problem.
func decodeCanonical(data []byte) ([]NodeDevice, bool) {
	if jsonKind(data) != '[' {
		return nil, false
	}
	var devs []NodeDevice
	if err := json.Unmarshal(data, &devs); err != nil || devs == nil {
		return nil, false
	}
	enc, err := json.Marshal(devs)
	if err != nil || !bytes.Equal(enc, data) {
		return nil, false
	}
	if len(devs) == 0 {
		return nil, true
	}
	return devs, true
}

// decodeNodeRegistrationStrict decodes structurally, key by key.
func decodeNodeRegistrationStrict(data []byte) ([]NodeDevice, error) {
	if !json.Valid(data) {
		return nil, &RegistrationError{Device: -1, Reason: "not valid JSON"}
	}
	elems, err := arrayElems(data)
	if err != nil {
		return nil, &RegistrationError{Device: -1, Reason: "must be a JSON array of devices", Err: err}
	}
	var devs []NodeDevice
	var errs []error
	for i, el := range elems {
		d, devErrs := decodeNodeDevice(i, el)
		if len(devErrs) == 0 {
			// Semantic checks only on devices that decoded, so that a
			// type error is not echoed as a second problem.
			devErrs = validateNodeDevice(i, &d)
		}
		errs = append(errs, devErrs...)
		devs = append(devs, d)
	}
	if err := joinErrs(errs); err != nil {
		return nil, err
	}
	// Cross-device checks (unique ids).
	if err := ValidateNodeRegistration(devs); err != nil {
		return nil, err
	}
	return devs, nil
}

// regErrs collects errors for one device.
type regErrs struct {
	dev  int
	errs []error
}

func (r *regErrs) add(field, reason string, err error) {
	r.errs = append(r.errs, &RegistrationError{Device: r.dev, Field: field, Reason: reason, Err: err})
}

// check records err, if any, as a type error in field.
func (r *regErrs) check(field string, err error) {
	if err != nil {
		r.add(field, "wrong type", err)
	}
}

func decodeNodeDevice(i int, raw json.RawMessage) (NodeDevice, []error) {
	var d NodeDevice
	r := &regErrs{dev: i}
	members, err := objectMembers(raw)
	if err != nil {
		r.add(joinField("", err), "device must be an object without duplicate keys", err)
		return d, r.errs
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		seen[m.Key] = true
		switch m.Key {
		case "id":
			d.ID, err = jsonString(m.Value)
		case "index":
			err = jsonNumber(m.Value, &d.Index)
		case "count":
			err = jsonNumber(m.Value, &d.Count)
		case "devmem":
			err = jsonNumber(m.Value, &d.Devmem)
		case "devcore":
			err = jsonNumber(m.Value, &d.Devcore)
		case "type":
			d.Type, err = jsonString(m.Value)
		case "numa":
			err = jsonNumber(m.Value, &d.NUMA)
		case "mode":
			d.Mode, err = jsonString(m.Value)
		case "migProfiles":
			d.MIGProfiles = decodeWireProfiles(r, m.Value)
			err = nil
		case "health":
			d.Health, err = jsonBool(m.Value)
		default:
			r.add(m.Key, "unknown key", nil)
			continue
		}
		r.check(m.Key, err)
	}
	for _, k := range [...]string{"id", "count", "devmem", "devcore", "type", "mode", "health"} {
		if !seen[k] {
			r.add(k, "missing", nil)
		}
	}
	return d, r.errs
}

func decodeWireProfiles(r *regErrs, raw json.RawMessage) []Profile {
	if isNull(raw) {
		return nil
	}
	elems, err := arrayElems(raw)
	if err != nil {
		r.add("migProfiles", "must be a list of profiles", err)
		return nil
	}
	var out []Profile
	for j, el := range elems {
		out = append(out, decodeWireProfile(r, indexed("migProfiles", j), el))
	}
	return out
}

func decodeWireProfile(r *regErrs, field string, raw json.RawMessage) Profile {
	var p Profile
	members, err := objectMembers(raw)
	if err != nil {
		r.add(joinField(field, err), "profile must be an object without duplicate keys", err)
		return p
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		seen[m.Key] = true
		f := field + "." + m.Key
		switch m.Key {
		case "name":
			p.Name, err = jsonString(m.Value)
		case "memoryMB":
			err = jsonNumber(m.Value, &p.MemoryMB)
		case "core":
			err = jsonNumber(m.Value, &p.Core)
		case "sliceCount":
			err = jsonNumber(m.Value, &p.SliceCount)
		case "placements":
			p.Placements = decodeWirePlacements(r, f, m.Value)
			err = nil
		default:
			r.add(f, "unknown key", nil)
			continue
		}
		r.check(f, err)
	}
	for _, k := range [...]string{"name", "memoryMB", "core", "sliceCount", "placements"} {
		if !seen[k] {
			r.add(field+"."+k, "missing", nil)
		}
	}
	return p
}

func decodeWirePlacements(r *regErrs, field string, raw json.RawMessage) []Placement {
	elems, err := arrayElems(raw)
	if err != nil {
		r.add(field, "must be a list of {start, size}", err)
		return nil
	}
	var out []Placement
	for k, el := range elems {
		f := indexed(field, k)
		var pl Placement
		members, err := objectMembers(el)
		if err != nil {
			r.add(joinField(f, err), "placement must be an object without duplicate keys", err)
			out = append(out, pl)
			continue
		}
		var hasStart, hasSize bool
		for _, m := range members {
			switch m.Key {
			case "start":
				hasStart = true
				r.check(f+".start", jsonNumber(m.Value, &pl.Start))
			case "size":
				hasSize = true
				r.check(f+".size", jsonNumber(m.Value, &pl.Size))
			default:
				r.add(f+"."+m.Key, "unknown key", nil)
			}
		}
		if !hasStart {
			r.add(f+".start", "missing", nil)
		}
		if !hasSize {
			r.add(f+".size", "missing", nil)
		}
		out = append(out, pl)
	}
	return out
}

// EncodeNodeRegistration validates devs with [ValidateNodeRegistration] and
// encodes them as the annotation value, compact JSON with keys in wire
// order. nil encodes as "[]".
func EncodeNodeRegistration(devs []NodeDevice) ([]byte, error) {
	if err := ValidateNodeRegistration(devs); err != nil {
		return nil, err
	}
	if devs == nil {
		devs = []NodeDevice{}
	}
	return json.Marshal(devs)
}

// ValidateNodeRegistration checks every device: a non-empty ID unique in
// the array, non-negative index, count, devmem and devcore, a known mode,
// and in MIG mode devcore 100. migProfiles appear only in MIG mode; each
// has a canonical name ([ParseProfileName]) unique on the device, memory
// > 0, 1..8 compute slices, core <= 100 and at least one placement; every
// placement has size > 0, lies inside the [MaxSlots] grid the bitmaps
// cover and is listed once. Errors are [*RegistrationError] values, joined
// when there are several.
func ValidateNodeRegistration(devs []NodeDevice) error {
	var errs []error
	ids := make(map[string]int, len(devs))
	for i := range devs {
		errs = append(errs, validateNodeDevice(i, &devs[i])...)
		if id := devs[i].ID; id != "" {
			if first, dup := ids[id]; dup {
				errs = append(errs, &RegistrationError{Device: i, Field: "id",
					Reason: fmt.Sprintf("duplicate id %q (also device %d)", id, first)})
			} else {
				ids[id] = i
			}
		}
	}
	return joinErrs(errs)
}

func validateNodeDevice(i int, d *NodeDevice) []error {
	r := &regErrs{dev: i}
	if d.ID == "" {
		r.add("id", "empty", nil)
	}
	if d.Index < 0 {
		r.add("index", "negative", nil)
	}
	if d.Count < 0 {
		r.add("count", "negative", nil)
	}
	if d.Devmem < 0 {
		r.add("devmem", "negative", nil)
	}
	if d.Devcore < 0 {
		r.add("devcore", "negative", nil)
	}
	switch d.Mode {
	case ModeMIG:
		if d.Devcore != 100 {
			r.add("devcore", "must be 100 in MIG mode", nil)
		}
	case ModeHAMiCore, ModeMPS:
		if len(d.MIGProfiles) > 0 {
			r.add("migProfiles", "only allowed in mode "+strconv.Quote(ModeMIG), nil)
		}
	default:
		r.add("mode", fmt.Sprintf("unknown mode %q (want hami-core, mig or mps)", d.Mode), nil)
	}
	names := make(map[string]bool, len(d.MIGProfiles))
	for j := range d.MIGProfiles {
		validateWireProfile(r, indexed("migProfiles", j), &d.MIGProfiles[j], names)
	}
	return r.errs
}

func validateWireProfile(r *regErrs, field string, p *Profile, names map[string]bool) {
	if _, err := ParseProfileName(p.Name); err != nil {
		r.add(field+".name", "malformed profile name", err)
	} else if names[p.Name] {
		r.add(field+".name", fmt.Sprintf("duplicate profile %q", p.Name), nil)
	}
	names[p.Name] = true
	if p.MemoryMB == 0 {
		r.add(field+".memoryMB", "zero", nil)
	}
	if p.SliceCount < 1 || p.SliceCount > 8 {
		r.add(field+".sliceCount", "outside 1..8", nil)
	}
	if p.Core > 100 {
		r.add(field+".core", "above 100 percent", nil)
	}
	if len(p.Placements) == 0 {
		r.add(field+".placements", "empty", nil)
	}
	for k, pl := range p.Placements {
		f := indexed(field+".placements", k)
		switch {
		case pl.Size == 0:
			r.add(f+".size", "zero", nil)
		case !pl.Within(MaxSlots):
			r.add(f, fmt.Sprintf("%v outside the %d-slot grid", pl, MaxSlots), nil)
		case slices.Contains(p.Placements[:k], pl):
			r.add(f, fmt.Sprintf("duplicate placement %v", pl), nil)
		}
	}
}

// NewMIGNodeDevice builds the registration of a GPU in MIG mode as the
// device plugin publishes it: mode "mig", devcore 100, devmem the GPU's
// full memory, count the largest MaxInstances among its profiles, and the
// profiles' wire fields (placements copied). healthy is the device plugin's
// health verdict. It fails with a [*RegistrationError] (Device -1) when the
// GPU is not in MIG mode or its memory does not fit the wire's int32, and
// with the validation error when the result is invalid.
func NewMIGNodeDevice(g GPU, healthy bool) (NodeDevice, error) {
	if g.MIGMode != MIGEnabled {
		return NodeDevice{}, &RegistrationError{Device: -1, Field: "mode",
			Reason: fmt.Sprintf("GPU %d (%s) has MIG %s", g.Index, g.UUID, g.MIGMode)}
	}
	if g.MemoryMB > math.MaxInt32 {
		return NodeDevice{}, &RegistrationError{Device: -1, Field: "devmem",
			Reason: fmt.Sprintf("GPU %d memory %d MiB does not fit int32", g.Index, g.MemoryMB)}
	}
	d := NodeDevice{
		ID: g.UUID, Index: g.Index, Devmem: int32(g.MemoryMB), Devcore: 100,
		Type: g.Name, NUMA: g.NUMA, Mode: ModeMIG, Health: healthy,
	}
	for _, p := range g.Profiles {
		d.Count = max(d.Count, int32(min(p.MaxInstances, math.MaxInt32)))
		d.MIGProfiles = append(d.MIGProfiles, wireProfile(p))
	}
	if err := joinErrs(validateNodeDevice(0, &d)); err != nil {
		return NodeDevice{}, err
	}
	return d, nil
}

// NewMIGNodeDevices builds the registrations of gpus with [NewMIGNodeDevice],
// in order. healthy reports the device plugin's health verdict per GPU; nil
// means every GPU is healthy. Every GPU must be in MIG mode: a GPU that is
// not is an error naming its position (Device), not silently skipped, so
// callers registering a mixed node filter on GPU.MIGMode first.
func NewMIGNodeDevices(gpus []GPU, healthy func(*GPU) bool) ([]NodeDevice, error) {
	devs := make([]NodeDevice, 0, len(gpus))
	var errs []error
	for i := range gpus {
		ok := healthy == nil || healthy(&gpus[i])
		d, err := NewMIGNodeDevice(gpus[i], ok)
		if err != nil {
			errs = append(errs, renumber(err, i))
			continue
		}
		devs = append(devs, d)
	}
	if err := joinErrs(errs); err != nil {
		return nil, err
	}
	if err := ValidateNodeRegistration(devs); err != nil {
		return nil, err
	}
	return devs, nil
}

// renumber sets Device to i on the registration errors in err.
func renumber(err error, i int) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok && !isRegistrationError(err) {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for k, e := range errs {
		if re, ok := e.(*RegistrationError); ok {
			c := *re
			c.Device = i
			errs[k] = &c
		}
	}
	return joinErrs(errs)
}

func isRegistrationError(err error) bool {
	_, ok := err.(*RegistrationError)
	return ok
}

// wireProfile keeps only the wire fields of p.
func wireProfile(p Profile) Profile {
	return Profile{
		Name: p.Name, MemoryMB: p.MemoryMB, Core: p.Core, SliceCount: p.SliceCount,
		Placements: slices.Clone(p.Placements),
	}
}

// GPU converts a registered device back to the capability the scheduler
// works with: UUID from id, Name from type, MemoryMB from devmem, MIGMode
// enabled for mode "mig" (disabled otherwise), and the profiles ordered by
// [CompareProfiles]. Of the profile identity only Variant and
// CIProfileIndex can be derived (from name and sliceCount); GIProfileIndex,
// GIProfileID, MaxInstances and Multiprocessors are not on the wire and are
// zero. It validates d first (errors name Device 0).
func (d NodeDevice) GPU() (GPU, error) {
	if err := joinErrs(validateNodeDevice(0, &d)); err != nil {
		return GPU{}, err
	}
	g := GPU{
		UUID: d.ID, Index: d.Index, Name: d.Type, MemoryMB: uint64(d.Devmem),
		NUMA: d.NUMA, MIGMode: MIGDisabled,
	}
	if d.Mode == ModeMIG {
		g.MIGMode = MIGEnabled
	}
	for _, wp := range d.MIGProfiles {
		p := wireProfile(wp)
		n, _ := ParseProfileName(p.Name) // validated above
		p.Variant = n.Variant
		p.CIProfileIndex, _ = FullCIProfileIndex(p.SliceCount)
		g.Profiles = append(g.Profiles, p)
	}
	SortProfiles(g.Profiles)
	return g, nil
}
