package realize_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

func TestAllocateRefusesBeforeCreating(t *testing.T) {
	tests := []struct {
		name      string
		entries   func(f *fixture) []reservation.Allocation
		setup     func(f *fixture)
		container int
		wantErr   error
	}{
		{
			name: "unknown profile",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "2g.20gb", 0, 2)}
			},
			wantErr: reservation.ErrUnknownProfile,
		},
		{
			name: "unpublished placement",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "2g.10gb", 1, 2)}
			},
			wantErr: reservation.ErrUnpublishedPlacement,
		},
		{
			name: "unknown GPU",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, "GPU-00000000-0000-0000-0000-000000000000", "1g.5gb", 0, 1)}
			},
			wantErr: reservation.ErrUnknownGPU,
		},
		{
			name: "second device invalid: nothing created for the first",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(1), "3g.20gb", 2, 4)}
			},
			wantErr: reservation.ErrUnpublishedPlacement,
		},
		{
			name: "MIG disabled",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1)}
			},
			setup: func(f *fixture) {
				if err := f.node.ForceMIGMode(0, capability.MIGDisabled); err != nil {
					f.t.Fatal(err)
				}
			},
			wantErr: realize.ErrMIGDisabled,
		},
		{
			name: "GPU listing fails",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1)}
			},
			setup:   func(f *fixture) { f.node.FailNth(fakehal.OpDevices, 1, realize.ErrNotSupported) },
			wantErr: realize.ErrNotSupported,
		},
		{
			name: "profile query fails",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1)}
			},
			setup:   func(f *fixture) { f.node.FailNth(fakehal.OpGIProfiles, 1, realize.ErrNotSupported) },
			wantErr: realize.ErrNotSupported,
		},
		{
			name: "no entry for the container",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1)}
			},
			container: 1,
			wantErr:   realize.ErrNoReservation,
		},
		{
			name: "overlapping entries in one pod",
			entries: func(f *fixture) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(0), "2g.10gb", 0, 2)}
			},
			wantErr: reservation.ErrOverlap,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 2)
			if tt.setup != nil {
				tt.setup(f)
			}
			f.schedule("a", tt.entries(f)...)
			_, err := f.allocate(context.Background(), "a", tt.container)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Allocate error = %v, want %v", err, tt.wantErr)
			}
			if got := f.node.Calls(fakehal.OpCreateGI); got != 0 {
				t.Errorf("CreateGpuInstance calls = %d, want 0", got)
			}
		})
	}
}

func TestAllocateRefusesBadPods(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(p *reservation.Pod)
		wantErr error
	}{
		{"deleting", func(p *reservation.Pod) { p.Deleting = true }, realize.ErrInactivePod},
		{"succeeded", func(p *reservation.Pod) { p.Phase = reservation.PodSucceeded }, realize.ErrInactivePod},
		{"no UID", func(p *reservation.Pod) { p.UID = "" }, realize.ErrInvalidRequest},
		{"container requests no device", func(p *reservation.Pod) { p.DeviceRequests = nil }, reservation.ErrNotRequested},
		{"container requests another count", func(p *reservation.Pod) { p.DeviceRequests = []int{2} }, reservation.ErrNotRequested},
		{"malformed annotation", func(p *reservation.Pod) { p.Annotations[reservation.AnnotationKey] = `[{"containerIndex":0}` }, reservation.ErrMalformed},
		{"partial runtime identity", func(p *reservation.Pod) {
			p.Annotations[reservation.AnnotationKey] = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-1","profile":"1g.5gb","placement":{"start":0,"size":1},"gpuInstanceID":7}]`
		}, reservation.ErrPartialRuntime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			p := *f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
			p.Annotations = map[string]string{reservation.AnnotationKey: p.Annotations[reservation.AnnotationKey]}
			tt.mutate(&p)
			_, err := f.m.Allocate(context.Background(), realize.AllocateRequest{Pod: p, Snapshot: f.snapshot()})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Allocate error = %v, want %v", err, tt.wantErr)
			}
			if got := len(f.node.Snapshot()); got != 0 {
				t.Errorf("live instances = %d, want 0", got)
			}
		})
	}
}

