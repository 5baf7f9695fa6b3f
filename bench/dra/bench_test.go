package dra_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/dynmig/dynmig/bench/dra"
	"github.com/dynmig/dynmig/placement"
)

// benchNode is the benchmark's node: 8 A100-SXM4-40GB GPUs about half full,
// with scattered instances (Fill seed 7), in both views.
func benchNode(b *testing.B) (*dra.Node, []placement.GPUState) {
	b.Helper()
	n := newNode(b, "A100-SXM4-40GB", 8)
	n.Fill(7, 0.5)
	gpus := append([]placement.GPUState(nil), n.State()...)
	return n, gpus
}

// measured is one sub-benchmark's per-op cost.
type measured struct{ ns, cpuNs float64 }

// runs holds every run of each sub-benchmark (-count n runs each n times).
type runs map[string][]measured

// record records b's per-op wall and CPU time under name and reports cpu-ns/op.
func (r runs) record(b *testing.B, name string, cpuStart time.Duration) {
	m := measured{ns: float64(b.Elapsed().Nanoseconds()) / float64(b.N)}
	if d := cpuTime() - cpuStart; d > 0 {
		m.cpuNs = float64(d.Nanoseconds()) / float64(b.N)
		b.ReportMetric(m.cpuNs, "cpu-ns/op")
	}
	r[name] = append(r[name], m)
}

// median returns the median wall and CPU time per op of name's runs so far,
// each taken separately; the median damps other people's load.
func (r runs) median(name string) measured {
	ms := r[name]
	if len(ms) == 0 {
		return measured{}
	}
	med := func(f func(measured) float64) float64 {
		v := make([]float64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return measured{ns: med(func(m measured) float64 { return m.ns }), cpuNs: med(func(m measured) float64 { return m.cpuNs })}
}

// BenchmarkOneDevice is one placement decision for the same 1-device request
// (4000 MiB, so 1g.5gb or larger) on the same 8-GPU A100 node, by dynmig's
// policies and by the DRA structured allocator, in one run. DRA sub-benchmarks
// report their cost divided by dynmig's default policy's (median of its runs
// so far) as x-default (wall) and x-default-cpu (CPU time); with -v the
// parent logs every ratio between medians over all -count runs.
//
//   - dynmig/<policy>: Selector.Select with a reused Selector.
//   - dra/fresh: what kube-scheduler does for one pod on one node: a new
//     allocator over the allocated state, then Allocate for the claim (a
//     prioritized list of the covering profiles, one CEL selector each).
//   - dra/reused: Allocate alone on one allocator, whose pool counters stay
//     cached: a lower bound no scheduler cycle reaches.
//   - dra/exact: a fresh allocator and a claim with one selector naming
//     1g.5gb, no prioritized list.
//   - dra/all-features: dra/fresh with every DRA feature on, which selects
//     the allocator's "experimental" implementation.
func BenchmarkOneDevice(b *testing.B) {
	ctx := context.Background()
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(4000)}}}
	got := runs{}
	for _, pol := range []placement.Policy{placement.DefaultPolicy, placement.FirstFit{}, placement.V210{}} {
		name := "dynmig/" + pol.String()
		b.Run(name, func(b *testing.B) {
			_, gpus := benchNode(b)
			sel := placement.NewSelector(placement.SelectorOptions{Policy: pol})
			dst := make([]placement.Assignment, 0, 4)
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				var err error
				if dst, err = sel.Select(gpus, req, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
			got.record(b, name, start)
		})
	}
	all := structured.Features{AdminAccess: true, CompatibilityGroups: true, ConsumableCapacity: true,
		DerivedAttributes: true, DeviceBindingAndStatus: true, DeviceTaints: true, FractionalCapacityRange: true,
		ListTypeAttributes: true, OptionalNodeOperations: true, PartitionableDevices: true, PrioritizedList: true}
	dras := []struct {
		name  string
		opts  dra.NodeOptions
		exact bool
		reuse bool
	}{
		{name: "dra/fresh"},
		{name: "dra/reused", reuse: true},
		{name: "dra/exact", exact: true},
		{name: "dra/all-features", opts: dra.NodeOptions{Features: &all}},
	}
	for _, bc := range dras {
		b.Run(bc.name, func(b *testing.B) {
			n, gpus := benchNode(b)
			if bc.opts.Features != nil {
				n = dra.NewNode(n.Model(), bc.opts)
				n.Fill(7, 0.5)
			}
			c := req.Containers[0]
			if bc.exact {
				c = placement.ContainerRequest{Devices: 1, Profile: "1g.5gb"}
			}
			claim, err := n.Model().Claim("bench", c)
			if err != nil {
				b.Fatal(err)
			}
			// Same question, same answer: DRA must pick first-fit's device.
			want, err := placement.Select(gpus, req, placement.FirstFit{})
			if err != nil {
				b.Fatal(err)
			}
			devs, err := n.Allocate(ctx, claim)
			if err != nil || len(devs) != 1 || devs[0].GPU != want[0].GPU || devs[0].Placement != want[0].Placement {
				b.Fatalf("DRA chose %v (%v), first-fit %v", devs, err, want)
			}
			a, err := n.NewAllocator(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if !bc.reuse {
					if a, err = n.NewAllocator(ctx); err != nil {
						b.Fatal(err)
					}
				}
				if devs, err := n.AllocateWith(ctx, a, claim); err != nil || len(devs) != 1 {
					b.Fatal(devs, err)
				}
			}
			got.record(b, bc.name, start)
			if base := got.median("dynmig/" + placement.DefaultPolicy.String()); base.ns > 0 {
				m := got[bc.name][len(got[bc.name])-1]
				b.ReportMetric(m.ns/base.ns, "x-default")
				if base.cpuNs > 0 {
					b.ReportMetric(m.cpuNs/base.cpuNs, "x-default-cpu")
				}
			}
		})
	}
	b.Log("\n" + ratioTable(got))
}

// ratioTable lists every DRA variant's median wall and CPU time divided by
// every dynmig policy's, measured in this run.
func ratioTable(got runs) string {
	var sb strings.Builder
	pols := []string{"dynmig/frag-aware", "dynmig/first-fit", "dynmig/v2.10"}
	fmt.Fprintf(&sb, "%-24s", "median ratio (wall/cpu)")
	for _, p := range pols {
		fmt.Fprintf(&sb, " %22s", p)
	}
	sb.WriteByte('\n')
	for _, d := range []string{"dra/fresh", "dra/reused", "dra/exact", "dra/all-features"} {
		dm := got.median(d)
		if dm.ns == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%-24s", d)
		for _, p := range pols {
			pm := got.median(p)
			if pm.ns == 0 || pm.cpuNs == 0 {
				fmt.Fprintf(&sb, " %22s", "-")
				continue
			}
			fmt.Fprintf(&sb, " %10.0fx / %7.0fx", dm.ns/pm.ns, dm.cpuNs/pm.cpuNs)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}
