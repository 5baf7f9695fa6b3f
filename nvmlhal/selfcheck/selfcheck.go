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

	noCI []string // profiles without a live GPU instance
}

// OK reports whether the GPU has a preset and matches it.
func (r *Result) OK() bool { return r.Preset != "" && len(r.Differences) == 0 }

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
// generations, and returns the closest.
func Compare(m fakehal.Model, got nvmlhal.Inspection) Result {
	gens := []fakehal.Driver{fakehal.DriverCurrent}
	for _, t := range m.Older {
		gens = append(gens, t.Driver)
	}
	var best Result
	for i, g := range gens {
		r := compareAt(m.ForDriver(g), got)
		r.Generation = g
		if i == 0 || len(r.Differences) < len(best.Differences) {
			best = r
		}
	}
	return best
}

func compareAt(m fakehal.Model, got nvmlhal.Inspection) Result {
	r := Result{GPU: got.Device.Index, Name: got.Device.Name, DriverVersion: got.DriverVersion,
		Preset: m.Name, Confirmed: m.Confirmed, Note: m.Note}
	diff := func(profile, field string, want, have any) {
		w, h := fmt.Sprint(want), fmt.Sprint(have)
		if w != h {
			r.Differences = append(r.Differences, Difference{Profile: profile, Field: field, Preset: w, Driver: h})
		}
	}
	diff("", "total memory MiB", m.MemoryMB, got.Device.MemoryMB)
	reported := map[capability.GIProfileIndex]*nvmlhal.InspectedProfile{}
	for i := range got.Profiles {
		reported[got.Profiles[i].Index] = &got.Profiles[i]
	}
	for _, want := range m.Profiles {
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
		diff(want.Name, "name", want.Name, name)
		diff(want.Name, "profile ID", want.ID, have.ID)
		diff(want.Name, "memory MiB", want.MemoryMB, have.MemoryMB)
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
	if have.ComputeProfiles == nil {
		r.noCI = append(r.noCI, want.Name)
		return
	}
	idx, _ := capability.FullCIProfileIndex(want.SliceCount)
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
// matches its preset, then its differences and what was not checked.
func Write(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range results {
		fmt.Fprintf(tw, "GPU %d %q (driver %s): %s\n", r.GPU, r.Name, orUnknown(r.DriverVersion), verdict(&r))
		if len(r.Differences) > 0 {
			fmt.Fprintf(tw, "  profile\tfield\tpreset\tdriver\n")
			for _, d := range r.Differences {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", orDash(d.Profile), d.Field, d.Preset, d.Driver)
			}
		}
		for _, u := range r.Unchecked {
			fmt.Fprintf(tw, "  not checked: %s\n", u)
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
	return s + ": " + strconv.Itoa(len(r.Differences)) + " differences"
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
