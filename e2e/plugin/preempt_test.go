package plugin_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// The priority classes of the preemption tests: the pods that fill the
// GPU and the pod created while the preemptor waits are low, the
// preemptor is high.
const (
	lowPriority  = "dynmig-e2e-low"
	highPriority = "dynmig-e2e-high"
)

// protectLabel marks the pod the PodDisruptionBudget of
// TestPreemptionPDB protects.
const protectLabel = "dynmig.io/e2e-protected"

// preemptTrials is how many trials TestPreemptionLatency runs:
// DYNMIG_E2E_PREEMPT_TRIALS, default 2.
func preemptTrials(t *testing.T) int {
	if v := os.Getenv("DYNMIG_E2E_PREEMPT_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DYNMIG_E2E_PREEMPT_TRIALS=%q: want a positive number", v)
		}
		return n
	}
	return 2
}

// profilePod returns the limits and profile preference of a MIG pod with
// one device of the given A100-40GB profile and memory.
func profilePod(profile string, mib int64, class string) (corev1.ResourceList, func(*corev1.Pod)) {
	limits := corev1.ResourceList{
		kube.ResourceGPU:    resource.MustParse("1"),
		kube.ResourceGPUMem: *resource.NewQuantity(mib, resource.DecimalSI),
	}
	return limits, func(p *corev1.Pod) {
		p.Annotations[kube.ProfilePreferenceAnnotation] = profile
		p.Spec.PriorityClassName = class
	}
}

