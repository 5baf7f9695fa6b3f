package systemtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// Kinds of pods in the device-plugin model.
const (
	honest  = "honest"   // bound by the scheduler with its record
	swapped = "swapped"  // its owner replaced the record after the binding
	forger  = "forger"   // created with spec.nodeName preset and a copied record
	optOut  = "opt-out"  // requests nvidia.com/gpu without MIG opt-in, bound by another scheduler with a copied record
	gpuFree = "gpu-free" // requests no GPU, created on the node with a bad record
)

// dpPod is one pod of the device-plugin model.
type dpPod struct {
	name  string
	kind  string
	slot  uint32 // the placement [slot, slot+1) the scheduler chose (honest, swapped) or the record claims
	swap  uint32 // the slot a swapped pod's record claims instead
	mig   string // the first MIG device the plugin handed it, once admitted
	epoch int    // the checkpoint epoch in which it was handed mig
	// layout are the slots the scheduler chose for each device of each
	// container, in container order, slot the first (honest, swapped);
	// nil for one container with one device at slot.
	layout [][]uint32
	// handed are the MIG devices the plugin handed it, in container and
	// device order, also those of the containers of a pod the kubelet
	// then rejected.
	handed []handedDev
	done   bool // admitted, refused or never admitted (GPU-free)
	ended  bool
	// extra are the slots its owner's edits made its record claim since
	// it runs (the scheduler counts them until the pod ends).
	extra []uint32
	// stripped: its owner stripped its record's runtime identity while
	// it ran.
	stripped bool
	// edited: its owner stripped, moved, removed, replaced or forged its record
	// while it ran, first in checkpoint epoch editEpoch.
	edited    bool
	editEpoch int
	// lostToEdit: it lost its device to the residual lostAfterEdit.
	lostToEdit bool
	// recordedEpoch is the last checkpoint epoch in which the model saw
	// the checkpoint record mig as the pod's (at the hand-out, or after
	// a restart adopted it again).
	recordedEpoch int
	// unrecordedEdit: its owner edited its record while the checkpoint
	// had recorded no device of the pod's since the last loss.
	unrecordedEdit bool
}

// running reports whether the pod holds a device its containers may use.
func (p *dpPod) running() bool { return p.mig != "" && !p.ended && !p.lostToEdit }

// lostAfterEdit reports whether p may lose its device to the residual of
// sequences without the admission policy: its owner rewrote its record
// (stripped its identity, moved, removed, replaced it, or forged its
// identity) and either the checkpoint was lost after that, or the edit
// was made while the checkpoint recorded no device of p's (it was lost
// after the hand-out and no restarted plugin had adopted the device
// again, for example because another record named its MIG UUID too). In
// both cases nothing the plugin can read says the device is p's. With the
// checkpoint that recorded the device intact it never may.
func (s *dpSystem) lostAfterEdit(p *dpPod) bool {
	return !s.sealed && p.edited && (p.editEpoch < s.epoch || p.unrecordedEdit)
}

// noteRecorded reads the checkpoint and notes, for each running pod, that
// it records the pod's device in the current epoch.
func (s *dpSystem) noteRecorded() {
	c, _, err := deviceplugin.ReadCheckpoint(s.ckpt)
	if err != nil {
		return // a corrupted checkpoint records nothing
	}
	for _, p := range s.pods {
		if len(p.handed) > 0 && !slices.ContainsFunc(p.handed, func(h handedDev) bool {
			return !slices.ContainsFunc(c.Devices, func(d deviceplugin.HandedDevice) bool {
				return d.PodUID == "uid-"+p.name && d.Runtime.MIGUUID == h.mig
			})
		}) {
			p.recordedEpoch = s.epoch
		}
	}
}

// dpStats counts what the device-plugin model exercised.
type dpStats struct {
	sequences, sealed, kept, lost, corrupted, whileDown, allocs, refused, stripped, swaps, bindConflicts, forged, optOuts, gpuFree int
	// The owner's record edits of running pods that went through, and
	// those the modelled admission policy refused.
	edits, conflictMoves, sealRefused int
	// Edits only sequences without the policy make: a running pod's
	// record replaced with a copy of another running pod's, its runtime
	// identity forged; Xid 79 injected in such a sequence.
	copiedEdits, forgedEdits, unsealedXids int
	// A running pod's record copied by a forger, then moved or removed by
	// its owner, then a restart with the checkpoint kept (copyEditRestart).
	copyEditRestarts int
	// Pods created with a made-up runtime identity, and those created
	// while the GPU was unhealthy; Xid 79 injected.
	fabricated, fabricatedUnhealthy, xids int
	// Honest pods refused after the kubelet's retries, by class (see
	// refusedHonest): the GPU unhealthy, or another listed pod's record
	// holds the slot or cannot be decided, or destruction is paused by
	// listed pods' records.
	refusedUnhealthy, refusedHeld, refusedUnauthorised int
	// Paths of issue 40's table (see dpPaths).
	endedReused, stripRestartClaims, replacedWhileDown, endedCopyClaims int
	// Issue 40's checkpoint paths: a running pod's record edited and the
	// plugin restarted with its checkpoint kept; a deleted pod's record,
	// MIG UUID included, copied while the plugin is down, and the
	// checkpoint kept.
	editRestarts, replacedKeptMIG int
	// Running pods that lost their device to the residual lostAfterEdit.
	lostAfterEdit int
	mdevStats
}

