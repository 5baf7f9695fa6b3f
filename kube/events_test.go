package kube_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/kube"
)

// TestEvents: an Event names its object by a full reference, is written
// only while started, and repeats fold into one object.
func TestEvents(t *testing.T) {
	client := fake.NewClientset()
	ev := kube.NewEvents(client, "dynmig-test")
	node := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}
	ev.Eventf(node, nil, corev1.EventTypeNormal, "Before", "Test", "dropped: not started")

	ctx, cancel := context.WithCancel(context.Background())
	wait := ev.Start(ctx)
	ev.Eventf(node, nil, corev1.EventTypeWarning, "GPUUnhealthy", "Test", "gpu %d", 1)
	var items []eventsv1.Event
	require.Eventually(t, func() bool {
		list, err := client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		items = list.Items
		return len(items) > 0
	}, testwait.Bound(), time.Millisecond)
	require.Len(t, items, 1)
	e := items[0]
	assert.Equal(t, "GPUUnhealthy", e.Reason)
	assert.Equal(t, "gpu 1", e.Note)
	assert.Equal(t, "Test", e.Action)
	assert.Equal(t, "dynmig-test", e.ReportingController)
	assert.Equal(t, *node, e.Regarding)

	cancel()
	wait()
	ev.Eventf(node, nil, corev1.EventTypeNormal, "After", "Test", "dropped: stopped")
	list, err := client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 1)
}