// startPreemptEnv is startEnv with the priority classes created, after
// checking that the running profile enables DefaultPreemption (the
// shipped configuration keeps kube-scheduler's default postFilter
// plugins).
func startPreemptEnv(t *testing.T) *env {
	t.Helper()
	e := startEnv(t, false)
	plugins, ok := e.scheduler.Plugins(e.sched)
	if !ok {
		t.Fatalf("the scheduler has no profile %q", e.sched)
	}
	if !slices.ContainsFunc(plugins.PostFilter.Enabled, func(p schedconfig.Plugin) bool { return p.Name == "DefaultPreemption" }) {
		t.Fatalf("profile %q does not enable DefaultPreemption at postFilter: %v", e.sched, plugins.PostFilter.Enabled)
	}
	for name, value := range map[string]int32{lowPriority: 100, highPriority: 1000} {
		if _, err := e.admin.SchedulingV1().PriorityClasses().Create(e.ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitRegistered()
	return e
}

// layout is the GPU after fragment: the pods holding a 1g.5gb, by the
// start slot of their placement.
type layout struct {
	gpu    string
	bySlot map[uint32]string
}

// fragment fills the GPU with seven 1g.5gb pods of low priority, each
// bound and realized before the next is created (a node takes one
// unrealized MIG pod at a time), then removes those on slots 1 and 3.
// Slots 0, 2, 4, 5 and 6 stay taken; slots 1, 3 and the memory-only slot
// 7 are free, yet no 3g.20gb placement ([0,4) or [4,8)) and no 2g.10gb
// placement ([0,2), [2,4) or [4,6)) is. Freeing [0,4) takes the two pods
// on slots 0 and 2, freeing [4,8) the three on 4, 5 and 6.
//
// Which of those sets kube-scheduler's DefaultPreemption evicts depends
// on its reprieve order: it puts pods back in order of priority, then
// start time, and keeps each one after which a placement is still free,
// so a pod older than the others in the half that is cheapest to free
// would be kept and the other half freed instead (BENCHMARKS.md,
// "Preemption victim quality"). The default policy fills slots 6, 4 and 5
// first, keeping [0,4) whole for a 3g or 4g profile; fragment checks that
// and admits the pods of [0,4) in a later second than those of [4,7)
// (start times have a resolution of one second), so the cheapest half's
// pods are the youngest.
func (e *env) fragment(prefix string) layout {
	e.t.Helper()
	l := layout{bySlot: map[uint32]string{}}
	var rightAdmitted time.Time
	for i := range 7 {
		name := fmt.Sprintf("%sfill-%d", prefix, i)
		limits, edit := profilePod("1g.5gb", 4000, lowPriority)
		e.migPodWith(name, limits, edit)
		e.wait(name+" bound", 5*time.Millisecond, e.bound(name))
		a := e.allocation(name)
		if a.Profile != "1g.5gb" || a.Placement.Size != 1 {
			e.t.Fatalf("%s: reserved %s %v, want a 1g.5gb", name, a.Profile, a.Placement)
		}
		l.gpu = a.GPUUUID
		l.bySlot[a.Placement.Start] = name
		if a.Placement.Start < 4 {
			if len(l.bySlot) <= 3 {
				e.t.Fatalf("%s placed on %v before [4,7) was full: the layout's start order does not hold", name, a.Placement)
			}
			// Start times are whole seconds: admit [0,4)'s pods in a later one.
			time.Sleep(time.Until(rightAdmitted.Truncate(time.Second).Add(time.Second)))
		}
		e.admit(name)
		if a.Placement.Start >= 4 {
			rightAdmitted = time.Now()
		}
	}
	if len(l.bySlot) != 7 {
		e.t.Fatalf("fill placements %v, want slots 0 to 6", l.bySlot)
	}
	for _, slot := range []uint32{1, 3} {
		e.removeReclaimed(l.bySlot[slot])
		delete(l.bySlot, slot)
	}
	return l
}

// removeReclaimed deletes the pod as the kubelet sees it through
// (remove: its final removal follows the termination at once) and waits
// until the device plugin has reclaimed its instances.
func (e *env) removeReclaimed(name string) {
	e.t.Helper()
	pod, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.remove(name)
	if err := e.waitReclaimed(pod); err != nil {
		e.t.Fatal(err)
	}
}

// waitReclaimed waits until the device plugin has reclaimed the instances
// of the pod.
func (e *env) waitReclaimed(pod *corev1.Pod) error {
	allocs, err := kube.PodAllocations(pod)
	if err != nil {
		return err
	}
	return cluster.WaitFor(e.ctx, 5*time.Millisecond, pod.Name+"'s instances reclaimed", func(context.Context) (bool, error) {
		return !slices.ContainsFunc(e.hw.Snapshot(), func(in realize.Instance) bool {
			return slices.ContainsFunc(allocs, func(a reservation.Allocation) bool {
				return a.MIGUUID != "" && len(in.ComputeInstances) == 1 && in.ComputeInstances[0].MIGUUID == a.MIGUUID
			})
		}), nil
	})
}

// admit admits the bound pod on the node; the device plugin's Allocate
// writes its runtime identities before Admit returns.
func (e *env) admit(name string) []cluster.Admission {
	e.t.Helper()
	pod, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	adm, err := e.node.Admit(e.ctx, pod)
	if err != nil {
		e.t.Fatalf("admit %s: %v", name, err)
	}
	return adm
}

// allocation returns the one reservation entry of the pod.
func (e *env) allocation(name string) reservation.Allocation {
	e.t.Helper()
	p, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	allocs, err := kube.PodAllocations(p)
	if err != nil || len(allocs) != 1 {
		e.t.Fatalf("%s: record %v (%v), want one entry", name, allocs, err)
	}
	return allocs[0]
}

// preemptCase is one preemption on a fragment layout.
type preemptCase struct {
	prefix string
	// victims are the slots whose pods must be evicted, and only they, in
	// the order their containers end.
	victims []uint32
	// want is the preemptor's 3g.20gb placement.
	want capability.Placement
	// lowPod: before the last victim ends, create a 2g.10gb pod of low
	// priority, which the slots already freed would take but for the
	// preemptor's nomination.
	lowPod bool
}

// preemptTimes are the latencies of one preemption.
type preemptTimes struct {
	createdToBound   time.Duration // the preemptor's creation to its bind
	endedToRunning   time.Duration // the last victim's termination to the preemptor running
	createdToEvicted time.Duration // the preemptor's creation to every victim deleting
}

// preempt creates a high-priority pod that needs a 3g.20gb on l and
// checks that the scheduler evicts exactly c's victims, nominates the
// node and binds the pod only when the last victim has ended, that a
// lower-priority pod does not take the freed slots meanwhile, and that
// the kubelet's Allocate gives the preemptor its MIG device at c.want.
// The kubelet's part (the victims' containers ended, each victim
// removed at once, the preemptor admitted as soon as it is bound) is
// played by the test.
func (e *env) preempt(l layout, c preemptCase) preemptTimes {
	e.t.Helper()
	preemptor := c.prefix + "preemptor"
	var victims []string
	for _, s := range c.victims {
		victims = append(victims, l.bySlot[s])
	}
	created := time.Now()
	limits, edit := profilePod("3g.20gb", 19000, highPriority)
	e.migPodWith(preemptor, limits, edit)
	e.wait(preemptor+" nominated and victims deleting", 5*time.Millisecond, func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(ctx, preemptor, metav1.GetOptions{})
		if err != nil || p.Status.NominatedNodeName != e.node.Name {
			return false, nil
		}
		return len(e.deleting(ctx)) > 0, nil
	})
	// The scheduler deletes the victims concurrently. A wrong set would
	// never reach the wanted size, so the wait for the rest is bounded
	// (well above the milliseconds it takes) to report which set it was.
	rest, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	_ = cluster.WaitFor(rest, 5*time.Millisecond, "every victim deleting", func(ctx context.Context) (bool, error) {
		return len(e.deleting(ctx)) >= len(victims), nil
	})
	cancel()
	evicted := time.Now()
	if got := e.deleting(e.ctx); !sameSet(got, victims) {
		e.t.Fatalf("evicted %v, want exactly %v (slots %v)", got, victims, c.victims)
	}
	e.checkPreemptedByScheduler(victims)

	pods := map[string]*corev1.Pod{}
	for _, v := range victims {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, v, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		pods[v] = p
	}
	// The kubelet removes a pod within milliseconds of its containers
	// ending, so the device plugin may never list a victim ended (see
	// docs/preemption.md, "A victim removed at once").
	for _, v := range victims[:len(victims)-1] {
		e.end(pods[v])
	}
	low := ""
	if c.lowPod {
		low = c.prefix + "low"
		limits, edit := profilePod("2g.10gb", 9000, lowPriority)
		e.migPodWith(low, limits, edit)
		e.waitRefused(low)
	}
	if ok, _ := e.bound(preemptor)(e.ctx); ok {
		e.t.Fatalf("%s bound while its victim %s is still running", preemptor, victims[len(victims)-1])
	}
	last := pods[victims[len(victims)-1]]
	ended := e.end(last)

	e.wait(preemptor+" bound", 5*time.Millisecond, e.bound(preemptor))
	bound := time.Now()
	adm := e.admit(preemptor) // as the kubelet does once the pod is bound
	running := time.Now()

	e.checkPreemptor(l, preemptor, c.want, adm)
	e.checkUntouched(l, victims, low)
	return preemptTimes{createdToBound: bound.Sub(created), endedToRunning: running.Sub(ended), createdToEvicted: evicted.Sub(created)}
}

// waitRefused waits until the scheduler reported the pod unschedulable,
// and fails the test at once if the pod is bound instead.
func (e *env) waitRefused(name string) {
	e.t.Helper()
	e.wait(name+" unschedulable", 5*time.Millisecond, func(ctx context.Context) (bool, error) {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("%s, of lower priority, was bound to %s while the preemptor was nominated there", name, p.Spec.NodeName)
		}
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}), nil
	})
}

