package deviceplugin_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

func oneGPU(hw *fakehal.Node, t *testing.T, start uint32) reservation.Allocation {
	return reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
}

func runtimeOf(t *testing.T, client *fake.Clientset, name string) (reservation.RuntimeIdentity, bool) {
	t.Helper()
	allocs, err := kube.PodAllocations(getPod(t, client, name))
	require.NoError(t, err)
	require.NotEmpty(t, allocs)
	return allocs[0].Runtime()
}

// A pod bound without the scheduler (spec.nodeName preset) with a forged,
// early hami.io/bind-time and its own reservation does not capture the
// Allocate of the pod created before it: kubelet admits pods in creation
// order, and annotations never rank candidates. Deleting the squatter
// then leaves the victim's device alone.
func TestAllocateIgnoresForgedBindTime(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	victim := boundPod("victim", oneGPU(hw, t, 0))
	squatter := boundPod("squatter", oneGPU(hw, t, 1))
	squatter.Annotations[kube.BindTimeAnnotation] = "1" // 1970: "bound" before anyone
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, squatter, victim)
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Manager.AbsentPodGrace = -1 })
	ctx := context.Background()

	resp, err := allocate(ctx, r.client, "id-0")
	require.NoError(t, err)
	got := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
	id, ok := runtimeOf(t, client, "victim")
	require.True(t, ok, "the victim, created first, was realized")
	assert.Equal(t, id.MIGUUID, got)
	_, ok = runtimeOf(t, client, "squatter")
	assert.False(t, ok, "the squatter was not realized")

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "squatter", metav1.DeleteOptions{}))
	before := r.p.Reconciles()
	require.Eventually(t, func() bool { return r.p.Reconciles() > before }, eventually, time.Millisecond)
	live := false
	for _, in := range hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live = live || ci.MIGUUID == got
		}
	}
	assert.True(t, live, "the victim's device survives the squatter's deletion")
}

// A pod that requests none of the plugin's resource is never a candidate,
// whatever its annotation says and however early it was created.
func TestAllocateNeverChoosesAPodThatRequestsNoDevice(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	forged := boundPod("forged", oneGPU(hw, t, 1))
	for i := range forged.Spec.Containers {
		forged.Spec.Containers[i].Resources = corev1.ResourceRequirements{}
	}
	victim := boundPod("victim", oneGPU(hw, t, 0))
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, forged, victim)
	r := start(t, client, hw)
	resp, err := allocate(context.Background(), r.client, "id-0")
	require.NoError(t, err)
	id, ok := runtimeOf(t, client, "victim")
	require.True(t, ok)
	assert.Equal(t, id.MIGUUID, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv])
}

// When the earliest candidates cannot be told apart (created in the same
// second), or the earliest one has no reservation (bound without the
// scheduler), the Allocate fails and nothing is created.
func TestAllocateRefusesToGuess(t *testing.T) {
	tests := []struct {
		name string
		pods func(hw *fakehal.Node) []*corev1.Pod
	}{
		{name: "two pods created in the same second", pods: func(hw *fakehal.Node) []*corev1.Pod {
			a, b := boundPod("a", oneGPU(hw, t, 0)), boundPod("b", oneGPU(hw, t, 1))
			b.CreationTimestamp = a.CreationTimestamp
			return []*corev1.Pod{a, b}
		}},
		{name: "the earliest pod has no reservation", pods: func(hw *fakehal.Node) []*corev1.Pod {
			bare := boundPod("bare")
			bare.Spec.Containers[0].Resources = boundPod("x", oneGPU(hw, t, 2)).Spec.Containers[0].Resources
			return []*corev1.Pod{bare, boundPod("later", oneGPU(hw, t, 0))}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hw := fakehal.MustNew(fakehal.Options{})
			client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
			for _, p := range tt.pods(hw) {
				_, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			r := start(t, client, hw)
			_, err := allocate(context.Background(), r.client, "id-0")
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "Allocate error %v", err)
			assert.Empty(t, hw.Snapshot(), "nothing is created")
		})
	}
}

