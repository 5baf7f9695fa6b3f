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

// TestClaimStateMachine drives a manager the way a DRA kubelet plugin
// does, through random sequences of claim allocation (the scheduler reuses
// a slot as soon as a claim is deallocated, before kubelet unprepares it),
// Prepare, repeated Prepare, claims ending, Unprepare, processes,
// maintenance on complete and incomplete listings, restarts with and
// without the plugin's checkpoint, forged claims (overlapping another, or
// naming another's MIG device) and injected faults, and checks after every
// step that
//
//   - the hardware never holds overlapping instances (fakehal's Check),
//   - realizetest.Safety's invariants hold for claims: no device of an
//     unreleased claim, and no instance running processes, is ever
//     destroyed; no claim is ever handed another claim's MIG device; no
//     forged claim obtains anything,
//   - a repeated Prepare returns the devices the first one returned,
//   - an incomplete listing destroys nothing,
//   - a successful Unprepare leaves none of the claim's devices live,
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
			"prepare":       sm.prepare,
			"repeatPrepare": sm.repeatPrepare,
			"end":           sm.end,
			"unprepare":     sm.unprepare,
			"startProcess":  sm.startProcess,
			"stopProcess":   sm.stopProcess,
			"maintain":      sm.maintain,
			"restart":       sm.restart,
			"forgeOverlap":  sm.forgeOverlap,
			"forgeIdentity": sm.forgeIdentity,
			"injectFault":   sm.injectFault,
			"":              sm.check,
		})
		sm.drain(rt)
	})
}

