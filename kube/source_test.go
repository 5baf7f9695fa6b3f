package kube_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// startSource runs src until the test ends and waits for Run to return.
func startSource(t *testing.T, src *kube.NodePodSource) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.ErrorIs(t, src.Err(), kube.ErrNotRunning)
		assert.False(t, src.Snapshot().Complete, "a stopped source is never complete")
	})
}

// watchStarted returns a channel that receives each time the client starts
// a pod watch: objects created before that are in the listing, objects
// created after it arrive as events (the fake clientset ignores
// resourceVersion, so anything created in between would be lost).
func watchStarted(client *fake.Clientset) <-chan struct{} {
	ch := make(chan struct{}, 16)
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		select {
		case ch <- struct{}{}:
		default:
		}
		return false, nil, nil
	})
	return ch
}

func podNames(snap reservation.Snapshot) []string {
	var names []string
	for _, p := range snap.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

func TestNodePodSourceSnapshot(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(
			podOn("b", "p2", "n1", nil),
			podOn("a", "p1", "n1", nil),
			podOn("a", "elsewhere", "n2", nil),
		)
		watching := watchStarted(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		assert.ErrorIs(t, src.Err(), kube.ErrNotRunning)
		assert.False(t, src.Snapshot().Complete)
		startSource(t, src)

		ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // bubble time
		defer cancel()
		require.True(t, src.WaitForSync(ctx))
		settle(t, received(watching))
		require.NoError(t, src.Err())
		snap := src.Snapshot()
		assert.True(t, snap.Complete)
		assert.Equal(t, []string{"a/p1", "b/p2"}, podNames(snap), "only this node's pods, sorted")

		p, ok := src.Pod("a", "p1")
		require.True(t, ok)
		assert.Equal(t, "n1", p.Spec.NodeName)
		_, ok = src.Pod("a", "elsewhere")
		assert.False(t, ok, "pods of other nodes are invisible even if a client ignores the field selector")

		_, err := client.CoreV1().Pods("c").Create(ctx, podOn("c", "p3", "n1", nil), metav1.CreateOptions{})
		require.NoError(t, err)
		settle(t, func() bool { return len(src.Snapshot().Pods) == 3 })

		assert.ErrorIs(t, src.Run(ctx), kube.ErrAlreadyRunning)
	})
}

func TestNodePodSourceFieldSelector(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset()
		var selectors sync.Map
		client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			selectors.Store("list", a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
			return false, nil, nil
		})
		client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
			selectors.Store("watch", a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.String())
			return false, nil, nil
		})
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, func() bool {
			_, ok := selectors.Load("watch")
			return ok
		})
		for _, op := range []string{"list", "watch"} {
			got, _ := selectors.Load(op)
			assert.Equal(t, "spec.nodeName=n1", got, op)
		}
	})
}

// A slow API server: the snapshot stays incomplete until the first
// listing has been applied.
func TestNodePodSourceSlowCache(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "p1", "n1", nil))
		release := make(chan struct{})
		listing := make(chan struct{}, 1)
		client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			select {
			case listing <- struct{}{}:
			default:
			}
			<-release
			return false, nil, nil
		})
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, received(listing))

		assert.ErrorIs(t, src.Err(), kube.ErrNotSynced)
		snap := src.Snapshot()
		assert.False(t, snap.Complete)
		assert.Empty(t, snap.Pods)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		assert.False(t, src.WaitForSync(ctx), "WaitForSync honours ctx")

		close(release)
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour) // bubble time
		defer cancel()
		require.True(t, src.WaitForSync(ctx))
		settle(t, func() bool { return src.Snapshot().Complete })
		assert.Equal(t, []string{"a/p1"}, podNames(src.Snapshot()))
	})
}

