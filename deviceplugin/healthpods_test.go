package deviceplugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// unhealthySet returns the Unhealthy device IDs of a listing.
func unhealthySet(list *v1beta1.ListAndWatchResponse) map[string]bool {
	out := map[string]bool{}
	for _, d := range list.Devices {
		if d.Health == v1beta1.Unhealthy {
			out[d.ID] = true
		}
	}
	return out
}

// podEvents returns the notes of the Events (events.k8s.io/v1) recorded
// on the pod by its UID, by reason.
func podEvents(t *testing.T, client *fake.Clientset, name string) map[string][]string {
	t.Helper()
	list, err := client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == name && e.Regarding.UID != "" {
			out[e.Reason] = append(out[e.Reason], e.Note)
		}
	}
	return out
}

// The kubelet hands out device IDs regardless of GPU: a pod whose MIG
// device is on GPU 1 may hold GPU 0's first ID. When GPU 1 fails, exactly
// that pod's ID turns Unhealthy (the kubelet's per-pod device health then
// points at the right pod), free IDs of GPU 1 make up the rest of its
// capacity, GPU 0's other IDs stay Healthy, and the pod gets an Event
// naming its MIG device (issue 29).
func TestPluginHealthFollowsAllocatedIDs(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu0, gpu1 := gpuOf(t, hw, 0).UUID, gpuOf(t, hw, 1).UUID
	running := boundPod("running", reservation.Allocation{GPUUUID: gpu1, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, running)
	r := start(t, client, hw)
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	resp, err := allocate(ctx, r.client, gpu0+"::0")
	require.NoError(t, err)
	mig := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]

	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, hw.InjectXid(1, "", 79))
	list, err := stream.Recv()
	require.NoError(t, err)
	bad := unhealthySet(list)
	assert.True(t, bad[gpu0+"::0"], "the pod on GPU 1 holds GPU 0's first ID: it is the one reported")
	assert.Equal(t, map[string]int{gpu0: 1, gpu1: 6}, unhealthyIDs(list), "GPU 1's capacity (7) is still taken out")
	for _, id := range []string{gpu0 + "::1", gpu0 + "::6"} {
		assert.False(t, bad[id], "%s is another GPU's free ID", id)
	}
	require.Eventually(t, func() bool { return len(podEvents(t, client, "running")[deviceplugin.ReasonGPUUnhealthy]) == 1 }, eventually, time.Millisecond)
	msg := podEvents(t, client, "running")[deviceplugin.ReasonGPUUnhealthy][0]
	assert.True(t, strings.Contains(msg, mig) && strings.Contains(msg, "xid 79"), "event %q names the MIG device and the cause", msg)

	require.NoError(t, hw.Recover(1))
	list, err = stream.Recv()
	require.NoError(t, err)
	assert.Empty(t, unhealthySet(list))
}

// After a restart the plugin reads who holds which ID back from the
// kubelet's PodResources API and the pods' reservations, so a failure
// restored from the node's health record still points at the right pod.
func TestPluginHealthHoldersAfterRestart(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpu0, gpu1 := gpuOf(t, hw, 0).UUID, gpuOf(t, hw, 1).UUID
	running := boundPod("running", reservation.Allocation{GPUUUID: gpu1, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}})
	client := kubetest.NewClientset(bootedNode("boot-1"), running)
	first := start(t, client, hw)
	_, err := allocate(context.Background(), first.client, gpu0+"::0")
	require.NoError(t, err)
	require.NoError(t, hw.InjectXid(1, "", 79))
	require.Eventually(t, func() bool { _, ok := nodeRecord(t, client); return ok }, eventually, time.Millisecond)
	require.NoError(t, first.stop())

	sock := servePodResources(t, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		assigned("default", "running", "main", gpu0+"::0"),
	}})
	second := start(t, client, hw, func(c *deviceplugin.Config) { c.PodResourcesSocket = sock })
	list := firstList(t, second)
	assert.True(t, unhealthySet(list)[gpu0+"::0"])
	assert.Equal(t, map[string]int{gpu0: 1, gpu1: 6}, unhealthyIDs(list))
}
