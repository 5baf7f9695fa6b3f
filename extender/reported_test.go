package extender_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/extender"
)

// The stale claims the extender remembers having reported are forgotten
// once the pod is realized or deleted, so the set does not grow with
// every claim ever reported; each is still reported once.
func TestReportedClaimsArePruned(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ext := start(t, client, extender.Options{Clock: clk, LockTimeout: time.Minute})
	const rounds = 12
	for i := range rounds {
		name := fmt.Sprintf("p%d", i)
		pod := create(t, client, migPod(name, "4000"))
		require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n1")), name)
		clk.SetTime(clk.Now().Add(time.Minute))
		probe := migPod("probe", "4000")
		ext.Filter(ctx, extender.Args{Pod: probe, NodeNames: names("n1")}) // reports the stale claim
		ext.Filter(ctx, extender.Args{Pod: probe, NodeNames: names("n1")}) // once
		assert.Equal(t, float64(i+1), testutil.ToFloat64(ext.Collector()), name)
		assert.Equal(t, 1, ext.ReportedClaims(), name)

		if i%2 == 0 {
			realize(t, client, name)
		}
		// Deleted in any case, to free the slots for the next round.
		require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}))
		catchUp(t, ext)
		ext.Filter(ctx, extender.Args{Pod: probe, NodeNames: names("n1")})
		assert.Zero(t, ext.ReportedClaims(), "%s: realized or deleted, forgotten", name)
	}
}

// A realized pod is forgotten too, while it keeps running.
func TestReportedClaimForgottenWhenRealized(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ext := start(t, client, extender.Options{Clock: clk, LockTimeout: time.Minute})
	pod := create(t, client, migPod("a", "4000"))
	require.NoError(t, ext.Bind(ctx, bindArgs(pod, "n1")))
	clk.SetTime(clk.Now().Add(time.Minute))
	probe := migPod("probe", "4000")
	ext.Filter(ctx, extender.Args{Pod: probe, NodeNames: names("n1")})
	require.Equal(t, 1, ext.ReportedClaims())
	realize(t, client, "a")
	catchUp(t, ext)
	ext.Filter(ctx, extender.Args{Pod: probe, NodeNames: names("n1")})
	assert.Zero(t, ext.ReportedClaims())
	_, _, held := ext.Ledger().Pod("uid-a")
	assert.True(t, held, "the running pod keeps its slots")
	assert.Equal(t, 1.0, testutil.ToFloat64(ext.Collector()))
}
