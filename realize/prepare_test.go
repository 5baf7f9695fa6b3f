package realize_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// claims is a DRA driver's view for the tests: the ResourceClaims
// allocated to the node, and the identities its checkpoint recorded.
type claims struct {
	holders    []realize.Holder
	incomplete bool
}

// claim adds an allocated claim whose request 0 holds the devices.
func (c *claims) claim(uid string, devs ...reservation.Allocation) {
	h := realize.Holder{UID: uid, Namespace: "default", Name: "claim-" + uid}
	for _, d := range devs {
		h.Devices = append(h.Devices, realize.Want{Allocation: d})
	}
	c.holders = append(c.holders, h)
}

func (c *claims) get(uid string) *realize.Holder {
	for i := range c.holders {
		if c.holders[i].UID == uid {
			return &c.holders[i]
		}
	}
	return nil
}

// remove deletes a claim from the listing, as its deallocation does.
func (c *claims) remove(uid string) {
	c.holders = slices.DeleteFunc(c.holders, func(h realize.Holder) bool { return h.UID == uid })
}

// record stores prepared devices' identities, as a checkpoint does.
func (c *claims) record(uid string, devs []realize.Device) {
	h := c.get(uid)
	for _, d := range devs {
		h.Devices[d.Index].Allocation = d.Entry
	}
}

func (c *claims) demand() realize.Demand {
	hs := make([]realize.Holder, len(c.holders))
	for i, h := range c.holders {
		h.Devices = slices.Clone(h.Devices)
		hs[i] = h
	}
	return realize.Demand{Complete: !c.incomplete, Holders: hs, AdoptAtPlacement: true}
}

func mustPrepare(t *testing.T, f *fixture, c *claims, uid string) []realize.Device {
	t.Helper()
	devs, err := f.m.Prepare(context.Background(), c.demand(), uid)
	if err != nil {
		t.Fatalf("Prepare(%s): %v", uid, err)
	}
	c.record(uid, devs)
	return devs
}

func deviceUUIDs(devs []realize.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Runtime.MIGUUID)
	}
	return out
}

func TestPrepareIsIdempotent(t *testing.T) {
	f := newFixture(t, 2)
	var c claims
	c.claim("x", ent(0, 1, f.gpuUUID(1), "3g.20gb", 4, 4), ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	first := mustPrepare(t, f, &c, "x")
	if len(first) != 2 || first[0].Entry.DeviceIndex != 0 || first[0].Index != 1 || first[0].Origin != realize.OriginCreated {
		t.Fatalf("Prepare = %+v, want device 0 (listed second) first, created", first)
	}
	if got, want := f.live(), slices.Sorted(slices.Values(deviceUUIDs(first))); !slices.Equal(got, want) {
		t.Fatalf("live = %v, want %v", got, want)
	}
	creates := f.node.Calls(fakehal.OpCreateGI)
	for _, recorded := range []bool{false, true} {
		d := c.demand()
		if !recorded { // the checkpoint write was lost
			for i := range d.Holders[0].Devices {
				d.Holders[0].Devices[i].Allocation = d.Holders[0].Devices[i].Scheduled()
			}
		}
		again, err := f.m.Prepare(context.Background(), d, "x")
		if err != nil {
			t.Fatalf("repeated Prepare (recorded %t): %v", recorded, err)
		}
		if got, want := deviceUUIDs(again), deviceUUIDs(first); !slices.Equal(got, want) {
			t.Errorf("repeated Prepare (recorded %t) = %v, want %v", recorded, got, want)
		}
		for _, dev := range again {
			if dev.Origin != realize.OriginManaged {
				t.Errorf("repeated Prepare origin = %v, want managed", dev.Origin)
			}
		}
	}
	if got := f.node.Calls(fakehal.OpCreateGI); got != creates {
		t.Errorf("repeated Prepare created %d instances", got-creates)
	}
	f.checkHardware()
}

func TestPrepareRefusesBadRequests(t *testing.T) {
	f := newFixture(t, 1)
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	c.claim("empty")
	c.claim("gone", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
	c.get("gone").Released = true
	c.claim("bad", ent(0, 0, f.gpuUUID(0), "1g.5gb", 7, 1))
	unreadable := errors.New("unreadable device name")
	c.get("bad").Err = unreadable
	c.claim("untrusted", ent(0, 0, f.gpuUUID(0), "1g.5gb", 5, 1))
	c.get("untrusted").Devices[0].Untrusted = reservation.ErrNotRequested
	tests := []struct {
		name string
		uid  string
		want error
	}{
		{name: "empty UID", uid: "", want: realize.ErrInvalidRequest},
		{name: "unlisted", uid: "nope", want: realize.ErrNoReservation},
		{name: "no devices", uid: "empty", want: realize.ErrNoReservation},
		{name: "released", uid: "gone", want: realize.ErrInactivePod},
		{name: "unreadable", uid: "bad", want: unreadable},
		{name: "untrusted device", uid: "untrusted", want: reservation.ErrNotRequested},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.m.Prepare(context.Background(), c.demand(), tt.uid)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Prepare = %v, want %v", err, tt.want)
			}
		})
	}
	if got := f.live(); len(got) != 0 {
		t.Errorf("live = %v, want nothing created", got)
	}
}

