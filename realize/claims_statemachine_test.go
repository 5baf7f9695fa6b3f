package realize_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
	"github.com/dynmig/dynmig/reservation"
)

// TestClaimStateMachine drives a manager the way the DRA kubelet plugin
// (package dradriver) does, through random sequences of claim allocation,
// Prepare (checkpointed PrepareStarted before, PrepareCompleted after),
// repeated Prepare, force deletion (the claim is deallocated while its
// container may still run, and the scheduler reuses its slots at once:
// release before unprepare), re-allocation of a deallocated claim under the
// same UID, Unprepare, admin-access claims, processes, maintenance on
// complete and incomplete listings, restarts with and without the plugin's
// checkpoint, overlapping allocations (a claim allocated a device another
// still holds, and unrelated conflicting claims), forged identities and
// injected faults. The plugin lists every checkpointed claim with its
// checkpointed devices, never as released, and every other allocated
// claim with its allocation, a device overlapping a checkpointed claim's
// being untrusted; admin-access claims hold nothing and are not listed.
// After every step it checks that
//
//   - the hardware never holds overlapping instances (fakehal's Check),
//   - realizetest.Safety's invariants hold for claims, a claim being
//     released only when the kubelet unprepares it: no device of a claim
//     not yet unprepared (force-deleted or not), and no instance running
//     processes, is ever destroyed; no claim is ever handed another
//     claim's MIG device; no forged claim obtains anything,
//   - a repeated Prepare returns the devices the first one returned,
//   - an incomplete listing destroys nothing,
//   - a successful Unprepare leaves none of the claim's devices live, and
//     neither conflicts between other claims nor the listing's
//     completeness fail it,
//   - adoption after a restart on an authorised listing recovers every
//     prepared claim's devices, with or without the checkpoint,
//
// and, at the end, that once faults stop and every claim ends, Unprepare
// and maintenance leave the hardware empty.
func TestClaimStateMachine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sm := newClaimMachine(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"allocate":      sm.allocate,
			"allocateAdmin": sm.allocateAdmin,
			"prepare":       sm.prepare,
			"repeatPrepare": sm.repeatPrepare,
			"forceDelete":   sm.forceDelete,
			"reallocate":    sm.reallocate,
			"unprepare":     sm.unprepare,
			"startProcess":  sm.startProcess,
			"stopProcess":   sm.stopProcess,
			"maintain":      sm.maintain,
			"restart":       sm.restart,
			"overlap":       sm.overlap,
			"forgeIdentity": sm.forgeIdentity,
			"injectFault":   sm.injectFault,
			"":              sm.check,
		})
		sm.drain(rt)
	})
}

// ckEntry is the plugin's checkpoint entry of a claim.
type ckEntry struct {
	devices   []reservation.Allocation // with identities once completed
	completed bool
}

type smClaim struct {
	uid       string
	devices   []reservation.Allocation // the current allocation
	allocated bool                     // the scheduler's allocation stands
	ended     bool                     // its pod is gone: the kubelet may unprepare it
	admin     bool                     // allocated with admin access: holds nothing
	ck        *ckEntry                 // the plugin's checkpoint, nil when none
	received  []string                 // MIG UUIDs handed to the kubelet, by device position
}

type claimMachine struct {
	node     *fakehal.Node
	m        *realize.Manager
	profiles []capability.GIProfileInfo
	claims   []*smClaim
	nextUID  int
	safety   *realizetest.Safety
	procs    map[uint32]string // pid -> MIG UUID
	faults   []*fakehal.Injected
	clock    *fakeClock
}

func newClaimMachine(t *rapid.T) *claimMachine {
	base := newMachine(t)
	return &claimMachine{node: base.node, m: base.m, profiles: base.profiles, safety: base.safety,
		procs: map[uint32]string{}, clock: base.clock}
}

func (s *claimMachine) gpuUUID(i int) string {
	d, _ := s.node.Device(i)
	return d.UUID
}

// heldBy returns the claim, other than self, whose checkpoint holds a
// device overlapping a.
func (s *claimMachine) heldBy(a reservation.Allocation, self *smClaim) (*smClaim, bool) {
	for _, c := range s.claims {
		if c == self || c.ck == nil {
			continue
		}
		for _, d := range c.ck.devices {
			if d.GPUUUID == a.GPUUUID && d.Placement.Overlaps(a.Placement) {
				return c, true
			}
		}
	}
	return nil, false
}

