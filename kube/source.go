package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// ErrStale: the watch that kept the cache current ended (closed by the
	// server, broken, failed or expired) and the consistent listing that
	// follows has not been applied yet; the cache may be missing changes
	// made since.
	ErrStale = errors.New("kube: pod cache awaiting a fresh listing")
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
	// Logger receives state changes (synced, listing failed, recovered,
	// relisting after a watch ended); nil discards them.
	Logger *slog.Logger
	// OnInactive, when set, is called when a pod of the node stops being
	// active or is released: it is deleted, gets a deletion timestamp,
	// reaches Succeeded or Failed, or, while deleting, reports every
	// container terminated; a listing that no longer contains a pod counts
	// as its deletion. A deleting pod whose grace period merely runs out
	// produces no event: the periodic pass reclaims it. It is called on
	// the goroutine of [NodePodSource.Run] after the cache reflects the
	// change, and must not block; [ReconcileRunner.Trigger] is such a
	// function.
	OnInactive func(reservation.Pod)
	// Resource is the extended resource whose limits give
	// reservation.Pod.DeviceRequests; "" means [ResourceGPU].
	Resource corev1.ResourceName
	// Clock stamps snapshots (reservation.Snapshot.Now), against which
	// deletion deadlines are compared; nil is the real clock.
	Clock clock.PassiveClock
	// SchedulerNames are the spec.schedulerName values of the schedulers
	// whose extender writes the reservation records (the profile in
	// deploy/scheduler, "dynmig-scheduler"). Only a pod bound by one of
	// them can have a scheduled record (reservation.Pod.RecordScheduled):
	// any other scheduler binds a pod with whatever record its creator
	// wrote. Empty: no record is scheduled, and conflicts are resolved by
	// first observation alone.
	SchedulerNames []string
	// Observations, when not nil, are first observations of claims kept
	// across restarts (a device plugin's checkpoint, fed by
	// OnObservations): the source starts from them as if it had made them
	// itself, so that a restart dates no claim anew. A listed pod whose
	// claim equals its observation's keeps that time and scheduled mark;
	// one with another claim has a changed claim (dated by the listing,
	// never scheduled); a pod without an observation is judged by the
	// listing as usual.
	Observations map[types.UID]Observation
	// OnObservations, when set, is called with all of the source's
	// observations each time one is made, changes or is dropped (its pod
	// left the node's listing), on the goroutine of [NodePodSource.Run],
	// before the cache reflects the change. It persists them; it must not
	// block for long nor call the source.
	OnObservations func(map[types.UID]Observation)
}

