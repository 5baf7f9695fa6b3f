package adversarial_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// forged is a pod whose creator wrote what only the scheduler may write:
// spec.nodeName (bypassing the scheduler), an old hami.io/bind-time, and a
// reservation record of its own choosing. It requests what its victim
// requests, so the trust rule (the container requests as many devices as
// its entries) keeps its entries.
func forged(name string, record []reservation.Allocation) *corev1.Pod {
	pod := migPod(name, "4000")
	pod.Spec.NodeName = nodeName
	pod.Annotations[kube.BindTimeAnnotation] = "1"
	if record != nil {
		pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString(record)
	}
	return pod
}

func scheduledOnly(record []reservation.Allocation) []reservation.Allocation {
	out := make([]reservation.Allocation, len(record))
	for i, a := range record {
		out[i] = a.Scheduled()
	}
	return out
}

// TestForgedRecordsCaptureNothing: a pod's creator who presets
// spec.nodeName and forges hami.io/bind-time and
// hami.io/vgpu-mig-allocations cannot obtain another pod's MIG device,
// and nothing it writes makes the device plugin destroy a device in use.
//
// Against the real API server, kubelet device manager and device plugin,
// with a victim pod v realized and running, the kubelet admits, one at a
// time (each created in a later second than the one before, so that
// creation order, which the device plugin ranks by, is unambiguous):
//
//   - a pod whose record is a copy of v's, runtime identity included;
//   - a pod whose record is v's reservation without the identity;
//   - a pod with nodeName and an old bind-time but no record;
//   - and, while a second victim w is bound but not yet realized, a pod
//     created after w with w's reservation and a bind-time older than w's,
//     admitted after w as the kubelet orders admission (creation time).
//
// Claims: no forged pod is handed v's or w's MIG device (each admission is
// refused or hands out a device of the forger's own); v keeps the device
// its record names; w is admitted and receives the device at its
// reservation although the forged copy of it is active, and the copy's
// admission is refused: the device plugin keeps the record it saw first on
// the node (reservation.Pod.RecordSeen, the plugin's own clock, which
// nothing the forger writes enters) and withholds the later overlapping
// one; no device in use disappears at any moment, also after the forged
// pods end and several maintenance passes have run (the hardware
// monitor); and afterwards a pod scheduled normally is placed and
// realized, and the node holds exactly the devices in use.
//
// Not claimed: a copy created between the extender's annotation of w and
// its binding reaches the node before w and would keep the placement
// (a window of one API call, not exercised here); after a device plugin
// restart the two records share one time and neither is realized.
func TestForgedRecordsCaptureNothing(t *testing.T) {
	e := newEnv(t, envOptions{})

	v := e.schedule(migPod("victim-v", "4000"))
	migV := e.mustAdmit(v.Name)
	recordV := entries(t, e.get(v.Name))
	last := v.CreationTimestamp.Time

	var attackers []string
	forge := func(name string, record []reservation.Allocation) {
		t.Helper()
		// One second after the previous pod: creation timestamps have
		// one-second resolution, and pods created within the same second
		// are refused as ambiguous (a denial, not a capture).
		e.waitFor("a creation timestamp later than the last pod's", func(context.Context) (bool, error) {
			return time.Now().After(last.Add(time.Second)), nil
		})
		created, err := e.admin.CoreV1().Pods(namespace).Create(e.ctx, forged(name, record), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create forged pod %s: %v", name, err)
		}
		last = created.CreationTimestamp.Time
		attackers = append(attackers, name)
	}
	admitForged := func(name string, victims ...string) {
		t.Helper()
		got, err := e.admit(name)
		switch {
		case err != nil:
			t.Logf("forged pod %s refused: %v", name, err)
		case got != "" && slices.Contains(victims, got):
			t.Errorf("forged pod %s captured a victim's MIG device %s", name, got)
		default:
			t.Logf("forged pod %s was handed %q", name, got)
			if got != "" {
				e.monitor.use(name, got)
			}
		}
	}

	forge("copy-realized", recordV)
	admitForged("copy-realized", migV)
	forge("copy-scheduled", scheduledOnly(recordV))
	admitForged("copy-scheduled", migV)
	forge("no-record", nil)
	admitForged("no-record", migV)

	e.waitFor("a creation timestamp later than the last pod's", func(context.Context) (bool, error) {
		return time.Now().After(last.Add(time.Second)), nil
	})
	w := e.schedule(migPod("victim-w", "4000"))
	last = w.CreationTimestamp.Time
	forge("ahead-of-w", scheduledOnly(entries(t, w)))
	// The kubelet admits in creation order: w first. w's record was on
	// the node first, so w is realized at its reservation and the copy
	// is withheld.
	migW := e.mustAdmit(w.Name)
	if migW == migV {
		t.Fatalf("w was handed v's device %s", migV)
	}
	if got := entries(t, e.get(w.Name)); !sameReservation(got, scheduledOnly(entries(t, w))) {
		t.Errorf("w's record changed: %v, want its reservation %v", got, entries(t, w))
	}
	if got, err := e.admit("ahead-of-w"); err == nil {
		t.Errorf("the forged copy of w's reservation was admitted and handed %q; want it refused", got)
		if got != "" && got != migW && got != migV {
			e.monitor.use("ahead-of-w", got)
		}
	} else {
		t.Logf("forged pod ahead-of-w refused: %v", err)
	}
	if got := e.recordedMIG(w.Name); got != migW {
		t.Errorf("w's record names %q after the forger's admission, want %s", got, migW)
	}

	e.waitPasses(3)
	// The forged pods end: those refused are Failed and removed; one that
	// was admitted ends as the kubelet ends a running pod, and its own
	// device is reclaimed.
	for _, name := range attackers {
		pod := e.get(name)
		if pod.Status.Phase == corev1.PodRunning {
			e.remove(name)
			continue
		}
		if err := e.node.FinishDeletion(e.ctx, pod); err != nil {
			t.Fatalf("delete forged pod %s: %v", name, err)
		}
	}
	e.waitPasses(3)

	if got := e.recordedMIG(v.Name); got != migV {
		t.Errorf("v's record names %q, want its device %s", got, migV)
	}
	if got := entries(t, e.get(v.Name)); !sameReservation(got, recordV) {
		t.Errorf("v's record changed: %v, want %v", got, recordV)
	}

	z := e.schedule(migPod("after", "4000"))
	e.mustAdmit(z.Name)
	e.finalCheck()
}

// sameReservation compares the scheduler-written fields of two records.
func sameReservation(a, b []reservation.Allocation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Scheduled() != b[i].Scheduled() {
			return false
		}
	}
	return true
}
