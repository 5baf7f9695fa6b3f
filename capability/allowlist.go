package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// AllowlistEntry is one element of the scheduler device config's
// nvidia.migProfileAllowlist: the GPU instance profiles cluster policy
// allows on GPUs whose NVML device name contains one of Models.
type AllowlistEntry struct {
	// Models are substrings of the NVML device name, compared
	// case-sensitively as the deployed scheduler does.
	Models []string `json:"models"`
	// Profiles are canonical profile names (see [ParseProfileName]) in the
	// order the policy lists them.
	Profiles []string `json:"profiles"`
}

// Allowlist is nvidia.migProfileAllowlist: the policy saying which profiles
// each GPU model may publish. It decides what the cluster permits, not what
// a GPU can do: capacity always comes from NVML (see [Discover]).
//
// A nil or empty Allowlist allows nothing. Allowlist values are read-only
// after construction and safe for concurrent reads.
type Allowlist []AllowlistEntry

// Match returns the index of the entry that applies to the NVML device name
// deviceName and the model string that matched, using the deployed rule:
// an entry applies when any of its models is a substring of the device
// name, and the first such entry wins. ok is false when no entry applies.
func (a Allowlist) Match(deviceName string) (entry int, model string, ok bool) {
	for i, e := range a {
		for _, m := range e.Models {
			if m != "" && strings.Contains(deviceName, m) {
				return i, m, true
			}
		}
	}
	return -1, "", false
}

// Profiles returns the profile names allowed on a GPU named deviceName, or
// nil when no entry applies. The result aliases the Allowlist.
func (a Allowlist) Profiles(deviceName string) []string {
	if i, _, ok := a.Match(deviceName); ok {
		return a[i].Profiles
	}
	return nil
}

// Allows reports whether policy allows profile on a GPU named deviceName.
func (a Allowlist) Allows(deviceName, profile string) bool {
	for _, p := range a.Profiles(deviceName) {
		if p == profile {
			return true
		}
	}
	return false
}

// Clone returns a deep copy of a.
func (a Allowlist) Clone() Allowlist {
	if a == nil {
		return nil
	}
	out := make(Allowlist, len(a))
	for i, e := range a {
		out[i] = AllowlistEntry{
			Models:   append([]string(nil), e.Models...),
			Profiles: append([]string(nil), e.Profiles...),
		}
	}
	return out
}

// Validate checks a as [ParseDeviceConfig] does: every entry has at least
// one non-empty, unique model and at least one profile; profile names are
// canonical ([ParseProfileName]) and unique within their entry. The error is
// a [*ConfigError] (joined with errors.Join when there are several) naming
// the entry and field.
func (a Allowlist) Validate() error {
	var errs []error
	for i, e := range a {
		errs = append(errs, validateEntry(i, e)...)
	}
	return joinErrs(errs)
}

const allowlistPath = "nvidia.migProfileAllowlist"

func entryError(i int, field, reason string, err error) *ConfigError {
	path := allowlistPath + "[" + strconv.Itoa(i) + "]"
	if field != "" {
		path += "." + field
	}
	return &ConfigError{Path: path, Entry: i, Field: field, Reason: reason, Err: err}
}

func indexed(field string, j int) string { return field + "[" + strconv.Itoa(j) + "]" }

func validateEntry(i int, e AllowlistEntry) []error {
	var errs []error
	if len(e.Models) == 0 {
		errs = append(errs, entryError(i, "models", "empty model list", nil))
	}
	seen := make(map[string]bool)
	for j, m := range e.Models {
		switch {
		case m == "":
			// An empty substring matches every GPU.
			errs = append(errs, entryError(i, indexed("models", j), "empty model string matches every GPU", nil))
		case seen[m]:
			errs = append(errs, entryError(i, indexed("models", j), fmt.Sprintf("duplicate model %q", m), nil))
		}
		seen[m] = true
	}
	if len(e.Profiles) == 0 {
		errs = append(errs, entryError(i, "profiles", "empty profile list", nil))
	}
	clear(seen)
	for j, p := range e.Profiles {
		if _, err := ParseProfileName(p); err != nil {
			errs = append(errs, entryError(i, indexed("profiles", j), "malformed profile name", err))
		} else if seen[p] {
			errs = append(errs, entryError(i, indexed("profiles", j), fmt.Sprintf("duplicate profile %q", p), nil))
		}
		seen[p] = true
	}
	return errs
}

