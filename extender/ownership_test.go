package extender_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// forged is a record the pod's owner writes: a placement the extender did
// not choose.
const forged = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-4000-8000-000000000000","profile":"1g.5gb","placement":{"start":6,"size":1}}]`

// The owner replaces the record (or adds one) between the extender's read
// of the pod and its binding. The binding carries the record and is
// conditioned on the version read, so it fails and nothing reaches the
// node; the retried Bind binds with the extender's record, which replaces
// the forged one in the same write. A pod that arrives bound therefore
// always carries the binder's record.
func TestOwnerSwapsRecordDuringBind(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		// wantRetry is the retried Bind's error (nil: it binds).
		wantRetry error
	}{
		{name: "MIG pod", pod: migPod("a", "9000")},
		{name: "pod asking for no device", pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: types.UID("uid-a")},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		}, wantRetry: extender.ErrForeignRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := cluster(t)
			pod := create(t, client, tt.pod)
			swapped := false
			ext := start(t, hookedClient{client, func(string) {
				if !swapped {
					swapped = true
					patchPod(t, client, "a", `{"metadata":{"annotations":{"`+reservation.AnnotationKey+`":`+strconv.Quote(forged)+`}}}`)
				}
			}}, extender.Options{})

			err := ext.Bind(ctx, bindArgs(pod, "n1"))
			require.Error(t, err)
			assert.True(t, apierrors.IsConflict(err), "the binding is refused on the changed pod: %v", err)
			after := get(t, client, "a")
			assert.Empty(t, after.Spec.NodeName, "the pod with the forged record is not bound")
			_, _, held := ext.Ledger().Pod("uid-a")
			assert.False(t, held)

			err = ext.Bind(ctx, bindArgs(pod, "n1"))
			if tt.wantRetry != nil {
				require.ErrorIs(t, err, tt.wantRetry)
				assert.Empty(t, get(t, client, "a").Spec.NodeName)
				return
			}
			require.NoError(t, err)
			after = get(t, client, "a")
			assert.Equal(t, "n1", after.Spec.NodeName)
			assert.NotEqual(t, forged, after.Annotations[reservation.AnnotationKey], "the binding replaced the forged record")
			allocs, err := kube.PodAllocations(after)
			require.NoError(t, err)
			require.Len(t, allocs, 1)
			rs, _, held := ext.Ledger().Pod("uid-a")
			require.True(t, held)
			assert.Equal(t, rs[0].Placement, allocs[0].Placement, "the pod carries the placement the ledger holds")
		})
	}
}

// A pod that requests nvidia.com/gpu without opting in to MIG is never
// bound to a node whose device plugin serves that resource as MIG devices:
// Filter fails such nodes for good with a reason saying so, and Bind
// refuses them with ErrNotOptedIn. Nodes without dynmig's registration
// still take it, with the binding conditioned on the version read.
func TestGPUPodWithoutOptIn(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: types.UID("uid-a")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}},
	})

	res := ext.Filter(ctx, extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
	assert.Equal(t, []string{"n2"}, *res.NodeNames)
	assert.Contains(t, res.FailedAndUnresolvableNodes, "n1")

	err := ext.Bind(ctx, bindArgs(pod, "n1"))
	require.ErrorIs(t, err, extender.ErrNotOptedIn)
	assert.Equal(t, err.Error(), res.FailedAndUnresolvableNodes["n1"], "Filter gives the same reason as Bind")
	assert.Empty(t, get(t, client, "a").Spec.NodeName)

	require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n2")), "n2 runs no dynmig device plugin")
	assert.Equal(t, "n2", get(t, client, "a").Spec.NodeName)
}
