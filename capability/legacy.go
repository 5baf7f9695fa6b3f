package capability

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// LegacyTemplate is one MIG instance of a v2.9 geometry in
// nvidia.knownMigGeometries: a profile name and how many instances of it the
// geometry holds. Core and Memory are what v2.9 accounted; conversion only
// keeps Name.
type LegacyTemplate struct {
	Name   string `json:"name"`
	Core   int32  `json:"core"`
	Memory int32  `json:"memory"`
	Count  int32  `json:"count"`
}

// LegacyEntry is one element of nvidia.knownMigGeometries: the whole-GPU
// geometries v2.9 may switch a GPU to when its device name contains one of
// Models.
type LegacyEntry struct {
	Models            []string           `json:"models"`
	AllowedGeometries [][]LegacyTemplate `json:"allowedGeometries"`
}

// LegacyGeometries is nvidia.knownMigGeometries from a v2.9 device config.
type LegacyGeometries []LegacyEntry

const legacyPath = "nvidia." + keyLegacy

// ParseLegacyGeometries reads nvidia.knownMigGeometries from a device config
// document (YAML or JSON), with the same structural strictness as
// [ParseDeviceConfig]: exact keys (entries: models, allowedGeometries;
// templates: name, core, memory, count), the right types, integers in
// range. name is required; core, memory and count default to 0. A null or
// empty list anywhere reads as nil. Whether names are valid profile names is
// not checked here: [ConvertLegacy] reports the ones it cannot convert.
//
// A document without knownMigGeometries is a [*ConfigError] for that path.
func ParseLegacyGeometries(data []byte) (LegacyGeometries, error) {
	nvidia, err := nvidiaSection(data)
	if err != nil {
		return nil, err
	}
	for _, m := range nvidia {
		if m.Key == keyLegacy {
			return decodeLegacy(m.Value)
		}
	}
	return nil, &ConfigError{Path: legacyPath, Entry: -1, Reason: "absent: nothing to convert"}
}

func legacyError(i int, field, reason string, err error) *ConfigError {
	path := legacyPath
	if i >= 0 {
		path += "[" + strconv.Itoa(i) + "]"
	}
	if field != "" {
		path += "." + field
	}
	return &ConfigError{Path: path, Entry: i, Field: field, Reason: reason, Err: err}
}

// nullableList is arrayElems that reads null as an empty list.
func nullableList(raw json.RawMessage) ([]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	return arrayElems(raw)
}

