package schedplugin_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedplugin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by the scheduler packages' init.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
	)
}

// env is a fake cluster with n1 (one registered fake A100-SXM4-40GB, 7
// devices allocatable) and n2 (no registration), the scheduler's informers
// and the plugin over them.
type env struct {
	ctx    context.Context
	client *fake.Clientset
	pl     *schedplugin.Plugin
	clk    *clocktesting.FakePassiveClock
	// activated receives the keys of each Activate call's pods.
	activated chan []string
	factory   informers.SharedInformerFactory
}

// activator records the plugin's Handle.Activate calls.
type activator chan []string

func (a activator) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	a <- slices.Sorted(maps.Keys(pods))
}

func newEnv(t testing.TB, opts schedplugin.Options) *env {
	return newEnvGPUs(t, opts, nil)
}

// newEnvGPUs is newEnv with n1's GPUs named as fakehal.Options.GPUs.
func newEnvGPUs(t testing.TB, opts schedplugin.Options, models []string) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	alloc := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("7")}
	if len(models) > 0 {
		alloc[kube.ResourceGPU] = *resource.NewQuantity(int64(7*len(models)), resource.DecimalSI)
	}
	client := kubetest.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Allocatable: alloc}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{Allocatable: alloc}},
	)
	gpus, _, err := capability.Discover(ctx, fakehal.MustNew(fakehal.Options{GPUs: models}), capability.DefaultAllowlist())
	require.NoError(t, err)
	_, err = kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	require.NoError(t, err)

	factory := informers.NewSharedInformerFactory(client, 0)
	activated := make(activator, 8)
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithClientSet(client), frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithPodActivator(activated))
	require.NoError(t, err)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	if opts.Clock == nil {
		opts.Clock = clk
	}
	pl, err := schedplugin.New(fh, opts)
	require.NoError(t, err)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() {
		require.NoError(t, pl.Close())
		cancel()
		factory.Shutdown()
		frameworkruntime.WaitForShutdown(fh)
	})
	e := &env{ctx: ctx, client: client, pl: pl, clk: clk, activated: activated, factory: factory}
	e.waitFor(t, func() bool { return pl.View().HasSynced() })
	return e
}

// waitFor waits, bounded by testwait.Bound, for the view to reach cond.
func (e *env) waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.After(testwait.Bound())
	for !cond() {
		select {
		case <-deadline:
			t.Fatal("condition not reached")
		case <-time.After(time.Millisecond):
		}
	}
}

func (e *env) nodeInfo(t testing.TB, name string) fwk.NodeInfo {
	t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	return ni
}

func migPod(name, gpumem string) *corev1.Pod {
	limits := corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}
	if gpumem != "" {
		limits[kube.ResourceGPUMem] = resource.MustParse(gpumem)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
}

func (e *env) create(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := e.client.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return out
}

// cycle runs the scheduling cycle's plugin calls for pod against nodes and
// returns the nodes Filter kept with their scores, and each node's status.
func (e *env) cycle(t *testing.T, pod *corev1.Pod, nodes ...string) (fwk.CycleState, map[string]int64, map[string]*fwk.Status) {
	t.Helper()
	cs := framework.NewCycleState()
	infos := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		infos[i] = e.nodeInfo(t, n)
	}
	_, st := e.pl.PreFilter(e.ctx, cs, pod, infos)
	statuses := map[string]*fwk.Status{}
	if !st.IsSuccess() {
		for _, n := range nodes {
			statuses[n] = st
		}
		return cs, nil, statuses
	}
	kept := map[string]int64{}
	for _, ni := range infos {
		st := e.pl.Filter(e.ctx, cs, pod, ni)
		statuses[ni.Node().Name] = st
		if st.IsSuccess() {
			score, sst := e.pl.Score(e.ctx, cs, pod, ni)
			require.True(t, sst.IsSuccess())
			kept[ni.Node().Name] = score
		}
	}
	return cs, kept, statuses
}

// schedule runs a whole cycle and binding cycle of pod onto node; the
// plugin binds.
func (e *env) schedule(t *testing.T, pod *corev1.Pod, node string) *corev1.Pod {
	t.Helper()
	cs, kept, statuses := e.cycle(t, pod, node)
	require.Contains(t, kept, node, "filter: %v", statuses[node])
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, node).IsSuccess())
	require.True(t, e.pl.Bind(e.ctx, cs, pod, node).IsSuccess())
	e.pl.PostBind(e.ctx, cs, pod, node)
	out, err := e.client.CoreV1().Pods(pod.Namespace).Get(e.ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	return out
}

