// Command compare replays the simulator's heavy-churn traces on one 8-GPU
// node of each quality model with dynmig's policies (first-fit, the deployed
// v2.10 order, the fragmentation-aware default) and with the Kubernetes DRA
// structured allocator over KEP-4815 partitionable devices, and prints the
// results side by side, then a summary per trace.
//
// Usage:
//
//	go run ./cmd/compare [-seeds 1,2,3] [-arrivals 4000] [-models A100-SXM4-40GB,A30]
//
// Results are deterministic for equal flags; the replay times in the summary
// are wall time on this machine and only indicative.
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
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

func main() {
	seeds := flag.String("seeds", "1", "comma-separated trace seeds")
	arrivals := flag.Int("arrivals", 0, "arrivals per trace; 0 keeps sim.HeavyChurn's 4000")
	models := flag.String("models", strings.Join(dra.QualityModels, ","), "comma-separated fakehal models")
	flag.Parse()
	if err := run(os.Stdout, *seeds, *arrivals, *models); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// timed is one trace's results with the wall time of the default policy's
// and DRA's replays.
type timed struct {
	row         dra.Row
	dynmig, dra time.Duration
}

func run(w io.Writer, seedList string, arrivals int, modelList string) error {
	var traces []dra.Trace
	for _, s := range placement.SplitList(seedList) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bad seed %q: %w", s, err)
		}
		for _, t := range dra.QualityTraces(seed) {
			if !contains(placement.SplitList(modelList), t.Model) {
				continue
			}
			if arrivals > 0 {
				t.Opts.Arrivals = arrivals
			}
			traces = append(traces, t)
		}
	}
	if len(traces) == 0 {
		return fmt.Errorf("no traces for models %q", modelList)
	}
	fmt.Fprintf(w, "# dynmig vs DRA structured allocator, %s, GOMAXPROCS=%d, %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOMAXPROCS(0), runtime.Version())
	var out []timed
	ctx := context.Background()
	for _, t := range traces {
		gpus, evs, err := t.Events()
		if err != nil {
			return fmt.Errorf("%v: %w", t, err)
		}
		var tr timed
		tr.row.Trace = t
		for _, pol := range sim.Policies() {
			start := time.Now()
			r, err := sim.Run(gpus, evs, pol)
			if err != nil {
				return fmt.Errorf("%v: %w", t, err)
			}
			if pol == placement.DefaultPolicy {
				tr.dynmig = time.Since(start)
			}
			tr.row.Results = append(tr.row.Results, r)
		}
		start := time.Now()
		r, err := dra.Run(ctx, gpus, evs, dra.NodeOptions{})
		if err != nil {
			return fmt.Errorf("%v: %w", t, err)
		}
		tr.dra = time.Since(start)
		tr.row.Results = append(tr.row.Results, r)
		out = append(out, tr)
	}
	rows := make([]dra.Row, len(out))
	for i := range out {
		rows[i] = out[i].row
	}
	if err := dra.WriteQuality(w, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return summary(w, out)
}

// summary prints, per trace, the default policy against DRA.
func summary(w io.Writer, out []timed) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trace\tfrag rej default\tfrag rej DRA\taccepted default - DRA\treplay default\treplay DRA\t")
	fewer := 0
	for _, t := range out {
		rs := t.row.Results
		def, d := find(rs, placement.DefaultPolicy.String()), rs[len(rs)-1]
		if def.Fragmented < d.Fragmented {
			fewer++
		}
		fmt.Fprintf(tw, "%v\t%d\t%d\t%+d\t%s\t%s\t\n", t.row.Trace, def.Fragmented, d.Fragmented,
			def.Accepted-d.Accepted, ms(t.dynmig), ms(t.dra))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\ndefault policy has fewer fragmentation rejections than DRA on %d of %d traces\n", fewer, len(out))
	return err
}

func find(rs []sim.Result, policy string) sim.Result {
	for _, r := range rs {
		if r.Policy == policy {
			return r
		}
	}
	return sim.Result{}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}
