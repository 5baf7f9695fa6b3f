package realize_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// Two Allocate calls for the same container run at once (kubelet retrying
// after a timeout). The first creates device 0 on GPU 0 and then fails on
// GPU 1; the second must not return device 0 as managed while the first
// call's rollback destroys it: every MIG UUID a successful call returns is
// live afterwards.
func TestConcurrentAllocateSameContainerNeverReturnsARolledBackDevice(t *testing.T) {
	f := newFixture(t, 2)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(1), "1g.5gb", 0, 1))
	// Creating on GPU 1 is slow and fails once: the second call starts
	// while the first holds device 0 and waits on GPU 1.
	f.node.Inject(fakehal.Fault{Op: fakehal.OpCreateGI, GPUs: []int{1}, Latency: 200 * time.Millisecond})
	f.node.Inject(fakehal.Fault{Op: fakehal.OpCreateGI, GPUs: []int{1}, Nth: 1, Err: realize.ErrOccupied})
	ctx := context.Background()
	req := realize.AllocateRequest{Pod: *f.pod("a"), Snapshot: f.snapshot()}

	var wg sync.WaitGroup
	results := make([]realize.AllocateResult, 2)
	errs := make([]error, 2)
	wg.Go(func() { results[0], errs[0] = f.m.Allocate(ctx, req) })
	deadline := time.Now().Add(10 * time.Second)
	for len(f.node.Snapshot()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // wait until device 0 exists
	}
	wg.Go(func() { results[1], errs[1] = f.m.Allocate(ctx, req) })
	wg.Wait()

	if errs[0] == nil {
		t.Fatalf("first Allocate succeeded; the injected fault did not fire")
	}
	if errs[1] != nil {
		t.Fatalf("second Allocate: %v, want success once the first call has rolled back", errs[1])
	}
	live := map[string]bool{}
	for _, in := range f.node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = true
		}
	}
	for _, d := range results[1].Devices {
		if !live[d.Runtime.MIGUUID] {
			t.Errorf("device %d (%s) was handed out and then destroyed", d.Entry.DeviceIndex, d.Runtime.MIGUUID)
		}
	}
	if err := f.node.Check(); err != nil {
		t.Fatal(err)
	}
}

// A concurrent Allocate for the same container waits for the first one,
// and gives up when its ctx ends, without touching anything.
func TestAllocateWaitForSameContainerHonoursContext(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	f.node.AddLatency(fakehal.OpCreateGI, 300*time.Millisecond)
	req := realize.AllocateRequest{Pod: *f.pod("a"), Snapshot: f.snapshot()}
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { _, first = f.m.Allocate(context.Background(), req) })
	deadline := time.Now().Add(10 * time.Second)
	for f.node.Calls(fakehal.OpCreateGI) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := f.m.Allocate(ctx, req)
	wg.Wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Allocate = %v, want context.DeadlineExceeded", err)
	}
	if first != nil {
		t.Fatalf("first Allocate: %v", first)
	}
	if got := f.m.Stats().Creates; got != 1 {
		t.Fatalf("creates = %d, want 1", got)
	}
}

// When the annotation patch cannot be built after an instance was created
// (another entry of the pod carries a stale identity with the GPU instance
// ID the driver just assigned), the created instance is destroyed and the
// error carries no *ReleaseError.
func TestAllocateRollsBackWhenThePatchFails(t *testing.T) {
	// Learn which GI ID the driver assigns at [1,2) on a twin node.
	twin := newFixture(t, 1)
	twin.schedule("a", ent(0, 0, twin.gpuUUID(0), "1g.5gb", 1, 1))
	giID := twin.mustAllocate("a", 0).Devices[0].Runtime.GPUInstanceID

	f := newFixture(t, 1)
	stale := ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1).WithRuntime(reservation.RuntimeIdentity{
		MIGUUID: "MIG-00000000-0000-4000-8000-000000000001", GPUInstanceID: giID, ComputeInstanceID: 0})
	f.schedule("a", stale, ent(1, 0, f.gpuUUID(0), "1g.5gb", 1, 1))
	_, err := f.allocate(context.Background(), "a", 1)
	if err == nil {
		t.Fatal("Allocate succeeded; want the patch to fail on the GI ID conflict")
	}
	if !errors.Is(err, reservation.ErrRuntimeConflict) {
		t.Errorf("error %v, want reservation.ErrRuntimeConflict", err)
	}
	var re *realize.ReleaseError
	if errors.As(err, &re) {
		t.Errorf("error carries a *ReleaseError although the rollback succeeded: %v", err)
	}
	if got := f.node.Snapshot(); len(got) != 0 {
		t.Fatalf("live instances after the failed Allocate = %v, want none", got)
	}
	if n := len(f.m.Managed()); n != 0 {
		t.Fatalf("managed = %d, want 0", n)
	}
}

