package nvmlhal_test

import (
	"strings"
	"testing"

	"github.com/dynmig/dynmig/nvmlhal"
)

// FuzzProfileName feeds the decoder of NVML's fixed 96-byte profile name
// arbitrary bytes: it never panics and returns text from before the first
// NUL, trimmed, without the "MIG " prefix.
func FuzzProfileName(f *testing.F) {
	for _, seed := range []string{"MIG 1g.5gb", "MIG 1g.10gb+me\x00junk", "", " MIG  7g.80gb ", "MIG MIG 2g", strings.Repeat("x", 120), "\xff\xfe"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var raw [96]int8
		for i := 0; i < len(in) && i < len(raw); i++ {
			raw[i] = int8(in[i])
		}
		got := nvmlhal.ProfileName(raw)
		text, _, _ := strings.Cut(string(in[:min(len(in), len(raw))]), "\x00")
		if !strings.Contains(text, got) || got != strings.TrimSpace(got) {
			t.Fatalf("ProfileName(%q) = %q: not trimmed text of the name", text, got)
		}
		// Only one "MIG " is dropped: got may start with one only when the
		// name repeats it.
		rest, prefixed := strings.CutPrefix(strings.TrimSpace(text), "MIG ")
		if prefixed && strings.HasPrefix(got, "MIG ") && !strings.HasPrefix(strings.TrimSpace(rest), "MIG ") {
			t.Fatalf("ProfileName(%q) = %q kept the MIG prefix", text, got)
		}
	})
}

func TestProfileName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{in: "MIG 1g.5gb", want: "1g.5gb"},
		{in: "MIG 1g.10gb+me\x00junk", want: "1g.10gb+me"},
		{in: " MIG  7g.80gb ", want: "7g.80gb"},
		{in: "1g.24gb+gfx", want: "1g.24gb+gfx"},
		{in: "", want: ""},
	} {
		var raw [96]int8
		for i := range min(len(tc.in), len(raw)) {
			raw[i] = int8(tc.in[i])
		}
		if got := nvmlhal.ProfileName(raw); got != tc.want {
			t.Errorf("ProfileName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
