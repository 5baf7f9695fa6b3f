package kubetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/kube/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pod(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv}}
}

func TestMergePatch(t *testing.T) {
	tests := []struct {
		name     string
		patch    string
		conflict bool
		wantRV   string
		wantAnn  string
	}{
		{name: "no precondition", patch: `{"metadata":{"annotations":{"k":"v"}}}`, wantRV: "8", wantAnn: "v"},
		{name: "current version", patch: `{"metadata":{"resourceVersion":"7","annotations":{"k":"v"}}}`, wantRV: "8", wantAnn: "v"},
		{name: "stale version", patch: `{"metadata":{"resourceVersion":"6","annotations":{"k":"v"}}}`, conflict: true, wantRV: "7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := kubetest.NewClientset(pod("7"))
			out, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, []byte(tt.patch), metav1.PatchOptions{})
			if tt.conflict {
				assert.True(t, apierrors.IsConflict(err), "got %v, want a conflict", err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.wantRV, out.ResourceVersion)
			}
			got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tt.wantRV, got.ResourceVersion)
			assert.Equal(t, tt.wantAnn, got.Annotations["k"])
		})
	}
}

func TestMergePatchMissingPod(t *testing.T) {
	c := kubetest.NewClientset()
	_, err := c.CoreV1().Pods("ns").Patch(context.Background(), "p", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

func TestMergePatchMalformed(t *testing.T) {
	c := kubetest.NewClientset(pod("1"))
	_, err := c.CoreV1().Pods("ns").Patch(context.Background(), "p", types.MergePatchType, []byte(`{`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsBadRequest(err), "got %v", err)
}

func TestBinding(t *testing.T) {
	ctx := context.Background()
	c := kubetest.NewClientset(pod("3"))
	bind := func(node string) error {
		return c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
	}
	require.NoError(t, bind("n1"))
	got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", got.Spec.NodeName)
	assert.Equal(t, "4", got.ResourceVersion)

	err = bind("n2")
	assert.True(t, apierrors.IsConflict(err), "binding a bound pod: got %v, want a conflict", err)
	got, err = c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", got.Spec.NodeName)

	err = c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone"}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

// A patch computed from a stale copy of a pod fails instead of overwriting
// what another writer stored meanwhile.
func ExampleNewClientset() {
	ctx := context.Background()
	c := kubetest.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: "1"}})
	first := []byte(`{"metadata":{"resourceVersion":"1","annotations":{"owner":"a"}}}`)
	second := []byte(`{"metadata":{"resourceVersion":"1","annotations":{"owner":"b"}}}`)
	out, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, first, metav1.PatchOptions{})
	fmt.Println(out.Annotations["owner"], out.ResourceVersion, err)
	_, err = c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, second, metav1.PatchOptions{})
	fmt.Println(apierrors.IsConflict(err))
	// Output:
	// a 2 <nil>
	// true
}
