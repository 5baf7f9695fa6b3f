package deviceplugin_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// LastReconcile says what pauses destruction: while a pod that requests a
// device carries an undecodable record, every pass is unauthorised and
// its reasons name that pod (a *reservation.PodError), and an ended pod's
// instance stays; once the pod is gone, the next pass is authorised and
// the instance is reclaimed. A plugin that never ran reports no pass.
func TestLastReconcileNamesThePodThatPausesDestruction(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	admitted := boundPod("p", oneGPU(hw, t, 6))
	broken := boundPod("broken", oneGPU(hw, t, 0))
	broken.Annotations[reservation.AnnotationKey] = `[{"containerIndex":`
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, admitted, broken)

	idle, err := newPlugin(t, client, hw, filepath.Join(t.TempDir(), "checkpoint.json"))
	require.NoError(t, err)
	_, ran := idle.LastReconcile()
	assert.False(t, ran, "a plugin that never ran reports no pass")
	require.NoError(t, idle.Close())

	r := start(t, client, hw, func(c *deviceplugin.Config) { c.Manager.AbsentPodGrace = -1 })
	ctx := context.Background()
	_, err = allocate(ctx, r.client, "id")
	require.NoError(t, err)
	before := r.p.Reconciles()
	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return r.p.Reconciles() > before }, eventually, time.Millisecond)
	rep, ran := r.p.LastReconcile()
	require.True(t, ran)
	assert.False(t, rep.Authorized)
	require.NotEmpty(t, rep.Reasons)
	for _, reason := range rep.Reasons {
		var pe *reservation.PodError
		require.True(t, errors.As(reason, &pe), "reason %v is no *reservation.PodError", reason)
		assert.Equal(t, "broken", pe.Pod.Name)
	}
	assert.Len(t, hw.Snapshot(), 1, "an unauthorised pass destroys nothing")

	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "broken", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		rep, _ := r.p.LastReconcile()
		return rep.Authorized && len(rep.Reasons) == 0
	}, eventually, time.Millisecond)
	require.Eventually(t, func() bool { return len(hw.Snapshot()) == 0 }, eventually, time.Millisecond)
}
