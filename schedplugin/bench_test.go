package schedplugin_test

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
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

// BenchmarkRequeuePerRealization counts the pending pods the plugin's
// queueing hint requeues when a bound MIG pod (a 3g.20gb at slot 0, which
// locked its node until realized) is realized on one of 5,000 nodes of one
// A100-SXM4-40GB each. 100 pods are pending: 25 one-slice MIG pods, which
// fit the node now; 25 whole-GPU MIG pods, which do not; 25 pods that
// request the device without opting in to MIG, and 25 with a malformed
// request (gpumem-percentage 150), neither of which a realization helps.
// It reports requeued/realization against fit/realization, the pods that
// fit the node afterwards (by Ledger.Evaluate, Filter's own check); their
// ratio is 1 when every requeue can succeed and none is missed.
func BenchmarkRequeuePerRealization(b *testing.B) {
	const nodes = 5000
	e := newEnv(b, schedplugin.Options{})
	n1, err := e.client.CoreV1().Nodes().Get(e.ctx, "n1", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	gpus, err := kube.NodeGPUs(n1)
	if err != nil {
		b.Fatal(err)
	}
	view := e.pl.View()
	unrealized := make([]*corev1.Pod, nodes)
	for i := range nodes {
		n := n1.DeepCopy()
		n.Name, n.ResourceVersion = "node-"+strconv.Itoa(i), "1"
		view.NodeHandler().OnAdd(n, false)
		unrealized[i] = boundPod(i, gpus[0].UUID, 1, false)
		view.PodHandler().OnAdd(unrealized[i], false)
	}
	var pending []*corev1.Pod
	for i := range 25 {
		s := strconv.Itoa(i)
		pending = append(pending, migPod("small-"+s, "4000"), migPod("whole-"+s, ""), plainGPUPod("plain-"+s), malformedPod("malformed-"+s))
	}
	hint := hintForB(b, e.pl)
	rv := 1
	requeued := 0
	for i := 0; b.Loop(); i++ {
		node := i % nodes
		rv++
		old := boundPod(node, gpus[0].UUID, rv, false)
		view.PodHandler().OnUpdate(unrealized[node], old) // locked again after an earlier round
		rv++
		realized := boundPod(node, gpus[0].UUID, rv, true)
		for _, p := range pending {
			if h, err := hint(klog.Background(), p, old, realized); err != nil {
				b.Fatal(err)
			} else if h == fwk.Queue {
				requeued++
			}
		}
		unrealized[node] = realized
	}
	fit := 0
	for _, p := range pending {
		if req, err := kube.ParseRequest(p); err == nil && req.DeviceCount() > 0 {
			if _, err := view.Ledger().Evaluate("node-0", &req); err == nil {
				fit++
			}
		}
	}
	b.ReportMetric(float64(requeued)/float64(b.N), "requeued/realization")
	b.ReportMetric(float64(fit), "fit/realization")
}

// boundPod is pod i bound to node-i with a 3g.20gb at slot 0 of gpu,
// realized or not, at resourceVersion rv.
func boundPod(i int, gpu string, rv int, realized bool) *corev1.Pod {
	p := migPod("bound-"+strconv.Itoa(i), "20000")
	p.Spec.NodeName, p.ResourceVersion = "node-"+strconv.Itoa(i), strconv.Itoa(rv)
	a := reservation.Allocation{GPUUUID: gpu, Profile: "3g.20gb", Placement: capability.Placement{Start: 0, Size: 4}}
	if realized {
		a = a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 1})
	}
	p.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{a})
	return p
}

// hintForB is hintFor for a benchmark: the assigned pod update's hint.
func hintForB(b *testing.B, pl *schedplugin.Plugin) fwk.QueueingHintFn {
	events, err := pl.EventsToRegister(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range events {
		if ev.Event.Resource == fwk.AssignedPod && ev.Event.ActionType&fwk.Update != 0 {
			return ev.QueueingHintFn
		}
	}
	b.Fatal("no hint for an assigned pod's update")
	return nil
}

// BenchmarkMIGCycle measures the plugin's calls in the scheduling cycle of
// one MIG pod (one 1g device) on one node of 8 A100-SXM4-40GB: PreFilter
// over the node list, Filter and Score of the node, Reserve, then
// Unreserve, which forgets the reservation so that every iteration starts
// from the same state. The baseline is the ledger's own share of the same
// decision: Ledger.Evaluate (Filter and Score), Ledger.Reserve and
// Ledger.Forget. Both run in one process; -benchmem shows the garbage each
// cycle leaves.
func BenchmarkMIGCycle(b *testing.B) {
	e := newEnvGPUs(b, schedplugin.Options{}, fakehal.Repeat(8, "A100"))
	pod := migPod("p", "4000")
	req, err := kube.ParseRequest(pod)
	if err != nil {
		b.Fatal(err)
	}
	nodes := []fwk.NodeInfo{e.nodeInfo(b, "n1")}
	ledger := e.pl.View().Ledger()
	b.Run("baseline=Ledger", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ledger.Evaluate("n1", &req); err != nil {
				b.Fatal(err)
			}
			if _, err := ledger.Reserve("n1", string(pod.UID), &req); err != nil {
				b.Fatal(err)
			}
			ledger.Forget(string(pod.UID))
		}
	})
	b.Run("plugin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cs := framework.NewCycleState()
			if _, st := e.pl.PreFilter(e.ctx, cs, pod, nodes); !st.IsSuccess() {
				b.Fatal(st)
			}
			if st := e.pl.Filter(e.ctx, cs, pod, nodes[0]); !st.IsSuccess() {
				b.Fatal(st)
			}
			if _, st := e.pl.Score(e.ctx, cs, pod, nodes[0]); !st.IsSuccess() {
				b.Fatal(st)
			}
			if st := e.pl.Reserve(e.ctx, cs, pod, "n1"); !st.IsSuccess() {
				b.Fatal(st)
			}
			e.pl.Unreserve(e.ctx, cs, pod, "n1")
		}
	})
}