func TestAllocateCreatesExactPlacementAndPatches(t *testing.T) {
	f := newFixture(t, 2)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2), ent(0, 1, f.gpuUUID(1), "3g.20gb", 4, 4), ent(1, 0, f.gpuUUID(1), "1g.5gb", 0, 1))
	res := f.mustAllocate("a", 0)

	if got, want := len(res.Devices), 2; got != want {
		t.Fatalf("devices = %d, want %d", got, want)
	}
	live := f.node.Snapshot()
	if got, want := len(live), 2; got != want {
		t.Fatalf("live instances = %d, want %d", got, want)
	}
	for i, d := range res.Devices {
		if d.Origin != realize.OriginCreated {
			t.Errorf("device %d origin = %v, want created", i, d.Origin)
		}
		in := live[i]
		if in.GPU != d.Key.GPU || in.Placement != d.Entry.Placement || in.GIID != d.Runtime.GPUInstanceID ||
			in.ComputeInstances[0].MIGUUID != d.Runtime.MIGUUID || in.ComputeInstances[0].ID != d.Runtime.ComputeInstanceID {
			t.Errorf("device %d = %+v, live instance %+v", i, d, in)
		}
	}
	entries, err := reservation.DecodeString(res.Annotation)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Devices {
		rt, ok := entries[d.Index].Runtime()
		if !ok || rt != d.Runtime {
			t.Errorf("annotation entry %d runtime = %v %v, want %v", d.Index, rt, ok, d.Runtime)
		}
	}
	if _, ok := entries[2].Runtime(); ok {
		t.Errorf("container 1's entry got a runtime identity: %+v", entries[2])
	}
	if want := reservation.AnnotationPatch(res.Annotation, reservation.PatchOptions{}); string(res.Patch) != string(want) {
		t.Errorf("patch = %s, want %s", res.Patch, want)
	}
	if got := f.m.Stats(); got.Creates != 2 || got.Managed != 2 {
		t.Errorf("stats = %+v, want 2 creates, 2 managed", got)
	}
	f.checkHardware()
}

func TestAllocateIsIdempotent(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
	first := f.mustAllocate("a", 0)
	// The annotation now carries the runtime identity; a second Allocate
	// (kubelet retry) must return the same device and no patch.
	second := f.mustAllocate("a", 0)
	if got, want := migUUIDs(second), migUUIDs(first); got[0] != want[0] {
		t.Errorf("repeated Allocate MIG UUID = %v, want %v", got, want)
	}
	if second.Devices[0].Origin != realize.OriginManaged {
		t.Errorf("repeat origin = %v, want managed", second.Devices[0].Origin)
	}
	if second.Patch != nil {
		t.Errorf("repeat patch = %s, want nil", second.Patch)
	}
	// Also with the scheduler's annotation (patch lost before it was written).
	p := f.pod("a")
	p.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1)})
	third := f.mustAllocate("a", 0)
	if migUUIDs(third)[0] != migUUIDs(first)[0] || third.Patch == nil {
		t.Errorf("third Allocate = %v patch %s, want %v and a patch", migUUIDs(third), third.Patch, migUUIDs(first))
	}
	if got := f.node.Calls(fakehal.OpCreateGI); got != 1 {
		t.Errorf("CreateGpuInstance calls = %d, want 1", got)
	}
}

