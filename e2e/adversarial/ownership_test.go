package adversarial_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// TestStrippedIdentityRestart: pod a runs on its MIG device; a later pod
// v is bound; a's owner deletes the runtime identity from a's record; the
// device plugin restarts (its checkpoint kept, as on a real node); then
// the real device manager admits v. (v is bound before the strip: the
// scheduler's node lock would otherwise hold v back, taking a for
// unrealized.)
//
// Claims: v receives a device of its own at the placement its record
// names, and a's device stays live and untouched: the plugin never takes
// a's container for the one being admitted, nor a's idle instance for a
// remnant, on the strength of the stripped identity. Then a pod z is
// scheduled: the stripped record neither locks the node (a was admitted)
// nor frees a's slots, so z is bound and realized on a device of its own,
// and the node holds exactly a's, v's and z's. Run against each scheduler:
// whichever wrote the records, nothing is captured.
func TestStrippedIdentityRestart(t *testing.T) {
	eachScheduler(t, strippedIdentityRestart)
}

func strippedIdentityRestart(t *testing.T, s scheduler) {
	e := newEnv(t, envOptions{scheduler: s})
	e.schedule(migPod("a", "4000"))
	migA := e.mustAdmit("a")
	e.schedule(migPod("v", "4000"))

	pod := e.get("a")
	allocs, err := kube.PodAllocations(pod)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("a's record: %v, %v", allocs, err)
	}
	pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{allocs[0].Scheduled()})
	if _, err := e.admin.CoreV1().Pods(namespace).Update(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("strip a's identity: %v", err)
	}

	if err := e.plugin.Stop(); err != nil {
		t.Fatalf("stop the device plugin: %v", err)
	}
	e.waitDevices(false)
	e.plugin, err = e.node.StartPlugin(e.ctx, t, deviceplugin.Config{
		Client: e.admin, Hardware: e.hw, ReconcileInterval: reconcileInterval,
		Manager: realize.Options{AbsentPodGrace: absentPodGrace},
	})
	if err != nil {
		t.Fatalf("restart the device plugin: %v", err)
	}
	e.waitDevices(true)

	migV := e.mustAdmit("v")
	if migV == migA {
		t.Fatalf("v was handed a's device %s", migA)
	}
	e.waitPasses(3)
	if err := e.hw.Check(); err != nil {
		t.Errorf("hardware: %v", err)
	}
	live := liveMIGs(e.hw)
	want := []string{migA, migV}
	slices.Sort(want)
	if !slices.Equal(live, want) {
		t.Errorf("live MIG devices %v, want a's and v's %v", live, want)
	}

	e.schedule(migPod("z", "4000"))
	if migZ := e.mustAdmit("z"); migZ == migA || migZ == migV {
		t.Fatalf("z was handed %s, a's or v's device", migZ)
	}
	e.waitPasses(3)
	if err := e.hw.Check(); err != nil {
		t.Errorf("hardware: %v", err)
	}
	live = liveMIGs(e.hw)
	if !slices.Contains(live, migA) || !slices.Contains(live, migV) || len(live) != 3 {
		t.Errorf("live MIG devices %v, want a's %s, v's %s and z's", live, migA, migV)
	}
}
