package systemtest_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// ownerManager is the field manager of every write the model makes as a
// pod's owner (its creator, or anyone who may update it), which the
// modelled admission policy judges; the scheduler's binding and the
// plugin's runtime patch are not owner writes.
const ownerManager = "pod-owner"

// policyFlag chooses which sequences of TestDevicePlugin model the
// admission policy: "both" (drawn per sequence, the default), "on" or
// "off" (for example to check that the no-policy model finds issue 35's
// defects).
var policyFlag = flag.String("model.policy", "both", `TestDevicePlugin: model the record's admission policy in "both" (drawn), "on" or "off" sequences`)

// drawSealed draws whether a sequence models the admission policy.
func drawSealed(t *rapid.T) bool {
	switch *policyFlag {
	case "on":
		return true
	case "off":
		return false
	}
	return rapid.Bool().Draw(t, "admission policy modelled")
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// sealRecords models the chart's ValidatingAdmissionPolicy on the fake API
// server: an owner's create of a pod carrying the record, and an owner's
// update that adds, changes or removes it, are refused with Forbidden.
// Bindings (the record arrives in the Binding) and the plugin's patch of
// the runtime identity pass. It refuses only while *sealed is true.
func sealRecords(server *kubetest.Server, sealed *bool) {
	server.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !*sealed || a.GetSubresource() != "" {
			return false, nil, nil
		}
		var pod *corev1.Pod
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			if a.CreateOptions.FieldManager != ownerManager {
				return false, nil, nil
			}
			pod = a.Object.(*corev1.Pod)
			if _, ok := pod.Annotations[reservation.AnnotationKey]; !ok {
				return false, nil, nil
			}
		case k8stesting.UpdateActionImpl:
			if a.UpdateOptions.FieldManager != ownerManager {
				return false, nil, nil
			}
			pod = a.Object.(*corev1.Pod)
			obj, err := server.Tracker().Get(podsResource, pod.Namespace, pod.Name)
			if err != nil {
				return false, nil, nil
			}
			old, had := obj.(*corev1.Pod).Annotations[reservation.AnnotationKey]
			now, has := pod.Annotations[reservation.AnnotationKey]
			if had == has && old == now {
				return false, nil, nil
			}
		default:
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(podsResource.GroupResource(), pod.Name,
			fmt.Errorf("ValidatingAdmissionPolicy: only the scheduler's binding and the node's device plugin write %s", reservation.AnnotationKey))
	})
}

// ownerCreate creates pod as its owner. It reports false when the
// modelled policy refused it (the pod then does not exist); any other
// outcome than the policy predicts fails.
func (s *dpSystem) ownerCreate(t *rapid.T, pod *corev1.Pod) (*corev1.Pod, bool) {
	s.writes++
	out, err := s.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{FieldManager: ownerManager})
	_, carries := pod.Annotations[reservation.AnnotationKey]
	return out, s.judged(t, "create "+pod.Name, carries, err)
}

// ownerUpdate writes pod as its owner; see ownerCreate.
func (s *dpSystem) ownerUpdate(t *rapid.T, pod *corev1.Pod) bool {
	cur := s.get(t, pod.Name)
	old, had := cur.Annotations[reservation.AnnotationKey]
	now, has := pod.Annotations[reservation.AnnotationKey]
	s.writes++
	_, err := s.client.CoreV1().Pods("default").Update(context.Background(), pod, metav1.UpdateOptions{FieldManager: ownerManager})
	return s.judged(t, "update "+pod.Name, had != has || old != now, err)
}

// judged checks an owner write's outcome against the policy: refused
// (Forbidden) exactly when the policy is modelled and the write touches
// the record. It reports whether the write went through.
func (s *dpSystem) judged(t *rapid.T, what string, touches bool, err error) bool {
	switch {
	case s.sealed && touches:
		if !apierrors.IsForbidden(err) {
			t.Fatalf("the admission policy let the owner's %s through: %v", what, err)
		}
		s.stats.sealRefused++
		return false
	case err != nil:
		t.Fatalf("owner's %s: %v", what, err)
	}
	return true
}

// editKinds are the owner's edits of a running pod's record; with the
// policy modelled every one is refused.
var editKinds = []string{"strip", "move", "remove", "forge identity", "move onto a claimed slot", "copy another's"}