// dpSystem drives a real deviceplugin.Plugin over a kubetest API server
// and fake hardware, on a fake clock whose maintenance passes the model
// triggers. See the package documentation, "Device plugin model".
type dpSystem struct {
	client kubernetes.Interface
	hw     *fakehal.Node
	clk    *tickClock
	gpu    string
	dir    string
	ckpt   string
	pods   []*dpPod
	plugin *deviceplugin.Plugin
	stopFn func() error
	n      int
	epoch  int // incremented whenever the checkpoint is lost
	stats  *dpStats
	writes int // pod writes since the plugin's cache last caught up (barrier)
	// lastBarrier is the pod of the last barrier, deleted after it.
	lastBarrier string
	server      *kubetest.Server
	// sealed: this sequence models the admission policy (sealRecords).
	sealed bool
	// unhealthy: the GPU reported Xid 79 and has not recovered.
	unhealthy bool
	// strippedKept are the slots of pods whose identity was stripped
	// before a restart with the checkpoint kept.
	strippedKept map[uint32]bool
	// reused are the ended pods' devices managed for another pod (owner
	// UID and MIG UUID), counted once each as endedReused.
	reused  map[string]bool
	log     syncBuffer // the plugin's log, shown when an invariant fails
	created time.Time
}

// The plugin's ReconcileInterval and its manager's AbsentPodGrace, on the
// fake clock. The model steps the clock past the grace only once the
// plugin's cache holds every write (barrier): the grace covers a lagging
// cache, which the fake clock's leaps would otherwise outrun.
const (
	dpInterval = time.Second
	dpGrace    = time.Hour
)

// bound bounds the model's waits for the plugin: shortly before the
// binary's -timeout (set in TestMain, once the flags are parsed).
var bound time.Duration

func (s *dpSystem) config() deviceplugin.Config {
	cfg := deviceplugin.Config{Node: "n1", Client: s.client, Hardware: s.hw, SocketDir: s.dir, Checkpoint: s.ckpt,
		Clock: s.clk, ReconcileInterval: dpInterval, SocketCheckInterval: time.Hour,
		Manager: realize.Options{LeakInterval: time.Nanosecond, AbsentPodGrace: dpGrace, Now: s.clk.Now}}
	cfg.Logger = slog.New(slog.NewTextHandler(&s.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return cfg
}

func (s *dpSystem) start(t *rapid.T) {
	before := len(s.client.(*fake.Clientset).Actions())
	p, err := deviceplugin.New(s.config())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("plugin stopped during startup: %v", err)
	}
	s.plugin = p
	s.stopFn = func() error {
		cancel()
		return <-done
	}
	// The fake clientset starts a watch at the time of the call, not at
	// the listing's resourceVersion as an API server does: a write
	// between the plugin's listing and its watch would be lost for good.
	// The model writes only once the watch runs.
	deadline := time.Now().Add(bound)
	for !slices.ContainsFunc(s.client.(*fake.Clientset).Actions()[before:], func(a k8stesting.Action) bool {
		return a.GetVerb() == "watch" && a.GetResource().Resource == "pods"
	}) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin never watched pods")
		}
		time.Sleep(20 * time.Microsecond)
	}
	// The maintenance runner's first pass starts with the plugin, not on
	// the fake clock: the next step waits for it, so that what it
	// reclaims does not depend on when it ran (a restarted plugin's
	// first leak collection, for example, replays).
	for s.plugin.Reconciles() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's first maintenance pass never ended")
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func (s *dpSystem) stop(t *rapid.T) {
	if s.stopFn == nil {
		return
	}
	err := s.stopFn()
	s.plugin, s.stopFn = nil, nil
	if err != nil {
		t.Fatalf("plugin run: %v", err)
	}
}

// pass returns once a maintenance pass that started after the call has
// completed: each time the plugin's maintenance runner waits for its next
// tick it steps the fake clock past the plugin's interval, until the pass
// count grew by two.
func (s *dpSystem) pass(t *rapid.T) {
	n := s.plugin.Reconciles()
	deadline := time.Now().Add(bound)
	for s.plugin.Reconciles() < n+2 {
		if !s.clk.awaitRunner(deadline) {
			t.Fatalf("no maintenance pass")
		}
		if s.plugin.Reconciles() < n+2 {
			s.clk.Step(2 * dpInterval)
		}
	}
}

// barrier returns once the plugin's pod cache holds every write made
// before it: it creates a pod that requests nothing and waits until the
// checkpoint records its first observation (one watch delivers events in
// order).
func (s *dpSystem) barrier(t *rapid.T) {
	s.n++
	name := fmt.Sprintf("b%d", s.n)
	pod := s.newPod(name, nil)
	pod.Spec.NodeName = "n1"
	s.create(t, pod)
	s.awaitObserved(t, name, true)
	if err := s.client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.lastBarrier = name
	s.writes = 0
}

