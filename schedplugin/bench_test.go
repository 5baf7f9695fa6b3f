package schedplugin_test

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/schedplugin"
)

// BenchmarkFilterScore measures the plugin's Filter and Score of one MIG
// pod (one 1g device) on one node of 8 A100-SXM4-40GB against its
// baseline, placement.Ledger.Evaluate of the same request on the same
// ledger, the decision Filter wraps. The two sub-benchmarks run in one
// process; BENCHMARKS.md records their ratio.
func BenchmarkFilterScore(b *testing.B) {
	e := newEnvGPUs(b, schedplugin.Options{}, fakehal.Repeat(8, "A100"))
	pod := migPod("p", "4000")
	req, err := kube.ParseRequest(pod)
	if err != nil {
		b.Fatal(err)
	}
	ni := e.nodeInfo(b, "n1")
	ledger := e.pl.View().Ledger()
	if _, err := ledger.Evaluate("n1", &req); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline=Ledger.Evaluate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ledger.Evaluate("n1", &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	cs := framework.NewCycleState()
	if _, st := e.pl.PreFilter(e.ctx, cs, pod, []fwk.NodeInfo{ni}); !st.IsSuccess() {
		b.Fatal(st)
	}
	b.Run("Filter+Score", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if st := e.pl.Filter(e.ctx, cs, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
			if _, st := e.pl.Score(e.ctx, cs, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	})
}

// BenchmarkFilterScoreRatio is BenchmarkFilterScore with the two sides
// interleaved in batches of 64 calls within each iteration, so that the
// load of a shared machine falls on both alike. It reports each side's
// time per call (evaluate-ns/call, filter+score-ns/call) and their ratio
// (ratio, the claim's figure).
func BenchmarkFilterScoreRatio(b *testing.B) {
	e := newEnvGPUs(b, schedplugin.Options{}, fakehal.Repeat(8, "A100"))
	pod := migPod("p", "4000")
	req, err := kube.ParseRequest(pod)
	if err != nil {
		b.Fatal(err)
	}
	ni := e.nodeInfo(b, "n1")
	ledger := e.pl.View().Ledger()
	cs := framework.NewCycleState()
	if _, st := e.pl.PreFilter(e.ctx, cs, pod, []fwk.NodeInfo{ni}); !st.IsSuccess() {
		b.Fatal(st)
	}
	const batch = 64
	var evaluate, filterScore time.Duration
	for b.Loop() {
		start := time.Now()
		for range batch {
			if _, err := ledger.Evaluate("n1", &req); err != nil {
				b.Fatal(err)
			}
		}
		mid := time.Now()
		for range batch {
			if st := e.pl.Filter(e.ctx, cs, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
			if _, st := e.pl.Score(e.ctx, cs, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
		evaluate += mid.Sub(start)
		filterScore += time.Since(mid)
	}
	calls := float64(b.N * batch)
	b.ReportMetric(float64(evaluate.Nanoseconds())/calls, "evaluate-ns/call")
	b.ReportMetric(float64(filterScore.Nanoseconds())/calls, "filter+score-ns/call")
	b.ReportMetric(float64(filterScore)/float64(evaluate), "ratio")
}

// BenchmarkPreFilter measures PreFilter of one MIG pod over 5,000 nodes,
// the list kube-scheduler passes every cycle: its cost is the per-pod
// overhead beside the per-node Filter.
func BenchmarkPreFilter(b *testing.B) {
	e := newEnv(b, schedplugin.Options{})
	pod := migPod("p", "4000")
	nodes := make([]fwk.NodeInfo, 5000)
	for i := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + strconv.Itoa(i)}})
		nodes[i] = ni
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, st := e.pl.PreFilter(e.ctx, framework.NewCycleState(), pod, nodes); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
}