func TestPrepareRollsBackWhenALaterDeviceFails(t *testing.T) {
	f := newFixture(t, 2)
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2), ent(0, 1, f.gpuUUID(1), "3g.20gb", 0, 4))
	boom := errors.New("injected")
	fault := f.node.FailNth(fakehal.OpCreateCI, 2, boom)
	_, err := f.m.Prepare(context.Background(), c.demand(), "x")
	var ee *realize.EntryError
	if !errors.Is(err, boom) || !errors.As(err, &ee) || ee.Index != 1 || ee.PodUID != "x" {
		t.Fatalf("Prepare = %v, want the second device's injected failure", err)
	}
	if got := f.live(); len(got) != 0 {
		t.Errorf("live after rollback = %v, want none", got)
	}
	if got := f.m.Stats(); got.Rollbacks != 1 || got.Managed != 0 {
		t.Errorf("stats = %+v, want 1 rollback, nothing managed", got)
	}
	fault.Remove()
	if devs := mustPrepare(t, f, &c, "x"); len(devs) != 2 {
		t.Fatalf("retry = %v, want 2 devices", devs)
	}
	f.checkHardware()
}

func TestPrepareRollbackTouchesNoOtherHolder(t *testing.T) {
	f := newFixture(t, 2)
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	first := mustPrepare(t, f, &c, "x")
	c.claim("y", ent(0, 0, f.gpuUUID(1), "2g.10gb", 0, 2), ent(0, 1, f.gpuUUID(1), "2g.10gb", 2, 2))
	f.node.FailNth(fakehal.OpCreateGI, 2, errors.New("injected"))
	if _, err := f.m.Prepare(context.Background(), c.demand(), "y"); err == nil {
		t.Fatal("Prepare(y) succeeded despite the fault")
	}
	if got, want := f.live(), deviceUUIDs(first); !slices.Equal(got, want) {
		t.Errorf("live = %v, want only x's %v", got, want)
	}
}