// awaitObserved waits until the checkpoint records a first observation of
// pod name (observed true) or no longer does (false): the plugin writes
// it when its cache first sees the pod, and drops it when its cache sees
// the pod leave the node.
func (s *dpSystem) awaitObserved(t *rapid.T, name string, observed bool) {
	deadline := time.Now().Add(bound)
	for {
		c, _, err := deviceplugin.ReadCheckpoint(s.ckpt)
		if err == nil && slices.ContainsFunc(c.Pods, func(p deviceplugin.PodObservation) bool { return p.UID == "uid-"+name }) == observed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint never recorded %s observed %v: %v", name, observed, err)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// synced makes the plugin's pod cache hold every write made so far, so
// that what the next Allocate or maintenance pass sees depends on the
// model's steps only, not on when the informer delivered them: failures
// then replay from rapid's fail file (see the package documentation,
// "Replaying a failure").
func (s *dpSystem) synced(t *rapid.T) {
	if s.writes > 0 {
		s.barrier(t)
	}
}

// settle keeps the fake's watch buffer (100 events) from overflowing: a
// barrier once the writes since the last one approach it.
func (s *dpSystem) settle(t *rapid.T) {
	if s.writes >= 30 && s.plugin != nil {
		s.barrier(t)
	}
}

// newPod is a pod of the model's namespace, created after every earlier
// one, whose container "main" requests gpus devices (none when nil).
func (s *dpSystem) newPod(name string, gpus *int64) *corev1.Pod {
	s.created = s.created.Add(time.Second)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(s.created), Annotations: map[string]string{}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if gpus != nil {
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(*gpus, resource.DecimalSI)}
	}
	return pod
}

func (s *dpSystem) create(t *rapid.T, pod *corev1.Pod) *corev1.Pod {
	s.writes++
	out, err := s.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *dpSystem) get(t *rapid.T, name string) *corev1.Pod {
	p, err := s.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *dpSystem) updateStatus(t *rapid.T, name string, edit func(*corev1.PodStatus)) {
	s.writes++
	p := s.get(t, name)
	edit(&p.Status)
	if _, err := s.client.CoreV1().Pods("default").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (s *dpSystem) entry(slot uint32) reservation.Allocation {
	return reservation.Allocation{GPUUUID: s.gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: slot, Size: 1}}
}

func record(a reservation.Allocation) string {
	return reservation.EncodeString([]reservation.Allocation{a})
}

// pending returns the pod the kubelet admits next: the earliest created
// MIG-requesting pod that is not done.
func (s *dpSystem) pending() *dpPod {
	for _, p := range s.pods {
		if !p.done && !p.ended && p.kind != gpuFree {
			return p
		}
	}
	return nil
}

// claimed reports whether a pod that may still be admitted or run claims
// slot: the scheduler counts what the records of the node's GPU pods
// claim, and the slot it chose for a pod until that pod ends.
func (s *dpSystem) claimed(slot uint32) bool {
	return slices.ContainsFunc(s.pods, func(p *dpPod) bool {
		return !p.ended && p.kind != gpuFree && (slices.Contains(slotsOf(p), slot) || p.kind == swapped && p.swap == slot || slices.Contains(p.extra, slot))
	})
}

func (s *dpSystem) pick(t *rapid.T, label string, ok func(*dpPod) bool) *dpPod {
	var out []*dpPod
	for _, p := range s.pods {
		if ok(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Skip("no " + label)
	}
	return rapid.SampledFrom(out).Draw(t, label)
}

// arrive: the scheduler binds a pod with its record on a free slot,
// through pods/binding with the version it read as precondition. Its
// owner may replace the record before the binding (the binding is refused
// and the scheduler binds again) or after it (the pod then carries a
// record the scheduler never wrote).
func (s *dpSystem) arrive(t *rapid.T) {
	var free []uint32
	for slot := uint32(0); slot < 7; slot++ {
		if !s.claimed(slot) {
			free = append(free, slot)
		}
	}
	if len(free) == 0 || s.pending() != nil { // one unrealized pod per node, as the scheduler's node lock keeps it
		t.Skip("no free slot, or a pod is pending")
	}
	layout := drawLayout(t, free)
	slot := layout[0][0]
	s.n++
	name := fmt.Sprintf("p%d", s.n)
	pod := s.newPod(name, nil)
	withContainers(pod, layout)
	pod.Annotations[kube.VGPUModeAnnotation] = kube.VGPUModeMIG
	pod.Spec.SchedulerName = deviceplugin.DefaultSchedulerName
	read := s.create(t, pod) // no record: the policy lets it through
	swap := rapid.SampledFrom([]string{"none", "before", "after"}).Draw(t, "owner swaps the record")
	swapSlot := rapid.Uint32Range(0, 6).Draw(t, "swapped slot")
	forged := record(s.entry(swapSlot))
	if swap == "before" {
		read.Annotations[reservation.AnnotationKey] = forged
		if !s.ownerUpdate(t, read) {
			swap = "none"
		}
	}
	bind := func(rv string) error {
		return s.client.CoreV1().Pods("default").Bind(context.Background(), &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: pod.UID, ResourceVersion: rv,
				Annotations: map[string]string{reservation.AnnotationKey: s.layoutRecord(layout)}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{})
	}
	if err := bind(read.ResourceVersion); err != nil {
		if swap != "before" {
			t.Fatalf("binding %s: %v", name, err)
		}
		s.stats.bindConflicts++
		if err := bind(s.get(t, name).ResourceVersion); err != nil { // the scheduler's retry, from a fresh read
			t.Fatalf("binding %s again: %v", name, err)
		}
	}
	kind := honest
	if swap == "after" {
		cur := s.get(t, name)
		cur.Annotations[reservation.AnnotationKey] = forged
		if s.ownerUpdate(t, cur) {
			kind = swapped
			s.stats.swaps++
		}
	}
	s.pods = append(s.pods, &dpPod{name: name, kind: kind, slot: slot, swap: swapSlot, layout: layout})
}

// admit: the kubelet admits the next pod: Allocate for each container in
// container order (admitContainers), then its status. A failed Allocate
// of any container rejects the pod.
func (s *dpSystem) admit(t *rapid.T) {
	p := s.pending()
	if p == nil {
		t.Skip("nothing pending")
	}
	s.synced(t)
	if slices.ContainsFunc(slotsOf(p), func(slot uint32) bool { return s.strippedKept[slot] }) {
		s.stats.stripRestartClaims++
	}
	if s.copiesEndedDevice(t, p) {
		s.stats.endedCopyClaims++
	}
	if c, err := s.admitContainers(t, p, s.liveMIGs()); err != nil {
		if p.kind == honest {
			s.refusedHonest(t, p, c, err)
		}
		// The kubelet rejects the pod. The next Allocate waits until the
		// plugin saw that, as the kubelet admits one pod at a time.
		s.stats.refused++
		p.done, p.ended = true, true
		s.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodFailed })
		s.barrier(t)
		return
	}
	s.stats.allocs++
	if p.kind == honest && len(p.handed) > 1 {
		s.stats.multiDevice++
	}
	if p.kind == honest && len(layoutOf(p)) > 1 {
		s.stats.multiContainer++
	}
	p.done = true
	names := s.get(t, p.name).Spec.Containers
	s.updateStatus(t, p.name, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		st.ContainerStatuses = nil
		for c, cont := range names {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: cont.Name,
				ContainerID: fmt.Sprintf("containerd://%s-%d", p.name, c), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
		}
	})
}

