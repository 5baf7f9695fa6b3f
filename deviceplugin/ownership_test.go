package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// A pod that requests no MIG device, created with spec.nodeName preset and
// an undecodable, invalid or legacy record, owns nothing: it must not stop
// the plugin from reclaiming an ended pod's instance.
func TestGPUFreePodCannotBlockReclamation(t *testing.T) {
	tests := []struct {
		name        string
		annotations func(gpu string) map[string]string
	}{
		{"undecodable record", func(string) map[string]string {
			return map[string]string{reservation.AnnotationKey: `[{"containerIndex":`}
		}},
		{"invalid record", func(gpu string) map[string]string {
			return map[string]string{reservation.AnnotationKey: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu +
				`","profile":"1g.5gb","placement":{"start":0,"size":0}}]`}
		}},
		{"legacy identifiers", func(gpu string) map[string]string {
			return map[string]string{reservation.LegacyDevicesAnnotationKey: gpu + "[1-3],NVIDIA,4864,0:;"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			hw := fakehal.MustNew(fakehal.Options{})
			gpu := gpuOf(t, hw, 0).UUID
			client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
				boundPod("a", reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}))
			r := start(t, client, hw)
			admit(t, r)
			require.Len(t, liveMIGs(hw), 1)

			squatter := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "squatter", UID: types.UID("uid-squatter"),
					Annotations: tt.annotations(gpu)},
				Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
			}
			_, err := client.CoreV1().Pods("default").Create(ctx, squatter, metav1.CreateOptions{})
			require.NoError(t, err)
			runningStatus(t, client, "squatter") // its kubelet runs it

			a := getPod(t, client, "a")
			a.Status.Phase = corev1.PodSucceeded
			_, err = client.CoreV1().Pods("default").UpdateStatus(ctx, a, metav1.UpdateOptions{})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(liveMIGs(hw)) == 0 }, eventually, time.Millisecond,
				"the ended pod's instance is reclaimed despite the GPU-free pod's record")
			require.NoError(t, hw.Check())
		})
	}
}

// runningStatus is the status the kubelet writes once it has admitted pod
// and started its containers.
func runningStatus(t *testing.T, client *fake.Clientset, name string) {
	t.Helper()
	pod := getPod(t, client, name)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name,
			ContainerID: "containerd://" + name + "-" + c.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	}
	_, err := client.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// stripRuntime is the pod owner deleting the runtime identities from the
// pod's record, keeping the fields the scheduler wrote.
func stripRuntime(t *testing.T, client *fake.Clientset, name string) {
	t.Helper()
	pod := getPod(t, client, name)
	allocs, err := kube.PodAllocations(pod)
	require.NoError(t, err)
	for i := range allocs {
		allocs[i] = allocs[i].Scheduled()
	}
	pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	_, err = client.CoreV1().Pods("default").Update(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// Scenario: pod A (created first) is realized and running; its owner
// strips the runtime identity from its record; a victim V is admitted
// later. Whether or not the plugin restarted in between, V's Allocate must
// realize V's own reservation, never choose A's running container (which
// would destroy A's idle instance, create one at A's placement for V and
// write it into A's record).
func TestStrippedIdentityNeverRedirectsAnAllocate(t *testing.T) {
	for _, restartAt := range []string{"never", "before the strip", "after the strip", "both"} {
		for _, kept := range []bool{true, false} {
			if restartAt == "never" && !kept {
				continue
			}
			name := "restart " + restartAt
			if restartAt != "never" {
				name += map[bool]string{true: ", checkpoint kept", false: ", checkpoint lost"}[kept]
			}
			t.Run(name, func(t *testing.T) { strippedIdentity(t, restartAt, kept) })
		}
	}
}

func strippedIdentity(t *testing.T, restartAt string, kept bool) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	gpu := gpuOf(t, hw, 0).UUID
	at := func(start uint32) reservation.Allocation {
		return reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
	}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", at(0)))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	withCheckpoint := func(c *deviceplugin.Config) { c.Checkpoint = ckpt }
	r := start(t, client, hw, withCheckpoint)
	migA := admit(t, r)
	runningStatus(t, client, "a")
	restart := func() {
		require.NoError(t, r.stop())
		if !kept {
			require.NoError(t, os.Remove(ckpt))
		}
		r = start(t, client, hw, withCheckpoint)
		if kept {
			managed := r.p.Manager().Managed()
			require.Len(t, managed, 1, "the checkpoint names A's instance: adopted whatever A's record says")
			assert.Equal(t, migA, managed[0].Runtime.MIGUUID)
		}
	}
	if restartAt == "before the strip" || restartAt == "both" {
		restart()
	}
	stripRuntime(t, client, "a")
	if restartAt == "after the strip" || restartAt == "both" {
		restart()
	}
	_, err := client.CoreV1().Pods("default").Create(ctx, boundPod("v", at(1)), metav1.CreateOptions{})
	require.NoError(t, err)

	migV := admit(t, r)
	assert.NotEqual(t, migA, migV)
	assert.Equal(t, migV, runtimeMIG(t, client, "v"), "V's own reservation is realized")
	assert.ElementsMatch(t, []string{migA, migV}, liveMIGs(hw), "A's instance is untouched")
	allocs, err := kube.PodAllocations(getPod(t, client, "a"))
	require.NoError(t, err)
	_, realized := allocs[0].Runtime()
	assert.False(t, realized, "the plugin wrote nothing into A's record")
	require.NoError(t, hw.Check())

	// Nothing else is pending: A is never a candidate again.
	_, err = allocate(ctx, r.client, "id")
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}

// The kubelet allocates every container of a pod at admission: once an
// init container runs, a regular container not created yet is no
// candidate either, even when its record looks unrealized.
func TestAdmittedPodsUnstartedContainerIsNoCandidate(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	gpu := gpuOf(t, hw, 0).UUID
	a := boundPod("a", reservation.Allocation{ContainerIndex: 1, GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}})
	a.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	a.Spec.Containers = a.Spec.Containers[:1]
	a.Spec.Containers[0].Resources.Limits = corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}
	a.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", ContainerID: "containerd://init",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, a)
	r := start(t, client, hw)
	_, err := allocate(ctx, r.client, "id")
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	assert.Empty(t, liveMIGs(hw))
}
