package kubetest_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/kube/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pod(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv}}
}

func TestMergePatch(t *testing.T) {
	tests := []struct {
		name     string
		patch    string
		conflict bool
		wantRV   string
		wantAnn  string
	}{
		{name: "no precondition", patch: `{"metadata":{"annotations":{"k":"v"}}}`, wantRV: "8", wantAnn: "v"},
		{name: "current version", patch: `{"metadata":{"resourceVersion":"7","annotations":{"k":"v"}}}`, wantRV: "8", wantAnn: "v"},
		{name: "stale version", patch: `{"metadata":{"resourceVersion":"6","annotations":{"k":"v"}}}`, conflict: true, wantRV: "7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := kubetest.NewClientset(pod("7"))
			out, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, []byte(tt.patch), metav1.PatchOptions{})
			if tt.conflict {
				assert.True(t, apierrors.IsConflict(err), "got %v, want a conflict", err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.wantRV, out.ResourceVersion)
			}
			got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tt.wantRV, got.ResourceVersion)
			assert.Equal(t, tt.wantAnn, got.Annotations["k"])
		})
	}
}

func TestMergePatchMissingPod(t *testing.T) {
	c := kubetest.NewClientset()
	_, err := c.CoreV1().Pods("ns").Patch(context.Background(), "p", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

func TestMergePatchMalformed(t *testing.T) {
	c := kubetest.NewClientset(pod("1"))
	_, err := c.CoreV1().Pods("ns").Patch(context.Background(), "p", types.MergePatchType, []byte(`{`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsBadRequest(err), "got %v", err)
}

func TestBinding(t *testing.T) {
	ctx := context.Background()
	c := kubetest.NewClientset(pod("3"))
	bind := func(node string) error {
		return c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
	}
	require.NoError(t, bind("n1"))
	got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", got.Spec.NodeName)
	assert.Equal(t, "4", got.ResourceVersion)
	assert.Equal(t, []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, got.Status.Conditions,
		"the binding marks the pod scheduled, as the API server does")

	err = bind("n2")
	assert.True(t, apierrors.IsConflict(err), "binding a bound pod: got %v, want a conflict", err)
	got, err = c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", got.Spec.NodeName)

	err = c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone"}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

// A pod deleted and created again under the same name is another object:
// a patch computed from the old one conflicts whatever resourceVersion the
// new one was created with.
func TestMergePatchRecreatedPod(t *testing.T) {
	ctx := context.Background()
	c := kubetest.NewClientset(pod("7"))
	old, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
	again := pod("7") // the client's resourceVersion is not the server's
	again.UID = "uid-2"
	created, err := c.CoreV1().Pods("ns").Create(ctx, again, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, old.ResourceVersion, created.ResourceVersion, "a created pod gets a new resourceVersion")

	patch := `{"metadata":{"resourceVersion":"` + old.ResourceVersion + `","annotations":{"k":"v"}}}`
	_, err = c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	assert.True(t, apierrors.IsConflict(err), "got %v, want a conflict", err)
}

func TestMergePatchUIDPrecondition(t *testing.T) {
	tests := []struct {
		name     string
		uid      string
		conflict bool
	}{
		{name: "matching", uid: "uid-1"},
		{name: "other pod", uid: "uid-0", conflict: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p := pod("3")
			p.UID = "uid-1"
			c := kubetest.NewClientset(p)
			patch := `{"metadata":{"uid":"` + tt.uid + `","annotations":{"k":"v"}}}`
			_, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			got, gerr := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			require.NoError(t, gerr)
			if tt.conflict {
				assert.True(t, apierrors.IsConflict(err), "got %v, want a conflict", err)
				assert.Empty(t, got.Annotations)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "v", got.Annotations["k"])
		})
	}
}

func TestUpdatePreconditions(t *testing.T) {
	ctx := context.Background()
	p := pod("5")
	p.UID = "uid-1"
	c := kubetest.NewClientset(p)
	cur, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	cur.Labels = map[string]string{"k": "v"}
	out, err := c.CoreV1().Pods("ns").Update(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "6", out.ResourceVersion)

	_, err = c.CoreV1().Pods("ns").UpdateStatus(ctx, cur, metav1.UpdateOptions{}) // still at "5"
	assert.True(t, apierrors.IsConflict(err), "stale update: got %v, want a conflict", err)
	out.UID = "uid-0"
	_, err = c.CoreV1().Pods("ns").Update(ctx, out, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "other UID: got %v, want a conflict", err)
}

func TestBindingPreconditions(t *testing.T) {
	tests := []struct {
		name     string
		uid      types.UID
		rv       string
		deleting bool
		conflict bool
	}{
		{name: "no precondition"},
		{name: "matching", uid: "uid-1", rv: "3"},
		{name: "other pod", uid: "uid-0", conflict: true},
		{name: "stale version", rv: "2", conflict: true},
		{name: "deleting", deleting: true, conflict: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p := pod("3")
			p.UID = "uid-1"
			if tt.deleting {
				now := metav1.Now()
				p.DeletionTimestamp = &now
			}
			c := kubetest.NewClientset(p)
			err := c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: tt.uid, ResourceVersion: tt.rv},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "n1"},
			}, metav1.CreateOptions{})
			got, gerr := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			require.NoError(t, gerr)
			if tt.conflict {
				assert.True(t, apierrors.IsConflict(err), "got %v, want a conflict", err)
				assert.Empty(t, got.Spec.NodeName)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "n1", got.Spec.NodeName)
		})
	}
}

