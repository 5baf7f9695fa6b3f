package selfcheck

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/nvmlhal"
)

// Inspector is what [Check] reads the GPUs through; *nvmlhal.Backend is
// one.
type Inspector interface {
	Devices(ctx context.Context) ([]capability.DeviceInfo, error)
	Inspect(ctx context.Context, gpu int) (nvmlhal.Inspection, error)
}

var _ Inspector = (*nvmlhal.Backend)(nil)

// Difference is one value on which the driver and the preset disagree.
type Difference struct {
	Profile string // the profile's name (the preset's), "" for the GPU itself
	Field   string // e.g. "memory MiB", "SMs", "placements"
	Preset  string // what the preset says
	Driver  string // what the driver reports
	// Class says what the difference most likely is.
	Class Class
	// Generation is the preset's driver generation whose table has the
	// driver's value, for [ClassOtherGeneration].
	Generation fakehal.Driver

	index capability.GIProfileIndex // the profile's, -1 for the GPU itself
}

// Class classifies a [Difference]. The zero value is [ClassMismatch], so a
// difference nothing explains is a mismatch.
type Class uint8

const (
	// ClassMismatch: nothing known explains the difference: the preset is
	// wrong for this GPU or the GPU is not the model its name says.
	ClassMismatch Class = iota
	// ClassOtherGeneration: another driver generation of the preset
	// ([fakehal.Model.Older], or the current table when an older one is
	// compared) reports the driver's value; Difference.Generation names it.
	ClassOtherGeneration
	// ClassDrift: memory within 2% of the preset's, or a name whose memory
	// figure differs by 1 GB for the same compute slices and variant: the
	// drift between driver releases that mig-hardware-facts describes.
	ClassDrift
)

