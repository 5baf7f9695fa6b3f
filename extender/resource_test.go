package extender_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
)

// renamed is a device plugin resource other than nvidia.com/gpu.
const renamed corev1.ResourceName = "example.com/mig"

// renamedPod is migPod requesting one device of the renamed resource.
func renamedPod(name, gpumem string) *corev1.Pod {
	pod := migPod(name, gpumem)
	limits := pod.Spec.Containers[0].Resources.Limits
	delete(limits, kube.ResourceGPU)
	limits[renamed] = *resource.NewQuantity(1, resource.DecimalSI)
	return pod
}

// With Options.Resource renamed, requests are read and reservations
// trusted under the same name: a pod's devices are reserved, its entries
// occupy their slots once the informer shows them, and the next pod is
// not placed on them.
func TestRenamedResource(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{Resource: renamed})
	a := create(t, client, renamedPod("a", ""))
	res := ext.Filter(ctx, extender.Args{Pod: a, NodeNames: names("n1", "n2")})
	assert.Equal(t, []string{"n1"}, *res.NodeNames, "a MIG request, fitting n1 only")
	require.NoError(t, ext.Bind(ctx, bindArgs(a, "n1")))
	allocs, err := kube.PodAllocations(get(t, client, "a"))
	require.NoError(t, err)
	require.Len(t, allocs, 1, "the device of the renamed resource is reserved")

	realize(t, client, "a")
	catchUp(t, ext)
	rs, _, held := ext.Ledger().Pod("uid-a")
	require.True(t, held, "the entry passes the trust rule under the renamed resource")
	assert.Len(t, rs, 1)

	b := create(t, client, renamedPod("b", ""))
	res = ext.Filter(ctx, extender.Args{Pod: b, NodeNames: names("n1")})
	assert.Empty(t, *res.NodeNames, "a holds the whole GPU")
	require.Error(t, ext.Bind(ctx, bindArgs(b, "n1")))
	assert.Empty(t, get(t, client, "b").Spec.NodeName)
	assert.Empty(t, ext.Ledger().Conflicts())

	// nvidia.com/gpu is not this deployment's MIG resource: such a pod
	// requests no device here and passes every node.
	plain := create(t, client, migPod("c", ""))
	res = ext.Filter(ctx, extender.Args{Pod: plain, NodeNames: names("n1", "n2")})
	assert.Equal(t, []string{"n1", "n2"}, *res.NodeNames)
}
