package realize_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

func TestAdoptAfterRestart(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2), ent(0, 1, f.gpuUUID(1), "3g.20gb", 0, 4))
	f.schedule("b", ent(0, 0, f.gpuUUID(0), "1g.5gb", 4, 1))
	a := f.mustAllocate("a", 0)
	b := f.mustAllocate("b", 0)
	f.schedule("c", ent(0, 0, f.gpuUUID(1), "3g.20gb", 4, 4)) // scheduled, not yet realized
	if _, err := f.node.AddInstance(2, capability.GIProfile7Slice, capability.Placement{Start: 0, Size: 8}); err != nil {
		t.Fatal(err) // a leftover on an idle GPU
	}

	f.restart()
	rep, err := f.m.Adopt(ctx, f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Authorized || len(rep.Adopted) != 3 || len(rep.Pending) != 1 || len(rep.Rejected) != 0 || len(rep.Leaks) != 0 {
		t.Fatalf("report: authorised %t adopted %d pending %d rejected %v leaks %v; want true 3 1 none none",
			rep.Authorized, len(rep.Adopted), len(rep.Pending), rep.Rejected, rep.Leaks)
	}
	if got := rep.GPUs[2]; got.Busy || got.Cleaned != 1 {
		t.Errorf("GPU 2 = %+v, want idle and cleaned", got)
	}
	if got := rep.GPUs[0]; !got.Busy || got.Cleaned != 0 {
		t.Errorf("GPU 0 = %+v, want busy, untouched", got)
	}
	if got := f.m.Stats(); got.Adoptions != 3 || got.Managed != 3 {
		t.Errorf("stats = %+v, want 3 adoptions, 3 managed", got)
	}

	// Normal operation resumes from the reconstructed state.
	creates := f.node.Calls(fakehal.OpCreateGI)
	again := f.mustAllocate("a", 0)
	if got, want := migUUIDs(again), migUUIDs(a); got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Allocate after restart = %v, want %v", got, want)
	}
	if f.node.Calls(fakehal.OpCreateGI) != creates {
		t.Errorf("Allocate after restart created instances")
	}
	f.mustAllocate("c", 0)
	f.terminate("b")
	rr, err := f.m.Reconcile(ctx, f.snapshot())
	if err != nil || len(rr.Released) != 1 || rr.Released[0].Runtime.MIGUUID != migUUIDs(b)[0] {
		t.Errorf("reconcile after restart = %v, %v; want b's instance released", rr, err)
	}

	// Adopt is idempotent.
	rep, err = f.m.Adopt(ctx, f.snapshot())
	if err != nil || len(rep.Adopted) != 0 || len(rep.Rejected) != 0 || len(rep.Leaks) != 0 {
		t.Errorf("second Adopt = %+v, %v; want nothing new", rep, err)
	}
	f.checkHardware()
}

func TestAdoptRejectsMismatches(t *testing.T) {
	tests := []struct {
		name    string
		forge   func(real reservation.RuntimeIdentity, other reservation.RuntimeIdentity) reservation.Allocation
		wantErr error
	}{
		{
			name: "wrong MIG UUID",
			forge: func(r, _ reservation.RuntimeIdentity) reservation.Allocation {
				r.MIGUUID = "MIG-00000000-0000-4000-8000-000000000000"
				return ent(0, 0, "", "2g.10gb", 2, 2).WithRuntime(r)
			},
			wantErr: realize.ErrHardwareMismatch,
		},
		{
			name: "wrong CI ID",
			forge: func(r, _ reservation.RuntimeIdentity) reservation.Allocation {
				r.ComputeInstanceID++
				return ent(0, 0, "", "2g.10gb", 2, 2).WithRuntime(r)
			},
			wantErr: realize.ErrHardwareMismatch,
		},
		{
			name: "GI ID of no live instance",
			forge: func(r, _ reservation.RuntimeIdentity) reservation.Allocation {
				r.GPUInstanceID = 200
				return ent(0, 0, "", "2g.10gb", 2, 2).WithRuntime(r)
			},
			wantErr: realize.ErrNotFound,
		},
		{
			name: "another instance's identity",
			forge: func(_, o reservation.RuntimeIdentity) reservation.Allocation {
				return ent(0, 0, "", "2g.10gb", 2, 2).WithRuntime(o)
			},
			wantErr: realize.ErrHardwareMismatch,
		},
		{
			name: "same profile at another placement",
			forge: func(r, _ reservation.RuntimeIdentity) reservation.Allocation {
				return ent(0, 0, "", "2g.10gb", 0, 2).WithRuntime(r)
			},
			wantErr: realize.ErrHardwareMismatch,
		},
		{
			name: "other profile at the same placement",
			forge: func(r, _ reservation.RuntimeIdentity) reservation.Allocation {
				return ent(0, 0, "", "1g.10gb", 2, 2).WithRuntime(r)
			},
			wantErr: realize.ErrHardwareMismatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			// The real instance, and another unmanaged one.
			real, err := f.node.AddInstance(0, capability.GIProfile2Slice, capability.Placement{Start: 2, Size: 2})
			if err != nil {
				t.Fatal(err)
			}
			other, err := f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 6, Size: 1})
			if err != nil {
				t.Fatal(err)
			}
			e := tt.forge(identity(real), identity(other))
			e.GPUUUID = f.gpuUUID(0)
			f.schedule("a", e)
			before := f.node.Snapshot()
			rep, err := f.m.Adopt(context.Background(), f.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Adopted) != 0 || len(rep.Rejected) != 1 || !errors.Is(rep.Rejected[0].Err, tt.wantErr) {
				t.Fatalf("adopted %v rejected %v, want one rejection matching %v", rep.Adopted, rep.Rejected, tt.wantErr)
			}
			if got := len(f.node.Snapshot()); got != len(before) {
				t.Errorf("live = %d, want %d: a mismatch destroys nothing", got, len(before))
			}
			if len(rep.Leaks) != 2 {
				t.Errorf("leaks = %v, want both unmanaged instances", rep.Leaks)
			}
		})
	}
}