// NodePodSource is a cache of the pods scheduled to one node (field
// selector spec.nodeName=<node>), kept by a client-go reflector, for the
// device plugin.
//
// # Completeness
//
// A [NodePodSource.Snapshot] is Complete exactly when [NodePodSource.Err]
// is nil: the source is running, its last list or watch call succeeded,
// and its cache is the result of a consistent listing updated by the
// events of the one watch that continued that listing, which has not
// ended. Such a cache equals the API server's state at some moment after
// the listing began, and lags it only by the events in flight on that
// watch, or, on a connection that died without closing, until the client
// notices: client-go's HTTP/2 health check (about 45 s without a frame)
// ends such a watch, and with it completeness. In detail:
//
//   - Every list the source issues is a consistent read: resourceVersion
//     "" and no resourceVersionMatch, whatever the reflector asked for.
//     The API server answers it from etcd (a quorum read) or from a watch
//     cache it has first confirmed current; never, as it may answer
//     resourceVersion "0", from a watch cache that lags. A paginated
//     listing counts once its last page is applied.
//   - A watch may only continue a listing: the first watch call after
//     each applied listing starts at that listing's resourceVersion. From
//     the moment a watch ends for any reason (closed by the server on its
//     timeout, a broken connection, an error event, a failed watch call)
//     the snapshot is incomplete, [ErrStale] or a [*ListingError], and
//     every later watch call is answered "resource expired" (410) without
//     reaching the server, so the reflector relists. The snapshot is
//     complete again once that listing has been applied. A watch resumed
//     at an old resourceVersion, which an API server that restarted
//     accepts while its own cache is still stale, therefore never makes a
//     snapshot complete.
//   - Watch-list streaming (sendInitialEvents) is not used: the source
//     declares it unsupported and refuses such a watch, so the reflector
//     lists.
//
// An incomplete snapshot never authorises destructive reconciliation.
//
// # First observations of records
//
// The source dates each pod's reservation claim with its own clock
// (NodePodSourceOptions.Clock): reservation.Pod.RecordSeen, in snapshots
// and views, is when the source first held the pod with the scheduled
// fields of its current hami.io/vgpu-mig-allocations record. Runtime
// identities the device plugin adds later keep the time; any other change
// of the record, or its removal and return, restarts it. Pods of one
// listing that the source did not already hold with the same claim share
// that listing's time: after a restart every pod has the same time, and
// a relist after a watch gap dates what changed during the gap by the
// relist. A pod whose record changed between the cache and the lookup has
// the zero time (unknown). reservation.Desired uses these times to keep
// the earlier of two overlapping records and withhold the later one: a
// scheduler extender never places a pod over slots a pod of the node
// already claims, so a record that appears on the node after an
// overlapping one can only be forged or stale. Nothing a pod's creator
// writes (annotations such as hami.io/bind-time, a preset spec.nodeName,
// the creation timestamp) enters this time; a creator can only make their
// own record later. Records of the first listing after a restart carry no
// history: by time alone, overlapping ones are both untrusted.
//
// The source also notes whether each claim arrived with a scheduler's
// binding: reservation.Pod.RecordScheduled is true when the claim was on
// the pod at the source's first sight of the pod, the pod names one of
// NodePodSourceOptions.SchedulerNames (any other scheduler, such as the
// cluster's default one, binds a pod with whatever record its creator
// wrote) and the pod then carried the PodScheduled=True condition. The API server sets that condition when
// it binds a pod (pods/binding); a pod created with spec.nodeName preset
// has its status cleared on create and gets the condition only when the
// kubelet first writes its status, after admission, and a pod's creator
// cannot write status. A claim added to or changed on a pod the source
// already holds is never scheduled: the extender writes a pod's record in
// the binding itself (the API server copies the Binding's annotations onto
// the pod in the write that binds it), so the claim a bound pod carries
// when the source first sees it is the binder's. reservation.Desired keeps
// a scheduled record over an overlapping one that is not, whatever their
// times, such as a copy in a pod created with the node preset that
// reaches the node first. One gap remains: a copy that the source first
// sees only after the kubelet wrote its status (the source was not
// watching when it was created) carries the condition too, and then the
// times decide. The pods of a listing the source did not already hold,
// as after a restart or a watch gap, are judged by what the listing shows:
// pods the kubelet already runs carry the condition whoever bound them,
// and their times are equal, so a conflict between two of them stays
// unresolved.
//
// Last, reservation.Pod.RecordStarted is true when the source first saw
// the pod, with its claim, only after the kubelet had admitted it
// (Admitted: status only the kubelet writes). The device plugin then may
// have handed it a device at that claim before a restart that lost its
// record, so reservation.Desired no longer lets another record's binding
// outrank it; the times decide, and the pods of one listing tie.
//
// # Deleted pods
//
// A snapshot also lists, for [EndedPodMemory], each of the node's pods
// that the watch reported deleted (or that a relisting no longer holds)
// while its last state was released (reservation.Pod.Released: Succeeded
// or Failed, or deleting with every container terminated or its grace
// period over), with that last state. The kubelet deletes a pod within
// milliseconds of its containers stopping, often before a maintenance
// pass sees the released state; without this a pass would find the pod
// merely absent and keep an instance younger than realize's
// AbsentPodGrace for that long, so a preemptor bound to the freed slots
// would be refused by Allocate. The last state is what the API server
// sent with the deletion, and a pod's UID never returns, so it decides
// exactly as a listing that still held the pod would. A pod deleted while
// not released (its containers may still run) is only absent, as before.
//
// Relisting follows the reflector's backoff: 0.8 to 1.6 s after a watch
// ends while the API server is healthy, growing to at most a minute while
// it keeps failing. Snapshots are therefore incomplete for about a second
// after each watch timeout (the server ends a watch after five to ten
// minutes) and for the length of every API server disruption. On the
// client a relist of n pods costs about as much as n to 2n watch events.
//
// Goroutines: [NodePodSource.Run] runs the reflector and does not return
// until ctx is done and the reflector has stopped; a list call in flight
// at that moment may finish on client-go's paging goroutine shortly after,
// without touching the cache. No other
// method starts goroutines. All methods are safe for concurrent use.
type NodePodSource struct {
	node      string
	resource  corev1.ResourceName
	clock     clock.PassiveClock
	log       *slog.Logger
	lw        *trackingListWatch
	store     *podStore
	ended     endedPods // deleted while released: listed for EndedPodMemory
	reflector *cache.Reflector
	started   atomic.Bool
	running   atomic.Bool
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
	s := &NodePodSource{node: node, resource: opts.Resource, clock: opts.Clock, log: log}
	fresh := newFreshness()
	s.lw = &trackingListWatch{client: client, node: node, log: log, fresh: fresh}
	s.store = newPodStore(fresh, opts.Clock, node, opts.SchedulerNames, opts.Observations, opts.OnObservations)
	if fn := opts.OnInactive; fn != nil {
		s.store.onChange = func(old, cur *corev1.Pod) { s.notifyInactive(fn, old, cur) }
	}
	s.store.onDelete = s.rememberEnded
	s.reflector = cache.NewReflectorWithOptions(s.lw, &corev1.Pod{}, s.store, cache.ReflectorOptions{
		Name:            "kube.NodePodSource/" + node,
		TypeDescription: "*v1.Pod",
	})
	return s
}