// The plugin writes the extender's wire format: a record the reservation
// codec decodes, with the scheduler-written fields only, and the bind time.
func TestScheduleWritesRecord(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	_, kept, statuses := e.cycle(t, pod, "n1", "n2")
	assert.Contains(t, kept, "n1")
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, statuses["n2"].Code(), "n2 publishes no MIG GPUs")

	bound := e.schedule(t, pod, "n1")
	allocs, err := reservation.DecodeString(bound.Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	_, realized := allocs[0].Runtime()
	assert.False(t, realized)
	assert.NotEmpty(t, bound.Annotations[kube.BindTimeAnnotation])
	rs, assumed, ok := e.pl.View().Ledger().Pod("uid-a")
	require.True(t, ok)
	assert.False(t, assumed, "confirmed by PostBind")
	assert.Equal(t, allocs[0].GPUUUID, rs[0].GPUUUID)
}

func TestPreFilter(t *testing.T) {
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain", UID: "uid-plain"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	forged := plain.DeepCopy()
	forged.Annotations = map[string]string{reservation.AnnotationKey: "GPU-x,1g.5gb,0,1"}
	malformed := migPod("bad", "")
	malformed.Spec.Containers[0].Resources.Limits[kube.ResourceGPUMemPercentage] = resource.MustParse("150")
	tests := []struct {
		name string
		pod  *corev1.Pod
		want fwk.Code
	}{
		{"not MIG, no devices: skipped", plain, fwk.Skip},
		{"not MIG with a record: refused", forged, fwk.UnschedulableAndUnresolvable},
		{"malformed MIG request: refused", malformed, fwk.UnschedulableAndUnresolvable},
		{"MIG pod", migPod("ok", "4000"), fwk.Success},
	}
	e := newEnv(t, schedplugin.Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, st := e.pl.PreFilter(e.ctx, framework.NewCycleState(), tc.pod, nil)
			assert.Equal(t, tc.want, st.Code(), "%v", st)
		})
	}
}

// A node waits for the device plugin to realize its bound MIG pod; the
// realization is an event whose hint requeues a pod the lock kept off.
func TestNodeLockedUntilRealized(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	a := e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	b := e.create(t, migPod("b", "4000"))
	_, _, statuses := e.cycle(t, b, "n1")
	assert.Equal(t, fwk.Unschedulable, statuses["n1"].Code(), "n1 is locked by a")

	allocs, err := reservation.DecodeString(a.Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	allocs[0] = allocs[0].WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 3})
	realized := a.DeepCopy()
	realized.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	realized, err = e.client.CoreV1().Pods("default").Update(e.ctx, realized, metav1.UpdateOptions{})
	require.NoError(t, err)

	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update})
	got, err := hint(klog.Background(), b, a, realized)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, got)
	_, kept, _ := e.cycle(t, b, "n1")
	assert.Contains(t, kept, "n1")

	// An update that changes neither the record nor the pod's lifecycle
	// is skipped without looking.
	relabeled := realized.DeepCopy()
	relabeled.Labels = map[string]string{"x": "y"}
	got, err = hint(klog.Background(), b, realized, relabeled)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got)
}

// hintFor returns the plugin's queueing hint for the event.
func hintFor(t *testing.T, pl *schedplugin.Plugin, ev fwk.ClusterEvent) fwk.QueueingHintFn {
	t.Helper()
	events, err := pl.EventsToRegister(context.Background())
	require.NoError(t, err)
	for _, e := range events {
		if e.Event.Resource == ev.Resource && e.Event.ActionType&ev.ActionType != 0 {
			return e.QueueingHintFn
		}
	}
	t.Fatalf("no hint for %v", ev.Label())
	return nil
}