// The binding merges its annotations into the pod in the same write that
// binds it, replacing the pod's values under the same keys, and a
// conflicting binding writes none of them.
func TestBindingCopiesAnnotations(t *testing.T) {
	ctx := context.Background()
	p := pod("3")
	p.Annotations = map[string]string{"keep": "old", "replace": "forged"}
	c := kubetest.NewClientset(p)
	bind := func(rv string) error {
		return c.CoreV1().Pods("ns").Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv,
				Annotations: map[string]string{"replace": "binder", "new": "binder"}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "n1"},
		}, metav1.CreateOptions{})
	}
	err := bind("2")
	assert.True(t, apierrors.IsConflict(err), "stale version: got %v, want a conflict", err)
	got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"keep": "old", "replace": "forged"}, got.Annotations, "a refused binding writes nothing")

	require.NoError(t, bind("3"))
	got, err = c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "n1", got.Spec.NodeName)
	assert.Equal(t, map[string]string{"keep": "old", "replace": "binder", "new": "binder"}, got.Annotations)
}

func int64p(n int64) *int64 { return &n }

func TestGracefulDelete(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		pod       func(*corev1.Pod)
		grace     *int64
		wantGrace int64 // -1: removed at once
	}{
		{name: "default grace period", wantGrace: 30},
		{name: "pod's grace period", pod: func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = int64p(5) }, wantGrace: 5},
		{name: "requested grace period", grace: int64p(7), pod: func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = int64p(5) }, wantGrace: 7},
		{name: "negative grace period", grace: int64p(-3), wantGrace: 1},
		{name: "grace period 0", grace: int64p(0), wantGrace: -1},
		{name: "not bound", pod: func(p *corev1.Pod) { p.Spec.NodeName = "" }, wantGrace: -1},
		{name: "succeeded", pod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, wantGrace: -1},
		{name: "failed", pod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, wantGrace: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p := pod("4")
			p.Spec.NodeName = "n1"
			if tt.pod != nil {
				tt.pod(p)
			}
			srv := kubetest.New(kubetest.Options{Clock: clocktesting.NewFakePassiveClock(now)}, p)
			err := srv.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: tt.grace})
			require.NoError(t, err)
			got, err := srv.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			if tt.wantGrace < 0 {
				assert.True(t, apierrors.IsNotFound(err), "got %v, want the pod removed", err)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, got.DeletionTimestamp)
			assert.Equal(t, now.Add(time.Duration(tt.wantGrace)*time.Second), got.DeletionTimestamp.UTC())
			require.NotNil(t, got.DeletionGracePeriodSeconds)
			assert.Equal(t, tt.wantGrace, *got.DeletionGracePeriodSeconds)
			assert.Equal(t, "5", got.ResourceVersion)
		})
	}
}