// deleting returns the names of the namespace's pods being deleted.
func (e *env) deleting(ctx context.Context) []string {
	list, err := e.admin.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			out = append(out, p.Name)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkPreemptedByScheduler checks that each victim carries the
// DisruptionTarget condition kube-scheduler's preemption sets.
func (e *env) checkPreemptedByScheduler(victims []string) {
	e.t.Helper()
	for _, v := range victims {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, v, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler
		}) {
			e.t.Fatalf("victim %s: no DisruptionTarget condition by the scheduler: %+v", v, p.Status.Conditions)
		}
	}
}

// checkPreemptor checks the preemptor's record (a 3g.20gb at want on the
// GPU, realized), the device the kubelet handed its container and the
// instance on the hardware.
func (e *env) checkPreemptor(l layout, name string, want capability.Placement, adm []cluster.Admission) {
	e.t.Helper()
	a := e.allocation(name)
	rt, ok := a.Runtime()
	if a.GPUUUID != l.gpu || a.Profile != "3g.20gb" || a.Placement != want || !ok {
		e.t.Fatalf("%s: record %+v, want a realized 3g.20gb at %v on %s", name, a, want, l.gpu)
	}
	if len(adm) != 1 || !slices.ContainsFunc(slices.Collect(maps.Values(adm[0].Env)), func(v string) bool { return strings.Contains(v, rt.MIGUUID) }) {
		e.t.Fatalf("%s: the container's environment %v does not name its MIG device %s", name, adm, rt.MIGUUID)
	}
	if !slices.ContainsFunc(e.hw.Snapshot(), func(in realize.Instance) bool {
		return in.Placement == want && len(in.ComputeInstances) == 1 && in.ComputeInstances[0].MIGUUID == rt.MIGUUID
	}) {
		e.t.Fatalf("%s: no instance %s at %v on the hardware: %+v", name, rt.MIGUUID, want, e.hw.Snapshot())
	}
}

