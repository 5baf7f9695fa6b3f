package kube_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// A bound pod's slots are held until the pod ends, whatever its owner
// does to its record meanwhile: removed, moved, changed or made
// unreadable, seen through the informer or a fresh read, on a pod this
// view bound or one it saw bound.
func TestSchedulerViewHoldsSlotsUntilThePodEnds(t *testing.T) {
	edits := []struct {
		name string
		edit func(p *corev1.Pod, gpu string)
	}{
		{name: "removed", edit: func(p *corev1.Pod, _ string) { delete(p.Annotations, reservation.AnnotationKey) }},
		{name: "moved", edit: func(p *corev1.Pod, gpu string) {
			p.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{alloc(gpu, "1g.5gb", 6, 1)})
		}},
		{name: "emptied", edit: func(p *corev1.Pod, _ string) { p.Annotations[reservation.AnnotationKey] = "[]" }},
		{name: "unreadable", edit: func(p *corev1.Pod, _ string) { p.Annotations[reservation.AnnotationKey] = "{" }},
	}
	ways := []struct {
		name  string
		apply func(t *testing.T, v *kube.SchedulerView, h cache.ResourceEventHandler, old, cur *corev1.Pod)
	}{
		{name: "informer", apply: func(_ *testing.T, _ *kube.SchedulerView, h cache.ResourceEventHandler, old, cur *corev1.Pod) {
			h.OnUpdate(old, cur)
		}},
		{name: "fresh read", apply: func(t *testing.T, v *kube.SchedulerView, _ cache.ResourceEventHandler, _, cur *corev1.Pod) {
			require.NoError(t, v.ObservePods(context.Background(), listing(nil, cur)))
		}},
	}
	origins := []struct {
		name string
		bind func(t *testing.T, v *kube.SchedulerView, h cache.ResourceEventHandler, gpu string) *corev1.Pod
	}{
		{name: "bound by this view", bind: func(t *testing.T, v *kube.SchedulerView, h cache.ResourceEventHandler, _ string) *corev1.Pod {
			p := gpuPod("p", 1, 5)
			as, err := v.Reserve("n1", p, wholeGPU())
			require.NoError(t, err)
			v.Bound(p, "n1", as)
			bound := reserved(p, "n1", 6, schedule.Allocations(as)...)
			h.OnUpdate(p, bound)
			return bound
		}},
		{name: "seen bound", bind: func(_ *testing.T, _ *kube.SchedulerView, h cache.ResourceEventHandler, gpu string) *corev1.Pod {
			bound := reserved(gpuPod("p", 1, 5), "n1", 6, alloc(gpu, "7g.40gb", 0, 8))
			h.OnAdd(bound, false)
			return bound
		}},
	}
	for _, o := range origins {
		for _, w := range ways {
			for _, e := range edits {
				t.Run(o.name+"/"+w.name+"/"+e.name, func(t *testing.T) {
					v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
					bound := o.bind(t, v, pods, gpu)
					before, _, ok := v.Ledger().Pod("uid-p")
					require.True(t, ok)

					edited := bound.DeepCopy()
					edited.ResourceVersion = "7"
					edited.Status.Phase = corev1.PodRunning
					e.edit(edited, gpu)
					w.apply(t, v, pods, bound, edited)
					after, _, ok := v.Ledger().Pod("uid-p")
					require.True(t, ok, "the running pod's slots are dropped")
					assert.Equal(t, before, after)
					_, err := v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
					require.ErrorIs(t, err, placement.ErrUnschedulable, "z is placed on p's live instance")

					ended := edited.DeepCopy()
					ended.ResourceVersion = "8"
					ended.Status.Phase = corev1.PodSucceeded
					w.apply(t, v, pods, edited, ended)
					_, _, ok = v.Ledger().Pod("uid-p")
					assert.False(t, ok, "the ended pod frees its slots")
					_, err = v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
					assert.NoError(t, err)
				})
			}
		}
	}
}

// While its record is gone, a held pod still follows what the API server
// and the kubelet write: its admission lifts its claim, and a deletion's
// deadline frees its slots.
func TestSchedulerViewHeldPodFollowsServerFields(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	p := reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "7g.40gb", 0, 8))
	pods.OnAdd(p, false)
	require.Equal(t, []string{"p"}, claimed(v))

	stripped := p.DeepCopy()
	stripped.ResourceVersion = "3"
	delete(stripped.Annotations, reservation.AnnotationKey)
	pods.OnUpdate(p, stripped)
	assert.Equal(t, []string{"p"}, claimed(v), "not admitted yet: the claim stays")

	admitted := stripped.DeepCopy()
	admitted.ResourceVersion = "4"
	admitted.Status.Phase = corev1.PodRunning
	pods.OnUpdate(stripped, admitted)
	assert.Empty(t, claimed(v), "admitted: no claim")
	_, _, ok := v.Ledger().Pod("uid-p")
	require.True(t, ok)

	deleting := admitted.DeepCopy()
	deleting.ResourceVersion = "5"
	deadline := metav1.NewTime(clk.Now().Add(30 * time.Second))
	deleting.DeletionTimestamp = &deadline
	deleting.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	pods.OnUpdate(admitted, deleting)
	v.Refresh()
	_, _, ok = v.Ledger().Pod("uid-p")
	require.True(t, ok, "within the grace period")
	clk.SetTime(deadline.Time)
	v.Refresh()
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.False(t, ok, "the deadline passed: reclaimed")
}

// A record that only gains its runtime identity is the same record: it
// applies, and the claim ends.
func TestSchedulerViewHeldPodRealizes(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	p := reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "1g.5gb", 0, 1))
	pods.OnAdd(p, false)
	require.Equal(t, []string{"p"}, claimed(v))
	realized := alloc(gpu, "1g.5gb", 0, 1).WithRuntime(reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 13})
	pods.OnUpdate(p, reserved(p, "n1", 3, realized))
	assert.Empty(t, claimed(v))
	assert.False(t, v.Unrealized("uid-p"))
}

// The residual: a view that never held the pod (a scheduler started after
// the record was removed) does not count it, from the informer or from a
// fresh read. The node's device plugin refuses what is placed there.
func TestSchedulerViewNeverHeldStrippedPodCountsNothing(t *testing.T) {
	v, pods, gpu := newView(t, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
	stripped := reserved(gpuPod("p", 1, 1), "n1", 2, alloc(gpu, "7g.40gb", 0, 8))
	delete(stripped.Annotations, reservation.AnnotationKey)
	stripped.Status.Phase = corev1.PodRunning
	pods.OnAdd(stripped, false)
	require.NoError(t, v.ObservePods(context.Background(), listing(nil, stripped)))
	_, _, ok := v.Ledger().Pod("uid-p")
	assert.False(t, ok)
}