// A pod that fills the GPU is deleted: the hint requeues the pending pod
// only when the deletion frees what it needs, and applies the deletion
// ahead of the view's informer, except for the scheduler's report of a
// failed binding cycle whose pod Unreserve found bound.
func TestHintPodDelete(t *testing.T) {
	e := newEnv(t, schedplugin.Options{LockTimeout: time.Nanosecond})
	whole := e.create(t, migPod("whole", ""))
	cs, kept, _ := e.cycle(t, whole, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, whole, "n1").IsSuccess())
	require.True(t, e.pl.Bind(e.ctx, cs, whole, "n1").IsSuccess())
	e.pl.Unreserve(e.ctx, cs, whole, "n1") // the binding cycle failed, but the bind applied
	assumed := whole.DeepCopy()
	assumed.Spec.NodeName = "n1"

	e.clk.SetTime(e.clk.Now().Add(time.Second)) // past the lock timeout
	b := e.create(t, migPodN("b", 2, "4000"))
	_, _, statuses := e.cycle(t, b, "n1")
	require.Equal(t, fwk.Unschedulable, statuses["n1"].Code())
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete})

	got, err := hint(klog.Background(), b, assumed, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "the failed binding cycle's report frees nothing")
	_, _, held := e.pl.View().Ledger().Pod("uid-whole")
	assert.True(t, held)

	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cpu", UID: "uid-cpu"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}}}
	got, err = hint(klog.Background(), b, other, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "an unrelated pod")

	deleting := assumed.DeepCopy()
	now := metav1.NewTime(e.clk.Now())
	deleting.DeletionTimestamp = &now
	got, err = hint(klog.Background(), b, deleting, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, got, "the real deletion, before the view's informer delivers it")
}

// wholeGPUHeld binds pod "whole", which takes n1's GPU whole, past the lock
// timeout, and runs a cycle of pod b, which n1 cannot take; it returns them
// with the plugin's queueing hint for an assigned pod's event of action.
func wholeGPUHeld(t *testing.T, action fwk.ActionType) (*env, *corev1.Pod, *corev1.Pod, fwk.QueueingHintFn) {
	t.Helper()
	e := newEnv(t, schedplugin.Options{LockTimeout: time.Nanosecond})
	whole := e.schedule(t, e.create(t, migPod("whole", "")), "n1")
	e.clk.SetTime(e.clk.Now().Add(time.Second))
	b := e.create(t, migPodN("b", 2, "4000"))
	_, _, statuses := e.cycle(t, b, "n1")
	require.Equal(t, fwk.Unschedulable, statuses["n1"].Code())
	return e, whole, b, hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: action})
}

// A pod removed at once (grace period 0, no deletionTimestamp in the
// event) that the plugin bound normally is removed from the view by the
// hint too.
func TestHintForceDelete(t *testing.T) {
	_, whole, b, hint := wholeGPUHeld(t, fwk.Delete)
	got, err := hint(klog.Background(), b, whole, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, got)
}

func migPodN(name string, n int64, gpumem string) *corev1.Pod {
	p := migPod(name, gpumem)
	p.Spec.Containers[0].Resources.Limits[kube.ResourceGPU] = *resource.NewQuantity(n, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Requests = p.Spec.Containers[0].Resources.Limits
	return p
}

// A node that gains a registration, or devices, requeues the pod only when
// the pod then fits it.
func TestHintNodeChange(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("p", "4000"))
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAnnotation})
	n1 := e.nodeInfo(t, "n1").Node()
	n2 := e.nodeInfo(t, "n2").Node()

	tests := []struct {
		name     string
		old, new func() *corev1.Node
		want     fwk.QueueingHint
	}{
		{"registration unchanged", func() *corev1.Node { return n2 }, func() *corev1.Node {
			n := n2.DeepCopy()
			n.Labels = map[string]string{"x": "y"}
			return n
		}, fwk.QueueSkip},
		{"registration appears", func() *corev1.Node { return n2 }, func() *corev1.Node {
			n := n2.DeepCopy()
			n.ResourceVersion = "999"
			n.Annotations = map[string]string{capability.NodeRegisterAnnotation: n1.Annotations[capability.NodeRegisterAnnotation]}
			return n
		}, fwk.Queue},
		{"registration appears, no devices allocatable", func() *corev1.Node { return n2 }, func() *corev1.Node {
			n := n2.DeepCopy()
			n.ResourceVersion = "1000"
			n.Annotations = map[string]string{capability.NodeRegisterAnnotation: n1.Annotations[capability.NodeRegisterAnnotation]}
			n.Status.Allocatable = nil
			return n
		}, fwk.QueueSkip},
		{"node added without registration", nil, func() *corev1.Node {
			n := n2.DeepCopy()
			n.Name = "n3"
			return n
		}, fwk.QueueSkip},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var old any
			if tc.old != nil {
				old = tc.old()
			}
			got, err := hint(klog.Background(), pod, old, tc.new())
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Reserve writes nothing: Unreserve after it forgets the assumption, the
// pod carries no record, and the node is free again.
func TestUnreserveAfterReserve(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, kept, _ := e.cycle(t, pod, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())
	read, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, read.Annotations, reservation.AnnotationKey, "the record goes with the binding")

	e.pl.Unreserve(e.ctx, cs, pod, "n1")
	cur, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, cur.Annotations, reservation.AnnotationKey)
	_, _, held := e.pl.View().Ledger().Pod("uid-a")
	assert.False(t, held)
	_, kept, _ = e.cycle(t, e.create(t, migPod("b", "4000")), "n1")
	assert.Contains(t, kept, "n1", "the node claim was released")
}

