package deviceplugin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// A pod the cache has not seen yet is found by a direct listing. While one
// Allocate call realizes it, a concurrent call must not forget that claim
// because the cache still lacks the pod, pick the same container from its
// own listing and hand the same MIG device to a second container.
func TestConcurrentAllocateOfAPodTheCacheLacks(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	// The cache syncs on the (empty) listing and then hears nothing.
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	r := start(t, client, hw, func(c *deviceplugin.Config) { c.ReconcileInterval = time.Hour })

	a := reservation.Allocation{GPUUUID: gpuOf(t, hw, 0).UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	_, err := client.CoreV1().Pods("default").Create(context.Background(), boundPod("late", a), metav1.CreateOptions{})
	require.NoError(t, err)
	// Realization is slow, so the second call lists while the first one
	// has claimed the container but not written its identity yet.
	hw.AddLatency(fakehal.OpCreateGI, 500*time.Millisecond)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	got := make([]string, 2)
	for i := range errs {
		wg.Go(func() {
			resp, err := allocate(context.Background(), r.client, "id")
			errs[i] = err
			if err == nil {
				got[i] = resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]
			}
		})
	}
	wg.Wait()
	require.True(t, (errs[0] == nil) != (errs[1] == nil), "exactly one call gets the pod's device: %v, devices %q", errs, got)
	for _, err := range errs {
		if err != nil {
			assert.Equal(t, codes.NotFound, status.Code(err), "the other call finds no pending pod: %v", err)
		}
	}
	allocs, err := kube.PodAllocations(getPod(t, client, "late"))
	require.NoError(t, err)
	id, ok := allocs[0].Runtime()
	require.True(t, ok)
	assert.Contains(t, got, id.MIGUUID)
	assert.Len(t, hw.Snapshot(), 1)
}