func TestUnprepare(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2), ent(1, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
	c.claim("y", ent(0, 0, f.gpuUUID(0), "1g.5gb", 4, 1))
	mustPrepare(t, f, &c, "x")
	y := mustPrepare(t, f, &c, "y")

	rep, err := f.m.Unprepare(ctx, c.demand(), "x")
	if err != nil || len(rep.Released) != 2 || len(rep.Kept) != 0 {
		t.Fatalf("Unprepare = %+v, %v; want x's 2 instances released", rep, err)
	}
	if got, want := f.live(), deviceUUIDs(y); !slices.Equal(got, want) {
		t.Errorf("live = %v, want only y's %v", got, want)
	}
	// Idempotent, listed or not, and even on an incomplete listing.
	for _, mutate := range []func(){func() {}, func() { c.remove("x") }, func() { c.incomplete = true }} {
		mutate()
		rep, err := f.m.Unprepare(ctx, c.demand(), "x")
		if err != nil || len(rep.Released)+len(rep.Kept)+len(rep.Vanished) != 0 {
			t.Errorf("repeated Unprepare = %+v, %v; want nothing done", rep, err)
		}
	}
	if got := f.m.Stats().Managed; got != 1 {
		t.Errorf("managed = %d, want y's 1", got)
	}
	f.checkHardware()
}

func TestUnprepareKeepsWhatIsInUseOrNamed(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	x := mustPrepare(t, f, &c, "x")
	pid, err := f.node.StartProcess(0, x[0].Runtime.MIGUUID)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.m.Unprepare(ctx, c.demand(), "x")
	if !errors.Is(err, realize.ErrInUse) || len(rep.Kept) != 1 || len(rep.Released) != 0 {
		t.Fatalf("Unprepare with a process = %+v, %v; want kept, ErrInUse", rep, err)
	}
	if err := f.node.StopProcess(pid); err != nil {
		t.Fatal(err)
	}

	// Another holder's recorded identity names the instance: x's
	// claim is gone, y's checkpoint (forged or stale) names x's device.
	c.remove("x")
	c.claim("y", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2).WithRuntime(x[0].Runtime))
	rep, err = f.m.Unprepare(ctx, c.demand(), "x")
	if !errors.Is(err, realize.ErrConflict) || len(rep.Kept) != 1 {
		t.Fatalf("Unprepare of a named instance = %+v, %v; want kept, ErrConflict", rep, err)
	}
	if got := f.live(); !slices.Equal(got, deviceUUIDs(x)) {
		t.Errorf("live = %v, want x's device kept", got)
	}

	// A holder that merely wants the same placement does not keep it.
	c.remove("y")
	c.claim("y", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	if _, err := f.m.Prepare(ctx, c.demand(), "y"); !errors.Is(err, realize.ErrConflict) {
		t.Fatalf("Prepare(y) while x's instance is managed = %v, want ErrConflict", err)
	}
	if rep, err = f.m.Unprepare(ctx, c.demand(), "x"); err != nil || len(rep.Released) != 1 {
		t.Fatalf("Unprepare = %+v, %v; want released", rep, err)
	}
	y := mustPrepare(t, f, &c, "y")
	if y[0].Runtime.MIGUUID == x[0].Runtime.MIGUUID {
		t.Errorf("y received x's MIG device %s", x[0].Runtime.MIGUUID)
	}
}

// TestUnprepareIgnoresOtherHolders: Unprepare depends only on the
// holder's own devices and records and the hardware. An incomplete
// listing, or unreadable or conflicting holders elsewhere on the node,
// neither block it nor let it touch anything but the holder's instances.
func TestUnprepareIgnoresOtherHolders(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *claims, f *fixture)
	}{
		{name: "incomplete", mutate: func(c *claims, _ *fixture) { c.incomplete = true }},
		{name: "unreadable holder", mutate: func(c *claims, f *fixture) {
			c.claim("bad", ent(0, 0, f.gpuUUID(0), "1g.5gb", 0, 1))
			c.get("bad").Err = errors.New("unreadable")
		}},
		{name: "conflicting holders", mutate: func(c *claims, f *fixture) {
			c.claim("p", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1))
			c.claim("q", ent(0, 0, f.gpuUUID(0), "2g.10gb", 6, 2))
		}},
		{name: "holder missing from the listing", mutate: func(c *claims, _ *fixture) { c.remove("x") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1)
			var c claims
			c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
			c.claim("y", ent(0, 0, f.gpuUUID(0), "1g.5gb", 4, 1))
			mustPrepare(t, f, &c, "x")
			y := mustPrepare(t, f, &c, "y")
			tt.mutate(&c, f)
			rep, err := f.m.Unprepare(context.Background(), c.demand(), "x")
			if err != nil || len(rep.Released) != 1 {
				t.Fatalf("Unprepare = %+v, %v; want x's instance released", rep, err)
			}
			if got := f.live(); !slices.Equal(got, deviceUUIDs(y)) {
				t.Errorf("live = %v, want only y's %v", got, deviceUUIDs(y))
			}
		})
	}
}