// holder is the claim as the plugin lists it: its checkpointed devices
// when checkpointed, else its allocation, with the devices that overlap
// another claim's checkpointed ones untrusted.
func (s *claimMachine) holder(c *smClaim) realize.Holder {
	h := realize.Holder{UID: c.uid, Namespace: "ns", Name: c.uid}
	if c.ck != nil {
		for _, d := range c.ck.devices {
			h.Devices = append(h.Devices, realize.Want{Allocation: d})
		}
		return h
	}
	for _, d := range c.devices {
		w := realize.Want{Allocation: d}
		if o, held := s.heldBy(d, c); held {
			w.Untrusted = fmt.Errorf("device held by claim %s", o.uid)
		}
		h.Devices = append(h.Devices, w)
	}
	return h
}

// demand lists every checkpointed claim and every other allocated one;
// never a released holder, never an admin-access claim.
func (s *claimMachine) demand(complete bool) realize.Demand {
	d := realize.Demand{Complete: complete, AdoptAtPlacement: true}
	for _, c := range s.claims {
		if !c.admin && (c.ck != nil || c.allocated) {
			d.Holders = append(d.Holders, s.holder(c))
		}
	}
	return d
}

// unprepareDemand is demand with the claim's holder its checkpointed one
// alone, as the plugin unprepares.
func (s *claimMachine) unprepareDemand(t *rapid.T, c *smClaim) realize.Demand {
	d := s.demand(rapid.IntRange(0, 3).Draw(t, "complete") > 0)
	if c.ck == nil {
		d.Holders = slices.DeleteFunc(d.Holders, func(h realize.Holder) bool { return h.UID == c.uid })
	}
	return d
}

func (s *claimMachine) armed() bool {
	s.faults = slices.DeleteFunc(s.faults, func(f *fakehal.Injected) bool { return f.Fired() > 0 })
	return len(s.faults) > 0
}

// free reports whether p is free of every allocated claim's device on gpu,
// as the scheduler sees it: a deallocated claim's slots are free at once,
// unprepared or not.
func (s *claimMachine) free(gpu string, p capability.Placement, extra []reservation.Allocation) bool {
	for _, c := range s.claims {
		if !c.allocated || c.admin {
			continue
		}
		for _, e := range c.devices {
			if e.GPUUUID == gpu && e.Placement.Overlaps(p) {
				return false
			}
		}
	}
	for _, e := range extra {
		if e.GPUUUID == gpu && e.Placement.Overlaps(p) {
			return false
		}
	}
	return true
}

func (s *claimMachine) newUID(prefix string) string {
	s.nextUID++
	return fmt.Sprintf("%s-%d", prefix, s.nextUID)
}

// drawDevices draws one or two devices at placements the scheduler sees
// free.
func (s *claimMachine) drawDevices(t *rapid.T) []reservation.Allocation {
	n := rapid.IntRange(1, 2).Draw(t, "devices")
	var devs []reservation.Allocation
	for d := range n {
		gpu := s.gpuUUID(rapid.IntRange(0, smGPUs-1).Draw(t, "gpu"))
		prof := rapid.SampledFrom(s.profiles).Draw(t, "profile")
		var fits []capability.Placement
		for _, p := range prof.Placements {
			if s.free(gpu, p, devs) {
				fits = append(fits, p)
			}
		}
		if len(fits) == 0 {
			t.Skip("no free placement")
		}
		p := rapid.SampledFrom(fits).Draw(t, "placement")
		devs = append(devs, ent(0, d, gpu, prof.Name, p.Start, p.Size))
	}
	return devs
}

// allocate allocates a new claim one or two devices at free placements.
func (s *claimMachine) allocate(t *rapid.T) {
	s.claims = append(s.claims, &smClaim{uid: s.newUID("claim"), devices: s.drawDevices(t), allocated: true})
}

// allocateAdmin allocates, with admin access, a device another claim
// holds or was allocated: the plugin neither lists nor realizes it, so it
// must not keep anyone from anything (checked by the other steps).
func (s *claimMachine) allocateAdmin(t *rapid.T) {
	victim := s.pick(t, "claim to monitor", func(c *smClaim) bool { return !c.admin && c.allocated })
	d := victim.devices[rapid.IntRange(0, len(victim.devices)-1).Draw(t, "device")]
	d.DeviceIndex = 0
	s.claims = append(s.claims, &smClaim{uid: s.newUID("admin"), devices: []reservation.Allocation{d}, allocated: true, admin: true})
}