// A binding whose call failed after the API server applied it is found
// bound by Unreserve and kept.
func TestUnreserveKeepsAppliedBind(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, _, _ := e.cycle(t, pod, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())
	require.True(t, e.pl.Bind(e.ctx, cs, pod, "n1").IsSuccess()) // applied; the cycle fails later

	e.pl.Unreserve(e.ctx, cs, pod, "n1")
	cur, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cur.Annotations, reservation.AnnotationKey)
	_, assumed, held := e.pl.View().Ledger().Pod("uid-a")
	assert.True(t, held)
	assert.False(t, assumed)
}

// Bind's consistent read counts a pod another scheduler bound that the
// informer has not delivered: the plugin decides again, locks, and binds
// nothing.
func TestBindReadsTheNode(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, kept, _ := e.cycle(t, pod, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())

	// Another leader's unrealized bind lands on n1 now.
	rs, _, _ := e.pl.View().Ledger().Pod("uid-a")
	other := migPod("other", "4000")
	other.Spec.NodeName = "n1"
	other.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{{
		GPUUUID: rs[0].GPUUUID, Profile: rs[0].Profile, Placement: rs[0].Placement}})
	e.create(t, other)

	st := e.pl.Bind(e.ctx, cs, pod, "n1")
	assert.Equal(t, fwk.Unschedulable, st.Code(), "%v", st)
	e.pl.Unreserve(e.ctx, cs, pod, "n1")
	cur, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, cur.Annotations, reservation.AnnotationKey, "nothing written")
	assert.Empty(t, cur.Spec.NodeName, "not bound")
}

// A pod that is not a MIG pod but requests devices is checked against the
// node's free devices (NodeResourcesFit ignores the resource).
func TestFilterDeviceCount(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "whole", UID: "uid-whole"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{kube.ResourceGPU: resource.MustParse("8")},
			Requests: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("8")}}}}}}
	_, _, statuses := e.cycle(t, pod, "n1")
	assert.Equal(t, fwk.Unschedulable, statuses["n1"].Code())
	pod.Spec.Containers[0].Resources.Limits[kube.ResourceGPU] = resource.MustParse("7")
	pod.Spec.Containers[0].Resources.Requests[kube.ResourceGPU] = resource.MustParse("7")
	_, kept, _ := e.cycle(t, pod, "n1")
	assert.Contains(t, kept, "n1")
}

func TestFactoryArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		wantErr error
	}{
		{"none", "", nil},
		{"all", `{"resource":"example.com/mig","lockTimeout":"30s","skipFreshNodeRead":true}`, nil},
		{"unknown field", `{"resorce":"x"}`, schedplugin.ErrInvalidArgs},
		{"bad duration", `{"lockTimeout":"soon"}`, schedplugin.ErrInvalidArgs},
		{"negative duration", `{"lockTimeout":"-1s"}`, schedplugin.ErrInvalidArgs},
	}
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	activated := make(activator, 8)
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithClientSet(client), frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithPodActivator(activated))
	require.NoError(t, err)
	defer func() { cancel(); frameworkruntime.WaitForShutdown(fh) }()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var obj runtime.Object
			if tc.args != "" {
				obj = &runtime.Unknown{Raw: []byte(tc.args)}
			}
			pl, err := schedplugin.Factory(schedplugin.Options{})(ctx, obj, fh)
			if tc.wantErr != nil {
				assert.True(t, errors.Is(err, tc.wantErr), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, schedplugin.Name, pl.Name())
		})
	}
}

