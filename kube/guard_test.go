package kube_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/kube"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func podOn(ns, name, nodeName string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestOwnershipGuard(t *testing.T) {
	succeeded := podOn("gpu-operator", "nvidia-mig-manager-old", "n1", nil)
	succeeded.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name     string
		objects  []runtime.Object
		override bool
		wantErr  error // nil, ErrMIGManagerOwnsNode or ErrOwnershipUnknown
		evidence []string
	}{
		{
			name:    "clean node",
			objects: []runtime.Object{node("n1", map[string]string{"nvidia.com/gpu.present": "true"})},
		},
		{
			name:     "mig.config label",
			objects:  []runtime.Object{node("n1", map[string]string{kube.MIGConfigLabel: "all-1g.5gb"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{`label nvidia.com/mig.config="all-1g.5gb"`},
		},
		{
			name:     "all-disabled still owned",
			objects:  []runtime.Object{node("n1", map[string]string{kube.MIGConfigLabel: "all-disabled", kube.MIGConfigStateLabel: "success"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{`label nvidia.com/mig.config="all-disabled"`},
		},
		{
			name:     "state pending without config",
			objects:  []runtime.Object{node("n1", map[string]string{kube.MIGConfigStateLabel: "pending"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{`label nvidia.com/mig.config.state="pending"`},
		},
		{
			name:    "stale success state alone is not ownership",
			objects: []runtime.Object{node("n1", map[string]string{kube.MIGConfigStateLabel: "success"})},
		},
		{
			name:     "operator deploys mig manager",
			objects:  []runtime.Object{node("n1", map[string]string{kube.MIGManagerDeployLabel: "true"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{`label nvidia.com/gpu.deploy.mig-manager="true"`},
		},
		{
			name: "pod with the recommended name label",
			objects: []runtime.Object{node("n1", nil),
				podOn("gpu-operator", "mig-reconciler-x1", "n1", map[string]string{"app.kubernetes.io/name": "nvidia-mig-manager"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{"pod gpu-operator/mig-reconciler-x1"},
		},
		{
			name:    "operator told not to deploy",
			objects: []runtime.Object{node("n1", map[string]string{kube.MIGManagerDeployLabel: "false"})},
		},
		{
			name: "mig manager pod by label",
			objects: []runtime.Object{node("n1", nil),
				podOn("gpu-operator", "mm-abc", "n1", map[string]string{"app": "nvidia-mig-manager"})},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{"pod gpu-operator/mm-abc"},
		},
		{
			name: "mig manager pod by name prefix",
			objects: []runtime.Object{node("n1", nil),
				podOn("gpu-operator", "nvidia-mig-manager-x2k4q", "n1", nil)},
			wantErr:  kube.ErrMIGManagerOwnsNode,
			evidence: []string{"pod gpu-operator/nvidia-mig-manager-x2k4q"},
		},
		{
			name: "mig manager pod on another node",
			objects: []runtime.Object{node("n1", nil),
				podOn("gpu-operator", "nvidia-mig-manager-x2k4q", "n2", nil)},
		},
		{
			name:    "finished mig manager pod",
			objects: []runtime.Object{node("n1", nil), succeeded},
		},
		{
			name:    "missing node is unknown",
			objects: nil,
			wantErr: kube.ErrOwnershipUnknown,
		},
		{
			name:     "override",
			objects:  []runtime.Object{node("n1", map[string]string{kube.MIGConfigLabel: "all-1g.5gb"})},
			override: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			g := kube.NewOwnershipGuard(client, "n1", kube.OwnershipGuardOptions{Override: tt.override})
			err := g.Check(context.Background())
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			var oe *kube.OwnershipError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "n1", oe.Node)
			assert.NotEmpty(t, oe.Remedy, "the error must say what to change")
			if tt.evidence != nil {
				assert.Equal(t, tt.evidence, oe.Evidence)
			}
		})
	}
}

func TestOwnershipGuardListErrorFailsClosed(t *testing.T) {
	client := fake.NewClientset(node("n1", nil))
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
	})
	err := kube.NewOwnershipGuard(client, "n1", kube.OwnershipGuardOptions{}).Check(context.Background())
	require.ErrorIs(t, err, kube.ErrOwnershipUnknown)
	assert.True(t, apierrors.IsServiceUnavailable(err), "the API error is wrapped: %v", err)
	assert.False(t, errors.Is(err, kube.ErrMIGManagerOwnsNode))

	client = fake.NewClientset()
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("rbac"))
	})
	err = kube.NewOwnershipGuard(client, "n1", kube.OwnershipGuardOptions{}).Check(context.Background())
	require.ErrorIs(t, err, kube.ErrOwnershipUnknown)
	assert.True(t, apierrors.IsForbidden(err))
}