// A failing listing keeps the snapshot incomplete, also after the cache
// synced once; the next successful call makes it complete again. It runs in
// a synctest bubble: the informer's retry backoffs (seconds, with jitter)
// pass on the bubble's fake clock, so neither the test's length nor its
// outcome depends on the machine's load.
func TestNodePodSourceListingErrors(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "p1", "n1", nil))
		w := newWatchBreaker(client) // innermost watch reactor: prepend it first
		var failList, failWatch atomic.Bool
		failList.Store(true)
		client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if failList.Load() {
				return true, nil, apierrors.NewInternalError(assert.AnError)
			}
			return false, nil, nil
		})
		watching := make(chan struct{}, 16)
		client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			if failWatch.Load() {
				return true, nil, apierrors.NewTooManyRequests("slow down", 1)
			}
			select {
			case watching <- struct{}{}:
			default:
			}
			return false, nil, nil
		})
		log := newOpLog(client) // outermost: sees failed calls too
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)

		var le *kube.ListingError
		settle(t, func() bool { return src.Err() != nil && errors.As(src.Err(), &le) })
		assert.ErrorIs(t, src.Err(), kube.ErrListing)
		assert.True(t, apierrors.IsInternalError(src.Err()))
		assert.Equal(t, "list", le.Op)
		assert.False(t, src.Snapshot().Complete)

		failList.Store(false)
		settle(t, func() bool { return src.Snapshot().Complete })
		settle(t, received(watching))

		// Break the watch and refuse to re-establish it: the source
		// relists, then its watch call fails, and every retry relists
		// first.
		failWatch.Store(true)
		w.breakAll()
		settle(t, func() bool { return apierrors.IsTooManyRequests(src.Err()) })
		assert.False(t, src.Snapshot().Complete)
		assert.Equal(t, []string{"a/p1"}, podNames(src.Snapshot()), "the stale cache is still readable")

		failWatch.Store(false)
		settle(t, func() bool { return src.Snapshot().Complete })
		ops, _ := log.snapshot()
		require.NotEmpty(t, ops)
		for i := 1; i < len(ops); i++ {
			if ops[i] == "watch" && ops[i-1] != "list" {
				t.Fatalf("calls %v: call %d watches without listing first", ops, i)
			}
		}
	})
}

func TestNodePodSourceOnInactive(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		running := podOn("a", "runs", "n1", nil)
		finishing := podOn("a", "finishes", "n1", nil)
		deleted := podOn("a", "deleted", "n1", nil)
		other := podOn("a", "other", "n2", nil)
		client := fake.NewClientset(running, finishing, deleted, other)
		watching := watchStarted(client)
		inactive := make(chan string, 8)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{
			OnInactive: func(p reservation.Pod) { inactive <- p.Name },
		})
		startSource(t, src)
		settle(t, received(watching))
		ctx := context.Background()

		// Label change on a running pod: not inactive.
		running = running.DeepCopy()
		running.Labels = map[string]string{"x": "y"}
		_, err := client.CoreV1().Pods("a").Update(ctx, running, metav1.UpdateOptions{})
		require.NoError(t, err)
		finishing = finishing.DeepCopy()
		finishing.Status.Phase = corev1.PodSucceeded
		_, err = client.CoreV1().Pods("a").UpdateStatus(ctx, finishing, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "deleted", metav1.DeleteOptions{}))
		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "other", metav1.DeleteOptions{}))

		// Once the bubble is idle every event has been handled: exactly
		// these two calls, and none for "runs" or "other".
		synctest.Wait()
		var got []string
		for len(inactive) > 0 {
			got = append(got, <-inactive)
		}
		assert.ElementsMatch(t, []string{"finishes", "deleted"}, got)

		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "runs", metav1.DeleteOptions{}))
		synctest.Wait()
		require.Len(t, inactive, 1, "OnInactive calls after deleting runs")
		assert.Equal(t, "runs", <-inactive)
	})
}

// watchBreaker serves pod watches from the fake's tracker and can stop them
// all, as an API server restart would.
type watchBreaker struct {
	mu       sync.Mutex
	watchers []watch.Interface
}

func newWatchBreaker(client *fake.Clientset) *watchBreaker {
	b := &watchBreaker{}
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa := a.(k8stesting.WatchActionImpl)
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), wa.ListOptions)
		if err != nil {
			return true, nil, err
		}
		b.mu.Lock()
		b.watchers = append(b.watchers, w)
		b.mu.Unlock()
		return true, w, nil
	})
	return b
}

func (b *watchBreaker) breakAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.watchers {
		w.Stop()
	}
	b.watchers = nil
}

// opLog records, in order, the pod lists and watches that reach the API
// server, with the options of each list.
type opLog struct {
	mu    sync.Mutex
	ops   []string
	lists []metav1.ListOptions
}

