package realize_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// Many pods on a few GPUs allocate at once, twice each, while reconcile
// passes run: every pod gets its own instance at its placement, and the
// hardware stays consistent.
func TestConcurrentAllocateAndReconcile(t *testing.T) {
	const gpus, perGPU = 4, 7
	f := newFixture(t, gpus)
	for g := range gpus {
		for s := range perGPU {
			f.schedule(fmt.Sprintf("g%d-s%d", g, s), ent(0, 0, f.gpuUUID(g), "1g.5gb", uint32(s), 1))
		}
	}
	snap := f.snapshot()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := f.m.Reconcile(ctx, snap); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	})
	results := make([][]string, len(snap.Pods))
	var allocs sync.WaitGroup
	for i, p := range snap.Pods {
		allocs.Go(func() {
			for range 2 {
				res, err := f.m.Allocate(context.Background(), realize.AllocateRequest{Pod: p, Snapshot: snap})
				if err != nil {
					t.Errorf("Allocate(%s): %v", p.UID, err)
					return
				}
				results[i] = append(results[i], res.Devices[0].Runtime.MIGUUID)
			}
		})
	}
	allocs.Wait()
	cancel()
	wg.Wait()

	seen := map[string]string{}
	for i, r := range results {
		uid := snap.Pods[i].UID
		if len(r) != 2 || r[0] != r[1] {
			t.Errorf("pod %s got %v, want the same MIG UUID twice", uid, r)
			continue
		}
		if other, dup := seen[r[0]]; dup {
			t.Errorf("pods %s and %s share %s", uid, other, r[0])
		}
		seen[r[0]] = uid
	}
	if got := len(f.node.Snapshot()); got != gpus*perGPU {
		t.Errorf("live = %d, want %d", got, gpus*perGPU)
	}
	f.checkHardware()

	// Everything ends: one pass releases it all.
	for _, p := range f.pods {
		p.Phase = reservation.PodSucceeded
	}
	if rep, err := f.m.Reconcile(context.Background(), f.snapshot()); err != nil || len(rep.Released) != gpus*perGPU {
		t.Fatalf("final reconcile = %v, %v", rep, err)
	}
}