// refusedHonest checks that an honest pod's Allocate, refused after the
// kubelet's retries, was refused for an allowed reason. Liveness: once
// its retries passed AbsentPodGrace and maintenance ran, an honest pod
// gets its device unless the GPU is unhealthy (class refusedUnhealthy),
// a pod still in the API holds its slot: another pod's record names it,
// or a record on the node cannot be decided (class refusedHeld; the rule
// pauses such slots until those pods are gone, which the drain checks),
// or destruction is paused by listed pods' records (class
// refusedUnauthorised, see pausedByListedPods) and the refusal is a
// conflict, or, for a later container, the plugin's refusal to guess
// which pod it admits (FailedPrecondition): an earlier container's
// instance, created before a restart that lost the checkpoint, is not
// taken over while the pause lasts, so its identity stays unconfirmed.
// For a pod of several devices, c is the container whose Allocate was
// refused, and one of the pod's slots, of any container, must be held:
// the plugin decides on the pod as a whole, so a record that holds an
// earlier container's slot (its identity then unconfirmed after a
// restart that lost the checkpoint) refuses the later container too.
func (s *dpSystem) refusedHonest(t *rapid.T, p *dpPod, c int, err error) {
	if s.unhealthy && status.Code(err) == codes.FailedPrecondition {
		s.stats.refusedUnhealthy++
		return
	}
	slots := slices.Concat(layoutOf(p)...)
	for _, slot := range slots {
		at := *p
		at.slot = slot
		if _, held := s.recordHolder(t, &at); held {
			s.stats.refusedHeld++
			return
		}
	}
	code := status.Code(err)
	if (code == codes.Internal || c > 0 && code == codes.FailedPrecondition) && s.pausedByListedPods(t) {
		s.stats.refusedUnauthorised++
		return
	}
	t.Fatalf("honest %s container %d refused at slots %v, which no other pod's record holds: %v; %s", p.name, c, slots, err, s.diagnose())
}