// newOpLog records client's pod calls; prepend it after any reactor that
// should see calls first.
func newOpLog(client *fake.Clientset) *opLog {
	l := &opLog{}
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ops = append(l.ops, "list")
		l.lists = append(l.lists, a.(k8stesting.ListActionImpl).ListOptions)
		return false, nil, nil
	})
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ops = append(l.ops, "watch")
		return false, nil, nil
	})
	return l
}

func (l *opLog) snapshot() ([]string, []metav1.ListOptions) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops), slices.Clone(l.lists)
}

func (l *opLog) watches() int {
	ops, _ := l.snapshot()
	n := 0
	for _, op := range ops {
		if op == "watch" {
			n++
		}
	}
	return n
}

// A watch that ends makes the snapshot incomplete at once, and it stays so
// until a consistent listing has been applied: changes made while no watch
// ran are never hidden behind a complete snapshot, and the source never
// resumes a watch without listing first.
func TestNodePodSourceWatchGap(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "keep", "n1", nil), podOn("a", "gone", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete && log.watches() == 1 })

		// The API server restarts: the watch breaks, and what happens
		// until the source relists is seen by no watch.
		w.breakAll()
		synctest.Wait()
		assert.ErrorIs(t, src.Err(), kube.ErrStale)
		assert.False(t, src.Snapshot().Complete, "incomplete from the moment the watch ended")
		ctx := context.Background()
		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "gone", metav1.DeleteOptions{}))
		_, err := client.CoreV1().Pods("a").Create(ctx, podOn("a", "new", "n1", nil), metav1.CreateOptions{})
		require.NoError(t, err)
		synctest.Wait()
		snap := src.Snapshot()
		if snap.Complete {
			t.Fatalf("complete snapshot %v while the cache misses the outage's changes", podNames(snap))
		}

		settle(t, func() bool { return src.Snapshot().Complete })
		assert.Equal(t, []string{"a/keep", "a/new"}, podNames(src.Snapshot()))
		ops, _ := log.snapshot()
		assert.Equal(t, []string{"list", "watch", "list", "watch"}, ops, "a relist before every watch")
	})
}

// Every list the source sends is a consistent read (resourceVersion ""),
// the first one and every relist, whatever the reflector asked for.
func TestNodePodSourceListsConsistently(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "p1", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		for round := 1; round <= 3; round++ {
			settle(t, func() bool { return src.Snapshot().Complete && log.watches() == round })
			w.breakAll()
		}
		_, lists := log.snapshot()
		require.GreaterOrEqual(t, len(lists), 3)
		for i, o := range lists {
			assert.Empty(t, o.ResourceVersion, "list %d: resourceVersion", i)
			assert.Empty(t, o.ResourceVersionMatch, "list %d: resourceVersionMatch", i)
			assert.Equal(t, "spec.nodeName=n1", o.FieldSelector, "list %d: field selector", i)
		}
	})
}

// The API server's watch cache lags: a pod created just before the source
// starts is missing from a list served by that cache (resourceVersion
// "0"). The source never asks for such a list, so its first complete
// snapshot has the pod.
func TestNodePodSourceLaggingWatchCache(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		srv := kubetest.New(kubetest.Options{}, podOn("a", "old", "n1", nil))
		srv.LagWatchCache()
		ctx := context.Background()
		_, err := srv.CoreV1().Pods("a").Create(ctx, podOn("a", "late", "n1", nil), metav1.CreateOptions{})
		require.NoError(t, err)
		cached, err := srv.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		require.NoError(t, err)
		require.Len(t, cached.Items, 1, "the watch cache lags")

		src := kube.NewNodePodSource(srv, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		waitCtx, cancel := context.WithTimeout(ctx, time.Hour) // bubble time
		defer cancel()
		require.True(t, src.WaitForSync(waitCtx))
		snap := src.Snapshot()
		require.True(t, snap.Complete)
		assert.Equal(t, []string{"a/late", "a/old"}, podNames(snap))
	})
}

