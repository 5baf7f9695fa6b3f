package deviceplugin_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// editRecord is a pod's owner rewriting its record: edit gets the entries
// and returns the new ones; nil removes the annotation.
func editRecord(t *testing.T, client *fake.Clientset, name string, edit func([]reservation.Allocation) []reservation.Allocation) {
	t.Helper()
	pod := getPod(t, client, name)
	allocs, err := kube.PodAllocations(pod)
	require.NoError(t, err)
	if allocs = edit(allocs); allocs == nil {
		delete(pod.Annotations, reservation.AnnotationKey)
	} else {
		pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
	}
	_, err = client.CoreV1().Pods("default").Update(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// passes waits for n maintenance passes that start after the call.
func passes(t *testing.T, r *running, n uint64) {
	t.Helper()
	before := r.p.Reconciles()
	require.Eventually(t, func() bool { return r.p.Reconciles() > before+n }, eventually, time.Millisecond)
}

// Scenario (issue 35, 1): pod A is handed a MIG device at slot 0 and runs;
// its owner moves its record to slot 2, or removes it. The checkpoint
// records the device as A's, so it stays A's whatever the record says
// now: with or without a restart (checkpoint kept) the plugin keeps and
// manages A's instance through every maintenance pass, and a pod V at
// slot 0, even one whose record arrived with the scheduler's binding while
// A's did not, is refused rather than handed a new instance with A's GPU
// and compute instance IDs.
func TestRecordedDeviceSurvivesAnEditedRecord(t *testing.T) {
	edits := map[string]func([]reservation.Allocation) []reservation.Allocation{
		"untouched": func(a []reservation.Allocation) []reservation.Allocation { return a },
		"moved": func(a []reservation.Allocation) []reservation.Allocation {
			a[0] = a[0].Scheduled()
			a[0].Placement = capability.Placement{Start: 2, Size: 1}
			return a
		},
		"moved with identity": func(a []reservation.Allocation) []reservation.Allocation {
			a[0].Placement = capability.Placement{Start: 2, Size: 1}
			return a
		},
		"removed": func([]reservation.Allocation) []reservation.Allocation { return nil },
		"emptied": func([]reservation.Allocation) []reservation.Allocation { return []reservation.Allocation{} },
	}
	for name, edit := range edits {
		for _, restart := range []bool{false, true} {
			for _, bound := range []bool{false, true} {
				for _, early := range []bool{false, true} {
					name := name + map[bool]string{false: "", true: ", restart"}[restart] +
						map[bool]string{false: ", V created on the node", true: ", V bound by the scheduler"}[bound] +
						map[bool]string{false: " later", true: " before the restart"}[early]
					t.Run(name, func(t *testing.T) { recordedDevice(t, edit, restart, bound, early) })
				}
			}
		}
	}
}

// recordedDevice runs one case of TestRecordedDeviceSurvivesAnEditedRecord.
func recordedDevice(t *testing.T, edit func([]reservation.Allocation) []reservation.Allocation, restart, bound, early bool) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	gpu := gpuOf(t, hw, 0).UUID
	slot0 := reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, boundPod("a", slot0))
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	options := func(c *deviceplugin.Config) {
		c.Checkpoint = ckpt
		c.ReconcileInterval = 10 * time.Millisecond
		c.Manager.LeakInterval = time.Nanosecond // every pass collects leaks
	}
	r := start(t, client, hw, options)
	migA := admit(t, r)
	runningStatus(t, client, "a")
	before := hw.Snapshot()

	editRecord(t, client, "a", edit)
	if early {
		createVictim(t, client, "v", slot0, bound)
		checkpointHas(t, ckpt, "uid-v")
	}
	if restart {
		require.NoError(t, r.stop())
		r = start(t, client, hw, options)
	}
	passes(t, r, 2)
	assert.Equal(t, []string{migA}, liveMIGs(hw), "A's instance is kept")
	managed := r.p.Manager().Managed()
	if assert.Len(t, managed, 1) {
		assert.Equal(t, "uid-a", managed[0].Owner.PodUID, "A's instance is managed for A")
		assert.Equal(t, migA, managed[0].Runtime.MIGUUID)
	}

	if !early {
		createVictim(t, client, "v", slot0, bound)
	}
	_, err := allocate(ctx, r.client, "id")
	assert.Error(t, err, "V is refused A's slot while A runs")
	passes(t, r, 1)
	assert.Equal(t, before, hw.Snapshot(), "A's instance is untouched")
	require.NoError(t, hw.Check())
}