func decodeLegacy(raw json.RawMessage) (LegacyGeometries, error) {
	elems, err := nullableList(raw)
	if err != nil {
		return nil, legacyError(-1, "", "must be a list of {models, allowedGeometries}", err)
	}
	var out LegacyGeometries
	var errs []error
	for i, el := range elems {
		e, entryErrs := decodeLegacyEntry(i, el)
		errs = append(errs, entryErrs...)
		out = append(out, e)
	}
	if err := joinErrs(errs); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeLegacyEntry(i int, raw json.RawMessage) (LegacyEntry, []error) {
	var e LegacyEntry
	members, err := objectMembers(raw)
	if err != nil {
		return e, []error{legacyError(i, joinField("", err), "entry must be a mapping with models and allowedGeometries", err)}
	}
	var errs []error
	for _, m := range members {
		switch m.Key {
		case "models":
			elems, err := nullableList(m.Value)
			if err != nil {
				errs = append(errs, legacyError(i, m.Key, "must be a list of strings", err))
				continue
			}
			for j, el := range elems {
				s, err := jsonString(el)
				if err != nil {
					errs = append(errs, legacyError(i, indexed(m.Key, j), "must be a string", err))
				}
				e.Models = append(e.Models, s)
			}
		case "allowedGeometries":
			var geoErrs []error
			e.AllowedGeometries, geoErrs = decodeGeometries(i, m.Value)
			errs = append(errs, geoErrs...)
		default:
			errs = append(errs, legacyError(i, m.Key, fmt.Sprintf("unknown key %q (want models, allowedGeometries)", m.Key), nil))
		}
	}
	return e, errs
}

func decodeGeometries(i int, raw json.RawMessage) ([][]LegacyTemplate, []error) {
	const field = "allowedGeometries"
	geos, err := nullableList(raw)
	if err != nil {
		return nil, []error{legacyError(i, field, "must be a list of geometries", err)}
	}
	var out [][]LegacyTemplate
	var errs []error
	for g, rawGeo := range geos {
		gField := indexed(field, g)
		tmpls, err := nullableList(rawGeo)
		if err != nil {
			errs = append(errs, legacyError(i, gField, "a geometry must be a list of {name, core, memory, count}", err))
			out = append(out, nil)
			continue
		}
		var geo []LegacyTemplate
		for t, rawT := range tmpls {
			tmpl, tErrs := decodeTemplate(i, indexed(gField, t), rawT)
			errs = append(errs, tErrs...)
			geo = append(geo, tmpl)
		}
		out = append(out, geo)
	}
	return out, errs
}

func decodeTemplate(i int, field string, raw json.RawMessage) (LegacyTemplate, []error) {
	var t LegacyTemplate
	members, err := objectMembers(raw)
	if err != nil {
		return t, []error{legacyError(i, joinField(field, err), "template must be a mapping {name, core, memory, count}", err)}
	}
	var errs []error
	hasName := false
	for _, m := range members {
		f := field + "." + m.Key
		var err error
		switch m.Key {
		case "name":
			hasName = true
			t.Name, err = jsonString(m.Value)
		case "core":
			err = jsonNumber(m.Value, &t.Core)
		case "memory":
			err = jsonNumber(m.Value, &t.Memory)
		case "count":
			err = jsonNumber(m.Value, &t.Count)
		default:
			errs = append(errs, legacyError(i, f, fmt.Sprintf("unknown key %q (want name, core, memory, count)", m.Key), nil))
			continue
		}
		if err != nil {
			errs = append(errs, legacyError(i, f, "wrong type", err))
		}
	}
	if !hasName {
		errs = append(errs, legacyError(i, field+".name", "missing", nil))
	}
	return t, errs
}

// LegacyEntryReport says what [ConvertLegacy] made of one
// knownMigGeometries entry.
type LegacyEntryReport struct {
	// Entry is the index in knownMigGeometries.
	Entry int
	// AllowlistEntry is the index of the converted entry in the resulting
	// Allowlist, or -1 when the entry was dropped.
	AllowlistEntry int
	// Models are the models carried over (empty and duplicate strings
	// removed).
	Models []string
	// Profiles are the converted profile names: the union over all the
	// entry's geometries in order of first appearance.
	Profiles []string
	// InvalidProfiles are names that are not canonical profile names (see
	// [ParseProfileName]) and were left out, each once.
	InvalidProfiles []string
	// InvalidModels are model strings left out: the empty string (it would
	// match every GPU) and duplicates.
	InvalidModels []string
	// Dropped says why the entry was not converted, or "" when it was.
	Dropped string
}

// LegacyReport is the account of a [ConvertLegacy] run, one report per
// knownMigGeometries entry in order.
type LegacyReport struct {
	Entries []LegacyEntryReport
}

// Clean reports whether everything was converted: no entry dropped, no
// name or model left out.
func (r LegacyReport) Clean() bool {
	for _, e := range r.Entries {
		if e.Dropped != "" || len(e.InvalidProfiles) > 0 || len(e.InvalidModels) > 0 {
			return false
		}
	}
	return true
}

// ConvertLegacy turns v2.9 knownMigGeometries into the equivalent
// migProfileAllowlist: one entry per legacy entry with the same models and
// the union of the profile names of all its geometries, in order of first
// appearance. Instance counts, memory and core are dropped: geometry is no
// longer policy, NVML placements are. Names that are not canonical profile
// names are left out and reported; an entry left without models or
// profiles is dropped and reported. The result passes
// [Allowlist.Validate]. Entry order is kept, so first-match semantics are
// unchanged.
func ConvertLegacy(g LegacyGeometries) (Allowlist, LegacyReport) {
	out := Allowlist{}
	report := LegacyReport{Entries: make([]LegacyEntryReport, 0, len(g))}
	for i, e := range g {
		r := convertLegacyEntry(i, e)
		if r.Dropped == "" {
			r.AllowlistEntry = len(out)
			out = append(out, AllowlistEntry{
				Models:   append([]string(nil), r.Models...),
				Profiles: append([]string(nil), r.Profiles...),
			})
		}
		report.Entries = append(report.Entries, r)
	}
	return out, report
}

func convertLegacyEntry(i int, e LegacyEntry) LegacyEntryReport {
	r := LegacyEntryReport{Entry: i, AllowlistEntry: -1}
	seenModel := make(map[string]bool)
	for _, m := range e.Models {
		if m == "" || seenModel[m] {
			r.InvalidModels = append(r.InvalidModels, m)
			continue
		}
		seenModel[m] = true
		r.Models = append(r.Models, m)
	}
	seen := make(map[string]bool)
	for _, geo := range e.AllowedGeometries {
		for _, t := range geo {
			if seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			if _, err := ParseProfileName(t.Name); err != nil {
				r.InvalidProfiles = append(r.InvalidProfiles, t.Name)
				continue
			}
			r.Profiles = append(r.Profiles, t.Name)
		}
	}
	switch {
	case len(r.Models) == 0:
		r.Dropped = "no usable models"
	case len(r.Profiles) == 0:
		r.Dropped = "no valid profile names"
	}
	return r
}
