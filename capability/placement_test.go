package capability_test

import (
	"math"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func pl(start, size uint32) capability.Placement {
	return capability.Placement{Start: start, Size: size}
}

func TestPlacementBasics(t *testing.T) {
	tests := []struct {
		p        capability.Placement
		end      uint32
		valid    bool
		within8  bool
		mask     uint64
		str      string
		contains []uint32
		outside  []uint32
	}{
		{p: pl(0, 0), end: 0, valid: false, within8: false, mask: 0, str: "[0,0)", outside: []uint32{0, 1}},
		{p: pl(2, 2), end: 4, valid: true, within8: true, mask: 0b1100, str: "[2,4)", contains: []uint32{2, 3}, outside: []uint32{1, 4}},
		{p: pl(0, 8), end: 8, valid: true, within8: true, mask: 0xff, str: "[0,8)", contains: []uint32{0, 7}, outside: []uint32{8}},
		{p: pl(6, 2), end: 8, valid: true, within8: true, mask: 0xc0, str: "[6,8)"},
		{p: pl(7, 2), end: 9, valid: true, within8: false, mask: 0x180, str: "[7,9)"},
		{p: pl(9, 3), end: 12, valid: true, within8: false, mask: 0xe00, str: "[9,12)"},
		{p: pl(0, 64), end: 64, valid: true, within8: false, mask: math.MaxUint64, str: "[0,64)"},
		{p: pl(63, 1), end: 64, valid: true, within8: false, mask: 1 << 63, str: "[63,64)"},
		{p: pl(63, 2), end: 65, valid: true, within8: false, mask: 0, str: "[63,65)"},
		{p: pl(math.MaxUint32, 1), end: 0, valid: false, within8: false, mask: 0, str: "[4294967295,4294967296)"},
	}
	for _, tc := range tests {
		t.Run(tc.str, func(t *testing.T) {
			if got := tc.p.End(); got != tc.end {
				t.Errorf("End: got %d, want %d", got, tc.end)
			}
			if got := tc.p.Valid(); got != tc.valid {
				t.Errorf("Valid: got %v, want %v", got, tc.valid)
			}
			if got := tc.p.Within(8); got != tc.within8 {
				t.Errorf("Within(8): got %v, want %v", got, tc.within8)
			}
			if got := tc.p.Mask(); got != tc.mask {
				t.Errorf("Mask: got %#x, want %#x", got, tc.mask)
			}
			if got := tc.p.String(); got != tc.str {
				t.Errorf("String: got %q, want %q", got, tc.str)
			}
			for _, s := range tc.contains {
				if !tc.p.Contains(s) {
					t.Errorf("Contains(%d): got false, want true", s)
				}
			}
			for _, s := range tc.outside {
				if tc.p.Contains(s) {
					t.Errorf("Contains(%d): got true, want false", s)
				}
			}
		})
	}
}

func TestPlacementOverlapsAndCovers(t *testing.T) {
	tests := []struct {
		name     string
		p, q     capability.Placement
		overlaps bool
		covers   bool // p covers q
	}{
		{name: "touching", p: pl(0, 2), q: pl(2, 2), overlaps: false, covers: false},
		{name: "touching reversed", p: pl(2, 2), q: pl(0, 2), overlaps: false, covers: false},
		{name: "same", p: pl(2, 2), q: pl(2, 2), overlaps: true, covers: true},
		{name: "3g@4 and 1g.10gb@6", p: pl(4, 4), q: pl(6, 2), overlaps: true, covers: true},
		{name: "partial", p: pl(0, 4), q: pl(3, 2), overlaps: true, covers: false},
		{name: "empty q", p: pl(0, 4), q: pl(1, 0), overlaps: false, covers: true},
		{name: "empty p", p: pl(1, 0), q: pl(0, 4), overlaps: false, covers: false},
		{name: "7g covers all", p: pl(0, 8), q: pl(6, 1), overlaps: true, covers: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Overlaps(tc.q); got != tc.overlaps {
				t.Errorf("Overlaps: got %v, want %v", got, tc.overlaps)
			}
			if got := tc.p.Covers(tc.q); got != tc.covers {
				t.Errorf("Covers: got %v, want %v", got, tc.covers)
			}
			// Masks agree with Overlaps for valid placements on a 64-slot grid.
			if tc.p.Valid() && tc.q.Valid() {
				if got := tc.p.Mask()&tc.q.Mask() != 0; got != tc.overlaps {
					t.Errorf("mask overlap: got %v, want %v", got, tc.overlaps)
				}
			}
		})
	}
}

func FuzzPlacementMaskAgreesWithOverlaps(f *testing.F) {
	f.Add(uint32(0), uint32(2), uint32(2), uint32(2))
	f.Add(uint32(4), uint32(4), uint32(6), uint32(2))
	f.Add(uint32(0), uint32(64), uint32(63), uint32(1))
	f.Fuzz(func(t *testing.T, ps, pz, qs, qz uint32) {
		p, q := pl(ps%70, pz%70), pl(qs%70, qz%70)
		if !p.Within(capability.MaxSlots) || !q.Within(capability.MaxSlots) {
			return
		}
		if got, want := p.Mask()&q.Mask() != 0, p.Overlaps(q); got != want {
			t.Errorf("%v %v: mask overlap %v, Overlaps %v", p, q, got, want)
		}
		if got, want := p.Mask()&q.Mask() == q.Mask(), p.Covers(q); got != want {
			t.Errorf("%v %v: mask cover %v, Covers %v", p, q, got, want)
		}
	})
}
