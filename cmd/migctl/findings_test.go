package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

// TestBuiltInAllowlistQuietOnPresets: discovering any built-in preset, at
// either driver generation, under the built-in allowlist reports nothing:
// the allowlist's chart aliases that resolve to the driver's names are by
// design, not findings.
func TestBuiltInAllowlistQuietOnPresets(t *testing.T) {
	for _, m := range fakehal.Models() {
		for _, drv := range []string{"current", "early"} {
			r := migctl(t, "", "discover", "--fake", m.Name, "--driver", drv)
			if r.code != exitOK {
				t.Errorf("%s (%s drivers): exit %d\n%s", m.Name, drv, r.code, r.stderr)
			}
			for _, l := range strings.Split(r.stderr, "\n") {
				if l != "" && !strings.HasPrefix(l, "note: ") {
					t.Errorf("%s (%s drivers): %s", m.Name, drv, l)
				}
			}
		}
	}
}

// TestFindingsAreSentences: every kind of finding reads as a sentence
// about the GPU, not as the kind's name.
func TestFindingsAreSentences(t *testing.T) {
	kinds := []capability.FindingKind{
		capability.FindingNoMatch, capability.FindingMIGDisabled, capability.FindingModePending, capability.FindingUnresolved,
		capability.FindingBadProfile, capability.FindingNoProfiles, capability.FindingResolved,
	}
	for _, k := range kinds {
		for _, f := range []capability.Finding{
			{Kind: k, GPU: 3, UUID: "GPU-1", Model: "NVIDIA A30", Entry: 2, Profile: "1g.6gb", Resolved: "1g.5gb", Err: errors.New("no placements")},
			{Kind: k, GPU: 3, UUID: "GPU-1", Model: "NVIDIA A30", Entry: -1},
		} {
			s := findingSentence(f)
			if !strings.HasPrefix(s, `GPU 3 ("NVIDIA A30", GPU-1) `) || !strings.HasSuffix(s, ".") || strings.Contains(s, k.String()) {
				t.Errorf("%v: %q is not a sentence about GPU 3", k, s)
			}
		}
	}
}
