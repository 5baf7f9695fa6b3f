package kube_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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
			assert.Equal(t, want, got)
			pod.Annotations[reservation.AnnotationKey] = "changed"
			assert.Equal(t, "[]", got.Annotations[reservation.AnnotationKey], "annotations must be copied")
		})
	}
	assert.Equal(t, reservation.Pod{}, kube.PodView(nil))
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
}
