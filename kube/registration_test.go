package kube_test

import (
	"context"
	"errors"
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
	"github.com/dynmig/dynmig/placement"
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
	devs, skipped := capability.MIGNodeDevices(gpus)
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

	const (
		a30 = `"count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[` +
			`{"name":"1g.6gb","memoryMB":5952,"core":25,"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1}]}]`
		healthy0   = `{"id":"GPU-a",` + a30 + `,"health":true}`
		unhealthy1 = `{"id":"GPU-b","index":1,` + a30 + `}` // as the deployed plugin writes an unhealthy GPU
		malformed2 = `{"id":"GPU-c","index":2,"count":"4","devcore":100,"mode":"mig","health":true}`
	)
	type gpu struct {
		uuid      string
		unhealthy bool
	}
	tests := []struct {
		name     string
		value    string
		want     []gpu
		rejected []int // entries reported in the error; nil: no error
		array    bool  // the value as a whole is refused
	}{
		{name: "unhealthy GPU without health", value: `[` + unhealthy1 + `,` + healthy0 + `]`,
			want: []gpu{{uuid: "GPU-a"}, {uuid: "GPU-b", unhealthy: true}}},
		{name: "malformed entry takes out that GPU only", value: `[` + healthy0 + `,` + malformed2 + `,` + unhealthy1 + `]`,
			want: []gpu{{uuid: "GPU-a"}, {uuid: "GPU-b", unhealthy: true}}, rejected: []int{1}},
		{name: "only a malformed entry", value: `[{"id":1}]`, rejected: []int{0}},
		{name: "only MIG-mode devices are MIG capability", value: `[{"id":"GPU-x","count":10,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true}]`},
		{name: "malformed array", value: `[` + healthy0 + `,`, array: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := node("n1", nil)
			n.Annotations = map[string]string{capability.NodeRegisterAnnotation: tc.value}
			gpus, err := kube.NodeGPUs(n)
			var got []gpu
			for _, g := range gpus {
				got = append(got, gpu{uuid: g.UUID, unhealthy: g.Unhealthy})
			}
			assert.Equal(t, tc.want, got)
			if tc.rejected == nil && !tc.array {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, capability.ErrRegistration)
			var entries []int
			for _, e := range flattenErrors(err) {
				var re *capability.RegistrationError
				if errors.As(e, &re) {
					entries = append(entries, re.Device)
				}
			}
			if tc.array {
				assert.Equal(t, []int{-1}, entries)
				assert.Nil(t, gpus)
			} else {
				assert.Equal(t, tc.rejected, entries)
			}
		})
	}
}

// flattenErrors expands errors.Join trees (and wrapping around them).
func flattenErrors(err error) []error {
	switch e := err.(type) {
	case *capability.RegistrationError:
		return []error{e}
	case interface{ Unwrap() []error }:
		var out []error
		for _, c := range e.Unwrap() {
			out = append(out, flattenErrors(c)...)
		}
		return out
	case interface{ Unwrap() error }:
		return flattenErrors(e.Unwrap())
	}
	return []error{err}
}

func TestPublishUnhealthyGPU(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(node("n1", nil))
	gpus := discovered(t, fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpus[1].Unhealthy = true
	_, err := kube.NewRegistrationPublisher(client, "n1", kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus)
	require.NoError(t, err)
	n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	require.NoError(t, err)
	reg, err := capability.ReadNodeRegistration([]byte(n.Annotations[capability.NodeRegisterAnnotation]))
	require.NoError(t, err)
	require.Len(t, reg.Devices, 2)
	assert.True(t, reg.Devices[0].Health)
	assert.False(t, reg.Devices[1].Health, "published without health, as the deployed plugin writes an unhealthy GPU")
	got, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.False(t, got[0].Unhealthy)
	assert.True(t, got[1].Unhealthy)
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

// TestSchedulerViewKeepsTheOtherGPUs: in the scheduler's view, a malformed
// registration entry takes out its GPU only, and an unhealthy GPU keeps its
// place in the ledger but gets no new pods.
func TestSchedulerViewKeepsTheOtherGPUs(t *testing.T) {
	gpus := discovered(t, fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	gpus[0].Unhealthy = true
	devs, skipped := capability.MIGNodeDevices(gpus)
	require.Empty(t, skipped)
	value, err := capability.EncodeNodeRegistration(devs)
	require.NoError(t, err)
	broken := `{"id":"GPU-broken","index":2,"count":"7","devcore":100,"mode":"mig","health":true}`
	n := node("n1", nil)
	n.Annotations = map[string]string{capability.NodeRegisterAnnotation: string(value[:len(value)-1]) + "," + broken + "]"}

	v := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{})
	v.NodeHandler().OnAdd(n, true)
	states, ok := v.Ledger().Node("n1")
	require.True(t, ok)
	require.Len(t, states, 2, "the malformed entry's GPU is left out, the other two stay")
	assert.False(t, states[0].Grid.Healthy())
	assert.True(t, states[1].Grid.Healthy())

	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1, Memory: placement.MiB(4000)}}}
	as, err := v.Ledger().Reserve("n1", "uid-new", req)
	require.NoError(t, err)
	assert.Equal(t, gpus[1].UUID, as[0].GPUUUID, "placed on the healthy GPU")
}
