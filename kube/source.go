package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/reservation"
)

// Pod source sentinels, returned by [NodePodSource.Err].
var (
	// ErrNotSynced: the source has not completed its first full listing.
	ErrNotSynced = errors.New("kube: pod cache not synced")
	// ErrNotRunning: the source is not running (Run not called yet, or
	// its ctx is done), so its cache no longer follows the API server.
	ErrNotRunning = errors.New("kube: pod source not running")
	// ErrListing: the last list or watch call against the API server
	// failed; the cache may be missing changes until a call succeeds.
	ErrListing = errors.New("kube: pod listing failed")
	// ErrAlreadyRunning: Run was called a second time.
	ErrAlreadyRunning = errors.New("kube: pod source already started")
)

// ListingError is the error [NodePodSource.Err] returns while the API
// server cannot be listed or watched. It matches [ErrListing] and the API
// error with errors.Is and errors.As.
type ListingError struct {
	Node string // the node whose pods are listed
	Op   string // "list" or "watch"
	Err  error  // the client-go error
}

func (e *ListingError) Error() string {
	return fmt.Sprintf("kube: %s pods of node %q: %v", e.Op, e.Node, e.Err)
}

// Unwrap returns [ErrListing] and the API error.
func (e *ListingError) Unwrap() []error { return []error{ErrListing, e.Err} }

// NodePodSourceOptions configures a [NodePodSource]. The zero value works.
type NodePodSourceOptions struct {
	// Logger receives state changes (synced, listing failed, recovered);
	// nil discards them.
	Logger *slog.Logger
	// OnInactive, when set, is called when a pod of the node stops being
	// active or is released: it is deleted, gets a deletion timestamp,
	// reaches Succeeded or Failed, or, while deleting, reports every
	// container terminated. A deleting pod whose grace period merely runs
	// out produces no event: the periodic pass reclaims it. It runs on the
	// informer's notification goroutine and must not block;
	// [ReconcileRunner.Trigger] is such a function.
	OnInactive func(reservation.Pod)
	// Resource is the extended resource whose limits give
	// reservation.Pod.DeviceRequests; "" means [ResourceGPU].
	Resource corev1.ResourceName
	// Clock stamps snapshots (reservation.Snapshot.Now), against which
	// deletion deadlines are compared; nil is the real clock.
	Clock clock.PassiveClock
}

// NodePodSource is an informer-backed cache of the pods scheduled to one
// node (field selector spec.nodeName=<node>), for the device plugin.
//
// Its [NodePodSource.Snapshot] is Complete only while the source is
// running, its first full listing has been applied, and the last list or
// watch call succeeded: an unsynced cache, a failed listing (including a
// failed page of a paginated one) or a stopped source yields an incomplete
// snapshot, which never authorises destructive reconciliation.
//
// Goroutines: [NodePodSource.Run] starts the informer's goroutines and does
// not return until ctx is done and every one of them has stopped. No other
// method starts goroutines. All methods are safe for concurrent use.
type NodePodSource struct {
	node     string
	resource corev1.ResourceName
	clock    clock.PassiveClock
	log      *slog.Logger
	lw       *trackingListWatch
	informer cache.SharedIndexInformer
	started  atomic.Bool
	running  atomic.Bool
}

// NewNodePodSource returns a source for the pods of node, listed and
// watched through client. It does nothing until [NodePodSource.Run].
func NewNodePodSource(client kubernetes.Interface, node string, opts NodePodSourceOptions) *NodePodSource {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Resource == "" {
		opts.Resource = ResourceGPU
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	lw := &trackingListWatch{client: client, node: node, log: log}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{})
	s := &NodePodSource{node: node, resource: opts.Resource, clock: opts.Clock, log: log, lw: lw, informer: inf}
	if opts.OnInactive != nil {
		// Registration before Run cannot fail.
		_, _ = inf.AddEventHandler(s.inactiveHandler(opts.OnInactive))
	}
	return s
}

// Node returns the node name the source lists.
func (s *NodePodSource) Node() string { return s.node }

// Run runs the informer until ctx is done, then waits for its goroutines
// to stop and returns ctx's error. A second call returns
// [ErrAlreadyRunning] at once.
func (s *NodePodSource) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	s.running.Store(true)
	defer s.running.Store(false)
	s.log.Debug("pod source starting", "node", s.node)
	s.informer.RunWithContext(ctx)
	s.log.Debug("pod source stopped", "node", s.node)
	return ctx.Err()
}

