package systemtest_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/placementtest"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
	"github.com/dynmig/dynmig/reservation"
)

// TestSystem is the whole-system model-based test; see the package
// documentation for the actors, actions and invariants.
func TestSystem(t *testing.T) {
	st := runStats{refusals: map[string]int{}}
	defer func() { t.Logf("%s", &st) }()
	rapid.Check(t, func(rt *rapid.T) {
		s := newSystem(rt)
		s.stats = &st
		st.sequences++
		rt.Repeat(map[string]func(*rapid.T){
			"arrive":         s.arrive,
			"allocate":       s.allocate,
			"repeatAllocate": s.repeatAllocate,
			"raceAllocate":   s.raceAllocate,
			"stopContainers": s.stopContainers,
			"end":            s.end,
			"vanish":         s.vanish,
			"reconcile":      s.reconcile,
			"collectLeaks":   s.collectLeaks,
			"restart":        s.restart,
			"fault":          s.fault,
			"attack":         s.attack,
			"corrupt":        s.corrupt,
			"repair":         s.repair,
			"startProcess":   s.startProcess,
			"stopProcess":    s.stopProcess,
			"settle":         s.settle,
			"burst":          s.burst,
			"strandedRetry":  s.strandedRetry,
			"":               s.check,
		})
		s.drain(rt)
		st.residual += s.residual
	})
	ranAll(t, st.sequences)
	if !t.Failed() {
		checkCoverage(t, st.sequences, []coveredPath{
			{"a running pod's record rewritten to another placement", st.moveRewrites},
			{"a running pod's record rewritten onto another active pod's placement", st.conflictRewrites},
			{"plugin restarts", st.restarts},
			{"multi-device pods", st.multiDevice},
			{"a multi-device container's Allocate retried after a restart stranded its devices", st.strandedRetries},
		})
		// The residual is counted, not claimed: about 1 in 100 sequences.
		t.Logf("the counted residual (a copy of an ended pod's device after a restart) reached %d times", st.residual)
	}
}

// runStats counts what the sequences exercised, for the test log.
type runStats struct {
	sequences, steps, placed, multiDevice, pending, allocations, handOuts, restarts, faults, attacks, forgerRefusals, residual int
	// Running pods whose own record was rewritten to another placement
	// (moveRewrites) or onto one another active pod's record names
	// (conflictRewrites).
	moveRewrites, conflictRewrites int
	// strandedRetries counts strandedRetry's Allocates.
	strandedRetries int
	// refusals counts honest Allocates refused with ErrConflict or
	// ErrOccupied, by the class holderOf gave.
	refusals map[string]int
}

func (st *runStats) String() string {
	return fmt.Sprintf("sequences %d (shrinking included), steps %d, pods placed %d (multi-device %d, unschedulable %d), "+
		"successful Allocates %d, devices handed out %d, "+
		"plugin restarts %d, faults injected %d, forged records %d, forger Allocates refused %d, residual-risk hand-outs %d, "+
		"honest refusals by holder %v",
		st.sequences, st.steps, st.placed, st.multiDevice, st.pending, st.allocations, st.handOuts, st.restarts, st.faults, st.attacks, st.forgerRefusals, st.residual,
		st.refusals)
}

// bindTimeAnnotation is kube.BindTimeAnnotation, which anyone who can
// create a pod may write.
const bindTimeAnnotation = "hami.io/bind-time"

const (
	nodeName = "mig-node-a"
	numGPUs  = 2
)

// models are the GPU models a sequence draws from: 8-, 4- and 12-slot grids.
var models = []string{"A100-SXM4-40GB", "A30", "RTX PRO 6000", "H100"}

// devKey names one device of a pod: (container index, device index).
type devKey struct{ c, d int }

// simPod is one pod the API server holds (or held).
type simPod struct {
	pod    *reservation.Pod
	attack string // "" for a pod the scheduler placed, else the kind of forgery
	active bool   // not ended
	// terminating is set for a pod deleted while its containers may still
	// run: until reservation.Pod.Released, its devices must stay live.
	gone        bool // removed from the API entirely
	terminating bool
	epoch       int  // clock epoch of its creation, for informer lag
	seen        bool // listed complete by the current plugin's informer
	received    map[devKey]string
	// gen is the plugin process that last handed p a device.
	gen int
	// saved is the annotation a corrupt action replaced; "" when intact.
	saved string
	// moved: its owner rewrote its record to another placement while it
	// ran (corrupt); the kubelet admitted its containers already and
	// calls no Allocate for them until the record is restored.
	moved bool
	// informed is the last annotation value the scheduler's informer
	// could decode, the record its ledger keeps for the pod.
	informed string
}

func (p *simPod) uid() string { return p.pod.UID }

// holds reports whether p's containers may still use its devices at now:
// it is active, or deleting and not yet released (containers running,
// grace period not over) and still in the API.
func (p *simPod) holds(now time.Time) bool {
	return p.active || p.terminating && !p.gone && !p.pod.Released(now)
}

func (p *simPod) annotation() string { return p.pod.Annotations[reservation.AnnotationKey] }

func (p *simPod) containers() []int {
	entries, _ := reservation.DecodeString(p.annotation())
	var cs []int
	for _, e := range entries {
		if !slices.Contains(cs, e.ContainerIndex) {
			cs = append(cs, e.ContainerIndex)
		}
	}
	slices.Sort(cs)
	return cs
}

type proc struct {
	uid, mig string
}

type armedFault struct {
	f *fakehal.Injected
	// after counts the steps the fault still counts as armed once it has
	// fired (stale listings outlive the call that caused them).
	after int
}

// system is the state machine: every actor of one node.
type system struct {
	ctx    context.Context
	model  string
	node   *fakehal.Node
	hw     *mortal
	mgr    *realize.Manager
	ledger *placement.Ledger
	sched  []capability.GPU // the scheduler's view, from the node registration
	pods   []*simPod
	byUID  map[string]*simPod
	next   int
	// safety is the exported model of the manager's safety invariants:
	// every device a container received is granted there, released with
	// its pod, and checked against the hardware after every step.
	safety *realizetest.Safety
	// gen counts device-plugin processes: a restart starts a new one.
	gen int
	// claims holds every (GPU UUID, placement) a validated annotation ever
	// named: the only places an instance may be created.
	claims map[claim]bool
	procs  map[uint32]proc
	faults []armedFault
	clock  *clock
	epoch  int
	// adoptPending is set while the plugin's latest Adopt was not
	// authorised or failed: it calls Adopt again before its next call.
	adoptPending bool
	// synced is set once the current plugin's informer produced a complete
	// listing.
	synced bool
	stats  *runStats
	// residual counts hand-outs of a vanished pod's instance to a forger
	// after a restart: the residual risk the realize package documents,
	// which the model accepts through Safety.Forget.
	residual int
}

type claim struct {
	gpu string
	at  capability.Placement
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newSystem(t *rapid.T) *system {
	model := rapid.SampledFrom(models).Draw(t, "model")
	node, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(numGPUs, model), Seed: rapid.Uint64().Draw(t, "seed")})
	if err != nil {
		t.Fatalf("fakehal.New(%s): %v", model, err)
	}
	s := &system{ctx: context.Background(), model: model, node: node, byUID: map[string]*simPod{},
		safety: realizetest.NewSafety(), claims: map[claim]bool{}, procs: map[uint32]proc{},
		clock: &clock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}}
	s.register(t)
	s.startPlugin(t, true)
	return s
}

