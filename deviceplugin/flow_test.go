package deviceplugin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
)

func migPod(name, gpumem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1"), kube.ResourceGPUMem: resource.MustParse(gpumem)},
		}}}},
	}
}

// schedule runs the pod through the extender as kube-scheduler would.
func schedule(t *testing.T, client *fake.Clientset, ext *extender.Extender, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	pod, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, ext.Sync(ctx)) // the extender's informers have seen every write so far
	nodes := []string{"n1"}
	res := ext.Filter(ctx, extender.Args{Pod: pod, NodeNames: &nodes})
	require.Empty(t, res.Error)
	require.Equal(t, []string{"n1"}, *res.NodeNames, "failed: %v", res.FailedNodes)
	require.NoError(t, ext.Bind(ctx, extender.BindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "n1"}))
}

// admit is the kubelet's Allocate for the pod's single one-device container.
func admit(t *testing.T, r *running) string {
	t.Helper()
	resp, err := allocate(context.Background(), r.client, "any-device-id")
	require.NoError(t, err)
	return resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
}

func runtimeMIG(t *testing.T, client *fake.Clientset, name string) string {
	t.Helper()
	allocs, err := kube.PodAllocations(getPod(t, client, name))
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	id, ok := allocs[0].Runtime()
	require.True(t, ok, "pod %s has its runtime identity", name)
	return id.MIGUUID
}

func liveMIGs(hw *fakehal.Node) []string {
	var out []string
	for _, in := range hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			out = append(out, ci.MIGUUID)
		}
	}
	return out
}

// deleteGracefully deletes a pod as the API server does for a running
// pod: first it sets the deletion timestamp, then, once the kubelet has
// stopped the containers (here: once released reports true), it removes
// the object.
func deleteGracefully(t *testing.T, client *fake.Clientset, name string, released func() bool) {
	t.Helper()
	ctx := context.Background()
	pod := getPod(t, client, name)
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	_, err := client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, released, eventually, time.Millisecond)
	require.NoError(t, client.CoreV1().Pods(pod.Namespace).Delete(ctx, name, metav1.DeleteOptions{}))
}

// TestWholeFlow: node registration published, pods scheduled and
// annotated, Allocate realizes and patches the runtime identity, a pod is
// deleted and reconciliation reclaims its instance, the device plugin
// restarts and adopts the surviving instance, which is then reclaimed in
// turn.
func TestWholeFlow(t *testing.T) {
	ctx := context.Background()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	hw := fakehal.MustNew(fakehal.Options{})
	r1 := start(t, client, hw)

	// The scheduler sees the published registration.
	ext := extender.New(client, extender.Options{})
	extCtx, stopExt := context.WithCancel(ctx)
	extDone := make(chan struct{})
	go func() { _ = ext.Run(extCtx); close(extDone) }()
	defer func() { stopExt(); <-extDone }()
	require.NoError(t, ext.Sync(ctx))
	_, ok := ext.Ledger().Node("n1")
	require.True(t, ok, "node registration published and read")

	// Pod a: scheduled, annotated, realized.
	schedule(t, client, ext, migPod("a", "9000"))
	migA := admit(t, r1)
	assert.Equal(t, migA, runtimeMIG(t, client, "a"))
	assert.Equal(t, []string{migA}, liveMIGs(hw))

	// Pod b, once a is realized and the node unlocked.
	schedule(t, client, ext, migPod("b", "4000"))
	migB := admit(t, r1)
	assert.Equal(t, migB, runtimeMIG(t, client, "b"))
	assert.ElementsMatch(t, []string{migA, migB}, liveMIGs(hw))

	// Pod a is deleted: its deletion event triggers a reconcile pass that
	// destroys exactly its instance.
	deleteGracefully(t, client, "a", func() bool { return len(liveMIGs(hw)) == 1 })
	assert.Equal(t, []string{migB}, liveMIGs(hw))
	require.NoError(t, hw.Check())

	// The device plugin restarts over the same hardware and adopts b.
	require.NoError(t, r1.stop())
	r2 := start(t, client, hw)
	managed := r2.p.Manager().Managed()
	require.Len(t, managed, 1)
	assert.Equal(t, realize.OriginAdopted, managed[0].Origin)
	assert.Equal(t, migB, managed[0].Runtime.MIGUUID)
	assert.Equal(t, types.UID("uid-b"), types.UID(managed[0].Owner.PodUID))
	assert.Equal(t, []string{migB}, liveMIGs(hw), "adoption destroys nothing")

	// The slots of a are free for the scheduler again; b's are not.
	schedule(t, client, ext, migPod("c", "9000"))
	migC := admit(t, r2)
	assert.ElementsMatch(t, []string{migB, migC}, liveMIGs(hw))

	// The adopted instance is reclaimed like any other.
	deleteGracefully(t, client, "b", func() bool { return len(liveMIGs(hw)) == 1 })
	assert.Equal(t, []string{migC}, liveMIGs(hw))
	require.NoError(t, hw.Check())
}
