package deviceplugin_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
)

// registeredProfiles returns the profile names n1's registration
// publishes for its first GPU.
func registeredProfiles(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	gpus, err := kube.NodeGPUs(n)
	require.NoError(t, err)
	require.NotEmpty(t, gpus)
	var out []string
	for _, p := range gpus[0].Profiles {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// TestSetAllowlist: a new policy is published in the node registration and
// the kubelet gets the device list again; an invalid one changes nothing.
func TestSetAllowlist(t *testing.T) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	cfg := func(c *deviceplugin.Config) {
		c.Allowlist = capability.Allowlist{{Models: []string{"A100-SXM4-40GB"}, Profiles: []string{"3g.20gb"}}}
	}
	r := start(t, client, hw, cfg)
	assert.Equal(t, []string{"3g.20gb"}, registeredProfiles(t, client))
	stream, err := r.client.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)

	wider := capability.Allowlist{{Models: []string{"A100-SXM4-40GB"}, Profiles: []string{"1g.5gb", "3g.20gb"}}}
	require.NoError(t, r.p.SetAllowlist(ctx, wider))
	assert.Equal(t, []string{"1g.5gb", "3g.20gb"}, registeredProfiles(t, client))
	again, err := stream.Recv()
	require.NoError(t, err)
	assert.Greater(t, len(again.Devices), len(first.Devices), "1g.5gb fits more instances per GPU than 3g.20gb")

	bad := capability.Allowlist{{Models: []string{"A100-SXM4-40GB"}, Profiles: []string{"big"}}}
	require.ErrorIs(t, r.p.SetAllowlist(ctx, bad), capability.ErrConfig)
	assert.Equal(t, []string{"1g.5gb", "3g.20gb"}, registeredProfiles(t, client), "the last good policy stays")
}

func TestSetAllowlistBeforeReady(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: fake.NewClientset(), Hardware: hw, SocketDir: t.TempDir()})
	require.NoError(t, err)
	defer p.Close()
	require.ErrorIs(t, p.SetAllowlist(context.Background(), capability.DefaultAllowlist()), deviceplugin.ErrNotRunning)
}