// WaitForPod waits until the watch delivers a pod a direct listing
// already shows, and by then the cache holds the events before it: a
// pod that ended earlier is no longer running in the snapshot.
func TestNodePodSourceWaitForPod(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		srv := kubetest.New(kubetest.Options{}, podOn("a", "victim", "n1", nil))
		src := kube.NewNodePodSource(srv, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		ctx := context.Background()
		waitCtx, cancel := context.WithTimeout(ctx, time.Hour) // bubble time
		defer cancel()
		require.True(t, src.WaitForSync(waitCtx))
		synctest.Wait() // the watch is running

		srv.HoldWatches()
		ended := podOn("a", "victim", "n1", nil)
		ended.Status.Phase = corev1.PodSucceeded
		_, err := srv.CoreV1().Pods("a").UpdateStatus(ctx, ended, metav1.UpdateOptions{})
		require.NoError(t, err)
		late, err := srv.CoreV1().Pods("a").Create(ctx, podOn("a", "late", "n1", nil), metav1.CreateOptions{})
		require.NoError(t, err)

		short, cancelShort := context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		assert.False(t, src.WaitForPod(short, late), "the watch holds the pod back")
		victim := snapshotPod(t, src, "victim")
		assert.False(t, victim.Released(time.Now()), "nor has the cache the victim's end")

		go srv.ReleaseWatches()
		require.True(t, src.WaitForPod(waitCtx, late))
		victim = snapshotPod(t, src, "victim")
		assert.True(t, victim.Released(time.Now()), "the event before the pod is in")

		other := late.DeepCopy()
		other.UID = "uid-another-pod-of-that-name"
		short, cancelShort = context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		assert.False(t, src.WaitForPod(short, other), "another pod of the name")
	})
}

// A deletion the source learns of only by relisting (the watch was down
// when it happened) still signals OnInactive.
func TestNodePodSourceOnInactiveAfterRelist(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "keep", "n1", nil), podOn("a", "gone", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		inactive := make(chan string, 8)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{
			OnInactive: func(p reservation.Pod) { inactive <- p.Name },
		})
		startSource(t, src)
		settle(t, func() bool { return log.watches() == 1 })
		w.breakAll()
		require.NoError(t, client.CoreV1().Pods("a").Delete(context.Background(), "gone", metav1.DeleteOptions{}))
		settle(t, func() bool { return src.Snapshot().Complete })
		synctest.Wait()
		require.Len(t, inactive, 1)
		assert.Equal(t, "gone", <-inactive)
	})
}

// A pod deleted and created again under the same name while the watch was
// down (a StatefulSet pod) is two pods: the relist signals the old one's
// deletion.
func TestNodePodSourceOnInactiveRecreatedDuringGap(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		client := fake.NewClientset(podOn("a", "web-0", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		inactive := make(chan reservation.Pod, 8)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{
			OnInactive: func(p reservation.Pod) { inactive <- p },
		})
		startSource(t, src)
		settle(t, func() bool { return log.watches() == 1 })
		w.breakAll()
		ctx := context.Background()
		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "web-0", metav1.DeleteOptions{}))
		again := podOn("a", "web-0", "n1", nil)
		again.UID = "uid-web-0-again"
		_, err := client.CoreV1().Pods("a").Create(ctx, again, metav1.CreateOptions{})
		require.NoError(t, err)
		settle(t, func() bool { return src.Snapshot().Complete })
		synctest.Wait()
		require.Len(t, inactive, 1)
		assert.Equal(t, "uid-a-web-0", (<-inactive).UID, "the deleted pod, not its successor")
	})
}

// Against a server that deletes gracefully, as a real one does, a deleted
// pod stays in the snapshot with its deletion deadline until the kubelet's
// final delete; OnInactive fires at both steps.
func TestNodePodSourceGracefulDeletion(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		now := time.Now()
		p := podOn("a", "p", "n1", nil)
		srv := kubetest.New(kubetest.Options{}, p)
		inactive := make(chan reservation.Pod, 8)
		src := kube.NewNodePodSource(srv, "n1", kube.NodePodSourceOptions{
			OnInactive: func(p reservation.Pod) { inactive <- p },
		})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete })
		ctx := context.Background()

		require.NoError(t, srv.CoreV1().Pods("a").Delete(ctx, "p", metav1.DeleteOptions{}))
		synctest.Wait()
		require.Len(t, inactive, 1)
		assert.True(t, (<-inactive).Deleting)
		snap := src.Snapshot()
		require.Len(t, snap.Pods, 1, "a graceful deletion keeps the pod")
		want := now.Add(30 * time.Second).Truncate(time.Second)
		assert.True(t, snap.Pods[0].DeletionDeadline.Equal(want), "deletion deadline: got %v, want %v", snap.Pods[0].DeletionDeadline, want)

		require.NoError(t, kubetest.FinishDeletion(ctx, srv, "a", "p", p.UID))
		synctest.Wait()
		require.Len(t, inactive, 1)
		assert.Equal(t, "p", (<-inactive).Name)
		assert.Empty(t, src.Snapshot().Pods)
	})
}