func identity(in realize.Instance) reservation.RuntimeIdentity {
	return reservation.RuntimeIdentity{MIGUUID: in.ComputeInstances[0].MIGUUID, GPUInstanceID: in.GIID, ComputeInstanceID: in.ComputeInstances[0].ID}
}

func TestAdoptCleansNothingWithoutTrust(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *fixture)
		reason error
	}{
		{"incomplete listing", func(f *fixture) { f.incomplete = true }, reservation.ErrIncompleteSnapshot},
		{"legacy pod", func(f *fixture) {
			requesting(f.schedule("legacy")).Annotations[reservation.LegacyDevicesAnnotationKey] = f.gpuUUID(1) + "[2-1],NVIDIA,9856,29:;"
		}, reservation.ErrLegacyIdentifier},
		{"malformed record", func(f *fixture) {
			requesting(f.schedule("bad")).Annotations[reservation.AnnotationKey] = `[{"containerIndex":-1}]`
		}, reservation.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 2)
			for gpu := range 2 {
				if _, err := f.node.AddInstance(gpu, capability.GIProfile3Slice, capability.Placement{Start: 4, Size: 4}); err != nil {
					t.Fatal(err)
				}
			}
			tt.change(f)
			rep, err := f.m.Adopt(context.Background(), f.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Authorized || !errors.Is(errors.Join(rep.Reasons...), tt.reason) {
				t.Errorf("authorised %t reasons %v, want not authorised because of %v", rep.Authorized, rep.Reasons, tt.reason)
			}
			if got := len(f.node.Snapshot()); got != 2 {
				t.Errorf("live = %d, want 2: nothing cleaned", got)
			}
			if len(rep.Leaks) != 2 {
				t.Errorf("leaks = %v, want 2 reported", rep.Leaks)
			}
		})
	}
}

func TestAdoptPreservesGPUWithProcesses(t *testing.T) {
	f := newFixture(t, 1)
	in, err := f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.node.StartProcess(0, in.ComputeInstances[0].MIGUUID); err != nil {
		t.Fatal(err)
	}
	rep, err := f.m.Adopt(context.Background(), f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.GPUs[0].Busy || rep.GPUs[0].Processes != 1 || len(rep.Leaks) != 1 || rep.Leaks[0].Processes != 1 {
		t.Errorf("report = %+v leaks %+v, want a busy GPU with one leak running a process", rep.GPUs, rep.Leaks)
	}
	if got := len(f.node.Snapshot()); got != 1 {
		t.Errorf("live = %d, want 1", got)
	}
}

func TestAdoptEnablesMIGOnIdleGPUs(t *testing.T) {
	tests := []struct {
		name      string
		enableMIG bool
		reserved  bool
		want      capability.MIGMode
	}{
		{"option off", false, false, capability.MIGDisabled},
		{"option on", true, false, capability.MIGEnabled},
		{"option on, GPU reserved", true, true, capability.MIGDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := fakehal.MustNew(fakehal.Options{MIGDisabled: true})
			m := realize.NewManager(node, realize.Options{EnableMIG: tt.enableMIG})
			snap := reservation.Snapshot{Complete: true}
			if tt.reserved {
				d, _ := node.Device(0)
				snap.Pods = append(snap.Pods, reservation.Pod{UID: "a", Phase: reservation.PodPending, Annotations: map[string]string{
					reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{ent(0, 0, d.UUID, "1g.5gb", 0, 1)})}})
			}
			rep, err := m.Adopt(context.Background(), snap)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := node.Device(0)
			if d.MIGMode != tt.want || rep.GPUs[0].MIGMode != tt.want || rep.GPUs[0].MIGEnabledNow != (tt.want == capability.MIGEnabled) {
				t.Errorf("MIG mode = %v (report %+v), want %v", d.MIGMode, rep.GPUs[0], tt.want)
			}
		})
	}
}