// A pod being deleted: deleting it again with the same or a longer grace
// period changes nothing, a shorter one moves the deadline closer, and the
// kubelet's final delete removes it.
func TestGracefulDeleteAgain(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	p := pod("1")
	p.UID, p.Spec.NodeName = "uid-1", "n1"
	srv := kubetest.New(kubetest.Options{Clock: clocktesting.NewFakePassiveClock(now)}, p)
	pods := srv.CoreV1().Pods("ns")
	deadline := func() time.Time {
		t.Helper()
		got, err := pods.Get(ctx, "p", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, got.DeletionTimestamp)
		return got.DeletionTimestamp.UTC()
	}
	require.NoError(t, pods.Delete(ctx, "p", metav1.DeleteOptions{}))
	assert.Equal(t, now.Add(30*time.Second), deadline())
	require.NoError(t, pods.Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: int64p(60)}))
	assert.Equal(t, now.Add(30*time.Second), deadline(), "a longer grace period changes nothing")
	require.NoError(t, pods.Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: int64p(10)}))
	assert.Equal(t, now.Add(10*time.Second), deadline(), "a shorter one moves the deadline")

	err := kubetest.FinishDeletion(ctx, srv, "ns", "p", "uid-0")
	assert.True(t, apierrors.IsConflict(err), "another pod's UID: got %v, want a conflict", err)
	require.NoError(t, kubetest.FinishDeletion(ctx, srv, "ns", "p", "uid-1"))
	_, err = pods.Get(ctx, "p", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v, want the pod removed", err)
}

// NewClientset removes a pod at once, as the plain fake does.
func TestNewClientsetDeletesImmediately(t *testing.T) {
	ctx := context.Background()
	p := pod("1")
	p.Spec.NodeName = "n1"
	c := kubetest.NewClientset(p)
	require.NoError(t, c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
	_, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

func TestDeletePreconditions(t *testing.T) {
	ctx := context.Background()
	p := pod("4")
	p.UID = "uid-1"
	c := kubetest.NewClientset(p)
	stale, other := "3", types.UID("uid-0")
	err := c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &stale}})
	assert.True(t, apierrors.IsConflict(err), "stale version: got %v", err)
	err = c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &other}})
	assert.True(t, apierrors.IsConflict(err), "other UID: got %v", err)
	_, err = c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err, "still there")
	err = c.CoreV1().Pods("ns").Delete(ctx, "gone", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}