// The source dates each pod's claim (the scheduled fields of its record)
// with its own clock when it first holds it: a copied record is later than
// the original, the device plugin's runtime identities keep the time, any
// other change restarts it, and one listing dates everything it brings at
// once.
func TestNodePodSourceRecordSeen(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		const gpu = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
		entry := func(start, size uint32) reservation.Allocation {
			return reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: size}}
		}
		withRecord := func(p *corev1.Pod, allocs ...reservation.Allocation) *corev1.Pod {
			p = p.DeepCopy()
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[reservation.AnnotationKey] = reservation.EncodeString(allocs)
			p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}
			return p
		}
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clk := clocktesting.NewFakePassiveClock(t0)
		bound := withRecord(podOn("a", "bound", "n1", nil), entry(0, 1))
		other := withRecord(podOn("a", "other", "n1", nil), entry(1, 1))
		client := fake.NewClientset(bound, other, podOn("a", "plain", "n1", nil))
		w := newWatchBreaker(client)
		log := newOpLog(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{Clock: clk})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete && log.watches() == 1 })
		ctx := context.Background()
		seen := func(name string) time.Time {
			t.Helper()
			for _, p := range src.Snapshot().Pods {
				if p.Name == name {
					return p.RecordSeen
				}
			}
			t.Fatalf("pod %s not listed", name)
			return time.Time{}
		}
		update := func(p *corev1.Pod) {
			t.Helper()
			_, err := client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
			require.NoError(t, err)
			synctest.Wait()
		}
		assert.Equal(t, t0, seen("bound"), "the first listing dates every record at once")
		assert.Equal(t, t0, seen("other"))
		assert.True(t, seen("plain").IsZero(), "a pod without a record has no time")

		// A copy of bound's record, created a second later.
		t1 := t0.Add(time.Second)
		clk.SetTime(t1)
		copied := withRecord(podOn("a", "copy", "n1", nil), entry(0, 1))
		copied.Annotations[kube.BindTimeAnnotation] = "1"
		_, err := client.CoreV1().Pods("a").Create(ctx, copied, metav1.CreateOptions{})
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, t1, seen("copy"))
		set := reservation.Desired(src.Snapshot())
		assert.True(t, set.Authorized, "resolved: %v", set.Verdict())
		_, ok := set.Lookup(string(bound.UID), 0, 0)
		assert.True(t, ok, "the earlier record is active")
		_, ok = set.Lookup(string(copied.UID), 0, 0)
		assert.False(t, ok, "the copy is not")

		// The device plugin records bound's runtime identity: same claim.
		clk.SetTime(t0.Add(2 * time.Second))
		realized := withRecord(bound, entry(0, 1).WithRuntime(reservation.RuntimeIdentity{
			MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 7, ComputeInstanceID: 0}))
		update(realized)
		assert.Equal(t, t0, seen("bound"), "runtime identities keep the time")
		assert.Equal(t, t0, src.View(realized).RecordSeen, "View as Snapshot")
		assert.True(t, src.View(bound).RecordSeen.IsZero(), "a value the cache does not hold is undated")

		// Any other change of the claim restarts it; other changes do not.
		t3 := t0.Add(3 * time.Second)
		clk.SetTime(t3)
		moved := withRecord(copied, entry(2, 1))
		update(moved)
		assert.Equal(t, t3, seen("copy"))
		clk.SetTime(t0.Add(4 * time.Second))
		labelled := moved.DeepCopy()
		labelled.Labels = map[string]string{"x": "y"}
		update(labelled)
		assert.Equal(t, t3, seen("copy"), "not a record change")
		bare := labelled.DeepCopy()
		delete(bare.Annotations, reservation.AnnotationKey)
		update(bare)
		assert.True(t, seen("copy").IsZero())
		t5 := t0.Add(5 * time.Second)
		clk.SetTime(t5)
		update(labelled)
		assert.Equal(t, t5, seen("copy"), "a record that returns is dated anew")

		// What changes during a watch gap is dated by the relist.
		w.breakAll()
		synctest.Wait()
		update(withRecord(other, entry(3, 1)))
		_, err = client.CoreV1().Pods("a").Create(ctx, withRecord(podOn("a", "new", "n1", nil), entry(4, 1)), metav1.CreateOptions{})
		require.NoError(t, err)
		t6 := t0.Add(6 * time.Second)
		clk.SetTime(t6)
		settle(t, func() bool { return src.Snapshot().Complete })
		assert.Equal(t, t0, seen("bound"), "unchanged across the relist")
		assert.Equal(t, t5, seen("copy"))
		assert.Equal(t, t6, seen("other"))
		assert.Equal(t, t6, seen("new"))

		require.NoError(t, client.CoreV1().Pods("a").Delete(ctx, "bound", metav1.DeleteOptions{}))
		synctest.Wait()
		assert.True(t, src.View(realized).RecordSeen.IsZero(), "a deleted pod is forgotten")
	})
}

