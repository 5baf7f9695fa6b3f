package kube_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// staticSource returns a fixed snapshot.
type staticSource reservation.Snapshot

func (s staticSource) Snapshot() reservation.Snapshot { return reservation.Snapshot(s) }

// recordingReconciler reports each pass on a channel.
type recordingReconciler struct {
	passes chan reservation.Snapshot
	gate   chan struct{} // when set, each pass waits for a value after reporting
	err    error
}

func (r *recordingReconciler) Reconcile(ctx context.Context, snap reservation.Snapshot) error {
	r.passes <- snap
	if r.gate != nil {
		<-r.gate
	}
	return r.err
}

// waitPass waits for the next pass; the long timeout only bounds a hung test.
func waitPass(t *testing.T, passes <-chan reservation.Snapshot) reservation.Snapshot {
	t.Helper()
	select {
	case s := <-passes:
		return s
	case <-time.After(eventually):
		t.Fatal("no reconcile pass")
		return reservation.Snapshot{}
	}
}

func assertNoPass(t *testing.T, passes <-chan reservation.Snapshot) {
	t.Helper()
	select {
	case <-passes:
		t.Fatal("unexpected reconcile pass")
	default:
	}
}

// waitTimer waits until the runner blocks on its timer.
func waitTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	require.Eventually(t, clk.HasWaiters, eventually, time.Millisecond)
}

func TestReconcileRunnerTicksAndTriggers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	rec := &recordingReconciler{passes: make(chan reservation.Snapshot), err: errors.New("transient")}
	src := staticSource{Complete: true, Pods: []reservation.Pod{{Name: "p"}}}
	opts := kube.ReconcileRunnerOptions{Interval: time.Minute, Jitter: 0.5, Clock: clk}
	r := kube.NewReconcileRunner(src, rec, opts)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = r.Run(ctx) }()

	got := waitPass(t, rec.passes) // the initial pass
	assert.Equal(t, reservation.Snapshot(src), got)

	waitTimer(t, clk)
	clk.Step(time.Minute - time.Nanosecond) // before the earliest tick
	assertNoPass(t, rec.passes)
	clk.Step(opts.MaxWait()) // past the latest tick
	waitPass(t, rec.passes)

	waitTimer(t, clk)
	r.Trigger()
	waitPass(t, rec.passes)
	waitTimer(t, clk)
	assertNoPass(t, rec.passes)

	r.PodInactive(reservation.Pod{Name: "gone"})
	waitPass(t, rec.passes)
	waitTimer(t, clk)

	cancel()
	wg.Wait()
	assert.ErrorIs(t, runErr, context.Canceled)
	total, failed := r.Passes()
	assert.Equal(t, uint64(4), total)
	assert.Equal(t, uint64(4), failed, "every pass returned the reconciler's error")
}

func TestReconcileRunnerCoalescesTriggersDuringAPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	rec := &recordingReconciler{passes: make(chan reservation.Snapshot), gate: make(chan struct{})}
	r := kube.NewReconcileRunner(staticSource{}, rec, kube.ReconcileRunnerOptions{Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()

	waitPass(t, rec.passes) // the initial pass is now running
	r.Trigger()
	r.Trigger()
	r.Trigger()
	rec.gate <- struct{}{}
	waitPass(t, rec.passes) // one pass for the three triggers
	rec.gate <- struct{}{}
	waitTimer(t, clk)
	assertNoPass(t, rec.passes)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	total, failed := r.Passes()
	assert.Equal(t, uint64(2), total)
	assert.Zero(t, failed)
}

func TestReconcileRunnerTriggerBeforeRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	rec := &recordingReconciler{passes: make(chan reservation.Snapshot, 4)}
	r := kube.NewReconcileRunner(staticSource{}, rec, kube.ReconcileRunnerOptions{Clock: clk, Jitter: -1})
	r.Trigger()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	waitPass(t, rec.passes) // initial
	waitPass(t, rec.passes) // the early trigger
	waitTimer(t, clk)
	clk.Step(kube.DefaultReconcileInterval) // no jitter: exactly one interval
	waitPass(t, rec.passes)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestReconcileRunnerMaxWait(t *testing.T) {
	tests := []struct {
		name string
		opts kube.ReconcileRunnerOptions
		want time.Duration
	}{
		{name: "defaults", opts: kube.ReconcileRunnerOptions{}, want: 33 * time.Second},
		{name: "no jitter", opts: kube.ReconcileRunnerOptions{Interval: time.Second, Jitter: -1}, want: time.Second},
		{name: "clamped jitter", opts: kube.ReconcileRunnerOptions{Interval: time.Second, Jitter: 7}, want: 2 * time.Second},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.opts.MaxWait(), tt.name)
	}
}
