package dra_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/placement/sim"
)

// TestQualityVersusDRA replays the heavy-churn traces of every quality
// model with dynmig's policies and the DRA allocator, prints the table with
// -v, and asserts on the fixed seed: the DRA allocator behaves exactly as
// first-fit (same accepted, capacity and fragmentation counts), and dynmig's
// default policy has fewer fragmentation rejections than DRA on every trace.
// Acceptance is reported, not asserted: on the skewed A30 and RTX PRO 6000
// traces first-fit, and so DRA, accepts slightly more. The full-length
// traces of seeds 1-3 (cmd/compare, README.md) also hold one tie: A100 and
// H100 uniform seed 3, 28 fragmentation rejections each.
//
// The traces are the heavy-churn shape (offered load 1.3, short lives) cut
// to 1,500 arrivals so the module's tests stay under two minutes on a loaded
// machine; cmd/compare replays the full 4,000. With -short (for -race) only
// the skewed A100 and A30 traces run: shorter traces are not yet in steady
// state and their few rejections say nothing.
func TestQualityVersusDRA(t *testing.T) {
	var traces []dra.Trace
	for _, tr := range dra.QualityTraces(1) {
		if testing.Short() && (tr.Mix != "skewed" || (tr.Model != "A100-SXM4-40GB" && tr.Model != "A30")) {
			continue
		}
		tr.Opts.Arrivals = 1500
		traces = append(traces, tr)
	}
	rows, err := dra.Quality(context.Background(), traces, sim.Policies(), dra.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := dra.WriteQuality(&b, rows); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, r := range rows {
		ff, def, d := r.Results[0], r.Results[2], r.Results[len(r.Results)-1]
		if ff.Policy != "first-fit" || def.Policy != "frag-aware" || d.Policy != dra.PolicyName {
			t.Fatalf("%v: unexpected policy order %s, %s, %s", r.Trace, ff.Policy, def.Policy, d.Policy)
		}
		if d.Accepted != ff.Accepted || d.Capacity != ff.Capacity || d.Fragmented != ff.Fragmented {
			t.Errorf("%v: DRA %+v differs from first-fit %+v", r.Trace, d, ff)
		}
		if def.Fragmented >= d.Fragmented {
			t.Errorf("%v: default policy has %d fragmentation rejections, DRA %d", r.Trace, def.Fragmented, d.Fragmented)
		}
		if def.Accepted < d.Accepted {
			t.Logf("%v: default policy accepted %d, DRA %d", r.Trace, def.Accepted, d.Accepted)
		}
	}
}

func TestRunStopsWhenCtxIsDone(t *testing.T) {
	gpus, err := dra.PlainGPUs("A30", 1)
	if err != nil {
		t.Fatal(err)
	}
	evs := []sim.Event{{T: 0, Op: sim.Arrive, ID: "a"}, {T: 1, Op: sim.Arrive, ID: "b"}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := dra.Run(ctx, gpus, evs, dra.NodeOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a done ctx: got %v, want %v", err, context.Canceled)
	}
	if r.Arrivals != 0 {
		t.Errorf("arrivals allocated with a done ctx: got %d, want 0", r.Arrivals)
	}
}