// The source notes whether a claim arrived with a scheduler's binding:
// only a claim on the pod at the source's first sight of it, when the pod
// then carries PodScheduled=True. A pod created with the node preset and
// a copy of a record the extender wrote before binding reaches the node
// first, but without the condition, and loses to the bound pod.
// snapshotPod returns the named pod of a snapshot of src.
func snapshotPod(t *testing.T, src *kube.NodePodSource, name string) reservation.Pod {
	t.Helper()
	for _, p := range src.Snapshot().Pods {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("pod %s not listed", name)
	return reservation.Pod{}
}

// RecordStarted marks a claim the source first saw on a pod the kubelet
// had already admitted, as after a restart that lost the plugin's
// checkpoint; a claim seen before admission, or changed after it, is not.
func TestNodePodSourceRecordStarted(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		withRecord := func(p *corev1.Pod, start uint32) *corev1.Pod {
			p.Annotations = map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{{
				GPUUUID: "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f", Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}})}
			return p
		}
		admitted := withRecord(podOn("a", "admitted", "n1", nil), 0) // Running
		pending := withRecord(podOn("a", "pending", "n1", nil), 1)
		pending.Status.Phase = corev1.PodPending
		client := fake.NewClientset(admitted, pending)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete })
		view := func(name string) reservation.Pod { t.Helper(); return snapshotPod(t, src, name) }
		update := func(p *corev1.Pod) {
			t.Helper()
			_, err := client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{})
			require.NoError(t, err)
			synctest.Wait()
		}
		assert.True(t, view("admitted").RecordStarted, "a running pod of the first listing")
		assert.False(t, view("pending").RecordStarted, "a pending pod of the first listing")

		pending = pending.DeepCopy()
		pending.Status.Phase = corev1.PodRunning
		update(pending)
		assert.False(t, view("pending").RecordStarted, "a claim seen before admission")

		admitted = withRecord(admitted.DeepCopy(), 2)
		update(admitted)
		assert.False(t, view("admitted").RecordStarted, "a claim changed on a pod the source holds")
	})
}

