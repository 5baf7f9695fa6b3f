package extender_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// faults injects the failures of a binding call and what follows it into
// the fake API server. Its reactors use the tracker, not the client: the
// fake holds its lock while a reactor runs.
type faults struct {
	applyBind   bool         // the binding is applied before the call fails
	failGets    atomic.Int32 // pod reads that fail, armed when the binding call fails
	getsAfter   int32        // failGets armed by the failed binding call
	failRemoval bool         // the annotation's removal fails
	touch       bool         // another writer updates the pod (annotation unchanged) before the call fails

	mu       sync.Mutex
	removals []map[string]any // metadata of the removal patches
}

func (f *faults) install(client *fake.Clientset) {
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		if f.applyBind {
			b := ca.GetObject().(*corev1.Binding)
			obj, err := client.Tracker().Get(podsGVR, b.Namespace, b.Name)
			if err != nil {
				return true, nil, err
			}
			pod := obj.(*corev1.Pod).DeepCopy()
			pod.Spec.NodeName = b.Target.Name
			pod.ResourceVersion = bumped(pod.ResourceVersion)
			if err := client.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
				return true, nil, err
			}
		}
		if f.touch {
			b := ca.GetObject().(*corev1.Binding)
			obj, err := client.Tracker().Get(podsGVR, b.Namespace, b.Name)
			if err != nil {
				return true, nil, err
			}
			pod := obj.(*corev1.Pod).DeepCopy()
			pod.ResourceVersion = bumped(pod.ResourceVersion)
			if err := client.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
				return true, nil, err
			}
		}
		f.failGets.Store(f.getsAfter)
		return true, nil, apierrors.NewTimeoutError("binding", 1)
	})
	client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if f.failGets.Load() > 0 {
			f.failGets.Add(-1)
			return true, nil, apierrors.NewServiceUnavailable("no answer")
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Metadata map[string]any `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &body); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		ann, _ := body.Metadata["annotations"].(map[string]any)
		if v, ok := ann[reservation.AnnotationKey]; !ok || v != nil {
			return false, nil, nil // not a removal
		}
		f.mu.Lock()
		f.removals = append(f.removals, body.Metadata)
		f.mu.Unlock()
		if f.failRemoval {
			return true, nil, apierrors.NewServiceUnavailable("no answer")
		}
		return false, nil, nil
	})
}

// A binding call can fail after the API server applied it. Bind reads the
// pod again: bound to the node, it is bound (the ledger keeps it and the
// pod holds the node's lock); not bound, the annotation is removed only
// from the version read, and only then is the reservation forgotten. No
// bound pod loses its annotation, and the ledger never forgets one.
func TestBindErrorAfterCommit(t *testing.T) {
	tests := []struct {
		name        string
		faults      *faults
		wantBound   bool // the pod ends up bound to n1
		wantErr     bool // Bind fails
		wantRemoved int  // removal patches sent
	}{
		{name: "applied", faults: &faults{applyBind: true}, wantBound: true},
		{name: "applied, first read fails", faults: &faults{applyBind: true, getsAfter: 1},
			wantBound: true, wantRemoved: 1}, // refused: the bind changed the version
		{name: "not applied", faults: &faults{}, wantErr: true, wantRemoved: 1},
		{name: "not applied, read fails", faults: &faults{getsAfter: 1}, wantErr: true, wantRemoved: 1},
		{name: "applied, read and removal fail", faults: &faults{applyBind: true, getsAfter: 100, failRemoval: true},
			wantBound: true, wantErr: true, wantRemoved: 1},
		{name: "not applied, read and removal fail", faults: &faults{getsAfter: 100, failRemoval: true},
			wantErr: true, wantRemoved: 1},
		// A new leader's extender annotated the pod again, with the same
		// value, for its own Bind: the annotation is not ours to remove.
		{name: "not applied, written again meanwhile", faults: &faults{touch: true}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := cluster(t)
			ext := start(t, client, extender.Options{})
			pod := create(t, client, migPod("a", "9000"))
			tt.faults.install(client)
			err := ext.Bind(ctx, bindArgs(pod, "n1"))
			tt.faults.failGets.Store(0)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			after := get(t, client, "a")
			annotated := after.Annotations[reservation.AnnotationKey] != ""
			if tt.wantBound {
				assert.Equal(t, "n1", after.Spec.NodeName)
				assert.True(t, annotated, "a bound pod keeps its annotation")
			} else {
				assert.Empty(t, after.Spec.NodeName)
				assert.Equal(t, tt.faults.failRemoval || tt.faults.touch, annotated, "the annotation is removed when the removal gets through, and only the version Bind wrote")
			}
			tt.faults.mu.Lock()
			removals := tt.faults.removals
			tt.faults.mu.Unlock()
			assert.Len(t, removals, tt.wantRemoved)
			for _, meta := range removals {
				assert.Equal(t, string(pod.UID), meta["uid"], "the removal is conditioned on the UID")
				assert.NotEmpty(t, meta["resourceVersion"], "and on the version read")
			}

			rs, assumed, held := ext.Ledger().Pod("uid-a")
			if tt.wantBound && !tt.wantErr {
				require.True(t, held, "the ledger keeps the bound pod")
				assert.False(t, assumed)
				assert.Len(t, rs, 1)
				other := create(t, client, migPod("b", "5000"))
				assert.ErrorIs(t, ext.Bind(ctx, bindArgs(other, "n1")), extender.ErrNodeLocked, "the bound pod holds the node")
			}
			if !tt.wantBound {
				assert.False(t, held, "an unbound pod's reservation is forgotten")
			}
			// Once the informer delivered everything, the ledger holds
			// exactly what the API server says.
			catchUp(t, ext)
			_, _, held = ext.Ledger().Pod("uid-a")
			assert.Equal(t, tt.wantBound, held)
			assert.Empty(t, ext.Ledger().Conflicts())
		})
	}
}

// After a binding call failed with the pod's fate unknown, the next Bind
// to the node reads the node's pods and counts the pod that was bound,
// even before the informer shows it.
func TestBindAfterUnknownBindCountsTheBoundPod(t *testing.T) {
	ctx := context.Background()
	client := cluster(t)
	gate := newWatchGate()
	ext := startGated(t, client, gate, extender.Options{})
	a := create(t, client, migPod("a", ""))
	f := &faults{applyBind: true, getsAfter: 100, failRemoval: true}
	f.install(client)
	require.Error(t, ext.Bind(ctx, bindArgs(a, "n1")))
	f.failGets.Store(0)
	realize(t, client, "a")

	b := create(t, client, migPod("b", ""))
	err := ext.Bind(ctx, bindArgs(b, "n1"))
	require.Error(t, err, "a holds the whole GPU")
	assert.False(t, errors.Is(err, extender.ErrNotSynced))
	assert.Empty(t, get(t, client, "b").Spec.NodeName)
	_, _, held := ext.Ledger().Pod("uid-a")
	assert.True(t, held)
}

// The removal patch carries its preconditions in metadata, as a merge
// patch must (checked here on the wire format, which the fake API server
// does not enforce for uid).
func TestRemovalPatchShape(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, migPod("a", "9000"))
	f := &faults{}
	f.install(client)
	require.Error(t, ext.Bind(context.Background(), bindArgs(pod, "n1")))
	require.Len(t, f.removals, 1)
	meta := f.removals[0]
	assert.Equal(t, "uid-a", meta["uid"])
	rv, _ := meta["resourceVersion"].(string)
	assert.Equal(t, bumped(pod.ResourceVersion), rv, "the version the annotation left")
	ann := meta["annotations"].(map[string]any)
	for k, v := range ann {
		assert.Nil(t, v, k)
		assert.Contains(t, []string{reservation.AnnotationKey, kube.BindTimeAnnotation}, k)
	}
}
