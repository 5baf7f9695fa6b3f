package extender_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/placement"
)

// runPlugin runs the device plugin for node n1 over hw until the
// test ends.
func runPlugin(t *testing.T, client *fake.Clientset, hw *fakehal.Node) *deviceplugin.Plugin {
	t.Helper()
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: t.TempDir()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("plugin stopped: %v", err)
	case <-time.After(eventually):
		t.Fatal("plugin not ready")
	}
	return p
}

// waitRegistered waits until n1's registration publishes the given
// Unhealthy flags, by GPU index, and the extender has seen it.
func waitRegistered(t *testing.T, client *fake.Clientset, ext *extender.Extender, unhealthy ...bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			return false
		}
		gpus, err := kube.NodeGPUs(n)
		if err != nil || len(gpus) != len(unhealthy) {
			return false
		}
		for i, g := range gpus {
			if g.Unhealthy != unhealthy[i] {
				return false
			}
		}
		return true
	}, eventually, time.Millisecond)
	catchUp(t, ext)
}

// TestFilterAvoidsGPUsFailedThroughThePlugin: Xids injected into fakehal
// reach the scheduler through the device plugin's node registration. The
// extender places new pods only on healthy GPUs, says why a pod is pending
// when none is left, and places again after recovery; the running pod
// keeps its instance throughout.
func TestFilterAvoidsGPUsFailedThroughThePlugin(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu0, _ := hw.Device(0)
	gpu1, _ := hw.Device(1)
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	p := runPlugin(t, client, hw)
	ext := start(t, client, extender.Options{})
	waitRegistered(t, client, ext, false, false)

	// GPU 0 fails: the pod goes to GPU 1, where the plugin realizes it.
	require.NoError(t, hw.InjectXid(0, "", 79))
	waitRegistered(t, client, ext, true, false)
	a := create(t, client, migPod("a", "9000"))
	res := ext.Filter(ctx, extender.Args{Pod: a, NodeNames: names("n1")})
	require.Equal(t, []string{"n1"}, *res.NodeNames, "%v", res.FailedNodes)
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))
	allocs, err := kube.PodAllocations(get(t, client, "a"))
	require.NoError(t, err)
	require.Len(t, allocs, 1)
	assert.Equal(t, gpu1.UUID, allocs[0].GPUUUID, "never on the unhealthy GPU")
	_, err = p.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{{DevicesIds: []string{"id"}}}})
	require.NoError(t, err)
	catchUp(t, ext)

	// GPU 1 fails too: a new pod is pending, and the reason says why.
	require.NoError(t, hw.InjectXid(1, "", 48))
	waitRegistered(t, client, ext, true, true)
	b := create(t, client, migPod("b", "4000"))
	res = ext.Filter(ctx, extender.Args{Pod: b, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames)
	_, err = ext.Ledger().Evaluate("n1", healthRequest(t, b))
	var why *placement.UnschedulableError
	require.ErrorAs(t, err, &why)
	assert.ErrorIs(t, err, placement.ErrExcluded)
	assert.Equal(t, 2, why.Unhealthy, "the reason counts the failed GPUs")
	assert.Equal(t, err.Error(), res.FailedNodes["n1"], "and is the pending reason the scheduler reports")
	assert.Len(t, hw.Snapshot(), 1, "pod a keeps its instance on the failed GPU")

	// GPU 0 recovers: the pod is placed there.
	require.NoError(t, hw.Recover(0))
	waitRegistered(t, client, ext, false, true)
	res = ext.Filter(ctx, extender.Args{Pod: b, NodeNames: names("n1")})
	require.Equal(t, []string{"n1"}, *res.NodeNames, "%v", res.FailedNodes)
	require.NoError(t, ext.Bind(ctx, bindArgs(b, "n1")))
	allocs, err = kube.PodAllocations(get(t, client, "b"))
	require.NoError(t, err)
	assert.Equal(t, gpu0.UUID, allocs[0].GPUUUID)
}

// healthRequest is the placement request of a MIG pod.
func healthRequest(t *testing.T, pod *corev1.Pod) *placement.Request {
	t.Helper()
	req, err := kube.ParseRequest(pod)
	require.NoError(t, err)
	return &req
}
