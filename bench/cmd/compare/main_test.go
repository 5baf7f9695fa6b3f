package main

import (
	"strings"
	"testing"
)

func TestRunPrintsTableAndSummary(t *testing.T) {
	var b strings.Builder
	if err := run(&b, "1", 200, "A30"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"dra-structured", "frag-aware", "first-fit", "v2.10",
		"A30 uniform load 1.3 seed 1", "A30 skewed(MiB) load 1.3 seed 1", "of 3 traces"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct{ name, seeds, models string }{
		{name: "bad seed", seeds: "x", models: "A30"},
		{name: "no model", seeds: "1", models: "no such GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := run(&b, tc.seeds, 10, tc.models); err == nil {
				t.Errorf("run(%q, %q) succeeded", tc.seeds, tc.models)
			}
		})
	}
}
