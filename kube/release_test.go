package kube_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// A deleting pod whose containers still run is in the snapshot as deleting
// but not released; OnInactive fires again when the kubelet reports every
// container terminated, since that releases the pod's devices. Snapshots
// are stamped with the source's clock.
func TestNodePodSourceSignalsRelease(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		pod := podOn("a", "p", "n1", nil)
		pod.Spec.Containers = []corev1.Container{{Name: "main"}}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		client := fake.NewClientset(pod)
		watching := watchStarted(client)
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clk := clocktesting.NewFakePassiveClock(now)
		signals := make(chan reservation.Pod, 8)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{
			OnInactive: func(p reservation.Pod) { signals <- p }, Clock: clk,
		})
		startSource(t, src)
		settle(t, received(watching))
		ctx := context.Background()

		// The API server sets the deletion timestamp: the grace period ends
		// in 30 s.
		deadline := metav1.NewTime(now.Add(30 * time.Second))
		deleting := pod.DeepCopy()
		deleting.DeletionTimestamp = &deadline
		_, err := client.CoreV1().Pods("a").Update(ctx, deleting, metav1.UpdateOptions{})
		require.NoError(t, err)
		synctest.Wait()
		require.Len(t, signals, 1, "deletion signals at once")
		first := <-signals
		assert.True(t, first.Deleting)
		assert.False(t, first.Released(now), "containers still run within the grace period")

		snap := src.Snapshot()
		require.Len(t, snap.Pods, 1)
		assert.Equal(t, now, snap.Now)
		assert.Equal(t, deadline.Time, snap.Pods[0].DeletionDeadline)

		// The kubelet reports the container terminated.
		stopped := deleting.DeepCopy()
		stopped.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
		_, err = client.CoreV1().Pods("a").UpdateStatus(ctx, stopped, metav1.UpdateOptions{})
		require.NoError(t, err)
		synctest.Wait()
		require.Len(t, signals, 1, "the release signals again")
		released := <-signals
		assert.True(t, released.Released(now))
	})
}
