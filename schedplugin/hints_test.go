package schedplugin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/schedplugin"
)

// secondProfile returns a plugin of a second profile of e's scheduler: a
// framework over the same client and informers, as kube-scheduler builds
// one per profile.
func (e *env) secondProfile(t *testing.T, opts schedplugin.Options) (*schedplugin.Plugin, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithClientSet(e.client), frameworkruntime.WithInformerFactory(e.factory),
		frameworkruntime.WithPodActivator(activator(e.activated)))
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); frameworkruntime.WaitForShutdown(fh) })
	if opts.Clock == nil {
		opts.Clock = e.clk
	}
	pl, err := schedplugin.New(fh, opts)
	if err == nil {
		t.Cleanup(func() { require.NoError(t, pl.Close()) })
	}
	return pl, err
}

// Two DynMIG profiles of one scheduler decide on one state: while the
// first binds a pod that takes the whole GPU, the second does not place
// another pod there.
func TestTwoProfilesShareState(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	second, err := e.secondProfile(t, schedplugin.Options{})
	require.NoError(t, err)
	e.waitFor(t, second.View().HasSynced)

	whole := e.create(t, migPod("whole", ""))
	cs, kept, _ := e.cycle(t, whole, "n1")
	require.Contains(t, kept, "n1")
	require.True(t, e.pl.Reserve(e.ctx, cs, whole, "n1").IsSuccess(), "the first profile's bind is in flight")

	other := e.create(t, migPod("other", ""))
	st := second.Filter(e.ctx, prefiltered(t, e, second, other), other, e.nodeInfo(t, "n1"))
	assert.False(t, st.IsSuccess(), "the second profile places a pod on the GPU the first is binding")
}

// prefiltered runs pl's PreFilter for pod and returns the cycle state.
func prefiltered(t *testing.T, e *env, pl *schedplugin.Plugin, pod *corev1.Pod) fwk.CycleState {
	t.Helper()
	cs := framework.NewCycleState()
	_, st := pl.PreFilter(e.ctx, cs, pod, []fwk.NodeInfo{e.nodeInfo(t, "n1")})
	require.True(t, st.IsSuccess(), "%v", st)
	return cs
}

// A pod kept off its node by another pod's bind in flight is moved back to
// the active queue when that bind ends, bound or failed: neither is a
// cluster event the plugin's hints see.
func TestBindEndActivatesThePod(t *testing.T) {
	for _, bound := range []bool{true, false} {
		name := map[bool]string{true: "bound", false: "failed"}[bound]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, schedplugin.Options{})
			a := e.create(t, migPod("a", "4000"))
			cs, kept, _ := e.cycle(t, a, "n1")
			require.Contains(t, kept, "n1")
			require.True(t, e.pl.Reserve(e.ctx, cs, a, "n1").IsSuccess())

			b := e.create(t, migPod("b", "4000"))
			bcs, _, statuses := e.cycle(t, b, "n1")
			require.Equal(t, fwk.Unschedulable, statuses["n1"].Code())
			_, st := e.pl.PostFilter(e.ctx, bcs, b, nil)
			assert.Equal(t, fwk.Unschedulable, st.Code())
			select {
			case keys := <-e.activated:
				t.Fatalf("%v activated while the bind is in flight", keys)
			default:
			}

			if bound {
				require.True(t, e.pl.Bind(e.ctx, cs, a, "n1").IsSuccess())
				e.pl.PostBind(e.ctx, cs, a, "n1")
			} else {
				e.pl.Unreserve(e.ctx, cs, a, "n1")
			}
			select {
			case keys := <-e.activated:
				assert.Equal(t, []string{"default/b"}, keys)
			case <-time.After(testwait.Bound()):
				t.Fatal("b not activated when the bind ended")
			}
		})
	}
}

