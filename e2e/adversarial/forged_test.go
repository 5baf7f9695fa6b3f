package adversarial_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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
//   - and a pod created after a second victim w with w's reservation and
//     a bind-time older than w's, while the scheduler's binding of w
//     (which carries w's record) is on its way, so that the copy reaches
//     the node (and the device plugin's pod source) before w does; it is
//     admitted after w, as the kubelet orders admission (creation time).
//
// Claims: no forged pod is handed v's or w's MIG device (each admission is
// refused or hands out a device of the forger's own); v keeps the device
// its record names; w is admitted and receives the device at its
// reservation although the forged copy of it reached the node first and
// is active, and the copy's admission is refused: the device plugin keeps
// the record that arrived on the node with a scheduler's binding
// (reservation.Pod.RecordScheduled: the PodScheduled condition the API
// server sets on binding, which a pod created with spec.nodeName preset
// lacks and its creator cannot write) and withholds the overlapping one
// that did not; no device in use disappears at any moment, also after the forged
// pods end and several maintenance passes have run (the hardware
// monitor); and afterwards a pod scheduled normally is placed and
// realized, and the node holds exactly the devices in use.
//
// Run against each scheduler: the binding of w is the extender's, or the
// DynMIG plugin's Bind in kube-scheduler's binding cycle.
//
// Not claimed: after a device plugin restart, once the kubelet has
// written the copy's status, both records carry PodScheduled and share one
// time, and neither is realized.
func TestForgedRecordsCaptureNothing(t *testing.T) {
	eachScheduler(t, forgedRecordsCaptureNothing)
}

// wRecord is what the forger took from w's binding request.
type wRecord struct {
	record []reservation.Allocation
	err    error
}

func forgedRecordsCaptureNothing(t *testing.T, s scheduler) {
	// The forger acts inside the scheduler's binding of victim-w: its
	// pods/binding call for w hands w's record (w itself carries none
	// until the binding lands) to the test's goroutine, which creates
	// ahead-of-w with it and the node preset and waits until the device
	// plugin has run maintenance passes (so its pod source holds the
	// copy); then the binding goes on.
	var (
		armed  atomic.Bool
		e      *env
		stolen = make(chan wRecord, 1)
		goOn   = make(chan struct{})
	)
	e = newEnv(t, envOptions{scheduler: s, binder: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if !isBinding(r, "victim-w") || !armed.CompareAndSwap(true, false) {
				return rt.RoundTrip(r)
			}
			// The record travels in the binding itself, so no read of w
			// shows it before w is bound: the forger here knows it anyway
			// (as one who predicted the scheduler's placement would), from
			// the binding request on its way.
			stolen <- steal(e, r)
			select {
			case <-goOn:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
			return rt.RoundTrip(r)
		})
	}})

	var once sync.Once
	release := func() { once.Do(func() { close(goOn) }) }
	t.Cleanup(release) // a test that failed first lets the binding go

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
	wPod := migPod("victim-w", "4000")
	armed.Store(true)
	created := e.create(wPod)
	last = created.CreationTimestamp.Time
	var got wRecord
	select {
	case got = <-stolen:
	case <-e.ctx.Done():
		t.Fatal("no binding call for w")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	forge("ahead-of-w", got.record)
	e.waitPasses(2)
	release()
	e.waitBound(wPod.Name)
	w := e.get(wPod.Name)
	if ahead := e.get("ahead-of-w"); !ahead.CreationTimestamp.After(w.CreationTimestamp.Time) {
		t.Fatalf("the copy was created at %v, not after w (%v)", ahead.CreationTimestamp, w.CreationTimestamp)
	}
	// The kubelet admits in creation order: w first. The copy's record
	// reached the node first, but only w's arrived with a scheduler's
	// binding, so w is realized at its reservation and the copy is
	// withheld.
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

// steal takes w's record from the scheduler's binding request r, after
// checking that w is unbound and carries no record yet.
func steal(e *env, r *http.Request) wRecord {
	b, err := binding(r)
	if err != nil {
		return wRecord{err: fmt.Errorf("reading w's binding request: %w", err)}
	}
	w, err := e.admin.CoreV1().Pods(namespace).Get(r.Context(), "victim-w", metav1.GetOptions{})
	if err != nil {
		return wRecord{err: fmt.Errorf("reading w: %w", err)}
	}
	if w.Spec.NodeName != "" || w.Annotations[reservation.AnnotationKey] != "" {
		return wRecord{err: errors.New("victim-w is bound, or carries a record, before its binding")}
	}
	allocs, err := reservation.DecodeString(b.Annotations[reservation.AnnotationKey])
	if err != nil {
		return wRecord{err: fmt.Errorf("the record in w's binding: %w", err)}
	}
	return wRecord{record: scheduledOnly(allocs)}
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