func TestConflictingHoldersAreWithheld(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	x := mustPrepare(t, f, &c, "x")
	// y overlaps x: a forged or buggy allocation. Both are withheld.
	c.claim("y", ent(0, 0, f.gpuUUID(0), "3g.20gb", 0, 4))
	for _, uid := range []string{"x", "y"} {
		_, err := f.m.Prepare(ctx, c.demand(), uid)
		var ce *realize.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, reservation.ErrConflict) {
			t.Errorf("Prepare(%s) = %v, want a conflict", uid, err)
		}
	}
	// x's claim is gone, but y and a third claim z conflict: nothing is
	// destroyed, not even x's instance, until the listing is trustworthy.
	c.remove("x")
	c.claim("z", ent(0, 0, f.gpuUUID(0), "1g.5gb", 3, 1))
	rr, err := f.m.ReconcileDemand(ctx, c.demand())
	if err != nil || rr.Authorized || len(rr.Released) != 0 {
		t.Fatalf("ReconcileDemand = %v, %v; want not authorised, nothing released", rr, err)
	}
	lr, err := f.m.CollectLeaksDemand(ctx, c.demand())
	if err != nil || lr.Authorized || len(lr.Collected) != 0 {
		t.Fatalf("CollectLeaksDemand = %+v, %v; want nothing collected", lr, err)
	}
	if got := f.live(); !slices.Equal(got, deviceUUIDs(x)) {
		t.Errorf("live = %v, want x's device kept", got)
	}
	ar, err := f.m.AdoptDemand(ctx, c.demand())
	if err != nil || ar.Authorized || len(ar.Adopted) != 0 {
		t.Errorf("AdoptDemand = %+v, %v; want nothing adopted", ar, err)
	}
	if len(ar.Reasons) == 0 {
		t.Error("AdoptDemand gave no reason")
	}
}

func TestReconcileDemandReleasesEndedHolders(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	c.claim("y", ent(0, 0, f.gpuUUID(0), "1g.5gb", 4, 1))
	c.claim("z", ent(0, 0, f.gpuUUID(0), "1g.5gb", 5, 1))
	mustPrepare(t, f, &c, "x")
	y := mustPrepare(t, f, &c, "y")
	mustPrepare(t, f, &c, "z")
	c.get("x").Released = true
	c.remove("z") // gone: released only after AbsentPodGrace
	rr, err := f.m.ReconcileDemand(ctx, c.demand())
	if err != nil || len(rr.Released) != 1 || rr.Released[0].Owner.PodUID != "x" || len(rr.Deferred) != 1 {
		t.Fatalf("ReconcileDemand = %v, %v; want x released, z deferred", rr, err)
	}
	f.clock.Advance(2 * time.Minute) // past Options.AbsentPodGrace's default
	rr, err = f.m.ReconcileDemand(ctx, c.demand())
	if err != nil || len(rr.Released) != 1 || rr.Released[0].Owner.PodUID != "z" {
		t.Fatalf("second ReconcileDemand = %v, %v; want z released", rr, err)
	}
	if got := f.live(); !slices.Equal(got, deviceUUIDs(y)) {
		t.Errorf("live = %v, want only y's", got)
	}
}

