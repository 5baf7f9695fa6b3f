package reservationtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
)

// wireDevice is shaped like the deployed device plugin's struct: every key
// omitempty, in wire order.
type wireDevice struct {
	ID          string        `json:"id,omitempty"`
	Index       int           `json:"index,omitempty"`
	Count       int32         `json:"count,omitempty"`
	Devmem      int32         `json:"devmem,omitempty"`
	Devcore     int32         `json:"devcore,omitempty"`
	Type        string        `json:"type,omitempty"`
	NUMA        int           `json:"numa,omitempty"`
	Mode        string        `json:"mode,omitempty"`
	MIGProfiles []wireProfile `json:"migProfiles,omitempty"`
	Health      bool          `json:"health,omitempty"`
}

type wireProfile struct {
	Name       string          `json:"name"`
	MemoryMB   uint64          `json:"memoryMB"`
	Core       uint32          `json:"core"`
	SliceCount uint32          `json:"sliceCount"`
	Placements []wirePlacement `json:"placements"`
}

// WireEncodeRegistration is the reference writer of node registrations:
// encoding/json over a struct shaped like the deployed one, every key
// left out when zero (an unhealthy GPU has no "health", GPU 0 no
// "index"). nil and empty write "[]".
func WireEncodeRegistration(devs []capability.NodeDevice) string {
	out := make([]wireDevice, len(devs))
	for i, d := range devs {
		w := wireDevice{ID: d.ID, Index: d.Index, Count: d.Count, Devmem: d.Devmem, Devcore: d.Devcore, Type: d.Type,
			NUMA: d.NUMA, Mode: d.Mode, Health: d.Health}
		for _, p := range d.MIGProfiles {
			wp := wireProfile{Name: p.Name, MemoryMB: p.MemoryMB, Core: p.Core, SliceCount: p.SliceCount}
			for _, pl := range p.Placements {
				wp.Placements = append(wp.Placements, wirePlacement{Start: pl.Start, Size: pl.Size})
			}
			w.MIGProfiles = append(w.MIGProfiles, wp)
		}
		out[i] = w
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// RegistrationGen draws a valid hami.io/node-nvidia-register device list of
// 1..4 devices in shuffled array order: MIG GPUs of the models in tables
// (which must not be empty; fakehal.Tables gives the built-in ones; all
// profiles or only plain ones, healthy or not) built with
// capability.NewMIGNodeDevice, and now and then a non-MIG device
// (hami-core, mps or no mode). Indexes are distinct and include 0, NUMA
// nodes are 0 or 1, IDs are distinct.
func RegistrationGen(tables []capability.ModelTable) *rapid.Generator[[]capability.NodeDevice] {
	return rapid.Custom(func(t *rapid.T) []capability.NodeDevice { return drawRegistration(t, tables) })
}

// registration prints as its wire value in rapid's log.
type registration []capability.NodeDevice

func (r registration) GoString() string { return WireEncodeRegistration(r) }

func drawRegistration(t *rapid.T, models []capability.ModelTable) []capability.NodeDevice {
	n := rapid.IntRange(1, 4).Draw(t, "devices")
	ids := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) string { return "GPU-" + hexUUID(t, "id") }), n, n, rapid.ID).Draw(t, "ids")
	var devs []capability.NodeDevice
	for i := range n {
		numa := rapid.IntRange(0, 1).Draw(t, "numa")
		if rapid.IntRange(0, 4).Draw(t, "non-MIG") == 0 {
			devs = append(devs, capability.NodeDevice{ID: ids[i], Index: i, Count: int32(rapid.IntRange(0, 10).Draw(t, "count")),
				Devmem: int32(rapid.IntRange(0, 81920).Draw(t, "devmem")), Devcore: int32(rapid.IntRange(0, 100).Draw(t, "devcore")),
				Type: "NVIDIA T4", NUMA: numa, Mode: rapid.SampledFrom([]string{"", capability.ModeHAMiCore, capability.ModeMPS}).Draw(t, "mode"),
				Health: rapid.Bool().Draw(t, "health")})
			continue
		}
		m := models[rapid.IntRange(0, len(models)-1).Draw(t, "model")]
		g, _ := capability.GPUFromDevice(capability.DeviceInfo{Index: i, UUID: ids[i], Name: m.Name, MemoryMB: m.MemoryMB,
			NUMA: numa, MIGMode: capability.MIGEnabled}, m.Profiles)
		if !rapid.Bool().Draw(t, "variants") {
			g.Profiles = slices.DeleteFunc(g.Profiles, func(p capability.Profile) bool { return p.Variant != capability.VariantNone })
		}
		d, err := capability.NewMIGNodeDevice(g, rapid.Bool().Draw(t, "healthy"))
		if err != nil {
			t.Fatalf("model %s does not register: %v", m.Name, err)
		}
		devs = append(devs, d)
	}
	order := rapid.Permutation(indexes(len(devs))).Draw(t, "array order")
	out := make([]capability.NodeDevice, len(devs))
	for i, k := range order {
		out[i] = devs[k]
	}
	// Logs the value, as it goes on the wire, with the draws.
	rapid.Just(registration(out)).Draw(t, "registration")
	return out
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// RegistrationMutant is a valid registration with one device broken: the
// value a strict reader gets and the device it must refuse.
type RegistrationMutant struct {
	Name   string
	Device int // array position of the broken device, -1 for the array
	Value  string
}

