package capability

import (
	"bytes"
	"cmp"
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
// the keys in wire order. As in the deployed device plugin, every key is
// omitted when its value is zero (0, "", false, no profiles) and read as zero
// when absent. MIGProfiles carries only the wire fields of each [Profile];
// the identity fields are zero after decoding.
//
// The zero value is invalid (empty ID).
type NodeDevice struct {
	ID      string `json:"id,omitempty"`      // GPU UUID
	Index   int    `json:"index,omitempty"`   // NVML index
	Count   int32  `json:"count,omitempty"`   // MIG: the largest instance count among the profiles
	Devmem  int32  `json:"devmem,omitempty"`  // MiB; MIG: the GPU's full memory
	Devcore int32  `json:"devcore,omitempty"` // percent; MIG: 100
	Type    string `json:"type,omitempty"`    // NVML device name
	NUMA    int    `json:"numa,omitempty"`    // NUMA node
	// Mode is ModeHAMiCore, ModeMIG or ModeMPS; "" (the key absent) is a
	// device without a mode, which is not MIG.
	Mode string `json:"mode,omitempty"`
	// MIGProfiles are the published profiles, MIG mode only.
	MIGProfiles []Profile `json:"migProfiles,omitempty"`
	// Health is the device plugin's verdict. false, which the deployed
	// plugin writes by leaving the key out, is unhealthy: the GPU's
	// reservations keep their slots but nothing new is placed on it
	// ([GPU.Unhealthy]).
	Health bool `json:"health,omitempty"`
}

// NodeRegistration is a hami.io/node-nvidia-register value read device by
// device ([ReadNodeRegistration]): a device entry that is malformed or
// invalid takes out that GPU only. The zero value is a registration without
// devices.
type NodeRegistration struct {
	// Devices are the entries that decoded and validated, in array order.
	Devices []NodeDevice
	// Rejected says why every other entry was left out, one or more
	// errors per entry, each naming the entry's position in the array
	// (Device) and the field.
	Rejected []*RegistrationError
	// Findings are what was kept but noticed in Devices.
	Findings []RegistrationFinding
}

// Err returns the Rejected errors joined, or nil when every entry was
// usable.
func (r NodeRegistration) Err() error {
	errs := make([]error, len(r.Rejected))
	for i, e := range r.Rejected {
		errs[i] = e
	}
	return joinErrs(errs)
}

// GPUs converts the devices in MIG mode to the capability the scheduler
// works with ([NodeDevice.GPU]), ordered by Index, then UUID: the deployed
// device plugin writes the array in a varying order, and the scheduler's
// choices must not depend on it.
func (r NodeRegistration) GPUs() []GPU {
	var gpus []GPU
	for i := range r.Devices {
		if r.Devices[i].Mode == ModeMIG {
			gpus = append(gpus, r.Devices[i].gpu())
		}
	}
	slices.SortFunc(gpus, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.UUID, b.UUID))
	})
	return gpus
}

// RegistrationFinding is something [ReadNodeRegistration] kept but noticed:
// a profile that publishes no placement ("placements" null or an empty
// list, what the deployed device plugin writes when NVML reports none). The
// profile stays in the registration, so that it round-trips, but it can
// never be placed on that GPU. RegistrationFinding is comparable.
type RegistrationFinding struct {
	Device  int    // position of the device in the array
	ID      string // the device's GPU UUID
	Field   string // e.g. "migProfiles[2].placements"
	Profile string // the profile's name
}

// String describes the finding in one line.
func (f RegistrationFinding) String() string {
	return fmt.Sprintf("device %d (%s) %s: profile %s publishes no placement and cannot be placed on this GPU",
		f.Device, f.ID, f.Field, f.Profile)
}

