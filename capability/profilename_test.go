package capability_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestParseProfileName(t *testing.T) {
	tests := []struct {
		in      string
		compute uint32
		memGB   uint32
		variant capability.Variant
	}{
		{in: "1g.5gb", compute: 1, memGB: 5},
		{in: "2g.10gb", compute: 2, memGB: 10},
		{in: "7g.141gb", compute: 7, memGB: 141},
		{in: "8g.186gb", compute: 8, memGB: 186},
		{in: "1g.5gb+me", compute: 1, memGB: 5, variant: capability.VariantME},
		{in: "1g.24gb+me.all", compute: 1, memGB: 24, variant: capability.VariantMEAll},
		{in: "2g.48gb-me", compute: 2, memGB: 48, variant: capability.VariantNoME},
		{in: "4g.96gb+gfx", compute: 4, memGB: 96, variant: capability.VariantGFX},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			n, err := capability.ParseProfileName(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			want := capability.ProfileName{Compute: tc.compute, MemoryGB: tc.memGB, Variant: tc.variant}
			if n != want {
				t.Errorf("got %+v, want %+v", n, want)
			}
			if got := n.String(); got != tc.in {
				t.Errorf("String: got %q, want %q", got, tc.in)
			}
			if !n.IsValid() {
				t.Error("IsValid: got false")
			}
		})
	}
}

func TestParseProfileNameErrors(t *testing.T) {
	for _, in := range []string{
		"", "1g", "4g", "g.5gb", "1g.gb", "1g.5", "1g.5GB", "1G.5gb", "1g.5gb+", "1g.5gb+ME",
		"1g.5gb+me.al", "1g.5gb +me", " 1g.5gb", "1g.5gb\n", "0g.5gb", "9g.5gb", "1g.0gb", "01g.5gb",
		"1g.05gb", "1c.3g.20gb", "MIG 1g.5gb", "1g.5gb+me+gfx", "1g.5mb", "1g.9999999gb", "-1g.5gb",
		"1g.4294967296gb", "1.5g.5gb",
	} {
		t.Run(in, func(t *testing.T) {
			n, err := capability.ParseProfileName(in)
			if err == nil {
				t.Fatalf("got %+v, want an error", n)
			}
			var pe *capability.ProfileNameError
			if !errors.As(err, &pe) || pe.Name != in || !errors.Is(err, capability.ErrProfileName) {
				t.Errorf("got %#v, want a *ProfileNameError for %q", err, in)
			}
			if n != (capability.ProfileName{}) {
				t.Errorf("got %+v with an error, want the zero value", n)
			}
		})
	}
}

func TestProfileNameMethods(t *testing.T) {
	n := capability.ProfileName{Compute: 4, MemoryGB: 20}
	if got := n.Prefix(); got != "4g" {
		t.Errorf("Prefix: got %q, want 4g", got)
	}
	tests := []struct {
		n     capability.ProfileName
		valid bool
	}{
		{n: capability.ProfileName{}, valid: false},
		{n: capability.ProfileName{Compute: 9, MemoryGB: 1}, valid: false},
		{n: capability.ProfileName{Compute: 1, MemoryGB: 0}, valid: false},
		{n: capability.ProfileName{Compute: 1, MemoryGB: 1, Variant: 99}, valid: false},
		{n: capability.ProfileName{Compute: 1, MemoryGB: 1, Variant: capability.VariantGFX}, valid: true},
	}
	for _, tc := range tests {
		if got := tc.n.IsValid(); got != tc.valid {
			t.Errorf("%+v: IsValid got %v, want %v", tc.n, got, tc.valid)
		}
	}
}

func TestVariantStrings(t *testing.T) {
	tests := []struct {
		v      capability.Variant
		suffix string
		str    string
	}{
		{capability.VariantNone, "", "plain"},
		{capability.VariantME, "+me", "+me"},
		{capability.VariantMEAll, "+me.all", "+me.all"},
		{capability.VariantNoME, "-me", "-me"},
		{capability.VariantGFX, "+gfx", "+gfx"},
		{capability.Variant(42), "", "Variant(42)"},
	}
	for _, tc := range tests {
		if got := tc.v.Suffix(); got != tc.suffix {
			t.Errorf("Suffix: got %q, want %q", got, tc.suffix)
		}
		if got := tc.v.String(); got != tc.str {
			t.Errorf("String: got %q, want %q", got, tc.str)
		}
	}
}

func FuzzParseProfileName(f *testing.F) {
	for _, s := range []string{"1g.5gb", "1g.5gb+me", "1g.24gb+me.all", "2g.48gb-me", "4g.96gb+gfx",
		"7g.141gb", "", "1g", "01g.5gb", "1g.5GB", "MIG 1g.5gb", "9g.1gb", "1g.0gb", "1c.3g.20gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := capability.ParseProfileName(s)
		if err != nil {
			if !errors.Is(err, capability.ErrProfileName) {
				t.Fatalf("%q: error %v does not match ErrProfileName", s, err)
			}
			return
		}
		// Accepted names are canonical: formatting gives the input back,
		// and parsing that again is a fixed point.
		if got := n.String(); got != s {
			t.Fatalf("%q: String gives %q", s, got)
		}
		again, err := capability.ParseProfileName(n.String())
		if err != nil || again != n || !n.IsValid() {
			t.Fatalf("%q: reparse got %+v %v, want %+v", s, again, err, n)
		}
	})
}
