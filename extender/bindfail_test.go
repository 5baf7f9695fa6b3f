package extender_test

import (
	"context"
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
	applyBind bool         // the binding is applied before the call fails
	failGets  atomic.Int32 // pod reads that fail, armed when the binding call fails
	getsAfter int32        // failGets armed by the failed binding call

	mu       sync.Mutex
	bindings []*corev1.Binding // the binding calls seen
}

func (f *faults) install(client *fake.Clientset) {
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*corev1.Binding)
		f.mu.Lock()
		f.bindings = append(f.bindings, b.DeepCopy())
		f.mu.Unlock()
		if f.applyBind {
			// As the API server does: node name and annotations in one write.
			obj, err := client.Tracker().Get(podsGVR, b.Namespace, b.Name)
			if err != nil {
				return true, nil, err
			}
			pod := obj.(*corev1.Pod).DeepCopy()
			pod.Spec.NodeName = b.Target.Name
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			for k, v := range b.Annotations {
				pod.Annotations[k] = v
			}
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
}

// A binding call can fail after the API server applied it. Bind reads the
// pod again: bound to the node with its record, it is bound (the ledger
// keeps it and the pod holds the node's lock); otherwise the reservation
// is forgotten. The binding is the only write, so a pod that is not bound
// carries no record, and a bound one always carries the binder's.
func TestBindErrorAfterCommit(t *testing.T) {
	tests := []struct {
		name      string
		faults    *faults
		wantBound bool // the pod ends up bound to n1
		wantErr   bool // Bind fails
	}{
		{name: "applied", faults: &faults{applyBind: true}, wantBound: true},
		{name: "applied, read fails", faults: &faults{applyBind: true, getsAfter: 100}, wantBound: true, wantErr: true},
		{name: "not applied", faults: &faults{}, wantErr: true},
		{name: "not applied, read fails", faults: &faults{getsAfter: 100}, wantErr: true},
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
				assert.True(t, annotated, "a bound pod carries the binder's record")
			} else {
				assert.Empty(t, after.Spec.NodeName)
				assert.False(t, annotated, "nothing is written to a pod that is not bound")
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
	f := &faults{applyBind: true, getsAfter: 100}
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

// The binding carries the record and the bind time in its annotations and
// is conditioned on the UID and the resourceVersion of the pod read (the
// API server's binding storage takes both as preconditions), so that
// "bound by this extender" proves "carries the record this extender
// wrote". The wire format is checked here; the fake API server enforces
// both preconditions and copies the annotations too (package kubetest).
func TestBindingShape(t *testing.T) {
	client := cluster(t)
	ext := start(t, client, extender.Options{})
	pod := create(t, client, migPod("a", "9000"))
	f := &faults{}
	f.install(client)
	require.Error(t, ext.Bind(context.Background(), bindArgs(pod, "n1")))
	require.Len(t, f.bindings, 1)
	b := f.bindings[0]
	assert.Equal(t, pod.UID, b.UID)
	assert.Equal(t, pod.ResourceVersion, b.ResourceVersion, "the version read")
	require.Contains(t, b.Annotations, reservation.AnnotationKey)
	allocs, err := reservation.DecodeString(b.Annotations[reservation.AnnotationKey])
	require.NoError(t, err)
	assert.Len(t, allocs, 1)
	assert.Contains(t, b.Annotations, kube.BindTimeAnnotation)
	assert.Len(t, b.Annotations, 2)
}