// ReadNodeRegistration decodes and validates a hami.io/node-nvidia-register
// value device by device, as the deployed scheduler must read it.
//
// Absent keys read as their zero value (false, 0, ""), as the deployed
// device plugin leaves out every zero value: an absent "health" is an
// unhealthy GPU, an absent "index" GPU 0. The deployed struct's keys
// "migtemplate", "devicevendor" and "custominfo" are accepted with any
// value and ignored. Otherwise decoding is strict: keys must be spelled
// exactly, appear once and be known (device: id, index, count, devmem,
// devcore, type, numa, mode, migProfiles, health; profile: name, memoryMB,
// core, sliceCount, placements; placement: start, size); every profile and
// placement key is required, as the deployed plugin always writes them;
// numbers must be integers in range; null reads as absent for migProfiles
// and as no placement for placements, and is refused elsewhere.
//
// A device entry that breaks these rules or [ValidateNodeRegistration]'s
// is left out and described in Rejected; entries sharing an id are all left
// out (the array's order varies between writes, so none of them can be
// preferred). A profile without placements is kept, and listed in Findings.
// Empty input (or only JSON whitespace) and "[]" are a registration without
// devices. The error is a [*RegistrationError] with Device -1 when the
// value as a whole is unusable (not JSON, not an array); the registration
// is then empty.
func ReadNodeRegistration(data []byte) (NodeRegistration, error) {
	return readNodeRegistration(data, true)
}

// DecodeNodeRegistration is [ReadNodeRegistration] for callers that need
// every device: it fails when the value as a whole is unusable or any entry
// was rejected, with the [*RegistrationError] values (joined when there are
// several) naming each device's position in the array and the field. Empty
// input and "[]" decode to nil: no devices.
func DecodeNodeRegistration(data []byte) ([]NodeDevice, error) {
	reg, err := ReadNodeRegistration(data)
	if err != nil {
		return nil, err
	}
	if err := reg.Err(); err != nil {
		return nil, err
	}
	return reg.Devices, nil
}

// readNodeRegistration reads data, trying the canonical fast path first
// when fast is set.
func readNodeRegistration(data []byte, fast bool) (NodeRegistration, error) {
	data = bytes.Trim(data, jsonSpace)
	if len(data) == 0 {
		return NodeRegistration{}, nil
	}
	var entries []NodeDevice
	var errs [][]error // per entry
	ok := false
	if fast {
		entries, ok = decodeCanonical(data)
	}
	if ok {
		errs = make([][]error, len(entries))
		for i := range entries {
			errs[i] = validateNodeDevice(i, &entries[i])
		}
	} else {
		var err error
		if entries, errs, err = decodeEntries(data); err != nil {
			return NodeRegistration{}, err
		}
	}
	return sortEntries(entries, errs), nil
}

// sortEntries splits the decoded entries into usable and rejected ones,
// after the cross-device check for shared ids, and notes the profiles
// without placements of the usable ones.
func sortEntries(entries []NodeDevice, errs [][]error) NodeRegistration {
	for i, e := range duplicateIDs(entries) { // nil when no id repeats
		if e != nil {
			errs[i] = append(errs[i], e)
		}
	}
	var reg NodeRegistration
	usable := 0
	for i := range errs {
		if len(errs[i]) == 0 {
			usable++
		}
	}
	if usable > 0 {
		// Backed by entries when every entry is usable.
		reg.Devices = entries[:0:usable]
		if usable < len(entries) {
			reg.Devices = make([]NodeDevice, 0, usable)
		}
	}
	for i := range entries {
		if len(errs[i]) > 0 {
			for _, e := range errs[i] {
				reg.Rejected = append(reg.Rejected, e.(*RegistrationError))
			}
			continue
		}
		reg.Devices = append(reg.Devices, entries[i])
		for j, p := range entries[i].MIGProfiles {
			if len(p.Placements) == 0 {
				reg.Findings = append(reg.Findings, RegistrationFinding{Device: i, ID: entries[i].ID,
					Field: indexed("migProfiles", j) + ".placements", Profile: p.Name})
			}
		}
	}
	return reg
}

// decodeCanonical is the fast path for input exactly as
// [EncodeNodeRegistration] (and the deployed Go device plugin) writes it.
// encoding/json alone is lax (case-insensitive keys, last duplicate wins,
// unknown keys ignored), but when re-encoding the result reproduces the
// input byte for byte, the input had only wire keys, once each, in wire
// order, so the strict decoder would read the same value. Anything else
// takes the strict path, which also names the problem.
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
	return devs, true
}