// Bind binds the pod as the API server has it: the scheduler's copy may
// lag behind its own status writes. A pod whose MIG request changed
// meanwhile gets nothing written.
func TestBindReadsThePod(t *testing.T) {
	tests := []struct {
		name   string
		change func(*corev1.Pod)
		want   fwk.Code
	}{
		{"status written since", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}, fwk.Success},
		{"request changed since", func(p *corev1.Pod) { p.Annotations[kube.ProfilePreferenceAnnotation] = "7g" }, fwk.Unschedulable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, schedplugin.Options{})
			pod := e.create(t, migPod("a", "4000"))
			cs, kept, _ := e.cycle(t, pod, "n1")
			require.Contains(t, kept, "n1")
			require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())
			cur := pod.DeepCopy()
			tc.change(cur)
			_, err := e.client.CoreV1().Pods("default").Update(e.ctx, cur, metav1.UpdateOptions{})
			require.NoError(t, err)

			st := e.pl.Bind(e.ctx, cs, pod, "n1")
			assert.Equal(t, tc.want, st.Code(), "%v", st)
			got, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
			require.NoError(t, err)
			_, written := got.Annotations[reservation.AnnotationKey]
			assert.Equal(t, tc.want == fwk.Success, written)
			e.pl.Unreserve(e.ctx, cs, pod, "n1")
		})
	}
}

// Bind's requests when the scheduler's copy of the pod is current: the
// consistent listing of the node's pods and the binding, conditioned on
// the copy's version, and no read of the pod.
func TestBindRequests(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, kept, _ := e.cycle(t, pod, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())
	e.client.ClearActions()

	require.True(t, e.pl.Bind(e.ctx, cs, pod, "n1").IsSuccess())
	var got []string
	for _, a := range e.client.Actions() {
		if a.GetVerb() != "watch" {
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	assert.Equal(t, []string{"list pods/", "create pods/binding"}, got)
	bound, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", bound.Spec.NodeName)
	assert.Contains(t, bound.Annotations, reservation.AnnotationKey)
}

// A scheduler's copy without a resourceVersion gives the binding nothing
// to be conditioned on: Bind reads the pod first, and a pod whose request
// changed gets nothing written.
func TestBindCopyWithoutVersion(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, kept, _ := e.cycle(t, pod, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())
	cur := pod.DeepCopy()
	cur.Annotations[kube.ProfilePreferenceAnnotation] = "7g"
	_, err := e.client.CoreV1().Pods("default").Update(e.ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)

	unversioned := pod.DeepCopy()
	unversioned.ResourceVersion = ""
	st := e.pl.Bind(e.ctx, cs, unversioned, "n1")
	assert.Equal(t, fwk.Unschedulable, st.Code(), "%v", st)
	got, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Spec.NodeName, "not bound")
	e.pl.Unreserve(e.ctx, cs, unversioned, "n1")
}

// A deleting pod frees its slots only once it is released (its containers
// terminated): the update hint requeues then, not at the deletion itself.
func TestHintPodReleased(t *testing.T) {
	e, whole, b, hint := wholeGPUHeld(t, fwk.Update)

	deleting := whole.DeepCopy()
	deadline := metav1.NewTime(e.clk.Now().Add(10 * time.Minute))
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &deadline, new(int64(600))
	deleting.ResourceVersion = "1000"
	deleting.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	got, err := hint(klog.Background(), b, whole, deleting)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "deleting, its container still running")

	ended := deleting.DeepCopy()
	ended.ResourceVersion = "1001"
	ended.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	got, err = hint(klog.Background(), b, deleting, ended)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, got, "released")
}

