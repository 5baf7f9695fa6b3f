package extender_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/extender"
)

// startGated runs an extender whose pod informer's watch events gate
// holds back (see watchGate), synced, until the test ends. The gate is
// closed when it returns.
func startGated(t *testing.T, client *fake.Clientset, gate *watchGate, opts extender.Options) *extender.Extender {
	t.Helper()
	ext := extender.New(gatedClient{client, gate}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ext.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); gate.close(); <-done; gate.pumps.Wait() })
	gate.setOpen(true)
	require.NoError(t, ext.Sync(ctx))
	gate.setOpen(false)
	return ext
}

// High availability: a new leader's extender whose informer has not
// delivered the previous leader's last bind must not hand the same node or
// slots to another pod. Bind's consistent listing of the node's pods
// counts them; with SkipFreshNodeRead the same sequence double-books,
// which is what the option costs.
func TestBindCountsAnotherReplicasUndeliveredWrites(t *testing.T) {
	tests := []struct {
		name string
		skip bool
	}{
		{name: "fresh node read"},
		{name: "skipped", skip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := cluster(t)
			previous := start(t, client, extender.Options{})
			gate := newWatchGate()
			leader := startGated(t, client, gate, extender.Options{SkipFreshNodeRead: tt.skip})

			// The previous leader annotates and binds a (the whole GPU);
			// none of it reaches the new leader's informer.
			a := create(t, client, migPod("a", ""))
			require.NoError(t, previous.Bind(ctx, bindArgs(a, "n1")))
			b := create(t, client, migPod("b", ""))
			err := leader.Bind(ctx, bindArgs(b, "n1"))
			if tt.skip {
				require.NoError(t, err, "the view has not seen a: b is double-booked")
				assert.True(t, placementOf(t, client, "a").Overlaps(placementOf(t, client, "b")))
				return
			}
			require.ErrorIs(t, err, extender.ErrNodeLocked, "a is bound and unrealized")

			// The device plugin realizes a; still undelivered.
			realize(t, client, "a")
			err = leader.Bind(ctx, bindArgs(b, "n1"))
			require.Error(t, err, "a holds the whole GPU")
			assert.NotErrorIs(t, err, extender.ErrNodeLocked)
			assert.Empty(t, get(t, client, "b").Spec.NodeName)
			_, _, held := leader.Ledger().Pod("uid-a")
			assert.True(t, held)

			// The informer's late events of a change nothing.
			gate.setOpen(true)
			catchUp(t, leader)
			gate.setOpen(false)
			_, _, held = leader.Ledger().Pod("uid-a")
			assert.True(t, held)
			assert.Empty(t, leader.Ledger().Conflicts())
		})
	}
}
