package kube_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// listing returns a list function for SchedulerView.ObservePods that runs
// during (the informer's events arriving while the API server is read)
// and returns pods.
func listing(during func(), pods ...*corev1.Pod) func(context.Context) ([]corev1.Pod, error) {
	return func(context.Context) ([]corev1.Pod, error) {
		if during != nil {
			during()
		}
		out := make([]corev1.Pod, len(pods))
		for i, p := range pods {
			out[i] = *p
		}
		return out, nil
	}
}

// A fresh listing runs ahead of the informer: another scheduler's bind the
// informer has not delivered counts at once, and the informer's older
// events of the pod do not undo it.
func TestSchedulerViewObservePodsAheadOfInformer(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	p := gpuPod("p", 1, 3)
	pods.OnAdd(p, false) // created, unbound: holds nothing
	bound := reserved(p, "n1", 5, alloc(gpu, "7g.40gb", 0, 8))
	require.NoError(t, v.ObservePods(context.Background(), listing(nil, bound)))

	_, _, ok := v.Ledger().Pod("uid-p")
	assert.True(t, ok, "the listed bind counts before the informer delivers it")
	assert.Equal(t, []string{"p"}, claimed(v), "and the unrealized pod holds the node")
	_, err := v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
	assert.ErrorIs(t, err, placement.ErrUnschedulable)

	// The informer catches up: its older views are ignored, a newer one
	// applies.
	annotated := reserved(p, "", 4, alloc(gpu, "7g.40gb", 0, 8))
	pods.OnUpdate(p, annotated)
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.True(t, ok, "an older unbound view does not drop the listed bind")
	ok, _ = v.Reflects([]corev1.Pod{*bound}, nil)
	assert.True(t, ok, "the view reflects the listed version")
	pods.OnUpdate(annotated, bound)
	succeeded := reserved(p, "n1", 6, alloc(gpu, "7g.40gb", 0, 8))
	succeeded.Status.Phase = corev1.PodSucceeded
	pods.OnUpdate(bound, succeeded)
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.False(t, ok, "a newer event applies")
}

// A scheduler whose informer lags is binding p to n2 (it still shows p
// pending) when a fresh read of n1, for another pod's bind, lists p
// already bound there by the previous leader. p's slots on n1 count at
// once, so that other decision does not take them; the failed bind of p
// to n2 then changes nothing.
func TestSchedulerViewBoundElsewhereWhileBinding(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	n2, _ := registeredNode(t)
	n2.Name = "n2"
	v.NodeHandler().OnAdd(n2, true)
	p := gpuPod("p", 1, 3)
	pods.OnAdd(p, false)
	as, err := v.Reserve("n2", p, wholeGPU())
	require.NoError(t, err)

	bound := reserved(p, "n1", 5, alloc(gpu, "1g.5gb", 6, 1))
	bound.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{alloc(gpu, "1g.5gb", 6, 1).WithRuntime(runtimeID())})
	require.NoError(t, v.ObservePods(context.Background(), listing(nil, bound)))
	rs, assumed, ok := v.Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.False(t, assumed, "the listed bind replaces the reservation on n2")
	require.Len(t, rs, 1)
	assert.Equal(t, capability.Placement{Start: 6, Size: 1}, rs[0].Placement)
	_, err = v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
	assert.ErrorIs(t, err, placement.ErrUnschedulable, "the slots p holds on n1 are taken")

	// The bind of p to n2 fails (p is bound already); neither Forget nor a
	// late Bound undoes what the listing showed.
	v.Forget("uid-p")
	v.Bound(p, "n2", as)
	rs, assumed, ok = v.Ledger().Pod("uid-p")
	require.True(t, ok)
	assert.False(t, assumed)
	assert.Equal(t, capability.Placement{Start: 6, Size: 1}, rs[0].Placement)
	gpus, _ := v.Ledger().Node("n2")
	require.Len(t, gpus, 1)
	assert.Zero(t, gpus[0].Used, "nothing is left assumed on n2")
}

// A listing never brings back what the view has seen newer: a pod
// deleted, or released, while the listing was read.
func TestSchedulerViewObservePodsOlderThanTheView(t *testing.T) {
	tests := []struct {
		name   string
		during func(pods cacheHandler, old *corev1.Pod)
	}{
		{name: "deleted meanwhile", during: func(pods cacheHandler, old *corev1.Pod) { pods.OnDelete(old) }},
		{name: "released meanwhile", during: func(pods cacheHandler, old *corev1.Pod) {
			done := old.DeepCopy()
			done.ResourceVersion = "9"
			done.Status.Phase = corev1.PodFailed
			pods.OnUpdate(old, done)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			v, pods, gpu := newView(t, clk)
			running := reserved(gpuPod("p", 1, 1), "n1", 5, alloc(gpu, "7g.40gb", 0, 8))
			pods.OnAdd(running, false)
			require.NoError(t, v.ObservePods(context.Background(), listing(func() { tt.during(pods, running) }, running)))
			_, _, ok := v.Ledger().Pod("uid-p")
			assert.False(t, ok, "the listing, older than the event, is not applied")
			_, err := v.Reserve("n1", gpuPod("z", 1, 1), wholeGPU())
			assert.NoError(t, err, "the slots are free")
		})
	}
}