func TestAllocateRefusesForgery(t *testing.T) {
	tests := []struct {
		name string
		// forge returns the forger's annotation entries, given the victim's
		// realized entry.
		forge func(f *fixture, victim reservation.Allocation) []reservation.Allocation
		// victimListed keeps the victim in the snapshot.
		victimListed bool
	}{
		{
			name: "copies the victim's reservation",
			forge: func(f *fixture, v reservation.Allocation) []reservation.Allocation {
				return []reservation.Allocation{v}
			},
			victimListed: true,
		},
		{
			name: "copies the victim's reservation while the victim is not listed",
			forge: func(f *fixture, v reservation.Allocation) []reservation.Allocation {
				return []reservation.Allocation{v}
			},
		},
		{
			name: "copies the victim's scheduler fields only",
			forge: func(f *fixture, v reservation.Allocation) []reservation.Allocation {
				return []reservation.Allocation{v.Scheduled()}
			},
		},
		{
			name: "overlapping placement with another profile",
			forge: func(f *fixture, v reservation.Allocation) []reservation.Allocation {
				return []reservation.Allocation{ent(0, 0, v.GPUUUID, "1g.5gb", 2, 1)}
			},
		},
		{
			name: "own free placement, victim's runtime identity",
			forge: func(f *fixture, v reservation.Allocation) []reservation.Allocation {
				e := ent(0, 0, v.GPUUUID, "1g.5gb", 6, 1)
				id, _ := v.Runtime()
				return []reservation.Allocation{e.WithRuntime(id)}
			},
			victimListed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			f.schedule("victim", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
			victim := f.mustAllocate("victim", 0)
			v := victim.Devices[0].Entry
			if !tt.victimListed {
				// A lagging, incomplete listing: the victim is missing
				// but that proves nothing.
				f.pods = f.pods[:0]
				f.incomplete = true
			}
			f.schedule("forger", tt.forge(f, v)...)
			res, err := f.allocate(context.Background(), "forger", 0)
			if !errors.Is(err, realize.ErrConflict) {
				t.Fatalf("forger Allocate = %v, %v; want ErrConflict", migUUIDs(res), err)
			}
			var ce *realize.ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConflictError", err)
			}
			if got, want := f.live(), []string{victim.Devices[0].Runtime.MIGUUID}; len(got) != 1 || got[0] != want[0] {
				t.Errorf("live = %v, want only the victim's %v", got, want)
			}
			if got := f.m.Stats().Conflicts; got == 0 {
				t.Errorf("conflicts = 0, want > 0")
			}
		})
	}
}

func TestAllocateRollsBackOnlyWhatItCreated(t *testing.T) {
	f := newFixture(t, 3)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(1), "1g.5gb", 0, 1), ent(0, 2, f.gpuUUID(2), "1g.5gb", 0, 1))
	// Device 0 is realized by an earlier, partially failed attempt: its
	// second create fails.
	f.node.FailNth(fakehal.OpCreateGI, 2, realize.ErrOccupied)
	_, err := f.allocate(context.Background(), "a", 0)
	if !errors.Is(err, realize.ErrOccupied) {
		t.Fatalf("first attempt error = %v, want ErrOccupied", err)
	}
	if got := len(f.node.Snapshot()); got != 0 {
		t.Fatalf("after rollback live = %d, want 0", got)
	}

	// Now device 0 and 1 succeed and are kept managed, then a new attempt
	// fails on device 2 after device 1 vanished and was re-created: only
	// device 1's new instance is rolled back.
	f.mustAllocate("a", 0)
	first := f.live()
	in := f.node.Snapshot()[1]  // device 1, GPU 1
	in2 := f.node.Snapshot()[2] // device 2, GPU 2
	if err := f.node.DestroyComputeInstance(context.Background(), 1, in.GIID, in.ComputeInstances[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.node.DestroyGPUInstance(context.Background(), 1, in.GIID); err != nil {
		t.Fatal(err)
	}
	f.node.Inject(fakehal.Fault{Op: fakehal.OpInstances, GPUs: []int{2}, Nth: 1, Err: realize.ErrNotSupported})
	_, err = f.allocate(context.Background(), "a", 0)
	if !errors.Is(err, realize.ErrNotSupported) {
		t.Fatalf("second attempt error = %v, want ErrNotSupported", err)
	}
	live := f.node.Snapshot()
	if got := len(live); got != 2 {
		t.Fatalf("live = %+v, want devices 0 and 2 only", live)
	}
	if live[0].ComputeInstances[0].MIGUUID != first[0] && live[0].ComputeInstances[0].MIGUUID != first[1] && live[0].ComputeInstances[0].MIGUUID != first[2] {
		t.Errorf("device 0's instance was replaced")
	}
	if live[1].GIID != in2.GIID || live[1].GPU != 2 {
		t.Errorf("device 2's instance changed: %+v, want %+v", live[1], in2)
	}
	if got := f.m.Stats().Rollbacks; got != 2 {
		t.Errorf("rollbacks = %d, want 2", got)
	}
}

func TestAllocateRollbackFailureIsJoined(t *testing.T) {
	f := newFixture(t, 2)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(1), "1g.5gb", 0, 1))
	f.node.FailNth(fakehal.OpCreateGI, 2, realize.ErrOccupied)
	f.node.FailNth(fakehal.OpDestroyCI, 1, realize.ErrInUse)
	_, err := f.allocate(context.Background(), "a", 0)
	if !errors.Is(err, realize.ErrOccupied) {
		t.Errorf("error %v does not match the create failure", err)
	}
	var re *realize.ReleaseError
	if !errors.As(err, &re) || !errors.Is(err, realize.ErrInUse) {
		t.Fatalf("error %v does not carry the rollback failure", err)
	}
	// The instance that could not be rolled back stays managed for its
	// owner: a retry reuses it instead of leaking it.
	if got := f.m.Stats().Managed; got != 1 {
		t.Errorf("managed = %d, want 1", got)
	}
	res := f.mustAllocate("a", 0)
	if res.Devices[0].Origin != realize.OriginManaged || res.Devices[1].Origin != realize.OriginCreated {
		t.Errorf("retry origins = %v, %v; want managed, created", res.Devices[0].Origin, res.Devices[1].Origin)
	}
}

