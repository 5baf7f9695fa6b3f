package schedplugin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
)

// slot is a realized pod bound to n1 at one placement of its A100-40GB: a
// 1g.5gb at one slot unless profile names another (1g.5gb placements are
// slots 0..6; 3g.20gb ones [0,4) and [4,8)).
type slot struct {
	name    string
	start   uint32
	prio    int32
	age     int // minutes since it started: older pods are reprieved first
	label   string
	profile string // "" is 1g.5gb
	size    uint32 // the placement's size with profile; "" profile: 1
}

// bindRealized creates the pods of slots on n1, realized, and waits until
// the view counts them.
func (e *env) bindRealized(t *testing.T, slots []slot) []*corev1.Pod {
	t.Helper()
	gpus, ok := e.pl.View().Ledger().Node("n1")
	require.True(t, ok)
	var pods []*corev1.Pod
	for i, s := range slots {
		profile, size := "1g.5gb", uint32(1)
		if s.profile != "" {
			profile, size = s.profile, s.size
		}
		p := migPod(s.name, "4000")
		p.Spec.NodeName = "n1"
		p.Spec.Priority = &s.prio
		if s.label != "" {
			p.Labels = map[string]string{"app": s.label}
		}
		started := metav1.NewTime(time.Unix(1000, 0).Add(-time.Duration(s.age) * time.Minute))
		p.Status.StartTime = &started
		p.Status.Phase = corev1.PodRunning
		p.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{
			reservation.Allocation{GPUUUID: gpus[0].Grid.UUID(), Profile: profile, Placement: capability.Placement{Start: s.start, Size: size}}.WithRuntime(
				reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: uint32(9 + i)})})
		// The API server drops a created pod's status: the kubelet
		// writes it, start time included, which the reprieve orders by.
		created := e.create(t, p)
		created.Status = p.Status
		created, err := e.client.CoreV1().Pods(created.Namespace).UpdateStatus(e.ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
		pods = append(pods, created)
	}
	e.waitFor(t, func() bool {
		for _, p := range pods {
			if _, _, ok := e.pl.View().Ledger().Pod(string(p.UID)); !ok {
				return false
			}
		}
		return true
	})
	return pods
}

// nominator is a fwk.PodNominator holding fixed nominated pods.
type nominator map[string][]fwk.PodInfo

func (n nominator) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (n nominator) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (n nominator) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (n nominator) NominatedPodsForNode(node string) []fwk.PodInfo                { return n[node] }

// preemption is a framework with DynMIG at preFilter and filter over a
// snapshot of n1 holding pods, with nominated pods, and upstream's
// DefaultPreemption on it.
func (e *env) preemption(t *testing.T, pods []*corev1.Pod, nominated nominator) (framework.Framework, *defaultpreemption.DefaultPreemption, fwk.NodeInfo) {
	t.Helper()
	fh, dp, ni, stop := e.preemptionFramework(t, pods, nominated)
	t.Cleanup(stop)
	return fh, dp, ni
}

// preemptionFramework is preemption with the function that stops the
// framework returned to the caller.
func (e *env) preemptionFramework(t testing.TB, pods []*corev1.Pod, nominated nominator) (framework.Framework, *defaultpreemption.DefaultPreemption, fwk.NodeInfo, func()) {
	t.Helper()
	schedmetrics.Register() // the framework instruments its plugins
	n1, err := e.client.CoreV1().Nodes().Get(e.ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	snap := cache.NewSnapshot(pods, []*corev1.Node{n1})
	ctx, cancel := context.WithCancel(e.ctx)
	dynmig := func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return e.pl, nil }
	fh, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensions(schedplugin.Name, dynmig, "PreFilter", "Filter"),
	}, "", frameworkruntime.WithSnapshotSharedLister(snap), frameworkruntime.WithMutableSnapshotLister(snap),
		frameworkruntime.WithPodNominator(nominated), frameworkruntime.WithClientSet(e.client),
		// DefaultPreemption's executor takes a pod lister; the dry run
		// does not read it, so the factory is never started.
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(e.client, 0)),
		frameworkruntime.WithLogger(klog.Background().V(1)))
	require.NoError(t, err)
	stop := func() { cancel(); frameworkruntime.WaitForShutdown(fh) }
	dp, err := defaultpreemption.New(ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, fh, plfeature.Features{})
	require.NoError(t, err)
	ni, err := snap.NodeInfos().Get("n1")
	require.NoError(t, err)
	return fh, dp, ni, stop
}

