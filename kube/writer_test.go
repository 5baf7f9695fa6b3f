package kube_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

const (
	gpuA = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
	migA = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	migB = "MIG-2b2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
)

var podGR = schema.GroupResource{Resource: "pods"}

func scheduled(container, device int, start, size uint32) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: container, DeviceIndex: device, GPUUUID: gpuA, Profile: "2g.10gb",
		Placement: capability.Placement{Start: start, Size: size}}
}

func realizedAs(a reservation.Allocation, mig string, gi uint32) reservation.Allocation {
	return a.WithRuntime(reservation.RuntimeIdentity{MIGUUID: mig, GPUInstanceID: gi, ComputeInstanceID: 0})
}

func reservedPod(rv string, allocs ...reservation.Allocation) *corev1.Pod {
	p := podOn("ns", "p", "n1", nil)
	p.ResourceVersion = rv
	p.Annotations = map[string]string{reservation.AnnotationKey: reservation.EncodeString(allocs)}
	return p
}

func storedAllocs(t *testing.T, client *fake.Clientset) []reservation.Allocation {
	t.Helper()
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	require.NoError(t, err)
	allocs, err := kube.PodAllocations(p)
	require.NoError(t, err)
	return allocs
}

// patches records the merge patches sent for pods.
func patches(client *fake.Clientset) *[]string {
	var got []string
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got = append(got, string(a.(k8stesting.PatchAction).GetPatch()))
		return false, nil, nil
	})
	return &got
}

func TestWriteRuntime(t *testing.T) {
	a0, a1 := scheduled(0, 0, 0, 2), scheduled(0, 1, 2, 2)
	pod := reservedPod("7", a0, a1)
	client := fake.NewClientset(pod)
	sent := patches(client)
	w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})
	want := []reservation.Allocation{realizedAs(a0, migA, 1), realizedAs(a1, migB, 2)}

	out, err := w.WriteRuntime(context.Background(), pod, want)
	require.NoError(t, err)
	assert.Equal(t, want, storedAllocs(t, client))
	got, err := kube.PodAllocations(out)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the returned pod is the patched one")
	require.Len(t, *sent, 1)
	assert.Equal(t, string(reservation.AnnotationPatch(reservation.EncodeString(want), reservation.PatchOptions{ResourceVersion: "7"})), (*sent)[0],
		"one merge patch of the annotation, conditioned on the resourceVersion")

	// Writing again is a no-op.
	out2, err := w.WriteRuntime(context.Background(), out, want)
	require.NoError(t, err)
	assert.Same(t, out, out2)
	assert.Len(t, *sent, 1)
}

func TestWriteRuntimeRetriesConflicts(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	pod := reservedPod("7", a0)
	client := fake.NewClientset(pod)
	var conflicts atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) <= 2 {
			// Someone else updated the pod: bump its resourceVersion.
			p, _ := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "ns", "p")
			p = p.DeepCopyObject()
			p.(*corev1.Pod).ResourceVersion = "8"
			p.(*corev1.Pod).Labels = map[string]string{"touched": "yes"}
			require.NoError(t, client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, p, "ns"))
			return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
		}
		return false, nil, nil
	})
	sent := patches(client) // outermost: sees every attempt
	w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})
	want := []reservation.Allocation{realizedAs(a0, migA, 1)}
	_, err := w.WriteRuntime(context.Background(), pod, want)
	require.NoError(t, err)
	assert.Equal(t, want, storedAllocs(t, client))
	require.Len(t, *sent, 3)
	assert.Contains(t, (*sent)[0], `"resourceVersion":"7"`)
	assert.Contains(t, (*sent)[2], `"resourceVersion":"8"`, "the retry is conditioned on the re-read version")
}

func TestWriteRuntimeRefusals(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	moved := scheduled(0, 0, 4, 2)
	tests := []struct {
		name string
		// rewrite is what a concurrent writer stores before the first
		// patch conflicts; nil means the pod is deleted.
		rewrite  []reservation.Allocation
		replaced bool // the pod is recreated with another UID
		wantKind error
		wantSame []reservation.Allocation // expected stored record, nil to skip
	}{
		{name: "placement changed", rewrite: []reservation.Allocation{moved}, wantKind: kube.ErrReservationChanged,
			wantSame: []reservation.Allocation{moved}},
		{name: "entry removed", rewrite: []reservation.Allocation{scheduled(1, 0, 0, 2)}, wantKind: kube.ErrReservationChanged},
		{name: "other identity written", rewrite: []reservation.Allocation{realizedAs(a0, migB, 9)}, wantKind: kube.ErrReservationChanged,
			wantSame: []reservation.Allocation{realizedAs(a0, migB, 9)}},
		{name: "pod deleted", rewrite: nil, wantKind: kube.ErrPodGone},
		{name: "pod replaced", rewrite: []reservation.Allocation{a0}, replaced: true, wantKind: kube.ErrPodGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := reservedPod("7", a0)
			client := fake.NewClientset(pod)
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			var once atomic.Bool
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if once.Swap(true) {
					return false, nil, nil
				}
				if tt.rewrite == nil {
					require.NoError(t, client.Tracker().Delete(gvr, "ns", "p"))
					return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
				}
				p := reservedPod("8", tt.rewrite...)
				if tt.replaced {
					p.UID = "another"
				}
				require.NoError(t, client.Tracker().Update(gvr, p, "ns"))
				return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
			})
			sent := patches(client)
			w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})
			_, err := w.WriteRuntime(context.Background(), pod, []reservation.Allocation{realizedAs(a0, migA, 1)})
			require.ErrorIs(t, err, tt.wantKind)
			var pe *kube.PatchError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "p", pe.Name)
			assert.Len(t, *sent, 1, "nothing is written after the refusal")
			if tt.wantSame != nil {
				assert.Equal(t, tt.wantSame, storedAllocs(t, client))
			}
		})
	}
}