func TestAllocateRollbackSurvivesCancellation(t *testing.T) {
	f := newFixture(t, 2)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1), ent(0, 1, f.gpuUUID(1), "1g.5gb", 0, 1))
	ctx, cancel := context.WithCancel(context.Background())
	f.node.Inject(fakehal.Fault{Op: fakehal.OpCreateGI, GPUs: []int{1}, Latency: time.Hour})
	done := make(chan error)
	go func() {
		_, err := f.allocate(ctx, "a", 0)
		done <- err
	}()
	for f.node.Calls(fakehal.OpCreateGI) < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if got := len(f.node.Snapshot()); got != 0 {
		t.Errorf("live = %d after a cancelled attempt, want 0", got)
	}
}

func TestAllocateLockWaitHonoursContext(t *testing.T) {
	f := newFixture(t, 2)
	f.schedule("slow", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	f.schedule("waiter", ent(0, 0, f.gpuUUID(0), "1g.5gb", 1, 1))
	f.schedule("other", ent(0, 0, f.gpuUUID(1), "1g.5gb", 1, 1))
	release := make(chan struct{})
	f.node.Inject(fakehal.Fault{Op: fakehal.OpCreateGI, GPUs: []int{0}, Nth: 1, Latency: time.Hour})
	slowCtx, cancelSlow := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := f.m.Allocate(slowCtx, realize.AllocateRequest{Pod: *f.pod("slow"), Snapshot: f.snapshot()})
		<-release
		done <- err
	}()
	for f.node.Calls(fakehal.OpCreateGI) < 1 {
		time.Sleep(time.Millisecond)
	}
	// GPU 0's lock is held by the slow create: a waiter gives up with its
	// context, while GPU 1 proceeds.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := f.m.Allocate(ctx, realize.AllocateRequest{Pod: *f.pod("waiter"), Snapshot: f.snapshot()})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter error = %v, want context.DeadlineExceeded", err)
	}
	f.mustAllocate("other", 0)
	cancelSlow()
	close(release)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("slow Allocate error = %v, want context.Canceled", err)
	}
	f.mustAllocate("waiter", 0)
}

func TestAllocateRecoversGIWithoutCI(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "3g.20gb", 4, 4))
	f.node.CrashAfterGI(1)
	if _, err := f.allocate(context.Background(), "a", 0); !errors.Is(err, fakehal.ErrCrashed) {
		t.Fatalf("crashed Allocate error = %v, want ErrCrashed", err)
	}
	// The plugin restarts: the GI without a CI is a claimed leak, left to
	// Allocate, which removes and recreates it.
	f.restart()
	rep, err := f.m.Adopt(context.Background(), f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].ComputeInstances != 0 || !rep.Leaks[0].Claimed || len(rep.Pending) != 1 {
		t.Fatalf("adopt report leaks %+v pending %+v, want one claimed GI without CI and one pending", rep.Leaks, rep.Pending)
	}
	res := f.mustAllocate("a", 0)
	live := f.node.Snapshot()
	if len(live) != 1 || len(live[0].ComputeInstances) != 1 || live[0].ComputeInstances[0].MIGUUID != res.Devices[0].Runtime.MIGUUID {
		t.Fatalf("live = %+v, want one complete instance %s", live, res.Devices[0].Runtime.MIGUUID)
	}
	f.checkHardware()
}