// register is discovery on the device plugin's side and the node
// registration round trip into the scheduler's ledger.
func (s *system) register(t *rapid.T) {
	gpus, _, err := capability.Discover(s.ctx, s.node, capability.DefaultAllowlist())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	devs, err := capability.NewMIGNodeDevices(gpus, nil)
	if err != nil {
		t.Fatalf("NewMIGNodeDevices: %v", err)
	}
	wire, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		t.Fatalf("EncodeNodeRegistration: %v", err)
	}
	decoded, err := capability.DecodeNodeRegistration(wire)
	if err != nil {
		t.Fatalf("DecodeNodeRegistration(%s): %v", wire, err)
	}
	for _, nd := range decoded {
		g, err := nd.GPU()
		if err != nil {
			t.Fatalf("NodeDevice.GPU: %v", err)
		}
		if len(g.Profiles) == 0 {
			t.Fatalf("%s (%s) publishes no MIG profile under the default allowlist", s.model, g.Name)
		}
		s.sched = append(s.sched, g)
	}
	if len(s.sched) != numGPUs {
		t.Fatalf("registration lists %d GPUs, want %d", len(s.sched), numGPUs)
	}
	s.ledger = placement.NewLedger(placement.LedgerOptions{})
	if err := s.ledger.SetNode(nodeName, s.sched); err != nil {
		t.Fatalf("SetNode: %v", err)
	}
}

// startPlugin starts a device plugin: a new manager over the same hardware,
// then startup adoption on a listing that may be incomplete.
func (s *system) startPlugin(t *rapid.T, complete bool) realize.AdoptReport {
	if s.stats != nil {
		s.stats.restarts++
	}
	s.gen++
	s.hw = &mortal{Node: s.node}
	s.mgr = realize.NewManager(s.hw, realize.Options{Now: s.clock.Now})
	s.synced = false
	for _, p := range s.pods {
		p.seen = false
	}
	return s.adopt(t, complete)
}

// adopt runs Adopt as the plugin does at startup and, following the
// manager's failure semantics, again before its next call whenever the
// previous one had no authorised snapshot or failed.
func (s *system) adopt(t *rapid.T, complete bool) realize.AdoptReport {
	snap := s.listing(t, "adopt", complete)
	armed := s.armed()
	before := s.node.Snapshot()
	rep, err := s.mgr.Adopt(s.ctx, snap)
	if s.hw.dead.Load() {
		// Died during startup: start again.
		return s.startPlugin(t, complete)
	}
	if !reservation.Desired(snap).Authorized && len(s.node.Snapshot()) < len(before) {
		t.Fatalf("Adopt on an unauthorised listing destroyed instances: before %v after %v", before, s.node.Snapshot())
	}
	// Rejected reservations are retried too: an ambiguity that made the
	// manager refuse (an ended pod's copy naming the same device) may be
	// gone by the next pass, and a running container is not allocated
	// again by kubelet.
	s.adoptPending = err != nil || !rep.Authorized || len(rep.Rejected) > 0
	if err != nil {
		if !armed {
			t.Fatalf("Adopt without faults: %v", err)
		}
		return rep
	}
	s.checkAdoption(t, snap, rep)
	return rep
}

// plugin is the device plugin before each of its calls: a dead one is
// restarted, an unfinished adoption retried.
func (s *system) plugin(t *rapid.T) {
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
	} else if s.adoptPending {
		s.adopt(t, false)
	}
}

// checkAdoption checks that every valid, unambiguous realized reservation
// of an active pod was adopted with its MIG UUID, and that nothing was
// adopted for a pod that does not name it.
func (s *system) checkAdoption(t *rapid.T, snap reservation.Snapshot, rep realize.AdoptReport) {
	adopted := map[string]realize.ManagedInstance{}
	for _, a := range rep.Adopted {
		adopted[a.Runtime.MIGUUID] = a
	}
	want := reservation.Desired(snap)
	live := s.liveByMIG()
	for _, a := range rep.Adopted {
		p := s.byUID[a.Owner.PodUID]
		if p == nil || !p.holds(s.clock.now) {
			t.Fatalf("adopted %s for %s, which is not an active pod", a.Runtime.MIGUUID, a.Owner)
		}
		e, ok := want.Lookup(a.Owner.PodUID, a.Owner.ContainerIndex, a.Owner.DeviceIndex)
		if rt, has := e.Runtime(); !ok || !has || rt != a.Runtime {
			t.Fatalf("adopted %v for %s, which its annotation does not name", a.Runtime, a.Owner)
		}
	}
	if !want.Authorized {
		// Cross-pod ownership is provable only on a complete listing of
		// trusted records; the plugin adopts again on a later one.
		return
	}
	for _, e := range want.Active {
		rt, ok := e.Runtime()
		if !ok {
			continue
		}
		in, isLive := live[rt.MIGUUID]
		if !isLive || in.GIID != rt.GPUInstanceID || in.Placement != e.Placement || s.gpuUUID(in.GPU) != e.GPUUUID ||
			len(in.ComputeInstances) != 1 || in.ComputeInstances[0].ID != rt.ComputeInstanceID {
			continue // the annotation does not match the hardware: never adopted
		}
		if s.ambiguous(e.PodUID, rt.MIGUUID) || s.withheldOverlap(&want, e) || s.managedForOther(e, rt) {
			continue
		}
		if !s.manages(e, rt) {
			t.Fatalf("startup adoption missed %s of %s (%s %v); rejected %v", rt.MIGUUID, e.PodUID, e.Profile, e.Placement, rep.Rejected)
		}
	}
}

// manages reports whether the manager holds e's instance for e's owner
// (adopted now or earlier, or created by this plugin).
func (s *system) manages(e reservation.Entry, rt reservation.RuntimeIdentity) bool {
	for _, mi := range s.mgr.Managed() {
		if mi.Runtime == rt && mi.Owner.PodUID == e.PodUID && mi.Owner.ContainerIndex == e.ContainerIndex &&
			mi.Owner.DeviceIndex == e.DeviceIndex && mi.GPUUUID == e.GPUUUID && mi.Key.Placement == e.Placement {
			return true
		}
	}
	return false
}

// managedForOther reports whether the manager already holds rt's device,
// or e's placement, for another owner (a pod that vanished from the API,
// whose record the manager releases only after its grace).
func (s *system) managedForOther(e reservation.Entry, rt reservation.RuntimeIdentity) bool {
	for _, mi := range s.mgr.Managed() {
		other := mi.Owner.PodUID != e.PodUID || mi.Owner.ContainerIndex != e.ContainerIndex || mi.Owner.DeviceIndex != e.DeviceIndex
		if other && (mi.Runtime.MIGUUID == rt.MIGUUID || (mi.GPUUUID == e.GPUUUID && mi.Key.Placement.Overlaps(e.Placement))) {
			return true
		}
	}
	return false
}

// ambiguous reports whether a listed pod other than uid names migUUID.
func (s *system) ambiguous(uid, migUUID string) bool {
	for _, p := range s.pods {
		if p.gone || p.uid() == uid {
			continue
		}
		entries, _ := reservation.DecodeString(p.annotation())
		for _, e := range entries {
			if e.MIGUUID == migUUID {
				return true
			}
		}
	}
	return false
}

// withheldOverlap reports whether an untrusted pod's entry overlaps e.
func (s *system) withheldOverlap(want *reservation.DesiredSet, e reservation.Entry) bool {
	for _, w := range want.Withheld {
		if w.GPUUUID == e.GPUUUID && w.Placement.Overlaps(e.Placement) && w.PodUID != e.PodUID {
			return true
		}
	}
	return false
}

// listing is the device plugin's pod listing, from its informer cache. It
// is complete unless the draw says a list or watch call failed; an
// incomplete listing may hold any subset of the pods (a cache that has not
// synced, a failed page). Once the informer has synced, a complete listing
// holds every pod that existed at the sync, and may lag only behind pods
// created since and never listed, within the current clock epoch (informers
// lag by less than the manager's grace). forced asks for a complete,
// current listing.
func (s *system) listing(t *rapid.T, label string, forced bool) reservation.Snapshot {
	snap := reservation.Snapshot{Complete: true, Now: s.clock.now}
	partial, lag := false, false
	if !forced {
		snap.Complete = rapid.IntRange(0, 4).Draw(t, label+" listing complete") > 0
		if snap.Complete {
			lag = s.synced && rapid.IntRange(0, 3).Draw(t, label+" listing lags") == 0
		} else {
			partial = rapid.Bool().Draw(t, label+" listing partial")
		}
	}
	for _, p := range s.pods {
		if p.gone {
			continue
		}
		if lag && !p.seen && p.epoch == s.epoch {
			continue
		}
		if partial && !rapid.Bool().Draw(t, label+" lists "+p.uid()) {
			continue
		}
		if snap.Complete {
			p.seen = true
		}
		snap.Pods = append(snap.Pods, *p.pod)
	}
	if snap.Complete {
		s.synced = true
	}
	return snap
}