// victimsOn runs upstream's victim selection for preemptor on n1.
func victimsOn(t testing.TB, ctx context.Context, fh framework.Framework, dp *defaultpreemption.DefaultPreemption, ni fwk.NodeInfo, preemptor *corev1.Pod, pdbs []*policy.PodDisruptionBudget) ([]string, *fwk.Status) {
	t.Helper()
	cs := framework.NewCycleState()
	_, st, _ := fh.RunPreFilterPlugins(ctx, cs, preemptor)
	require.True(t, st.IsSuccess(), "%v", st)
	all, err := dp.Evaluator.GetVictimsOnNode(ctx, ni)
	require.NoError(t, err)
	victims, _, st := dp.SelectVictimsOnNode(ctx, cs.Clone(), preemptor, ni.Snapshot(), all, pdbs)
	var names []string
	for _, v := range victims {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	return names, st
}

func priorityPod(name, gpumem string, prio int32) *corev1.Pod {
	p := migPod(name, gpumem)
	p.Spec.Priority = &prio
	return p
}

// fullGPU is seven 1g.5gb pods filling n1's GPU; the pods on [0,4) are
// older than those on [4,8), so DefaultPreemption tries to keep them
// first.
func fullGPU() []slot {
	var s []slot
	for i := range uint32(7) {
		age := 10
		if i >= 4 {
			age = 1
		}
		s = append(s, slot{name: "low-" + string(rune('0'+i)), start: i, prio: 10, age: age})
	}
	return s
}

// A high-priority 3g.20gb pod on a GPU that seven low-priority 1g.5gb pods
// fill preempts exactly the three on [4,8): the fewest that free one of its
// legal placements. Without the cycle-local occupancy, DynMIG would refuse
// the node even with every victim removed, and nothing would be preempted.
func TestPreemptionFreesALegalPlacement(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, fullGPU())
	fh, dp, ni := e.preemption(t, pods, nil)
	preemptor := e.create(t, priorityPod("big", "19000", 100))
	got, st := victimsOn(t, e.ctx, fh, dp, ni, preemptor, nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"low-4", "low-5", "low-6"}, got)
}

// On a fragmented GPU with free slots a count of free slots is not enough:
// the 3g.20gb needs [0,4) or [4,8) whole. With pods on slots 0, 2, 4 and 6
// (1, 3 and 5 free) two victims are needed, on one half: the half whose
// oldest pod is younger, so the oldest pod is kept, as upstream's reprieve
// keeps it, whichever half the placement policy would prefer.
func TestPreemptionFragmented(t *testing.T) {
	for _, tc := range []struct {
		name string
		ages [4]int // of the pods on 0, 2, 4 and 6
		want []string
	}{
		{"oldest on [0,4)", [4]int{30, 1, 2, 3}, []string{"c", "d"}},
		{"oldest on [4,8)", [4]int{2, 3, 30, 1}, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, schedplugin.Options{})
			pods := e.bindRealized(t, []slot{
				{name: "a", start: 0, prio: 10, age: tc.ages[0]}, {name: "b", start: 2, prio: 10, age: tc.ages[1]},
				{name: "c", start: 4, prio: 10, age: tc.ages[2]}, {name: "d", start: 6, prio: 10, age: tc.ages[3]},
			})
			fh, dp, ni := e.preemption(t, pods, nil)
			got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), nil)
			require.True(t, st.IsSuccess(), "%v", st)
			assert.Equal(t, tc.want, got)
		})
	}
}

// protect creates a PodDisruptionBudget allowing allowed disruptions of
// the pods labelled app=label, and waits until the scheduler's informer
// lists it: DynMIG and DefaultPreemption read the same lister.
func (e *env) protect(t *testing.T, label string, allowed int32) *policy.PodDisruptionBudget {
	t.Helper()
	pdb := &policy.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: label},
		Spec:   policy.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": label}}},
		Status: policy.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	pdb, err := e.client.PolicyV1().PodDisruptionBudgets("default").Create(e.ctx, pdb, metav1.CreateOptions{})
	require.NoError(t, err)
	lister := e.factory.Policy().V1().PodDisruptionBudgets().Lister()
	e.waitFor(t, func() bool {
		_, err := lister.PodDisruptionBudgets("default").Get(label)
		return err == nil
	})
	return pdb
}

