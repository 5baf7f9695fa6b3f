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

// Many claims are prepared at once, each by two overlapping calls (kubelet
// retrying), while maintenance passes run; then all are unprepared at
// once: every claim gets its own instances, both calls return the same
// ones, and nothing is left.
func TestConcurrentPrepareAndUnprepare(t *testing.T) {
	const gpus, perGPU = 3, 7
	f := newFixture(t, gpus)
	var c claims
	for g := range gpus {
		for s := range perGPU {
			c.claim(fmt.Sprintf("g%d-s%d", g, s), ent(0, 0, f.gpuUUID(g), "1g.5gb", uint32(s), 1))
		}
	}
	d := c.demand()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := f.m.MaintainDemand(ctx, d); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	})
	results := make([][]string, len(d.Holders))
	var mu sync.Mutex
	var calls sync.WaitGroup
	for i, h := range d.Holders {
		for range 2 {
			calls.Go(func() {
				devs, err := f.m.Prepare(context.Background(), d, h.UID)
				if err != nil {
					t.Errorf("Prepare(%s): %v", h.UID, err)
					return
				}
				mu.Lock()
				results[i] = append(results[i], devs[0].Runtime.MIGUUID)
				mu.Unlock()
			})
		}
	}
	calls.Wait()
	cancel()
	wg.Wait()
	seen := map[string]string{}
	for i, r := range results {
		uid := d.Holders[i].UID
		if len(r) != 2 || r[0] != r[1] {
			t.Errorf("claim %s got %v, want the same MIG UUID twice", uid, r)
			continue
		}
		if other, dup := seen[r[0]]; dup {
			t.Errorf("claims %s and %s share %s", uid, other, r[0])
		}
		seen[r[0]] = uid
	}
	f.checkHardware()

	for _, h := range d.Holders {
		calls.Go(func() {
			if _, err := f.m.Unprepare(context.Background(), d, h.UID); err != nil {
				t.Errorf("Unprepare(%s): %v", h.UID, err)
			}
		})
	}
	calls.Wait()
	if live := f.live(); len(live) != 0 {
		t.Errorf("live after Unprepare = %v, want none", live)
	}
}
