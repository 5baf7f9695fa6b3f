package adversarial_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// conflictCounter counts the 409 Conflict answers a client receives.
type conflictCounter struct {
	rt        http.RoundTripper
	conflicts *atomic.Int64
}

func (c conflictCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusConflict {
		c.conflicts.Add(1)
	}
	return resp, err
}

func countingClient(t *testing.T, c *cluster.Cluster, conflicts *atomic.Int64) kubernetes.Interface {
	t.Helper()
	cfg := c.AdminConfig()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return conflictCounter{rt: rt, conflicts: conflicts} })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestConflictingWrites: the runtime-identity writer
// (kube.AnnotationWriter, which the device plugin uses) handles the real
// API server's resourceVersion conflicts: a write from a pod version that
// another writer has since changed gets a 409, and the writer re-reads,
// re-validates and either writes the identity on top of the other
// writer's change (when the reservation is still the one realized) or
// refuses without writing (when it is not).
//
// Claims: with a stale pod whose labels changed meanwhile, WriteRuntime
// succeeds after at least one real 409, and the pod keeps both the new
// label and the identity; with a stale pod whose reservation was moved
// meanwhile, WriteRuntime fails with kube.ErrReservationChanged after a
// real 409 and the record is exactly what the other writer left.
func TestConflictingWrites(t *testing.T) {
	ctx := cluster.TestContext(t, 10*time.Minute)
	c := cluster.Start(t, cluster.Options{})
	admin := c.Admin()
	var conflicts atomic.Int64
	writer := kube.NewAnnotationWriter(countingClient(t, c, &conflicts), kube.AnnotationWriterOptions{})

	scheduled := reservation.Allocation{GPUUUID: "GPU-00000000-0000-0000-0000-00000000e2e0", Profile: "1g.5gb",
		Placement: capability.Placement{Start: 2, Size: 1}}
	identity := reservation.RuntimeIdentity{MIGUUID: "MIG-00000000-0000-0000-0000-00000000e2e1", GPUInstanceID: 9, ComputeInstanceID: 0}
	realized := []reservation.Allocation{scheduled.WithRuntime(identity)}

	create := func(name string) *corev1.Pod {
		// Bound to a node no device plugin serves: only the writer and
		// the test touch these pods.
		pod := migPod(name, "4000")
		pod.Spec.NodeName = "no-such-node"
		pod.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{scheduled})
		created, err := admin.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return created
	}
	patch := func(name, body string) {
		if _, err := admin.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch %s: %v", name, err)
		}
	}

	t.Run("label changed", func(t *testing.T) {
		stale := create("relabelled")
		patch(stale.Name, `{"metadata":{"labels":{"touched":"yes"}}}`)
		// The server really conflicts on the stale version.
		if _, err := admin.CoreV1().Pods(namespace).Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("update from the stale version: got %v, want a 409 Conflict", err)
		}
		before := conflicts.Load()
		if _, err := writer.WriteRuntime(ctx, stale, realized); err != nil {
			t.Fatalf("WriteRuntime: %v", err)
		}
		if got := conflicts.Load() - before; got < 1 {
			t.Errorf("conflicts seen by the writer: got %d, want at least 1", got)
		}
		got, err := admin.CoreV1().Pods(namespace).Get(ctx, stale.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["touched"] != "yes" {
			t.Errorf("the other writer's label is gone: labels %v", got.Labels)
		}
		allocs, err := kube.PodAllocations(got)
		if err != nil || len(allocs) != 1 || allocs[0] != realized[0] {
			t.Errorf("record %v (err %v), want %v", allocs, err, realized)
		}
	})

	t.Run("reservation moved", func(t *testing.T) {
		stale := create("moved")
		moved := scheduled
		moved.Placement = capability.Placement{Start: 4, Size: 1}
		value := reservation.EncodeString([]reservation.Allocation{moved})
		patch(stale.Name, `{"metadata":{"annotations":{"`+reservation.AnnotationKey+`":`+jsonString(value)+`}}}`)
		before := conflicts.Load()
		_, err := writer.WriteRuntime(ctx, stale, realized)
		if !errors.Is(err, kube.ErrReservationChanged) {
			t.Fatalf("WriteRuntime: got %v, want kube.ErrReservationChanged", err)
		}
		if got := conflicts.Load() - before; got < 1 {
			t.Errorf("conflicts seen by the writer: got %d, want at least 1", got)
		}
		got, err := admin.CoreV1().Pods(namespace).Get(ctx, stale.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Annotations[reservation.AnnotationKey]; v != value {
			t.Errorf("record %q, want the other writer's %q untouched", v, value)
		}
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// interfering runs before each request of a client, on the request's
// goroutine, so that a test can change an object between the client's
// read and its write.
type interfering struct {
	rt     http.RoundTripper
	before func(*http.Request)
}

func (i interfering) RoundTrip(r *http.Request) (*http.Response, error) {
	i.before(r)
	return i.rt.RoundTrip(r)
}

// forgedRecord is a record the extender never wrote: a placement on a GPU
// no node has.
const forgedRecord = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-4000-8000-000000000000","profile":"1g.5gb","placement":{"start":6,"size":1}}]`

// TestExtenderBindConflict: the extender binds a pod with its reservation
// record in the Binding's annotations and the resourceVersion it read as
// the binding's precondition, so that a pod changed since it was read is
// neither bound nor annotated. Here the pod's owner swaps in a forged
// record (and a label) between the extender's read and its binding, and
// the real API server answers 409.
//
// Claims: that Bind fails and leaves the pod unbound, keeping the owner's
// label; the next Bind succeeds and the binding replaces the forged record
// with the extender's, in the write that binds the pod; and the pod is
// then admitted and realized at the placement the extender chose, the
// node holding exactly its device (nothing of the failed attempt stays
// reserved or realized).
func TestExtenderBindConflict(t *testing.T) {
	var armed atomic.Bool
	var conflicts atomic.Int64
	e := newEnv(t, envOptions{extenderClient: func(c *cluster.Cluster) kubernetes.Interface {
		admin := c.Admin()
		cfg := c.AdminConfig()
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			counted := conflictCounter{rt: rt, conflicts: &conflicts}
			return interfering{rt: counted, before: func(r *http.Request) {
				if r.Method != http.MethodPost || path.Base(r.URL.Path) != "binding" || !armed.CompareAndSwap(true, false) {
					return
				}
				name := path.Base(path.Dir(r.URL.Path))
				body := []byte(`{"metadata":{"labels":{"raced":"yes"},"annotations":{"` + reservation.AnnotationKey + `":` + strconv.Quote(forgedRecord) + `}}}`)
				if _, err := admin.CoreV1().Pods(namespace).Patch(r.Context(), name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
					t.Errorf("the other writer's patch of %s: %v", name, err)
				}
			}}
		})
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}})

	pod, err := e.admin.CoreV1().Pods(namespace).Create(e.ctx, migPod("raced", "4000"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ext.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err = e.ext.Bind(e.ctx, extender.BindingArgs{PodName: pod.Name, PodNamespace: namespace, PodUID: pod.UID, Node: nodeName})
	if err == nil {
		t.Fatal("Bind succeeded although the pod changed between its read and its binding")
	}
	t.Logf("Bind refused: %v", err)
	if got := conflicts.Load(); got != 1 {
		t.Errorf("409 answers to the extender: got %d, want 1", got)
	}
	got := e.get(pod.Name)
	if got.Spec.NodeName != "" {
		t.Errorf("pod bound to %q after the failed Bind", got.Spec.NodeName)
	}
	if got.Labels["raced"] != "yes" {
		t.Errorf("the other writer's label is gone: %v", got.Labels)
	}

	e.bind(got)
	if v := e.get(pod.Name).Annotations[reservation.AnnotationKey]; v == forgedRecord {
		t.Errorf("the pod was bound with the forged record %s", v)
	}
	e.mustAdmit(pod.Name)
	e.waitPasses(3)
	e.finalCheck()
}