func TestWriteRuntimeReplacesTheStaleIdentityItRealizedFrom(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	stale := realizedAs(a0, migB, 9) // the annotated instance had vanished and was recreated
	pod := reservedPod("7", stale)
	client := fake.NewClientset(pod)
	w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})
	want := []reservation.Allocation{realizedAs(a0, migA, 1)}
	_, err := w.WriteRuntime(context.Background(), pod, want)
	require.NoError(t, err)
	assert.Equal(t, want, storedAllocs(t, client))
}

func TestWriteRuntimeConflictWithSameIdentityIsDone(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	pod := reservedPod("7", a0)
	client := fake.NewClientset(pod)
	want := []reservation.Allocation{realizedAs(a0, migA, 1)}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	var patchCalls atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patchCalls.Add(1)
		// A concurrent Allocate of the same reservation won the race.
		require.NoError(t, client.Tracker().Update(gvr, reservedPod("8", want...), "ns"))
		return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
	})
	w := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{})
	out, err := w.WriteRuntime(context.Background(), pod, want)
	require.NoError(t, err)
	assert.Equal(t, "8", out.ResourceVersion)
	assert.Equal(t, int32(1), patchCalls.Load())
}

func TestWriteRuntimeGivesUp(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	pod := reservedPod("7", a0)
	want := []reservation.Allocation{realizedAs(a0, migA, 1)}

	client := fake.NewClientset(pod)
	var calls atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
	})
	_, err := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{Attempts: 3}).WriteRuntime(context.Background(), pod, want)
	require.ErrorIs(t, err, kube.ErrTooManyConflicts)
	assert.True(t, apierrors.IsConflict(err))
	assert.Equal(t, int32(3), calls.Load())

	client = fake.NewClientset(pod)
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(assert.AnError)
	})
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(context.Background(), pod, want)
	require.Error(t, err)
	assert.True(t, apierrors.IsInternalError(err), "API errors are returned at once: %v", err)

	client = fake.NewClientset(pod)
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(context.Background(), pod,
		[]reservation.Allocation{a0}) // no runtime identity
	require.ErrorIs(t, err, reservation.ErrBadIdentity)
	assert.NotErrorIs(t, err, kube.ErrReservationChanged)
}

// The pod can vanish or be replaced at each step of a write; the writer
// reports ErrPodGone and writes nothing to a replacement.
func TestWriteRuntimePodGone(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	want := []reservation.Allocation{realizedAs(a0, migA, 1)}
	replacement := reservedPod("9", a0)
	replacement.UID = "uid-replacement"
	tests := []struct {
		name     string
		reactors func(client *fake.Clientset)
		apiErr   bool // the API's NotFound is wrapped too
	}{
		{name: "deleted before the patch", apiErr: true, reactors: func(client *fake.Clientset) {
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(podGR, "p")
			})
		}},
		{name: "deleted before the re-read", apiErr: true, reactors: func(client *fake.Clientset) {
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
			})
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(podGR, "p")
			})
		}},
		{name: "replaced by a pod with another UID", reactors: func(client *fake.Clientset) {
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewConflict(podGR, "p", assert.AnError)
			})
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, replacement, nil
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := reservedPod("7", a0)
			client := fake.NewClientset(pod)
			tt.reactors(client)
			_, err := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(context.Background(), pod, want)
			require.ErrorIs(t, err, kube.ErrPodGone)
			var pe *kube.PatchError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 1, pe.Attempts)
			assert.Equal(t, tt.apiErr, apierrors.IsNotFound(err))
			assert.NotEmpty(t, err.Error())
		})
	}
}

// A pod whose stored record is already malformed gives the writer nothing
// to merge into: it refuses before any API call.
func TestWriteRuntimeMalformedRecord(t *testing.T) {
	a0 := scheduled(0, 0, 0, 2)
	pod := reservedPod("7", a0)
	pod.Annotations[reservation.AnnotationKey] = `[{"containerIndex":0`
	client := fake.NewClientset(pod)
	sent := patches(client)
	_, err := kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(context.Background(), pod,
		[]reservation.Allocation{realizedAs(a0, migA, 1)})
	require.ErrorIs(t, err, kube.ErrReservationChanged)
	assert.ErrorIs(t, err, reservation.ErrMalformed)
	assert.Empty(t, *sent)
}
