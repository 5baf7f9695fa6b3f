package reservationtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// Mutant is a valid record broken in one way: the value and device
// requests a strict reader gets, and the sentinel it must return.
type Mutant struct {
	// Name says what was broken, for example "overlapping entry".
	Name string
	// Entry is the array position of the entry concerned.
	Entry int
	// Value is the annotation value; DeviceRequests the pod's requests.
	Value          string
	DeviceRequests []int
	// Want is the sentinel the reader's error must match with errors.Is:
	// a reservation decoding kind (ErrRange, ErrUnknownKey...), a
	// validation problem (ErrOverlap, ErrDuplicateEntry,
	// ErrRuntimeConflict...) or ErrNotRequested.
	Want error
}

// String shows the mutation, the sentinel and the value.
func (m Mutant) String() string {
	return fmt.Sprintf("%s (entry %d), want %v; device requests %v\n  %s", m.Name, m.Entry, m.Want, m.DeviceRequests, m.Value)
}

// GoString is String, so that rapid's log of a drawn mutant is readable.
func (m Mutant) GoString() string { return m.String() }

// kv is one key of a JSON object with its raw value, in writing order.
type kv struct{ key, raw string }

func raw(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fieldsOf lists the keys of a as the reference writer writes them.
func fieldsOf(a reservation.Allocation) []kv {
	f := []kv{{"containerIndex", strconv.Itoa(a.ContainerIndex)}, {"deviceIndex", strconv.Itoa(a.DeviceIndex)},
		{"gpuUUID", raw(a.GPUUUID)}, {"profile", raw(a.Profile)},
		{"placement", fmt.Sprintf(`{"start":%d,"size":%d}`, a.Placement.Start, a.Placement.Size)}}
	if a.MIGUUID != "" {
		f = append(f, kv{"migUUID", raw(a.MIGUUID)})
	}
	if a.GPUInstanceID.Valid {
		f = append(f, kv{"gpuInstanceID", strconv.FormatUint(uint64(a.GPUInstanceID.ID), 10)})
	}
	if a.ComputeInstanceID.Valid {
		f = append(f, kv{"computeInstanceID", strconv.FormatUint(uint64(a.ComputeInstanceID.ID), 10)})
	}
	return f
}

func render(objs [][]kv) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, o := range objs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for j, f := range o {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(f.key))
			b.WriteByte(':')
			b.WriteString(f.raw)
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String()
}

func objectsOf(allocs []reservation.Allocation) [][]kv {
	objs := make([][]kv, len(allocs))
	for i, a := range allocs {
		objs[i] = fieldsOf(a)
	}
	return objs
}

func setRaw(o []kv, key, v string) []kv {
	o = slices.Clone(o)
	for i := range o {
		if o[i].key == key {
			o[i].raw = v
		}
	}
	return o
}

// mutation is one way to break a record. apply returns false when the
// record has nothing to break that way.
type mutation struct {
	name  string
	want  error
	apply func(t *rapid.T, r Record, i int) (Mutant, bool)
}

// textual breaks entry i's JSON text with edit.
func textual(name string, want error, edit func(t *rapid.T, o []kv) []kv) mutation {
	return mutation{name, want, func(t *rapid.T, r Record, i int) (Mutant, bool) {
		objs := objectsOf(r.Allocations)
		objs[i] = edit(t, objs[i])
		return Mutant{Value: render(objs), DeviceRequests: r.DeviceRequests}, true
	}}
}

// semantic changes the entries (and maybe the requests) and writes them
// with the reference writer.
func semantic(name string, want error, edit func(t *rapid.T, r *Record, i int) bool) mutation {
	return mutation{name, want, func(t *rapid.T, r Record, i int) (Mutant, bool) {
		c := r.Clone()
		if !edit(t, &c, i) {
			return Mutant{}, false
		}
		return Mutant{Value: WireEncode(c.Allocations), DeviceRequests: c.DeviceRequests}, true
	}}
}