// edit: the owner of a running pod rewrites its record: strips or forges
// its runtime identity, moves it to a free slot or to one another pod
// claims (a placement that loses the conflict), removes it, or replaces
// it with a copy of another running pod's record. The pod's containers
// keep running on the device they were handed; with the policy modelled
// every such write is refused.
func (s *dpSystem) edit(t *rapid.T) { s.editRecord(t) }

// editRecord is edit; it returns the edit made, or "" when the modelled
// policy refused it.
func (s *dpSystem) editRecord(t *rapid.T) string {
	p := s.pick(t, "running pod", (*dpPod).running)
	return s.editPod(t, p, rapid.SampledFrom(editKinds).Draw(t, "edit"))
}

// editPod makes the edit how of running pod p's record; see editRecord.
func (s *dpSystem) editPod(t *rapid.T, p *dpPod, how string) string {
	s.noteRecorded()
	pod := s.get(t, p.name)
	allocs, err := kube.PodAllocations(pod)
	if err != nil || len(allocs) != 1 {
		allocs = []reservation.Allocation{s.entry(p.slot)} // an earlier edit broke it: the owner starts over
	}
	a := allocs[0]
	var to uint32
	switch how {
	case "strip":
		a = a.Scheduled()
	case "forge identity":
		s.n++
		a = a.Scheduled().WithRuntime(reservation.RuntimeIdentity{MIGUUID: madeUpMIG(s.n),
			GPUInstanceID: rapid.Uint32Range(1, 14).Draw(t, "forged GI"), ComputeInstanceID: 0})
	case "move":
		to = rapid.Uint32Range(0, 6).Filter(func(v uint32) bool { return !s.claimed(v) }).Draw(t, "to free slot")
		a = s.movedTo(a, to)
	case "move onto a claimed slot":
		to = rapid.Uint32Range(0, 6).Filter(func(v uint32) bool { return v != p.slot && s.claimed(v) }).Draw(t, "to claimed slot")
		a = s.movedTo(a, to)
	case "copy another's":
		victim := s.pick(t, "another running pod", func(o *dpPod) bool { return o != p && o.running() })
		value, _ := s.copied(t, victim)
		pod.Annotations[reservation.AnnotationKey] = value
		to = victim.slot
	}
	if how == "remove" {
		delete(pod.Annotations, reservation.AnnotationKey)
	} else if how != "copy another's" {
		pod.Annotations[reservation.AnnotationKey] = record(a)
	}
	if !s.ownerUpdate(t, pod) {
		return ""
	}
	s.stats.edits++
	switch how {
	case "strip":
		s.stats.stripped++
		p.stripped = true
	case "move", "move onto a claimed slot", "copy another's":
		p.extra = append(p.extra, to)
		switch how {
		case "move onto a claimed slot":
			s.stats.conflictMoves++
		case "copy another's":
			s.stats.copiedEdits++
		}
	case "forge identity":
		s.stats.forgedEdits++
	}
	if !p.edited { // a stripped identity, too, is gone with a lost checkpoint
		p.edited, p.editEpoch = true, s.epoch
	}
	if p.recordedEpoch < s.epoch {
		p.unrecordedEdit = true
	}
	return how
}

// copyEditRestart: a forger creates a pod with the node preset and a copy
// of a running pod's record (MIG UUID included when drawn), the running
// pod's owner then moves its record to a free slot or removes it, and the
// plugin restarts with its checkpoint kept. The checkpoint records the
// device as the running pod's, so its recorded entries must still win the
// conflict with the copy (the guard recordedClaim): the restart adopts
// the device for the pod, which keeps it, and the forger is handed none.
func (s *dpSystem) copyEditRestart(t *rapid.T) {
	if s.pending() != nil {
		t.Skip("a pod is pending")
	}
	p := s.pick(t, "running pod", (*dpPod).running)
	value, slot := s.copied(t, p)
	if s.forgeRecord(t, value, slot) {
		// The plugin first sees the copy, then, a pass later, the edit:
		// without recordedClaim the copy's claim is the earlier one and
		// wins (reservation.Desired), and checkRecordedManaged sees the
		// pod's device left unadopted by the restart.
		s.barrier(t)
		s.pass(t)
		if s.editPod(t, p, rapid.SampledFrom([]string{"move", "remove"}).Draw(t, "edit")) != "" {
			s.stats.copyEditRestarts++
		}
	}
	s.restartWith(t, "", "kept")
}

// movedTo returns a's entry at slot, keeping its runtime identity if any.
func (s *dpSystem) movedTo(a reservation.Allocation, slot uint32) reservation.Allocation {
	if id, ok := a.Runtime(); ok {
		return s.entry(slot).WithRuntime(id)
	}
	return s.entry(slot)
}