// A PodDisruptionBudget that protects a pod on [4,8) makes that half the
// dearer one, however few its victims: the victims are then the four on
// [0,4), as upstream's reprieve (which puts protected pods back first)
// would also choose.
func TestPreemptionHonoursPDB(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()
	s[5].label = "keep"
	pods := e.bindRealized(t, s)
	pdb := e.protect(t, "keep", 0)
	fh, dp, ni := e.preemption(t, pods, nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), []*policy.PodDisruptionBudget{pdb})
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"low-0", "low-1", "low-2", "low-3"}, got)
}

// A budget's allowed disruptions are spent by the more important pods
// first, MIG or not, as upstream counts them: the pod without MIG devices
// (priority 50) spends the one disruption allowed, so evicting low-5 would
// violate the budget and the victims are the four on [0,4).
func TestPreemptionPDBCountsOtherPods(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()
	s[5].label = "keep"
	pods := e.bindRealized(t, s)
	prio, started := int32(50), metav1.NewTime(time.Unix(0, 0))
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain", UID: "uid-plain", Labels: map[string]string{"app": "keep"}},
		Spec:   corev1.PodSpec{NodeName: "n1", Priority: &prio, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started}}
	pdb := e.protect(t, "keep", 1)
	fh, dp, ni := e.preemption(t, append(pods, plain), nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), []*policy.PodDisruptionBudget{pdb})
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"low-0", "low-1", "low-2", "low-3"}, got)
}

// Where every placement's victims include a protected pod, the budget is
// respected on a best-effort basis, as upstream's: the cheapest placement
// among those violating the fewest budgets is freed.
func TestPreemptionPDBBestEffort(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()
	s[1].label, s[5].label = "keep", "keep"
	pods := e.bindRealized(t, s)
	pdb := e.protect(t, "keep", 0)
	fh, dp, ni := e.preemption(t, pods, nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), []*policy.PodDisruptionBudget{pdb})
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"low-4", "low-5", "low-6"}, got)
}

// Upstream's reprieve order alone loses here: it puts the older 3g.20gb
// on [0,4) back first, and then each 1g.5gb on [4,8) in turn, evicting all
// three. DynMIG pins [0,4) once the lower-priority pods are removed, so the
// reprieve keeps the three and evicts the one pod that suffices.
func TestPreemptionFewestVictims(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, []slot{
		{name: "old-3g", start: 0, prio: 10, age: 60, profile: "3g.20gb", size: 4},
		{name: "a", start: 4, prio: 10, age: 5}, {name: "b", start: 5, prio: 10, age: 5}, {name: "c", start: 6, prio: 10, age: 5},
	})
	fh, dp, ni := e.preemption(t, pods, nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"old-3g"}, got)
}

// A nominated pod of higher priority keeps the placement it was promised
// through another preemptor's dry run: the 2g.10gb nominated to n1 fits
// only [4,6) with the node as it is, so the 3g.20gb's placement is chosen
// around it ([0,4), one victim) and the 1g.5gb on 6 is kept.
func TestPreemptionAroundNominatedPod(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, []slot{
		{name: "old-3g", start: 0, prio: 10, age: 60, profile: "3g.20gb", size: 4},
		{name: "a", start: 6, prio: 10, age: 5},
	})
	nominated := priorityPod("nominated", "9000", 200)
	nominated.Status.NominatedNodeName = "n1"
	fh, dp, ni := e.preemption(t, pods, nominatedOn(t, nominated))
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"old-3g"}, got)
}

// A preemptor of two devices gets a pinned placement for each, the second
// chosen given the first: slot 6 is free, and one young 1g.5gb makes room
// for the other device.
func TestPreemptionTwoDevices(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, []slot{
		{name: "old-3g", start: 0, prio: 10, age: 60, profile: "3g.20gb", size: 4},
		{name: "a", start: 4, prio: 10, age: 5}, {name: "b", start: 5, prio: 10, age: 5},
	})
	fh, dp, ni := e.preemption(t, pods, nil)
	preemptor := migPodN("two", 2, "4000")
	prio := int32(100)
	preemptor.Spec.Priority = &prio
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, preemptor), nil)
	require.True(t, st.IsSuccess(), "%v", st)
	require.Len(t, got, 1)
	assert.Contains(t, []string{"a", "b"}, got[0])
}