// TestAdoptEnableMIGLeavesBusyAndPendingGPUs: EnableMIG never touches a
// GPU that runs a process, and a change the driver leaves pending until a
// reset is reported on that GPU, not as an error of the pass.
func TestAdoptEnableMIGLeavesBusyAndPendingGPUs(t *testing.T) {
	t.Run("process on the GPU", func(t *testing.T) {
		node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel), MIGDisabled: true})
		if _, err := node.StartProcess(0, ""); err != nil {
			t.Fatal(err)
		}
		m := realize.NewManager(node, realize.Options{EnableMIG: true})
		rep, err := m.Adopt(context.Background(), reservation.Snapshot{Complete: true})
		if err != nil {
			t.Fatal(err)
		}
		busy, _ := node.Device(0)
		idle, _ := node.Device(1)
		if busy.MIGMode != capability.MIGDisabled || busy.PendingMIGMode != capability.MIGDisabled || !rep.GPUs[0].Busy || rep.GPUs[0].MIGEnabledNow {
			t.Errorf("GPU with a process: mode %v (pending %v), report %+v; want it left alone", busy.MIGMode, busy.PendingMIGMode, rep.GPUs[0])
		}
		if idle.MIGMode != capability.MIGEnabled || !rep.GPUs[1].MIGEnabledNow {
			t.Errorf("idle GPU: mode %v, report %+v; want MIG on", idle.MIGMode, rep.GPUs[1])
		}
	})
	t.Run("reset required", func(t *testing.T) {
		node := fakehal.MustNew(fakehal.Options{MIGDisabled: true, ModeChangeNeedsReset: true})
		m := realize.NewManager(node, realize.Options{EnableMIG: true})
		rep, err := m.Adopt(context.Background(), reservation.Snapshot{Complete: true})
		if err != nil {
			t.Fatalf("Adopt = %v, want no error for a GPU that waits for its reset", err)
		}
		d, _ := node.Device(0)
		g := rep.GPUs[0]
		if !errors.Is(g.MIGModeErr, realize.ErrResetRequired) || g.Err != nil || g.MIGEnabledNow || d.MIGMode != capability.MIGDisabled {
			t.Errorf("report %+v, mode %v; want MIGModeErr ErrResetRequired and MIG still off", g, d.MIGMode)
		}
	})
}

func TestCollectLeaks(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "3g.20gb", 0, 4))
	f.mustAllocate("a", 0)
	f.schedule("pending", ent(0, 0, f.gpuUUID(0), "1g.5gb", 5, 1))
	mustAdd := func(in realize.Instance, err error) realize.Instance {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	mustAdd(f.node.AddGPUInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 4, Size: 1}))      // GI without CI: collected
	mustAdd(f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 5, Size: 1}))         // claimed by a pending pod: left
	busy := mustAdd(f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 6, Size: 1})) // runs a process: left
	if _, err := f.node.StartProcess(0, busy.ComputeInstances[0].MIGUUID); err != nil {
		t.Fatal(err)
	}

	f.incomplete = true
	rep, err := f.m.CollectLeaks(ctx, f.snapshot())
	if err != nil || rep.Authorized || len(rep.Collected) != 0 {
		t.Fatalf("unauthorised collect = %+v, %v; want nothing collected", rep, err)
	}
	f.incomplete = false

	rep, err = f.m.CollectLeaks(ctx, f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Collected) != 1 || rep.Collected[0].Placement.Start != 4 || rep.Collected[0].ComputeInstances != 0 {
		t.Errorf("collected = %v, want the GI without CI at 4", rep.Collected)
	}
	if len(rep.Left) != 2 {
		t.Errorf("left = %v, want the claimed and the busy instance", rep.Left)
	}
	if got := f.m.Stats(); got.LeaksCollected != 1 || got.Managed != 1 || got.Leaks != 2 {
		t.Errorf("stats = %+v, want 1 collected and a's instance still managed", got)
	}
	if got := len(f.node.Snapshot()); got != 3 {
		t.Errorf("live = %d, want 3", got)
	}
}

