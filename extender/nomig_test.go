package extender_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/placement"
)

// A node without a MIG registration, or one listing no usable MIG GPU,
// fails a MIG pod with ErrNoMIGGPUs, not with a placement reason such as
// "no profile large enough": the pod is Pending for want of a registered
// node, not for its size.
func TestNodeWithoutMIGGPUs(t *testing.T) {
	tests := []struct {
		name string
		reg  *string // n2's registration annotation; nil: none
	}{
		{name: "no annotation"},
		{name: "empty registration", reg: ptr("[]")},
		{name: "unusable registration", reg: ptr("[{")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := cluster(t)
			if tt.reg != nil {
				n2, err := client.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
				require.NoError(t, err)
				n2.Annotations = map[string]string{capability.NodeRegisterAnnotation: *tt.reg}
				n2.ResourceVersion = bumped(n2.ResourceVersion)
				_, err = client.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{})
				require.NoError(t, err)
			}
			ext := start(t, client, extender.Options{})
			pod := create(t, client, migPod("a", "4000"))

			err := ext.Bind(ctx, bindArgs(pod, "n2"))
			require.ErrorIs(t, err, extender.ErrNoMIGGPUs)
			assert.NotErrorIs(t, err, placement.ErrNoProfile)
			assert.Empty(t, get(t, client, "a").Spec.NodeName)

			res := ext.Filter(ctx, extender.Args{Pod: pod, NodeNames: names("n1", "n2")})
			assert.Equal(t, []string{"n1"}, *res.NodeNames)
			assert.Equal(t, err.Error(), res.FailedNodes["n2"], "Filter gives the same reason as Bind")
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A node the view does not know keeps the ledger's reason.
func TestUnknownNodeReason(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, migPod("a", "4000"))
	err := ext.Bind(context.Background(), bindArgs(pod, "n3"))
	require.ErrorIs(t, err, placement.ErrUnknownNode)
	assert.NotErrorIs(t, err, extender.ErrNoMIGGPUs)
}