// The binding carries the record: an owner who writes the pod between
// Bind's read and its binding call (here a forged record) makes the
// binding fail on the version read, so the pod never arrives scheduled with a record the plugin did
// not write; Unreserve then forgets the assumption.
func TestBindCarriesTheRecord(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	pod := e.create(t, migPod("a", "4000"))
	cs, kept, _ := e.cycle(t, pod, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, pod, "n1").IsSuccess())

	// The owner writes the pod right after Bind read it: Bind's read
	// returns the version before the write.
	read, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	cur := read.DeepCopy()
	forged := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-4000-8000-000000000000","profile":"1g.5gb","placement":{"start":0,"size":1}}]`
	cur.Annotations[reservation.AnnotationKey] = forged
	_, err = e.client.CoreV1().Pods("default").Update(e.ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	var once sync.Once
	e.client.PrependReactor("get", "pods", func(a k8stesting.Action) (handled bool, obj runtime.Object, err error) {
		once.Do(func() { handled, obj = true, read.DeepCopy() })
		return handled, obj, nil
	})

	st := e.pl.Bind(e.ctx, cs, pod, "n1")
	assert.Equal(t, fwk.Unschedulable, st.Code(), "%v", st)
	e.pl.Unreserve(e.ctx, cs, pod, "n1")
	got, err := e.client.CoreV1().Pods("default").Get(e.ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Spec.NodeName, "not bound with the forged record")
	_, _, held := e.pl.View().Ledger().Pod("uid-a")
	assert.False(t, held)

	// A non-MIG pod is left to the next binder.
	plain := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}})
	assert.Equal(t, fwk.Skip, e.pl.Bind(e.ctx, framework.NewCycleState(), plain, "n1").Code())
}

// staleClaimsCount reads the stale-claims counter from kube-scheduler's
// registry, where its /metrics serves it.
func staleClaimsCount(t *testing.T) float64 {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == schedplugin.MetricStaleClaims {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("kube-scheduler's registry has no %s", schedplugin.MetricStaleClaims)
	return 0
}

// A claim past the lock timeout is counted once, however many cycles find
// it, and only once it is past.
func TestStaleClaimCounted(t *testing.T) {
	e := newEnv(t, schedplugin.Options{LockTimeout: time.Minute})
	e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	before := staleClaimsCount(t)
	b := e.create(t, migPodN("b", 2, "4000"))
	e.cycle(t, b, "n1")
	assert.Equal(t, before, staleClaimsCount(t), "a young claim is no stale one")

	e.clk.SetTime(e.clk.Now().Add(2 * time.Minute))
	e.cycle(t, b, "n1")
	e.cycle(t, b, "n1")
	assert.Equal(t, before+1, staleClaimsCount(t))
}

// lockedOut binds pod a to n1 (unrealized: a one-minute lock, timed by a
// fake clock with timers) and runs a scheduling cycle of pod b, which the
// lock keeps off n1, through PostFilter.
func lockedOut(t *testing.T) (*env, *clocktesting.FakeClock, *corev1.Pod) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	e := newEnv(t, schedplugin.Options{LockTimeout: time.Minute, Clock: clk})
	e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	b := e.create(t, migPodN("b", 2, "4000"))
	cs, _, statuses := e.cycle(t, b, "n1")
	require.Equal(t, fwk.Unschedulable, statuses["n1"].Code())
	_, st := e.pl.PostFilter(e.ctx, cs, b, nil)
	assert.Equal(t, fwk.Unschedulable, st.Code(), "PostFilter never makes a pod schedulable")
	return e, clk, b
}

// A pod kept off its node only by a young claim is moved back to the
// active queue when the lock ends (a lock's end is no cluster event, so it
// would otherwise wait for the scheduler's periodic retry), and not before.
func TestLockEndActivatesThePod(t *testing.T) {
	e, clk, b := lockedOut(t)

	clk.Step(time.Minute - time.Second)
	select {
	case keys := <-e.activated:
		t.Fatalf("%v activated before the lock ended", keys)
	default:
	}
	clk.Step(time.Second)
	select {
	case keys := <-e.activated:
		assert.Equal(t, []string{"default/b"}, keys)
	case <-time.After(testwait.Bound()):
		t.Fatal("b not activated when the lock ended")
	}
	_, kept, _ := e.cycle(t, b, "n1")
	assert.Contains(t, kept, "n1", "the stale claim does not block a pod the device plugin cannot confuse with it")
}

// After Close no wake fires.
func TestCloseStopsWakes(t *testing.T) {
	e, clk, _ := lockedOut(t)
	require.True(t, clk.HasWaiters())
	require.NoError(t, e.pl.Close())
	assert.False(t, clk.HasWaiters(), "the timer is stopped")
	clk.Step(time.Hour)
	select {
	case keys := <-e.activated:
		t.Fatalf("%v activated after Close", keys)
	default:
	}
}