func (s *claimMachine) pick(t *rapid.T, label string, ok func(*smClaim) bool) *smClaim {
	var c []*smClaim
	for _, x := range s.claims {
		if ok(x) {
			c = append(c, x)
		}
	}
	if len(c) == 0 {
		t.Skip("no " + label)
	}
	return rapid.SampledFrom(c).Draw(t, label)
}

func (s *claimMachine) prepare(t *rapid.T) {
	// A re-allocated claim (ended, allocated again) whose earlier
	// preparation completed is refused until it is unprepared.
	s.doPrepare(t, s.pick(t, "allocated claim", func(c *smClaim) bool {
		return c.allocated && !c.admin && (!c.ended || c.ck != nil && c.ck.completed)
	}))
}

func (s *claimMachine) repeatPrepare(t *rapid.T) {
	s.doPrepare(t, s.pick(t, "prepared claim", func(c *smClaim) bool { return c.allocated && !c.admin && !c.ended && c.received != nil }))
}

// sameScheduled reports whether the checkpointed devices are the
// allocation's, identities aside.
func sameScheduled(a, b []reservation.Allocation) bool {
	return slices.EqualFunc(a, b, func(x, y reservation.Allocation) bool { return x.Scheduled() == y.Scheduled() })
}

// doPrepare is the plugin's PrepareResourceClaims of c.
func (s *claimMachine) doPrepare(t *rapid.T, c *smClaim) {
	ctx := context.Background()
	if c.ended || c.ck != nil && c.ck.completed && !sameScheduled(c.ck.devices, c.devices) {
		return // re-allocated before its earlier preparation was unprepared: refused
	}
	for _, d := range c.devices {
		if _, held := s.heldBy(d, c); held {
			return // a device another checkpointed claim holds: refused
		}
	}
	armed := s.armed()
	if c.ck != nil && !c.ck.completed && !sameScheduled(c.ck.devices, c.devices) {
		// An earlier attempt for other devices, never handed out: rolled back.
		if _, err := s.m.Unprepare(ctx, s.demand(true), c.uid); err != nil {
			if !armed && !errors.Is(err, realize.ErrInUse) {
				t.Fatalf("rollback of %s's started preparation: %v", c.uid, err)
			}
			return
		}
		c.ck = nil
	}
	if c.ck == nil {
		c.ck = &ckEntry{devices: slices.Clone(c.devices)} // PrepareStarted
	}
	h := s.holder(c)
	devs, err := s.m.Prepare(ctx, s.demand(true), c.uid)
	if err != nil {
		if !armed && !errors.Is(err, realize.ErrOccupied) && !errors.Is(err, realize.ErrConflict) {
			t.Fatalf("Prepare(%s) without faults: %v", c.uid, err)
		}
		return
	}
	if c.received == nil && rapid.IntRange(0, 5).Draw(t, "crash before completing") == 0 {
		// The plugin died before checkpointing PrepareCompleted and
		// answering: kubelet never saw these devices and retries later.
		return
	}
	if err := s.safety.GrantHolder(h, devs); err != nil {
		t.Fatal(err)
	}
	if len(devs) != len(c.devices) {
		t.Fatalf("Prepare(%s) = %d devices, want %d", c.uid, len(devs), len(c.devices))
	}
	got := make([]string, len(c.devices))
	recorded := make([]reservation.Allocation, len(c.devices))
	for _, d := range devs {
		got[d.Index] = d.Runtime.MIGUUID
		recorded[d.Index] = d.Entry
	}
	if c.received != nil && !slices.Equal(got, c.received) {
		t.Fatalf("repeated Prepare(%s) = %v, want %v", c.uid, got, c.received)
	}
	c.received, c.ck = got, &ckEntry{devices: recorded, completed: true}
}

// forceDelete deallocates a claim while its pod's container may still
// run (a force-deleted pod): the scheduler may hand its slots out at once,
// but it is not released until the kubelet unprepares it.
func (s *claimMachine) forceDelete(t *rapid.T) {
	c := s.pick(t, "claim to force-delete", func(c *smClaim) bool { return c.allocated && !c.ended })
	c.allocated, c.ended = false, true
	if c.ck == nil {
		// Prepared before the checkpoint was lost: only the allocation
		// named its devices, and the plugin no longer lists it (the
		// residual risk package realize documents).
		for _, u := range c.received {
			s.safety.Forget(u)
		}
		c.received = nil
	}
}