func TestAdoptDemandAfterRestart(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		name := "by placement"
		if recorded {
			name = "by runtime identity"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 2)
			ctx := context.Background()
			var c claims
			c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2), ent(0, 1, f.gpuUUID(1), "3g.20gb", 4, 4))
			c.claim("y", ent(0, 0, f.gpuUUID(0), "1g.5gb", 4, 1))
			x := mustPrepare(t, f, &c, "x")
			mustPrepare(t, f, &c, "y")
			if !recorded { // the checkpoint was lost
				for i := range c.holders {
					for j := range c.holders[i].Devices {
						c.holders[i].Devices[j].Allocation = c.holders[i].Devices[j].Scheduled()
					}
				}
			}
			if _, err := f.node.AddInstance(0, capability.GIProfile1Slice, capability.Placement{Start: 6, Size: 1}); err != nil {
				t.Fatal(err) // a leak on a busy GPU
			}
			f.restart()
			rep, err := f.m.MaintainDemand(ctx, c.demand())
			if err != nil || rep.Adopt == nil || len(rep.Adopt.Adopted) != 3 || !rep.Settled {
				t.Fatalf("MaintainDemand = %+v, %v; want 3 adopted, settled", rep, err)
			}
			if rep.Leaks == nil || len(rep.Leaks.Collected) != 1 {
				t.Errorf("leaks = %+v, want the leak collected", rep.Leaks)
			}
			creates := f.node.Calls(fakehal.OpCreateGI)
			again, err := f.m.Prepare(ctx, c.demand(), "x")
			if err != nil || !slices.Equal(deviceUUIDs(again), deviceUUIDs(x)) {
				t.Fatalf("Prepare after restart = %v, %v; want %v", deviceUUIDs(again), err, deviceUUIDs(x))
			}
			if f.node.Calls(fakehal.OpCreateGI) != creates {
				t.Error("Prepare after restart created instances")
			}
			f.checkHardware()
		})
	}
}