func (s *system) gpuUUID(i int) string { return s.sched[i].UUID }

// armed reports whether an injected fault may still affect a call.
func (s *system) armed() bool {
	s.faults = slices.DeleteFunc(s.faults, func(a armedFault) bool { return a.f.Fired() > 0 && a.after <= 0 })
	return len(s.faults) > 0
}

// tick ages fired faults by one step.
func (s *system) tick() {
	for i := range s.faults {
		if s.faults[i].f.Fired() > 0 {
			s.faults[i].after--
		}
	}
}

// setAnnotation stores a new annotation value on p, records a validated
// value's placements as claims, and lets the scheduler's informer see it.
func (s *system) setAnnotation(p *simPod, value string) {
	ann := map[string]string{}
	for k, v := range p.pod.Annotations {
		ann[k] = v
	}
	ann[reservation.AnnotationKey] = value
	p.pod.Annotations = ann
	entries, err := reservation.DecodeString(value)
	if err != nil {
		return // the informer cannot decode it and keeps the last record
	}
	if reservation.Validate(entries) == nil {
		for _, e := range entries {
			s.claims[claim{e.GPUUUID, e.Placement}] = true
		}
	}
	p.informed = value
	if p.active {
		_ = s.ledger.UpdatePod(nodeName, p.uid(), reservationsOf(p.uid(), entries))
	}
}

// requestsOf returns the device requests of a pod spec whose containers
// request exactly what the record value reserves; nil when it does not
// decode.
func requestsOf(value string) []int {
	entries, err := reservation.DecodeString(value)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if e.ContainerIndex < 0 || e.ContainerIndex > 16 {
			return nil
		}
		for len(out) <= e.ContainerIndex {
			out = append(out, 0)
		}
		out[e.ContainerIndex]++
	}
	return out
}

func reservationsOf(uid string, entries []reservation.Allocation) []placement.Reservation {
	rs := make([]placement.Reservation, 0, len(entries))
	for _, e := range entries {
		rs = append(rs, placement.Reservation{PodUID: uid, ContainerIndex: e.ContainerIndex, DeviceIndex: e.DeviceIndex,
			GPUUUID: e.GPUUUID, Profile: e.Profile, Placement: e.Placement})
	}
	return rs
}

func (s *system) newPod(attack string) *simPod {
	s.next++
	uid := fmt.Sprintf("pod-%d", s.next)
	if attack != "" {
		uid = fmt.Sprintf("forger-%d", s.next)
	}
	p := &simPod{attack: attack, active: true, epoch: s.epoch, received: map[devKey]string{},
		pod: &reservation.Pod{UID: uid, Namespace: "ns", Name: uid, Phase: reservation.PodRunning, Annotations: map[string]string{}}}
	s.pods = append(s.pods, p)
	s.byUID[uid] = p
	return p
}

func (s *system) pick(t *rapid.T, label string, ok func(*simPod) bool) *simPod {
	var c []*simPod
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

// arrive is a pod arriving with a MIG request: the scheduler places it
// through the ledger (assume), binds it and writes the annotation, and the
// informer confirms the assumption. A bind that fails is forgotten.
func (s *system) arrive(t *rapid.T) {
	req := s.drawRequest(t)
	s.next++
	uid := fmt.Sprintf("pod-%d", s.next)
	as, err := s.ledger.Reserve(nodeName, uid, req)
	if err != nil {
		if !errors.Is(err, placement.ErrUnschedulable) {
			t.Fatalf("Reserve(%s): %v", placementtest.FormatRequest(req), err)
		}
		s.stats.pending++
		return // stays Pending
	}
	if rapid.IntRange(0, 9).Draw(t, "bind fails") == 0 {
		if !s.ledger.Forget(uid) {
			t.Fatalf("Forget(%s) of an assumed pod = false", uid)
		}
		return
	}
	entries := make([]reservation.Allocation, 0, len(as))
	for _, a := range as {
		entries = append(entries, reservation.Allocation{ContainerIndex: a.ContainerIndex, DeviceIndex: a.DeviceIndex,
			GPUUUID: a.GPUUUID, Profile: a.Profile, Placement: a.Placement})
	}
	if err := reservation.Validate(entries); err != nil {
		t.Fatalf("scheduler wrote an invalid reservation %v: %v", entries, err)
	}
	s.next--
	p := s.newPod("")
	if p.uid() != uid {
		t.Fatalf("uid %s, want %s", p.uid(), uid)
	}
	for _, c := range req.Containers {
		p.pod.DeviceRequests = append(p.pod.DeviceRequests, c.Devices)
	}
	if err := s.ledger.AddPod(nodeName, uid, reservationsOf(uid, entries)); err != nil {
		t.Fatalf("AddPod confirming %s: %v", uid, err)
	}
	s.setAnnotation(p, reservation.EncodeString(entries))
	s.stats.placed++
	if len(entries) > 1 {
		s.stats.multiDevice++
	}
}

// drawRequest draws a pod's MIG demand with placementtest's generator
// over the scheduler's view of the node (several containers and devices,
// MiB, percent, whole-GPU and exact-profile demands, preferences, UUID and
// type constraints), at most three devices so that two GPUs hold several
// pods. A pod that requests no device is not a MIG pod: it gets one.
func (s *system) drawRequest(t *rapid.T) *placement.Request {
	req := placementtest.RequestGen(placementtest.Node{GPUs: s.sched}, 3).Draw(t, "request")
	total := 0
	for _, c := range req.Containers {
		total += c.Devices
	}
	if total == 0 {
		req.Containers[0].Devices = 1
	}
	return &req
}

func (s *system) allocate(t *rapid.T) {
	p := s.pick(t, "active pod", func(p *simPod) bool { return p.active && !p.gone && !p.moved })
	s.doAllocate(t, p, s.drawContainer(t, p), false)
}

func (s *system) repeatAllocate(t *rapid.T) {
	p := s.pick(t, "allocated pod", func(p *simPod) bool { return p.active && !p.gone && !p.moved && len(p.received) > 0 })
	var cs []int
	for k := range p.received {
		if !slices.Contains(cs, k.c) {
			cs = append(cs, k.c)
		}
	}
	slices.Sort(cs)
	s.doAllocate(t, p, rapid.SampledFrom(cs).Draw(t, "container"), false)
}

func (s *system) drawContainer(t *rapid.T, p *simPod) int {
	cs := p.containers()
	if len(cs) == 0 {
		return rapid.IntRange(0, 1).Draw(t, "container")
	}
	return rapid.SampledFrom(cs).Draw(t, "container")
}

// doAllocate is kubelet's Allocate for one container of p. The device
// plugin patches the annotation; a lost patch fails kubelet's Allocate, so
// the container receives the devices only when the patch lands. must makes
// any failure fatal (the drain, where nothing may block a valid pod).
func (s *system) doAllocate(t *rapid.T, p *simPod, container int, must bool) {
	s.plugin(t)
	armed := s.armed()
	snap := s.listing(t, "allocate", must)
	before, _ := reservation.DecodeString(p.annotation())
	pod := *p.pod
	res, err := s.mgr.Allocate(s.ctx, realize.AllocateRequest{Pod: pod, ContainerIndex: container, Snapshot: snap})
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
		return
	}
	s.allocated(t, p, container, must, allocateCall{pod: pod, snap: snap, armed: armed, before: before, res: res, err: err})
}

// allocateCall is one Allocate and what it was called with.
type allocateCall struct {
	pod    reservation.Pod // the pod as the call saw it
	snap   reservation.Snapshot
	armed  bool
	before []reservation.Allocation
	res    realize.AllocateResult
	err    error
}

