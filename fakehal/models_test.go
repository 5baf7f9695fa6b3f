package fakehal_test

import (
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

// TestModelNamesFollowNVIDIARule checks that every built-in profile name is
// the one NVIDIA's naming rule derives from its memory, so a fake driver
// without V3 names publishes the same profiles.
func TestModelNamesFollowNVIDIARule(t *testing.T) {
	for _, m := range fakehal.Models() {
		for _, p := range m.Profiles {
			got := capability.DeriveProfileName(p.Index, p.SliceCount, p.MemoryMB, m.MemoryMB).String()
			if got != p.Name {
				t.Errorf("%s profile index %d: derived name %q, want %q", m.Name, p.Index, got, p.Name)
			}
		}
	}
}

func TestModelGridWidths(t *testing.T) {
	tests := []struct {
		model string
		want  uint32
	}{
		{model: "A30", want: 4},
		{model: "A100-SXM4-40GB", want: 8},
		{model: "NVIDIA H200 141GB HBM3e", want: 8},
		{model: "RTX PRO 6000", want: 12},
	}
	for _, tt := range tests {
		m, ok := fakehal.LookupModel(tt.model)
		if !ok {
			t.Fatalf("LookupModel(%q) not found", tt.model)
		}
		if got := m.Width(); got != tt.want {
			t.Errorf("%s: Width() = %d, want %d", tt.model, got, tt.want)
		}
	}
}