// pausedByListedPods reports whether the plugin's last maintenance pass
// (the one the kubelet's last retry followed) was unauthorised, and every
// reason names pods still in the API: a *reservation.PodError (an
// invalid record) or a *reservation.ConflictError (two records that
// overlap). Destruction is then paused, and with it taking over an
// instance the manager does not manage (an ended pod's whose checkpoint
// was lost), which refuses an honest pod at a slot no record holds with
// a realize.ConflictError (codes.Internal). The pause lasts until those
// pods are gone or repaired; the drain checks that it ends and every
// instance is reclaimed then. An incomplete listing is no such reason.
func (s *dpSystem) pausedByListedPods(t *rapid.T) bool {
	rep, ran := s.plugin.LastReconcile()
	if !ran || rep.Authorized || len(rep.Reasons) == 0 {
		return false
	}
	list, err := s.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, o := range list.Items {
		listed[string(o.UID)] = true
	}
	for _, r := range rep.Reasons {
		var ce *reservation.ConflictError
		var pe *reservation.PodError
		switch {
		case errors.As(r, &ce):
			if !listed[ce.First.PodUID] || !listed[ce.Second.PodUID] {
				return false
			}
		case errors.As(r, &pe):
			if !listed[pe.Pod.UID] {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// copiesEndedDevice reports whether p's record names the MIG UUID an
// ended pod was handed while the current checkpoint recorded it: the
// plugin must not hand p that device (admit fails the model if it does).
func (s *dpSystem) copiesEndedDevice(t *rapid.T, p *dpPod) bool {
	allocs, err := kube.PodAllocations(s.get(t, p.name))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(allocs, func(a reservation.Allocation) bool {
		return a.MIGUUID != "" && slices.ContainsFunc(s.pods, func(o *dpPod) bool {
			return o != p && o.ended && slices.Contains(o.handed, handedDev{mig: a.MIGUUID, epoch: s.epoch})
		})
	})
}

func (s *dpSystem) placementOf(mig string) capability.Placement {
	for _, in := range s.hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			if ci.MIGUUID == mig {
				return in.Placement
			}
		}
	}
	return capability.Placement{}
}

// copied returns a record copying a pod's: its placement, and its MIG
// UUID when drawn and known.
func (s *dpSystem) copied(t *rapid.T, victim *dpPod) (string, uint32) {
	a := s.entry(victim.slot)
	if victim.mig != "" && rapid.Bool().Draw(t, "copy the MIG UUID") {
		if allocs, err := kube.PodAllocations(s.get(t, victim.name)); err == nil && len(allocs) > 0 && allocs[0].MIGUUID == victim.mig {
			if id, ok := allocs[0].Runtime(); ok {
				a = a.WithRuntime(id)
			}
		}
		if _, ok := a.Runtime(); !ok { // stripped: the forger knew it from before
			a = a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: victim.mig, GPUInstanceID: 1})
		}
	}
	return record(a), victim.slot
}

// forge: a pod created with the node preset copies another's record
// (running or ended: the API keeps a Succeeded pod's record).
func (s *dpSystem) forge(t *rapid.T) {
	if s.pending() != nil {
		t.Skip("a pod is pending")
	}
	victim := s.pick(t, "victim", func(p *dpPod) bool {
		return p.mig != "" && !s.deleted(p)
	})
	value, slot := s.copied(t, victim)
	s.forgeRecord(t, value, slot)
}

// forgeRecord creates, as its owner, a pod with the node preset and the
// record value at slot; it reports whether the API accepted it.
func (s *dpSystem) forgeRecord(t *rapid.T, value string, slot uint32) bool {
	s.n++
	name := fmt.Sprintf("f%d", s.n)
	one := int64(1)
	pod := s.newPod(name, &one)
	pod.Annotations[kube.VGPUModeAnnotation] = kube.VGPUModeMIG
	pod.Annotations[reservation.AnnotationKey] = value
	pod.Spec.NodeName = "n1"
	if _, ok := s.ownerCreate(t, pod); !ok {
		return false
	}
	s.pods = append(s.pods, &dpPod{name: name, kind: forger, slot: slot})
	s.stats.forged++
	return true
}