// decodeEntries decodes structurally, entry by entry, validating the
// entries that decoded. err is for the array as a whole.
func decodeEntries(data []byte) (entries []NodeDevice, errs [][]error, err error) {
	if !json.Valid(data) {
		return nil, nil, &RegistrationError{Device: -1, Reason: "not valid JSON"}
	}
	elems, err := arrayElems(data)
	if err != nil {
		return nil, nil, &RegistrationError{Device: -1, Reason: "must be a JSON array of devices", Err: err}
	}
	entries = make([]NodeDevice, len(elems))
	errs = make([][]error, len(elems))
	for i, el := range elems {
		r := &regErrs{dev: i}
		entries[i] = r.readDevice(el)
		if len(r.errs) == 0 {
			// Semantic checks only on entries that decoded, so that a
			// type error is not echoed as a second problem.
			r.errs = validateNodeDevice(i, &entries[i])
		}
		errs[i] = r.errs
	}
	return entries, errs, nil
}

// regErrs collects errors for one device.
type regErrs struct {
	dev  int
	errs []error
}

func (r *regErrs) add(field, reason string, err error) {
	r.errs = append(r.errs, &RegistrationError{Device: r.dev, Field: field, Reason: reason, Err: err})
}

// wireField is one key an object accepts: read stores its value (nil
// accepts any value and ignores it), reporting a type error; required keys
// must be present.
type wireField struct {
	key      string
	required bool
	read     func(json.RawMessage) error
}

// readObject reads the object raw, found at path, member by member into
// fields. It reports a value that is not an object or has a duplicate key
// (naming what the object is), a key fields do not list, a value read
// refuses and a required key that is absent, each as an error in the
// member's field.
func (r *regErrs) readObject(path, what string, raw json.RawMessage, fields []wireField) {
	members, err := objectMembers(raw)
	if err != nil {
		r.add(joinField(path, err), what+" must be an object without duplicate keys", err)
		return
	}
	var seen uint64 // bit i: fields[i] present
	for _, m := range members {
		i := slices.IndexFunc(fields, func(f wireField) bool { return f.key == m.Key })
		if i < 0 {
			r.add(member(path, m.Key), "unknown key", nil)
			continue
		}
		seen |= 1 << i
		if fields[i].read == nil {
			continue
		}
		if err := fields[i].read(m.Value); err != nil {
			r.add(member(path, m.Key), "wrong type", err)
		}
	}
	for i, f := range fields {
		if f.required && seen&(1<<i) == 0 {
			r.add(member(path, f.key), "missing", nil)
		}
	}
}

// member is the field path of key inside the object at path.
func member(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (r *regErrs) readDevice(raw json.RawMessage) NodeDevice {
	var d NodeDevice
	r.readObject("", "device", raw, []wireField{
		{key: "id", read: stringInto(&d.ID)},
		{key: "index", read: numberInto(&d.Index)},
		{key: "count", read: numberInto(&d.Count)},
		{key: "devmem", read: numberInto(&d.Devmem)},
		{key: "devcore", read: numberInto(&d.Devcore)},
		{key: "type", read: stringInto(&d.Type)},
		{key: "numa", read: numberInto(&d.NUMA)},
		{key: "mode", read: stringInto(&d.Mode)},
		{key: "migProfiles", read: func(v json.RawMessage) error {
			d.MIGProfiles = r.readProfiles(v)
			return nil
		}},
		{key: "health", read: func(v json.RawMessage) (err error) {
			d.Health, err = jsonBool(v)
			return err
		}},
		// In the deployed struct, never filled for NVIDIA GPUs.
		{key: "migtemplate"}, {key: "devicevendor"}, {key: "custominfo"},
	})
	return d
}

func (r *regErrs) readProfiles(raw json.RawMessage) []Profile {
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
		out = append(out, r.readProfile(indexed("migProfiles", j), el))
	}
	return out
}

func (r *regErrs) readProfile(path string, raw json.RawMessage) Profile {
	var p Profile
	r.readObject(path, "profile", raw, []wireField{
		{key: "name", required: true, read: stringInto(&p.Name)},
		{key: "memoryMB", required: true, read: numberInto(&p.MemoryMB)},
		{key: "core", required: true, read: numberInto(&p.Core)},
		{key: "sliceCount", required: true, read: numberInto(&p.SliceCount)},
		{key: "placements", required: true, read: func(v json.RawMessage) error {
			p.Placements = r.readPlacements(path+".placements", v)
			return nil
		}},
	})
	return p
}