// fakePodResources is the kubelet's PodResources API, answering List with
// a fixed response.
type fakePodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (f *fakePodResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return f.resp, nil
}

func servePodResources(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pr.sock")
	lis, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &fakePodResources{resp: resp})
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return path
}

func assigned(namespace, name, container string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: []*podresourcesv1.ContainerResources{{
		Name: container, Devices: []*podresourcesv1.ContainerDevices{{ResourceName: string(kube.ResourceGPU), DeviceIds: ids}},
	}}}
}

// After the fact, the kubelet's PodResources API tells which container got
// each device ID. A device realized for one pod but assigned to another is
// reported with both pods and counted once.
func TestVerifyAssignmentsReportsMismatch(t *testing.T) {
	tests := []struct {
		name     string
		listed   *podresourcesv1.PodResources
		wantMiss int
	}{
		{name: "assigned as realized", listed: assigned("default", "victim", "main", "id-0")},
		{name: "assigned to another pod", listed: assigned("default", "other", "main", "id-0"), wantMiss: 1},
		{name: "assigned to another container", listed: assigned("default", "victim", "side", "id-0"), wantMiss: 1},
		{name: "another resource", listed: &podresourcesv1.PodResources{Namespace: "default", Name: "other",
			Containers: []*podresourcesv1.ContainerResources{{Name: "main", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "example.com/other", DeviceIds: []string{"id-0"}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hw := fakehal.MustNew(fakehal.Options{})
			socket := servePodResources(t, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{tt.listed}})
			client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("victim", oneGPU(hw, t, 0)))
			r := start(t, client, hw, func(c *deviceplugin.Config) { c.PodResourcesSocket = socket; c.ReconcileInterval = time.Hour })
			ctx := context.Background()
			_, err := allocate(ctx, r.client, "id-0")
			require.NoError(t, err)
			// The plugin's own maintenance pass may check first; either
			// way each mismatch is reported and counted exactly once.
			_, err = r.p.VerifyAssignments(ctx)
			require.NoError(t, err)
			again, err := r.p.VerifyAssignments(ctx)
			require.NoError(t, err)
			assert.Empty(t, again, "a mismatch is reported once")
			assert.Equal(t, uint64(tt.wantMiss), r.p.Mismatches())
		})
	}
}

// A pod creator can write a runtime identity into its own record so that
// the record looks realized. The earliest pod, the one the kubelet is
// admitting, must not be skipped for that: the Allocate would then hand
// the next pod's reservation, realized as a MIG device, to the forger's
// container. Only what the plugin realized itself, or a container the
// kubelet already started, counts as done.
func TestAllocateIgnoresForgedRuntimeIdentity(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	forged := oneGPU(hw, t, 1)
	forged.MIGUUID = "MIG-00000000-0000-0000-0000-000000000000"
	forged.GPUInstanceID, forged.ComputeInstanceID = reservation.SomeID(9), reservation.SomeID(0)
	forger := boundPod("forger", forged)
	victim := boundPod("victim", oneGPU(hw, t, 0))
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, forger, victim)
	r := start(t, client, hw)

	_, err := allocate(context.Background(), r.client, "id-0")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "Allocate error %v", err)
	_, ok := runtimeOf(t, client, "victim")
	assert.False(t, ok, "the victim's reservation was realized for the forger's Allocate")
	assert.Empty(t, hw.Snapshot(), "nothing is created")
}

// hungPodResources is a kubelet whose PodResources List never answers.
type hungPodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
}

func (hungPodResources) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The after-the-fact check runs in the maintenance pass; a kubelet whose
// PodResources API does not answer must not stop later passes, which
// reclaim the devices of ended pods.
func TestHungPodResourcesDoesNotStallMaintenance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pr.sock")
	lis, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, hungPodResources{})
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.PodResourcesSocket = path; c.ReconcileInterval = 20 * time.Millisecond })
	before := r.p.Reconciles()
	assert.Eventually(t, func() bool { return r.p.Reconciles() >= before+3 }, 5*time.Second, 5*time.Millisecond,
		"maintenance passes stopped behind a hung PodResources List")
}