// String shows the mutation and the value.
func (m RegistrationMutant) String() string {
	return fmt.Sprintf("%s (device %d)\n  %s", m.Name, m.Device, m.Value)
}

// GoString is String, so that rapid's log of a drawn mutant is readable.
func (m RegistrationMutant) GoString() string { return m.String() }

type regMutation struct {
	name  string
	apply func(devs []capability.NodeDevice, i int) (string, bool)
}

// objectText edits device i's JSON object text with edit.
func objectText(devs []capability.NodeDevice, i int, edit func(obj string) (string, bool)) (string, bool) {
	parts := make([]string, len(devs))
	for k := range devs {
		v := WireEncodeRegistration(devs[k : k+1])
		parts[k] = v[1 : len(v)-1]
	}
	obj, ok := edit(parts[i])
	if !ok {
		return "", false
	}
	parts[i] = obj
	return "[" + strings.Join(parts, ",") + "]", true
}

func textEdit(name string, edit func(obj string) (string, bool)) regMutation {
	return regMutation{name, func(devs []capability.NodeDevice, i int) (string, bool) { return objectText(devs, i, edit) }}
}

func valueEdit(name string, edit func(d *capability.NodeDevice) bool) regMutation {
	return regMutation{name, func(devs []capability.NodeDevice, i int) (string, bool) {
		c := slices.Clone(devs)
		c[i].MIGProfiles = slices.Clone(c[i].MIGProfiles)
		for k := range c[i].MIGProfiles {
			c[i].MIGProfiles[k].Placements = slices.Clone(c[i].MIGProfiles[k].Placements)
		}
		if !edit(&c[i]) {
			return "", false
		}
		return WireEncodeRegistration(c), true
	}}
}

var regMutations = []regMutation{
	textEdit("unknown key", func(o string) (string, bool) { return `{"extra":1,` + o[1:], true }),
	textEdit("key in another case", func(o string) (string, bool) {
		return strings.Replace(o, `"id":`, `"ID":`, 1), strings.Contains(o, `"id":`)
	}),
	textEdit("duplicate key", func(o string) (string, bool) { return `{"type":"x",` + o[1:], true }),
	textEdit("number as a string", func(o string) (string, bool) {
		return strings.Replace(o, `"devcore":100`, `"devcore":"100"`, 1), strings.Contains(o, `"devcore":100`)
	}),
	textEdit("fractional memory", func(o string) (string, bool) {
		i := strings.Index(o, `"memoryMB":`)
		if i < 0 {
			return "", false
		}
		i += len(`"memoryMB":`)
		j := i + strings.IndexAny(o[i:], ",}")
		return o[:j] + ".5" + o[j:], true
	}),
	textEdit("profile without its core key", func(o string) (string, bool) {
		i := strings.Index(o, `"core":`)
		if i < 0 {
			return "", false
		}
		j := i + strings.IndexByte(o[i:], ',')
		return o[:i] + o[j+1:], true
	}),
	{"duplicate id", func(devs []capability.NodeDevice, i int) (string, bool) {
		c := append(slices.Clone(devs), devs[i])
		c[len(c)-1].Index = len(devs) + 7
		return WireEncodeRegistration(c), true
	}},
	valueEdit("empty id", func(d *capability.NodeDevice) bool { d.ID = ""; return true }),
	valueEdit("negative devmem", func(d *capability.NodeDevice) bool { d.Devmem = -1; return true }),
	valueEdit("MIG devcore below 100", func(d *capability.NodeDevice) bool {
		d.Devcore = 50
		return d.Mode == capability.ModeMIG
	}),
	valueEdit("unknown mode", func(d *capability.NodeDevice) bool { d.Mode = "vgpu"; return true }),
	valueEdit("profiles outside MIG mode", func(d *capability.NodeDevice) bool {
		if d.Mode == capability.ModeMIG {
			return false
		}
		d.MIGProfiles = []capability.Profile{{Name: "1g.5gb", MemoryMB: 4864, Core: 14, SliceCount: 1, Placements: []capability.Placement{{Start: 0, Size: 1}}}}
		return true
	}),
	valueEdit("malformed profile name", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 {
			return false
		}
		d.MIGProfiles[0].Name = strings.ToUpper(d.MIGProfiles[0].Name)
		return true
	}),
	valueEdit("duplicate profile", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 {
			return false
		}
		d.MIGProfiles = append(d.MIGProfiles, d.MIGProfiles[0])
		return true
	}),
	valueEdit("empty placement", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 || len(d.MIGProfiles[0].Placements) == 0 {
			return false
		}
		d.MIGProfiles[0].Placements[0].Size = 0
		return true
	}),
	valueEdit("placement beyond the grid", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 || len(d.MIGProfiles[0].Placements) == 0 {
			return false
		}
		d.MIGProfiles[0].Placements[0] = capability.Placement{Start: capability.MaxSlots, Size: 1}
		return true
	}),
	valueEdit("repeated placement", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 || len(d.MIGProfiles[0].Placements) == 0 {
			return false
		}
		d.MIGProfiles[0].Placements = append(d.MIGProfiles[0].Placements, d.MIGProfiles[0].Placements[0])
		return true
	}),
	valueEdit("nine compute slices", func(d *capability.NodeDevice) bool {
		if len(d.MIGProfiles) == 0 {
			return false
		}
		d.MIGProfiles[0].SliceCount = 9
		return true
	}),
}

