package realize_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// BenchmarkAllocateEightGPUs realizes 8 pods on 8 different GPUs with
// 100 ms of injected GI-create latency, once one after another (the
// baseline: what a node-wide mutex would cost) and once concurrently, in
// the same iteration. Per-GPU locks must let the concurrent run finish in
// under 2x one create's latency. Reported metrics:
//
//	parallel-x-create    concurrent wall time / create latency (target < 2)
//	sequential-x-create  one-after-another wall time / create latency (~8)
//	parallel/sequential  the ratio of the two
//
// Run: go test -run '^$' -bench AllocateEightGPUs -benchtime 5x ./realize/
func BenchmarkAllocateEightGPUs(b *testing.B) {
	const gpus = 8
	const latency = 100 * time.Millisecond
	var seq, par time.Duration
	for b.Loop() {
		seq += allocateEight(b, gpus, latency, false)
		par += allocateEight(b, gpus, latency, true)
	}
	n := float64(b.N)
	b.ReportMetric(float64(par)/n/float64(latency), "parallel-x-create")
	b.ReportMetric(float64(seq)/n/float64(latency), "sequential-x-create")
	b.ReportMetric(float64(par)/float64(seq), "parallel/sequential")
}

// allocateEight builds a fresh node and manager, and times the Allocate of
// one 7g.40gb pod per GPU.
func allocateEight(b *testing.B, gpus int, latency time.Duration, concurrent bool) time.Duration {
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(gpus, fakehal.DefaultModel)})
	node.AddLatency(fakehal.OpCreateGI, latency)
	m := realize.NewManager(node, realize.Options{})
	snap := reservation.Snapshot{Complete: true}
	for i := range gpus {
		d, _ := node.Device(i)
		snap.Pods = append(snap.Pods, reservation.Pod{UID: fmt.Sprint("pod-", i), Phase: reservation.PodRunning,
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString(
				[]reservation.Allocation{ent(0, 0, d.UUID, "7g.40gb", 0, 8)})}})
	}
	ctx := context.Background()
	allocate := func(i int) {
		if _, err := m.Allocate(ctx, realize.AllocateRequest{Pod: snap.Pods[i], Snapshot: snap}); err != nil {
			b.Error(err)
		}
	}
	start := time.Now()
	if concurrent {
		var wg sync.WaitGroup
		for i := range gpus {
			wg.Go(func() { allocate(i) })
		}
		wg.Wait()
	} else {
		for i := range gpus {
			allocate(i)
		}
	}
	took := time.Since(start)
	if got := len(node.Snapshot()); got != gpus {
		b.Fatalf("live instances = %d, want %d", got, gpus)
	}
	return took
}