// checkUntouched checks that the victims are gone, that every other pod
// of l still runs, not deleting, and that the low-priority pod (when not
// "") is still pending.
func (e *env) checkUntouched(l layout, victims []string, low string) {
	e.t.Helper()
	for _, name := range l.bySlot {
		p, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, name, metav1.GetOptions{})
		switch {
		case slices.Contains(victims, name):
			if !apierrors.IsNotFound(err) {
				e.t.Fatalf("victim %s not removed: %v", name, err)
			}
		case err != nil:
			e.t.Fatalf("%s, not a victim: %v", name, err)
		case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
			e.t.Fatalf("%s, not a victim, is %s (deleting %v)", name, p.Status.Phase, p.DeletionTimestamp)
		}
	}
	if got := e.deleting(e.ctx); len(got) != 0 {
		e.t.Fatalf("pods deleting after the preemption: %v", got)
	}
	if low == "" {
		return
	}
	p, err := e.admin.CoreV1().Pods(testNamespace).Get(e.ctx, low, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		e.t.Fatalf("%s, of lower priority, was bound to %s while the preemptor was nominated", low, p.Spec.NodeName)
	}
}

// clear removes every pod of the namespace as the kubelet would and
// waits until the device plugin has reclaimed every instance.
func (e *env) clear() {
	e.t.Helper()
	list, err := e.admin.CoreV1().Pods(testNamespace).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			e.removeReclaimed(p.Name)
			continue
		}
		zero := int64(0)
		if err := e.admin.CoreV1().Pods(testNamespace).Delete(e.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
	e.wait("every instance reclaimed", 20*time.Millisecond, func(context.Context) (bool, error) {
		return len(e.hw.Snapshot()) == 0, nil
	})
}