// WaitForSync blocks until the first full listing has been applied or ctx
// is done, and reports whether the cache synced.
func (s *NodePodSource) WaitForSync(ctx context.Context) bool {
	select {
	case <-s.informer.HasSyncedChecker().Done():
		return true
	case <-ctx.Done():
		return s.informer.HasSynced()
	}
}

// Err returns nil when a snapshot taken now would be complete, and
// otherwise why not: [ErrNotRunning], [ErrNotSynced], or a [*ListingError].
func (s *NodePodSource) Err() error {
	if !s.running.Load() {
		return ErrNotRunning
	}
	if err := s.lw.lastError(); err != nil {
		return err
	}
	if !s.informer.HasSynced() {
		return ErrNotSynced
	}
	return nil
}

// Snapshot returns the cached pods of the node, ordered by namespace and
// name, as a reservation snapshot; see the type's documentation for when
// it is Complete.
func (s *NodePodSource) Snapshot() reservation.Snapshot {
	// Read health before the listing so a failure that begins while we
	// copy can only make the snapshot incomplete, never the reverse.
	complete := s.Err() == nil
	now := s.clock.Now()
	return SnapshotFor(s.Pods(), complete, now, s.resource)
}

// View converts one of the node's pods as the source's snapshots do, for
// the resource the source was configured with.
func (s *NodePodSource) View(pod *corev1.Pod) reservation.Pod {
	return PodViewFor(pod, s.resource)
}

// Pods returns the cached pods of the node, ordered by namespace and name.
// The pods are shared with the cache and must not be modified.
func (s *NodePodSource) Pods() []*corev1.Pod {
	items := s.informer.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(items))
	for _, it := range items {
		// The field selector already restricts the listing; checking
		// again keeps clients that ignore it (fakes, proxies) honest.
		if p, ok := it.(*corev1.Pod); ok && p.Spec.NodeName == s.node {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return pods
}

// Pod returns the cached pod namespace/name when it is scheduled to the
// node. The pod is shared with the cache and must not be modified.
func (s *NodePodSource) Pod(namespace, name string) (*corev1.Pod, bool) {
	it, ok, err := s.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := it.(*corev1.Pod)
	if !ok || p.Spec.NodeName != s.node {
		return nil, false
	}
	return p, true
}

// trackingListWatch lists and watches the node's pods and remembers
// whether the last call failed. It declares that it does not support
// watch-list streaming so that the reflector always performs a plain
// list, whose outcome this wrapper can observe.
type trackingListWatch struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	mu  sync.Mutex
	err *ListingError // the last call's error, nil after a success
}

var (
	_ cache.ListerWatcherWithContext = (*trackingListWatch)(nil)
	_ cache.ListerWatcher            = (*trackingListWatch)(nil)
)

func (lw *trackingListWatch) options(opts metav1.ListOptions) metav1.ListOptions {
	opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", lw.node).String()
	return opts
}

// ListWithContext lists the node's pods (one page when paginated).
func (lw *trackingListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, lw.options(opts))
	lw.record("list", err)
	return obj, err
}

// WatchWithContext watches the node's pods.
func (lw *trackingListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, lw.options(opts))
	lw.record("watch", err)
	return w, err
}

// List implements the deprecated cache.Lister; the reflector uses
// ListWithContext.
func (lw *trackingListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch implements the deprecated cache.Watcher; the reflector uses
// WatchWithContext.
func (lw *trackingListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported opts out of watch-list streaming.
func (lw *trackingListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *trackingListWatch) record(op string, err error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		// The source is stopping; Err reports ErrNotRunning soon.
	case err != nil:
		if lw.err == nil {
			lw.log.Warn("pod listing failed; snapshots are incomplete", "node", lw.node, "op", op, "err", err)
		}
		lw.err = &ListingError{Node: lw.node, Op: op, Err: err}
	case lw.err != nil:
		lw.log.Info("pod listing recovered", "node", lw.node, "op", op)
		lw.err = nil
	}
}

func (lw *trackingListWatch) lastError() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err == nil {
		return nil
	}
	return lw.err
}

// inactiveHandler calls fn for pods of the node that are deleted, become
// terminal, or become released.
func (s *NodePodSource) inactiveHandler(fn func(reservation.Pod)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			oldPod, ok1 := oldObj.(*corev1.Pod)
			newPod, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 || newPod.Spec.NodeName != s.node {
				return
			}
			now := s.clock.Now()
			oldView, newView := s.View(oldPod), s.View(newPod)
			if !Terminal(oldPod) && Terminal(newPod) || !oldView.Released(now) && newView.Released(now) {
				fn(newView)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == s.node {
				fn(s.View(p))
			}
		},
	}
}
