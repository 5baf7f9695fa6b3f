package backend

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// CheckFlags checks -backend and, for the fake backend, -fake-gpus as
// [Open] would read them, before anything is opened or any cluster
// connected: an empty or unknown backend, a malformed GPU list and a model
// fakehal has no preset for are [*cli.FlagError] values naming the flag
// (their Err is [ErrNoBackend], [ErrUnknown], [ErrFakeGPUs] or
// [fakehal.ErrUnknownModel]). All of them are joined.
func CheckFlags(name, fakeGPUs string) error {
	offered := strings.Join(Names(), ", ")
	if name == "" {
		return &cli.FlagError{Flag: "backend", Err: ErrNoBackend,
			Reason: "is required: nvml for real GPUs (this build offers " + offered + "; fake only for tests)"}
	}
	if _, ok := openers[name]; !ok {
		return &cli.FlagError{Flag: "backend", Value: name, Err: ErrUnknown,
			Reason: "unknown backend; this build offers " + offered}
	}
	if name != "fake" {
		return nil
	}
	models, err := ParseFakeGPUs(fakeGPUs)
	if err != nil {
		return &cli.FlagError{Flag: "fake-gpus", Value: fakeGPUs, Err: err,
			Reason: fmt.Sprintf(`want "NxMODEL" with N from 1 to %d, or a comma-separated list of models`, MaxFakeGPUs)}
	}
	var errs []error
	for _, m := range models {
		if _, ok := fakehal.LookupModel(m); !ok {
			errs = append(errs, &cli.FlagError{Flag: "fake-gpus", Value: fakeGPUs, Err: fakehal.ErrUnknownModel,
				Reason: fmt.Sprintf("no fake GPU model %q; the models are %s", m, strings.Join(modelNames(), ", "))})
		}
	}
	return errors.Join(errs...)
}

// modelNames are the short names of fakehal's presets.
func modelNames() []string {
	var names []string
	for _, m := range fakehal.Models() {
		n := m.Name
		if len(m.Aliases) > 0 {
			n = m.Aliases[0]
		}
		names = append(names, n)
	}
	return names
}

// EnableMIGFlag defines -enable-mig on fs (off by default: changing a
// GPU's MIG mode is the operator's call). With it, the component's
// maintenance switches MIG mode on for each idle GPU whose MIG mode is off
// (realize.Options.EnableMIG).
func EnableMIGFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("enable-mig", false, "switch MIG mode on for each idle GPU whose MIG mode is off, at start (never a GPU that runs processes or that a record names); "+
		"where the driver leaves the change pending until a GPU reset (A100, A30), the GPU is reported and takes no MIG pods until an operator resets it and restarts this component. "+
		"Without it such GPUs are reported and left alone")
}