// allocated is kubelet and the plugin after an Allocate returned: a
// failure is checked against what may fail; on success the plugin patches
// the pod (the patch may be lost, failing kubelet's call) and the
// container receives the devices.
func (s *system) allocated(t *rapid.T, p *simPod, container int, must bool, c allocateCall) {
	res, err := c.res, c.err
	if err != nil {
		if must {
			t.Fatalf("Allocate(%s container %d) in the drain: %v", p.uid(), container, err)
		}
		if p.attack != "" {
			s.stats.forgerRefusals++
		}
		s.expectAllocateError(t, p, c.snap, c.armed, err)
		return
	}
	s.stats.allocations++
	if !must && rapid.IntRange(0, 7).Draw(t, "patch lost") == 0 {
		return
	}
	seen := map[string]bool{}
	for _, d := range res.Devices {
		if seen[d.Runtime.MIGUUID] {
			t.Fatalf("Allocate of %s returned %s for two devices: %+v", p.uid(), d.Runtime.MIGUUID, res.Devices)
		}
		seen[d.Runtime.MIGUUID] = true
	}
	if res.Patch != nil {
		s.setAnnotation(p, res.Annotation)
	}
	s.handOut(t, p, c)
}

// burst runs kubelet's Allocate for two different pods and a reconcile
// pass at the same time, as a device plugin serves them, then handles the
// results in order. The race detector watches the manager and the fake.
func (s *system) burst(t *rapid.T) {
	s.plugin(t)
	var pods []*simPod
	for _, p := range s.pods {
		if p.active && !p.gone && !p.moved {
			pods = append(pods, p)
		}
	}
	if len(pods) < 2 {
		t.Skip("fewer than two active pods")
	}
	i := rapid.IntRange(0, len(pods)-1).Draw(t, "first pod")
	j := rapid.IntRange(0, len(pods)-2).Draw(t, "second pod")
	if j >= i {
		j++
	}
	chosen := []*simPod{pods[i], pods[j]}
	containers := []int{s.drawContainer(t, chosen[0]), s.drawContainer(t, chosen[1])}
	armed := s.armed()
	calls := make([]allocateCall, 2)
	for k, p := range chosen {
		calls[k] = allocateCall{pod: *p.pod, snap: s.listing(t, "burst allocate", false), armed: armed}
		calls[k].before, _ = reservation.DecodeString(p.annotation())
	}
	rsnap := s.listing(t, "burst reconcile", false)
	before := s.node.Snapshot()
	var rerr error
	run := make([]func(), 0, len(chosen)+1)
	for k := range chosen {
		req := realize.AllocateRequest{Pod: calls[k].pod, ContainerIndex: containers[k], Snapshot: calls[k].snap}
		run = append(run, func() { calls[k].res, calls[k].err = s.mgr.Allocate(s.ctx, req) })
	}
	run = append(run, func() { _, rerr = s.mgr.Reconcile(s.ctx, rsnap) })
	serve(t, "burst order", run)
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
		return
	}
	if rerr != nil && !armed {
		t.Fatalf("concurrent Reconcile without faults: %v", rerr)
	}
	if !reservation.Desired(rsnap).Authorized && !reservation.Desired(calls[0].snap).Authorized &&
		!reservation.Desired(calls[1].snap).Authorized && !s.createdOnly(before) {
		t.Fatalf("a burst without any authorised listing destroyed instances")
	}
	for k, p := range chosen {
		s.allocated(t, p, containers[k], false, calls[k])
	}
}

// concurrentFlag chooses how burst and raceAllocate serve their calls; see
// serve.
var concurrentFlag = flag.Bool("model.concurrent", raceEnabled,
	"TestSystem: serve a burst's calls at once (default under the race detector) instead of one after another in a drawn order")

// serve runs the calls a device plugin serves at once. With
// -model.concurrent (the default under the race detector) they run from
// their own goroutines at the same time, so the detector and the
// invariants watch real interleavings; which call reaches the hardware
// first then decides MIG UUIDs, which call an armed fault hits and what a
// concurrent reconcile sees, so such a failure may not replay. Otherwise
// they run one after another in an order the sequence draws: the outcome
// depends only on the draws, and every failure replays from its fail file.
// The order is drawn in both modes, so a fail file replays in either.
func serve(t *rapid.T, label string, calls []func()) {
	// A Fisher-Yates shuffle of fixed length: every burst draws the same
	// number of values, whatever the order.
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	for i := range len(order) - 1 {
		j := rapid.IntRange(i, len(order)-1).Draw(t, label)
		order[i], order[j] = order[j], order[i]
	}
	if !*concurrentFlag {
		for _, i := range order {
			calls[i]()
		}
		return
	}
	var wg sync.WaitGroup
	for _, i := range order {
		wg.Go(calls[i])
	}
	wg.Wait()
}

// createdOnly reports whether every complete instance in before is still
// live (a GI without a CI at a reserved key is removed without
// authorisation: nothing can run on it).
func (s *system) createdOnly(before []realize.Instance) bool {
	live := map[[2]uint32]bool{}
	for _, in := range s.node.Snapshot() {
		live[[2]uint32{uint32(in.GPU), in.GIID}] = true
	}
	for _, in := range before {
		if len(in.ComputeInstances) > 0 && !live[[2]uint32{uint32(in.GPU), in.GIID}] {
			return false
		}
	}
	return true
}

// handOut is p's container receiving the devices of a successful
// Allocate: they are granted in the safety model, which fails when one was
// ever granted to another pod or is not backed by a trusted entry of the
// record the call saw. A repeated Allocate must return the annotated
// instance while it is live.
func (s *system) handOut(t *rapid.T, p *simPod, c allocateCall) {
	for _, d := range c.res.Devices {
		s.forgetResidual(p, c.pod, d)
	}
	if err := s.safety.Grant(c.pod, c.res.Devices); err != nil {
		t.Fatalf("Allocate(%s, %s): %v", p.uid(), p.attack, err)
	}
	live := s.liveByMIG()
	for _, d := range c.res.Devices {
		mig := d.Runtime.MIGUUID
		if d.Index < len(c.before) {
			if prev, ok := c.before[d.Index].Runtime(); ok && prev != d.Runtime {
				if holder, held := s.safety.Holder(prev.MIGUUID); held && holder == p.uid() {
					if _, isLive := live[prev.MIGUUID]; isLive {
						t.Fatalf("Allocate of %s entry %d returned %v while the annotated %v is live", p.uid(), d.Index, d.Runtime, prev)
					}
				}
			}
		}
		k := devKey{d.Entry.ContainerIndex, d.Entry.DeviceIndex}
		if old, ok := p.received[k]; ok && old != mig {
			if _, isLive := live[old]; isLive {
				t.Fatalf("pod %s device %v got %s while its earlier %s is live", p.uid(), k, mig, old)
			}
		}
		p.received[k] = mig
		p.gen = s.gen
		s.stats.handOuts++
	}
}

// forgetResidual calls Safety.Forget for exactly the residual risk the
// realize package documents: after a restart, a pod whose record is a
// forged copy naming an ended pod's device, where the ended pod left no
// trace in the API (it is gone, or its record no longer decodes, so it
// names nothing), cannot be told from the original. The earlier owner must
// have received the device from an earlier plugin process (the current
// one remembers whom it handed it to); a process still running on the
// device proves nothing, since the true owner's processes run on adopted
// devices too. "Ended" is exactly !o.holds(now): a pod deleting whose
// containers may still run is not ended, so a copy of its record handed
// its device fails the model. Such hand-outs are counted, not failed.
func (s *system) forgetResidual(p *simPod, pod reservation.Pod, d realize.Device) {
	mig := d.Runtime.MIGUUID
	entries, err := reservation.DecodeString(pod.Annotations[reservation.AnnotationKey])
	if err != nil || d.Index < 0 || d.Index >= len(entries) || entries[d.Index].MIGUUID != mig {
		return // not a copy of the device's identity
	}
	for _, o := range s.pods {
		if o == p || o.holds(s.clock.now) || o.gen >= s.gen || !slices.Contains(slices.Collect(maps.Values(o.received)), mig) {
			continue
		}
		if _, err := reservation.DecodeString(o.annotation()); o.gone || err != nil {
			s.safety.Forget(mig)
			s.residual++
		}
	}
}