// The pinned placement never trades a lower priority for a smaller count:
// here one victim would do on [0,4), but it has a higher priority than the
// three on [4,8).
func TestPreemptionLowestPriorityBeforeCount(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, []slot{
		{name: "mid-3g", start: 0, prio: 50, age: 1, profile: "3g.20gb", size: 4},
		{name: "a", start: 4, prio: 10, age: 5}, {name: "b", start: 5, prio: 10, age: 5}, {name: "c", start: 6, prio: 10, age: 5},
	})
	fh, dp, ni := e.preemption(t, pods, nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"a", "b", "c"}, got)
}

// Victims of higher priority than the preemptor are never chosen: with
// only they able to free a placement, the node has no victims.
func TestPreemptionNoVictimSetHelps(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()
	for i := range s {
		if i != 0 && i != 5 {
			s[i].prio = 1000 // each half keeps a pod the preemptor cannot evict
		}
	}
	pods := e.bindRealized(t, s)
	fh, dp, ni := e.preemption(t, pods, nil)
	got, st := victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("big", "19000", 100)), nil)
	assert.Empty(t, got)
	assert.False(t, st.IsSuccess(), "no victim set frees a 3g.20gb placement")

	// A preemptor above them all frees the half whose older pods are
	// fewer to lose: the same layout, so the refusal above came from the
	// priorities.
	got, st = victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("top", "19000", 2000)), nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, []string{"low-4", "low-5", "low-6"}, got)

	// A request no GPU of the node can ever hold is unresolvable there.
	_, st = victimsOn(t, e.ctx, fh, dp, ni, e.create(t, priorityPod("huge", "80000", 100)), nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code(), "%v", st)
}

// nominatedOn returns a nominator holding pod, nominated to n1.
func nominatedOn(t *testing.T, pod *corev1.Pod) nominator {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	require.NoError(t, err)
	return nominator{"n1": {pi}}
}

// filterWithNominated runs the framework's Filter of pod on n1 with the
// nominated pods added, as the scheduling cycle does.
func filterWithNominated(t *testing.T, ctx context.Context, fh framework.Framework, ni fwk.NodeInfo, pod *corev1.Pod) *fwk.Status {
	t.Helper()
	cs := framework.NewCycleState()
	_, st, _ := fh.RunPreFilterPlugins(ctx, cs, pod)
	require.True(t, st.IsSuccess(), "%v", st)
	return fh.RunFilterPluginsWithNominatedPods(ctx, cs, pod, ni)
}

// While a preemptor is nominated to n1, a pod of lower priority cannot
// take the placement its victims freed; one of equal priority is not
// shielded against (upstream adds only nominated pods of higher or equal
// priority), and elsewhere on the GPU the small pod still fits.
func TestNominatedPodKeepsFreedPlacement(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()[:4] // [4,8) freed: its victims are gone
	pods := e.bindRealized(t, s)
	preemptor := priorityPod("big", "19000", 100)
	preemptor.Status.NominatedNodeName = "n1"
	fh, _, ni := e.preemption(t, pods, nominatedOn(t, preemptor))

	st := filterWithNominated(t, e.ctx, fh, ni, priorityPod("late", "4000", 5))
	assert.Equal(t, fwk.Unschedulable, st.Code(), "a lower-priority 1g.5gb takes the preemptor's [4,8): %v", st)

	// Without the nominated pod the same pod fits.
	fh, _, ni = e.preemption(t, pods, nil)
	st = filterWithNominated(t, e.ctx, fh, ni, priorityPod("late", "4000", 5))
	assert.True(t, st.IsSuccess(), "%v", st)
}

// The preemptor's victim is still terminating when a lower-priority pod
// comes: the slots left free beside it are inside the placement the
// preemptor was nominated for, so the pod is refused there too (the node
// has devices to spare: the device count does not refuse it).
func TestNominatedPodKeepsPlacementWhileVictimsTerminate(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	s := fullGPU()[:5] // slots 5 and 6 free; 4 is the preemptor's victim
	pods := e.bindRealized(t, s)
	now := metav1.NewTime(time.Unix(1000, 0))
	for _, p := range pods[4:] {
		p.DeletionTimestamp = &now
	}
	preemptor := priorityPod("big", "19000", 100)
	preemptor.Status.NominatedNodeName = "n1"
	fh, _, ni := e.preemption(t, pods, nominatedOn(t, preemptor))
	st := filterWithNominated(t, e.ctx, fh, ni, priorityPod("late", "4000", 5))
	assert.Equal(t, fwk.Unschedulable, st.Code(), "a lower-priority 1g.5gb takes a free slot of the preemptor's [4,8): %v", st)
}