var mutations = []mutation{
	textual("negative deviceIndex", reservation.ErrRange, func(_ *rapid.T, o []kv) []kv { return setRaw(o, "deviceIndex", "-1") }),
	textual("containerIndex beyond int32", reservation.ErrRange, func(_ *rapid.T, o []kv) []kv { return setRaw(o, "containerIndex", "2147483648") }),
	textual("fractional size", reservation.ErrRange, func(_ *rapid.T, o []kv) []kv {
		return setRaw(o, "placement", `{"start":0,"size":1.0}`)
	}),
	textual("unknown key", reservation.ErrUnknownKey, func(_ *rapid.T, o []kv) []kv { return append([]kv{{"extra", "1"}}, o...) }),
	textual("key in another case", reservation.ErrUnknownKey, func(_ *rapid.T, o []kv) []kv {
		o = slices.Clone(o)
		o[3].key = "Profile"
		return o
	}),
	textual("duplicate key", reservation.ErrDuplicateKey, func(_ *rapid.T, o []kv) []kv { return append(slices.Clone(o), o[3]) }),
	textual("null gpuUUID", reservation.ErrType, func(_ *rapid.T, o []kv) []kv { return setRaw(o, "gpuUUID", "null") }),
	textual("index as a string", reservation.ErrType, func(_ *rapid.T, o []kv) []kv { return setRaw(o, "containerIndex", `"0"`) }),
	textual("missing scheduler key", reservation.ErrMissingField, func(t *rapid.T, o []kv) []kv {
		k := rapid.IntRange(0, 4).Draw(t, "dropped key")
		return slices.Delete(slices.Clone(o), k, k+1)
	}),
	{"trailing data", reservation.ErrTrailingData, func(_ *rapid.T, r Record, _ int) (Mutant, bool) {
		return Mutant{Value: r.Value() + "[]", DeviceRequests: r.DeviceRequests}, true
	}},
	{"truncated", reservation.ErrSyntax, func(_ *rapid.T, r Record, _ int) (Mutant, bool) {
		v := r.Value()
		return Mutant{Value: v[:len(v)-1], DeviceRequests: r.DeviceRequests}, true
	}},
	{"object instead of array", reservation.ErrType, func(_ *rapid.T, r Record, i int) (Mutant, bool) {
		v := render([][]kv{fieldsOf(r.Allocations[i])})
		return Mutant{Value: v[1 : len(v)-1], DeviceRequests: r.DeviceRequests}, true
	}},
	semantic("duplicate entry", reservation.ErrDuplicateEntry, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations = append(r.Allocations, r.Allocations[i].Scheduled())
		return true
	}),
	semantic("overlapping entry", reservation.ErrOverlap, func(_ *rapid.T, r *Record, i int) bool {
		a := r.Allocations[i].Scheduled()
		a.DeviceIndex = r.DeviceRequests[a.ContainerIndex]
		r.DeviceRequests[a.ContainerIndex]++
		r.Allocations = append(r.Allocations, a)
		return true
	}),
	semantic("forged runtime identity", reservation.ErrRuntimeConflict, func(t *rapid.T, r *Record, i int) bool {
		id, ok := r.Allocations[i].Runtime()
		if !ok || len(r.Allocations) < 2 {
			return false
		}
		j := rapid.IntRange(0, len(r.Allocations)-2).Draw(t, "forger")
		if j >= i {
			j++
		}
		r.Allocations[j] = r.Allocations[j].Scheduled().WithRuntime(id)
		return true
	}),
	semantic("partial runtime identity", reservation.ErrPartialRuntime, func(_ *rapid.T, r *Record, i int) bool {
		a := &r.Allocations[i]
		if a.ComputeInstanceID.Valid {
			a.ComputeInstanceID = reservation.OptionalID{}
		} else {
			a.GPUInstanceID = reservation.SomeID(0)
		}
		return true
	}),
	semantic("empty GPU UUID", reservation.ErrGPUUUID, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations[i].GPUUUID = ""
		return true
	}),
	semantic("legacy device identifier", reservation.ErrLegacyIdentifier, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations[i].GPUUUID = "GPU-0a1b2c3d[1-0]"
		return true
	}),
	semantic("malformed profile", reservation.ErrProfile, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations[i].Profile = strings.ToUpper(r.Allocations[i].Profile)
		return true
	}),
	semantic("empty placement", reservation.ErrPlacement, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations[i].Placement.Size = 0
		return true
	}),
	semantic("placement beyond the grid", reservation.ErrPlacement, func(_ *rapid.T, r *Record, i int) bool {
		r.Allocations[i].Placement = capability.Placement{Start: capability.MaxSlots, Size: 1}
		return true
	}),
	semantic("malformed MIG UUID", reservation.ErrMIGUUID, func(_ *rapid.T, r *Record, i int) bool {
		a := &r.Allocations[i]
		if a.MIGUUID == "" {
			return false
		}
		a.MIGUUID += "0" // thirteen hex digits in the last group
		return true
	}),
	semantic("legacy MIG UUID", reservation.ErrLegacyIdentifier, func(_ *rapid.T, r *Record, i int) bool {
		a := &r.Allocations[i]
		if a.MIGUUID == "" {
			return false
		}
		a.MIGUUID = "MIG-GPU-0a1b2c3d-0000-0000-0000-000000000000/1/0"
		return true
	}),
	semantic("container requests no device", reservation.ErrNotRequested, func(_ *rapid.T, r *Record, i int) bool {
		r.DeviceRequests[r.Allocations[i].ContainerIndex] = 0
		return true
	}),
	semantic("container requests fewer devices", reservation.ErrNotRequested, func(_ *rapid.T, r *Record, i int) bool {
		r.DeviceRequests[r.Allocations[i].ContainerIndex]--
		return true
	}),
	semantic("pod requests nothing", reservation.ErrNotRequested, func(_ *rapid.T, r *Record, _ int) bool {
		r.DeviceRequests = nil
		return true
	}),
	semantic("entry for an unlisted container", reservation.ErrNotRequested, func(_ *rapid.T, r *Record, i int) bool {
		a := &r.Allocations[i]
		r.DeviceRequests[a.ContainerIndex]--
		a.ContainerIndex, a.DeviceIndex = len(r.DeviceRequests), 0
		return true
	}),
}