// String returns "mismatch", "other driver generation" or "drift".
func (c Class) String() string {
	switch c {
	case ClassMismatch:
		return "mismatch"
	case ClassOtherGeneration:
		return "other driver generation"
	case ClassDrift:
		return "drift"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// ImpliedCI is the compute instance profile implied for a GPU instance
// profile the check could not read one for (no live instance): the one
// spanning the GPU instance with all the SMs the driver reports for the
// GPU instance profile, which is the compute instance fakehal creates. It
// is implied, not measured.
type ImpliedCI struct {
	Profile    string // the GPU instance profile's name
	Index      capability.CIProfileIndex
	SliceCount uint32
	SMs        uint32
}

// Result is the comparison of one GPU with its preset. The zero value is a
// GPU without a preset.
type Result struct {
	GPU           int
	Name          string // NVML device name
	DriverVersion string
	// Preset is the fakehal preset's name, "" when no preset answers to
	// the GPU's name (then every profile is unchecked).
	Preset string
	// Generation is the preset's driver generation compared against: the
	// one with the fewest differences.
	Generation fakehal.Driver
	// Confirmed and Note are the preset's: an unconfirmed preset that
	// matches has just been confirmed.
	Confirmed bool
	Note      string
	// Differences lists every disagreement, GPU first, then by profile
	// index.
	Differences []Difference
	// Unchecked says what a read-only check could not compare.
	Unchecked []string
	// Implied are the compute instance profiles of the profiles without a
	// live GPU instance, as the preset implies them; not measured.
	Implied []ImpliedCI

	noCI []string // profiles without a live GPU instance
}

// OK reports whether the GPU has a preset and matches it.
func (r *Result) OK() bool { return r.Preset != "" && len(r.Differences) == 0 }

// Count returns how many of the differences are of class c.
func (r *Result) Count(c Class) int {
	n := 0
	for _, d := range r.Differences {
		if d.Class == c {
			n++
		}
	}
	return n
}

// Check inspects every GPU and compares each with its preset. It fails
// only when NVML does; differences are in the results.
func Check(ctx context.Context, in Inspector) ([]Result, error) {
	devs, err := in.Devices(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(devs))
	for _, d := range devs {
		got, err := in.Inspect(ctx, d.Index)
		if err != nil {
			return nil, err
		}
		m, ok := fakehal.LookupModel(d.Name)
		if !ok {
			out = append(out, Result{GPU: d.Index, Name: d.Name, DriverVersion: got.DriverVersion,
				Unchecked: []string{"no fakehal preset for this NVML name"}})
			continue
		}
		out = append(out, Compare(m, got))
	}
	return out, nil
}

// Compare compares one inspected GPU with preset m, at each of m's driver
// generations, and returns the closest, each difference classified: a
// value another generation of the preset reports, drift within 2%, or a
// real mismatch (see [Class]).
func Compare(m fakehal.Model, got nvmlhal.Inspection) Result {
	gens := []fakehal.Driver{fakehal.DriverCurrent}
	for _, t := range m.Older {
		gens = append(gens, t.Driver)
	}
	results := make([]Result, len(gens))
	best := 0
	for i, g := range gens {
		results[i] = compareAt(m.ForDriver(g), got)
		results[i].Generation = g
		if len(results[i].Differences) < len(results[best].Differences) {
			best = i
		}
	}
	r := results[best]
	for i := range r.Differences {
		d := &r.Differences[i]
		for j, other := range results {
			if j != best && !other.differs(d.index, d.Field) {
				d.Class, d.Generation = ClassOtherGeneration, other.Generation
				break
			}
		}
		if d.Class == ClassMismatch && drift(d) {
			d.Class = ClassDrift
		}
	}
	return r
}

// differs reports whether r has a difference in field of profile index.
func (r *Result) differs(index capability.GIProfileIndex, field string) bool {
	return slices.ContainsFunc(r.Differences, func(d Difference) bool { return d.index == index && d.Field == field })
}

// drift reports whether d is within the drift between driver releases:
// memory within 2%, or a name whose GB figure is 1 off for the same
// compute slices and variant.
func drift(d *Difference) bool {
	switch d.Field {
	case fieldTotalMemory, fieldMemory:
		p, err1 := strconv.ParseUint(d.Preset, 10, 64)
		v, err2 := strconv.ParseUint(d.Driver, 10, 64)
		if err1 != nil || err2 != nil || p == 0 {
			return false
		}
		delta := max(p, v) - min(p, v)
		return delta*50 <= p // |v-p| <= 2% of p
	case fieldName:
		p, err1 := capability.ParseProfileName(d.Preset)
		v, err2 := capability.ParseProfileName(d.Driver)
		return err1 == nil && err2 == nil && p.Compute == v.Compute && p.Variant == v.Variant &&
			max(p.MemoryGB, v.MemoryGB)-min(p.MemoryGB, v.MemoryGB) <= 1
	}
	return false
}

// Field names of the differences that are classified as drift.
const (
	fieldTotalMemory = "total memory MiB"
	fieldMemory      = "memory MiB"
	fieldName        = "name"
)

func compareAt(m fakehal.Model, got nvmlhal.Inspection) Result {
	r := Result{GPU: got.Device.Index, Name: got.Device.Name, DriverVersion: got.DriverVersion,
		Preset: m.Name, Confirmed: m.Confirmed, Note: m.Note}
	index := capability.GIProfileIndex(-1)
	diff := func(profile, field string, want, have any) {
		w, h := fmt.Sprint(want), fmt.Sprint(have)
		if w != h {
			r.Differences = append(r.Differences, Difference{Profile: profile, Field: field, Preset: w, Driver: h, index: index})
		}
	}
	diff("", fieldTotalMemory, m.MemoryMB, got.Device.MemoryMB)
	reported := map[capability.GIProfileIndex]*nvmlhal.InspectedProfile{}
	for i := range got.Profiles {
		reported[got.Profiles[i].Index] = &got.Profiles[i]
	}
	for _, want := range m.Profiles {
		index = want.Index
		have := reported[want.Index]
		delete(reported, want.Index)
		if have == nil {
			diff(want.Name, "profile", "supported", "not reported")
			continue
		}
		name := have.Name
		if name == "" {
			name = capability.DeriveProfileName(have.Index, have.SliceCount, have.MemoryMB, got.Device.MemoryMB).String()
		}
		diff(want.Name, fieldName, want.Name, name)
		diff(want.Name, "profile ID", want.ID, have.ID)
		diff(want.Name, fieldMemory, want.MemoryMB, have.MemoryMB)
		diff(want.Name, "SMs", want.MultiprocessorCount, have.MultiprocessorCount)
		diff(want.Name, "compute slices", want.SliceCount, have.SliceCount)
		diff(want.Name, "instances", want.InstanceCount, have.InstanceCount)
		diff(want.Name, "placements", placements(want.Placements), placements(have.Placements))
		if m.ProfileEngines != nil {
			e := m.EnginesOf(want.Index)
			diff(want.Name, "media engines", e, fakehal.Engines{Decoders: have.Decoders, Encoders: have.Encoders, JPEG: have.JPEG, OFA: have.OFA})
		}
		r.compareCIs(want, have)
	}
	for _, idx := range slices.Sorted(maps.Keys(reported)) {
		index = idx
		p := reported[idx]
		diff(p.Name, "profile", "absent (index "+strconv.Itoa(int(idx))+")", "reported")
	}
	if len(r.noCI) > 0 {
		r.Unchecked = append(r.Unchecked, "compute instance profiles of "+strings.Join(r.noCI, ", ")+
			" (no live instance to read them from; the check creates none)")
		r.noCI = nil
	}
	return r
}

// compareCIs checks the compute instance profile fakehal creates for the
// profile: the one spanning the GPU instance, with all its SMs.
func (r *Result) compareCIs(want capability.GIProfileInfo, have *nvmlhal.InspectedProfile) {
	idx, _ := capability.FullCIProfileIndex(want.SliceCount)
	if have.ComputeProfiles == nil {
		r.noCI = append(r.noCI, want.Name)
		r.Implied = append(r.Implied, ImpliedCI{Profile: want.Name, Index: idx, SliceCount: have.SliceCount, SMs: have.MultiprocessorCount})
		return
	}
	full := "missing"
	for _, ci := range have.ComputeProfiles {
		if ci.Index == idx {
			full = fmt.Sprintf("%d slices, %d SMs", ci.SliceCount, ci.MultiprocessorCount)
		}
	}
	if w := fmt.Sprintf("%d slices, %d SMs", want.SliceCount, want.MultiprocessorCount); w != full {
		r.Differences = append(r.Differences, Difference{Profile: want.Name, Field: "full compute instance", Preset: w, Driver: full})
	}
}

func placements(ps []capability.Placement) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}

// Write prints results as a table: one line per GPU saying whether it
// matches its preset and how many differences of each [Class] it has, then
// its differences with their class, what was not checked, and the compute
// instance profiles implied for the profiles without a live instance,
// marked "implied, not measured".
func Write(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range results {
		fmt.Fprintf(tw, "GPU %d %q (driver %s): %s\n", r.GPU, r.Name, orUnknown(r.DriverVersion), verdict(&r))
		if len(r.Differences) > 0 {
			fmt.Fprintf(tw, "  profile\tfield\tpreset\tdriver\tclass\n")
			for _, d := range r.Differences {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", orDash(d.Profile), d.Field, d.Preset, d.Driver, className(&d))
			}
		}
		for _, u := range r.Unchecked {
			fmt.Fprintf(tw, "  not checked: %s\n", u)
		}
		for _, c := range r.Implied {
			fmt.Fprintf(tw, "  implied, not measured: %s: compute instance profile %d, %d slice(s), %d SMs\n", c.Profile, c.Index, c.SliceCount, c.SMs)
		}
	}
	return tw.Flush()
}

func verdict(r *Result) string {
	if r.Preset == "" {
		return "no preset"
	}
	s := "preset " + strconv.Quote(r.Preset)
	if r.Generation != fakehal.DriverCurrent {
		s += " (" + r.Generation.String() + " drivers' table)"
	}
	if !r.Confirmed {
		s += ", unconfirmed: " + r.Note
	}
	if len(r.Differences) == 0 {
		return s + ": matches"
	}
	s += ": " + strconv.Itoa(len(r.Differences)) + " differences"
	var parts []string
	for _, c := range []Class{ClassMismatch, ClassOtherGeneration, ClassDrift} {
		if n := r.Count(c); n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+c.String())
		}
	}
	return s + " (" + strings.Join(parts, ", ") + ")"
}

// className is the class column: the generation named for
// ClassOtherGeneration, "drift within 2%" for ClassDrift.
func className(d *Difference) string {
	switch d.Class {
	case ClassOtherGeneration:
		return d.Generation.String() + " drivers' table"
	case ClassDrift:
		return "drift within 2%"
	}
	return d.Class.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
