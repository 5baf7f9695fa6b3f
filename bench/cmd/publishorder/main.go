// Command publishorder measures how the order in which a DRA driver
// publishes a node's MIG devices changes the placement quality of the
// Kubernetes structured allocator, which takes the first free matching
// device in slice order. It replays the heavy-churn quality traces (the
// traces of cmd/compare) once per published order of dra.Orders, and
// prints per trace and order the accepted arrivals and the rejections for
// capacity and fragmentation, with ratios against the current order from
// the same run, then the totals per model.
//
// Every order is replayed in every slice layout of dra.Layouts: the node's
// one ordered list read in order ("ordered-pool", an idealisation) or its
// slices in a random order per decision, as kube-scheduler's informer cache
// lists them ("shuffled-pool"), one slice per GPU as the NVIDIA driver
// publishes them ("per-GPU"), and each profile's devices kept in one slice
// ("by-profile"); the random orders come from -shuffle-seed.
//
// By default the counts come from the simulated allocator (dra.SimRun),
// which the dra package's tests check against the real one; -dra replays
// every trace with the real allocator as well and fails on any difference.
//
// Usage:
//
//	go run ./cmd/publishorder [-seeds 1,2,3] [-arrivals 4000] [-models A100-SXM4-40GB,A30] [-dra]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

func main() {
	seeds := flag.String("seeds", "1,2,3", "comma-separated trace seeds")
	arrivals := flag.Int("arrivals", 0, "arrivals per trace; 0 keeps sim.HeavyChurn's 4000")
	models := flag.String("models", strings.Join(dra.QualityModels, ","), "comma-separated fakehal models")
	withDRA := flag.Bool("dra", false, "also replay with the structured allocator and check it equals the simulator")
	shuffle := flag.Uint64("shuffle-seed", 1, "seed of the shuffled layouts' slice order")
	perTrace := flag.Bool("per-trace", false, "print every trace, layout and order, not only the totals")
	flag.Parse()
	cfg := config{seeds: *seeds, arrivals: *arrivals, models: *models, dra: *withDRA, shuffle: *shuffle, perTrace: *perTrace}
	if err := run(context.Background(), os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "publishorder:", err)
		os.Exit(1)
	}
}

type config struct {
	seeds    string
	arrivals int
	models   string
	dra      bool
	shuffle  uint64
	perTrace bool
}

// lags are the RefreshEvery values of the republication table.
var lags = []int{1, 2, 4, 16, 64}

type key struct {
	model  string
	layout dra.Layout
	order  string
}

type total struct{ accepted, capacity, fragmented int }

func (t *total) add(r sim.Result) {
	t.accepted += r.Accepted
	t.capacity += r.Capacity
	t.fragmented += r.Fragmented
}

// lagKey names a row of the republication table.
type lagKey struct {
	model  string
	layout dra.Layout
	every  int
}

// tally accumulates the replays' results per row of the totals and the
// republication tables, in the order rows first appear.
type tally struct {
	totals    map[key]*total
	keys      []key
	lagTotals map[lagKey]*total
	lagStats  map[lagKey]*dra.PublishStats
	lagKeys   []lagKey
	draTime   time.Duration // spent in the real allocator's replays
}

func newTally() *tally {
	return &tally{totals: map[key]*total{}, lagTotals: map[lagKey]*total{}, lagStats: map[lagKey]*dra.PublishStats{}}
}

func run(ctx context.Context, w io.Writer, cfg config) error {
	traces, err := selectTraces(cfg)
	if err != nil {
		return err
	}
	began := time.Now()
	fmt.Fprintf(w, "# published device order vs the DRA structured allocator, %s, %s, dra=%v\n\n",
		began.UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), cfg.dra)
	tw := tabwriter.NewWriter(io.Discard, 0, 0, 2, ' ', tabwriter.AlignRight)
	if cfg.perTrace {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	}
	fmt.Fprintln(tw, "trace\tlayout\torder\taccepted\trej capacity\trej fragmentation\tfrag / current\taccepted - current\t")
	tl := newTally()
	for _, t := range traces {
		gpus, evs, err := t.Events()
		if err != nil {
			return fmt.Errorf("%v: %w", t, err)
		}
		if err := tl.replayOrders(ctx, tw, cfg, t, gpus, evs); err != nil {
			return err
		}
		if err := tl.replayLags(cfg, t, gpus, evs); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := tl.printTotals(w); err != nil {
		return err
	}
	if err := tl.printLags(w); err != nil {
		return err
	}
	if cfg.dra {
		fmt.Fprintf(w, "\nevery replay matched the allocator; allocator replays took %s\n", tl.draTime.Round(time.Second))
	}
	_, err = fmt.Fprintf(w, "\n%d traces, %s\n", len(traces), time.Since(began).Round(time.Second))
	return err
}

// selectTraces returns the quality traces of cfg's seeds and models, with
// cfg's arrivals.
func selectTraces(cfg config) ([]dra.Trace, error) {
	var traces []dra.Trace
	for _, s := range placement.SplitList(cfg.seeds) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad seed %q: %w", s, err)
		}
		for _, t := range dra.QualityTraces(seed) {
			if !contains(placement.SplitList(cfg.models), t.Model) {
				continue
			}
			if cfg.arrivals > 0 {
				t.Opts.Arrivals = cfg.arrivals
			}
			traces = append(traces, t)
		}
	}
	if len(traces) == 0 {
		return nil, fmt.Errorf("no traces for models %q", cfg.models)
	}
	return traces, nil
}