// The pending pod's own update is requeued when it changes what the plugin
// decides on (its MIG opt-in, GPU type constraints, profile preference),
// and not when it changes nothing of it or leaves the request malformed.
func TestHintOwnUpdate(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update})
	pending := migPod("p", "4000")
	pending.Annotations[kube.UseGPUTypeAnnotation] = "H100"
	edit := func(f func(*corev1.Pod)) *corev1.Pod {
		p := pending.DeepCopy()
		f(p)
		return p
	}
	tests := []struct {
		name string
		old  *corev1.Pod
		cur  *corev1.Pod
		want fwk.QueueingHint
	}{
		{"use-gputype fixed", pending, edit(func(p *corev1.Pod) { p.Annotations[kube.UseGPUTypeAnnotation] = "A100" }), fwk.Queue},
		{"use-gputype removed", pending, edit(func(p *corev1.Pod) { delete(p.Annotations, kube.UseGPUTypeAnnotation) }), fwk.Queue},
		{"nouse-gpuuuid added", pending, edit(func(p *corev1.Pod) { p.Annotations[kube.NoUseGPUUUIDAnnotation] = "GPU-x" }), fwk.Queue},
		{"profile preference", pending, edit(func(p *corev1.Pod) { p.Annotations[kube.ProfilePreferenceAnnotation] = "2g.10gb" }), fwk.Queue},
		{"opt-in added", edit(func(p *corev1.Pod) { delete(p.Annotations, kube.VGPUModeAnnotation) }), pending, fwk.Queue},
		{"label only", pending, edit(func(p *corev1.Pod) { p.Labels = map[string]string{"x": "y"} }), fwk.QueueSkip},
		{"unrelated annotation", pending, edit(func(p *corev1.Pod) { p.Annotations["example.com/note"] = "x" }), fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hint(klog.Background(), tt.old, tt.old, tt.cur)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// malformedPod asks for MIG with gpumem-percentage 150: immutable, and
// refused by PreFilter.
func malformedPod(name string) *corev1.Pod {
	p := migPod(name, "")
	p.Spec.Containers[0].Resources.Limits[kube.ResourceGPUMemPercentage] = resource.MustParse("150")
	p.Spec.Containers[0].Resources.Requests = p.Spec.Containers[0].Resources.Limits
	return p
}

// plainGPUPod requests the device resource without opting in to MIG.
func plainGPUPod(name string) *corev1.Pod {
	p := migPod(name, "")
	delete(p.Annotations, kube.VGPUModeAnnotation)
	return p
}

// An assigned pod's realization or admission frees no device: a pending
// pod that asks for no MIG device, or whose request is malformed, is not
// requeued by it; a MIG pod that fits now is.
func TestHintSkipsPodsTheEventCannotHelp(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	a := e.schedule(t, e.create(t, migPod("a", "4000")), "n1")
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update})
	running := a.DeepCopy()
	running.ResourceVersion = "1000"
	running.Status.Phase = corev1.PodRunning
	for _, tt := range []struct {
		pod  *corev1.Pod
		want fwk.QueueingHint
	}{
		{plainGPUPod("plain"), fwk.QueueSkip},
		{malformedPod("malformed"), fwk.QueueSkip},
		{migPod("fits", "4000"), fwk.Queue},
	} {
		got, err := hint(klog.Background(), tt.pod, a, running)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, tt.pod.Name)
	}
}

// A request that cannot fit the node even with every slot free is
// UnschedulableAndUnresolvable, so preemption skips the node; one that
// fits once other pods leave stays Unschedulable.
func TestFilterNeverFits(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	check := func(pod *corev1.Pod, want fwk.Code) {
		t.Helper()
		_, _, statuses := e.cycle(t, e.create(t, pod), "n1")
		assert.Equal(t, want, statuses["n1"].Code(), "%s: %v", pod.Name, statuses["n1"])
	}
	check(migPod("too-large", "80000"), fwk.UnschedulableAndUnresolvable)
	check(migPodN("two-whole", 2, "40000"), fwk.UnschedulableAndUnresolvable)

	whole := e.schedule(t, e.create(t, migPod("whole", "")), "n1")
	whole.Status.Phase = corev1.PodRunning
	_, err := e.client.CoreV1().Pods("default").UpdateStatus(e.ctx, whole, metav1.UpdateOptions{})
	require.NoError(t, err)
	e.waitFor(t, func() bool { return !e.pl.View().Unrealized("uid-whole") })
	check(migPod("another-whole", "40000"), fwk.Unschedulable)
	check(migPodN("two-small", 2, "4000"), fwk.Unschedulable)
}

// A second profile for the same device resource with other ledger options
// would decide on the first's ledger with options it did not ask for: it
// is refused at start. One for another resource keeps a state of its own.
func TestSecondProfileConflict(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	_, err := e.secondProfile(t, schedplugin.Options{Ledger: placement.LedgerOptions{MaxSteps: 7}})
	assert.ErrorIs(t, err, schedplugin.ErrProfileConflict)
	other, err := e.secondProfile(t, schedplugin.Options{Resource: "example.com/mig"})
	require.NoError(t, err)
	assert.NotSame(t, e.pl.View(), other.View())
	same, err := e.secondProfile(t, schedplugin.Options{LockTimeout: time.Minute})
	require.NoError(t, err)
	assert.Same(t, e.pl.View(), same.View())
}

// A plain device pod that ends frees its devices: a pending pod refused
// for the device count is requeued by that update, not only by the pod's
// deletion. Its other updates free nothing.
func TestHintPlainDevicePodEnds(t *testing.T) {
	e := newEnv(t, schedplugin.Options{})
	holder := plainGPUPod("holder")
	holder.Spec.NodeName = "n1"
	holder.Status.Phase = corev1.PodRunning
	holder = e.create(t, holder)
	hint := hintFor(t, e.pl, fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update})

	relabelled := holder.DeepCopy()
	relabelled.ResourceVersion = "1000"
	relabelled.Labels = map[string]string{"touched": "yes"}
	ended := holder.DeepCopy()
	ended.ResourceVersion = "1001"
	ended.Status.Phase = corev1.PodSucceeded
	for _, tt := range []struct {
		name     string
		old, cur *corev1.Pod
		want     fwk.QueueingHint
	}{
		{"relabelled", holder, relabelled, fwk.QueueSkip},
		{"ended", holder, ended, fwk.Queue},
		{"already ended", ended, ended, fwk.QueueSkip},
	} {
		got, err := hint(klog.Background(), plainGPUPod("waiting"), tt.old, tt.cur)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, tt.name)
	}
}
