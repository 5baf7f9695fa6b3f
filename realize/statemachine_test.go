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

// TestManagerStateMachine drives a manager over a fake node through random
// sequences of scheduling, allocation, repeated allocation, termination,
// processes, reconciliation, restarts, forged and wiped annotations and
// injected faults, and checks after every step that
//
//   - the hardware never holds overlapping instances (fakehal's Check),
//   - realizetest.Safety's invariants: no instance of an active pod (or
//     one running processes) is ever destroyed, no pod ever receives
//     another pod's MIG UUID, no untrusted or forged entry is granted,
//   - a repeated Allocate returns the same MIG UUIDs,
//   - an authorised reconcile leaves no instance of an ended pod, except
//     those it reports kept (in use),
//   - adoption after a restart on an authorised listing recovers every
//     realized active reservation no other pod names, and adopts nothing
//     on an unauthorised one,
//
// and, at the end, that once faults stop and every pod ends, a reconcile
// and a leak collection leave the hardware empty. Reconcile, adoption and
// leak collection run now on the snapshot, now on PodDemand's neutral
// demand of it.
//
// The default check count keeps `go test -race` quick; run more with
// -rapid.checks=N (and longer sequences with -rapid.steps=N).
func TestManagerStateMachine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sm := newMachine(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"schedule":       sm.schedule,
			"allocate":       sm.allocate,
			"repeatAllocate": sm.repeatAllocate,
			"terminate":      sm.terminate,
			"startProcess":   sm.startProcess,
			"stopProcess":    sm.stopProcess,
			"reconcile":      sm.reconcile,
			"restart":        sm.restart,
			"collectLeaks":   sm.collectLeaks,
			"forge":          sm.forge,
			"wipe":           sm.wipe,
			"injectFault":    sm.injectFault,
			"":               sm.check,
		})
		sm.drain(rt)
	})
}

const smGPUs = 2

type smPod struct {
	pod      *reservation.Pod
	entries  []reservation.Allocation // as scheduled
	active   bool
	received []string // MIG UUIDs Allocate handed to this pod
	// wiped: a bad patch emptied the running pod's annotation; it keeps
	// its devices but asks for nothing more.
	wiped bool
}

type machine struct {
	node     *fakehal.Node
	m        *realize.Manager
	profiles []capability.GIProfileInfo
	pods     []*smPod
	nextUID  int
	// safety is realizetest's model of the manager's safety invariants:
	// every grant, release and hardware state goes through it.
	safety *realizetest.Safety
	procs  map[uint32]string // pid -> pod UID
	faults []*fakehal.Injected
	clock  *fakeClock
}

func newMachine(t *rapid.T) *machine {
	model, ok := fakehal.LookupModel(fakehal.DefaultModel)
	if !ok {
		t.Fatalf("no model %s", fakehal.DefaultModel)
	}
	var profiles []capability.GIProfileInfo
	for _, p := range model.Profiles {
		switch p.Name {
		case "1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb":
			profiles = append(profiles, p)
		}
	}
	node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(smGPUs, fakehal.DefaultModel), Seed: 11})
	clock := newClock()
	return &machine{node: node, m: realize.NewManager(node, realize.Options{Now: clock.Now}), profiles: profiles,
		safety: realizetest.NewSafety(), procs: map[uint32]string{}, clock: clock}
}

func (s *machine) gpuUUID(i int) string {
	d, _ := s.node.Device(i)
	return d.UUID
}

func (s *machine) snapshot() reservation.Snapshot {
	snap := reservation.Snapshot{Complete: true}
	for _, p := range s.pods {
		snap.Pods = append(snap.Pods, *p.pod)
	}
	return snap
}

func (s *machine) armed() bool {
	s.faults = slices.DeleteFunc(s.faults, func(f *fakehal.Injected) bool { return f.Fired() > 0 })
	return len(s.faults) > 0
}

