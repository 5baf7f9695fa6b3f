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

	"github.com/dynmig/dynmig/kube"
)

// snapshotNames returns the names of the pods in src's snapshot, with
// whether each is released at the snapshot's time.
func snapshotNames(src *kube.NodePodSource) map[string]bool {
	snap := src.Snapshot()
	out := map[string]bool{}
	for i := range snap.Pods {
		out[snap.Pods[i].Name] = snap.Pods[i].Released(snap.Now)
	}
	return out
}

// A pod deleted in a released state stays in snapshots, released, for
// EndedPodMemory, so a pass right after the kubelet's final delete
// reclaims its instance instead of waiting out the absent-pod grace. A pod
// deleted while its containers may still run is merely absent, and so is a
// pod of another node.
func TestNodePodSourceListsPodsDeletedWhileReleased(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		done := podOn("a", "done", "n1", nil)
		done.Status.Phase = corev1.PodSucceeded
		stopped := podOn("a", "stopped", "n1", nil)
		stopped.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(30 * time.Second)}
		stopped.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
		stopped.Spec.Containers = []corev1.Container{{Name: "main"}}
		runs := podOn("a", "runs", "n1", nil)
		elsewhere := podOn("a", "elsewhere", "n2", nil)
		elsewhere.Status.Phase = corev1.PodSucceeded
		client := fake.NewClientset(done, stopped, runs, elsewhere)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete })
		ctx := context.Background()
		for _, name := range []string{"done", "stopped", "runs", "elsewhere"} {
			require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, name, metav1.DeleteOptions{}))
		}
		synctest.Wait()
		assert.Equal(t, map[string]bool{"done": true, "stopped": true}, snapshotNames(src))

		time.Sleep(kube.EndedPodMemory + time.Second)
		assert.Empty(t, snapshotNames(src), "forgotten after EndedPodMemory")
	})
}

// A relisting that no longer holds a released pod (deleted while the
// watch was down) remembers it as a deletion does.
func TestNodePodSourceListsPodsDeletedDuringGap(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		done := podOn("a", "done", "n1", nil)
		done.Status.Phase = corev1.PodFailed
		client := fake.NewClientset(done, podOn("a", "runs", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, func() bool { return log.watches() == 1 })
		w.breakAll()
		require.NoError(t, client.CoreV1().Pods("a").Delete(context.Background(), "done", metav1.DeleteOptions{}))
		require.NoError(t, client.CoreV1().Pods("a").Delete(context.Background(), "runs", metav1.DeleteOptions{}))
		settle(t, func() bool { return src.Snapshot().Complete })
		assert.Equal(t, map[string]bool{"done": true}, snapshotNames(src))
	})
}