// readPlacements reads a placement list; null is nil and [] an empty
// list, kept apart so that both re-encode as they came.
func (r *regErrs) readPlacements(path string, raw json.RawMessage) []Placement {
	if isNull(raw) {
		return nil
	}
	elems, err := arrayElems(raw)
	if err != nil {
		r.add(path, "must be a list of {start, size}", err)
		return nil
	}
	out := make([]Placement, len(elems))
	for k, el := range elems {
		pl := &out[k]
		r.readObject(indexed(path, k), "placement", el, []wireField{
			{key: "start", required: true, read: numberInto(&pl.Start)},
			{key: "size", required: true, read: numberInto(&pl.Size)},
		})
	}
	return out
}

// stringInto reads a JSON string into dst.
func stringInto(dst *string) func(json.RawMessage) error {
	return func(v json.RawMessage) (err error) {
		*dst, err = jsonString(v)
		return err
	}
}

// numberInto reads a JSON integer into dst.
func numberInto[T ~int | ~int32 | ~uint32 | ~uint64](dst *T) func(json.RawMessage) error {
	return func(v json.RawMessage) error { return jsonNumber(v, dst) }
}

// EncodeNodeRegistration validates devs with [ValidateNodeRegistration] and
// encodes them as the annotation value, compact JSON with keys in wire order
// and zero values left out, exactly as the deployed device plugin writes
// them (so an unhealthy GPU has no "health" key). nil encodes as "[]".
func EncodeNodeRegistration(devs []NodeDevice) ([]byte, error) {
	if err := ValidateNodeRegistration(devs); err != nil {
		return nil, err
	}
	if devs == nil {
		devs = []NodeDevice{}
	}
	return json.Marshal(devs)
}

// ValidateNodeRegistration checks every device: a non-empty ID no other
// device has, non-negative index, count, devmem and devcore, a known mode
// or none, and in MIG mode devcore 100. migProfiles appear only in MIG
// mode; each has a canonical name ([ParseProfileName]) unique on the
// device, memory > 0 that fits the deployed reader's int32 (at most
// 2147483647 MiB), 1..8 compute slices and core <= 100; every placement
// has size > 0, lies inside the [MaxSlots] grid the bitmaps cover and is
// listed once. A profile may have no placement: it is valid on the wire,
// but can never be placed. Errors are [*RegistrationError] values, joined
// when there are several; every device sharing an id gets one.
func ValidateNodeRegistration(devs []NodeDevice) error {
	var errs []error
	dups := duplicateIDs(devs)
	for i := range devs {
		errs = append(errs, validateNodeDevice(i, &devs[i])...)
		if dups != nil && dups[i] != nil {
			errs = append(errs, dups[i])
		}
	}
	return joinErrs(errs)
}

// duplicateIDs returns, per device, an error when another device has the
// same non-empty id, else nil; nil when no id repeats.
func duplicateIDs(devs []NodeDevice) []error {
	count := make(map[string]int, len(devs))
	repeated := false
	for i := range devs {
		if id := devs[i].ID; id != "" {
			count[id]++
			repeated = repeated || count[id] > 1
		}
	}
	if !repeated {
		return nil
	}
	out := make([]error, len(devs))
	for i := range devs {
		id := devs[i].ID
		if count[id] < 2 {
			continue
		}
		var same []int
		for j := range devs {
			if devs[j].ID == id {
				same = append(same, j)
			}
		}
		out[i] = &RegistrationError{Device: i, Field: "id",
			Reason: fmt.Sprintf("duplicate id %q (devices %v)", id, same)}
	}
	return out
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
	case ModeHAMiCore, ModeMPS, "":
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
	switch {
	case p.MemoryMB == 0:
		r.add(field+".memoryMB", "zero", nil)
	case p.MemoryMB > math.MaxInt32:
		// The deployed reader's int32 would refuse the whole value.
		r.add(field+".memoryMB", fmt.Sprintf("%d MiB above %d, the deployed reader's int32", p.MemoryMB, math.MaxInt32), nil)
	}
	if p.SliceCount < 1 || p.SliceCount > 8 {
		r.add(field+".sliceCount", "outside 1..8", nil)
	}
	if p.Core > 100 {
		r.add(field+".core", "above 100 percent", nil)
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
// health verdict; a GPU marked [GPU.Unhealthy] is published unhealthy
// whatever it says. It fails with a [*RegistrationError] (Device -1) when
// the GPU is not in MIG mode or its memory does not fit the wire's int32,
// with one naming the profile when a profile has no placement (discovery
// never yields one: publishing it would only show the scheduler a profile
// it can never place), and with the validation error when the result is
// invalid, a profile's memory above 2147483647 MiB among others.
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
		Type: g.Name, NUMA: g.NUMA, Mode: ModeMIG, Health: healthy && !g.Unhealthy,
	}
	var errs []error
	for j, p := range g.Profiles {
		if len(p.Placements) == 0 {
			errs = append(errs, &RegistrationError{Device: -1, Field: indexed("migProfiles", j) + ".placements",
				Reason: fmt.Sprintf("profile %s has no placement", p.Name)})
		}
		d.Count = max(d.Count, int32(min(p.MaxInstances, math.MaxInt32)))
		d.MIGProfiles = append(d.MIGProfiles, wireProfile(p))
	}
	errs = append(errs, validateNodeDevice(0, &d)...)
	if err := joinErrs(errs); err != nil {
		return NodeDevice{}, err
	}
	return d, nil
}