// reallocate allocates a force-deleted claim again, under the same UID,
// at other free placements, before its earlier preparation is unprepared.
func (s *claimMachine) reallocate(t *rapid.T) {
	c := s.pick(t, "deallocated prepared claim", func(c *smClaim) bool { return !c.allocated && !c.admin && c.ended && c.ck != nil })
	c.devices, c.allocated = s.drawDevices(t), true
}

// unprepare is the kubelet's NodeUnprepareResources once the claim's pod
// is gone: it releases the claim. It depends only on the claim's own
// checkpoint and the hardware.
func (s *claimMachine) unprepare(t *rapid.T) {
	c := s.pick(t, "ended claim", func(c *smClaim) bool { return c.ended })
	s.doUnprepare(t, c, false)
}

func (s *claimMachine) doUnprepare(t *rapid.T, c *smClaim, final bool) {
	s.safety.Release(c.uid)
	armed := s.armed()
	rep, err := s.m.Unprepare(context.Background(), s.unprepareDemand(t, c), c.uid)
	if err != nil {
		if final || (!armed && !errors.Is(err, realize.ErrInUse)) {
			t.Fatalf("Unprepare(%s): %+v, %v", c.uid, rep, err)
		}
		return
	}
	live := liveMIGs(s.node)
	for _, u := range c.received {
		// Without a checkpoint entry (lost) the plugin knows nothing of
		// the claim to unprepare: leak collection reclaims its device.
		if live[u] && c.ck != nil {
			t.Fatalf("Unprepare(%s) succeeded but its device %s is live: %+v", c.uid, u, rep)
		}
	}
	c.ck, c.received, c.ended = nil, nil, false
}

func (s *claimMachine) startProcess(t *rapid.T) {
	// A force-deleted claim's container may still run processes.
	c := s.pick(t, "claim with a device", func(c *smClaim) bool { return c.received != nil })
	uuid := rapid.SampledFrom(c.received).Draw(t, "device")
	for gpu := range smGPUs {
		if pid, err := s.node.StartProcess(gpu, uuid); err == nil {
			s.procs[pid] = uuid
			return
		}
	}
	if c.ended {
		t.Skip("an unprepare of the claim already destroyed part of it") // then failed, to be retried
	}
	t.Fatalf("claim %s's device %s is not live", c.uid, uuid)
}

func (s *claimMachine) stopProcess(t *rapid.T) {
	if len(s.procs) == 0 {
		t.Skip("no process")
	}
	pids := make([]uint32, 0, len(s.procs))
	for pid := range s.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	pid := rapid.SampledFrom(pids).Draw(t, "pid")
	if err := s.node.StopProcess(pid); err != nil {
		t.Fatal(err)
	}
	delete(s.procs, pid)
}

func (s *claimMachine) maintain(t *rapid.T) {
	if rapid.Bool().Draw(t, "grace passes") {
		s.clock.Advance(time.Hour)
	}
	complete := rapid.IntRange(0, 3).Draw(t, "complete") > 0
	armed := s.armed()
	before := len(s.node.Snapshot())
	rep, err := s.m.MaintainDemand(context.Background(), s.demand(complete))
	if !complete {
		if len(s.node.Snapshot()) != before || rep.Reconcile.Authorized {
			t.Fatalf("MaintainDemand on an incomplete listing destroyed instances or was authorised: %+v", rep)
		}
		return
	}
	if err != nil && !armed {
		t.Fatalf("MaintainDemand without faults: %v", err)
	}
}