// A new leader whose informer lags schedules p, which the previous leader
// already bound to n1, onto n2; while it binds p there, p's bind to n1
// reaches its view. p's slots on n1 count at once: a pod decided for n1
// meanwhile does not take them (the e2e HA test double-booked so before
// kube.SchedulerView applied such a version), and the failed bind of p to
// n2 leaves p where it is and n2 free.
func TestBoundElsewhereWhileBinding(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	n1, _, err := capability.Discover(e.ctx, fakehal.MustNew(fakehal.Options{}), capability.DefaultAllowlist())
	require.NoError(t, err)
	n2, _, err := capability.Discover(e.ctx, fakehal.MustNew(fakehal.Options{Seed: 2}), capability.DefaultAllowlist())
	require.NoError(t, err)
	require.NotEqual(t, n1[0].UUID, n2[0].UUID)
	_, err = kube.NewRegistrationPublisher(e.client, "n2", kube.RegistrationPublisherOptions{}).PublishGPUs(e.ctx, n2)
	require.NoError(t, err)
	e.waitFor(t, func() bool { g, _ := e.pl.View().RegisteredGPUs("n2"); return g == 1 })

	p := e.create(t, migPod("p", "4000"))
	cs, kept, _ := e.cycle(t, p, "n2")
	require.Contains(t, kept, "n2")
	require.True(t, e.pl.Reserve(e.ctx, cs, p, "n2").IsSuccess())

	// The previous leader's bind, realized since: it locks nothing, so
	// only its slots keep other pods off them.
	held := capability.Placement{Start: 6, Size: 1}
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n1"
	bound.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{
		reservation.Allocation{GPUUUID: n1[0].UUID, Profile: "1g.5gb", Placement: held}.WithRuntime(
			reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 13})})
	_, err = e.client.CoreV1().Pods("default").Update(e.ctx, bound, metav1.UpdateOptions{})
	require.NoError(t, err)
	e.waitFor(t, func() bool {
		rs, assumed, ok := e.pl.View().Ledger().Pod("uid-p")
		return ok && !assumed && len(rs) == 1 && rs[0].GPUUUID == n1[0].UUID
	})

	_, kept, statuses := e.cycle(t, e.create(t, migPod("whole", "40000")), "n1")
	assert.NotContains(t, kept, "n1", "a whole GPU fits n1 over p's slot: %v", statuses["n1"])

	st := e.pl.Bind(e.ctx, cs, p, "n2")
	assert.Equal(t, fwk.Unschedulable, st.Code(), "%v", st)
	e.pl.Unreserve(e.ctx, cs, p, "n2")
	rs, assumed, ok := e.pl.View().Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.False(t, assumed)
	assert.Equal(t, n1[0].UUID, rs[0].GPUUUID)
	assert.Equal(t, held, rs[0].Placement)
	_, kept, statuses = e.cycle(t, e.create(t, migPod("other", "40000")), "n2")
	assert.Contains(t, kept, "n2", "n2 is free: %v", statuses["n2"])
}

// The node index PreFilter keeps between cycles follows the node list: the
// same nodes in another order score each node as its own.
func TestScoreFollowsNodeOrder(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	e.pl.View().Refresh()
	pod := e.create(t, migPod("b", "4000"))
	_, first, _ := e.cycle(t, pod, "n1", "n2")
	_, second, _ := e.cycle(t, pod, "n2", "n1")
	_, alone, _ := e.cycle(t, pod, "n1")
	assert.Equal(t, first, second)
	assert.Equal(t, first["n1"], alone["n1"])
}

// A pod the kubelet admitted holds no node claim, whatever its record
// says: the update that admits it requeues the pods its claim kept off
// the node, although its record is unchanged.
func TestHintPodAdmitted(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	a := e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	b := e.create(t, migPod("b", "4000"))
	_, _, statuses := e.cycle(t, b, "n1")
	require.Equal(t, fwk.Unschedulable, statuses["n1"].Code(), "a's claim locks n1")
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update})

	relabeled := a.DeepCopy()
	relabeled.Labels = map[string]string{"x": "y"}
	got, err := hint(klog.Background(), b, a, relabeled)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "an update that admits nothing")

	running := relabeled.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	running, err = e.client.CoreV1().Pods("default").UpdateStatus(e.ctx, running, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err = hint(klog.Background(), b, relabeled, running)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, got, "admitted: the claim is lifted")
	_, kept, _ := e.cycle(t, b, "n1")
	assert.Contains(t, kept, "n1")
}