// holderOf names the class of what holds one of p's placements: "record"
// when another pod still in the API that requests devices has a record that names an
// overlapping placement or a MIG UUID p's record names, "undecidable
// record" when another listed pod's record does not decode (the trust
// rule cannot clear it), "instance" when the hardware holds an instance
// there that p was not handed, "own earlier device" when it holds the
// one p was handed (its record lost the identity, as after a lost patch,
// so the manager cannot tell the instance is p's); "" when nothing does.
func (s *system) holderOf(p *simPod) string {
	mine, err := reservation.DecodeString(p.annotation())
	if err != nil {
		return "undecidable record"
	}
	overlaps := func(gpu string, at capability.Placement) bool {
		return slices.ContainsFunc(mine, func(a reservation.Allocation) bool { return a.GPUUUID == gpu && a.Placement.Overlaps(at) })
	}
	for _, o := range s.pods {
		if o == p || o.gone || o.annotation() == "" || !o.pod.RequestsDevices() {
			continue // the trust rule: a pod that requests no device holds none
		}
		theirs, err := reservation.DecodeString(o.annotation())
		if err != nil {
			return "undecidable record"
		}
		if slices.ContainsFunc(theirs, func(a reservation.Allocation) bool {
			return overlaps(a.GPUUUID, a.Placement) || a.MIGUUID != "" && slices.ContainsFunc(mine, func(b reservation.Allocation) bool { return b.MIGUUID == a.MIGUUID })
		}) {
			return "record"
		}
	}
	handed := slices.Collect(maps.Values(p.received))
	for _, in := range s.node.Snapshot() {
		if !overlaps(s.gpuUUID(in.GPU), in.Placement) {
			continue
		}
		if slices.ContainsFunc(in.ComputeInstances, func(ci realize.ComputeInstance) bool { return slices.Contains(handed, ci.MIGUUID) }) {
			return "own earlier device"
		}
		return "instance"
	}
	return ""
}

// expectAllocateError accepts the failures a healthy system may answer
// with and fails on anything else when no fault was armed.
func (s *system) expectAllocateError(t *rapid.T, p *simPod, snap reservation.Snapshot, armed bool, err error) {
	if armed {
		return
	}
	switch {
	case p.attack != "" || p.saved != "":
		return // a forged or corrupt record: refusing it is the point
	case errors.Is(err, realize.ErrConflict), errors.Is(err, realize.ErrOccupied):
		// Allowed only where something still holds p's placement: an
		// ended pod's instance not yet released (unauthorised listing,
		// processes still running), or another listed pod's record; or
		// where the call's listing did not authorise taking over what
		// occupies the key.
		if why := s.holderOf(p); why != "" {
			s.stats.refusals[why]++
			return
		}
		if !reservation.Desired(snap).Authorized {
			// Taking over an unmanaged instance at the key (a fault's
			// leftover) needs an authorised listing.
			s.stats.refusals["unauthorised listing"]++
			return
		}
		t.Fatalf("Allocate(%s) refused (%v) though no other pod's record or instance holds its placements", p.uid(), err)
	case errors.Is(err, realize.ErrNoReservation):
		return // a container without devices
	}
	want := reservation.Desired(snap)
	if want.IsUnknown(p.uid()) {
		return // another pod's record makes this one untrustworthy
	}
	t.Fatalf("Allocate(%s) without faults: %v", p.uid(), err)
}

// end ends a pod the way Kubernetes does: Succeeded, Failed, deleting, or
// deleted outright. Its containers are killed unless the draw leaves a
// process behind for a while.
func (s *system) end(t *rapid.T) {
	p := s.pick(t, "pod to end", func(p *simPod) bool { return p.active && !p.gone })
	s.endPod(p, rapid.IntRange(0, 3).Draw(t, "how"))
	if rapid.IntRange(0, 3).Draw(t, "processes linger") > 0 {
		s.stopProcesses(t, p.uid())
	}
}

func (s *system) endPod(p *simPod, how int) {
	p.active = false
	switch how {
	case 0:
		p.pod.Phase = reservation.PodSucceeded
	case 1:
		p.pod.Phase = reservation.PodFailed
	case 2:
		// Deleted with a grace period: its containers may run until they
		// stop or the grace period ends, and its slots stay taken.
		p.pod.Deleting, p.terminating = true, true
		p.pod.DeletionDeadline = s.clock.now.Add(30 * time.Second)
		return
	default:
		p.gone = true
	}
	s.ledger.DeletePod(p.uid())
}

// releaseEnded frees the scheduler's slots of deleting pods that are
// released now (containers stopped, grace period over, or gone).
func (s *system) releaseEnded() {
	for _, p := range s.pods {
		if p.terminating && !p.holds(s.clock.now) {
			s.ledger.DeletePod(p.uid())
		}
	}
}

// stopContainers is the kubelet reporting every container of a deleting
// pod terminated: the pod is released.
func (s *system) stopContainers(t *rapid.T) {
	p := s.pick(t, "terminating pod", func(p *simPod) bool { return p.holds(s.clock.now) && !p.active })
	s.stopProcesses(t, p.uid())
	p.pod.ContainersTerminated = true
	s.releaseEnded()
}

// raceAllocate runs kubelet's Allocate twice at once for the same
// container (a retry after a timeout, or two plugin processes during a
// rolling update), then handles both results: whatever one call's
// rollback destroys, the other must not have handed out.
func (s *system) raceAllocate(t *rapid.T) {
	s.plugin(t)
	p := s.pick(t, "active pod", func(p *simPod) bool { return p.active && !p.gone && !p.moved })
	container := s.drawContainer(t, p)
	armed := s.armed()
	calls := make([]allocateCall, 2)
	for k := range calls {
		calls[k] = allocateCall{pod: *p.pod, snap: s.listing(t, "race allocate", false), armed: armed}
		calls[k].before, _ = reservation.DecodeString(p.annotation())
	}
	run := make([]func(), 0, len(calls))
	for k := range calls {
		req := realize.AllocateRequest{Pod: calls[k].pod, ContainerIndex: container, Snapshot: calls[k].snap}
		run = append(run, func() { calls[k].res, calls[k].err = s.mgr.Allocate(s.ctx, req) })
	}
	serve(t, "race order", run)
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
		return
	}
	for k := range calls {
		s.allocated(t, p, container, false, calls[k])
	}
}

func (s *system) stopProcesses(t *rapid.T, uid string) {
	stopped := false
	// In PID order: the fake lists processes in the order they remain,
	// and map order would make a sequence's course differ between runs.
	for _, pid := range slices.Sorted(maps.Keys(s.procs)) {
		if pr := s.procs[pid]; pr.uid == uid {
			if err := s.node.StopProcess(pid); err != nil {
				t.Fatalf("StopProcess(%d): %v", pid, err)
			}
			delete(s.procs, pid)
			stopped = true
		}
	}
	if stopped {
		s.observe(t)
	}
}

// vanish removes an ended pod from the API.
func (s *system) vanish(t *rapid.T) {
	p := s.pick(t, "ended pod", func(p *simPod) bool { return !p.active && !p.gone })
	p.gone = true
	s.releaseEnded()
}

func (s *system) reconcile(t *rapid.T) {
	if rapid.IntRange(0, 2).Draw(t, "time passes") == 0 {
		s.advance()
	}
	s.plugin(t)
	armed := s.armed()
	snap := s.listing(t, "reconcile", false)
	before := s.node.Snapshot()
	rep, err := s.mgr.Reconcile(s.ctx, snap)
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
		return
	}
	if err != nil && !armed {
		t.Fatalf("Reconcile without faults: %v", err)
	}
	if !reservation.Desired(snap).Authorized {
		if rep.Authorized || len(rep.Released) > 0 || len(s.node.Snapshot()) < len(before) {
			t.Fatalf("unauthorised reconcile destroyed: %v", rep)
		}
	}
}

// advance moves the clock past the manager's grace for pods missing from
// a listing; informer lag never spans it.
func (s *system) advance() {
	s.clock.now = s.clock.now.Add(time.Hour)
	s.epoch++
	s.releaseEnded()
}