// joinErrs returns nil, the only error, or all of them joined.
func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// DeviceConfig is what this package reads from the scheduler device config
// (HAMi's device-config.yaml). The zero value is a config without an
// allowlist.
type DeviceConfig struct {
	// Allowlist is nvidia.migProfileAllowlist: nil when the key is absent,
	// empty (non-nil) when it is an empty list.
	Allowlist Allowlist
	// LegacyIgnored reports that nvidia.knownMigGeometries was present next
	// to migProfileAllowlist. The legacy section is then ignored, as the
	// deployed v2.10 components ignore it; callers may want to warn.
	LegacyIgnored bool
}

// Keys of the nvidia section this package reads.
const (
	keyAllowlist = "migProfileAllowlist"
	keyLegacy    = "knownMigGeometries"
)

// ParseDeviceConfig parses a scheduler device config document, YAML or
// JSON, and returns its MIG policy.
//
// What is checked and what is tolerated:
//
//   - Top-level keys other than "nvidia" (other vendors' sections) are
//     ignored. An empty document or a missing or null "nvidia" yields the
//     zero DeviceConfig.
//   - Inside "nvidia", migProfileAllowlist is parsed strictly (see
//     [Allowlist.Validate]; entries may only have the keys "models" and
//     "profiles", with exact spelling). Every other key is HAMi's (for
//     example resourceCountName, deviceSplitCount, defaultMemory) and is
//     ignored, so a config stays valid as HAMi adds keys, except a key
//     that differs from migProfileAllowlist or knownMigGeometries only in
//     case, '-' or '_': such a typo would silently disable MIG, so it is an
//     error.
//   - knownMigGeometries without migProfileAllowlist is an error matching
//     [ErrLegacyConfig]: convert it with `migctl convert-legacy` or
//     [ParseLegacyGeometries] and [ConvertLegacy]. With both present the
//     legacy section is ignored and LegacyIgnored is set.
//
// YAML is YAML 1.1 as sigs.k8s.io/yaml reads it: duplicate keys are errors,
// and unquoted yes/no are booleans (so a model named "yes" must be quoted).
// Errors are [*ConfigError] values (joined when there are several) matching
// [ErrConfig].
func ParseDeviceConfig(data []byte) (DeviceConfig, error) {
	nvidia, err := nvidiaSection(data)
	if err != nil || nvidia == nil {
		return DeviceConfig{}, err
	}
	var cfg DeviceConfig
	var rawAllow, rawLegacy json.RawMessage
	for _, m := range nvidia {
		switch m.Key {
		case keyAllowlist:
			rawAllow = m.Value
		case keyLegacy:
			rawLegacy = m.Value
		default:
			if nearMiss(m.Key) {
				return DeviceConfig{}, &ConfigError{Path: "nvidia." + m.Key, Entry: -1,
					Reason: fmt.Sprintf("unknown key %q: the keys are spelled %q and %q", m.Key, keyAllowlist, keyLegacy)}
			}
		}
	}
	switch {
	case rawAllow == nil && rawLegacy != nil:
		return DeviceConfig{}, &ConfigError{Path: "nvidia." + keyLegacy, Entry: -1, Err: ErrLegacyConfig,
			Reason: "v2.9 knownMigGeometries is not converted automatically; " +
				"run `migctl convert-legacy` (capability.ConvertLegacy) and put the resulting " +
				keyAllowlist + " into the config"}
	case rawAllow == nil:
		return cfg, nil
	}
	cfg.LegacyIgnored = rawLegacy != nil
	cfg.Allowlist, err = decodeAllowlist(rawAllow)
	if err != nil {
		return DeviceConfig{}, err
	}
	return cfg, nil
}

// nearMiss reports whether key is a misspelling of one of the keys this
// package reads.
func nearMiss(key string) bool {
	norm := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(key))
	return norm == strings.ToLower(keyAllowlist) || norm == strings.ToLower(keyLegacy)
}

