package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dynmig/dynmig/fakehal"
)

// Exit codes: the convention every dynmig command follows (migctl's).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 64
)

func main() {
	os.Exit(cli(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// cli parses args, runs the walk-through and returns the exit code: 0 on
// success and for -h, 1 when the walk-through fails, 64 for a usage error
// (an unknown flag, an argument, an unknown model), each reported once.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("lifecycle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Model, "model", cfg.Model, "fake GPU model: a fakehal preset name or alias")
	fs.IntVar(&cfg.GPUs, "gpus", cfg.GPUs, "number of GPUs on the fake node (1..64)")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeUsage(stdout, fs)
		return exitOK
	case err != nil:
		return usageError(stderr, fs, err.Error())
	case fs.NArg() > 0:
		return usageError(stderr, fs, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if _, ok := fakehal.LookupModel(cfg.Model); !ok {
		return usageError(stderr, fs, fmt.Sprintf("unknown -model %q (models: %s)", cfg.Model, strings.Join(modelList(), ", ")))
	}
	if err := run(ctx, stdout, cfg); err != nil {
		fmt.Fprintln(stderr, "lifecycle:", err)
		return exitError
	}
	return exitOK
}

func usageError(w io.Writer, fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(w, "lifecycle: %s\nusage: lifecycle [-model NAME] [-gpus N] (see lifecycle -h)\n", msg)
	return exitUsage
}

func writeUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `lifecycle walks through dynamic MIG end to end on a built-in fake node,
with no GPU: discovery and the node registration, scheduling through the
placement ledger, realization at the exact reserved placements, metrics,
reclaim, a device-plugin restart that adopts what runs, and a pod left
Pending by fragmentation. It draws every GPU's slot map after each step.

usage: lifecycle [-model NAME] [-gpus N]

flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nmodels:\n  %s\n\nexit codes: 0 success; 1 the walk-through failed; 64 usage error.\n",
		strings.Join(modelList(), "\n  "))
}

// modelList names every fakehal preset, with its aliases.
func modelList() []string {
	var out []string
	for _, m := range fakehal.Models() {
		s := m.Name
		if len(m.Aliases) > 0 {
			s += " (" + strings.Join(m.Aliases, ", ") + ")"
		}
		out = append(out, s)
	}
	return out
}
