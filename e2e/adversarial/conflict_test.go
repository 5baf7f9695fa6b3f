package adversarial_test

import (
	"encoding/json"
	"errors"
	"net/http"
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