// RegistrationMutantGen draws a registration from [RegistrationGen] with
// one device broken in a way a strict reader must refuse with
// capability.ErrRegistration: unknown, misspelled or duplicate keys,
// wrong JSON types, a missing profile key, a duplicate id, and values
// capability.ValidateNodeRegistration refuses.
func RegistrationMutantGen(tables []capability.ModelTable) *rapid.Generator[RegistrationMutant] {
	return rapid.Custom(func(t *rapid.T) RegistrationMutant {
		devs := drawRegistration(t, tables)
		for {
			m := regMutations[rapid.IntRange(0, len(regMutations)-1).Draw(t, "mutation")]
			i := rapid.IntRange(0, len(devs)-1).Draw(t, "device")
			if v, ok := m.apply(devs, i); ok {
				return RegistrationMutant{Name: m.name, Device: i, Value: v}
			}
		}
	})
}

// RegistrationCodec is a node registration codec under test.
type RegistrationCodec struct {
	// Read decodes and validates a value strictly: it fails, with an
	// error matching capability.ErrRegistration, when any device is
	// malformed or invalid.
	Read func(value []byte) ([]capability.NodeDevice, error)
	// Write encodes devices as the annotation value.
	Write func(devs []capability.NodeDevice) ([]byte, error)
}

// StrictRegistration is this module's registration codec:
// capability.DecodeNodeRegistration and capability.EncodeNodeRegistration.
func StrictRegistration() RegistrationCodec {
	return RegistrationCodec{Read: capability.DecodeNodeRegistration, Write: capability.EncodeNodeRegistration}
}

// wireFields keeps only the wire fields of devices, the ones a reader can
// recover.
func wireFields(devs []capability.NodeDevice) []capability.NodeDevice {
	out := slices.Clone(devs)
	for i := range out {
		ps := make([]capability.Profile, len(out[i].MIGProfiles))
		for k, p := range out[i].MIGProfiles {
			ps[k] = capability.Profile{Name: p.Name, MemoryMB: p.MemoryMB, Core: p.Core, SliceCount: p.SliceCount, Placements: p.Placements}
		}
		if len(ps) == 0 {
			ps = nil
		}
		out[i].MIGProfiles = ps
	}
	return out
}

// CheckRegistration checks c on a valid device list: Write gives exactly
// the reference bytes ([WireEncodeRegistration]) and Read of them gives
// the devices' wire fields back, in array order.
func CheckRegistration(c RegistrationCodec, devs []capability.NodeDevice) error {
	want := WireEncodeRegistration(devs)
	got, err := c.Write(slices.Clone(devs))
	if err != nil {
		return fmt.Errorf("the writer refused a valid registration: %w\n%s", err, want)
	}
	if string(got) != want {
		return fmt.Errorf("the writer is not byte compatible:\n got %s\nwant %s", got, want)
	}
	back, err := c.Read([]byte(want))
	if err != nil {
		return fmt.Errorf("the reader refused a valid registration: %w\n%s", err, want)
	}
	if !reflect.DeepEqual(wireFields(back), wireFields(devs)) {
		return fmt.Errorf("the reader gave %+v\nfrom %s", back, want)
	}
	return nil
}

// CheckRegistrationMutant checks that c's reader refuses m with
// capability.ErrRegistration.
func CheckRegistrationMutant(c RegistrationCodec, m RegistrationMutant) error {
	got, err := c.Read([]byte(m.Value))
	switch {
	case err == nil:
		return fmt.Errorf("the reader accepted %s\ngot %+v", m, got)
	case !errors.Is(err, capability.ErrRegistration):
		return fmt.Errorf("the reader refused with %v, want an error matching capability.ErrRegistration: %s", err, m)
	}
	return nil
}

// RegistrationProperty returns the registration suite as a rapid property.
func RegistrationProperty(c RegistrationCodec, tables []capability.ModelTable) func(*rapid.T) {
	mutants := RegistrationMutantGen(tables)
	return func(t *rapid.T) {
		if err := CheckRegistration(c, drawRegistration(t, tables)); err != nil {
			t.Fatal(err)
		}
		if err := CheckRegistrationMutant(c, mutants.Draw(t, "mutant")); err != nil {
			t.Fatal(err)
		}
	}
}

// CheckRegistrationCodec runs [RegistrationProperty] with rapid.Check,
// drawing MIG GPUs from tables (fakehal.Tables gives the built-in models).
func CheckRegistrationCodec(t *testing.T, c RegistrationCodec, tables []capability.ModelTable) {
	t.Helper()
	rapid.Check(t, RegistrationProperty(c, tables))
}