// createVictim creates a pod with one entry on node n1: bound by the
// scheduler (its record arrives with the binding, as the extender writes
// it) or created with spec.nodeName preset.
func createVictim(t *testing.T, client *fake.Clientset, name string, entry reservation.Allocation, bound bool) {
	t.Helper()
	ctx := context.Background()
	v := boundPod(name, entry)
	if !bound {
		_, err := client.CoreV1().Pods("default").Create(ctx, v, metav1.CreateOptions{})
		require.NoError(t, err)
		return
	}
	v.Spec.NodeName, v.Spec.SchedulerName = "", deviceplugin.DefaultSchedulerName
	delete(v.Annotations, reservation.AnnotationKey)
	_, err := client.CoreV1().Pods("default").Create(ctx, v, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, client.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: v.UID,
			Annotations: map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{entry})}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}))
}

// Scenario: the plugin starts without a checkpoint, so running pod P,
// whose record names no instance, is inherited. It then hands F an
// instance. P's owner (no admission policy seals the record) replaces P's
// record with a copy of F's, MIG UUID included, and F is deleted: while
// the plugin is down, or while it runs, with or without a restart
// (checkpoint kept) after, and then another restart. The checkpoint
// records the instance as F's: it must never be adopted for P, whose
// record named it only after the start that trusted P's record. (P's record still claims its placement,
// so leak collection leaves it until P ends.)
func TestInheritedPodNeverAdoptsAnotherPodsRecordedDevice(t *testing.T) {
	for _, when := range []string{"while the plugin is down", "while it runs", "while it runs, then a restart"} {
		t.Run("F deleted "+when, func(t *testing.T) { inheritedCopy(t, when) })
	}
}

// inheritedCopy runs one case of
// TestInheritedPodNeverAdoptsAnotherPodsRecordedDevice.
func inheritedCopy(t *testing.T, when string) {
	ctx := context.Background()
	hw := fakehal.MustNew(fakehal.Options{})
	gpu := gpuOf(t, hw, 0).UUID
	at := func(start uint32) reservation.Allocation {
		return reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
	}
	p := boundPod("p", at(2))
	p.Status.Phase = corev1.PodRunning
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, p)
	ckpt := filepath.Join(t.TempDir(), "checkpoint.json")
	options := func(c *deviceplugin.Config) {
		c.Checkpoint = ckpt
		c.ReconcileInterval = 10 * time.Millisecond
		c.Manager.LeakInterval = time.Nanosecond // every pass collects leaks
	}
	r := start(t, client, hw, options)
	_, err := client.CoreV1().Pods("default").Create(ctx, boundPod("f", at(3)), metav1.CreateOptions{})
	require.NoError(t, err)
	checkpointHas(t, ckpt, "uid-f")
	migF := admit(t, r)
	runningStatus(t, client, "f")
	copied, err := reservation.DecodeString(getPod(t, client, "f").Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	editRecord(t, client, "p", func([]reservation.Allocation) []reservation.Allocation { return copied })
	passes(t, r, 1)

	if when == "while the plugin is down" {
		require.NoError(t, r.stop())
	}
	require.NoError(t, client.CoreV1().Pods("default").Delete(ctx, "f", metav1.DeleteOptions{}))
	if when == "while it runs, then a restart" {
		passes(t, r, 1)
		require.NoError(t, r.stop())
	}
	if when != "while it runs" {
		r = start(t, client, hw, options)
	}
	passes(t, r, 2)
	notAdoptedForP(t, r, ckpt, migF)
	// Once F's device is no longer recorded (its pod is gone), its
	// instance, which P's record claims, is still not P's after another
	// restart.
	require.NoError(t, r.stop())
	r = start(t, client, hw, options)
	passes(t, r, 2)
	notAdoptedForP(t, r, ckpt, migF)
	require.NoError(t, hw.Check())
}

// notAdoptedForP checks that the plugin manages nothing for pod P and its
// checkpoint records nothing as P's.
func notAdoptedForP(t *testing.T, r *running, ckpt, migF string) {
	t.Helper()
	for _, in := range r.p.Manager().Managed() {
		assert.NotEqual(t, "uid-p", in.Owner.PodUID, "P is managed %s (F's is %s)", in.Runtime.MIGUUID, migF)
	}
	c, _, err := deviceplugin.ReadCheckpoint(ckpt)
	require.NoError(t, err)
	for _, d := range c.Devices {
		assert.NotEqual(t, "uid-p", d.PodUID, "the checkpoint records %s as P's", d.Runtime.MIGUUID)
	}
}
