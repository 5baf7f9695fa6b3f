package realize

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/dynmig/dynmig/reservation"
)

// DesiredDiff builds the annotation protocol's desired set of snap both
// ways, directly and through PodDemand, and returns what differs in what
// the manager acts on (authorisation, active and withheld entries, unknown
// holders, untrusted entries, ended identities, listed and active
// holders), or "".
func DesiredDiff(snap reservation.Snapshot) string {
	a, b := desired(snap, nil), demandSet(PodDemand(snap))
	full := func(x, y reservation.Entry) int { return cmp.Or(compareEntries(x, y), cmp.Compare(x.Index, y.Index)) }
	for _, s := range []*desiredSet{&a, &b} {
		slices.SortFunc(s.Active, full)
		slices.SortFunc(s.Withheld, full)
	}
	uids := func(rs []reservation.PodRef) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.UID)
		}
		return out
	}
	slots := func(errs []error) []string {
		var out []string
		for _, e := range errs {
			// A record problem that names no entry (Index -1: an
			// undecodable record or legacy identifiers of a pod that
			// requests no device) has no device to travel on in a Demand.
			if pe, ok := e.(*reservation.PodError); ok && pe.Index >= 0 {
				out = append(out, fmt.Sprintf("%s/%d", pe.Pod.UID, pe.Index))
			}
		}
		slices.Sort(out)
		return out
	}
	switch {
	case a.Authorized != b.Authorized:
		return fmt.Sprintf("authorised %t vs %t", a.Authorized, b.Authorized)
	case !slices.Equal(a.Active, b.Active):
		return fmt.Sprintf("active %v vs %v", a.Active, b.Active)
	case !slices.Equal(a.Withheld, b.Withheld):
		return fmt.Sprintf("withheld %v vs %v", a.Withheld, b.Withheld)
	case !slices.Equal(uids(a.Unknown), uids(b.Unknown)):
		return fmt.Sprintf("unknown %v vs %v", a.Unknown, b.Unknown)
	case !slices.Equal(slots(a.Untrusted), slots(b.Untrusted)):
		return fmt.Sprintf("untrusted %v vs %v", a.Untrusted, b.Untrusted)
	case !maps.Equal(a.ended, b.ended):
		return fmt.Sprintf("ended %v vs %v", a.ended, b.ended)
	case !maps.Equal(a.listed, b.listed):
		return fmt.Sprintf("listed %v vs %v", a.listed, b.listed)
	case !maps.Equal(a.active, b.active):
		return fmt.Sprintf("active holders %v vs %v", a.active, b.active)
	case b.atPlacement:
		return "PodDemand adopts at placement"
	}
	return ""
}