// madeUpMIG returns a well-formed MIG UUID that no fake GPU hands out.
func madeUpMIG(n int) string {
	return fmt.Sprintf("MIG-0000f0f0-0000-4000-8000-%012x", n)
}

// fabricate: a pod created with the node preset and a record at a slot no
// pod claims that names a runtime identity no plugin handed out (a MIG
// UUID and GPU/compute instance IDs the creator made up), as if the
// instance existed. Forged identities are stripped by the checkpoint's
// view; on an unhealthy GPU the plugin must still refuse to create one.
func (s *dpSystem) fabricate(t *rapid.T) {
	if s.pending() != nil {
		t.Skip("a pod is pending")
	}
	var free []uint32
	for slot := uint32(0); slot < 7; slot++ {
		if !s.claimed(slot) {
			free = append(free, slot)
		}
	}
	if len(free) == 0 {
		t.Skip("no free slot")
	}
	slot := rapid.SampledFrom(free).Draw(t, "slot")
	s.n++
	name := fmt.Sprintf("x%d", s.n)
	one := int64(1)
	pod := s.newPod(name, &one)
	pod.Annotations[kube.VGPUModeAnnotation] = kube.VGPUModeMIG
	pod.Annotations[reservation.AnnotationKey] = record(s.entry(slot).WithRuntime(reservation.RuntimeIdentity{
		MIGUUID: madeUpMIG(s.n), GPUInstanceID: rapid.Uint32Range(1, 14).Draw(t, "forged GI")}))
	pod.Spec.NodeName = "n1"
	if _, ok := s.ownerCreate(t, pod); !ok {
		return
	}
	s.pods = append(s.pods, &dpPod{name: name, kind: forger, slot: slot})
	s.stats.fabricated++
	if s.unhealthy {
		s.stats.fabricatedUnhealthy++
	}
}

// xid: the GPU reports Xid 79 (fallen off the bus); the model waits until
// the plugin took it out of service and recorded that on the node, so a
// restart keeps it out.
func (s *dpSystem) xid(t *rapid.T) {
	if s.unhealthy {
		t.Skip("the GPU is unhealthy already")
	}
	if err := s.hw.InjectXid(0, "", 79); err != nil {
		t.Fatal(err)
	}
	s.unhealthy = true
	s.stats.xids++
	if !s.sealed {
		s.stats.unsealedXids++
	}
	s.awaitHealth(t)
}

// recoverGPU: the GPU is usable again.
func (s *dpSystem) recoverGPU(t *rapid.T) {
	if !s.unhealthy {
		t.Skip("the GPU is healthy")
	}
	if err := s.hw.Recover(0); err != nil {
		t.Fatal(err)
	}
	s.unhealthy = false
	s.awaitHealth(t)
}

// awaitHealth waits until the plugin's view of the GPU's health and the
// node's health record agree with the model's.
func (s *dpSystem) awaitHealth(t *rapid.T) {
	deadline := time.Now().Add(bound)
	for {
		_, healthy := s.plugin.GPUHealth(0)
		node, err := s.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		recorded := strings.Contains(node.Annotations[deviceplugin.HealthRecordAnnotation], s.gpu)
		if healthy != s.unhealthy && recorded == s.unhealthy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's GPU health (healthy %v, recorded unhealthy %v) never matched the model's (unhealthy %v)", healthy, recorded, s.unhealthy)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// maintain: a maintenance pass (the plugin's interval elapsed).
func (s *dpSystem) maintain(t *rapid.T) {
	s.synced(t)
	s.pass(t)
}

// liveMIGs returns the MIG UUIDs live on the hardware.
func (s *dpSystem) liveMIGs() map[string]bool {
	live := map[string]bool{}
	for _, in := range s.hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			live[ci.MIGUUID] = true
		}
	}
	return live
}

// requestsGPU reports whether a container of pod requests the plugin's
// resource.
func requestsGPU(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		_, ok := c.Resources.Limits[kube.ResourceGPU]
		return ok
	})
}