// optOut: a pod that requests nvidia.com/gpu without opting in to MIG,
// bound by another scheduler (whose binding proves nothing) with a copy
// of another pod's record.
func (s *dpSystem) optOut(t *rapid.T) {
	if s.pending() != nil {
		t.Skip("a pod is pending")
	}
	victim := s.pick(t, "victim", func(p *dpPod) bool { return p.mig != "" && !s.deleted(p) })
	value, slot := s.copied(t, victim)
	s.n++
	name := fmt.Sprintf("o%d", s.n)
	one := int64(1)
	pod := s.newPod(name, &one)
	pod.Annotations[reservation.AnnotationKey] = value
	read, ok := s.ownerCreate(t, pod)
	if !ok {
		return
	}
	if err := s.client.CoreV1().Pods("default").Bind(context.Background(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: read.UID, ResourceVersion: read.ResourceVersion},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.pods = append(s.pods, &dpPod{name: name, kind: optOut, slot: slot})
	s.stats.optOuts++
}

// gpuFree: a pod that requests no GPU, created on the node with a bad
// record: undecodable, invalid, legacy, or a copy of another pod's.
func (s *dpSystem) gpuFree(t *rapid.T) {
	s.n++
	name := fmt.Sprintf("g%d", s.n)
	pod := s.newPod(name, nil)
	pod.Spec.NodeName = "n1"
	switch rapid.SampledFrom([]string{"undecodable", "invalid", "legacy", "copy"}).Draw(t, "GPU-free record") {
	case "undecodable":
		pod.Annotations[reservation.AnnotationKey] = `[{"containerIndex":`
	case "invalid":
		pod.Annotations[reservation.AnnotationKey] = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + s.gpu +
			`","profile":"1g.5gb","placement":{"start":0,"size":0}}]`
	case "legacy":
		pod.Annotations[reservation.LegacyDevicesAnnotationKey] = s.gpu + "[1-3],NVIDIA,4864,0:;"
	case "copy":
		victim := s.pick(t, "victim", func(p *dpPod) bool { return p.mig != "" && !s.deleted(p) })
		pod.Annotations[reservation.AnnotationKey], _ = s.copied(t, victim)
	}
	if _, ok := s.ownerCreate(t, pod); !ok {
		return
	}
	s.pods = append(s.pods, &dpPod{name: name, kind: gpuFree, done: true})
	s.stats.gpuFree++
	s.updateStatus(t, name, func(st *corev1.PodStatus) { st.Phase = corev1.PodRunning })
}

// deleted reports whether p is gone from the API.
func (s *dpSystem) deleted(p *dpPod) bool {
	_, err := s.client.CoreV1().Pods("default").Get(context.Background(), p.name, metav1.GetOptions{})
	return err != nil
}

// end: a pod finishes (Succeeded or Failed) or is deleted.
func (s *dpSystem) end(t *rapid.T) {
	p := s.pick(t, "pod to end", func(p *dpPod) bool { return !p.ended && p.done })
	s.endPod(t, p, rapid.SampledFrom([]string{"succeeded", "failed", "deleted"}).Draw(t, "how"))
}

func (s *dpSystem) endPod(t *rapid.T, p *dpPod, how string) {
	p.ended = true
	switch how {
	case "succeeded":
		s.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodSucceeded })
	case "failed":
		s.updateStatus(t, p.name, func(st *corev1.PodStatus) { st.Phase = corev1.PodFailed })
	default:
		s.writes++
		if err := s.client.CoreV1().Pods("default").Delete(context.Background(), p.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// restart: the plugin stops; while it is down pods may end or be forged
// (it first sees them in its startup listing); it starts again with its
// checkpoint kept, lost, or corrupted. A corrupted one stops it with a
// *deviceplugin.CheckpointError and nothing destroyed, and the operator
// then removes the file.
func (s *dpSystem) restart(t *rapid.T) {
	down := rapid.SampledFrom([]string{"", "forge", "end", "replace"}).Draw(t, "while down")
	s.restartWith(t, down, rapid.SampledFrom([]string{"kept", "lost", "garbage", "truncated", "version"}).Draw(t, "checkpoint"))
}

// restartWith stops the plugin, does down while it is down, treats the
// checkpoint as how says and starts the plugin again; see restart.
func (s *dpSystem) restartWith(t *rapid.T, down, how string) {
	s.stop(t)
	switch down {
	case "replace":
		s.replace(t, how == "kept")
	case "forge":
		if s.pending() == nil && slices.ContainsFunc(s.pods, func(p *dpPod) bool { return p.mig != "" && !s.deleted(p) }) {
			s.forge(t)
			s.stats.whileDown++
		}
	case "end":
		if slices.ContainsFunc(s.pods, func(p *dpPod) bool { return !p.ended && p.done }) {
			s.end(t)
			s.stats.whileDown++
		}
	}
	switch how {
	case "kept":
		s.stats.kept++
		for _, p := range s.pods {
			if p.stripped && !s.deleted(p) {
				s.strippedKept[p.slot] = true
			}
		}
	case "lost":
		s.stats.lost++
		s.lose(t)
	default:
		s.stats.corrupted++
		s.corrupt(t, how)
		s.lose(t)
	}
	s.start(t)
	s.awaitHealth(t)
}

// editRestart: the owner of a running pod edits its record (see edit) and
// the plugin restarts with its checkpoint kept: whatever the record says
// now, the restarted plugin must keep the device the checkpoint recorded
// as the pod's (the recorded view), and hand it to no other pod.
func (s *dpSystem) editRestart(t *rapid.T) {
	if how := s.editRecord(t); how == "move" || how == "remove" {
		s.stats.editRestarts++
	}
	s.restartWith(t, "", "kept")
}

// replaceRestart: restart with a running pod deleted and its record
// copied while the plugin is down (see replace), the checkpoint kept.
func (s *dpSystem) replaceRestart(t *rapid.T) {
	s.restartWith(t, "replace", "kept")
}

// replace, while the plugin is down: a running pod is deleted and a forger creates a pod whose record copies the deleted
// pod's (it read it before), MIG UUID included when drawn. With the
// checkpoint lost this is the counted residual (endedReused); with it
// kept, the plugin must not hand the forger the device.
func (s *dpSystem) replace(t *rapid.T, kept bool) {
	if s.pending() != nil || !slices.ContainsFunc(s.pods, (*dpPod).running) {
		return
	}
	victim := s.pick(t, "replaced pod", (*dpPod).running)
	value, slot := s.copied(t, victim)
	s.endPod(t, victim, "deleted")
	if s.forgeRecord(t, value, slot) {
		s.stats.replacedWhileDown++
		if kept && strings.Contains(value, victim.mig) {
			s.stats.replacedKeptMIG++
		}
	}
}

func (s *dpSystem) lose(t *rapid.T) {
	if err := os.Remove(s.ckpt); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	s.epoch++
}

// corrupt damages the checkpoint and checks that the plugin refuses it
// with a *deviceplugin.CheckpointError, leaving the file and the hardware
// as they were.
func (s *dpSystem) corrupt(t *rapid.T, how string) {
	data, err := os.ReadFile(s.ckpt)
	if errors.Is(err, os.ErrNotExist) { // nothing observed yet
		data, err = deviceplugin.EncodeCheckpoint(deviceplugin.Checkpoint{})
	}
	if err != nil {
		t.Fatal(err)
	}
	switch how {
	case "garbage":
		data = []byte("\x00\x7fnot a checkpoint")
	case "truncated":
		data = data[:rapid.IntRange(0, len(data)-1).Draw(t, "truncated length")]
	case "version":
		data = bytes.Replace(data, []byte(`"version": 1`), []byte(`"version": 2`), 1)
	}
	if err := os.WriteFile(s.ckpt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := s.hw.Snapshot()
	p, err := deviceplugin.New(s.config())
	var ce *deviceplugin.CheckpointError
	if !errors.As(err, &ce) || p != nil {
		t.Fatalf("New on a %s checkpoint: %v, want a *CheckpointError", how, err)
	}
	if after := s.hw.Snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refusing a %s checkpoint changed the hardware: %v, was %v", how, after, before)
	}
	if now, err := os.ReadFile(s.ckpt); err != nil || !bytes.Equal(now, data) {
		t.Fatalf("refusing a %s checkpoint changed the file: %v", how, err)
	}
}

// syncBuffer is a log sink safe for the plugin's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail returns the last n lines written.
func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// diagnose describes the API's pods, the checkpoint and the plugin's
// recent log, for a failed invariant.
func (s *dpSystem) diagnose() string {
	var b strings.Builder
	list, err := s.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	fmt.Fprintf(&b, "the API's pods (err %v):\n", err)
	if list != nil {
		for _, p := range list.Items {
			fmt.Fprintf(&b, "  %s rv=%s node=%q phase=%s deleting=%v record=%s\n", p.Name, p.ResourceVersion, p.Spec.NodeName,
				p.Status.Phase, p.DeletionTimestamp != nil, p.Annotations[reservation.AnnotationKey])
		}
	}
	c, _, err := deviceplugin.ReadCheckpoint(s.ckpt)
	fmt.Fprintf(&b, "the checkpoint (err %v): %+v\n", err, c)
	fmt.Fprintf(&b, "the plugin's log:\n%s", s.log.tail(150))
	return b.String()
}

// check: every running pod's device is live, the hardware is legal.
func (s *dpSystem) check(t *rapid.T) {
	s.settle(t)
	s.noteRecorded()
	live := map[string]bool{}
	for _, in := range s.hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = true
		}
	}
	for _, p := range s.pods {
		i := slices.IndexFunc(p.handed, func(h handedDev) bool { return !live[h.mig] })
		if p.running() && i >= 0 && s.lostAfterEdit(p) {
			p.lostToEdit = true
			s.stats.lostAfterEdit++
			continue
		}
		if p.running() && i >= 0 {
			t.Fatalf("running pod %s (%s) lost its device %s; %s", p.name, p.kind, p.handed[i].mig, s.diagnose())
		}
	}
	if err := s.hw.Check(); err != nil {
		t.Fatal(err)
	}
	s.checkEndedAdoptions(t)
	s.checkRecordedManaged(t)
}

