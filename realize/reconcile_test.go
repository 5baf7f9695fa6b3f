package realize_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

func TestReconcile(t *testing.T) {
	tests := []struct {
		name string
		// change alters the listing after both pods are realized.
		change         func(f *fixture)
		wantAuthorized bool
		wantReleased   int
		wantDeferred   int
		wantLive       int
		wantReason     error
	}{
		{
			name:           "nothing changed",
			change:         func(f *fixture) {},
			wantAuthorized: true, wantLive: 2,
		},
		{
			name:           "pod succeeded",
			change:         func(f *fixture) { f.terminate("a") },
			wantAuthorized: true, wantReleased: 1, wantLive: 1,
		},
		{
			name: "pod deleting, containers terminated",
			change: func(f *fixture) {
				f.pod("a").Deleting, f.pod("a").ContainersTerminated = true, true
				f.pod("a").DeletionDeadline = f.clock.Now().Add(30 * time.Second)
			},
			wantAuthorized: true, wantReleased: 1, wantLive: 1,
		},
		{
			name: "pod deleting, containers running within the grace period",
			change: func(f *fixture) {
				f.pod("a").Deleting = true
				f.pod("a").DeletionDeadline = f.clock.Now().Add(30 * time.Second)
			},
			wantAuthorized: true, wantLive: 2,
		},
		{
			name: "pod deleting, grace period over",
			change: func(f *fixture) {
				f.pod("a").Deleting = true
				f.pod("a").DeletionDeadline = f.clock.Now().Add(30 * time.Second)
				f.clock.Advance(30 * time.Second)
			},
			wantAuthorized: true, wantReleased: 1, wantLive: 1,
		},
		{
			name:           "pod deleting, listing time unknown",
			change:         func(f *fixture) { f.pod("a").Deleting = true; f.unknownTime = true },
			wantAuthorized: true, wantLive: 2,
		},
		{
			name:           "pod gone from a complete listing, within the grace for a lagging listing",
			change:         func(f *fixture) { f.pods = f.pods[1:]; f.clock.Advance(59 * time.Second) },
			wantAuthorized: true, wantDeferred: 1, wantLive: 2,
		},
		{
			name:           "pod gone from a complete listing, grace passed",
			change:         func(f *fixture) { f.pods = f.pods[1:]; f.clock.Advance(time.Minute) },
			wantAuthorized: true, wantReleased: 1, wantLive: 1,
		},
		{
			name:     "incomplete listing",
			change:   func(f *fixture) { f.pods = f.pods[1:]; f.incomplete = true },
			wantLive: 2, wantReason: reservation.ErrIncompleteSnapshot,
		},
		{
			name: "malformed record elsewhere",
			change: func(f *fixture) {
				f.terminate("a")
				requesting(f.schedule("bad")).Annotations[reservation.AnnotationKey] = `{"not":"an array"}`
			},
			wantLive: 2, wantReason: reservation.ErrMalformed,
		},
		{
			name: "partial runtime identity elsewhere",
			change: func(f *fixture) {
				f.terminate("a")
				requesting(f.schedule("bad")).Annotations[reservation.AnnotationKey] = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"1g.5gb","placement":{"start":5,"size":1},"migUUID":"MIG-00000000-0000-0000-0000-000000000000"}]`
			},
			wantLive: 2, wantReason: reservation.ErrPartialRuntime,
		},
		{
			name: "legacy identifiers elsewhere",
			change: func(f *fixture) {
				f.terminate("a")
				requesting(f.schedule("legacy")).Annotations[reservation.LegacyDevicesAnnotationKey] = f.gpuUUID(0) + "[1-0],NVIDIA,4864,14:;"
			},
			wantLive: 2, wantReason: reservation.ErrLegacyIdentifier,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			f.schedule("a", ent(0, 0, f.gpuUUID(0), "3g.20gb", 0, 4))
			f.schedule("b", ent(0, 0, f.gpuUUID(0), "2g.10gb", 4, 2))
			f.mustAllocate("a", 0)
			f.mustAllocate("b", 0)
			tt.change(f)
			rep, err := f.m.Reconcile(context.Background(), f.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Authorized != tt.wantAuthorized || len(rep.Released) != tt.wantReleased || len(rep.Deferred) != tt.wantDeferred {
				t.Errorf("report = %v, want authorised %t, released %d, deferred %d", rep, tt.wantAuthorized, tt.wantReleased, tt.wantDeferred)
			}
			if tt.wantReason != nil && !errors.Is(errors.Join(rep.Reasons...), tt.wantReason) {
				t.Errorf("reasons %v do not include %v", rep.Reasons, tt.wantReason)
			}
			if got := len(f.node.Snapshot()); got != tt.wantLive {
				t.Errorf("live instances = %d, want %d", got, tt.wantLive)
			}
			if got, want := f.m.Stats().SkippedReconciles > 0, !tt.wantAuthorized; got != want {
				t.Errorf("skipped reconciles counted = %t, want %t", got, want)
			}
			f.checkHardware()
		})
	}
}

func TestReconcileKeepsInstanceInUse(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 3, 1))
	res := f.mustAllocate("a", 0)
	pid, err := f.node.StartProcess(0, res.Devices[0].Runtime.MIGUUID)
	if err != nil {
		t.Fatal(err)
	}
	f.terminate("a")
	rep, err := f.m.Reconcile(context.Background(), f.snapshot())
	if err != nil {
		t.Fatalf("in-use is not an error: %v", err)
	}
	if len(rep.Kept) != 1 || !errors.Is(rep.Kept[0].Err, realize.ErrInUse) {
		t.Fatalf("kept = %+v, want one in use", rep.Kept)
	}
	if got := f.m.Stats().Managed; got != 1 {
		t.Fatalf("managed = %d, want 1 still tracked", got)
	}
	if err := f.node.StopProcess(pid); err != nil {
		t.Fatal(err)
	}
	rep, err = f.m.Reconcile(context.Background(), f.snapshot())
	if err != nil || len(rep.Released) != 1 {
		t.Fatalf("second pass = %v, %v; want one released", rep, err)
	}
	if got := len(f.node.Snapshot()); got != 0 {
		t.Errorf("live = %d, want 0", got)
	}
}

func TestReconcileReportsHardwareFailures(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 3, 1))
	f.mustAllocate("a", 0)
	f.terminate("a")
	f.node.FailNth(fakehal.OpDestroyGI, 1, realize.ErrNotSupported)
	rep, err := f.m.Reconcile(context.Background(), f.snapshot())
	var re *realize.ReleaseError
	if !errors.As(err, &re) || !errors.Is(err, realize.ErrNotSupported) {
		t.Fatalf("error = %v, want a ReleaseError matching ErrNotSupported", err)
	}
	if len(rep.Kept) != 1 {
		t.Fatalf("kept = %+v, want 1", rep.Kept)
	}
	// The CI is gone but the GI stays managed; the next pass finishes.
	if rep, err := f.m.Reconcile(context.Background(), f.snapshot()); err != nil || len(rep.Released) != 1 {
		t.Fatalf("second pass = %v, %v; want released", rep, err)
	}
	if got := len(f.node.Snapshot()); got != 0 {
		t.Errorf("live = %d, want 0", got)
	}
}

// A pass may run long after its listing was taken (it waits for GPU locks
// and slow NVML calls): a pod's absence is judged at the listing's time,
// so an instance realized after the listing is kept, however late the
// pass runs, and released by a listing taken past the grace.
func TestReconcileJudgesAbsenceAtListingTime(t *testing.T) {
	for _, demand := range []bool{false, true} {
		t.Run(map[bool]string{false: "snapshot", true: "demand"}[demand], func(t *testing.T) {
			f := newFixture(t, 1)
			reconcile := func(snap reservation.Snapshot) realize.ReconcileReport {
				t.Helper()
				var rep realize.ReconcileReport
				var err error
				if demand {
					rep, err = f.m.ReconcileDemand(context.Background(), realize.Demand{Complete: snap.Complete, Now: snap.Now})
				} else {
					rep, err = f.m.Reconcile(context.Background(), snap)
				}
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			early := f.snapshot() // before pod a exists
			f.schedule("a", ent(0, 0, f.gpuUUID(0), "3g.20gb", 0, 4))
			f.mustAllocate("a", 0)
			f.clock.Advance(time.Hour)
			if rep := reconcile(early); len(rep.Released) != 0 || len(rep.Deferred) != 1 {
				t.Errorf("a pass over a listing older than the instance = %v, want it deferred", rep)
			}
			f.pods = nil
			if rep := reconcile(f.snapshot()); len(rep.Released) != 1 {
				t.Errorf("a listing taken past the grace without the pod = %v, want it released", rep)
			}
		})
	}
}

func TestReconcileFreesPlacementForNextPod(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "7g.40gb", 0, 8))
	first := f.mustAllocate("a", 0)
	f.terminate("a")
	// The scheduler reuses the placement: Allocate's reconcile frees it.
	f.schedule("b", ent(0, 0, f.gpuUUID(0), "7g.40gb", 0, 8))
	second := f.mustAllocate("b", 0)
	if len(second.Reconcile.Released) != 1 {
		t.Errorf("Allocate's reconcile released %d, want 1", len(second.Reconcile.Released))
	}
	if migUUIDs(second)[0] == migUUIDs(first)[0] {
		t.Errorf("pod b received pod a's MIG UUID %s", migUUIDs(first)[0])
	}
}

func TestReconcileVanishedInstance(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	res := f.mustAllocate("a", 0)
	rt := res.Devices[0].Runtime
	ctx := context.Background()
	f.destroyInstance(rt)
	f.terminate("a")
	rep, err := f.m.Reconcile(ctx, f.snapshot())
	if err != nil || len(rep.Vanished) != 1 || len(rep.Released) != 0 {
		t.Fatalf("report = %+v, %v; want one vanished", rep, err)
	}
	if got := f.m.Stats().Managed; got != 0 {
		t.Errorf("managed = %d, want 0", got)
	}
}

func TestReconcileLeavesUnmanagedInstances(t *testing.T) {
	f := newFixture(t, 1)
	if _, err := f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 6, Size: 1}); err != nil {
		t.Fatal(err)
	}
	rep, err := f.m.Reconcile(context.Background(), f.snapshot())
	if err != nil || len(rep.Released) != 0 {
		t.Fatalf("report = %v, %v", rep, err)
	}
	if got := len(f.node.Snapshot()); got != 1 {
		t.Errorf("live = %d, want the unmanaged instance kept", got)
	}
}

// A managed GI that now holds only another compute instance (its CI was
// destroyed and one created in its place behind the manager's back) is no
// longer the managed instance: it is forgotten, not destroyed, and no
// destroy is attempted.
func TestReconcileForgetsGIHoldingAnotherCI(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
	rt := f.mustAllocate("a", 0).Devices[0].Runtime
	ctx := context.Background()
	f.destroyCI(rt)
	other, err := f.node.AddComputeInstance(0, rt.GPUInstanceID, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.terminate("a")
	destroys := f.node.Calls(fakehal.OpDestroyCI) + f.node.Calls(fakehal.OpDestroyGI)
	rep, err := f.m.Reconcile(ctx, f.snapshot())
	if err != nil || len(rep.Vanished) != 1 || len(rep.Released) != 0 || len(rep.Kept) != 0 {
		t.Fatalf("report = %+v, %v; want one vanished", rep, err)
	}
	if got := f.node.Calls(fakehal.OpDestroyCI) + f.node.Calls(fakehal.OpDestroyGI); got != destroys {
		t.Errorf("destroy calls = %d, want %d (none)", got, destroys)
	}
	if got := f.live(); len(got) != 1 || got[0] != other.MIGUUID {
		t.Errorf("live = %v, want the other CI %s untouched", got, other.MIGUUID)
	}
	if got := f.m.Stats().Managed; got != 0 {
		t.Errorf("managed = %d, want 0", got)
	}
}

// A managed GI whose own CI is gone (a release that failed after the CI
// destroy) is still the managed instance: the next pass destroys the GI.
func TestReconcileReleasesGIWhoseCIIsGone(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
	rt := f.mustAllocate("a", 0).Devices[0].Runtime
	ctx := context.Background()
	f.destroyCI(rt)
	f.terminate("a")
	rep, err := f.m.Reconcile(ctx, f.snapshot())
	if err != nil || len(rep.Released) != 1 || len(rep.Vanished) != 0 {
		t.Fatalf("report = %+v, %v; want one released", rep, err)
	}
	if got := len(f.node.Snapshot()); got != 0 {
		t.Errorf("live GIs = %d, want 0", got)
	}
}

// A pod that is still active but whose record no longer names its managed
// instance (rewritten to another placement, or emptied) may still use it:
// reconcile keeps it until the pod ends.
func TestReconcileRetainsInstanceOfActivePod(t *testing.T) {
	tests := []struct {
		name    string
		rewrite func(f *fixture) string
	}{
		{name: "moved to another placement", rewrite: func(f *fixture) string {
			return reservation.EncodeString([]reservation.Allocation{ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2)})
		}},
		{name: "emptied", rewrite: func(*fixture) string { return "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			a := f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
			mig := f.mustAllocate("a", 0).Devices[0].Runtime.MIGUUID
			a.Annotations[reservation.AnnotationKey] = tt.rewrite(f)
			ctx := context.Background()
			f.clock.Advance(time.Hour)
			rep, err := f.m.Reconcile(ctx, f.snapshot())
			if err != nil || !rep.Authorized || len(rep.Retained) != 1 || len(rep.Released) != 0 {
				t.Fatalf("report = %+v, %v; want a's instance retained", rep, err)
			}
			if got := f.live(); len(got) != 1 || got[0] != mig {
				t.Errorf("live = %v, want a's %s", got, mig)
			}
			f.terminate("a")
			if rep, err = f.m.Reconcile(ctx, f.snapshot()); err != nil || len(rep.Released) != 1 {
				t.Errorf("after the pod ended: report = %v, %v; want it released", rep, err)
			}
		})
	}
}

// A GPU reset out of MIG mode takes every instance with it; NVML then
// answers instance listings with NOT_SUPPORTED. The managed instances are
// gone, not failures to report on every pass.
func TestReconcileForgetsInstancesOfGPULeftMIGMode(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	f.mustAllocate("a", 0)
	if err := f.node.ForceMIGMode(0, capability.MIGDisabled); err != nil {
		t.Fatal(err)
	}
	f.terminate("a")
	rep, err := f.m.Reconcile(context.Background(), f.snapshot())
	if err != nil || len(rep.Vanished) != 1 || len(rep.Kept) != 0 {
		t.Fatalf("report = %+v, %v; want one vanished", rep, err)
	}
	if got := f.m.Stats().Managed; got != 0 {
		t.Errorf("managed = %d, want 0", got)
	}
}