// A new leader schedules a pod the previous leader already bound, which
// its informer has not delivered: Bind's read counts the pod's slots and
// binds nothing, and the scheduler's report of the failed binding cycle (a
// deletion of the pod Unreserve was given) leaves them counted, so no
// other pod is placed on them.
func TestFailedBindOfABoundPodKeepsItsSlots(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	p := e.create(t, migPod("p", ""))
	assumed := p.DeepCopy() // the scheduler's copy, which every plugin call gets
	assumed.Spec.NodeName = "n1"
	cs, kept, _ := e.cycle(t, p, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, assumed, "n1").IsSuccess())

	// The previous leader's bind, realized since: the whole GPU.
	rs, _, _ := e.pl.View().Ledger().Pod("uid-p")
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n1"
	bound.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{
		reservation.Allocation{GPUUUID: rs[0].GPUUUID, Profile: rs[0].Profile, Placement: rs[0].Placement}.WithRuntime(
			reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 0})})
	_, err := e.client.CoreV1().Pods("default").Update(e.ctx, bound, metav1.UpdateOptions{})
	require.NoError(t, err)

	st := e.pl.Bind(e.ctx, cs, assumed, "n1")
	require.False(t, st.IsSuccess())
	e.pl.Unreserve(e.ctx, cs, assumed, "n1")
	_, assumedNow, held := e.pl.View().Ledger().Pod("uid-p")
	require.True(t, held)
	require.False(t, assumedNow, "the read pod's record counts")

	q := e.create(t, migPod("q", "4000"))
	_, kept, _ = e.cycle(t, q, "n1")
	require.NotContains(t, kept, "n1")
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete})
	got, err := hint(klog.Background(), q, assumed, nil)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "the report frees nothing")
	_, _, held = e.pl.View().Ledger().Pod("uid-p")
	assert.True(t, held, "p keeps its slots")
	_, kept, statuses := e.cycle(t, q, "n1")
	assert.NotContains(t, kept, "n1", "q fits over p's slots: %v", statuses["n1"])
}

// A running pod the plugin bound keeps its slots when its owner removes
// its record: the queueing hint that applies the update requeues no pod,
// and the next pod is not placed on the live instance.
func TestHintStrippedRecordKeepsSlots(t *testing.T) {
	e, whole, b, hint := wholeGPUHeld(t, fwk.Update)
	stripped := whole.DeepCopy()
	stripped.ResourceVersion = "1000"
	stripped.Status.Phase = corev1.PodRunning
	delete(stripped.Annotations, reservation.AnnotationKey)
	got, err := hint(klog.Background(), b, whole, stripped)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "the stripped pod still holds its GPU")
	_, _, held := e.pl.View().Ledger().Pod("uid-whole")
	assert.True(t, held)
	_, kept, _ := e.cycle(t, b, "n1")
	assert.NotContains(t, kept, "n1")
}

// Bind's consistent read of the node lists a running pod whose record its
// owner removed: the view keeps the slots it knew, so the next pod goes to
// the other GPU and a third finds none.
func TestBindReadKeepsStrippedPodsSlots(t *testing.T) {
	e := newEnvGPUs(t, schedplugin.Options{}, fakehal.Repeat(2, "A100"))
	whole := e.schedule(t, e.create(t, migPod("whole", "")), "n1")
	before, _, _ := e.pl.View().Ledger().Pod("uid-whole")
	whole.Status.Phase = corev1.PodRunning
	running, err := e.client.CoreV1().Pods("default").UpdateStatus(e.ctx, whole, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Admitted: the node lock is lifted once the view has seen it.
	e.waitFor(t, func() bool { return !e.pl.View().Unrealized("uid-whole") })
	delete(running.Annotations, reservation.AnnotationKey)
	_, err = e.client.CoreV1().Pods("default").Update(e.ctx, running, metav1.UpdateOptions{})
	require.NoError(t, err)

	e.schedule(t, e.create(t, migPod("b", "")), "n1")
	after, _, held := e.pl.View().Ledger().Pod("uid-whole")
	require.True(t, held, "the read dropped the running pod's slots")
	assert.Equal(t, before, after)
	all, err := e.client.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	e.waitFor(t, func() bool { // the informer delivered the stripped pod too
		ok, _ := e.pl.View().Reflects(all.Items, nil)
		return ok
	})
	_, kept, _ := e.cycle(t, e.create(t, migPod("c", "")), "n1")
	assert.NotContains(t, kept, "n1", "c is placed on a live instance")
}