// An active pod's annotation that names a live MIG device at another
// placement, or on another GPU, is inconsistent, but the pod may be using
// that device: no pass may destroy it as a remnant, a leak or idle-GPU
// leftovers.
func TestNeverDestroysInstanceAReservationNames(t *testing.T) {
	tests := []struct {
		name string
		// moved rewrites b's realized entry so that it no longer points at
		// its instance's key.
		moved func(f *fixture, e reservation.Allocation) reservation.Allocation
		// pass runs one destructive pass and checks its report.
		pass func(t *testing.T, f *fixture)
	}{
		{
			name: "Allocate of a pod reserved at the instance's placement",
			moved: func(_ *fixture, e reservation.Allocation) reservation.Allocation {
				e.Placement.Start = 2
				return e
			},
			pass: func(t *testing.T, f *fixture) {
				f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
				if _, err := f.allocate(context.Background(), "a", 0); !errors.Is(err, realize.ErrConflict) {
					t.Errorf("Allocate error = %v, want ErrConflict", err)
				}
			},
		},
		{
			name: "CollectLeaks",
			moved: func(_ *fixture, e reservation.Allocation) reservation.Allocation {
				e.Placement.Start = 2
				return e
			},
			pass: func(t *testing.T, f *fixture) {
				rep, err := f.m.CollectLeaks(context.Background(), f.snapshot())
				if err != nil || !rep.Authorized || len(rep.Collected) != 0 || len(rep.Left) != 1 || !rep.Left[0].Claimed {
					t.Errorf("CollectLeaks = %+v, %v; want the instance left as claimed", rep, err)
				}
			},
		},
		{
			name: "Adopt cleaning an idle GPU",
			moved: func(f *fixture, e reservation.Allocation) reservation.Allocation {
				e.GPUUUID = f.gpuUUID(1)
				return e
			},
			pass: func(t *testing.T, f *fixture) {
				rep, err := f.m.Adopt(context.Background(), f.snapshot())
				if err != nil || !rep.Authorized || !rep.GPUs[0].Busy || rep.GPUs[0].Cleaned != 0 {
					t.Errorf("Adopt = %+v, %v; want GPU 0 busy and not cleaned", rep, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 2)
			b := f.schedule("b", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
			realized := f.mustAllocate("b", 0).Devices[0].Entry
			b.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{tt.moved(f, realized)})
			f.restart()
			tt.pass(t, f)
			if got := f.live(); len(got) != 1 || got[0] != realized.MIGUUID {
				t.Errorf("live = %v, want b's %s untouched", got, realized.MIGUUID)
			}
			f.checkHardware()
		})
	}
}

// A realized reservation on a GPU that has left MIG mode names an
// instance that cannot exist: it is rejected as ErrMIGDisabled, and its
// GPU counts as busy, so it is not cleaned.
func TestAdoptRejectsIdentityOnMIGDisabledGPU(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	f.mustAllocate("a", 0)
	if err := f.node.ForceMIGMode(0, capability.MIGDisabled); err != nil {
		t.Fatal(err)
	}
	f.restart()
	rep, err := f.m.Adopt(context.Background(), f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rejected) != 1 || !errors.Is(rep.Rejected[0].Err, realize.ErrMIGDisabled) {
		t.Errorf("rejected = %v, want one ErrMIGDisabled", rep.Rejected)
	}
	if !rep.GPUs[0].Busy || len(rep.Adopted) != 0 {
		t.Errorf("report = %+v, want GPU 0 busy and nothing adopted", rep)
	}
}

// A pod whose record cannot be trusted may own what it names: on such a
// listing nothing is adopted, so an instance it names is not handed to
// another pod, even one whose record names it at its real placement.
func TestAdoptRefusesInstanceAnUntrustedPodNames(t *testing.T) {
	f := newFixture(t, 1)
	f.schedule("a", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
	realized := f.mustAllocate("a", 0).Devices[0].Entry
	elsewhere := realized
	elsewhere.Placement.Start = 2
	x := f.schedule("x", elsewhere)
	x.Annotations[reservation.LegacyDevicesAnnotationKey] = f.gpuUUID(0) + "[1-0],NVIDIA,4864,14:;"
	f.restart()
	rep, err := f.m.Adopt(context.Background(), f.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Authorized || len(rep.Adopted) != 0 || len(rep.Unverified) != 1 || rep.Unverified[0].PodUID != "a" {
		t.Errorf("authorised %t adopted %v unverified %v, want a's entry unverified", rep.Authorized, rep.Adopted, rep.Unverified)
	}
	if got := f.live(); len(got) != 1 || got[0] != realized.MIGUUID {
		t.Errorf("live = %v, want %s untouched", got, realized.MIGUUID)
	}
}

// Adopting is taking ownership: on a listing that is partial or holds an
// untrusted record, a forger's verbatim copy of a realized record looks
// valid while its real owner is missing or unreadable. Nothing is adopted
// then, so neither a later reconcile (once the forger is deleted) nor the
// forger's Allocate can take the real owner's device.
func TestAdoptAdoptsNothingWithoutTrust(t *testing.T) {
	tests := []struct {
		name string
		// listing is what the restarted plugin sees first.
		listing func(f *fixture) reservation.Snapshot
	}{
		{name: "partial listing without the owner", listing: func(f *fixture) reservation.Snapshot {
			return reservation.Snapshot{Pods: []reservation.Pod{*f.pod("forger")}}
		}},
		{name: "owner's record truncated", listing: func(f *fixture) reservation.Snapshot {
			s := f.snapshot()
			v := &s.Pods[0]
			v.Annotations = map[string]string{reservation.AnnotationKey: strings.TrimSuffix(v.Annotations[reservation.AnnotationKey], "]")}
			return s
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			f.schedule("victim", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
			mig := f.mustAllocate("victim", 0).Devices[0].Runtime.MIGUUID
			// The forger's container requests one device, so its verbatim
			// copy passes the trust rule.
			f.schedule("forger", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1)).Annotations[reservation.AnnotationKey] = f.pod("victim").Annotations[reservation.AnnotationKey]
			f.restart()
			ctx := context.Background()
			listing := tt.listing(f)
			rep, err := f.m.Adopt(ctx, listing)
			if err != nil || rep.Authorized || len(rep.Adopted) != 0 || len(rep.Unverified) == 0 {
				t.Fatalf("Adopt = %+v, %v; want nothing adopted, the forger's entry unverified", rep, err)
			}
			if res, err := f.m.Allocate(ctx, realize.AllocateRequest{Pod: *f.pod("forger"), Snapshot: listing}); err == nil {
				t.Errorf("forger's Allocate = %v, want a refusal", migUUIDs(res))
			}
			f.pod("forger").Deleting, f.pod("forger").ContainersTerminated = true, true
			if _, err := f.m.Reconcile(ctx, f.snapshot()); err != nil {
				t.Fatal(err)
			}
			if got := f.live(); len(got) != 1 || got[0] != mig {
				t.Errorf("live = %v, want the victim's %s", got, mig)
			}
		})
	}
}

// A leftover that overlaps a pending reservation without being at its
// placement cannot be that reservation's unpatched instance: it belongs to
// no one and blocks the reservation, so it is collected. How it arises: a
// 7g instance whose patch was lost, a restart, its pod ends, and the
// scheduler reserves a 1g on the freed slots.
func TestCollectLeaksFreesPendingReservation(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	f.schedule("old", ent(0, 0, f.gpuUUID(0), "7g.40gb", 0, 8))
	old := f.pod("old")
	if _, err := f.m.Allocate(ctx, realize.AllocateRequest{Pod: *old, Snapshot: f.snapshot()}); err != nil {
		t.Fatal(err) // and the patch is lost
	}
	f.terminate("old")
	f.schedule("new", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
	f.restart()
	if _, err := f.m.Adopt(ctx, f.snapshot()); err != nil {
		t.Fatal(err)
	}
	rep, err := f.m.CollectLeaks(ctx, f.snapshot())
	if err != nil || len(rep.Collected) != 1 || rep.Collected[0].Placement != (capability.Placement{Start: 0, Size: 8}) {
		t.Fatalf("CollectLeaks = %+v, %v; want the 7g leftover collected", rep, err)
	}
	f.mustAllocate("new", 0)
	f.checkHardware()
}