// MutationNames lists every mutation [MutantGen] may draw.
func MutationNames() []string {
	names := make([]string, len(mutations))
	for i, m := range mutations {
		names[i] = m.name
	}
	return names
}

// MutantGen draws a [Mutant] of a record drawn with [RecordGen]: one of
// the mutations ([MutationNames]) applied to one entry. Records without
// entries are redrawn.
func MutantGen() *rapid.Generator[Mutant] {
	return mutantGen(RecordGen(0))
}

// MutantGenOn is [MutantGen] over records from [RecordGenOn] on gpus.
func MutantGenOn(gpus []string) *rapid.Generator[Mutant] {
	return mutantGen(RecordGenOn(gpus, 0))
}

func mutantGen(records *rapid.Generator[Record]) *rapid.Generator[Mutant] {
	records = records.Filter(func(r Record) bool { return len(r.Allocations) > 0 })
	return rapid.Custom(func(t *rapid.T) Mutant {
		r := records.Draw(t, "record")
		for {
			m := mutations[rapid.IntRange(0, len(mutations)-1).Draw(t, "mutation")]
			i := rapid.IntRange(0, len(r.Allocations)-1).Draw(t, "entry")
			if mu, ok := m.apply(t, r, i); ok {
				mu.Name, mu.Entry, mu.Want = m.name, i, m.want
				return mu
			}
		}
	})
}