func TestNodePodSourceRecordScheduled(t *testing.T) {
	informerTest(t, func(t *testing.T) {
		const gpu = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
		entry := func(start uint32) reservation.Allocation {
			return reservation.Allocation{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}
		}
		withRecord := func(p *corev1.Pod, a reservation.Allocation) *corev1.Pod {
			p = p.DeepCopy()
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[reservation.AnnotationKey] = reservation.EncodeString([]reservation.Allocation{a})
			p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}
			return p
		}
		// bound is what the API server's pods/binding does: it sets the
		// node and the PodScheduled condition in one update.
		bound := func(p *corev1.Pod) *corev1.Pod {
			p = p.DeepCopy()
			p.Spec.NodeName = "n1"
			if p.Spec.SchedulerName == "" {
				p.Spec.SchedulerName = "dynmig-scheduler"
			}
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
			return p
		}
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clk := clocktesting.NewFakePassiveClock(t0)
		running := bound(withRecord(podOn("a", "running", "", nil), entry(0)))
		unadmitted := withRecord(podOn("a", "unadmitted", "n1", nil), entry(1))
		idle := bound(podOn("a", "idle", "", nil))
		// Bound by the cluster's default scheduler, which keeps whatever
		// record the pod's creator wrote.
		other := withRecord(podOn("a", "other", "", nil), entry(3))
		other.Spec.SchedulerName = "default-scheduler"
		other = bound(other)
		client := fake.NewClientset(running, unadmitted, idle, other)
		breaker := newWatchBreaker(client)
		src := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{Clock: clk, SchedulerNames: []string{"dynmig-scheduler"}})
		startSource(t, src)
		settle(t, func() bool { return src.Snapshot().Complete })
		ctx := context.Background()
		view := func(name string) reservation.Pod { t.Helper(); return snapshotPod(t, src, name) }
		write := func(p *corev1.Pod, create bool) {
			t.Helper()
			var err error
			if create {
				_, err = client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
			} else {
				_, err = client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
			}
			require.NoError(t, err)
			synctest.Wait()
		}
		assert.True(t, view("running").RecordScheduled, "a bound pod of the first listing")
		assert.False(t, view("unadmitted").RecordScheduled, "a pod without PodScheduled")
		assert.False(t, view("idle").RecordScheduled, "a pod without a record")
		assert.False(t, view("other").RecordScheduled, "a pod another scheduler bound")

		// The extender writes w's record, then a forger creates x with the
		// node preset and a copy, then the extender binds w.
		clk.SetTime(t0.Add(time.Second))
		w := withRecord(podOn("a", "w", "", nil), entry(2))
		write(w, true)
		x := withRecord(podOn("a", "x", "n1", nil), entry(2))
		x.Status.Phase = corev1.PodPending // the API server clears a created pod's status
		write(x, true)
		clk.SetTime(t0.Add(2 * time.Second))
		write(bound(w), false)
		assert.False(t, view("x").RecordScheduled)
		assert.True(t, view("w").RecordScheduled)
		assert.True(t, view("x").RecordSeen.Before(view("w").RecordSeen), "the forged copy is seen first")
		set := reservation.Desired(src.Snapshot())
		_, ok := set.Lookup(string(w.UID), 0, 0)
		assert.True(t, ok, "the bound pod's record is active: %v", set.Verdict())
		_, ok = set.Lookup(string(x.UID), 0, 0)
		assert.False(t, ok, "the forged copy is not")
		assert.True(t, set.Authorized, "resolved: %v", set.Verdict())

		// The kubelet's status write does not make x's claim scheduled.
		admitted := x.DeepCopy()
		admitted.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		write(admitted, false)
		assert.False(t, view("x").RecordScheduled, "the claim was first seen without the condition")
		assert.True(t, src.View(admitted).RecordSeen.Equal(view("x").RecordSeen), "View as Snapshot")

		// A record copied into a bound pod the node already holds is a
		// changed claim, never scheduled.
		write(withRecord(idle, entry(0)), false)
		assert.False(t, view("idle").RecordScheduled, "a claim added after the pod arrived")

		// Runtime identities keep the flag.
		realized := withRecord(bound(w), entry(2).WithRuntime(reservation.RuntimeIdentity{
			MIGUUID: "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", GPUInstanceID: 7, ComputeInstanceID: 0}))
		write(realized, false)
		assert.True(t, view("w").RecordScheduled, "runtime identities keep the flag")
		assert.True(t, src.View(realized).RecordScheduled, "View as Snapshot")
		assert.False(t, src.View(bound(w)).RecordScheduled, "a value the cache does not hold is unknown")

		// A relist judges the pods it brings by what it shows, and keeps
		// what the source already held.
		breaker.breakAll()
		synctest.Wait()
		write(bound(withRecord(podOn("a", "gap-bound", "", nil), entry(3))), true)
		write(withRecord(podOn("a", "gap-preset", "n1", nil), entry(3)), true)
		settle(t, func() bool { return src.Snapshot().Complete })
		assert.True(t, view("gap-bound").RecordScheduled)
		assert.False(t, view("gap-preset").RecordScheduled)
		assert.True(t, view("w").RecordScheduled, "kept across the relist")
		assert.False(t, view("x").RecordScheduled, "kept across the relist")
	})
}