// Victims' instances are reclaimed by the device plugin only after their
// containers stop: the view holds a terminating victim's slots, so the
// preemptor is refused (Unschedulable, retried on the victim's deletion)
// until the victims are gone, and then bound onto the freed placement.
func TestPreemptorWaitsForTerminatingVictims(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, fullGPU())
	// DefaultPreemption deletes its victims gracefully: they are deleting
	// until their containers stop or the deadline passes (the view's
	// clock is at 1000 s).
	deadline, grace := metav1.NewTime(time.Unix(1030, 0)), int64(30)
	for _, p := range pods[4:] {
		deleting := p.DeepCopy()
		deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &deadline, &grace
		deleting, err := e.client.CoreV1().Pods("default").Update(e.ctx, deleting, metav1.UpdateOptions{})
		require.NoError(t, err)
		e.pl.View().PodHandler().OnUpdate(p, deleting) // seen deleting, not only running
	}
	preemptor := e.create(t, priorityPod("big", "19000", 100))
	_, _, statuses := e.cycle(t, preemptor, "n1")
	assert.Equal(t, fwk.Unschedulable, statuses["n1"].Code(), "bound over terminating victims: %v", statuses["n1"])

	zero := int64(0)
	for _, p := range pods[4:] { // their containers stopped: the pods are removed
		require.NoError(t, e.client.CoreV1().Pods("default").Delete(e.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}
	e.waitFor(t, func() bool {
		for _, p := range pods[4:] {
			if _, _, ok := e.pl.View().Ledger().Pod(string(p.UID)); ok {
				return false
			}
		}
		return true
	})
	bound := e.schedule(t, preemptor, "n1")
	allocs, err := reservation.DecodeString(bound.Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	assert.Equal(t, capability.Placement{Start: 4, Size: 4}, allocs[0].Placement)
}

// A clone of the cycle state has its own occupancy, as each preemption
// dry run (one clone per node) and each Filter with nominated pods needs:
// victims removed in a clone are still there in the original.
func TestCycleStateCloneIsolatesOccupancy(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, fullGPU())
	_, _, ni := e.preemption(t, pods, nil)
	preemptor := e.create(t, priorityPod("big", "19000", 100))
	cs := framework.NewCycleState()
	_, st := e.pl.PreFilter(e.ctx, cs, preemptor, []fwk.NodeInfo{ni})
	require.True(t, st.IsSuccess(), "%v", st)
	clone, trial := cs.Clone(), ni.Snapshot()
	for _, pi := range slices.Clone(trial.GetPods()) {
		require.NoError(t, trial.RemovePod(klog.Background(), pi.GetPod()))
		require.True(t, e.pl.PreFilterExtensions().RemovePod(e.ctx, clone, preemptor, pi, trial).IsSuccess())
	}
	assert.True(t, e.pl.Filter(e.ctx, clone, preemptor, trial).IsSuccess(), "the clone's victims are gone")
	assert.Equal(t, fwk.Unschedulable, e.pl.Filter(e.ctx, cs, preemptor, trial).Code(), "the original still holds them")
}

// Filter on a node that AddPod and RemovePod have not touched reads the
// ledger as before: the cycle-local occupancy costs it no allocation.
func TestFilterUntouchedNodeAllocations(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pods := e.bindRealized(t, fullGPU()[:4])
	_, _, ni := e.preemption(t, pods, nil)
	pod := e.create(t, priorityPod("big", "19000", 100))
	cs := framework.NewCycleState()
	_, st := e.pl.PreFilter(e.ctx, cs, pod, []fwk.NodeInfo{ni})
	require.True(t, st.IsSuccess(), "%v", st)
	require.True(t, e.pl.Filter(e.ctx, cs, pod, ni).IsSuccess())
	if raceEnabled {
		t.Skip("allocation counts are not checked under the race detector")
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { e.pl.Filter(e.ctx, cs, pod, ni) }))
}
