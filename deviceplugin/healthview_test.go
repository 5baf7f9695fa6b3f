package deviceplugin_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// Scenario (issue 35, 2): a pod whose creator writes a MIG UUID and GPU and
// compute instance IDs into its own record, on a GPU that reported Xid 79,
// is refused like any pod whose reservation would create an instance
// there: the identities name nothing the plugin handed out, so the
// health check, like the manager, sees an entry still to be realized.
func TestForgedIdentityOnUnhealthyGPUIsRefused(t *testing.T) {
	for _, forged := range []string{"made up", "copied from a running pod"} {
		t.Run(forged, func(t *testing.T) {
			ctx := context.Background()
			hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
			gpu1 := gpuOf(t, hw, 1).UUID
			at := func(start uint32) reservation.Allocation {
				return reservation.Allocation{GPUUUID: gpu1, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
			}
			client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", at(0)))
			r := start(t, client, hw)
			admit(t, r)
			runningStatus(t, client, "a")
			id := reservation.RuntimeIdentity{MIGUUID: "MIG-6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab", GPUInstanceID: 3, ComputeInstanceID: 0}
			if forged != "made up" {
				allocs, err := kube.PodAllocations(getPod(t, client, "a"))
				require.NoError(t, err)
				id, _ = allocs[0].Runtime()
			}
			require.NoError(t, hw.InjectXid(1, "", 79))
			require.Eventually(t, func() bool { return registeredHealth(t, client)[1] }, eventually, time.Millisecond)
			before := hw.Snapshot()

			_, err := client.CoreV1().Pods("default").Create(ctx, boundPod("f", at(2).WithRuntime(id)), metav1.CreateOptions{})
			require.NoError(t, err)
			_, err = allocate(ctx, r.client, "id")
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "unhealthy", "refused for the GPU's health")
			assert.Equal(t, before, hw.Snapshot(), "nothing created on the unhealthy GPU")
			require.NoError(t, hw.Check())
		})
	}
}

// After a restart with the checkpoint kept, the holders of device IDs come
// from the recorded view: a running pod whose owner stripped, moved or
// removed its record still holds its MIG device on the failed GPU, so its
// device ID is the one reported Unhealthy.
func TestHealthHoldersReadTheRecordedView(t *testing.T) {
	for _, edit := range []string{"stripped", "moved", "removed"} {
		t.Run(edit, func(t *testing.T) {
			hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
			gpu0, gpu1 := gpuOf(t, hw, 0).UUID, gpuOf(t, hw, 1).UUID
			running := boundPod("running", reservation.Allocation{GPUUUID: gpu1, Profile: "3g.20gb", Placement: capability.Placement{Start: 4, Size: 4}})
			client := kubetest.NewClientset(bootedNode("boot-1"), running)
			ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
			withCheckpoint := func(c *deviceplugin.Config) { c.Checkpoint = ckpt }
			first := start(t, client, hw, withCheckpoint)
			_, err := allocate(context.Background(), first.client, gpu0+"::0")
			require.NoError(t, err)
			runningStatus(t, client, "running")
			editRecord(t, client, "running", func(a []reservation.Allocation) []reservation.Allocation {
				switch edit {
				case "stripped":
					a[0] = a[0].Scheduled()
				case "moved":
					a[0] = a[0].Scheduled()
					a[0].Placement = capability.Placement{Start: 0, Size: 4}
				default:
					return nil
				}
				return a
			})
			require.NoError(t, hw.InjectXid(1, "", 79))
			require.Eventually(t, func() bool { _, ok := nodeRecord(t, client); return ok }, eventually, time.Millisecond)
			require.NoError(t, first.stop())

			sock := servePodResources(t, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
				assigned("default", "running", "main", gpu0+"::0"),
			}})
			second := start(t, client, hw, withCheckpoint, func(c *deviceplugin.Config) { c.PodResourcesSocket = sock })
			list := firstList(t, second)
			assert.True(t, unhealthySet(list)[gpu0+"::0"], "the running pod's ID is reported")
			assert.Equal(t, map[string]int{gpu0: 1, gpu1: 6}, unhealthyIDs(list))
		})
	}
}