func (s *system) collectLeaks(t *rapid.T) {
	s.plugin(t)
	armed := s.armed()
	snap := s.listing(t, "collect", false)
	before := s.node.Snapshot()
	rep, err := s.mgr.CollectLeaks(s.ctx, snap)
	if s.hw.dead.Load() {
		s.startPlugin(t, false)
		return
	}
	if err != nil && !armed {
		t.Fatalf("CollectLeaks without faults: %v", err)
	}
	if !reservation.Desired(snap).Authorized && (len(rep.Collected) > 0 || len(s.node.Snapshot()) < len(before)) {
		t.Fatalf("unauthorised leak collection destroyed: %v", rep.Collected)
	}
}

// strandedRetry makes the path a multi-device Allocate's rollback guards
// (it destroys only what it created) happen often: a running pod's record
// breaks, the plugin restarts and cannot adopt the pod's devices, the
// record is repaired, a process runs on the last device of one of its
// multi-device containers, and the kubelet calls Allocate for that
// container again. The Allocate may take over the first devices and then
// fail on the busy one; its rollback must leave the devices it took over
// to the pod that holds them.
func (s *system) strandedRetry(t *rapid.T) {
	p := s.pick(t, "pod with a multi-device container", func(p *simPod) bool {
		return p.active && !p.gone && p.attack == "" && p.saved == "" && !p.moved && len(multiDeviceContainers(p)) > 0
	})
	c := rapid.SampledFrom(multiDeviceContainers(p)).Draw(t, "container")
	v := p.annotation()
	p.saved = v
	s.setAnnotation(p, v[:rapid.IntRange(1, len(v)-1).Draw(t, "cut")])
	s.startPlugin(t, false)
	s.restore(p)
	last := devKey{c: c, d: -1}
	for k := range p.received {
		if k.c == c && k.d > last.d {
			last = k
		}
	}
	if in, ok := s.liveByMIG()[p.received[last]]; ok {
		pid, err := s.node.StartProcess(in.GPU, p.received[last])
		if err != nil {
			t.Fatalf("StartProcess(%d, %s): %v", in.GPU, p.received[last], err)
		}
		s.procs[pid] = proc{uid: p.uid(), mig: p.received[last]}
	}
	s.stats.strandedRetries++
	s.doAllocate(t, p, c, false)
}

