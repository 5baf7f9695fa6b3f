package dra

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

// PlainGPUs returns n GPUs of a built-in fakehal model (looked up with
// [fakehal.LookupModel]) with only their plain profiles (no +me, +gfx, -me
// variants), as a realistic allowlist publishes them. UUIDs are
// "GPU-<node>-<i>".
func PlainGPUs(model string, n int) ([]capability.GPU, error) {
	m, ok := fakehal.LookupModel(model)
	if !ok {
		return nil, fmt.Errorf("%w: unknown model %q", ErrModel, model)
	}
	out := make([]capability.GPU, n)
	for i := range out {
		dev := capability.DeviceInfo{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", strings.ReplaceAll(model, " ", "-"), i),
			Name: m.Name, MemoryMB: m.MemoryMB, MIGMode: capability.MIGEnabled}
		g, errs := capability.GPUFromDevice(dev, m.Profiles)
		if len(errs) > 0 {
			return nil, fmt.Errorf("%w: %s: %v", ErrModel, model, errs)
		}
		kept := g.Profiles[:0]
		for _, p := range g.Profiles {
			if p.Variant == capability.VariantNone {
				kept = append(kept, p)
			}
		}
		g.Profiles = kept
		out[i] = g
	}
	return out, nil
}

// Trace names one synthetic trace of package placement/sim: a model, a
// profile mix and generator options.
type Trace struct {
	Model string // a fakehal model name or alias
	GPUs  int    // GPUs on the node
	Mix   string // "uniform" or "skewed", see [sim.MixByName]
	// Opts are the generator options; [sim.HeavyChurn] for the quality
	// traces. Opts.Memory makes arrivals memory demands.
	Opts sim.GenOptions
}

// String returns e.g. "A100 skewed heavy-churn seed 1".
func (t Trace) String() string {
	s := t.Model + " " + t.Mix
	if t.Opts.Memory {
		s += "(MiB)"
	}
	return fmt.Sprintf("%s load %.1f seed %d", s, t.Opts.Load, t.Opts.Seed)
}

// Events builds the node's GPUs and generates the trace.
func (t Trace) Events() ([]capability.GPU, []sim.Event, error) {
	gpus, err := PlainGPUs(t.Model, t.GPUs)
	if err != nil {
		return nil, nil, err
	}
	if len(gpus) == 0 {
		return nil, nil, fmt.Errorf("%w: no GPUs", sim.ErrMix)
	}
	mix, err := sim.MixByName(t.Mix, &gpus[0])
	if err != nil {
		return nil, nil, err
	}
	evs, err := sim.Generate(gpus, mix, t.Opts)
	return gpus, evs, err
}

// QualityModels are the models of the quality comparison (issue 3's
// heavy-churn models).
var QualityModels = []string{"A100-SXM4-40GB", "H100", "A30", "RTX PRO 6000"}

// QualityTraces returns the heavy-churn traces for seed: every model of
// [QualityModels] on an 8-GPU node, with the uniform and the skewed mix by
// profile name and the skewed mix by memory demand.
func QualityTraces(seed uint64) []Trace {
	var out []Trace
	for _, m := range QualityModels {
		mem := sim.HeavyChurn(seed)
		mem.Memory = true
		out = append(out,
			Trace{Model: m, GPUs: 8, Mix: "uniform", Opts: sim.HeavyChurn(seed)},
			Trace{Model: m, GPUs: 8, Mix: "skewed", Opts: sim.HeavyChurn(seed)},
			Trace{Model: m, GPUs: 8, Mix: "skewed", Opts: mem},
		)
	}
	return out
}

// Row is one trace's results, one per policy, DRA last.
type Row struct {
	Trace   Trace
	Results []sim.Result
}

// Quality replays every trace with pols (nil: [sim.Policies]) and the DRA
// allocator.
func Quality(ctx context.Context, traces []Trace, pols []placement.Policy, opts NodeOptions) ([]Row, error) {
	if pols == nil {
		pols = sim.Policies()
	}
	var rows []Row
	for _, t := range traces {
		gpus, evs, err := t.Events()
		if err != nil {
			return nil, fmt.Errorf("%v: %w", t, err)
		}
		rs, err := Compare(ctx, gpus, evs, pols, opts)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", t, err)
		}
		rows = append(rows, Row{Trace: t, Results: rs})
	}
	return rows, nil
}

// WriteQuality prints rows as one table: per trace and policy, accepted,
// rejected for capacity, for fragmentation, for other reasons, and mean slot
// utilisation.
func WriteQuality(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trace\tpolicy\tarrivals\taccepted\trej capacity\trej fragmentation\trej other\tmean slot util\t")
	for _, r := range rows {
		for i, res := range r.Results {
			name := ""
			if i == 0 {
				name = r.Trace.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", name, res.Policy, res.Arrivals, res.Accepted,
				res.Capacity, res.Fragmented, res.NoProfile+res.Other, 100*res.Utilisation)
		}
	}
	return tw.Flush()
}
