package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// A pod that requests a device carries a record that does not decode:
// nothing it might own can be told from a leak, so the plugin destroys
// nothing on the node, and LastReconcile names the pod that pauses it.
func ExamplePlugin_LastReconcile() {
	hw := fakehal.MustNew(fakehal.Options{})
	broken := boundPod("broken", reservation.Allocation{})
	broken.Annotations[reservation.AnnotationKey] = `[{"containerIndex":`
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, broken)
	dir, err := os.MkdirTemp("", "plugin")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-p.Ready(): // the first maintenance pass ran before the plugin served
	case err := <-done:
		fmt.Println(err)
		return
	}

	rep, _ := p.LastReconcile()
	fmt.Println("authorised:", rep.Authorized)
	for _, reason := range rep.Reasons {
		var pe *reservation.PodError
		if errors.As(reason, &pe) {
			fmt.Println("paused by:", pe.Pod.Namespace+"/"+pe.Pod.Name)
		}
	}
	// Output:
	// authorised: false
	// paused by: default/broken
}
