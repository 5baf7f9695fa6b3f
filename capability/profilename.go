package capability

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Variant distinguishes GPU instance profiles that share a compute and memory
// size but differ in the engines they own. The zero value is [VariantNone],
// the plain profile.
type Variant uint8

const (
	// VariantNone is the plain profile, e.g. "1g.5gb" (and the REV2
	// double-memory 1g profiles such as "1g.10gb" on A100-40GB, which have no
	// suffix).
	VariantNone Variant = iota
	// VariantME is "+me": the REV1 profile that owns the media engines.
	VariantME
	// VariantMEAll is "+me.all": owns all media engines.
	VariantMEAll
	// VariantNoME is "-me": no media engines.
	VariantNoME
	// VariantGFX is "+gfx": graphics capable.
	VariantGFX
)

var variantSuffixes = [...]string{
	VariantNone:  "",
	VariantME:    "+me",
	VariantMEAll: "+me.all",
	VariantNoME:  "-me",
	VariantGFX:   "+gfx",
}

// Suffix returns the name suffix of v, such as "+me", or "" for VariantNone
// and unknown values.
func (v Variant) Suffix() string {
	if int(v) < len(variantSuffixes) {
		return variantSuffixes[v]
	}
	return ""
}

// String returns the suffix, or "plain" for VariantNone.
func (v Variant) String() string {
	if v == VariantNone {
		return "plain"
	}
	if s := v.Suffix(); s != "" {
		return s
	}
	return "Variant(" + strconv.Itoa(int(v)) + ")"
}

// ProfileName is a parsed GPU instance profile name "<G>g.<M>gb<suffix>",
// such as "3g.20gb" or "1g.24gb+me.all". The zero value is not valid.
// ProfileName is comparable.
type ProfileName struct {
	// Compute is the number of compute slices G (1..8).
	Compute uint32
	// MemoryGB is the memory M in the name, in GB as NVIDIA rounds it. It is
	// a label, not a capacity: use the profile's MemoryMB for fit decisions.
	MemoryGB uint32
	// Variant is the engine variant suffix.
	Variant Variant
}

// ErrProfileName is the sentinel wrapped by every [*ProfileNameError].
var ErrProfileName = errors.New("capability: malformed profile name")

// ProfileNameError reports a profile name that does not follow
// "<G>g.<M>gb" with an optional "+me", "+me.all", "-me" or "+gfx" suffix.
type ProfileNameError struct {
	Name   string // the input, verbatim
	Reason string // what is wrong with it
}

func (e *ProfileNameError) Error() string {
	return fmt.Sprintf("capability: malformed profile name %q: %s", e.Name, e.Reason)
}

// Unwrap returns [ErrProfileName].
func (e *ProfileNameError) Unwrap() error { return ErrProfileName }

// ParseProfileName parses a canonical GPU instance profile name. It accepts
// exactly the form NVIDIA prints: lower case, no spaces, no leading zeros,
// 1 <= G <= 8 and M >= 1. A "MIG " prefix as in NVML's V3 profile Name is
// not accepted here; strip it first. Compute-instance names ("1c.3g.20gb")
// are rejected: they are not GPU instance profiles.
func ParseProfileName(s string) (ProfileName, error) {
	bad := func(reason string) (ProfileName, error) {
		return ProfileName{}, &ProfileNameError{Name: s, Reason: reason}
	}
	rest := s
	g, rest, ok := leadingNumber(rest)
	if !ok {
		return bad("want <G>g.<M>gb, no compute slice count")
	}
	if !strings.HasPrefix(rest, "g.") {
		return bad(`want "g." after the compute slice count`)
	}
	if g < 1 || g > 8 {
		return bad("compute slice count outside 1..8")
	}
	m, rest, ok := leadingNumber(rest[2:])
	if !ok {
		return bad("want a memory size after \"g.\"")
	}
	if m < 1 {
		return bad("memory size is zero")
	}
	if !strings.HasPrefix(rest, "gb") {
		return bad(`want "gb" after the memory size`)
	}
	rest = rest[2:]
	n := ProfileName{Compute: g, MemoryGB: m}
	if rest == "" {
		return n, nil
	}
	for v := VariantME; int(v) < len(variantSuffixes); v++ {
		if rest == variantSuffixes[v] {
			n.Variant = v
			return n, nil
		}
	}
	return bad(fmt.Sprintf("unknown suffix %q", rest))
}

// leadingNumber parses a decimal number without leading zeros at the start of
// s and returns it with the remainder.
func leadingNumber(s string) (uint32, string, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 6 || (i > 1 && s[0] == '0') {
		return 0, s, false
	}
	v, err := strconv.ParseUint(s[:i], 10, 32)
	if err != nil {
		return 0, s, false
	}
	return uint32(v), s[i:], true
}

// IsValid reports whether n could have come from [ParseProfileName].
func (n ProfileName) IsValid() bool {
	return n.Compute >= 1 && n.Compute <= 8 && n.MemoryGB >= 1 && int(n.Variant) < len(variantSuffixes)
}

// String formats n canonically, e.g. "1g.5gb+me". It is the inverse of
// [ParseProfileName] for valid names.
func (n ProfileName) String() string {
	return strconv.FormatUint(uint64(n.Compute), 10) + "g." +
		strconv.FormatUint(uint64(n.MemoryGB), 10) + "gb" + n.Variant.Suffix()
}

// Prefix returns the compute prefix "<G>g", the only part the deployed v2.10
// implementation compared. It is useful for profile preferences such as "4g".
func (n ProfileName) Prefix() string {
	return strconv.FormatUint(uint64(n.Compute), 10) + "g"
}