type smClaim struct {
	uid       string
	devices   []reservation.Allocation // as allocated by the scheduler
	recorded  []reservation.Allocation // the checkpoint: devices with identities, nil when none
	allocated bool                     // listed as an allocated claim
	released  bool                     // consumers ended: listed as released until unprepared
	received  []string                 // MIG UUIDs Prepare handed out, by device position
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

// holder is the claim as the plugin lists it: the scheduler's allocation
// with the identities its checkpoint recorded.
func (c *smClaim) holder() realize.Holder {
	h := realize.Holder{UID: c.uid, Namespace: "ns", Name: c.uid, Released: c.released}
	for i, d := range c.devices {
		if c.recorded != nil {
			d = c.recorded[i]
		}
		h.Devices = append(h.Devices, realize.Want{Allocation: d})
	}
	return h
}

// demand lists every allocated claim and every released one not yet
// unprepared.
func (s *claimMachine) demand(complete bool) realize.Demand {
	d := realize.Demand{Complete: complete, AdoptAtPlacement: true}
	for _, c := range s.claims {
		if c.allocated || c.released {
			d.Holders = append(d.Holders, c.holder())
		}
	}
	return d
}

func (s *claimMachine) armed() bool {
	s.faults = slices.DeleteFunc(s.faults, func(f *fakehal.Injected) bool { return f.Fired() > 0 })
	return len(s.faults) > 0
}

// free reports whether p is free of every allocated claim's device on gpu,
// as the scheduler sees it: a released claim's slots are free at once.
func (s *claimMachine) free(gpu string, p capability.Placement, extra []reservation.Allocation) bool {
	for _, c := range s.claims {
		if !c.allocated {
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

// allocate allocates a new claim one or two devices at free placements.
func (s *claimMachine) allocate(t *rapid.T) {
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
	s.claims = append(s.claims, &smClaim{uid: s.newUID("claim"), devices: devs, allocated: true})
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
	s.doPrepare(t, s.pick(t, "allocated claim", func(c *smClaim) bool { return c.allocated }))
}

func (s *claimMachine) repeatPrepare(t *rapid.T) {
	s.doPrepare(t, s.pick(t, "prepared claim", func(c *smClaim) bool { return c.allocated && c.received != nil }))
}

func (s *claimMachine) doPrepare(t *rapid.T, c *smClaim) {
	armed := s.armed()
	h := c.holder()
	devs, err := s.m.Prepare(context.Background(), s.demand(true), c.uid)
	if err != nil {
		if !armed && !errors.Is(err, realize.ErrOccupied) && !errors.Is(err, realize.ErrConflict) {
			t.Fatalf("Prepare(%s) without faults: %v", c.uid, err)
		}
		return
	}
	if c.received == nil && rapid.IntRange(0, 5).Draw(t, "crash before answering") == 0 {
		// The plugin died before recording and answering: kubelet
		// never saw these devices and retries later.
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
	// The plugin records the identities before it answers kubelet.
	c.received, c.recorded = got, recorded
}

// end ends a claim's consumers: the claim is deallocated, and the plugin
// lists it as released from its checkpoint until it is unprepared.
func (s *claimMachine) end(t *rapid.T) {
	c := s.pick(t, "claim to end", func(c *smClaim) bool { return c.allocated })
	c.allocated, c.released = false, true
	s.safety.Release(c.uid)
}

func (s *claimMachine) unprepare(t *rapid.T) {
	c := s.pick(t, "ended claim", func(c *smClaim) bool { return c.released })
	// Unprepare depends only on the claim's own records and the
	// hardware: the listing's completeness and the other claims' state
	// do not matter.
	complete := rapid.IntRange(0, 3).Draw(t, "complete") > 0
	armed := s.armed()
	rep, err := s.m.Unprepare(context.Background(), s.demand(complete), c.uid)
	if err != nil {
		if !armed && !errors.Is(err, realize.ErrInUse) {
			t.Fatalf("Unprepare(%s) without faults: %v", c.uid, err)
		}
		return
	}
	live := liveMIGs(s.node)
	for _, u := range c.received {
		if live[u] {
			t.Fatalf("Unprepare(%s) succeeded but its device %s is live: %+v", c.uid, u, rep)
		}
	}
	c.released = false // forgotten: the checkpoint drops it
}

func (s *claimMachine) startProcess(t *rapid.T) {
	c := s.pick(t, "claim with a device", func(c *smClaim) bool { return c.allocated && c.received != nil })
	uuid := rapid.SampledFrom(c.received).Draw(t, "device")
	for gpu := range smGPUs {
		if pid, err := s.node.StartProcess(gpu, uuid); err == nil {
			s.procs[pid] = uuid
			return
		}
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
		// The plugin forgets every identity, and the released claims
		// it was still to unprepare: nothing proves any more who used
		// their instances (the residual risk package realize
		// documents), which leak collection or a claim allocated at
		// exactly their placement may then take.
		for _, c := range s.claims {
			c.recorded = nil
			if c.released {
				c.released = false
				for _, u := range c.received {
					s.safety.Forget(u)
				}
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
		if !c.allocated {
			continue
		}
		for _, u := range c.received {
			// Every device a claim received and that is live is its
			// own, and adopted: by its recorded identity, or by its
			// placement when the checkpoint is lost, unless busy (then
			// it could be an ended claim's whose record was lost).
			if live[u] && !adopted[u] && (c.recorded != nil || !busy[u]) {
				t.Fatalf("adoption missed %s of claim %s (recorded %t); rejected %v", u, c.uid, c.recorded != nil, rep.Rejected)
			}
		}
	}
}

// forgeOverlap adds a claim overlapping an allocated one (a buggy or
// forged allocation), tries to prepare it, and removes it again: both
// claims are withheld meanwhile.
func (s *claimMachine) forgeOverlap(t *rapid.T) {
	victim := s.pick(t, "victim", func(c *smClaim) bool { return c.allocated })
	d := victim.devices[rapid.IntRange(0, len(victim.devices)-1).Draw(t, "device")]
	f := &smClaim{uid: s.newUID("forged"), devices: []reservation.Allocation{d}, allocated: true}
	f.devices[0].DeviceIndex = 0
	s.tryForged(t, f, victim)
}

// forgeIdentity adds a claim whose checkpoint names a victim's MIG device
// at the forger's own, free placement.
func (s *claimMachine) forgeIdentity(t *rapid.T) {
	victim := s.pick(t, "victim", func(c *smClaim) bool { return c.allocated && c.recorded != nil })
	i := rapid.IntRange(0, len(victim.devices)-1).Draw(t, "device")
	rt, ok := victim.recorded[i].Runtime()
	if !ok {
		t.Skip("not recorded")
	}
	gpu := s.gpuUUID(rapid.IntRange(0, smGPUs-1).Draw(t, "gpu"))
	prof := rapid.SampledFrom(s.profiles).Draw(t, "profile")
	var fits []capability.Placement
	for _, p := range prof.Placements {
		if s.free(gpu, p, nil) {
			fits = append(fits, p)
		}
	}
	if len(fits) == 0 {
		t.Skip("no free placement")
	}
	p := rapid.SampledFrom(fits).Draw(t, "placement")
	d := ent(0, 0, gpu, prof.Name, p.Start, p.Size)
	f := &smClaim{uid: s.newUID("forged"), devices: []reservation.Allocation{d}, allocated: true,
		recorded: []reservation.Allocation{d.WithRuntime(rt)}}
	s.tryForged(t, f, victim)
}

func (s *claimMachine) tryForged(t *rapid.T, f, victim *smClaim) {
	s.claims = append(s.claims, f)
	h := f.holder()
	devs, err := s.m.Prepare(context.Background(), s.demand(true), f.uid)
	if err == nil {
		if err := s.safety.GrantHolder(h, devs); err != nil {
			t.Fatalf("forged claim: %v", err)
		}
		t.Fatalf("forged claim %s obtained %v next to %s", f.uid, deviceUUIDs(devs), victim.uid)
	}
	if _, err := s.m.Prepare(context.Background(), s.demand(true), victim.uid); err == nil {
		t.Fatalf("claim %s was prepared while a forged claim conflicts with it", victim.uid)
	}
	// A maintenance pass meanwhile destroys nothing.
	before := len(s.node.Snapshot())
	if rep, _ := s.m.MaintainDemand(context.Background(), s.demand(true)); rep.Reconcile.Authorized || len(s.node.Snapshot()) != before {
		t.Fatalf("MaintainDemand with conflicting claims authorised or destroyed: %+v", rep)
	}
	s.claims = s.claims[:len(s.claims)-1]
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
	for pid := range s.procs {
		if err := s.node.StopProcess(pid); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, c := range s.claims {
		if c.allocated {
			c.allocated, c.released = false, true
			s.safety.Release(c.uid)
		}
	}
	for _, c := range s.claims {
		if !c.released {
			continue
		}
		if rep, err := s.m.Unprepare(ctx, s.demand(true), c.uid); err != nil {
			t.Fatalf("final Unprepare(%s): %+v, %v", c.uid, rep, err)
		}
		c.released = false
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
