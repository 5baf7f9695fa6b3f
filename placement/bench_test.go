package placement_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// realistic fills gpus with a deterministic mix of instances until about
// fill of the slots are taken, choosing placements at random so the
// occupancy is fragmented as after churn.
func realistic(t testing.TB, gpus []placement.GPUState, seed uint64, fill float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	for g := range gpus {
		grid := gpus[g].Grid
		target := int(fill * float64(grid.Width()))
		for tries := 0; tries < 50 && gpus[g].Used.Count() < target; tries++ {
			ps := grid.Profiles()
			p := ps[rng.IntN(len(ps)-1)] // never the full-GPU profile
			pl := p.Placements[rng.IntN(len(p.Placements))]
			if gpus[g].Used.Fits(pl) {
				gpus[g].Used = gpus[g].Used.Take(pl)
			}
		}
	}
}

// reportCPU adds cpu-ns/op, measured from start.
func reportCPU(b *testing.B, start time.Duration) {
	if d := cpuTime() - start; d > 0 && b.N > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func oneDevice(mib uint64) *placement.Request {
	return &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(mib)}}}
}

// BenchmarkSelectOneDevice is one placement decision for a 1-device request
// on an 8-GPU A100 node about half full. FirstFit is the baseline.
func BenchmarkSelectOneDevice(b *testing.B) {
	for _, pol := range []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{},
		placement.FragmentationAware{Metric: placement.InstanceCapacity}, placement.FragmentationAware{Metric: placement.FreePlacements}} {
		b.Run(pol.String(), func(b *testing.B) {
			gpus := node(b, "A100-SXM4-40GB", 8)
			realistic(b, gpus, 7, 0.5)
			req := oneDevice(4000)
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
			reportCPU(b, start)
		})
	}
}

// ledgerCluster builds a ledger of nodes x 8 empty GPUs of model.
func ledgerCluster(b testing.TB, model string, nodes int, pol placement.Policy) (*placement.Ledger, []string) {
	gpus := make([]capability.GPU, 8)
	for i := range gpus {
		gpus[i] = plainGPU(b, model, i)
	}
	l := placement.NewLedger(placement.LedgerOptions{Policy: pol})
	names := make([]string, nodes)
	for n := range names {
		names[n] = "node-" + strconv.Itoa(n)
		node := make([]capability.GPU, 8)
		copy(node, gpus)
		for i := range node {
			node[i].UUID = names[n] + "-gpu-" + strconv.Itoa(i)
		}
		if err := l.SetNode(names[n], node); err != nil {
			b.Fatal(err)
		}
	}
	return l, names
}

// BenchmarkFilterScore5000Nodes filters and scores one 1-device pod
// against 5,000 nodes of 8 A100s each holding about half its slots, as a
// scheduler cycle does; one op is the whole sweep.
func BenchmarkFilterScore5000Nodes(b *testing.B) {
	for _, pol := range []placement.Policy{placement.FirstFit{}, placement.FragmentationAware{}} {
		b.Run(pol.String(), func(b *testing.B) { benchFilterScore(b, pol) })
	}
}

func benchFilterScore(b *testing.B, pol placement.Policy) {
	l, names := ledgerCluster(b, "A100-SXM4-40GB", 5000, pol)
	// 1g.5gb instances on every GPU: 3 per GPU, alternating starts.
	for n, name := range names {
		for g := range 8 {
			for k := range 3 {
				uid := name + "-" + strconv.Itoa(g) + "-" + strconv.Itoa(k)
				r := placement.Reservation{GPUUUID: name + "-gpu-" + strconv.Itoa(g), Profile: "1g.5gb", Placement: capability.Placement{Start: uint32(6 - 2*k - n%2), Size: 1}}
				if err := l.AddPod(name, uid, []placement.Reservation{r}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	req := oneDevice(9000)
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		fit := 0
		for _, name := range names {
			if _, err := l.Evaluate(name, req); err == nil {
				fit++
			}
		}
		if fit != len(names) {
			b.Fatalf("%d of %d nodes fit", fit, len(names))
		}
	}
	reportCPU(b, start)
}

// BenchmarkLedgerBuild200k rebuilds a ledger from 200,000 single-device
// reservations (5,000 nodes x 8 A100s x 5 pods); B/op is the memory the
// build allocates.
func BenchmarkLedgerBuild200k(b *testing.B) {
	const nodes = 5000
	type pod struct {
		node, uid string
		rs        []placement.Reservation
	}
	var pods []pod
	names := make([]string, nodes)
	// Five instances per GPU: 1g@0, 1g@1, 2g@2, 1g@4, 1g@5.
	layout := []placement.Reservation{
		{Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}},
		{Profile: "1g.5gb", Placement: capability.Placement{Start: 1, Size: 1}},
		{Profile: "2g.10gb", Placement: capability.Placement{Start: 2, Size: 2}},
		{Profile: "1g.5gb", Placement: capability.Placement{Start: 4, Size: 1}},
		{Profile: "1g.5gb", Placement: capability.Placement{Start: 5, Size: 1}},
	}
	for n := range names {
		names[n] = "node-" + strconv.Itoa(n)
		for g := range 8 {
			for k, r := range layout {
				uid := names[n] + "/" + strconv.Itoa(g) + "/" + strconv.Itoa(k)
				r.PodUID, r.GPUUUID = uid, names[n]+"-gpu-"+strconv.Itoa(g)
				pods = append(pods, pod{names[n], uid, []placement.Reservation{r}})
			}
		}
	}
	gpus := make([]capability.GPU, 8)
	for i := range gpus {
		gpus[i] = plainGPU(b, "A100-SXM4-40GB", i)
	}
	nodeGPUs := make([][]capability.GPU, nodes)
	for n := range nodeGPUs {
		nodeGPUs[n] = make([]capability.GPU, 8)
		copy(nodeGPUs[n], gpus)
		for i := range nodeGPUs[n] {
			nodeGPUs[n][i].UUID = names[n] + "-gpu-" + strconv.Itoa(i)
		}
	}
	build := func() *placement.Ledger {
		l := placement.NewLedger(placement.LedgerOptions{})
		for n, name := range names {
			if err := l.SetNode(name, nodeGPUs[n]); err != nil {
				b.Fatal(err)
			}
		}
		for _, p := range pods {
			if err := l.AddPod(p.node, p.uid, p.rs); err != nil {
				b.Fatal(err)
			}
		}
		return l
	}
	// Baseline: only keeping the reservations per pod in a map, which any
	// scheduler cache does, without occupancy.
	b.Run("map-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := map[string][]placement.Reservation{}
			for _, p := range pods {
				m[p.uid] = append([]placement.Reservation(nil), p.rs...)
			}
		}
	})
	b.Run("ledger", func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime()
		for b.Loop() {
			build()
		}
		reportCPU(b, start)
		b.ReportMetric(float64(len(pods)), "reservations")
		// The heap a built ledger keeps (B/op also counts garbage).
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "live-MiB")
		runtime.KeepAlive(l)
	})
}