// A realized reservation on a GPU the node does not have (it fell off the
// bus, or the record names another node's GPU) is reported as Rejected
// with reservation.ErrUnknownGPU, not silently dropped; an unrealized one
// is Pending.
func TestAdoptRejectsRealizedReservationOnAnUnknownGPU(t *testing.T) {
	f := newFixture(t, 1)
	const elsewhere = "GPU-00000000-0000-4000-8000-00000000beef"
	realized := ent(0, 0, elsewhere, "1g.5gb", 0, 1).WithRuntime(reservation.RuntimeIdentity{
		MIGUUID: "MIG-00000000-0000-4000-8000-000000000002", GPUInstanceID: 9, ComputeInstanceID: 0})
	f.schedule("gone", realized)
	f.schedule("waiting", ent(0, 0, elsewhere, "1g.5gb", 1, 1))
	rep, err := f.m.Adopt(context.Background(), f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rejected) != 1 || rep.Rejected[0].Entry.PodUID != "gone" || !errors.Is(rep.Rejected[0].Err, reservation.ErrUnknownGPU) {
		t.Fatalf("rejected %v, want pod gone's entry with ErrUnknownGPU", rep.Rejected)
	}
	if len(rep.Pending) != 1 || rep.Pending[0].PodUID != "waiting" {
		t.Fatalf("pending %v, want pod waiting's entry", rep.Pending)
	}
}

// After an unauthorised start (another pod's record is malformed), the
// realized pod's instance stays unmanaged. Maintain re-runs adoption until
// a pass settles, so once the pod ends its instance is reclaimed, and it
// collects an unclaimed leak as soon as adoption settles.
func TestMaintainAdoptsAfterAnUnauthorisedStartAndReclaims(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	f.mustAllocate("a", 0)
	f.schedule("leaky", ent(0, 0, f.gpuUUID(0), "1g.5gb", 3, 1))
	f.mustAllocate("leaky", 0)
	f.pods = f.pods[:1] // leaky's pod is gone from the API; its instance is a leak
	requesting(f.schedule("broken")).Annotations[reservation.AnnotationKey] = `[{"containerIndex":"0"}]`
	f.restart()
	ctx := context.Background()

	rep, err := f.m.Maintain(ctx, f.snapshot())
	if err != nil || rep.Adopt == nil || rep.Adopt.Authorized || rep.Settled || len(f.m.Managed()) != 0 {
		t.Fatalf("first pass = %+v, %v; want an unauthorised adoption, nothing managed", rep, err)
	}
	f.pods = f.pods[:1] // the malformed pod is deleted
	rep, err = f.m.Maintain(ctx, f.snapshot())
	if err != nil || !rep.Settled || rep.Adopt == nil || len(rep.Adopt.Adopted) != 1 {
		t.Fatalf("second pass = %+v, %v; want a settled adoption of a's instance", rep, err)
	}
	if rep.Leaks == nil || len(rep.Leaks.Collected) != 1 {
		t.Fatalf("second pass leaks = %+v, want leaky's instance collected", rep.Leaks)
	}
	f.terminate("a")
	rep, err = f.m.Maintain(ctx, f.snapshot())
	if err != nil || rep.Adopt != nil || len(rep.Reconcile.Released) != 1 {
		t.Fatalf("third pass = %+v, %v; want no adoption and a's instance released", rep, err)
	}
	if got := f.node.Snapshot(); len(got) != 0 {
		t.Fatalf("live after the pod ended = %v, want none", got)
	}
}

// Leak collection runs once per LeakInterval.
func TestMaintainCollectsLeaksPeriodically(t *testing.T) {
	f := newFixture(t, 1)
	f.m = realize.NewManager(f.node, realize.Options{Now: f.clock.Now, LeakInterval: time.Hour})
	ctx := context.Background()
	var collected []bool
	for _, step := range []time.Duration{0, time.Minute, time.Hour} {
		f.clock.Advance(step)
		rep, err := f.m.Maintain(ctx, f.snapshot())
		if err != nil {
			t.Fatal(err)
		}
		collected = append(collected, rep.Leaks != nil)
	}
	if want := []bool{true, false, true}; !slices.Equal(collected, want) {
		t.Fatalf("leak collection per pass = %v, want %v", collected, want)
	}
}

// An entry for a container that requests no device (a forged annotation on
// a pod that asks for no GPU) is never realized, and does not block the
// reservation it overlaps: the scheduler ignores it too.
func TestUnrequestedEntryNeitherRealizedNorBlocking(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("victim", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
	squatter := f.schedule("squatter", ent(0, 0, f.gpuUUID(0), "1g.5gb", 1, 1))
	squatter.DeviceRequests = nil // its spec requests no device
	ctx := context.Background()
	if _, err := f.allocate(ctx, "squatter", 0); !errors.Is(err, reservation.ErrNotRequested) {
		t.Fatalf("squatter's Allocate = %v, want reservation.ErrNotRequested", err)
	}
	res := f.mustAllocate("victim", 0)
	if got := res.Devices[0].Key.Placement; got.Start != 0 || got.Size != 2 {
		t.Fatalf("victim got %v, want [0,2)", got)
	}
	rep, err := f.m.Reconcile(ctx, f.snapshot())
	if err != nil || !rep.Authorized {
		t.Fatalf("Reconcile = %v, %v; the unrequested entry must not withhold authorisation", rep, err)
	}
}