// checkRecordedManaged: while the plugin's last maintenance pass was
// authorised, every device of an admitted running pod that the intact
// checkpoint recorded (handed in the current epoch) is managed for that
// pod. Its recorded entries win every conflict, whatever its record says
// now (deviceplugin's recordedClaim), so the pass's adoption, after a
// restart, took the device for it; an unmanaged device is neither
// reported unhealthy to its pod nor reclaimed as its pod's.
func (s *dpSystem) checkRecordedManaged(t *rapid.T) {
	if s.plugin == nil {
		return
	}
	if rep, ran := s.plugin.LastReconcile(); !ran || !rep.Authorized {
		return
	}
	owner := map[string]string{}
	for _, in := range s.plugin.Manager().Managed() {
		owner[in.Runtime.MIGUUID] = in.Owner.PodUID
	}
	for _, p := range s.pods {
		if !p.done || !p.running() {
			continue
		}
		for _, h := range p.handed {
			if h.epoch == s.epoch && owner[h.mig] != "uid-"+p.name {
				t.Fatalf("%s's device %s, recorded in the intact checkpoint, is managed for %q after an authorised pass; %s",
					p.name, h.mig, owner[h.mig], s.diagnose())
			}
		}
	}
}

// checkEndedAdoptions: the plugin manages an ended pod's device for
// another pod only once the checkpoint that recorded its hand-out is
// lost. That is the counted residual endedReused (once per device and
// owner): a forged copy of the record of a pod that is gone, MIG UUID
// included, adopted by a plugin that started without its checkpoint and
// so trusts the identities of the records it lists at startup. The
// plugin still hands the forger nothing: its record names a realized
// container the kubelet did not admit (deviceplugin's admission rule).
func (s *dpSystem) checkEndedAdoptions(t *rapid.T) {
	if s.plugin == nil {
		return
	}
	for _, in := range s.plugin.Manager().Managed() {
		for _, o := range s.pods {
			i := slices.IndexFunc(o.handed, func(h handedDev) bool { return h.mig == in.Runtime.MIGUUID })
			if !o.ended || i < 0 || in.Owner.PodUID == "uid-"+o.name {
				continue
			}
			if o.handed[i].epoch == s.epoch {
				t.Fatalf("%s's device %s is managed for %s although the checkpoint that recorded its hand-out is intact; %s",
					o.name, in.Runtime.MIGUUID, in.Owner.PodUID, s.diagnose())
			}
			if key := in.Owner.PodUID + " " + in.Runtime.MIGUUID; !s.reused[key] {
				s.reused[key] = true
				s.stats.endedReused++
			}
		}
	}
}

