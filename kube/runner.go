package kube

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/reservation"
)

// Reconciler converges a node's MIG instances to a snapshot of its pods.
// realize.Manager is the intended implementation; adapt its method with
// [ReconcilerFunc] when its signature differs. Reconcile must itself refuse
// destructive work on an incomplete snapshot.
type Reconciler interface {
	Reconcile(ctx context.Context, snap reservation.Snapshot) error
}

// ReconcilerFunc adapts a function to [Reconciler].
type ReconcilerFunc func(ctx context.Context, snap reservation.Snapshot) error

// Reconcile calls f.
func (f ReconcilerFunc) Reconcile(ctx context.Context, snap reservation.Snapshot) error {
	return f(ctx, snap)
}

// SnapshotSource provides pod snapshots; [*NodePodSource] implements it.
type SnapshotSource interface {
	Snapshot() reservation.Snapshot
}

// DefaultReconcileInterval is the runner's period when none is set.
const DefaultReconcileInterval = 30 * time.Second

// DefaultReconcileJitter is the runner's jitter when none is set.
const DefaultReconcileJitter = 0.1

// ReconcileRunnerOptions configures a [ReconcileRunner]. The zero value
// works.
type ReconcileRunnerOptions struct {
	// Interval is the base period between passes; 0 means
	// [DefaultReconcileInterval].
	Interval time.Duration
	// Jitter is the largest fraction of Interval added at random to each
	// wait, so that the device plugins of many nodes do not list in
	// lock step. 0 means [DefaultReconcileJitter]; a negative value
	// disables jitter; values above 1 are treated as 1.
	Jitter float64
	// Clock provides timers; nil means the real clock. Tests pass
	// k8s.io/utils/clock/testing.FakeClock.
	Clock clock.Clock
	// Logger receives failed passes; nil discards.
	Logger *slog.Logger
}

// ReconcileRunner calls a [Reconciler] with fresh snapshots: once when it
// starts, every Interval (plus jitter), and soon after each
// [ReconcileRunner.Trigger], such as a pod deletion event. Passes never
// overlap; triggers that arrive during a pass coalesce into one more pass.
//
// Goroutines: [ReconcileRunner.Run] runs every pass on the calling
// goroutine and returns when its ctx is done; Trigger never blocks. A
// failed pass is logged and retried at the next tick; the Reconciler
// decides what an incomplete snapshot allows.
type ReconcileRunner struct {
	src     SnapshotSource
	rec     Reconciler
	every   time.Duration
	jitter  float64
	clock   clock.Clock
	log     *slog.Logger
	trigger chan struct{}
	passes  atomic.Uint64
	failed  atomic.Uint64
}

// NewReconcileRunner returns a runner that reconciles rec against src.
func NewReconcileRunner(src SnapshotSource, rec Reconciler, opts ReconcileRunnerOptions) *ReconcileRunner {
	r := &ReconcileRunner{
		src:     src,
		rec:     rec,
		every:   opts.Interval,
		jitter:  opts.Jitter,
		clock:   opts.Clock,
		log:     opts.Logger,
		trigger: make(chan struct{}, 1),
	}
	if r.every <= 0 {
		r.every = DefaultReconcileInterval
	}
	switch {
	case r.jitter == 0:
		r.jitter = DefaultReconcileJitter
	case r.jitter < 0:
		r.jitter = 0
	case r.jitter > 1:
		r.jitter = 1
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// Trigger asks for a pass as soon as the current one, if any, finishes.
// It never blocks; it may be called before Run and from any goroutine.
func (r *ReconcileRunner) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default: // a pass is already pending
	}
}

// PodInactive triggers a pass; its signature fits
// [NodePodSourceOptions.OnInactive].
func (r *ReconcileRunner) PodInactive(reservation.Pod) { r.Trigger() }

// Passes returns how many passes have completed, and how many of those
// returned an error.
func (r *ReconcileRunner) Passes() (total, failed uint64) {
	return r.passes.Load(), r.failed.Load()
}

// RunOnce takes a snapshot and reconciles it once, on the calling
// goroutine.
func (r *ReconcileRunner) RunOnce(ctx context.Context) error {
	snap := r.src.Snapshot()
	err := r.rec.Reconcile(ctx, snap)
	if err != nil && ctx.Err() == nil {
		r.failed.Add(1)
		r.log.Warn("reconcile pass failed", "pods", len(snap.Pods), "complete", snap.Complete, "err", err)
	}
	r.passes.Add(1)
	return err
}

// Run reconciles until ctx is done and returns ctx's error. Call it from
// one goroutine only.
func (r *ReconcileRunner) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		_ = r.RunOnce(ctx)
		t := r.clock.NewTimer(r.wait())
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-r.trigger:
		}
		t.Stop()
	}
	return ctx.Err()
}

// wait returns Interval plus a random share of at most Jitter*Interval.
func (r *ReconcileRunner) wait() time.Duration {
	if r.jitter == 0 {
		return r.every
	}
	return r.every + time.Duration(rand.Float64()*r.jitter*float64(r.every))
}

// MaxWait is the longest a runner with these options waits between
// passes, Interval plus the full jitter. Tests step a fake clock by it.
func (o ReconcileRunnerOptions) MaxWait() time.Duration {
	r := NewReconcileRunner(nil, nil, o)
	return r.every + time.Duration(r.jitter*float64(r.every))
}
