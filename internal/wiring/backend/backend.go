// Package backend opens the MIG hardware backend that the node binaries
// (cmd/dynmig-device-plugin, cmd/dynmig-dra-driver) name with -backend: "fake",
// fakehal GPUs described by -fake-gpus, and, in builds with cgo, "nvml",
// the real driver through nvmlhal. Opening is the only thing it does; it
// starts no goroutine and keeps no state besides the registry filled at
// init.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// MaxFakeGPUs bounds "NxMODEL" in a fake GPU list, so that a typo cannot
// ask for billions of GPUs.
const MaxFakeGPUs = 64

// DefaultFakeGPUs is the fake node the binaries start with.
const DefaultFakeGPUs = "2x" + fakehal.DefaultModel

// ErrUnknown is returned by [Open] for a backend name this build does not
// offer (nvml needs a cgo build).
var ErrUnknown = errors.New("backend: unknown backend")

// ErrNoBackend is returned by [Open] for an empty name: the binaries have
// no default backend, so that a production node never runs the fake one
// by omission.
var ErrNoBackend = errors.New("backend: no backend named (-backend is required)")

// ErrFakeGPUs is wrapped by [ParseFakeGPUs]'s errors.
var ErrFakeGPUs = errors.New("backend: bad fake GPU list")

// opener opens a backend and returns it with its close function.
type opener func(ctx context.Context, fakeGPUs string, log *slog.Logger) (realize.Realizer, func(), error)

// openers maps backend names to constructors; nvml.go adds "nvml" when
// built with cgo.
var openers = map[string]opener{"fake": openFake}

// Names returns the backends this build offers, sorted.
func Names() []string {
	names := make([]string, 0, len(openers))
	for name := range openers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Open opens the backend called name; fakeGPUs describes the fake one's
// GPUs ([ParseFakeGPUs]) and is ignored by the others. The returned func
// releases the backend (it shuts NVML down); call it once, when done.
func Open(ctx context.Context, name, fakeGPUs string, log *slog.Logger) (realize.Realizer, func(), error) {
	if name == "" {
		return nil, nil, fmt.Errorf("%w: one of %s", ErrNoBackend, strings.Join(Names(), ", "))
	}
	open, ok := openers[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q (this build offers %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return open(ctx, fakeGPUs, log)
}

func openFake(_ context.Context, fakeGPUs string, _ *slog.Logger) (realize.Realizer, func(), error) {
	models, err := ParseFakeGPUs(fakeGPUs)
	if err != nil {
		return nil, nil, err
	}
	hw, err := fakehal.New(fakehal.Options{GPUs: models})
	if err != nil {
		return nil, nil, err
	}
	return hw, func() {}, nil
}

// ParseFakeGPUs reads a fake GPU list: "NxMODEL" (N of one model,
// 1..[MaxFakeGPUs]) or a comma-separated list of models. Unknown models
// are fakehal's to refuse.
func ParseFakeGPUs(v string) ([]string, error) {
	if n, model, ok := strings.Cut(v, "x"); ok && !strings.Contains(v, ",") {
		if count, err := strconv.Atoi(n); err == nil {
			if count < 1 || count > MaxFakeGPUs {
				return nil, fmt.Errorf("%w %q: want 1..%d GPUs", ErrFakeGPUs, v, MaxFakeGPUs)
			}
			return fakehal.Repeat(count, model), nil
		}
	}
	return strings.Split(v, ","), nil
}
