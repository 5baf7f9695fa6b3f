package kube_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

func threeContainerPod() *corev1.Pod {
	return &corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers:      []corev1.Container{{Name: "init"}},
			Containers:          []corev1.Container{{Name: "main"}, {Name: "side"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}},
		},
	}
}

func TestContainerIndexing(t *testing.T) {
	pod := threeContainerPod()
	tests := []struct {
		index int
		want  string // "" for out of range
	}{
		{index: -1, want: ""},
		{index: 0, want: "init"},
		{index: 1, want: "main"},
		{index: 2, want: "side"},
		{index: 3, want: ""},
	}
	for _, tt := range tests {
		c := kube.ContainerAt(pod, tt.index)
		if tt.want == "" {
			assert.Nil(t, c, "ContainerAt(%d)", tt.index)
			continue
		}
		require.NotNil(t, c, "ContainerAt(%d)", tt.index)
		assert.Equal(t, tt.want, c.Name, "ContainerAt(%d)", tt.index)
		got, ok := kube.ContainerIndex(pod, tt.want)
		assert.True(t, ok)
		assert.Equal(t, tt.index, got, "ContainerIndex(%q)", tt.want)
	}
	_, ok := kube.ContainerIndex(pod, "debug")
	assert.False(t, ok, "ephemeral containers have no containerIndex")
	assert.Equal(t, 3, kube.ContainerCount(pod))
}

func TestPodView(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name     string
		phase    corev1.PodPhase
		deleting bool
		want     reservation.PodPhase
	}{
		{name: "empty phase is pending", phase: "", want: reservation.PodPending},
		{name: "pending", phase: corev1.PodPending, want: reservation.PodPending},
		{name: "running", phase: corev1.PodRunning, want: reservation.PodRunning},
		{name: "succeeded", phase: corev1.PodSucceeded, want: reservation.PodSucceeded},
		{name: "failed", phase: corev1.PodFailed, want: reservation.PodFailed},
		{name: "unknown", phase: corev1.PodUnknown, want: reservation.PodUnknown},
		{name: "unrecognised", phase: "Exploded", want: reservation.PodUnknown},
		{name: "deleting", phase: corev1.PodRunning, deleting: true, want: reservation.PodRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					UID: "uid-1", Namespace: "ns", Name: "p",
					Annotations: map[string]string{reservation.AnnotationKey: "[]"},
				},
				Status: corev1.PodStatus{Phase: tt.phase},
			}
			if tt.deleting {
				pod.DeletionTimestamp = &now
			}
			got := kube.PodView(pod)
			want := reservation.Pod{
				UID: "uid-1", Namespace: "ns", Name: "p", Phase: tt.want, Deleting: tt.deleting,
				Annotations: map[string]string{reservation.AnnotationKey: "[]"},
			}
			if tt.deleting {
				want.DeletionDeadline = now.Time
			}
			assert.Equal(t, want, got)
			pod.Annotations[reservation.AnnotationKey] = "changed"
			assert.Equal(t, "[]", got.Annotations[reservation.AnnotationKey], "annotations must be copied")
		})
	}
	assert.Equal(t, reservation.Pod{}, kube.PodView(nil))
}

// PodView fills the fields the trust and release rules need from data the
// API server and the kubelet set.
func TestPodViewServerSetFields(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	deadline := metav1.NewTime(created.Add(30 * time.Second))
	gpus := func(n string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse(n)}}
	}
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	spec := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers: []corev1.Container{{Name: "main", Resources: gpus("2")}, {Name: "side"},
			{Name: "requests-only", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}},
	}
	tests := []struct {
		name           string
		mutate         func(*corev1.Pod)
		wantTerminated bool
		wantRequests   []int
	}{
		{name: "running", mutate: func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: terminated}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: running}, {Name: "side", State: terminated}, {Name: "requests-only", State: terminated}}
		}, wantRequests: []int{0, 2, 0, 1}},
		{name: "all terminated", mutate: func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: terminated}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: terminated}, {Name: "side", State: terminated}, {Name: "requests-only", State: terminated}}
		}, wantTerminated: true, wantRequests: []int{0, 2, 0, 1}},
		{name: "a container without status", mutate: func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: terminated}, {Name: "side", State: terminated}, {Name: "requests-only", State: terminated}}
		}, wantRequests: []int{0, 2, 0, 1}},
		{name: "no container requests the resource", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
			p.Spec.Containers[2].Resources = corev1.ResourceRequirements{}
		}, wantRequests: nil},
		{name: "fractional or huge requests count as none", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = gpus("500m")
			p.Spec.Containers[2].Resources = gpus("100000")
		}, wantRequests: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", CreationTimestamp: created, DeletionTimestamp: &deadline},
				Spec: *spec.DeepCopy()}
			tt.mutate(pod)
			got := kube.PodView(pod)
			assert.Equal(t, created.Time, got.Created)
			assert.Equal(t, deadline.Time, got.DeletionDeadline)
			assert.True(t, got.Deleting)
			assert.Equal(t, tt.wantTerminated, got.ContainersTerminated)
			assert.Equal(t, tt.wantRequests, got.DeviceRequests)
		})
	}
}

// A plugin serving another resource counts that resource's limits.
func TestPodViewForResource(t *testing.T) {
	const other corev1.ResourceName = "example.com/mig"
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{other: resource.MustParse("3")}}},
	}}}
	assert.Equal(t, []int{1, 0}, kube.PodView(pod).DeviceRequests)
	assert.Equal(t, []int{0, 3}, kube.PodViewFor(pod, other).DeviceRequests)
	assert.Equal(t, []int{0, 3}, kube.DeviceRequests(pod, other))
}

func TestTerminal(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{name: "running", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, want: false},
		{name: "pending", pod: corev1.Pod{}, want: false},
		{name: "succeeded", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, want: true},
		{name: "failed", pod: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, want: true},
		{name: "deleting", pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, want: true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, kube.Terminal(&tt.pod), tt.name)
	}
}

func TestSnapshot(t *testing.T) {
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "2"}}
	got := kube.Snapshot([]*corev1.Pod{a, b}, true)
	assert.True(t, got.Complete)
	require.Len(t, got.Pods, 2)
	assert.Equal(t, "a", got.Pods[0].Name)
	assert.Equal(t, "b", got.Pods[1].Name)
	assert.False(t, kube.Snapshot(nil, false).Complete)
	assert.False(t, got.Now.IsZero(), "Snapshot is stamped with the time it was taken")
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, at, kube.SnapshotAt([]*corev1.Pod{a}, true, at).Now)
}