// cacheHandler is the part of cache.ResourceEventHandler the tests call.
type cacheHandler interface {
	OnAdd(obj any, isInInitialList bool)
	OnUpdate(oldObj, newObj any)
	OnDelete(obj any)
}

// A tombstone hides a pod only from the reads that were in flight when it
// was deleted: a listing begun after the deletion applies the pod as
// listed, even while an older read is still in flight (here a pod of the
// same UID listed again, which the API server never does after a real
// deletion, to make the tombstone visible).
func TestSchedulerViewObservePodsTombstonesEnd(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	running := reserved(gpuPod("p", 1, 1), "n1", 5, alloc(gpu, "7g.40gb", 0, 8))
	outer := v.ObservePods(context.Background(), listing(func() {
		pods.OnAdd(running, false)
		pods.OnDelete(running)
		require.NoError(t, v.ObservePods(context.Background(), listing(nil, running)))
		_, _, ok := v.Ledger().Pod("uid-p")
		assert.True(t, ok, "a read that began after the deletion applies what it lists")
		pods.OnDelete(running) // deleted again, while only the outer read is in flight
	}, running))
	require.NoError(t, outer)
	_, _, ok := v.Ledger().Pod("uid-p")
	assert.False(t, ok, "the read in flight during the deletion skips it")
	require.NoError(t, v.ObservePods(context.Background(), listing(nil, running)))
	_, _, ok = v.Ledger().Pod("uid-p")
	assert.True(t, ok, "no read was in flight any more: the tombstone is gone")
}

func TestSchedulerViewObservePodsError(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, _, _ := newView(t, clk)
	boom := errors.New("boom")
	err := v.ObservePods(context.Background(), func(context.Context) ([]corev1.Pod, error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
}

func TestSchedulerViewUnrealized(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, pods, gpu := newView(t, clk)
	p := gpuPod("p", 1, 1)
	as, err := v.Reserve("n1", p, wholeGPU())
	require.NoError(t, err)
	assert.False(t, v.Unrealized("uid-p"), "being bound")
	v.Bound(p, "n1", as)
	assert.True(t, v.Unrealized("uid-p"))
	realized := reserved(p, "n1", 7, schedule.Allocations(as)[0].WithRuntime(runtimeID()))
	pods.OnUpdate(nil, realized)
	assert.False(t, v.Unrealized("uid-p"), "realized")
	q := reserved(gpuPod("q", 1, 1), "n1", 2, alloc(gpu, "1g.5gb", 0, 1))
	pods.OnAdd(q, false)
	assert.True(t, v.Unrealized("uid-q"))
	pods.OnDelete(q)
	assert.False(t, v.Unrealized("uid-q"), "deleted")
	assert.False(t, v.Unrealized("uid-unknown"))
}

func TestSchedulerViewRegisteredGPUs(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	v, _, _ := newView(t, clk)
	nodes := v.NodeHandler()
	nodes.OnAdd(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", ResourceVersion: "1"}}, false)
	nodes.OnAdd(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "empty", ResourceVersion: "1",
		Annotations: map[string]string{capability.NodeRegisterAnnotation: "[]"}}}, false)
	nodes.OnAdd(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bad", ResourceVersion: "1",
		Annotations: map[string]string{capability.NodeRegisterAnnotation: "[{"}}}, false)
	tests := []struct {
		node          string
		wantGPUs      int
		wantAnnotated bool
	}{
		{node: "n1", wantGPUs: 1, wantAnnotated: true},
		{node: "bare"},
		{node: "empty", wantAnnotated: true},
		{node: "bad", wantAnnotated: true},
		{node: "unknown"},
	}
	for _, tt := range tests {
		gpus, annotated := v.RegisteredGPUs(tt.node)
		assert.Equal(t, tt.wantGPUs, gpus, tt.node)
		assert.Equal(t, tt.wantAnnotated, annotated, tt.node)
	}
}

func runtimeID() reservation.RuntimeIdentity {
	return reservation.RuntimeIdentity{MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 7}
}