// free reports whether p is free of every active pod's reservation on gpu,
// as the scheduler's occupancy sees it.
func (s *machine) free(gpu string, p capability.Placement, extra []reservation.Allocation) bool {
	for _, sp := range s.pods {
		if !sp.active {
			continue
		}
		for _, e := range sp.entries {
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

// schedule reserves one or two devices for a new pod at free placements,
// like the scheduler.
func (s *machine) schedule(t *rapid.T) {
	n := rapid.IntRange(1, 2).Draw(t, "devices")
	var entries []reservation.Allocation
	for d := range n {
		gpu := s.gpuUUID(rapid.IntRange(0, smGPUs-1).Draw(t, "gpu"))
		prof := rapid.SampledFrom(s.profiles).Draw(t, "profile")
		var fits []capability.Placement
		for _, p := range prof.Placements {
			if s.free(gpu, p, entries) {
				fits = append(fits, p)
			}
		}
		if len(fits) == 0 {
			t.Skip("no free placement")
		}
		p := rapid.SampledFrom(fits).Draw(t, "placement")
		entries = append(entries, ent(0, d, gpu, prof.Name, p.Start, p.Size))
	}
	s.nextUID++
	uid := fmt.Sprintf("pod-%d", s.nextUID)
	s.pods = append(s.pods, &smPod{active: true, entries: entries, pod: &reservation.Pod{
		UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
		Annotations:    map[string]string{reservation.AnnotationKey: reservation.EncodeString(entries)},
		DeviceRequests: []int{n}}})
}

func (s *machine) pick(t *rapid.T, label string, ok func(*smPod) bool) *smPod {
	var c []*smPod
	for _, p := range s.pods {
		if ok(p) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no " + label)
	}
	return rapid.SampledFrom(c).Draw(t, label)
}

func (s *machine) allocate(t *rapid.T) {
	s.doAllocate(t, s.pick(t, "active pod", func(p *smPod) bool { return p.active && !p.wiped }))
}

func (s *machine) repeatAllocate(t *rapid.T) {
	s.doAllocate(t, s.pick(t, "allocated pod", func(p *smPod) bool { return p.active && !p.wiped && len(p.received) > 0 }))
}

// wipe empties a running pod's annotation, as a faulty patch would. The
// scheduler's occupancy (entries) is unchanged; the pod's containers keep
// their devices, so none of them the manager manages may be destroyed
// while the pod runs and the manager remembers it (see restart).
func (s *machine) wipe(t *rapid.T) {
	p := s.pick(t, "running pod with a device", func(p *smPod) bool { return p.active && !p.wiped && len(p.received) > 0 })
	p.wiped = true
	p.pod.Annotations[reservation.AnnotationKey] = ""
	// What the manager does not manage now (not adopted after a restart)
	// is an unclaimed leftover to it from here on.
	p.received = slices.DeleteFunc(p.received, func(u string) bool {
		if s.managed(u) {
			return false
		}
		s.safety.Forget(u)
		return true
	})
}

func (s *machine) doAllocate(t *rapid.T, p *smPod) {
	before, _ := reservation.DecodeString(p.pod.Annotations[reservation.AnnotationKey])
	armed := s.armed()
	res, err := s.m.Allocate(context.Background(), realize.AllocateRequest{Pod: *p.pod, Snapshot: s.snapshot()})
	if err != nil {
		if !armed && !errors.Is(err, realize.ErrOccupied) && !errors.Is(err, realize.ErrConflict) {
			t.Fatalf("Allocate(%s) without faults: %v", p.pod.UID, err)
		}
		return
	}
	if err := s.safety.Grant(*p.pod, res.Devices); err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Devices {
		if prev, ok := before[d.Index].Runtime(); ok && prev != d.Runtime {
			t.Fatalf("repeated Allocate of %s device %d = %v, want %v", p.pod.UID, d.Entry.DeviceIndex, d.Runtime, prev)
		}
		if !slices.Contains(p.received, d.Runtime.MIGUUID) {
			p.received = append(p.received, d.Runtime.MIGUUID)
		}
	}
	if res.Patch != nil {
		p.pod.Annotations[reservation.AnnotationKey] = res.Annotation
	}
}

func (s *machine) terminate(t *rapid.T) {
	p := s.pick(t, "pod to end", func(p *smPod) bool { return p.active })
	p.active = false
	s.safety.Release(p.pod.UID)
	if rapid.Bool().Draw(t, "deleting") {
		// Deleted, and the kubelet reports its containers stopped.
		p.pod.Deleting, p.pod.ContainersTerminated = true, true
	} else {
		p.pod.Phase = reservation.PodSucceeded
	}
}

func (s *machine) startProcess(t *rapid.T) {
	p := s.pick(t, "pod with a device", func(p *smPod) bool { return p.active && len(p.received) > 0 })
	uuid := rapid.SampledFrom(p.received).Draw(t, "device")
	for gpu := range smGPUs {
		if pid, err := s.node.StartProcess(gpu, uuid); err == nil {
			s.procs[pid] = p.pod.UID
			return
		}
	}
	t.Fatalf("pod %s's device %s is not live", p.pod.UID, uuid)
}

func (s *machine) stopProcess(t *rapid.T) {
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

func (s *machine) reconcile(t *rapid.T) {
	if rapid.Bool().Draw(t, "grace passes") {
		s.clock.Advance(time.Hour)
	}
	snap := s.snapshot()
	snap.Complete = rapid.IntRange(0, 3).Draw(t, "complete") > 0
	armed := s.armed()
	var rep realize.ReconcileReport
	var err error
	if rapid.Bool().Draw(t, "via PodDemand") {
		rep, err = s.m.ReconcileDemand(context.Background(), realize.PodDemand(snap))
	} else {
		rep, err = s.m.Reconcile(context.Background(), snap)
	}
	if err != nil && !armed {
		t.Fatalf("Reconcile without faults: %v", err)
	}
	if !snap.Complete {
		if rep.Authorized || len(rep.Released) > 0 {
			t.Fatalf("incomplete snapshot authorised %v", rep)
		}
		return
	}
	if err != nil {
		return
	}
	kept := map[string]bool{}
	for _, k := range rep.Kept {
		kept[k.Instance.Runtime.MIGUUID] = true
	}
	live := s.liveUUIDs()
	for _, p := range s.pods {
		if p.active {
			continue
		}
		for _, u := range p.received {
			if live[u] && !kept[u] && s.managed(u) {
				t.Fatalf("ended pod %s's instance %s still managed and live after an authorised reconcile", p.pod.UID, u)
			}
		}
	}
}

func (s *machine) restart(t *rapid.T) {
	s.m = realize.NewManager(s.node, realize.Options{Now: s.clock.Now})
	// Once the manager's memory is gone nothing ties a wiped pod to its
	// instances: without a record or a process they are leftovers to a new
	// manager, which may clean them.
	for _, p := range s.pods {
		if p.wiped {
			for _, u := range p.received {
				s.safety.Forget(u)
			}
			p.received = nil
		}
	}
	armed := s.armed()
	snap := s.snapshot()
	snap.Complete = rapid.IntRange(0, 3).Draw(t, "complete at startup") > 0
	before := len(s.node.Snapshot())
	var rep realize.AdoptReport
	var err error
	if rapid.Bool().Draw(t, "via PodDemand") {
		rep, err = s.m.AdoptDemand(context.Background(), realize.PodDemand(snap))
	} else {
		rep, err = s.m.Adopt(context.Background(), snap)
	}
	if !snap.Complete && len(s.node.Snapshot()) != before {
		t.Fatalf("Adopt on an incomplete listing destroyed instances")
	}
	if err != nil {
		if !armed {
			t.Fatalf("Adopt without faults: %v", err)
		}
		return
	}
	if !rep.Authorized {
		if len(rep.Adopted) > 0 {
			t.Fatalf("Adopt on an unauthorised listing adopted %v", rep.Adopted)
		}
		return // a later authorised Adopt or Allocate recovers them
	}
	adopted := map[string]bool{}
	for _, a := range rep.Adopted {
		adopted[a.Runtime.MIGUUID] = true
	}
	for _, p := range s.pods {
		if !p.active {
			continue
		}
		entries, _ := reservation.DecodeString(p.pod.Annotations[reservation.AnnotationKey])
		for _, e := range entries {
			if id, ok := e.Runtime(); ok && !adopted[id.MIGUUID] && !s.ambiguous(p.pod.UID, id.MIGUUID) {
				t.Fatalf("adoption missed %s of pod %s; rejected %v", id.MIGUUID, p.pod.UID, rep.Rejected)
			}
		}
	}
}

func (s *machine) collectLeaks(t *rapid.T) {
	armed := s.armed()
	collect := func() (realize.LeakReport, error) { return s.m.CollectLeaks(context.Background(), s.snapshot()) }
	if rapid.Bool().Draw(t, "via PodDemand") {
		collect = func() (realize.LeakReport, error) {
			return s.m.CollectLeaksDemand(context.Background(), realize.PodDemand(s.snapshot()))
		}
	}
	if _, err := collect(); err != nil && !armed {
		t.Fatalf("CollectLeaks without faults: %v", err)
	}
}

// forge schedules a pod whose annotation copies another pod's realized
// entries, tries to allocate it, and removes it again.
func (s *machine) forge(t *rapid.T) {
	victim := s.pick(t, "victim", func(p *smPod) bool { return len(p.received) > 0 })
	s.nextUID++
	uid := fmt.Sprintf("forger-%d", s.nextUID)
	value := victim.pod.Annotations[reservation.AnnotationKey]
	f := &smPod{active: true, pod: &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning,
		Annotations: map[string]string{reservation.AnnotationKey: value}}}
	f.entries, _ = reservation.DecodeString(value)
	// The forger's spec requests what the copy reserves, so only the
	// manager's conflict rules stand between it and the victim's devices.
	f.pod.DeviceRequests = requestsOf(f.entries)
	s.pods = append(s.pods, f)
	res, err := s.m.Allocate(context.Background(), realize.AllocateRequest{Pod: *f.pod, Snapshot: s.snapshot()})
	if err == nil {
		if err := s.safety.Grant(*f.pod, res.Devices); err != nil {
			t.Fatalf("forger: %v", err)
		}
		for _, d := range res.Devices {
			f.received = append(f.received, d.Runtime.MIGUUID)
		}
	}
	s.safety.Release(uid)
	// The forger is deleted; its instances, if any, are reclaimed later.
	// Its pod object lingers for a while, or is gone at once.
	f.active = false
	f.pod.Deleting, f.pod.ContainersTerminated = true, true
	if rapid.Bool().Draw(t, "forger gone") {
		s.pods = s.pods[:len(s.pods)-1]
	}
}

// ambiguous reports whether a pod other than uid names migUUID in its
// annotation: then no one can prove ownership and adoption must refuse.
func (s *machine) ambiguous(uid, migUUID string) bool {
	for _, p := range s.pods {
		if p.pod.UID == uid {
			continue
		}
		entries, _ := reservation.DecodeString(p.pod.Annotations[reservation.AnnotationKey])
		for _, e := range entries {
			if e.MIGUUID == migUUID {
				return true
			}
		}
	}
	return false
}

func (s *machine) injectFault(t *rapid.T) {
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

func (s *machine) liveUUIDs() map[string]bool {
	live := map[string]bool{}
	for _, in := range s.node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = true
		}
	}
	return live
}

func (s *machine) managed(uuid string) bool {
	for _, mi := range s.m.Managed() {
		if mi.Runtime.MIGUUID == uuid {
			return true
		}
	}
	return false
}

func (s *machine) check(t *rapid.T) {
	if err := s.node.Check(); err != nil {
		t.Fatalf("hardware invariants: %v", err)
	}
	if err := s.safety.Observe(context.Background(), s.node); err != nil {
		t.Fatal(err)
	}
}

// drain ends everything and checks the manager converges to empty
// hardware.
func (s *machine) drain(t *rapid.T) {
	s.node.ClearFaults()
	for pid := range s.procs {
		if err := s.node.StopProcess(pid); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range s.pods {
		p.active = false
		p.pod.Phase = reservation.PodSucceeded
	}
	ctx := context.Background()
	s.clock.Advance(time.Hour) // past the grace for pods gone from the listing
	if _, err := s.m.Reconcile(ctx, s.snapshot()); err != nil {
		t.Fatalf("final Reconcile: %v", err)
	}
	if n := len(s.m.Managed()); n != 0 {
		t.Fatalf("managed after final reconcile = %d, want 0", n)
	}
	if _, err := s.m.CollectLeaks(ctx, s.snapshot()); err != nil {
		t.Fatalf("final CollectLeaks: %v", err)
	}
	if live := s.node.Snapshot(); len(live) != 0 {
		t.Fatalf("hardware after drain = %+v, want empty", live)
	}
}
