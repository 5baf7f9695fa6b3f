package realize

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Environment variables of NVIDIA's Kubernetes device plugin that
// [ParseHealthChecks] reads with the same meaning.
const (
	// EnvDisableHealthChecks: "all" or "xids" disables the Xid checks, a
	// comma-separated list of Xids ignores those in addition to
	// [ApplicationXids].
	EnvDisableHealthChecks = "DP_DISABLE_HEALTHCHECKS"
	// EnvEnableHealthChecks: a comma-separated list of Xids that count
	// even when disabled (application Xids included); "all" or "xids"
	// makes every Xid count.
	EnvEnableHealthChecks = "DP_ENABLE_HEALTHCHECKS"
)

// ErrHealthChecks: a health-check setting could not be read.
var ErrHealthChecks = errors.New("realize: invalid health-check setting")

// HealthChecksError names the setting and the entry (0-based, in the
// comma-separated list) that is neither an Xid nor "all" or "xids".
type HealthChecksError struct {
	Setting string // EnvDisableHealthChecks or EnvEnableHealthChecks
	Index   int
	Entry   string
}

func (e *HealthChecksError) Error() string {
	return fmt.Sprintf("realize: %s entry %d %q: want an Xid (a decimal number), \"all\" or \"xids\"", e.Setting, e.Index, e.Entry)
}

// Unwrap returns [ErrHealthChecks].
func (e *HealthChecksError) Unwrap() error { return ErrHealthChecks }

// HealthChecks says which of a backend's health events count, with the
// meaning NVIDIA's device plugin gives [EnvDisableHealthChecks] and
// [EnvEnableHealthChecks]. The zero value counts every critical Xid but
// [ApplicationXids], and every other health event.
//
// An Xid counts when it is enabled (Enable, or EnableAllXids); otherwise
// it is ignored when it is an application Xid, in Disable, or when
// DisableAllXids is set. Events that are not Xids (uncorrectable ECC
// errors, an unavailable GPU, recoveries) always count while a watch runs.
// When every Xid is disabled and none enabled, no watch runs at all
// ([HealthChecks.Off]), as NVIDIA's plugin then runs none.
type HealthChecks struct {
	DisableAllXids bool
	Disable        []uint64 // ignored in addition to ApplicationXids
	EnableAllXids  bool
	Enable         []uint64 // counted even when disabled or application Xids
}

// ParseHealthChecks reads the values of [EnvDisableHealthChecks] and
// [EnvEnableHealthChecks] (either may be ""): comma-separated, spaces and
// case ignored, each entry an Xid in decimal or "all" or "xids". An entry
// that is none of these is a [*HealthChecksError]; NVIDIA's plugin skips
// it, but a mistyped Xid would then silently take GPUs out of service.
func ParseHealthChecks(disable, enable string) (HealthChecks, error) {
	var c HealthChecks
	var err error
	if c.DisableAllXids, c.Disable, err = parseXidList(EnvDisableHealthChecks, disable); err != nil {
		return HealthChecks{}, err
	}
	if c.EnableAllXids, c.Enable, err = parseXidList(EnvEnableHealthChecks, enable); err != nil {
		return HealthChecks{}, err
	}
	return c, nil
}

func parseXidList(setting, list string) (all bool, xids []uint64, err error) {
	if strings.TrimSpace(list) == "" {
		return false, nil, nil
	}
	for i, entry := range strings.Split(list, ",") {
		entry = strings.ToLower(strings.TrimSpace(entry))
		switch entry {
		case "":
			continue
		case "all", "xids":
			all = true
			continue
		}
		xid, perr := strconv.ParseUint(entry, 10, 64)
		if perr != nil {
			return false, nil, &HealthChecksError{Setting: setting, Index: i, Entry: entry}
		}
		if !slices.Contains(xids, xid) {
			xids = append(xids, xid)
		}
	}
	return all, xids, nil
}

// Off reports whether no health watch should run: every Xid disabled and
// none enabled.
func (c HealthChecks) Off() bool {
	return c.DisableAllXids && !c.EnableAllXids && len(c.Enable) == 0
}

// CountsXid reports whether a critical Xid error marks its GPU or MIG
// device unhealthy under c.
func (c HealthChecks) CountsXid(xid uint64) bool {
	if c.EnableAllXids || slices.Contains(c.Enable, xid) {
		return true
	}
	return !c.DisableAllXids && !IsApplicationXid(xid) && !slices.Contains(c.Disable, xid)
}

// String describes c for logs, e.g.
// "xids disabled: application+all; enabled: 79".
func (c HealthChecks) String() string {
	list := func(all bool, xids []uint64) string {
		if all {
			return "all"
		}
		if len(xids) == 0 {
			return "none"
		}
		s := make([]string, len(xids))
		for i, x := range xids {
			s[i] = strconv.FormatUint(x, 10)
		}
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("xids disabled: application+%s; enabled: %s", list(c.DisableAllXids, c.Disable), list(c.EnableAllXids, c.Enable))
}