// While the watch cache lags, a list that accepts a cached answer misses
// what was written since; a consistent list does not.
func TestLaggingWatchCache(t *testing.T) {
	ctx := context.Background()
	other := pod("1")
	other.Namespace = "other"
	srv := kubetest.New(kubetest.Options{}, pod("1"), other)
	srv.LagWatchCache()
	_, err := srv.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	names := func(rv, ns string) []string {
		t.Helper()
		list, err := srv.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		require.NoError(t, err)
		var out []string
		for _, p := range list.Items {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		return out
	}
	assert.ElementsMatch(t, []string{"ns/p", "other/p"}, names("0", ""), "cached")
	assert.ElementsMatch(t, []string{"ns/p"}, names("0", "ns"), "cached, one namespace")
	assert.ElementsMatch(t, []string{"ns/p", "ns/late", "other/p"}, names("", ""), "consistent")
	srv.CatchUpWatchCache()
	assert.ElementsMatch(t, []string{"ns/p", "ns/late", "other/p"}, names("0", ""), "caught up")
}

// A watch started while the watch cache lags delivers nothing until the
// cache catches up, then everything it missed, in order.
func TestLaggingWatchCacheHoldsWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := kubetest.New(kubetest.Options{})
		srv.LagWatchCache()
		w, err := srv.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		defer w.Stop()
		_, err = srv.CoreV1().Pods("ns").Create(ctx, pod(""), metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, srv.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
		synctest.Wait()
		select {
		case ev := <-w.ResultChan():
			t.Fatalf("got %s before the cache caught up", ev.Type)
		default:
		}

		srv.CatchUpWatchCache()
		var got []watch.EventType
		for range 2 {
			got = append(got, (<-w.ResultChan()).Type)
		}
		assert.Equal(t, []watch.EventType{watch.Added, watch.Deleted}, got)

		// Stopping a held watch ends it.
		srv.LagWatchCache()
		held, err := srv.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		held.Stop()
		_, open := <-held.ResultChan()
		assert.False(t, open)
	})
}

// Held watches, running or started while held, deliver nothing until
// released, then everything in order; a consistent list is current
// meanwhile.
func TestHoldWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := kubetest.New(kubetest.Options{})
		running, err := srv.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		defer running.Stop()
		_, err = srv.CoreV1().Pods("ns").Create(ctx, pod(""), metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, watch.Added, (<-running.ResultChan()).Type, "before the hold")

		srv.HoldWatches()
		started, err := srv.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		defer started.Stop()
		require.NoError(t, srv.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
		_, err = srv.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		synctest.Wait()
		for _, w := range []watch.Interface{running, started} {
			select {
			case ev := <-w.ResultChan():
				t.Fatalf("got %s while held", ev.Type)
			default:
			}
		}
		list, err := srv.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		assert.Equal(t, "q", list.Items[0].Name, "a consistent list is current")

		srv.ReleaseWatches()
		// p, not bound, is removed at once; the watch started while held
		// first lists p, as the fake's watches without a resourceVersion do.
		for w, want := range map[watch.Interface][]string{
			running: {"DELETED p", "ADDED q"},
			started: {"ADDED p", "DELETED p", "ADDED q"},
		} {
			var got []string
			for range want {
				ev := <-w.ResultChan()
				got = append(got, string(ev.Type)+" "+ev.Object.(*corev1.Pod).Name)
			}
			assert.Equal(t, want, got)
		}
	})
}

// A patch computed from a stale copy of a pod fails instead of overwriting
// what another writer stored meanwhile.
func ExampleNewClientset() {
	ctx := context.Background()
	c := kubetest.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: "1"}})
	first := []byte(`{"metadata":{"resourceVersion":"1","annotations":{"owner":"a"}}}`)
	second := []byte(`{"metadata":{"resourceVersion":"1","annotations":{"owner":"b"}}}`)
	out, err := c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, first, metav1.PatchOptions{})
	fmt.Println(out.Annotations["owner"], out.ResourceVersion, err)
	_, err = c.CoreV1().Pods("ns").Patch(ctx, "p", types.MergePatchType, second, metav1.PatchOptions{})
	fmt.Println(apierrors.IsConflict(err))
	// Output:
	// a 2 <nil>
	// true
}

// Deleting a bound pod leaves it with a deletion deadline, as the real API
// server does, until the kubelet's final delete removes it.
func ExampleNew() {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	srv := kubetest.New(kubetest.Options{Clock: clocktesting.NewFakePassiveClock(now)},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1", ResourceVersion: "1"},
			Spec: corev1.PodSpec{NodeName: "n1"}})
	pods := srv.CoreV1().Pods("ns")
	_ = pods.Delete(ctx, "p", metav1.DeleteOptions{})
	p, err := pods.Get(ctx, "p", metav1.GetOptions{})
	fmt.Println(p.DeletionTimestamp.UTC().Format(time.TimeOnly), *p.DeletionGracePeriodSeconds, p.ResourceVersion, err)

	_ = kubetest.FinishDeletion(ctx, srv, "ns", "p", "uid-1")
	_, err = pods.Get(ctx, "p", metav1.GetOptions{})
	fmt.Println(apierrors.IsNotFound(err))
	// Output:
	// 12:00:30 30 2 <nil>
	// true
}

