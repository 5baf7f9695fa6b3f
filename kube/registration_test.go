package kube_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
)

// discovered returns the capability of a fake node's GPUs.
func discovered(t *testing.T, opts fakehal.Options) []capability.GPU {
	t.Helper()
	hw := fakehal.MustNew(opts)
	gpus, _, err := capability.Discover(context.Background(), hw, capability.DefaultAllowlist())
	require.NoError(t, err)
	return gpus
}

func nodePatches(client *fake.Clientset) *int {
	n := 0
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		n++
		return false, nil, nil
	})
	return &n
}

func TestRegistrationPublisher(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(node("n1", nil))
	sent := nodePatches(client)
	pub := kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{})
	gpus := discovered(t, fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})

	changed, err := pub.PublishGPUs(ctx, gpus)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 1, *sent)

	n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	got, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i := range gpus {
		assert.Equal(t, gpus[i].UUID, got[i].UUID)
		require.Len(t, got[i].Profiles, len(gpus[i].Profiles))
		for j := range gpus[i].Profiles {
			assert.Equal(t, gpus[i].Profiles[j].Name, got[i].Profiles[j].Name)
			assert.Equal(t, gpus[i].Profiles[j].Placements, got[i].Profiles[j].Placements)
		}
	}

	changed, err = pub.PublishGPUs(ctx, gpus)
	require.NoError(t, err)
	assert.False(t, changed, "an unchanged value is not patched again")
	assert.Equal(t, 1, *sent)

	changed, err = pub.PublishGPUs(ctx, gpus[:1])
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 2, *sent)
}

func TestRegistrationPublisherErrors(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(node("n1", nil))
	sent := nodePatches(client)
	pub := kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{})

	_, err := pub.Publish(ctx, []capability.NodeDevice{{ID: "", Mode: "mig"}})
	var re *capability.RegistrationError
	require.ErrorAs(t, err, &re, "invalid devices are refused before any API call")
	assert.Zero(t, *sent)

	gpus := discovered(t, fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpus[1].MIGMode = capability.MIGDisabled
	devs, skipped := kube.MIGNodeDevices(gpus)
	assert.Len(t, devs, 1)
	require.Len(t, skipped, 1, "the GPU left out is reported")
	var re2 *capability.RegistrationError
	assert.ErrorAs(t, skipped[0], &re2)
	changed, err := pub.PublishGPUs(ctx, gpus)
	require.NoError(t, err, "a GPU without MIG does not fail the others")
	assert.True(t, changed, "the others are published")
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	got, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	assert.Len(t, got, 1)

	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(assert.AnError)
	})
	_, err = pub.PublishGPUs(ctx, gpus[:1])
	assert.True(t, apierrors.IsInternalError(err))
}

func TestNodeGPUs(t *testing.T) {
	none, err := kube.NodeGPUs(node("n1", nil))
	require.NoError(t, err)
	assert.Empty(t, none)

	bad := node("n1", nil)
	bad.Annotations = map[string]string{capability.NodeRegisterAnnotation: `[{"id":1}]`}
	_, err = kube.NodeGPUs(bad)
	var re *capability.RegistrationError
	assert.ErrorAs(t, err, &re)

	mixed := node("n1", nil)
	mixed.Annotations = map[string]string{capability.NodeRegisterAnnotation: `[{"id":"GPU-x","count":10,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true}]`}
	got, err := kube.NodeGPUs(mixed)
	require.NoError(t, err)
	assert.Empty(t, got, "only MIG-mode devices are MIG capability")
}

func TestRegistrationPublisherPatchFails(t *testing.T) {
	client := fake.NewClientset(node("n1", nil))
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", assert.AnError)
	})
	gpus := discovered(t, fakehal.Options{})
	changed, err := kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(context.Background(), gpus)
	assert.True(t, apierrors.IsForbidden(err), "got %v", err)
	assert.False(t, changed)
}