// Node returns the node name the source lists.
func (s *NodePodSource) Node() string { return s.node }

// Run runs the reflector until ctx is done, then waits for its goroutines
// to stop and returns ctx's error. A second call returns
// [ErrAlreadyRunning] at once.
func (s *NodePodSource) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	s.running.Store(true)
	defer s.running.Store(false)
	s.log.Debug("pod source starting", "node", s.node)
	s.reflector.RunWithContext(ctx)
	s.log.Debug("pod source stopped", "node", s.node)
	return ctx.Err()
}

// WaitForSync blocks until the first full listing has been applied or ctx
// is done, and reports whether the cache synced. A synced cache may still
// be incomplete later; see the type's documentation.
func (s *NodePodSource) WaitForSync(ctx context.Context) bool {
	select {
	case <-s.store.fresh.synced:
		return true
	case <-ctx.Done():
		return s.store.fresh.hasSynced()
	}
}

// Err returns nil when a snapshot taken now would be complete, and
// otherwise why not: [ErrNotRunning], [ErrNotSynced], a [*ListingError],
// or [ErrStale].
func (s *NodePodSource) Err() error {
	if !s.running.Load() {
		return ErrNotRunning
	}
	if err := s.lw.lastError(); err != nil {
		return err
	}
	return s.store.fresh.err()
}

// Snapshot returns the cached pods of the node, ordered by namespace and
// name, as a reservation snapshot; see the type's documentation for when
// it is Complete.
func (s *NodePodSource) Snapshot() reservation.Snapshot {
	// Read health before the listing so a failure that begins while we
	// copy can only make the snapshot incomplete, never the reverse.
	complete := s.Err() == nil
	now := s.clock.Now()
	pods := s.Pods()
	snap := SnapshotFor(pods, complete, now, s.resource)
	for i, p := range pods {
		setObserved(&snap.Pods[i], s.store.records.at(p))
	}
	snap.Pods = s.ended.appendTo(snap.Pods, pods, now)
	return snap
}

// rememberEnded keeps the last state of one of the node's pods that was
// deleted, for snapshots (see "Deleted pods" in the package
// documentation).
func (s *NodePodSource) rememberEnded(last *corev1.Pod) {
	if last.Spec.NodeName == s.node {
		s.ended.remember(last.UID, PodViewFor(last, s.resource), s.clock.Now())
	}
}

// View converts one of the node's pods as the source's snapshots do, for
// the resource the source was configured with, RecordSeen,
// RecordScheduled and RecordStarted included.
func (s *NodePodSource) View(pod *corev1.Pod) reservation.Pod {
	v := PodViewFor(pod, s.resource)
	setObserved(&v, s.store.records.at(pod))
	return v
}

// setObserved copies the first observation of v's claim into v.
func setObserved(v *reservation.Pod, e recordSeen) {
	v.RecordSeen, v.RecordScheduled, v.RecordStarted = e.at, e.scheduled, e.started
}

// Pods returns the cached pods of the node, ordered by namespace and name.
// The pods are shared with the cache and must not be modified.
func (s *NodePodSource) Pods() []*corev1.Pod {
	items := s.store.pods.List()
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

// WaitForPod blocks until the cache holds pod (the pod of its namespace
// and name with its UID) scheduled to the node, or ctx is done, and
// reports whether the cache holds it.
//
// A pod found by a direct listing may be missing from a cache that lags
// by the events in flight. Once the cache holds a pod bound to the node,
// it also holds every earlier event of the node's pods, so it is at
// least as current as the API server was when the pod was bound: a
// preemptor is bound only after its victims ended, and then the cache
// has their ends.
func (s *NodePodSource) WaitForPod(ctx context.Context, pod *corev1.Pod) bool {
	for {
		changed := s.store.changes.next() // before the look: no change is missed
		if p, ok := s.Pod(pod.Namespace, pod.Name); ok && p.UID == pod.UID {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// Pod returns the cached pod namespace/name when it is scheduled to the
// node. The pod is shared with the cache and must not be modified.
func (s *NodePodSource) Pod(namespace, name string) (*corev1.Pod, bool) {
	it, ok, err := s.store.pods.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := it.(*corev1.Pod)
	if !ok || p.Spec.NodeName != s.node {
		return nil, false
	}
	return p, true
}