// nvidiaSection converts data to JSON and returns the members of its
// "nvidia" object, or nil when there is none.
func nvidiaSection(data []byte) ([]jsonMember, error) {
	doc, err := toJSON(data)
	if err != nil {
		return nil, &ConfigError{Entry: -1, Reason: "not valid YAML or JSON", Err: err}
	}
	if isNull(doc) {
		return nil, nil
	}
	top, err := objectMembers(doc)
	if err != nil {
		return nil, &ConfigError{Entry: -1, Reason: "document must be a mapping", Err: err}
	}
	for _, m := range top {
		if m.Key != "nvidia" || isNull(m.Value) {
			continue
		}
		nvidia, err := objectMembers(m.Value)
		if err != nil {
			return nil, &ConfigError{Path: "nvidia", Entry: -1, Reason: "must be a mapping", Err: err}
		}
		return nvidia, nil
	}
	return nil, nil
}

// toJSON returns data as one JSON value: JSON input as is (after checking
// it), YAML converted with duplicate keys rejected. Empty input is null.
func toJSON(data []byte) (json.RawMessage, error) {
	trimmed := bytes.Trim(data, jsonSpace)
	if len(trimmed) == 0 {
		return json.RawMessage("null"), nil
	}
	if json.Valid(trimmed) {
		return trimmed, nil
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// decodeAllowlist reads the migProfileAllowlist value strictly.
func decodeAllowlist(raw json.RawMessage) (Allowlist, error) {
	elems, err := arrayElems(raw)
	if err != nil {
		return nil, &ConfigError{Path: allowlistPath, Entry: -1, Reason: "must be a list of {models, profiles}", Err: err}
	}
	a := make(Allowlist, 0, len(elems))
	var errs []error
	for i, el := range elems {
		e, entryErrs := decodeAllowlistEntry(i, el)
		if len(entryErrs) == 0 {
			// Semantic checks only on entries that decoded, so that a
			// type error is not echoed as an "empty list".
			entryErrs = validateEntry(i, e)
		}
		errs = append(errs, entryErrs...)
		a = append(a, e)
	}
	if err := joinErrs(errs); err != nil {
		return nil, err
	}
	return a, nil
}

func decodeAllowlistEntry(i int, raw json.RawMessage) (AllowlistEntry, []error) {
	var e AllowlistEntry
	members, err := objectMembers(raw)
	if err != nil {
		return e, []error{entryError(i, joinField("", err), "entry must be a mapping with models and profiles", err)}
	}
	var errs []error
	for _, m := range members {
		var dst *[]string
		switch m.Key {
		case "models":
			dst = &e.Models
		case "profiles":
			dst = &e.Profiles
		default:
			errs = append(errs, entryError(i, m.Key, fmt.Sprintf("unknown key %q (want models, profiles)", m.Key), nil))
			continue
		}
		list, listErrs := decodeStringList(i, m.Key, m.Value)
		*dst = list
		errs = append(errs, listErrs...)
	}
	return e, errs
}

// decodeStringList reads a list of strings in field of entry i.
func decodeStringList(i int, field string, raw json.RawMessage) ([]string, []error) {
	elems, err := arrayElems(raw)
	if err != nil {
		return nil, []error{entryError(i, field, "must be a list of strings", err)}
	}
	var errs []error
	out := make([]string, 0, len(elems))
	for j, el := range elems {
		s, err := jsonString(el)
		if err != nil {
			errs = append(errs, entryError(i, indexed(field, j), "must be a string", err))
		}
		out = append(out, s)
	}
	return out, errs
}

// Format selects the encoding of [EncodeDeviceConfig]. The zero value is
// [FormatYAML].
type Format uint8

const (
	// FormatYAML is YAML as sigs.k8s.io/yaml writes it.
	FormatYAML Format = iota
	// FormatJSON is indented JSON.
	FormatJSON
)

// String returns "yaml" or "json".
func (f Format) String() string {
	if f == FormatJSON {
		return "json"
	}
	return "yaml"
}

// EncodeDeviceConfig writes a as a device config document
// {"nvidia": {"migProfileAllowlist": a}} that [ParseDeviceConfig] reads
// back to an equal Allowlist. A nil a writes an empty nvidia section. It
// validates a first and returns its error unchanged.
func EncodeDeviceConfig(a Allowlist, f Format) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	// A nil Allowlist is an absent key, an empty one an explicit empty list:
	// they differ on reading back.
	nvidia := map[string]Allowlist{}
	if a != nil {
		nvidia[keyAllowlist] = a
	}
	return encode(map[string]any{"nvidia": nvidia}, f)
}

func encode(v any, f Format) ([]byte, error) {
	if f == FormatJSON {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	}
	return yaml.Marshal(v)
}
