package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// When the checkpoint cannot be written after the pod's runtime identity
// was, Allocate fails and the kubelet holds no device; its retry, once the
// checkpoint can be written again, is handed the same instance, although
// the pod's record already names it.
func TestAllocateRetriesAfterAFailedCheckpointWrite(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("p", a))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Checkpoint = ckpt })

	// A non-empty directory where the checkpoint goes: the atomic rename
	// fails, whatever the process's privileges.
	require.NoError(t, os.Remove(ckpt))
	require.NoError(t, os.MkdirAll(filepath.Join(ckpt, "blocker"), 0o700))
	_, err := allocate(context.Background(), r.client, "id")
	require.Error(t, err)
	pod, err := client.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{})
	require.NoError(t, err)
	allocs, err := reservation.DecodeString(pod.Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	id, realized := allocs[0].Runtime()
	require.True(t, realized, "the identity is written before the checkpoint")

	require.NoError(t, os.RemoveAll(ckpt))
	resp, err := allocate(context.Background(), r.client, "id")
	require.NoError(t, err)
	assert.Equal(t, id.MIGUUID, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv])
	assert.Len(t, hw.Snapshot(), 1, "the retry reuses the instance")
	got, exists, err := deviceplugin.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	require.True(t, exists)
	assert.Len(t, got.Devices, 1, "the retry records the hand-out")
}