func TestAllocateReplacesUnpatchedInstanceAfterCrash(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
	// The plugin dies after creating the CI, before patching the pod: no
	// one can prove who used the instance, so it is not handed out.
	f.node.Inject(fakehal.Fault{Op: fakehal.OpCreateCI, Nth: 1, Crash: true})
	if _, err := f.allocate(context.Background(), "a", 0); !errors.Is(err, fakehal.ErrCrashed) {
		t.Fatalf("crashed Allocate error = %v, want ErrCrashed", err)
	}
	f.restart()
	before := f.live()
	res := f.mustAllocate("a", 0)
	if res.Devices[0].Origin != realize.OriginCreated || res.Devices[0].Runtime.MIGUUID == before[0] {
		t.Errorf("device = %+v, want a fresh instance, not %s", res.Devices[0], before[0])
	}
	if got := f.live(); len(got) != 1 || got[0] != res.Devices[0].Runtime.MIGUUID {
		t.Errorf("live = %v, want only %s", got, res.Devices[0].Runtime.MIGUUID)
	}
}

func TestAllocateAdoptsAnnotatedInstanceAfterRestart(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 4, 2))
	first := f.mustAllocate("a", 0)
	f.restart() // and no Adopt
	res := f.mustAllocate("a", 0)
	if res.Devices[0].Origin != realize.OriginAdopted || res.Devices[0].Runtime != first.Devices[0].Runtime {
		t.Errorf("device = %+v, want %v adopted", res.Devices[0], first.Devices[0].Runtime)
	}
	if got := f.m.Stats().Adoptions; got != 1 {
		t.Errorf("adoptions = %d, want 1", got)
	}
}

func TestAllocateRefusesInstanceOfEndedPod(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("victim", ent(0, 0, f.gpuUUID(0), "2g.10gb", 4, 2))
	v := f.mustAllocate("victim", 0)
	f.terminate("victim")
	f.restart() // the ended pod's instance is now unmanaged
	f.schedule("forger", v.Devices[0].Entry)
	if _, err := f.allocate(context.Background(), "forger", 0); !errors.Is(err, realize.ErrConflict) {
		t.Fatalf("forger error = %v, want ErrConflict", err)
	}
	if got := f.live(); len(got) != 1 || got[0] != v.Devices[0].Runtime.MIGUUID {
		t.Errorf("live = %v, want the victim's instance untouched", got)
	}
}

func TestAllocateReplacesStaleIdentity(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 2, 1))
	first := f.mustAllocate("a", 0)
	// The instance disappears (a GPU reset); the next Allocate recreates
	// it, but its patch is lost.
	rt := first.Devices[0].Runtime
	ctx := context.Background()
	f.destroyInstance(rt)
	p := *f.pod("a")
	second, err := f.m.Allocate(ctx, realize.AllocateRequest{Pod: p, Snapshot: f.snapshot()})
	if err != nil {
		t.Fatal(err)
	}
	if second.Devices[0].Origin != realize.OriginCreated || second.Devices[0].Runtime == rt {
		t.Fatalf("second = %+v, want a new instance", second.Devices[0])
	}
	// The annotation still names the vanished instance.
	third := f.mustAllocate("a", 0)
	if third.Devices[0].Runtime != second.Devices[0].Runtime || third.Devices[0].Origin != realize.OriginManaged || third.Patch == nil {
		t.Errorf("third = %+v patch %s, want the managed %v and a patch", third.Devices[0], third.Patch, second.Devices[0].Runtime)
	}
	entries, _ := reservation.DecodeString(f.pod("a").Annotations[reservation.AnnotationKey])
	if got, _ := entries[0].Runtime(); got != second.Devices[0].Runtime {
		t.Errorf("annotation runtime = %v, want %v", got, second.Devices[0].Runtime)
	}
}