// restart replaces the manager; the checkpoint survives or is lost.
func (s *claimMachine) restart(t *rapid.T) {
	s.m = realize.NewManager(s.node, realize.Options{Now: s.clock.Now})
	if rapid.Bool().Draw(t, "checkpoint lost") {
		// The plugin forgets every claim it prepared: nothing proves
		// any more who used their instances (the residual risk package
		// realize documents), which leak collection or a claim
		// allocated at exactly their placement may then take.
		for _, c := range s.claims {
			if c.ck == nil {
				continue
			}
			mine := c.allocated && sameScheduled(c.ck.devices, c.devices)
			c.ck = nil
			if !mine {
				for _, u := range c.received {
					s.safety.Forget(u)
				}
				c.received = nil
			}
		}
	}
	complete := rapid.IntRange(0, 3).Draw(t, "complete at startup") > 0
	armed := s.armed()
	rep, err := s.m.AdoptDemand(context.Background(), s.demand(complete))
	if err != nil {
		if !armed {
			t.Fatalf("AdoptDemand without faults: %v", err)
		}
		return
	}
	if !rep.Authorized {
		if len(rep.Adopted) > 0 {
			t.Fatalf("AdoptDemand on an unauthorised listing adopted %v", rep.Adopted)
		}
		return
	}
	adopted := map[string]bool{}
	for _, a := range rep.Adopted {
		adopted[a.Runtime.MIGUUID] = true
	}
	live := liveMIGs(s.node)
	busy := map[string]bool{}
	for _, u := range s.procs {
		busy[u] = true
	}
	for _, c := range s.claims {
		if c.ck == nil && !c.allocated {
			continue
		}
		for _, u := range c.received {
			// Every device a claim received and that is live is its
			// own, and adopted: by its checkpointed identity, or by its
			// placement when no identity is checkpointed (lost, or a
			// retry left PrepareStarted), unless busy (then it could be
			// an ended claim's whose record was lost).
			recorded := c.ck != nil && c.ck.completed
			if live[u] && !adopted[u] && (recorded || !busy[u]) {
				t.Fatalf("adoption missed %s of claim %s (recorded %t); rejected %v", u, c.uid, recorded, rep.Rejected)
			}
		}
	}
}

// overlap adds a claim allocated a device another claim was allocated or
// holds (a scheduler's race or bug), and checks what happens while it is
// listed: a device a checkpointed claim holds is refused and withheld
// alone (the holder keeps everything, maintenance stays authorised); two
// claims overlapping where no checkpointed claim holds the device are both
// refused by the manager and withhold maintenance's authorisation, but
// not the unprepare of an unrelated claim.
func (s *claimMachine) overlap(t *rapid.T) {
	victim := s.pick(t, "victim", func(c *smClaim) bool { return !c.admin && (c.allocated || c.ck != nil) })
	pool := victim.devices
	if victim.ck != nil {
		pool = victim.ck.devices
	}
	d := pool[rapid.IntRange(0, len(pool)-1).Draw(t, "device")].Scheduled()
	d.ContainerIndex, d.DeviceIndex = 0, 0
	f := &smClaim{uid: s.newUID("overlap"), devices: []reservation.Allocation{d}, allocated: true}
	s.claims = append(s.claims, f)
	defer func() { s.claims = slices.DeleteFunc(s.claims, func(c *smClaim) bool { return c == f }) }()
	ctx := context.Background()
	h := s.holder(f)
	if devs, err := s.m.Prepare(ctx, s.demand(true), f.uid); err == nil {
		if err := s.safety.GrantHolder(h, devs); err != nil {
			t.Fatalf("overlapping claim: %v", err)
		}
		t.Fatalf("overlapping claim %s obtained %v next to %s", f.uid, deviceUUIDs(devs), victim.uid)
	}
	before := len(s.node.Snapshot())
	armed := s.armed()
	rep, err := s.m.MaintainDemand(ctx, s.demand(true))
	if _, held := s.heldBy(d, f); held {
		if !armed && (err != nil || !rep.Reconcile.Authorized) {
			t.Fatalf("MaintainDemand beside a held device's claim: %+v, %v; want authorised", rep.Reconcile, err)
		}
		return
	}
	if rep.Reconcile.Authorized || len(s.node.Snapshot()) != before {
		t.Fatalf("MaintainDemand with conflicting claims authorised or destroyed: %+v", rep)
	}
	if _, err := s.m.Prepare(ctx, s.demand(true), victim.uid); err == nil {
		t.Fatalf("claim %s was prepared by the manager while a claim conflicts with it", victim.uid)
	}
	// The conflict does not hold up an unrelated unprepare.
	for _, c := range s.claims {
		if c.ended {
			s.doUnprepare(t, c, false)
			break
		}
	}
}

