package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

func simulateCommand() command {
	return command{
		name:    "simulate",
		args:    "[--model MODEL] [--gpus N] (--trace FILE | --synthetic SEED) [--policy all|NAME[,NAME...]] [--json]",
		summary: "compare placement policies on a trace",
		help: `Replays a trace of MIG requests against placement policies on a fake node of
N GPUs of MODEL (capability discovered under the allowlist) and prints, per
policy, the arrivals accepted, the rejections for capacity (not enough free
slots), for fragmentation (free slots but no legal placement) and for lack of
a large enough profile, and the mean slot utilisation.

The trace is JSON lines (placement/sim's format):
  {"t":0.5,"op":"arrive","id":"r1","profile":"3g.20gb"}
  {"t":0.7,"op":"arrive","id":"r2","memoryMB":9000,"devices":2}
  {"t":2.5,"op":"depart","id":"r1"}
--synthetic SEED draws a heavy-churn trace instead (Poisson arrivals,
exponential lifetimes, small profiles favoured); --write-trace saves it.

--profiles chooses each GPU's profiles: those the allowlist permits
(allowlist, the default; --allowlist FILE replaces the built-in one), the
model's plain profiles without media-engine variants (plain), or every
profile the model has (all).`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			o := simOptions{}
			fs.StringVar(&o.model, "model", "A100-SXM4-40GB", "fake GPU model (a fakehal preset name or alias)")
			fs.IntVar(&o.gpus, "gpus", 8, "number of GPUs")
			fs.StringVar(&o.trace, "trace", "", "trace file (JSON lines; \"-\" for standard input)")
			fs.StringVar(&o.synthetic, "synthetic", "", "seed of a synthetic heavy-churn trace")
			fs.StringVar(&o.policy, "policy", "all", "\"all\" or comma-separated policies: first-fit, v2.10, frag-aware")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			fs.StringVar(&o.mix, "mix", "skewed", "synthetic profile mix: skewed (small profiles favoured) or uniform")
			fs.IntVar(&o.arrivals, "arrivals", 0, "synthetic arrivals (0: the heavy-churn default)")
			fs.Float64Var(&o.load, "load", 0, "synthetic offered load (0: the heavy-churn default)")
			fs.BoolVar(&o.memory, "memory", false, "synthetic arrivals ask for memory (MiB) instead of profile names")
			fs.StringVar(&o.writeTrace, "write-trace", "", "write the synthetic trace to this file")
			fs.StringVar(&o.allowlist, "allowlist", "", "scheduler device config with nvidia.migProfileAllowlist (default: built in)")
			fs.StringVar(&o.profiles, "profiles", "allowlist", "profiles of each GPU: allowlist, plain or all")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				return simulate(e, o)
			}
		},
	}
}

// maxArrivals bounds --arrivals: the generated trace is held in memory
// (about bytesPerArrival each) and every policy replays it, so a million
// arrivals take a few hundred MB; 2,000,000,000 would take hundreds of GB.
const (
	maxArrivals     = 1_000_000
	bytesPerArrival = 250
)

type simOptions struct {
	model, trace, synthetic, policy, mix, writeTrace, allowlist, profiles string
	gpus, arrivals                                                        int
	load                                                                  float64
	json, memory                                                          bool
}