func TestAllocateStaleIdentityWithRemnantAtKey(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "3g.20gb", 0, 4))
	first := f.mustAllocate("a", 0)
	rt := first.Devices[0].Runtime
	// The instance vanishes, a re-create crashes after its CI and the
	// plugin restarts: the annotation names a dead instance and an
	// unpatched remnant sits at the key.
	f.destroyInstance(rt)
	remnant, err := f.node.AddInstance(0, capability.GIProfile3Slice, capability.Placement{Start: 0, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	f.restart()
	res := f.mustAllocate("a", 0)
	got := res.Devices[0].Runtime
	if got == rt || got.MIGUUID == remnant.ComputeInstances[0].MIGUUID || res.Devices[0].Origin != realize.OriginCreated {
		t.Errorf("device = %+v, want a fresh instance (not %s nor the remnant)", res.Devices[0], rt.MIGUUID)
	}
	if live := f.live(); len(live) != 1 || live[0] != got.MIGUUID {
		t.Errorf("live = %v, want only %s", live, got.MIGUUID)
	}
}

// misreporting is a backend whose CreateInstance acts correctly but
// describes the result wrongly.
type misreporting struct {
	*fakehal.Node
	lie func(*realize.Instance)
}

func (b misreporting) CreateInstance(ctx context.Context, gpu int, p capability.GIProfileIndex, at capability.Placement) (realize.Instance, error) {
	inst, err := b.Node.CreateInstance(ctx, gpu, p, at)
	if err == nil {
		inst.ComputeInstances = slices.Clone(inst.ComputeInstances)
		b.lie(&inst)
	}
	return inst, err
}

// A backend that reports something other than what was asked for is not
// trusted: Allocate fails with ErrHardwareMismatch and manages nothing.
// What it reports at the reserved placement is what this call created, so
// it is destroyed again as far as the report allows (a compute instance it
// hides keeps its GI: the hardware refuses); an instance reported elsewhere
// is left alone.
func TestAllocateRefusesMisreportedCreate(t *testing.T) {
	tests := []struct {
		name     string
		lie      func(*realize.Instance)
		wantLive int
	}{
		{name: "other profile", lie: func(in *realize.Instance) { in.Profile = capability.GIProfile1SliceRev1 }},
		{name: "no compute instance", lie: func(in *realize.Instance) { in.ComputeInstances = nil }, wantLive: 1},
		{name: "no MIG UUID", lie: func(in *realize.Instance) { in.ComputeInstances[0].MIGUUID = "" }},
		{name: "other placement", lie: func(in *realize.Instance) { in.Placement.Start++ }, wantLive: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			f.m = realize.NewManager(misreporting{Node: f.node, lie: tt.lie}, realize.Options{Now: f.clock.Now})
			f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 2, 1))
			_, err := f.allocate(context.Background(), "a", 0)
			if !errors.Is(err, realize.ErrHardwareMismatch) {
				t.Fatalf("Allocate error = %v, want ErrHardwareMismatch", err)
			}
			if got := f.m.Stats(); got.Managed != 0 || got.Creates != 0 {
				t.Errorf("stats = %+v, want nothing created or managed", got)
			}
			if got := len(f.node.Snapshot()); got != tt.wantLive {
				t.Errorf("live GIs = %d, want %d", got, tt.wantLive)
			}
			f.checkHardware()
		})
	}
}

// After a restart, the unmanaged instance of an ended pod that is still
// listed (completed Job pods stay in the API) may sit exactly where the
// scheduler has since reserved for a new pod. It is replaced like any
// remnant, unless something still runs on it.
func TestAllocateReplacesEndedPodsInstanceAtItsKey(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("process running %t", running), func(t *testing.T) {
			f := newFixture(t, 1)
			f.schedule("done", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
			old := f.mustAllocate("done", 0).Devices[0].Runtime.MIGUUID
			if running {
				if _, err := f.node.StartProcess(0, old); err != nil {
					t.Fatal(err)
				}
			}
			f.terminate("done")
			f.schedule("next", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
			f.restart()
			ctx := context.Background()
			if _, err := f.m.Adopt(ctx, f.snapshot()); err != nil {
				t.Fatal(err)
			}
			res, err := f.allocate(ctx, "next", 0)
			if running {
				if !errors.Is(err, realize.ErrOccupied) {
					t.Errorf("Allocate(next) = %v, want ErrOccupied while a process runs", err)
				}
				if got := f.live(); len(got) != 1 || got[0] != old {
					t.Errorf("live = %v, want the ended pod's %s untouched", got, old)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate(next): %v", err)
			}
			if d := res.Devices[0]; d.Origin != realize.OriginCreated || d.Runtime.MIGUUID == old {
				t.Errorf("device = %+v, want a fresh instance, not the ended pod's %s", d, old)
			}
		})
	}
}