// multiDeviceContainers returns p's containers that received two devices
// or more, in order.
func multiDeviceContainers(p *simPod) []int {
	n := map[int]int{}
	for k := range p.received {
		n[k.c]++
	}
	var cs []int
	for c, k := range n {
		if k > 1 {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	return cs
}

func (s *system) restart(t *rapid.T) {
	s.startPlugin(t, false)
}

// fault injects one NVML fault or a crash into the next calls.
func (s *system) fault(t *rapid.T) {
	nth := rapid.IntRange(1, 4).Draw(t, "nth")
	var gpus []int
	if rapid.Bool().Draw(t, "one GPU") {
		gpus = []int{rapid.IntRange(0, numGPUs-1).Draw(t, "fault GPU")}
	}
	var f fakehal.Fault
	after := 0
	switch kind := rapid.IntRange(0, 11).Draw(t, "fault kind"); kind {
	case 0:
		f = fakehal.Fault{Op: fakehal.OpCreateGI, Err: realize.ErrOccupied}
	case 1:
		f = fakehal.Fault{Op: fakehal.OpCreateCI, Err: realize.ErrNotSupported}
	case 2:
		f = fakehal.Fault{Op: fakehal.OpCreateGI, Crash: true} // dies between GI and CI
	case 3:
		f = fakehal.Fault{Op: fakehal.OpCreateCI, Crash: true} // dies before learning the CI
	case 4:
		f = fakehal.Fault{Op: fakehal.OpDestroyCI, Err: realize.ErrInUse}
	case 5:
		f = fakehal.Fault{Op: fakehal.OpDestroyGI, Err: realize.ErrNotSupported}
	case 6:
		f = fakehal.Fault{Op: fakehal.OpDestroyGI, Crash: true}
	case 7:
		f = fakehal.Fault{Op: fakehal.OpInstances, Err: fakehal.ReturnGPUIsLost}
	case 8:
		f = fakehal.Fault{Op: fakehal.OpProcesses, Err: fakehal.ReturnUnknown}
	case 9:
		f = fakehal.Fault{Op: fakehal.OpDestroyGI, Linger: rapid.IntRange(1, 3).Draw(t, "linger")}
		after = 6
	case 10:
		f = fakehal.Fault{Op: fakehal.OpDevices, Err: fakehal.ReturnUnknown}
	case 11:
		f = fakehal.Fault{Op: fakehal.OpGIProfiles, Err: fakehal.ReturnGPUIsLost}
	}
	f.Nth, f.GPUs = nth, gpus
	s.stats.faults++
	s.faults = append(s.faults, armedFault{f: s.node.Inject(f), after: after})
}

// attack adds a pod with an adversarial annotation and may allocate it at
// once.
func (s *system) attack(t *rapid.T) {
	kind := rapid.SampledFrom([]string{"copy", "duplicate", "stealMIG", "staleGI", "truncated", "partial", "garbage", "rogue", "unscheduled"}).Draw(t, "attack")
	value := s.forge(t, kind)
	p := s.newPod(kind)
	if kind == "unscheduled" {
		// Bound without the scheduler (spec.nodeName preset): a pod whose
		// spec really requests the devices, with a forged early
		// hami.io/bind-time that the plugin must never rank by.
		p.pod.Annotations = map[string]string{bindTimeAnnotation: "1"}
	}
	if kind == "unscheduled" || rapid.IntRange(0, 3).Draw(t, "forger requests its record") > 0 {
		// The strongest forger: its spec requests exactly what its record
		// reserves, so the trust rule passes and only the manager's
		// ownership rules protect the victim.
		p.pod.DeviceRequests = requestsOf(value)
	}
	s.setAnnotation(p, value)
	s.stats.attacks++
	if rapid.Bool().Draw(t, "allocate forger") {
		s.doAllocate(t, p, s.drawContainer(t, p), false)
	}
}

// realized returns the pods whose annotation carries a runtime identity.
func (s *system) victim(t *rapid.T, realized bool) *simPod {
	return s.pick(t, "victim", func(p *simPod) bool {
		if p.gone || p.attack != "" || p.saved != "" {
			return false
		}
		if !realized {
			return true
		}
		entries, _ := reservation.DecodeString(p.annotation())
		for _, e := range entries {
			if _, ok := e.Runtime(); ok {
				return true
			}
		}
		return false
	})
}

func (s *system) forge(t *rapid.T, kind string) string {
	switch kind {
	case "copy": // another pod's record verbatim, placement and MIG UUIDs
		return s.victim(t, true).annotation()
	case "duplicate": // a second pod duplicating a placement, no identity
		entries, _ := reservation.DecodeString(s.victim(t, false).annotation())
		for i := range entries {
			entries[i] = entries[i].Scheduled()
		}
		return reservation.EncodeString(entries)
	case "stealMIG": // own placement, another pod's runtime identity
		rt, _ := s.victimIdentity(t)
		a := s.drawPlacement(t)
		return reservation.EncodeString([]reservation.Allocation{a.WithRuntime(rt)})
	case "staleGI": // own placement, another pod's GI and CI IDs, a made-up MIG UUID
		rt, _ := s.victimIdentity(t)
		rt.MIGUUID = fmt.Sprintf("MIG-%08x-0000-4000-8000-%012x", rapid.Uint32().Draw(t, "uuid"), s.next)
		a := s.drawPlacement(t)
		return reservation.EncodeString([]reservation.Allocation{a.WithRuntime(rt)})
	case "truncated":
		v := s.victim(t, false).annotation()
		if len(v) < 2 {
			t.Skip("short annotation")
		}
		return v[:rapid.IntRange(1, len(v)-1).Draw(t, "cut")]
	case "partial": // one or two of the three runtime fields
		rt, e := s.victimIdentity(t)
		a := e.WithRuntime(rt)
		switch rapid.IntRange(0, 2).Draw(t, "drop") {
		case 0:
			a.MIGUUID = ""
		case 1:
			a.GPUInstanceID = reservation.OptionalID{}
		default:
			a.ComputeInstanceID = reservation.OptionalID{}
			if rapid.Bool().Draw(t, "drop two") {
				a.MIGUUID = ""
			}
		}
		return reservation.EncodeString([]reservation.Allocation{a})
	case "garbage":
		return rapid.StringOf(rapid.SampledFrom([]rune(`[]{}":,0123456789 abcGPU-MIG-containerIndexplacement`))).Draw(t, "garbage")
	case "unscheduled": // a valid record of one or two devices, placed by no scheduler
		a := s.drawPlacement(t)
		if rapid.Bool().Draw(t, "two devices") {
			b := s.drawPlacement(t)
			b.DeviceIndex = 1
			if b.GPUUUID != a.GPUUUID || !b.Placement.Overlaps(a.Placement) {
				return reservation.EncodeString([]reservation.Allocation{a, b})
			}
		}
		return reservation.EncodeString([]reservation.Allocation{a})
	default: // "rogue": a valid record at a placement the scheduler never chose
		return reservation.EncodeString([]reservation.Allocation{s.drawPlacement(t)})
	}
}

func (s *system) victimIdentity(t *rapid.T) (reservation.RuntimeIdentity, reservation.Allocation) {
	entries, _ := reservation.DecodeString(s.victim(t, true).annotation())
	var realized []reservation.Allocation
	for _, e := range entries {
		if _, ok := e.Runtime(); ok {
			realized = append(realized, e)
		}
	}
	e := rapid.SampledFrom(realized).Draw(t, "victim entry")
	rt, _ := e.Runtime()
	return rt, e.Scheduled()
}

// drawPlacement draws any published placement of any profile.
func (s *system) drawPlacement(t *rapid.T) reservation.Allocation {
	g := rapid.IntRange(0, numGPUs-1).Draw(t, "gpu")
	prof := rapid.SampledFrom(s.sched[g].Profiles).Draw(t, "profile")
	at := rapid.SampledFrom(prof.Placements).Draw(t, "placement")
	return reservation.Allocation{GPUUUID: s.gpuUUID(g), Profile: prof.Name, Placement: at}
}

// corrupt breaks an active pod's own record (a buggy or malicious writer):
// truncated JSON, a partial runtime identity, or one entry moved to
// another placement (one another active pod's record names, which the
// rewritten entry loses) with its identity kept. repair restores it.
func (s *system) corrupt(t *rapid.T) {
	p := s.pick(t, "pod to corrupt", func(p *simPod) bool { return p.active && !p.gone && p.attack == "" && p.saved == "" })
	v := p.annotation()
	var bad string
	entries, _ := reservation.DecodeString(v)
	how := rapid.SampledFrom([]string{"truncate", "partial", "move", "lose a conflict"}).Draw(t, "corruption")
	if (how == "move" || how == "lose a conflict") && len(p.received) == 0 {
		how = "truncate" // only a running pod's record is moved (issue 40)
	}
	if how == "truncate" || len(entries) == 0 {
		bad = v[:rapid.IntRange(1, len(v)-1).Draw(t, "cut")]
	} else if how == "move" || how == "lose a conflict" {
		bad = s.moved(t, p, entries, how == "lose a conflict")
	} else {
		i := rapid.IntRange(0, len(entries)-1).Draw(t, "entry")
		entries[i].ComputeInstanceID = reservation.OptionalID{}
		entries[i].GPUInstanceID = reservation.SomeID(uint32(rapid.IntRange(0, 14).Draw(t, "gi")))
		if entries[i].MIGUUID == "" {
			entries[i].MIGUUID = "MIG-00000000-0000-4000-8000-000000000000"
		}
		bad = reservation.EncodeString(entries)
	}
	p.saved = v
	if how == "move" || how == "lose a conflict" {
		s.rewrite(p, bad)
		return
	}
	s.setAnnotation(p, bad)
}

// rewrite replaces p's record with value, a valid record its owner wrote
// after the binding. The scheduler keeps the slots it bound p to until p
// ends, whatever its annotation says later (issue 35), so its ledger and
// informed record stay as they were.
func (s *system) rewrite(p *simPod, value string) {
	ann := maps.Clone(p.pod.Annotations)
	ann[reservation.AnnotationKey] = value
	p.pod.Annotations = ann
	p.moved = true
	entries, _ := reservation.DecodeString(value)
	for _, e := range entries {
		s.claims[claim{e.GPUUUID, e.Placement}] = true
	}
}

// moved rewrites one entry of p's record to another placement, keeping
// its runtime identity: a drawn one, or one another active pod's record
// names (the rewritten entry loses the conflict to the earlier record).
// Each kind is counted for the coverage check.
func (s *system) moved(t *rapid.T, p *simPod, entries []reservation.Allocation, conflict bool) string {
	i := rapid.IntRange(0, len(entries)-1).Draw(t, "entry")
	to := s.drawPlacement(t)
	if conflict {
		o := s.pick(t, "pod whose placement it takes", func(o *simPod) bool {
			theirs, err := reservation.DecodeString(o.annotation())
			return o != p && o.active && !o.gone && err == nil && len(theirs) > 0
		})
		theirs, _ := reservation.DecodeString(o.annotation())
		to = rapid.SampledFrom(theirs).Draw(t, "its entry").Scheduled()
	}
	entries[i].GPUUUID, entries[i].Profile, entries[i].Placement = to.GPUUUID, to.Profile, to.Placement
	if conflict {
		s.stats.conflictRewrites++
	} else {
		s.stats.moveRewrites++
	}
	return reservation.EncodeString(entries)
}

func (s *system) repair(t *rapid.T) {
	// Only a running pod's record is repaired: an ended pod's broken
	// record stays broken (nothing writes to it any more).
	p := s.pick(t, "corrupt pod", func(p *simPod) bool { return p.saved != "" && p.active && !p.gone })
	s.restore(p)
}

func (s *system) restore(p *simPod) {
	v := p.saved
	p.saved, p.moved = "", false
	s.setAnnotation(p, v)
}

func (s *system) startProcess(t *rapid.T) {
	p := s.pick(t, "pod with a device", func(p *simPod) bool { return p.active && !p.gone && len(p.received) > 0 })
	var migs []string
	for _, m := range p.received {
		migs = append(migs, m)
	}
	slices.Sort(migs)
	mig := rapid.SampledFrom(migs).Draw(t, "device")
	in, ok := s.liveByMIG()[mig]
	if !ok {
		t.Fatalf("pod %s's device %s is not live", p.uid(), mig)
	}
	pid, err := s.node.StartProcess(in.GPU, mig)
	if err != nil {
		t.Fatalf("StartProcess(%d, %s): %v", in.GPU, mig, err)
	}
	s.procs[pid] = proc{uid: p.uid(), mig: mig}
}

func (s *system) stopProcess(t *rapid.T) {
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
		t.Fatalf("StopProcess(%d): %v", pid, err)
	}
	delete(s.procs, pid)
}

// settle stops every fault and every adversary, lets time pass and runs an
// authorised reconcile and leak collection, then checks that every live
// instance has an active owner: the realized instance of an active pod,
// or an unpatched instance at an active pod's reserved placement, which
// that pod's next Allocate takes over.
func (s *system) settle(t *rapid.T) {
	s.quiesce(t)
	s.passes(t)
	s.checkOwned(t, false)
}

// quiesce ends faults, forgers, corruption, and the processes of ended
// pods.
func (s *system) quiesce(t *rapid.T) {
	s.node.ClearFaults()
	s.faults = nil
	for _, p := range s.pods {
		if p.saved != "" && p.active && !p.gone {
			s.restore(p)
		}
		if p.attack != "" && !p.gone {
			// Deleted, and gone from the API: while an ended forger's
			// copy is listed, the instance it names has two claimants and
			// the manager rightly refuses to hand it to either.
			s.endPod(p, 3)
		}
		if !p.active {
			s.stopProcesses(t, p.uid())
		}
	}
	s.advance()
	if s.hw.dead.Load() {
		s.startPlugin(t, true)
	} else if s.adoptPending {
		s.adopt(t, true)
	}
}

// passes runs an authorised reconcile and leak collection; both must
// succeed. Stale listings need a second pass.
func (s *system) passes(t *rapid.T) {
	for range 2 {
		snap := s.listing(t, "settle", true)
		rep, err := s.mgr.Reconcile(s.ctx, snap)
		if err != nil || !rep.Authorized {
			t.Fatalf("settled Reconcile: %v (%v)", err, rep)
		}
		if lr, err := s.mgr.CollectLeaks(s.ctx, snap); err != nil || !lr.Authorized {
			t.Fatalf("settled CollectLeaks: %v (%v)", err, lr.Reasons)
		}
	}
}

// checkOwned checks that every live instance belongs to an active pod.
// exact additionally requires that it is that pod's annotated instance.
func (s *system) checkOwned(t *rapid.T, exact bool) {
	annotated := map[string]reservation.Allocation{}
	reserved := map[claim]bool{}
	for _, p := range s.pods {
		if !p.active || p.gone {
			continue
		}
		entries, err := reservation.DecodeString(p.annotation())
		if err != nil {
			t.Fatalf("active pod %s has an undecodable record after settling: %v", p.uid(), err)
		}
		for _, e := range entries {
			reserved[claim{e.GPUUUID, e.Placement}] = true
			if rt, ok := e.Runtime(); ok {
				annotated[rt.MIGUUID] = e
			}
		}
	}
	for _, in := range s.node.Snapshot() {
		at := claim{s.gpuUUID(in.GPU), in.Placement}
		owned := len(in.ComputeInstances) == 1
		if owned {
			e, ok := annotated[in.ComputeInstances[0].MIGUUID]
			owned = ok && claim{e.GPUUUID, e.Placement} == at
		}
		if !owned && (exact || !reserved[at]) {
			t.Fatalf("after settling, GPU %d GI %d %v (%d CIs) has no active owner; managed %v",
				in.GPU, in.GIID, in.Placement, len(in.ComputeInstances), s.mgr.Managed())
		}
	}
}

// check runs after every step.
func (s *system) check(t *rapid.T) {
	s.stats.steps++
	s.tick()
	if err := s.node.Check(); err != nil {
		t.Fatalf("hardware invariants: %v", err)
	}
	live := s.liveByMIG()
	for _, in := range s.node.Snapshot() {
		if !s.claims[claim{s.gpuUUID(in.GPU), in.Placement}] {
			t.Fatalf("GPU %d holds GI %d at %v, which no validated reservation ever named", in.GPU, in.GIID, in.Placement)
		}
	}
	s.observe(t)
	occ := s.ledgerOccupancy(t)
	for _, p := range s.pods {
		if !p.holds(s.clock.now) {
			continue
		}
		for _, mig := range p.received {
			in := live[mig]
			if p.attack == "" && occ[s.gpuUUID(in.GPU)]&placement.Occupancy(in.Placement.Mask()) != placement.Occupancy(in.Placement.Mask()) {
				t.Fatalf("the ledger does not count pod %s's realized instance at GPU %d %v", p.uid(), in.GPU, in.Placement)
			}
		}
	}
	for _, c := range s.ledger.Conflicts() {
		if s.byUID[c.PodUID].attack == "" && s.byUID[c.Other].attack == "" {
			t.Fatalf("the ledger holds overlapping reservations of two scheduled pods: %v", c)
		}
	}
}

// observe releases in the safety model every pod whose containers can no
// longer run and has it check the hardware: no device of a pod that is not
// released, and no GPU instance that ran processes at the last
// observation, destroyed or moved. It runs after every step and after
// every change of processes.
func (s *system) observe(t *rapid.T) {
	for _, p := range s.pods {
		if !p.holds(s.clock.now) {
			s.safety.Release(p.uid()) // an ended pod's devices may be reclaimed
		}
	}
	if err := s.safety.Observe(s.ctx, observer{s}); err != nil {
		t.Fatalf("safety: %v", err)
	}
}

// ledgerOccupancy compares the incrementally maintained ledger with one
// rebuilt from the pods' annotations (what a restarted scheduler sees) and
// returns the occupancy per GPU UUID.
func (s *system) ledgerOccupancy(t *rapid.T) map[string]placement.Occupancy {
	fresh := placement.NewLedger(placement.LedgerOptions{})
	if err := fresh.SetNode(nodeName, s.sched); err != nil {
		t.Fatalf("SetNode: %v", err)
	}
	for _, p := range s.pods {
		if !p.holds(s.clock.now) || p.informed == "" {
			continue
		}
		entries, err := reservation.DecodeString(p.informed)
		if err != nil {
			t.Fatalf("informed record of %s does not decode: %v", p.uid(), err)
		}
		_ = fresh.AddPod(nodeName, p.uid(), reservationsOf(p.uid(), entries))
	}
	got, _ := s.ledger.Node(nodeName)
	want, _ := fresh.Node(nodeName)
	occ := map[string]placement.Occupancy{}
	for i := range got {
		if got[i].Used != want[i].Used {
			t.Fatalf("ledger GPU %d occupancy %v, rebuilt from annotations %v", i, got[i].Used, want[i].Used)
		}
		occ[got[i].Grid.UUID()] = got[i].Used
	}
	return occ
}

// liveByMIG maps every live MIG device to its GPU instance.
func (s *system) liveByMIG() map[string]realize.Instance {
	live := map[string]realize.Instance{}
	for _, in := range s.node.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = in
		}
	}
	return live
}

