package capability_test

import (
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestGIProfileIndexVariant(t *testing.T) {
	tests := []struct {
		idx  capability.GIProfileIndex
		want capability.Variant
	}{
		{capability.GIProfile1Slice, capability.VariantNone},
		{capability.GIProfile7Slice, capability.VariantNone},
		{capability.GIProfile1SliceRev1, capability.VariantME},
		{capability.GIProfile2SliceRev1, capability.VariantME},
		{capability.GIProfile1SliceRev2, capability.VariantNone},
		{capability.GIProfile1SliceGFX, capability.VariantGFX},
		{capability.GIProfile2SliceGFX, capability.VariantGFX},
		{capability.GIProfile3SliceGFX, capability.VariantGFX},
		{capability.GIProfile4SliceGFX, capability.VariantGFX},
		{capability.GIProfile1SliceNoME, capability.VariantNoME},
		{capability.GIProfile2SliceNoME, capability.VariantNoME},
		{capability.GIProfile1SliceAllME, capability.VariantMEAll},
		{capability.GIProfile2SliceAllME, capability.VariantMEAll},
	}
	for _, tc := range tests {
		if got := tc.idx.Variant(); got != tc.want {
			t.Errorf("index %d: got %v, want %v", tc.idx, got, tc.want)
		}
	}
}

func TestFullCIProfileIndex(t *testing.T) {
	tests := []struct {
		slices uint32
		want   capability.CIProfileIndex
		ok     bool
	}{
		{0, 0, false}, {1, capability.CIProfile1Slice, true}, {2, capability.CIProfile2Slice, true},
		{3, capability.CIProfile3Slice, true}, {4, capability.CIProfile4Slice, true}, {5, 0, false},
		{6, capability.CIProfile6Slice, true}, {7, capability.CIProfile7Slice, true},
		{8, capability.CIProfile8Slice, true}, {9, 0, false},
	}
	for _, tc := range tests {
		got, ok := capability.FullCIProfileIndex(tc.slices)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%d slices: got %d %v, want %d %v", tc.slices, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDeriveProfileName(t *testing.T) {
	// Memory and totals from mig-hardware-facts.md.
	tests := []struct {
		name   string
		idx    capability.GIProfileIndex
		slices uint32
		mib    uint64
		total  uint64
		want   string
	}{
		{"A100-40 1g", capability.GIProfile1Slice, 1, 4864, 40960, "1g.5gb"},
		{"A100-40 1g+me", capability.GIProfile1SliceRev1, 1, 4864, 40960, "1g.5gb+me"},
		{"A100-40 1g.10gb newer", capability.GIProfile1SliceRev2, 1, 9856, 40960, "1g.10gb"},
		{"A100-40 2g older", capability.GIProfile2Slice, 2, 9984, 40960, "2g.10gb"},
		{"A100-40 3g", capability.GIProfile3Slice, 3, 19968, 40960, "3g.20gb"},
		{"A100-40 7g older", capability.GIProfile7Slice, 7, 40448, 40960, "7g.40gb"},
		{"A100-80 7g (not 7g.79gb)", capability.GIProfile7Slice, 7, 80896, 81920, "7g.80gb"},
		{"A100-80 3g (not 3g.39gb)", capability.GIProfile3Slice, 3, 40192, 81920, "3g.40gb"},
		{"H100 1g", capability.GIProfile1Slice, 1, 9984, 81559, "1g.10gb"},
		{"H100 7g", capability.GIProfile7Slice, 7, 81152, 81559, "7g.80gb"},
		{"H200 1g", capability.GIProfile1Slice, 1, 16384, 143771, "1g.18gb"},
		{"H200 2g", capability.GIProfile2Slice, 2, 33280, 143771, "2g.35gb"},
		{"H200 2g early driver", capability.GIProfile2Slice, 2, 33024, 143771, "2g.35gb"},
		{"H200 3g", capability.GIProfile3Slice, 3, 71424, 143771, "3g.71gb"},
		{"H200 3g early driver", capability.GIProfile3Slice, 3, 71168, 143771, "3g.71gb"},
		{"H200 7g early driver", capability.GIProfile7Slice, 7, 143104, 143771, "7g.141gb"},
		{"GH200 144G 1g", capability.GIProfile1Slice, 1, 17920, 146944, "1g.18gb"},
		{"GH200 144G 1g.36gb", capability.GIProfile1SliceRev2, 1, 36096, 146944, "1g.36gb"},
		{"H200 7g", capability.GIProfile7Slice, 7, 143360, 143771, "7g.141gb"},
		{"A30 1g", capability.GIProfile1Slice, 1, 5952, 24576, "1g.6gb"},
		{"A30 4g", capability.GIProfile4Slice, 4, 24000, 24576, "4g.24gb"},
		{"RTX PRO 1g-me", capability.GIProfile1SliceNoME, 1, 24192, 97887, "1g.24gb-me"},
		{"RTX PRO 2g+me.all", capability.GIProfile2SliceAllME, 2, 48512, 97887, "2g.48gb+me.all"},
		{"RTX PRO 4g+gfx", capability.GIProfile4SliceGFX, 4, 97408, 97887, "4g.96gb+gfx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := capability.DeriveProfileName(tc.idx, tc.slices, tc.mib, tc.total).String(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
	for _, zero := range [][3]uint64{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}} {
		if got := capability.DeriveProfileName(0, uint32(zero[0]), zero[1], zero[2]); got != (capability.ProfileName{}) {
			t.Errorf("%v: got %+v, want the zero name", zero, got)
		}
	}
}

func TestCore(t *testing.T) {
	tests := []struct {
		sms, max, want uint32
	}{
		{28, 98, 29}, // the spec's 2g.10gb on A100-40GB
		{14, 98, 15},
		{42, 98, 43},
		{98, 98, 100},
		{16, 132, 13},
		{46, 188, 25},
		{0, 98, 0},
		{5, 0, 0},
		{1 << 31, 1 << 31, 100}, // no overflow
	}
	for _, tc := range tests {
		if got := capability.Core(tc.sms, tc.max); got != tc.want {
			t.Errorf("Core(%d, %d): got %d, want %d", tc.sms, tc.max, got, tc.want)
		}
	}
}
