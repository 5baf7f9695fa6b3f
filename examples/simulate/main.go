package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

type options struct {
	model, trace, write, mix, profiles string
	gpus, arrivals                     int
	seed                               uint64
	load, life                         float64
	memory, json                       bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "model", "A100-SXM4-40GB", "GPU model (a fakehal model name or alias)")
	fs.IntVar(&o.gpus, "gpus", 8, "number of GPUs")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated trace")
	fs.StringVar(&o.trace, "trace", "", "replay this JSON-lines trace file instead of generating one (- for stdin)")
	fs.StringVar(&o.write, "write", "", "also write the replayed trace to this file")
	fs.StringVar(&o.mix, "mix", "skewed", "profile mix of the generated trace: uniform or skewed")
	fs.StringVar(&o.profiles, "profiles", "allowlist", "profiles of each GPU: allowlist, plain or all")
	fs.IntVar(&o.arrivals, "arrivals", 0, "arrivals of the generated trace (default: heavy churn's 4000)")
	fs.Float64Var(&o.load, "load", 0, "offered load of the generated trace (default: heavy churn's 1.3)")
	fs.Float64Var(&o.life, "life", 0, "mean lifetime of the generated trace (default: heavy churn's 20)")
	fs.BoolVar(&o.memory, "memory", false, "generate memoryMB demands instead of profile names")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.gpus < 1 || o.gpus > 1024 {
		return o, fmt.Errorf("-gpus %d: want 1..1024", o.gpus)
	}
	return o, nil
}

// gpusOf builds n GPUs of the model with the chosen profiles.
func gpusOf(o options) ([]capability.GPU, error) {
	m, ok := fakehal.LookupModel(o.model)
	if !ok {
		var names []string
		for _, m := range fakehal.Models() {
			names = append(names, strconv.Quote(m.Name))
		}
		return nil, fmt.Errorf("unknown model %q; known: %s", o.model, strings.Join(names, ", "))
	}
	keep, err := profileFilter(o.profiles, m.Name)
	if err != nil {
		return nil, err
	}
	out := make([]capability.GPU, o.gpus)
	for i := range out {
		dev := capability.DeviceInfo{Index: i, UUID: fmt.Sprintf("GPU-sim-%04d", i), Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}
		g, errs := capability.GPUFromDevice(dev, m.Profiles)
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		g.Profiles = slices.DeleteFunc(g.Profiles, func(p capability.Profile) bool { return !keep(&p) })
		if len(g.Profiles) == 0 {
			return nil, fmt.Errorf("model %s has no profiles under -profiles %s", m.Name, o.profiles)
		}
		out[i] = g
	}
	return out, nil
}

func profileFilter(mode, model string) (func(*capability.Profile) bool, error) {
	plain := func(p *capability.Profile) bool { return p.Variant == capability.VariantNone }
	switch mode {
	case "all":
		return func(*capability.Profile) bool { return true }, nil
	case "plain":
		return plain, nil
	case "allowlist":
		al := capability.DefaultAllowlist()
		if _, _, ok := al.Match(model); !ok {
			return nil, fmt.Errorf("model %s matches no entry of the default allowlist; use -profiles plain", model)
		}
		return func(p *capability.Profile) bool { return al.Allows(model, p.Name) }, nil
	}
	return nil, fmt.Errorf("-profiles %q: want allowlist, plain or all", mode)
}

func traceOf(o options, gpus []capability.GPU, stdin io.Reader) ([]sim.Event, string, error) {
	if o.trace != "" {
		r := stdin
		if o.trace != "-" {
			f, err := os.Open(o.trace)
			if err != nil {
				return nil, "", err
			}
			defer f.Close()
			r = f
		}
		evs, err := sim.ReadTrace(r)
		return evs, o.trace, err
	}
	mix, err := sim.MixByName(o.mix, &gpus[0])
	if err != nil {
		return nil, "", fmt.Errorf("-mix: %w", err)
	}
	opts := sim.HeavyChurn(o.seed)
	opts.Memory = o.memory
	// Only unset flags keep heavy churn's values: a negative one reaches
	// Generate, which refuses it.
	if o.arrivals != 0 {
		opts.Arrivals = o.arrivals
	}
	if o.load != 0 {
		opts.Load = o.load
	}
	if o.life != 0 {
		opts.MeanLife = o.life
	}
	evs, err := sim.Generate(gpus, mix, opts)
	name := fmt.Sprintf("generated: %s mix, seed %d, %d arrivals, load %.2f, mean life %g", o.mix, o.seed, opts.Arrivals, opts.Load, opts.MeanLife)
	return evs, name, err
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	o, err := parse(args, stdout)
	if err != nil {
		return err
	}
	gpus, err := gpusOf(o)
	if err != nil {
		return err
	}
	evs, traceName, err := traceOf(o, gpus, stdin)
	if err != nil {
		return err
	}
	if o.write != "" {
		if err := writeTrace(o.write, evs); err != nil {
			return err
		}
	}
	rs, err := sim.Compare(gpus, evs, sim.Policies())
	if err != nil {
		return err
	}
	names := make([]string, len(gpus[0].Profiles))
	for i, p := range gpus[0].Profiles {
		names[i] = p.Name
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Model    string       `json:"model"`
			GPUs     int          `json:"gpus"`
			Profiles []string     `json:"profiles"`
			Trace    string       `json:"trace"`
			Results  []sim.Result `json:"results"`
		}{gpus[0].Name, len(gpus), names, traceName, rs})
	}
	fmt.Fprintf(stdout, "%d x %s, profiles %s\ntrace %s\n\n", len(gpus), gpus[0].Name, strings.Join(names, " "), traceName)
	return sim.WriteTable(stdout, rs)
}

func writeTrace(path string, evs []sim.Event) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return sim.WriteTrace(f, evs)
}
