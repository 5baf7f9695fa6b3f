package main

import (
	"fmt"

	"github.com/dynmig/dynmig/fakehal"
)

// parseDriver reads --driver.
func parseDriver(s string) (fakehal.Driver, error) {
	for _, d := range []fakehal.Driver{fakehal.DriverCurrent, fakehal.DriverEarly} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, usageErr("--driver %q: want current or early", s)
}

// noteUnconfirmed says, once per model, which presets were not confirmed on
// hardware and what about them is estimated, so that nobody takes an
// invented figure for a driver's.
func noteUnconfirmed(e *env, names []string) {
	seen := map[string]bool{}
	for _, name := range names {
		m, ok := fakehal.LookupModel(name)
		if !ok || m.Confirmed || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		fmt.Fprintf(e.stderr, "note: preset %q is unconfirmed: %s\n", m.Name, m.Note)
	}
}
