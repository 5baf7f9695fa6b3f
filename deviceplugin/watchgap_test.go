package deviceplugin_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// gappyWatches makes client's pod watches drop the ADDED event of the pod
// named hide while hiding is set (every event of it if every is set), and
// lets a test end the current watch, as an API server that times a watch
// out does; the reflector then lists again, and the pod appears only in
// that listing.
type gappyWatches struct {
	hide   string
	every  bool
	hiding atomic.Bool

	mu      sync.Mutex
	current watch.Interface
}

func (g *gappyWatches) install(client *fake.Clientset) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		inner, err := client.Tracker().Watch(pods, a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		w := watch.Filter(inner, func(e watch.Event) (watch.Event, bool) {
			p, ok := e.Object.(*corev1.Pod)
			return e, !(ok && (g.every || e.Type == watch.Added) && p.Name == g.hide && g.hiding.Load())
		})
		g.mu.Lock()
		g.current = w
		g.mu.Unlock()
		return true, w, nil
	})
}

// end ends the current watch.
func (g *gappyWatches) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.current != nil {
		g.current.Stop()
	}
}

// A watch gap hides a forged copy's creation: the plugin's cache misses
// the copy's ADDED event and sees the copy only when it lists again. The
// copy, created with the node preset and the record of a running pod,
// MIG UUID included, gets nothing during the gap (the Allocate lists the
// node's pods directly), nothing after the relist, and not the device
// once its owner ended; the running pod's device is never destroyed until
// it ends.
func TestWatchGapHidesACopysCreation(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	gpu := gpuOf(t, hw, 0).UUID
	entry := reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: 2, Size: 1}}
	a := boundPod("a", entry)
	a.Spec.SchedulerName = deviceplugin.DefaultSchedulerName
	a.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, a)
	gap := &gappyWatches{hide: "copy"}
	gap.install(client)
	r := start(t, client, hw)
	mig := admit(t, r)
	runningStatus(t, client, "a")

	observed := func(uid string) bool {
		c, _, err := deviceplugin.ReadCheckpoint(filepath.Join(filepath.Dir(r.p.SocketPath()), deviceplugin.CheckpointDir, deviceplugin.CheckpointFile))
		return err == nil && slices.ContainsFunc(c.Pods, func(p deviceplugin.PodObservation) bool { return p.UID == uid })
	}
	require.Eventually(t, func() bool { return observed("uid-a") }, eventually, time.Millisecond)

	// The copy is created; the plugin's watch drops its ADDED event.
	gap.hiding.Store(true)
	id, ok := func() (reservation.RuntimeIdentity, bool) {
		allocs, err := kube.PodAllocations(getPod(t, client, "a"))
		require.NoError(t, err)
		return allocs[0].Runtime()
	}()
	require.True(t, ok)
	copied := boundPod("copy", entry.WithRuntime(id))
	_, err := client.CoreV1().Pods("default").Create(ctx, copied, metav1.CreateOptions{})
	require.NoError(t, err)

	// During the gap: the copy is refused, a's device stays.
	_, err = allocate(ctx, r.client, "id")
	require.Error(t, err, "the copy is admitted during the gap")
	assert.False(t, observed("uid-copy"), "the gap hid the copy from the cache")
	assert.Contains(t, liveMIGs(hw), mig)

	// The watch ends; the relist shows the copy.
	gap.hiding.Store(false)
	gap.end()
	require.Eventually(t, func() bool { return observed("uid-copy") }, eventually, time.Millisecond)
	_, err = allocate(ctx, r.client, "id")
	require.Error(t, err, "the copy is admitted after the relist")
	assert.Contains(t, liveMIGs(hw), mig)
	require.NoError(t, hw.Check())

	// a ends: its device is reclaimed, never handed to the copy.
	a = getPod(t, client, "a")
	a.Status.Phase = corev1.PodSucceeded
	_, err = client.CoreV1().Pods("default").UpdateStatus(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !slices.Contains(liveMIGs(hw), mig) }, eventually, time.Millisecond)
	if resp, err := allocate(ctx, r.client, "id"); err == nil {
		assert.NotEqual(t, mig, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv])
	}
	require.NoError(t, hw.Check())
}

// An informer that lags the direct listing an Allocate chose from never
// makes the plugin hand the same device twice, even when the pod's owner
// strips the runtime identity from its record before the kubelet reports
// the container started: the checkpoint restores the identity the owner
// stripped and records the hand-out, so the container is not chosen
// again and the next Allocate, for another container, gets nothing.
func TestLaggingCacheNeverHandsADeviceTwice(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	gap := &gappyWatches{hide: "a", every: true}
	gap.hiding.Store(true)
	gap.install(client)
	r := start(t, client, hw)

	a := boundPod("a", reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}})
	_, err := client.CoreV1().Pods("default").Create(ctx, a, metav1.CreateOptions{})
	require.NoError(t, err)
	mig := admit(t, r) // from the direct listing: the cache never shows a
	require.Equal(t, []string{mig}, liveMIGs(hw))
	stripRuntime(t, client, "a")

	resp, err := allocate(ctx, r.client, "another-container")
	if err == nil {
		assert.NotEqual(t, mig, resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv], "a's device handed again")
	}
	assert.Equal(t, []string{mig}, liveMIGs(hw))
	require.NoError(t, hw.Check())
}