// drain ends the sequence: faults and forgers stop, kubelet retries every
// active pod's Allocate, and the node must converge: every reservation
// realized exactly as annotated, nothing unowned, the ledger equal to the
// hardware, a restart adopting everything; then every pod ends and the
// hardware must be empty.
func (s *system) drain(t *rapid.T) {
	s.quiesce(t)
	s.passes(t)
	for _, p := range s.pods {
		if p.active && !p.gone {
			for _, c := range p.containers() {
				s.doAllocate(t, p, c, true)
			}
		}
	}
	s.passes(t)
	s.checkOwned(t, true)
	s.check(t)
	s.checkLedgerMatchesHardware(t)

	rep := s.startPlugin(t, true)
	if len(rep.Rejected) > 0 || len(rep.Leaks) > 0 || !rep.Authorized {
		t.Fatalf("restart after converging: rejected %v, leaks %v, reasons %v", rep.Rejected, rep.Leaks, rep.Reasons)
	}
	if got, want := len(rep.Adopted), len(s.node.Snapshot()); got != want {
		t.Fatalf("restart after converging adopted %d instances, want %d", got, want)
	}

	for _, p := range s.pods {
		if p.active {
			s.endPod(p, 0)
		}
		s.stopProcesses(t, p.uid())
	}
	s.advance()
	s.passes(t)
	if live := s.node.Snapshot(); len(live) != 0 {
		t.Fatalf("hardware after every pod ended = %+v, want empty", live)
	}
	if n := len(s.mgr.Managed()); n != 0 {
		t.Fatalf("managed after every pod ended = %d, want 0", n)
	}
	gpus, _ := s.ledger.Node(nodeName)
	for i, g := range gpus {
		if g.Used != 0 {
			t.Fatalf("ledger GPU %d still occupied %v after every pod ended", i, g.Used)
		}
	}
}

// checkLedgerMatchesHardware: once converged, the scheduler's occupancy is
// exactly the hardware's.
func (s *system) checkLedgerMatchesHardware(t *rapid.T) {
	hw := map[string]placement.Occupancy{}
	for _, in := range s.node.Snapshot() {
		u := s.gpuUUID(in.GPU)
		hw[u] = hw[u].Take(in.Placement)
	}
	gpus, _ := s.ledger.Node(nodeName)
	for i, g := range gpus {
		if g.Used != hw[g.Grid.UUID()] {
			t.Fatalf("converged GPU %d: ledger %v, hardware %v", i, g.Used, hw[g.Grid.UUID()])
		}
	}
}