// recordHolder returns a pod other than p, still in the API, that requests
// a device and whose record holds p's slot, cannot be decided (it does
// not decode or validate), or, while the pod is not released, names the
// instance at p's slot by MIG UUID: each pauses the slot (the package
// documentation, "Device plugin model"). A pod that requests no device
// holds nothing (the trust rule), except that the plugin takes over no
// instance whose MIG UUID its record names.
func (s *dpSystem) recordHolder(t *rapid.T, p *dpPod) (string, bool) {
	list, err := s.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := s.entry(p.slot).Placement
	atSlot := map[string]bool{} // the MIG UUIDs live at p's slot
	for _, in := range s.hw.Snapshot() {
		for _, ci := range in.ComputeInstances {
			atSlot[ci.MIGUUID] = in.Placement.Overlaps(want)
		}
	}
	for _, o := range list.Items {
		value, ok := o.Annotations[reservation.AnnotationKey]
		if o.Name == p.name || !ok {
			continue
		}
		allocs, err := reservation.DecodeString(value)
		if !requestsGPU(&o) {
			// The trust rule: a pod that requests no device holds none,
			// but an instance its record names by MIG UUID is not taken
			// over for another pod.
			if err == nil && slices.ContainsFunc(allocs, func(a reservation.Allocation) bool { return atSlot[a.MIGUUID] }) {
				return o.Name + " (names the instance at the slot)", true
			}
			continue
		}
		if err != nil {
			return o.Name + " (undecidable record)", true
		}
		if released := o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed; !released &&
			slices.ContainsFunc(allocs, func(a reservation.Allocation) bool { return atSlot[a.MIGUUID] }) {
			// An unreleased pod's record that names the instance at the
			// slot by MIG UUID, wherever it places it: the manager takes
			// over no instance an active or withheld entry names.
			return o.Name + " (names the instance at the slot)", true
		}
		if slices.ContainsFunc(allocs, func(a reservation.Allocation) bool {
			return a.GPUUUID == s.gpu && a.Placement.Overlaps(want)
		}) {
			return o.Name, true
		}
	}
	return "", false
}

// minCoverageSequences is the sequence count from which a claimed path
// reached zero times fails the test: at the default counts each path is
// reached dozens of times or more (BENCHMARKS.md), so zero means an actor
// or generator stopped reaching it. Shorter runs (-short, -race) only log.
const minCoverageSequences = 300

// dpPaths are the paths of issue 40's table that TestDevicePlugin claims
// to exercise, with how often each was reached.
func dpPaths(st *dpStats) []coveredPath {
	paths := []coveredPath{
		{"restart with the checkpoint kept after an identity was stripped, then a claim on that slot", st.stripRestartClaims},
		{"a handed pod deleted and its record copied by a forger while the plugin is down", st.replacedWhileDown},
		{"a copy of an ended pod's record, MIG UUID included, claimed while the checkpoint that recorded its hand-out is intact", st.endedCopyClaims},
		{"owner writes refused by the admission policy", st.sealRefused},
		{"Xid 79 on the GPU", st.xids},
		{"pods created with a made-up runtime identity", st.fabricated},
		{"a running pod's record moved or removed by its owner, then a restart with the checkpoint kept", st.editRestarts},
		{"a running pod deleted and its record, MIG UUID included, copied while the plugin is down, then a restart with the checkpoint kept", st.replacedKeptMIG},
		{"with the checkpoint lost, an ended pod's device adopted for a forged copy of its record (the counted residual endedReused)", st.endedReused},
		// Without the policy (the owner's writes that it refuses go through).
		{"a running pod's record moved by its owner onto a slot another pod claims", st.conflictMoves},
		{"a running pod's record replaced by its owner with a copy of another running pod's", st.copiedEdits},
		{"a running pod's runtime identity forged by its owner", st.forgedEdits},
		{"Xid 79 without the policy", st.unsealedXids},
		{"pods created with a made-up runtime identity on the unhealthy GPU", st.fabricatedUnhealthy},
		{"a copy of a running pod's record created, the pod's record moved or removed, then a restart with the checkpoint kept", st.copyEditRestarts},
	}
	return paths
}

// coveredPath is one path a model claims to exercise and how often a run
// reached it.
type coveredPath struct {
	name    string
	reached int
}

// checkCoverage logs every path's count and fails the test for a path
// reached zero times in a run of at least minCoverageSequences.
func checkCoverage(t interface {
	Logf(string, ...any)
	Errorf(string, ...any)
}, sequences int, paths []coveredPath) {
	for _, p := range paths {
		t.Logf("path %q reached %d times in %d sequences", p.name, p.reached, sequences)
		if p.reached == 0 && sequences >= minCoverageSequences {
			t.Errorf("path %q was never reached in %d sequences: the model no longer exercises it", p.name, sequences)
		}
	}
}