// TestPreemption runs the real kube-scheduler with DynMIG and
// DefaultPreemption (the shipped configuration): low-priority pods fill
// the GPU in a fragmented layout (fragment), and a high-priority pod
// that needs a 3g.20gb evicts exactly the two pods on [0,4), the fewest
// that free a legal placement, and no other pod. A 2g.10gb pod of low
// priority created after the first victim ended, when the slots it frees
// would fit it, stays pending: the preemptor's nomination holds [0,4).
// The preemptor is bound only after its last victim ended, and the
// kubelet's Allocate, called as soon as it is bound, realizes its
// 3g.20gb at [0,4).
func TestPreemption(t *testing.T) {
	e := startPreemptEnv(t)
	l := e.fragment("")
	times := e.preempt(l, preemptCase{victims: []uint32{0, 2}, want: capability.Placement{Start: 0, Size: 4}, lowPod: true})
	t.Logf("preemptor bound %v after its creation, running %v after its last victim ended", times.createdToBound, times.endedToRunning)
}

// TestPreemptionPDB is TestPreemption with a PodDisruptionBudget that
// protects the pod on slot 0 (minAvailable 1 of the one pod it selects):
// DefaultPreemption puts that pod back first, and the preemptor evicts
// the three pods on [4,7) instead and gets [4,8). The protected pod and
// the one on slot 2 keep running.
func TestPreemptionPDB(t *testing.T) {
	e := startPreemptEnv(t)
	minAvailable := intstr.FromInt32(1)
	pdb, err := e.admin.PolicyV1().PodDisruptionBudgets(testNamespace).Create(e.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "protect-one"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{protectLabel: "true"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := e.fragment("")
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, protectLabel)
	if _, err := e.admin.CoreV1().Pods(testNamespace).Patch(e.ctx, l.bySlot[0], types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs: write the status it computes for one
	// healthy pod of one expected, with minAvailable 1.
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1,
	}
	if _, err := e.admin.PolicyV1().PodDisruptionBudgets(testNamespace).UpdateStatus(e.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	times := e.preempt(l, preemptCase{victims: []uint32{4, 5, 6}, want: capability.Placement{Start: 4, Size: 4}, lowPod: true})
	t.Logf("preemptor bound %v after its creation, running %v after its last victim ended", times.createdToBound, times.endedToRunning)
}

// TestPreemptionLatency repeats TestPreemption's preemption, without the
// low-priority pod, DYNMIG_E2E_PREEMPT_TRIALS times (default 2) on one
// cluster, the kubelet ending both victims as soon as they are deleting,
// and logs per trial and as min, median, p90 and max (nearest rank): the
// time from the preemptor's creation to its bind, and from the
// termination of its last victim to the preemptor running (admitted as
// soon as it is bound). BENCHMARKS.md records a 20-trial run.
func TestPreemptionLatency(t *testing.T) {
	e := startPreemptEnv(t)
	var toBound, toRunning []time.Duration
	for i := range preemptTrials(t) {
		prefix := fmt.Sprintf("t%d-", i+1)
		l := e.fragment(prefix)
		times := e.preempt(l, preemptCase{prefix: prefix, victims: []uint32{0, 2}, want: capability.Placement{Start: 0, Size: 4}})
		t.Logf("trial %d: victims deleting %v after the preemptor's creation, bound %v after it, running %v after the last victim ended",
			i+1, times.createdToEvicted, times.createdToBound, times.endedToRunning)
		toBound = append(toBound, times.createdToBound)
		toRunning = append(toRunning, times.endedToRunning)
		e.clear()
	}
	t.Logf("creation to bind over %d trials: %s", len(toBound), summary(toBound))
	t.Logf("last victim ended to running over %d trials: %s", len(toRunning), summary(toRunning))
}

// summary formats min, median, p90 and max of ds (nearest rank).
func summary(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rank := func(q float64) time.Duration { return ds[int(math.Ceil(q*float64(len(ds))))-1] }
	return fmt.Sprintf("min %v, median %v, p90 %v, max %v", ds[0], rank(0.5), rank(0.9), ds[len(ds)-1])
}
