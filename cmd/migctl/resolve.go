package main

import (
	"fmt"
	"slices"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

// printResolutions prints each allowlisted name that a built-in model's
// driver (any generation) does not report but that resolves to one of its
// profiles, as discovery will resolve it on such a GPU
// ([capability.ResolveAllowlist]), e.g. the HAMi chart's 7g.79gb for A100
// 80GB's 7g.80gb. what names the allowlist's source.
func printResolutions(e *env, what string, a capability.Allowlist) {
	var seen []capability.Resolution
	for _, r := range capability.ResolveAllowlist(a, fakehal.Tables()) {
		if slices.Contains(seen, r) {
			continue // the same name on another driver generation's table
		}
		seen = append(seen, r)
		fmt.Fprintf(e.stderr, "migctl: %s: migProfileAllowlist[%d]: %s resolves to the driver's %s on %q\n",
			what, r.Entry, r.Name, r.Resolved, r.Model)
	}
}