// NewMIGNodeDevices builds the registrations of gpus with [NewMIGNodeDevice],
// in order. healthy reports the device plugin's health verdict per GPU; nil
// means every GPU not marked [GPU.Unhealthy] is healthy. Every GPU must be in MIG mode: a GPU that is
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

// ModelTable is one GPU model's profile table as a driver reports it: the
// device name, its memory in MiB and every GPU instance profile, the input
// from which [GPUFromDevice] builds a GPU of that model. Test generators
// take tables as input so that they need no hardware backend.
type ModelTable struct {
	Name     string
	MemoryMB uint64
	Profiles []GIProfileInfo
}

// MIGNodeDevices is the lenient counterpart of [NewMIGNodeDevices] that a
// publisher uses: each GPU is converted with [NewMIGNodeDevice], healthy
// unless marked [GPU.Unhealthy], and a GPU that cannot be converted (MIG
// disabled, memory out of range) is left out and described in skipped, one
// error per GPU naming its index and UUID, so that it does not keep the
// others from being scheduled.
func MIGNodeDevices(gpus []GPU) (devs []NodeDevice, skipped []error) {
	devs = make([]NodeDevice, 0, len(gpus))
	for _, g := range gpus {
		d, err := NewMIGNodeDevice(g, !g.Unhealthy)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("capability: GPU %d (%s) not published: %w", g.Index, g.UUID, err))
			continue
		}
		devs = append(devs, d)
	}
	return devs, skipped
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
// enabled for mode "mig" (disabled otherwise), Unhealthy when health is
// false, and the profiles ordered by [CompareProfiles] (a profile without
// placements is kept, and never fits). Of the profile identity only Variant
// and CIProfileIndex can be derived (from name and sliceCount);
// GIProfileIndex, GIProfileID, MaxInstances and Multiprocessors are not on
// the wire and are zero. It validates d first (errors name Device 0).
func (d NodeDevice) GPU() (GPU, error) {
	if err := joinErrs(validateNodeDevice(0, &d)); err != nil {
		return GPU{}, err
	}
	return d.gpu(), nil
}

// gpu is GPU for a validated device.
func (d *NodeDevice) gpu() GPU {
	g := GPU{
		UUID: d.ID, Index: d.Index, Name: d.Type, MemoryMB: uint64(d.Devmem),
		NUMA: d.NUMA, MIGMode: MIGDisabled, Unhealthy: !d.Health,
	}
	if d.Mode == ModeMIG {
		g.MIGMode = MIGEnabled
	}
	for _, wp := range d.MIGProfiles {
		p := wireProfile(wp)
		n, _ := ParseProfileName(p.Name) // validated
		p.Variant = n.Variant
		p.CIProfileIndex, _ = FullCIProfileIndex(p.SliceCount)
		g.Profiles = append(g.Profiles, p)
	}
	SortProfiles(g.Profiles)
	return g
}