// drain ends every pod, deletes them all, and checks that the plugin
// reclaims every instance and its checkpoint names no pod and no device
// the API no longer holds.
func (s *dpSystem) drain(t *rapid.T) {
	for _, p := range s.pods {
		if !p.ended {
			s.endPod(t, p, "succeeded")
			s.settle(t)
		}
	}
	for _, p := range s.pods {
		if !s.deleted(p) {
			s.endPod(t, p, "deleted")
			s.settle(t)
		}
	}
	s.barrier(t)
	for range 20 {
		if len(s.hw.Snapshot()) == 0 {
			break
		}
		// Past the manager's grace for pods that vanished without being
		// seen deleting, counted from an instance's adoption to the
		// listing: a pass that adopts an instance during the drain (its
		// earlier passes were not authorised) starts the grace anew.
		s.clk.Step(dpGrace)
		s.pass(t)
	}
	if in := s.hw.Snapshot(); len(in) > 0 {
		t.Fatalf("instances left after every pod ended: %v; %s", in, s.diagnose())
	}
	// The plugin writes the checkpoint as its cache follows the API: wait
	// until its cache saw the last write, the deletion of the barrier's
	// pod (one watch delivers events in order). A pod deleted while
	// released stays in its snapshots, and so its devices in the
	// checkpoint, for kube.EndedPodMemory after the deletion: step past
	// it at once rather than 2 s a pass.
	s.awaitObserved(t, s.lastBarrier, false)
	s.clk.Step(kube.EndedPodMemory)
	for try := 0; ; try++ {
		s.pass(t)
		if rep, _ := s.plugin.LastReconcile(); !rep.Authorized { // the pause of refusedUnauthorised ended
			t.Fatalf("destruction still paused after every pod is gone: %v; %s", rep.Reasons, s.diagnose())
		}
		c, _, err := deviceplugin.ReadCheckpoint(s.ckpt)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Pods) == 0 && len(c.Devices) == 0 {
			return
		}
		if try == 100 {
			t.Fatalf("the checkpoint still names deleted pods: %+v", c)
		}
	}
}

// TestDevicePlugin is the device-plugin part of the whole-system model;
// see the package documentation, "Device plugin model".
func TestDevicePlugin(t *testing.T) {
	stats := &dpStats{}
	checks := devicePluginChecks
	if testing.Short() {
		checks /= 5
	}
	withChecks(t, checks, func() {
		rapid.Check(t, func(t *rapid.T) { runDevicePlugin(t, stats) })
		ranAll(t, stats.sequences)
	})
	t.Logf("%+v", *stats)
	if !t.Failed() {
		checkCoverage(t, stats.sequences, append(dpPaths(stats), mdevPaths(stats)...))
	}
}

// sequenceDir makes a sequence's directory, for the plugin's socket and
// checkpoint, on a memory file system where there is one (Linux's
// /dev/shm), else under os.TempDir: the plugin writes its checkpoint with
// fsync on every change, which on a disk costs a sequence more real time
// than anything else it does.
func sequenceDir() (string, error) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "dynmig-dp-"); err == nil {
			return dir, nil
		}
	}
	return os.MkdirTemp("", "dynmig-dp-")
}

// runDevicePlugin is one sequence of the device-plugin model.
func runDevicePlugin(t *rapid.T, stats *dpStats) {
	stats.sequences++
	dir, err := sequenceDir()
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	hw := fakehal.MustNew(fakehal.Options{})
	d, _ := hw.Device(0)
	server := kubetest.New(kubetest.Options{DeleteImmediately: true, Untracked: true},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	s := &dpSystem{client: server.Clientset, server: server,
		hw: hw, gpu: d.UUID, dir: dir, ckpt: filepath.Join(dir, "checkpoint.json"), stats: stats,
		clk: newTickClock(time.Unix(1_700_000_000, 0), dpInterval), created: time.Unix(1_700_000_000, 0),
		strippedKept: map[uint32]bool{}, reused: map[string]bool{}}
	s.sealed = drawSealed(t)
	if s.sealed {
		stats.sealed++
	}
	sealRecords(server, &s.sealed)
	s.start(t)
	defer s.stop(t)
	t.Repeat(map[string]func(*rapid.T){
		"arrive":    s.arrive,
		"admit":     s.admit,
		"edit":      s.edit,
		"forge":     s.forge,
		"fabricate": s.fabricate,
		"opt-out":   s.optOut,
		"gpu-free":  s.gpuFree,
		"end":       s.end,
		"restart":   s.restart,
		// The checkpoint's guards (issue 40): restarts with it kept right
		// after what only it can answer.
		"edit-restart":      s.editRestart,
		"replace-restart":   s.replaceRestart,
		"copy-edit-restart": s.copyEditRestart,
		"maintain":          s.maintain,
		"xid":               s.xid,
		"recover":           s.recoverGPU,
		"":                  s.check,
	})
	s.drain(t)
	s.countLogged()
}