// forgeIdentity adds a claim whose checkpoint names a victim's MIG device
// at the forger's own, free placement.
func (s *claimMachine) forgeIdentity(t *rapid.T) {
	victim := s.pick(t, "victim", func(c *smClaim) bool { return c.ck != nil && c.ck.completed })
	i := rapid.IntRange(0, len(victim.ck.devices)-1).Draw(t, "device")
	rt, ok := victim.ck.devices[i].Runtime()
	if !ok {
		t.Skip("not recorded")
	}
	gpu := s.gpuUUID(rapid.IntRange(0, smGPUs-1).Draw(t, "gpu"))
	prof := rapid.SampledFrom(s.profiles).Draw(t, "profile")
	var fits []capability.Placement
	for _, p := range prof.Placements {
		d := ent(0, 0, gpu, prof.Name, p.Start, p.Size)
		if _, held := s.heldBy(d, nil); s.free(gpu, p, nil) && !held {
			fits = append(fits, p)
		}
	}
	if len(fits) == 0 {
		t.Skip("no free placement")
	}
	p := rapid.SampledFrom(fits).Draw(t, "placement")
	d := ent(0, 0, gpu, prof.Name, p.Start, p.Size)
	f := &smClaim{uid: s.newUID("forged"), devices: []reservation.Allocation{d}, allocated: true,
		ck: &ckEntry{devices: []reservation.Allocation{d.WithRuntime(rt)}, completed: true}}
	s.claims = append(s.claims, f)
	defer func() { s.claims = slices.DeleteFunc(s.claims, func(c *smClaim) bool { return c == f }) }()
	h := s.holder(f)
	if devs, err := s.m.Prepare(context.Background(), s.demand(true), f.uid); err == nil {
		if err := s.safety.GrantHolder(h, devs); err != nil {
			t.Fatalf("forged claim: %v", err)
		}
		t.Fatalf("forged claim %s obtained %v next to %s", f.uid, deviceUUIDs(devs), victim.uid)
	}
	before := len(s.node.Snapshot())
	if rep, _ := s.m.MaintainDemand(context.Background(), s.demand(true)); rep.Reconcile.Authorized || len(s.node.Snapshot()) != before {
		t.Fatalf("MaintainDemand with a forged identity authorised or destroyed: %+v", rep)
	}
}

func (s *claimMachine) injectFault(t *rapid.T) {
	kind := rapid.IntRange(0, 4).Draw(t, "fault")
	nth := rapid.IntRange(1, 3).Draw(t, "nth")
	var f *fakehal.Injected
	switch kind {
	case 0:
		f = s.node.FailNth(fakehal.OpCreateGI, nth, realize.ErrNotSupported)
	case 1:
		f = s.node.CrashAfterGI(nth)
	case 2:
		f = s.node.Inject(fakehal.Fault{Op: fakehal.OpCreateCI, Nth: nth, Crash: true})
	case 3:
		f = s.node.FailNth(fakehal.OpDestroyGI, nth, realize.ErrInUse)
	case 4:
		f = s.node.FailNth(fakehal.OpDestroyCI, nth, realize.ErrNotSupported)
	}
	s.faults = append(s.faults, f)
}

func (s *claimMachine) check(t *rapid.T) {
	if err := s.node.Check(); err != nil {
		t.Fatalf("hardware invariants: %v", err)
	}
	if err := s.safety.Observe(context.Background(), s.node); err != nil {
		t.Fatal(err)
	}
}

// drain ends every claim, unprepares it, and checks that maintenance
// converges to empty hardware.
func (s *claimMachine) drain(t *rapid.T) {
	s.node.ClearFaults()
	s.faults = nil
	for pid := range s.procs {
		if err := s.node.StopProcess(pid); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, c := range s.claims {
		c.allocated = false
		if !c.admin {
			s.doUnprepare(t, c, true)
		}
	}
	s.clock.Advance(time.Hour)
	rep, err := s.m.MaintainDemand(ctx, s.demand(true))
	if err != nil {
		t.Fatalf("final MaintainDemand: %v", err)
	}
	if rep.Leaks == nil {
		if _, err := s.m.CollectLeaksDemand(ctx, s.demand(true)); err != nil {
			t.Fatalf("final CollectLeaksDemand: %v", err)
		}
	}
	if n := len(s.m.Managed()); n != 0 {
		t.Fatalf("managed after drain = %d, want 0", n)
	}
	if live := s.node.Snapshot(); len(live) != 0 {
		t.Fatalf("hardware after drain = %+v, want empty", live)
	}
}

func liveMIGs(node *fakehal.Node) map[string]bool {
	live := map[string]bool{}
	for _, in := range node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = true
		}
	}
	return live
}
