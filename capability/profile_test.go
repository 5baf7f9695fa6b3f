package capability_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestMIGModeString(t *testing.T) {
	tests := []struct {
		m    capability.MIGMode
		want string
	}{
		{capability.MIGUnknown, "unknown"}, {capability.MIGDisabled, "disabled"},
		{capability.MIGEnabled, "enabled"}, {capability.MIGMode(9), "unknown"},
	}
	for _, tc := range tests {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestGPUWidthAndLookup(t *testing.T) {
	var zero capability.GPU
	if zero.Width() != 0 || zero.Profile("1g.5gb") != nil {
		t.Error("zero GPU has a width or profiles")
	}
	g := capability.GPU{Profiles: []capability.Profile{
		{Name: "1g.24gb", Placements: starts(3, 0, 3, 6, 9)},
		{Name: "2g.48gb", Placements: starts(6, 0, 6)},
	}}
	if got := g.Width(); got != 12 {
		t.Errorf("got width %d, want 12", got)
	}
	p := g.Profile("2g.48gb")
	if p == nil || p != &g.Profiles[1] {
		t.Fatalf("got %p, want a pointer into Profiles", p)
	}
	if !p.HasPlacement(pl(6, 6)) || p.HasPlacement(pl(3, 6)) || p.HasPlacement(pl(6, 3)) {
		t.Error("HasPlacement is wrong")
	}
}

func TestProfileFromInfoAndSort(t *testing.T) {
	maxSMs := capability.MaxMultiprocessors(a100_40)
	if maxSMs != 98 {
		t.Fatalf("got maxSMs %d, want 98", maxSMs)
	}
	p, err := capability.ProfileFromInfo(a100_40[3], a100_40Total, maxSMs)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "2g.10gb" || p.Core != 29 || p.CIProfileIndex != capability.CIProfile2Slice || p.GIProfileID != 14 {
		t.Errorf("got %+v", p)
	}
	ps := []capability.Profile{
		{Name: "b", MemoryMB: 2, SliceCount: 1},
		{Name: "a", MemoryMB: 2, SliceCount: 1},
		{Name: "c", MemoryMB: 2, SliceCount: 0},
		{Name: "d", MemoryMB: 1, SliceCount: 9},
	}
	capability.SortProfiles(ps)
	got := ps[0].Name + ps[1].Name + ps[2].Name + ps[3].Name
	if got != "dcab" {
		t.Errorf("got order %s, want dcab", got)
	}
}

func TestProfileFromInfoErrors(t *testing.T) {
	maxSMs := capability.MaxMultiprocessors(a100_40)
	tests := []struct {
		name   string
		modify func(*capability.GIProfileInfo)
		want   error // sentinel, nil for success
	}{
		{name: "zero slices", modify: func(in *capability.GIProfileInfo) { in.SliceCount = 0 }, want: capability.ErrProfileInfo},
		{name: "empty placement", modify: func(in *capability.GIProfileInfo) { in.Placements = []capability.Placement{{Start: 0, Size: 0}} }, want: capability.ErrProfileInfo},
		{name: "placement past the widest grid", modify: func(in *capability.GIProfileInfo) {
			in.Placements = []capability.Placement{{Start: capability.MaxSlots - 1, Size: 2}}
		}, want: capability.ErrProfileInfo},
		{name: "junk name", modify: func(in *capability.GIProfileInfo) { in.Name = "MIG two slices" }, want: capability.ErrProfileName},
		{name: "no name, nothing to derive from", modify: func(in *capability.GIProfileInfo) { in.Name, in.MemoryMB = "", 0 }, want: capability.ErrProfileName},
		// Accepted as NVML reports it; Discover leaves it out and reports it.
		{name: "no placements", modify: func(in *capability.GIProfileInfo) { in.Placements = nil }, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := a100_40[3]
			in.Placements = slices.Clone(in.Placements)
			tt.modify(&in)
			_, err := capability.ProfileFromInfo(in, a100_40Total, maxSMs)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want an error matching %v", err, tt.want)
			}
			var infoErr *capability.ProfileInfoError
			if errors.Is(tt.want, capability.ErrProfileInfo) && (!errors.As(err, &infoErr) || infoErr.Index != in.Index) {
				t.Errorf("got %v, want a *ProfileInfoError naming index %d", err, in.Index)
			}
		})
	}
}
