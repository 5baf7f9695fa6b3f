package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

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

// A reservation on the slots of a young pod that was removed moments after
// it was released (a preemption victim: the kubelet's final delete follows
// at once) is realized: the plugin's listing keeps the removed pod,
// released, so Allocate's reconcile reclaims its instance instead of
// keeping it for AbsentPodGrace and refusing the kubelet's admission.
func TestAllocateAfterAYoungVictimWasRemoved(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	srv := kubetest.New(kubetest.Options{}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("victim", a))
	clk := clocktesting.NewFakeClock(time.Now())
	r := start(t, srv.Clientset, hw, func(c *deviceplugin.Config) {
		c.Clock = clk
		c.ReconcileInterval = time.Hour // no periodic pass during the test
	})
	ctx := context.Background()
	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	require.Len(t, hw.Snapshot(), 1)

	// Its grace period runs out: released, and no event says so.
	passes := quietPasses(t, r.p)
	require.NoError(t, srv.Clientset.CoreV1().Pods("default").Delete(ctx, "victim", metav1.DeleteOptions{}))
	// The deletion triggers a pass, which keeps the running victim's
	// instance: once it ran, the plugin's cache holds the deletion.
	require.Eventually(t, func() bool { return r.p.Reconciles() > passes }, eventually, time.Millisecond)
	require.Len(t, hw.Snapshot(), 1)
	clk.Step(time.Duration(kubetest.DefaultGracePeriodSeconds+1) * time.Second)
	require.NoError(t, kubetest.FinishDeletion(ctx, srv.Clientset, "default", "victim", "uid-victim"))
	require.Eventually(t, func() bool { return r.p.Reconciles() > passes+1 }, eventually, time.Millisecond)
	_, err = srv.Clientset.CoreV1().Pods("default").Create(ctx, boundPod("preemptor", a), metav1.CreateOptions{})
	require.NoError(t, err)

	resp, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	got := hw.Snapshot()
	require.Len(t, got, 1)
	assert.Equal(t, got[0].ComputeInstances[0].MIGUUID, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv])
}

// quietPasses waits until no maintenance pass has run for a while (the
// passes earlier events triggered are done) and returns how many ran.
func quietPasses(t *testing.T, p *deviceplugin.Plugin) uint64 {
	t.Helper()
	last := ^uint64(0) // two equal readings a tick apart are needed
	require.Eventually(t, func() bool {
		now := p.Reconciles()
		quiet := now == last
		last = now
		return quiet
	}, eventually, 100*time.Millisecond)
	return last
}

// lagAfterListing holds srv's watches back and returns a channel closed
// when a direct listing of the node's pods (Allocate's fallback) follows.
func lagAfterListing(srv *kubetest.Server) <-chan struct{} {
	listed := make(chan struct{})
	var once sync.Once
	srv.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(listed) })
		return false, nil, nil
	})
	srv.HoldWatches()
	return listed
}

// A preemptor bound after its victim ended is realized on the victim's
// slots even when the plugin's watch lags: Allocate finds the preemptor by
// a direct listing and waits for its cache to hold it, and with it the
// victim's end, before it realizes.
func TestAllocateWaitsForTheCacheToHoldAListedPod(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	srv := kubetest.New(kubetest.Options{}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("victim", a))
	r := start(t, srv.Clientset, hw, func(c *deviceplugin.Config) {
		c.ReconcileInterval = time.Hour // no periodic pass during the test
		c.CacheCatchUp = time.Hour      // the test releases the watch
	})
	ctx := context.Background()
	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	require.Len(t, hw.Snapshot(), 1)

	listed := lagAfterListing(srv)
	setStatus(t, srv.Clientset, "victim", func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed })
	_, err = srv.CoreV1().Pods("default").Create(ctx, boundPod("preemptor", a), metav1.CreateOptions{})
	require.NoError(t, err)
	go func() {
		<-listed
		time.Sleep(50 * time.Millisecond) // an Allocate that does not wait fails meanwhile
		srv.ReleaseWatches()
	}()

	resp, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	got := hw.Snapshot()
	require.Len(t, got, 1)
	assert.Equal(t, got[0].ComputeInstances[0].MIGUUID, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv])
}

// Allocate waits for a lagging cache at most Config.CacheCatchUp, then
// goes on with the cache it has: the victim's instance is kept, and the
// preemptor's realization is refused, not forced.
func TestAllocateWaitsForALaggingCacheAtMostCacheCatchUp(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}
	srv := kubetest.New(kubetest.Options{}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("victim", a))
	r := start(t, srv.Clientset, hw, func(c *deviceplugin.Config) {
		c.ReconcileInterval = time.Hour
		c.CacheCatchUp = 20 * time.Millisecond
	})
	ctx := context.Background()
	_, err := allocate(ctx, r.client, "id")
	require.NoError(t, err)
	before := hw.Snapshot()

	lagAfterListing(srv)
	t.Cleanup(srv.ReleaseWatches)
	setStatus(t, srv.Clientset, "victim", func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed })
	_, err = srv.CoreV1().Pods("default").Create(ctx, boundPod("preemptor", a), metav1.CreateOptions{})
	require.NoError(t, err)

	_, err = allocate(ctx, r.client, "id")
	require.Error(t, err)
	assert.Equal(t, before, hw.Snapshot(), "the victim's instance is kept")
}
