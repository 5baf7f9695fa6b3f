package kube_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

func TestHealthEventFor(t *testing.T) {
	whole := func(healthy bool, cause realize.HealthCause) realize.HealthEvent {
		return realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: healthy, Cause: cause}
	}
	mig := realize.HealthEvent{GPU: 1, GI: 3, CI: 0, Cause: realize.CauseXid, Xid: 94}
	migOK := mig
	migOK.Healthy, migOK.Cause = true, realize.CauseRecovered
	for _, tc := range []struct {
		name   string
		ev     realize.HealthEvent
		reason string
		kind   string
	}{
		{"lost GPU", whole(false, realize.CauseUnavailable), kube.ReasonGPUUnhealthy, corev1.EventTypeWarning},
		{"recovered GPU", whole(true, realize.CauseRecovered), kube.ReasonGPUHealthy, corev1.EventTypeNormal},
		{"failed MIG device", mig, kube.ReasonMIGDeviceUnhealthy, corev1.EventTypeWarning},
		{"recovered MIG device", migOK, kube.ReasonMIGDeviceHealthy, corev1.EventTypeNormal},
		{"unmonitored", whole(false, realize.CauseUnmonitored), kube.ReasonGPUUnmonitored, corev1.EventTypeWarning},
		{"monitored again", whole(true, realize.CauseMonitored), kube.ReasonGPUMonitored, corev1.EventTypeNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, reason, note := kube.HealthEventFor(tc.ev, "GPU-1", "so what")
			assert.Equal(t, tc.reason, reason)
			assert.Equal(t, tc.kind, kind)
			assert.Equal(t, tc.ev.String()+" GPU-1: so what", note)
			_, _, bare := kube.HealthEventFor(tc.ev, "", "")
			assert.Equal(t, tc.ev.String(), bare)
		})
	}
}

// The node's UID is read once; while the read fails the reference has
// none and the next call tries again.
func TestNodeReference(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}})
	gets, fail := 0, true
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if fail {
			return true, nil, errors.New("apiserver down")
		}
		return false, nil, nil
	})
	ref := kube.NewNodeReference(client, "n1", nil)
	got := ref.Get(context.Background())
	assert.Equal(t, &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "n1"}, got)
	fail = false
	assert.Equal(t, "uid-n1", string(ref.Get(context.Background()).UID))
	assert.Equal(t, "uid-n1", string(ref.Get(context.Background()).UID))
	assert.Equal(t, 2, gets, "read again after the failure, then kept")
}