func TestAdoptAtPlacementRefusesOthersInstances(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("old", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	old := mustPrepare(t, f, &c, "old")
	c.get("old").Released = true // ended, its instance not yet released
	c.claim("new", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	f.restart()
	rep, err := f.m.AdoptDemand(ctx, c.demand())
	if err != nil || len(rep.Adopted) != 0 || len(rep.Rejected) != 1 || !errors.Is(rep.Rejected[0].Err, realize.ErrConflict) {
		t.Fatalf("AdoptDemand = %+v, %v; want the ended holder's instance refused", rep, err)
	}
	// Without AdoptAtPlacement, an unrecorded device is left for Prepare.
	d := c.demand()
	d.AdoptAtPlacement = false
	if rep, err = f.m.AdoptDemand(ctx, d); err != nil || len(rep.Adopted) != 0 || len(rep.Pending) != 1 {
		t.Fatalf("AdoptDemand without AdoptAtPlacement = %+v, %v; want pending", rep, err)
	}
	// Prepare never hands the ended holder's instance out.
	devs, err := f.m.Prepare(ctx, c.demand(), "new")
	if err == nil && devs[0].Runtime.MIGUUID == old[0].Runtime.MIGUUID {
		t.Fatalf("new received the ended holder's device %s", old[0].Runtime.MIGUUID)
	}
}

func TestUnprepareAfterRestart(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		f := newFixture(t, 1)
		ctx := context.Background()
		var c claims
		c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
		mustPrepare(t, f, &c, "x")
		if !recorded {
			c.get("x").Devices[0].Allocation = c.get("x").Devices[0].Scheduled()
		}
		f.restart()
		rep, err := f.m.Unprepare(ctx, c.demand(), "x")
		if err != nil || len(rep.Adopted) != 1 || len(rep.Released) != 1 {
			t.Fatalf("Unprepare after restart (recorded %t) = %+v, %v; want adopted and released", recorded, rep, err)
		}
		if got := f.live(); len(got) != 0 {
			t.Errorf("live = %v, want none", got)
		}
	}
}

func TestPodDemandMatchesTheAnnotationPath(t *testing.T) {
	type outcome struct {
		adopted, released, collected, leftLeaks, pending int
		authorized                                       bool
	}
	run := func(viaDemand bool) outcome {
		f := newFixture(t, 2)
		ctx := context.Background()
		f.schedule("a", ent(0, 0, f.gpuUUID(0), "2g.10gb", 0, 2))
		f.schedule("b", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
		f.schedule("c", ent(0, 0, f.gpuUUID(1), "2g.10gb", 2, 2))
		f.mustAllocate("a", 0)
		f.mustAllocate("b", 0)
		f.terminate("b")
		f.schedule("d", ent(0, 0, f.gpuUUID(0), "1g.5gb", 6, 1)) // pending
		f.restart()
		var rep realize.MaintainReport
		var err error
		if viaDemand {
			rep, err = f.m.MaintainDemand(ctx, realize.PodDemand(f.snapshot()))
		} else {
			rep, err = f.m.Maintain(ctx, f.snapshot())
		}
		if err != nil || rep.Adopt == nil || rep.Leaks == nil {
			t.Fatalf("Maintain (via demand %t) = %+v, %v", viaDemand, rep, err)
		}
		again := f.mustAllocate("a", 0)
		if again.Devices[0].Origin != realize.OriginManaged {
			t.Errorf("Allocate after adoption (via demand %t) = %+v, want a's managed device", viaDemand, again.Devices)
		}
		return outcome{len(rep.Adopt.Adopted), len(rep.Reconcile.Released), len(rep.Leaks.Collected), len(rep.Leaks.Left),
			len(rep.Adopt.Pending), rep.Adopt.Authorized}
	}
	got, want := run(true), run(false)
	if got != want {
		t.Errorf("via PodDemand = %+v, via the snapshot = %+v", got, want)
	}
	if want.adopted != 1 || want.collected != 1 || want.pending != 2 {
		t.Errorf("outcome = %+v, want a adopted, b's instance collected, c and d pending", want)
	}
}

// An instance at exactly an unrecorded claim's placement that runs
// processes may be an ended claim's whose record was lost: it is neither
// adopted nor handed out by placement, and nothing destroys it.
func TestAdoptAtPlacementLeavesBusyInstances(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	var c claims
	c.claim("x", ent(0, 0, f.gpuUUID(0), "2g.10gb", 2, 2))
	x := mustPrepare(t, f, &c, "x")
	if _, err := f.node.StartProcess(0, x[0].Runtime.MIGUUID); err != nil {
		t.Fatal(err)
	}
	c.get("x").Devices[0].Allocation = c.get("x").Devices[0].Scheduled() // the checkpoint is lost
	f.restart()
	rep, err := f.m.MaintainDemand(ctx, c.demand())
	if err != nil || len(rep.Adopt.Adopted) != 0 || len(rep.Adopt.Pending) != 1 {
		t.Fatalf("MaintainDemand = %+v, %v; want x pending, nothing adopted", rep.Adopt, err)
	}
	if rep.Leaks == nil || len(rep.Leaks.Collected) != 0 || len(rep.Leaks.Left) != 1 || !rep.Leaks.Left[0].Claimed {
		t.Errorf("leaks = %+v, want x's instance left, claimed", rep.Leaks)
	}
	if _, err := f.m.Prepare(ctx, c.demand(), "x"); !errors.Is(err, realize.ErrOccupied) {
		t.Errorf("Prepare of a busy unrecorded instance = %v, want ErrOccupied", err)
	}
	// Unprepare cannot destroy it while it is busy, and says so.
	if _, err := f.m.Unprepare(ctx, c.demand(), "x"); !errors.Is(err, realize.ErrInUse) {
		t.Errorf("Unprepare of a busy instance = %v, want ErrInUse", err)
	}
	if got := f.live(); !slices.Equal(got, deviceUUIDs(x)) {
		t.Errorf("live = %v, want x's device kept", got)
	}
}