func simulate(e *env, o simOptions) error {
	if (o.trace == "") == (o.synthetic == "") {
		return usageErr("give exactly one of --trace FILE and --synthetic SEED")
	}
	if o.gpus < 1 || o.gpus > 64 {
		return usageErr("--gpus %d: want 1..64", o.gpus)
	}
	if o.writeTrace != "" && o.synthetic == "" {
		return usageErr("--write-trace needs --synthetic")
	}
	pols, err := parsePolicies(o.policy)
	if err != nil {
		return err
	}
	if _, ok := fakehal.LookupModel(o.model); !ok {
		return usageErr("--model: unknown model %q (models: %s)", o.model, knownModels())
	}
	gpus, err := o.gpusOf(e)
	if err != nil {
		return err
	}
	evs, err := o.events(e, gpus)
	if err != nil {
		return err
	}
	rs, err := sim.Compare(gpus, evs, pols)
	if err != nil {
		return err
	}
	if o.json {
		out, err := json.MarshalIndent(rs, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", out)
		return err
	}
	names := make([]string, len(gpus[0].Profiles))
	for i, p := range gpus[0].Profiles {
		names[i] = p.Name
	}
	fmt.Fprintf(e.stdout, "%d x %s, profiles %s, %s\n\n", o.gpus, gpus[0].Name, strings.Join(names, " "), plural(len(evs), "event", "events"))
	return sim.WriteTable(e.stdout, rs)
}

// gpusOf discovers the fake node's GPUs and keeps the profiles --profiles
// chooses.
func (o simOptions) gpusOf(e *env) ([]capability.GPU, error) {
	var keep func(p capability.Profile) bool
	m, _ := fakehal.LookupModel(o.model)
	every := make([]string, len(m.Profiles))
	for i, p := range m.Profiles {
		every[i] = p.Name
	}
	policy := capability.Allowlist{{Models: []string{m.Name}, Profiles: every}}
	switch o.profiles {
	case "allowlist":
		al, err := loadAllowlist(e, o.allowlist)
		if err != nil {
			return nil, err
		}
		policy = al
	case "plain":
		keep = func(p capability.Profile) bool { return p.Variant == capability.VariantNone }
	case "all":
	default:
		return nil, usageErr("--profiles %q: want allowlist, plain or all", o.profiles)
	}
	hw, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(o.gpus, o.model)})
	if err != nil {
		return nil, err
	}
	gpus, _, err := capability.Discover(e.ctx, hw, policy)
	if err != nil {
		return nil, err
	}
	for i := range gpus {
		if keep != nil {
			gpus[i].Profiles = slices.DeleteFunc(gpus[i].Profiles, func(p capability.Profile) bool { return !keep(p) })
		}
	}
	if len(gpus[0].Profiles) == 0 {
		return nil, fmt.Errorf("%s publishes no MIG profiles under --profiles %s", gpus[0].Name, o.profiles)
	}
	return gpus, nil
}

func (o simOptions) events(e *env, gpus []capability.GPU) ([]sim.Event, error) {
	if o.trace != "" {
		data, err := e.readInput(o.trace)
		if err != nil {
			return nil, err
		}
		evs, err := sim.ReadTrace(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", displayName(o.trace), err)
		}
		return evs, nil
	}
	seed, err := strconv.ParseUint(o.synthetic, 10, 64)
	if err != nil {
		return nil, usageErr("--synthetic %q: want an unsigned integer seed", o.synthetic)
	}
	var mix sim.Mix
	switch o.mix {
	case "skewed":
		mix = sim.SkewedMix(&gpus[0])
	case "uniform":
		mix = sim.UniformMix(&gpus[0])
	default:
		return nil, usageErr("--mix %q: want skewed or uniform", o.mix)
	}
	opts := sim.HeavyChurn(seed)
	if o.arrivals < 0 || o.load < 0 {
		return nil, usageErr("--arrivals and --load must not be negative")
	}
	if o.arrivals > maxArrivals {
		return nil, usageErr("--arrivals %d: at most %d; each arrival is two events held in memory (about %d bytes) and replayed once per policy, so larger runs would exhaust memory. Split the run into several seeds instead", o.arrivals, maxArrivals, bytesPerArrival)
	}
	if o.arrivals > 0 {
		opts.Arrivals = o.arrivals
	}
	if o.load > 0 {
		opts.Load = o.load
	}
	opts.Memory = o.memory
	evs, err := sim.Generate(gpus, mix, opts)
	if err != nil {
		return nil, err
	}
	if o.writeTrace != "" {
		f, err := os.Create(o.writeTrace)
		if err != nil {
			return nil, err
		}
		if err := sim.WriteTrace(f, evs); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// parsePolicies reads --policy: "all" or a comma-separated list.
func parsePolicies(s string) ([]placement.Policy, error) {
	if s == "" || s == "all" {
		return sim.Policies(), nil
	}
	var out []placement.Policy
	for _, name := range strings.Split(s, ",") {
		p, err := parsePolicy(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
