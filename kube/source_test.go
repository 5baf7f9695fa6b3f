package kube_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/kube"
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

		// Break the watch and refuse to re-establish it.
		failWatch.Store(true)
		w.breakAll()
		settle(t, func() bool { return apierrors.IsTooManyRequests(src.Err()) })
		assert.False(t, src.Snapshot().Complete)
		assert.Equal(t, []string{"a/p1"}, podNames(src.Snapshot()), "the stale cache is still readable")

		failWatch.Store(false)
		settle(t, func() bool { return src.Snapshot().Complete })
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