// replayOrders replays the trace once per layout and published order,
// prints a row per replay to tw and adds it to the totals.
func (tl *tally) replayOrders(ctx context.Context, tw io.Writer, cfg config, t dra.Trace, gpus []capability.GPU, evs []sim.Event) error {
	for _, layout := range dra.Layouts() {
		var base sim.Result
		for i, o := range dra.Orders() {
			opts := dra.NodeOptions{Order: o, Layout: layout, ShuffleSeed: cfg.shuffle}
			r, err := tl.replay(ctx, cfg, gpus, evs, opts)
			if err != nil {
				return fmt.Errorf("%v, %s, %s: %w", t, layout, o, err)
			}
			if i == 0 {
				base = r
			}
			name := ""
			if i == 0 && layout == dra.OrderedPool {
				name = t.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%+d\t\n", name, layout, o, r.Accepted, r.Capacity, r.Fragmented,
				ratio(r.Fragmented, base.Fragmented), r.Accepted-base.Accepted)
			k := key{t.Model, layout, o.String()}
			if tl.totals[k] == nil {
				tl.totals[k] = &total{}
				tl.keys = append(tl.keys, k)
			}
			tl.totals[k].add(r)
		}
	}
	return nil
}

// replay replays the events with the simulated allocator and, with
// cfg.dra, with the real one too, which must agree.
func (tl *tally) replay(ctx context.Context, cfg config, gpus []capability.GPU, evs []sim.Event, opts dra.NodeOptions) (sim.Result, error) {
	r, _, err := dra.SimRun(gpus, evs, opts)
	if err != nil || !cfg.dra {
		return r, err
	}
	start := time.Now()
	d, err := dra.Run(ctx, gpus, evs, opts)
	tl.draTime += time.Since(start)
	if err != nil {
		return r, err
	}
	if d.Accepted != r.Accepted || d.Capacity != r.Capacity || d.Fragmented != r.Fragmented {
		return r, fmt.Errorf("allocator %+v differs from the simulator %+v", d, r)
	}
	return r, nil
}

// replayLags replays the trace in the refreshed order republished after
// every n-th allocation or release, for each of lags, and adds the
// results and publication counts to the republication table.
func (tl *tally) replayLags(cfg config, t dra.Trace, gpus []capability.GPU, evs []sim.Event) error {
	refreshed := dra.Orders()[len(dra.Orders())-1]
	for _, layout := range []dra.Layout{dra.ByProfile, dra.PerGPU} {
		for _, every := range lags {
			r, st, err := dra.SimRun(gpus, evs, dra.NodeOptions{Order: refreshed, Layout: layout, ShuffleSeed: cfg.shuffle, RefreshEvery: every})
			if err != nil {
				return fmt.Errorf("%v, %s, every %d: %w", t, layout, every, err)
			}
			k := lagKey{t.Model, layout, every}
			if tl.lagTotals[k] == nil {
				tl.lagTotals[k], tl.lagStats[k] = &total{}, &dra.PublishStats{}
				tl.lagKeys = append(tl.lagKeys, k)
			}
			tl.lagTotals[k].add(r)
			s := tl.lagStats[k]
			s.Publications += st.Publications
			s.ChangedSlices += st.ChangedSlices
			s.SliceWrites += st.SliceWrites
			s.GenerationBumps += st.GenerationBumps
		}
	}
	return nil
}

// printTotals prints the totals per model, layout and order.
func (tl *tally) printTotals(w io.Writer) error {
	fmt.Fprintln(w, "\n# totals over the traces above, per model and layout; ratios against the current order in the same layout")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tlayout\torder\taccepted\trej capacity\trej fragmentation\tfrag / current\taccepted / current\t")
	for _, k := range tl.keys {
		base := tl.totals[key{k.model, k.layout, dra.Orders()[0].String()}]
		r := tl.totals[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%.4f\t\n", k.model, k.layout, k.order, r.accepted, r.capacity, r.fragmented,
			ratio(r.fragmented, base.fragmented), float64(r.accepted)/float64(base.accepted))
	}
	return tw.Flush()
}

// printLags prints the republication table.
func (tl *tally) printLags(w io.Writer) error {
	fmt.Fprintln(w, "\n# the refreshed order republished after every n-th allocation or release; ratios against the current order in the same layout")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tlayout\tevery\taccepted\trej capacity\trej fragmentation\tfrag / current\taccepted / current\trepublications\tchanged slices\tgeneration bumps\tslice writes\twrites / republication\t")
	for _, k := range tl.lagKeys {
		base := tl.totals[key{k.model, k.layout, dra.Orders()[0].String()}]
		r, st := tl.lagTotals[k], tl.lagStats[k]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.4f\t%d\t%d\t%d\t%d\t%s\t\n", k.model, k.layout, k.every, r.accepted, r.capacity, r.fragmented,
			ratio(r.fragmented, base.fragmented), float64(r.accepted)/float64(base.accepted), st.Publications, st.ChangedSlices,
			st.GenerationBumps, st.SliceWrites, ratio(st.SliceWrites, st.Publications))
	}
	return tw.Flush()
}

func ratio(a, b int) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64)
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