// A watch from a listing's resourceVersion first delivers the pods created
// or changed since the listing, as a reflector needs; a deletion between
// the two is not replayed (the package documentation's limitation).
func TestWatchFromListingReplaysWrites(t *testing.T) {
	ctx := context.Background()
	s := kubetest.New(kubetest.Options{DeleteImmediately: true}, pod("1"))
	pods := s.CoreV1().Pods("ns")
	list, err := pods.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, list.ResourceVersion)
	created := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"}}
	_, err = pods.Create(ctx, created, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, pods.Delete(ctx, "p", metav1.DeleteOptions{}))
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		assert.Equal(t, watch.Added, ev.Type)
		assert.Equal(t, "q", ev.Object.(*corev1.Pod).Name)
	case <-time.After(10 * time.Second):
		t.Fatal("the pod created after the listing was not replayed")
	}
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("unexpected event %v %s", ev.Type, ev.Object.(*corev1.Pod).Name)
	default:
	}
}

// Only the kubelet's status writes change a pod's status: a create drops
// the status its creator sent, and a write of the pod keeps the stored
// status, as a write of its status keeps the stored spec.
func TestStatusIsTheKubeletsToWrite(t *testing.T) {
	running := corev1.PodStatus{Phase: corev1.PodRunning}
	pods := func(c *fake.Clientset) typedcorev1.PodInterface { return c.CoreV1().Pods("ns") }
	tests := []struct {
		name      string
		write     func(ctx context.Context, c *fake.Clientset) error
		wantPhase corev1.PodPhase
		wantNode  string
	}{
		{name: "create", wantPhase: corev1.PodPending, write: func(ctx context.Context, c *fake.Clientset) error {
			p := pod("")
			p.Name, p.Status = "q", running
			_, err := pods(c).Create(ctx, p, metav1.CreateOptions{})
			return err
		}},
		{name: "update", wantPhase: corev1.PodPending, wantNode: "n1", write: func(ctx context.Context, c *fake.Clientset) error {
			p := pod("")
			p.Spec.NodeName, p.Status = "n1", running
			_, err := pods(c).Update(ctx, p, metav1.UpdateOptions{})
			return err
		}},
		{name: "update status", wantPhase: corev1.PodRunning, write: func(ctx context.Context, c *fake.Clientset) error {
			p := pod("")
			p.Spec.NodeName, p.Status = "n1", running
			_, err := pods(c).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}},
		{name: "merge patch", wantPhase: corev1.PodPending, wantNode: "n1", write: func(ctx context.Context, c *fake.Clientset) error {
			_, err := pods(c).Patch(ctx, "p", types.MergePatchType, []byte(`{"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}`), metav1.PatchOptions{})
			return err
		}},
		{name: "merge patch of status", wantPhase: corev1.PodRunning, write: func(ctx context.Context, c *fake.Clientset) error {
			_, err := pods(c).Patch(ctx, "p", types.MergePatchType, []byte(`{"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			stored := pod("1")
			stored.Status.Phase = corev1.PodPending
			c := kubetest.NewClientset(stored)
			require.NoError(t, tt.write(ctx, c))
			list, err := pods(c).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, got := range list.Items {
				assert.Equal(t, tt.wantPhase, got.Status.Phase, got.Name)
				if got.Name == "p" {
					assert.Equal(t, tt.wantNode, got.Spec.NodeName)
				}
			}
		})
	}
}
