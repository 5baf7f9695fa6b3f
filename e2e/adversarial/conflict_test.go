package adversarial_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/e2e/internal/cluster"
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

// roundTripper is a function as an http.RoundTripper: a test's wrap of a
// component's transport, which sees each request on its way (on the
// caller's goroutine) and its answer.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// binding decodes the Binding a pods/binding request carries (JSON from
// the extender's client, protobuf from kube-scheduler's) and leaves the
// request's body to be sent as it was.
func binding(r *http.Request) (*corev1.Binding, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	var b corev1.Binding
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// isBinding reports whether r creates the binding of pod name.
func isBinding(r *http.Request, name string) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods/"+name+"/binding")
}

// forgedRecord is a record no scheduler wrote: a placement on a GPU no
// node has.
const forgedRecord = `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-4000-8000-000000000000","profile":"1g.5gb","placement":{"start":6,"size":1}}]`

// TestBindConflict: the scheduler (the extender's Bind, or the DynMIG
// plugin's Bind in kube-scheduler's binding cycle) binds a MIG pod with
// its reservation record in the Binding's annotations and the pod's UID
// and the resourceVersion it read as the binding's preconditions, so that
// a pod changed since it was read is neither bound nor annotated. Here
// the pod's owner swaps in a forged record (and a label) while the
// scheduler's first pods/binding call is on its way, and the real API
// server answers 409. Run against each scheduler.
//
// Claims: that binding request carries the scheduler's record and the
// preconditions (it is the MIG binder's, not kube-scheduler's default
// binder's); it fails with the one 409 the binder sees, and right after
// it the pod is unbound and keeps the owner's label; the scheduler
// retries on its own and binds the pod with its own record in place of
// the forged one, in the write that binds it, the label kept; and the
// pod is then admitted and realized at the placement the record names,
// the node holding exactly its device (nothing of the failed attempt
// stays reserved or realized).
func TestBindConflict(t *testing.T) {
	eachScheduler(t, func(t *testing.T, s scheduler) {
		type attempt struct {
			binding *corev1.Binding
			status  int
			pod     *corev1.Pod // read right after the answer
			err     error
		}
		var (
			armed     atomic.Bool
			conflicts atomic.Int64
			first     = make(chan attempt, 1)
			e         *env
		)
		e = newEnv(t, envOptions{scheduler: s, binder: func(rt http.RoundTripper) http.RoundTripper {
			counted := conflictCounter{rt: rt, conflicts: &conflicts}
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				if !isBinding(r, "raced") || !armed.CompareAndSwap(true, false) {
					return counted.RoundTrip(r)
				}
				var a attempt
				defer func() { first <- a }()
				if a.binding, a.err = binding(r); a.err != nil {
					return counted.RoundTrip(r)
				}
				body := []byte(`{"metadata":{"labels":{"raced":"yes"},"annotations":{"` + reservation.AnnotationKey + `":` + strconv.Quote(forgedRecord) + `}}}`)
				if _, a.err = e.admin.CoreV1().Pods(namespace).Patch(r.Context(), "raced", types.MergePatchType, body, metav1.PatchOptions{}); a.err != nil {
					return counted.RoundTrip(r)
				}
				resp, err := counted.RoundTrip(r)
				if err != nil {
					a.err = err
					return resp, err
				}
				a.status = resp.StatusCode
				a.pod, a.err = e.admin.CoreV1().Pods(namespace).Get(e.ctx, "raced", metav1.GetOptions{})
				return resp, err
			})
		}})

		armed.Store(true)
		e.create(migPod("raced", "4000"))
		var a attempt
		select {
		case a = <-first:
		case <-e.ctx.Done():
			t.Fatal("no binding call for the pod")
		}
		if a.err != nil {
			t.Fatalf("the first binding: %v", a.err)
		}
		if a.binding.Annotations[reservation.AnnotationKey] == "" || a.binding.UID == "" || a.binding.ResourceVersion == "" {
			t.Errorf("the binding request carries record %q, UID %q, resourceVersion %q; want all three",
				a.binding.Annotations[reservation.AnnotationKey], a.binding.UID, a.binding.ResourceVersion)
		}
		if a.status != http.StatusConflict {
			t.Fatalf("the binding after the owner's change: status %d, want 409", a.status)
		}
		if a.pod.Spec.NodeName != "" {
			t.Errorf("pod bound to %q by the failed binding", a.pod.Spec.NodeName)
		}
		if a.pod.Labels["raced"] != "yes" || a.pod.Annotations[reservation.AnnotationKey] != forgedRecord {
			t.Errorf("the owner's change is gone after the failed binding: labels %v, record %q", a.pod.Labels, a.pod.Annotations[reservation.AnnotationKey])
		}

		e.waitBound("raced")
		got := e.get("raced")
		if v := got.Annotations[reservation.AnnotationKey]; v == forgedRecord {
			t.Errorf("the pod was bound with the forged record %s", v)
		}
		if got.Labels["raced"] != "yes" {
			t.Errorf("the owner's label is gone: %v", got.Labels)
		}
		if n := conflicts.Load(); n != 1 {
			t.Errorf("409 answers to the binder: got %d, want 1", n)
		}
		e.mustAdmit("raced")
		e.waitPasses(3)
		e.finalCheck()
	})
}
