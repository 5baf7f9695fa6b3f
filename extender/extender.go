package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// DefaultLockTimeout is how long a node stays locked by an unrealized pod
// before the claim is reported as stale.
const DefaultLockTimeout = 2 * time.Minute

// Options configures an [Extender]. The zero value works.
type Options struct {
	// Ledger options: placement policy, search bound, score mode.
	Ledger placement.LedgerOptions
	// LockTimeout is how long a bound but unrealized MIG pod keeps its
	// node to itself unconditionally; 0 means [DefaultLockTimeout]. After
	// it the claim is reported (an event on the pod, the
	// dynmig_scheduler_stale_claims_total counter) and blocks only pods
	// the device plugin could not tell apart from it.
	LockTimeout time.Duration
	// Resource is the device plugin's extended resource; empty means
	// kube.ResourceGPU. Its container limits are the pods' device counts
	// ([kube.ParseRequestFor]) and decide which reservation entries count
	// (the trust rule); the memory resources keep their names.
	Resource corev1.ResourceName
	// SkipFreshNodeRead turns off the consistent listing of a node's pods
	// that Bind applies to the view before reserving on the node (see
	// "High availability" in the package documentation). Without it a
	// Bind decides on what the informers delivered so far, which misses
	// another scheduler's recent writes; only a single extender that
	// never shares its nodes with a previous leader may turn it off.
	SkipFreshNodeRead bool
	// Clock stamps bind times, ages locks and decides deletion deadlines;
	// nil is the real clock.
	Clock clock.PassiveClock
	// Logger; nil discards.
	Logger *slog.Logger
}

// Extender answers scheduler-extender calls for MIG pods.
type Extender struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	view    *kube.SchedulerView
	opts    Options
	log     *slog.Logger
	stale   prometheus.Counter
	events  *kube.Events
	running atomic.Bool

	binds    kube.NodeBinds // the MIG pod a Bind call is binding to each node now
	mu       sync.Mutex
	inflight map[string]bool // UIDs of pods a Bind call is binding now
	// UIDs whose stale claim was reported, while the view still holds
	// them unrealized (pruned by prune).
	reported map[string]bool
}

var (
	// ErrNodeLocked: Bind refused a MIG pod because the node still waits
	// for the device plugin to realize another bound pod, or another Bind
	// call is binding a MIG pod to it (see the package documentation).
	ErrNodeLocked = errors.New("extender: node is locked by an unrealized MIG pod")
	// ErrNotSynced: the extender's informers have not applied their first
	// listing, or Run is not running; nothing is decided from a partial
	// view.
	ErrNotSynced = errors.New("extender: pod and node view not synced")
	// ErrBindInProgress: Bind was called again for a pod whose earlier
	// Bind call is still running; the earlier call keeps its claim.
	ErrBindInProgress = kube.ErrBindInProgress
	// ErrNoMIGGPUs: the node publishes no MIG GPUs: it has no
	// hami.io/node-nvidia-register annotation (no dynmig device plugin
	// registered it), or the annotation lists no usable MIG GPU. Filter
	// gives it as the node's failure reason, and Bind wraps it.
	ErrNoMIGGPUs = errors.New("extender: node publishes no MIG GPUs")
	// ErrForeignRecord: Bind refused a pod that asks for no MIG device but
	// carries a hami.io/vgpu-mig-allocations record. Only the extender
	// writes that record; binding such a pod would present its creator's
	// record as this scheduler's (the device plugin believes a record that
	// arrived with this scheduler's binding over an overlapping one).
	ErrForeignRecord = errors.New("extender: pod not asking for MIG carries a reservation record")
	// ErrNotOptedIn: the pod requests the device plugin's resource without
	// opting in to MIG (hami.io/vgpu-mode: mig), and the node runs dynmig's
	// device plugin, which serves that resource only as MIG devices
	// reserved by this extender. Filter fails such nodes for good and Bind
	// refuses them, rather than bind a pod the plugin could never admit
	// without a record.
	ErrNotOptedIn = errors.New("extender: pod requests MIG devices without opting in to MIG")
)

// New returns an extender over client. It reads nodes and pods through
// shared informers of its own, which run while [Extender.Run] does.
func New(client kubernetes.Interface, opts Options) *Extender {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Resource == "" {
		opts.Resource = kube.ResourceGPU
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	view := kube.NewSchedulerView(placement.NewLedger(opts.Ledger),
		kube.SchedulerViewOptions{Resource: opts.Resource, Clock: opts.Clock, Logger: log})
	factory := informers.NewSharedInformerFactory(client, 0)
	// Registering before the factory starts cannot fail.
	_ = view.Register(factory)
	return &Extender{
		client: client, factory: factory, view: view, opts: opts, log: log,
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "dynmig_scheduler_stale_claims_total",
			Help: "Bound MIG pods not realized within the lock timeout, reported once each."}),
		inflight: map[string]bool{}, reported: map[string]bool{},
		events: kube.NewEvents(client, EventComponent),
	}
}

// Ledger returns the extender's ledger, for inspection.
func (e *Extender) Ledger() *placement.Ledger { return e.view.Ledger() }

// View returns the extender's view of nodes and pods, for inspection.
func (e *Extender) View() *kube.SchedulerView { return e.view }

// Collector returns the extender's metrics, for registration.
func (e *Extender) Collector() prometheus.Collector { return e.stale }

// Run runs the extender's informers and its event recorder until ctx is
// done, then stops them, waits for their goroutines and returns ctx's
// error. Calls answer [ErrNotSynced] until the first listings are applied.
func (e *Extender) Run(ctx context.Context) error {
	recording := e.events.Start(ctx)
	e.factory.Start(ctx.Done())
	e.running.Store(true)
	<-ctx.Done()
	e.running.Store(false)
	e.factory.Shutdown()
	recording()
	return ctx.Err()
}

func (e *Extender) synced() error {
	if !e.running.Load() || !e.view.HasSynced() {
		return ErrNotSynced
	}
	e.view.Refresh()
	e.prune()
	return nil
}

// prune forgets the reported claims the view no longer holds unrealized
// (the pod was realized, released, deleted or its bind forgotten), so
// that reported stays as small as the set of stale claims.
func (e *Extender) prune() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for uid := range e.reported {
		if !e.view.Unrealized(uid) {
			delete(e.reported, uid)
		}
	}
}

// parse reads the pod's MIG request with the extender's resource.
func (e *Extender) parse(pod *corev1.Pod) (placement.Request, error) {
	return kube.ParseRequestFor(pod, e.opts.Resource)
}

// notOptedIn returns an error wrapping [ErrNotOptedIn] when pod requests
// the device plugin's resource without opting in to MIG and node runs
// dynmig's device plugin (it has a registration), [ErrNotSynced] when the
// view cannot tell yet, and nil otherwise.
func (e *Extender) notOptedIn(pod *corev1.Pod, node string) error {
	if !slices.ContainsFunc(kube.DeviceRequests(pod, e.resource()), func(n int) bool { return n > 0 }) {
		return nil
	}
	if err := e.synced(); err != nil {
		return err
	}
	if gpus, annotated := e.view.RegisteredGPUs(node); gpus == 0 && !annotated {
		return nil
	}
	return fmt.Errorf("%w: pod %s/%s requests %s on node %s, whose device plugin serves it only as MIG devices; annotate the pod %s: %s",
		ErrNotOptedIn, pod.Namespace, pod.Name, e.resource(), node, kube.VGPUModeAnnotation, kube.VGPUModeMIG)
}

// resource is the device plugin's extended resource.
func (e *Extender) resource() corev1.ResourceName {
	if e.opts.Resource == "" {
		return kube.ResourceGPU
	}
	return e.opts.Resource
}

// noMIG returns an error wrapping [ErrNoMIGGPUs] when the view knows the
// node but it publishes no MIG GPUs, and nil otherwise.
func (e *Extender) noMIG(node string) error {
	gpus, annotated := e.view.RegisteredGPUs(node)
	if gpus > 0 {
		return nil
	}
	if _, known := e.view.Ledger().Node(node); !known {
		return nil // the ledger says so: placement.ErrUnknownNode
	}
	if !annotated {
		return fmt.Errorf("%w: node %s has no %s annotation (no MIG device plugin registered it)", ErrNoMIGGPUs, node, capability.NodeRegisterAnnotation)
	}
	return fmt.Errorf("%w: the %s annotation of node %s lists no usable MIG GPU", ErrNoMIGGPUs, capability.NodeRegisterAnnotation, node)
}

// Sync waits until the extender's view reflects the API server as listed
// now: every pod and node at its current resourceVersion, and no pod the
// listing lacks. Filter and Bind never need it (they decide on the view
// the informers keep); callers that must read their own writes do.
func (e *Extender) Sync(ctx context.Context) error {
	for {
		nodes, err := e.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("extender: list nodes: %w", err)
		}
		pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("extender: list pods: %w", err)
		}
		ok, changed := e.view.Reflects(pods.Items, nodes.Items)
		var retry <-chan time.Time
		if ok {
			if e.synced() == nil {
				return nil
			}
			// Applied, but the informers have not declared their
			// first listing synced yet, or Run has not started.
			retry = time.After(time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-retry:
		}
	}
}

// Filter keeps the nodes where the pod's MIG request fits now. Pods that
// do not opt in to MIG pass every node.
func (e *Extender) Filter(ctx context.Context, args Args) FilterResult {
	names := args.names()
	req, err := e.parse(args.Pod)
	if errors.Is(err, kube.ErrNotMIG) || (err == nil && req.DeviceCount() == 0) {
		return e.filterPlain(args, names)
	}
	if err != nil {
		// A malformed request fits no node, and retrying cannot help.
		res := FilterResult{NodeNames: &[]string{}, FailedAndUnresolvableNodes: map[string]string{}}
		for _, name := range names {
			res.FailedAndUnresolvableNodes[name] = err.Error()
		}
		if args.Nodes != nil {
			res.Nodes = &corev1.NodeList{}
		}
		return res
	}
	if err := e.synced(); err != nil {
		return FilterResult{Error: err.Error()}
	}
	res := FilterResult{FailedNodes: map[string]string{}}
	kept := make([]string, 0, len(names)) // one allocation, not one per doubling
	for _, name := range names {
		if err := e.noMIG(name); err != nil {
			res.FailedNodes[name] = err.Error()
			continue
		}
		if who := e.blocker(ctx, name, string(args.Pod.UID), &req); who != "" {
			res.FailedNodes[name] = "waiting for the device plugin to realize " + who
			continue
		}
		if _, err := e.view.Ledger().Evaluate(name, &req); err != nil {
			res.FailedNodes[name] = err.Error()
			continue
		}
		kept = append(kept, name)
	}
	res.NodeNames = &kept
	if args.Nodes != nil {
		res.Nodes = &corev1.NodeList{}
		for _, n := range args.Nodes.Items {
			if _, failed := res.FailedNodes[n.Name]; !failed {
				res.Nodes.Items = append(res.Nodes.Items, n)
			}
		}
	}
	return res
}

// filterPlain filters a pod that asks for no MIG device: every node
// passes, but for the nodes that refuse it for good because it requests
// the device plugin's resource without opting in ([ErrNotOptedIn]).
func (e *Extender) filterPlain(args Args, names []string) FilterResult {
	res := FilterResult{NodeNames: &names, Nodes: args.Nodes}
	if !slices.ContainsFunc(kube.DeviceRequests(args.Pod, e.resource()), func(n int) bool { return n > 0 }) {
		return res
	}
	if err := e.synced(); err != nil {
		return FilterResult{Error: err.Error()}
	}
	kept := make([]string, 0, len(names)) // one allocation, not one per doubling
	for _, name := range names {
		if err := e.notOptedIn(args.Pod, name); err != nil {
			if res.FailedAndUnresolvableNodes == nil {
				res.FailedAndUnresolvableNodes = map[string]string{}
			}
			res.FailedAndUnresolvableNodes[name] = err.Error()
			continue
		}
		kept = append(kept, name)
	}
	res.NodeNames = &kept
	if args.Nodes != nil {
		res.Nodes = &corev1.NodeList{}
		for _, n := range args.Nodes.Items {
			if _, failed := res.FailedAndUnresolvableNodes[n.Name]; !failed {
				res.Nodes.Items = append(res.Nodes.Items, n)
			}
		}
	}
	return res
}

// blocker returns the pod that keeps the pod uid with request req off
// node ([kube.NodeBinds.Blocker]), or "". A stale claim is reported once.
func (e *Extender) blocker(ctx context.Context, node, uid string, req *placement.Request) string {
	stale := func(c kube.NodeClaim) { e.reportStale(ctx, node, c) }
	if h, ok := e.binds.Blocker(node, uid, req, e.view.Claims(node), e.opts.Clock.Now(), e.opts.LockTimeout, stale); ok {
		return h.String()
	}
	return ""
}

// reportStale reports a claim past the lock timeout once: a warning event
// on the pod and the stale-claims counter.
func (e *Extender) reportStale(ctx context.Context, node string, c kube.NodeClaim) {
	e.mu.Lock()
	done := e.reported[c.Pod.UID]
	e.reported[c.Pod.UID] = true
	e.mu.Unlock()
	if done {
		return
	}
	e.stale.Inc()
	msg := fmt.Sprintf("MIG reservation on node %s not realized within %v; it blocks only pods the device plugin cannot tell apart from it", node, e.opts.LockTimeout)
	e.log.Warn("stale node claim", "pod", c.Pod.String(), "node", node, "since", c.Since)
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: types.UID(c.Pod.UID)}
	e.events.Eventf(ref, nil, corev1.EventTypeWarning, StaleClaimReason, StaleClaimAction, "%s", msg)
}

// StaleClaimReason is the reason of the event recorded on a pod whose
// reservation was not realized within the lock timeout.
const StaleClaimReason = "MIGReservationNotRealized"

// StaleClaimAction is that event's action.
const StaleClaimAction = "WaitForRealization"

// EventComponent is the reporting controller of the extender's events.
const EventComponent = "dynmig-scheduler-extender"

// claimNode claims node for binding pod uid and returns the release
// function. It fails with [ErrBindInProgress] when a Bind of the same pod
// is running (whose claim it leaves alone) and [ErrNodeLocked] when
// another pod holds the node.
func (e *Extender) claimNode(ctx context.Context, node, uid string, req *placement.Request) (release func(), err error) {
	e.mu.Lock()
	if e.inflight[uid] {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: pod %s", ErrBindInProgress, uid)
	}
	// uid is not in flight, so it holds no node: Claim refuses only
	// another pod.
	if who, ok := e.binds.Claim(node, uid); !ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: node %s is binding pod %s", ErrNodeLocked, node, who)
	}
	e.inflight[uid] = true
	e.mu.Unlock()
	release = func() {
		e.binds.Release(node, uid)
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.inflight, uid)
	}
	if !e.opts.SkipFreshNodeRead {
		// Under the node claim: no other Bind of this extender changes
		// the node's pods until the reservation is recorded.
		if err := e.readNode(ctx, node); err != nil {
			release()
			return nil, fmt.Errorf("extender: read the pods of node %s: %w", node, err)
		}
	}
	if who := e.blocker(ctx, node, uid, req); who != "" {
		release()
		return nil, fmt.Errorf("%w: node %s waits for the device plugin to realize %s", ErrNodeLocked, node, who)
	}
	return release, nil
}

// readNode applies a consistent listing of the pods bound to node to the
// view, so that a Bind counts every write the API server held when it
// began, delivered by the informer or not (see "High availability" in the
// package documentation).
func (e *Extender) readNode(ctx context.Context, node string) error {
	return e.view.ObservePods(ctx, func(ctx context.Context) ([]corev1.Pod, error) {
		// resourceVersion unset: a consistent read, served as new as
		// the API server's storage.
		list, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
		if err != nil {
			return nil, err
		}
		// Only the node's pods are needed, should the selector be
		// ignored (as by client-go's fake clientset).
		return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != node }), nil
	})
}

// Prioritize scores each node with the ledger's node score, scaled to
// 0..[MaxExtenderPriority]. Nodes where the pod does not fit score 0.
func (e *Extender) Prioritize(ctx context.Context, args Args) ([]HostPriority, error) {
	names := args.names()
	out := make([]HostPriority, len(names))
	req, err := e.parse(args.Pod)
	for i, name := range names {
		out[i] = HostPriority{Host: name}
	}
	if errors.Is(err, kube.ErrNotMIG) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if err := e.synced(); err != nil {
		return nil, err
	}
	for i, name := range names {
		if score, err := e.view.Ledger().Evaluate(name, &req); err == nil {
			out[i].Score = score * MaxExtenderPriority / placement.MaxNodeScore
		}
	}
	return out, nil
}

// Bind reserves the pod's placements on the node against the current
// view and binds it with its allocation record in one write. See the package
// documentation for what happens on each failure.
func (e *Extender) Bind(ctx context.Context, args BindingArgs) error {
	pod, err := e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("extender: get pod %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return fmt.Errorf("extender: pod %s/%s has UID %s, not %s", pod.Namespace, pod.Name, pod.UID, args.PodUID)
	}
	if pod.Spec.NodeName != "" {
		// A retried call after a bind that succeeded: nothing to do.
		if pod.Spec.NodeName == args.Node {
			return nil
		}
		return fmt.Errorf("extender: pod %s/%s is already bound to %s", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	req, err := e.parse(pod)
	if errors.Is(err, kube.ErrNotMIG) || (err == nil && req.DeviceCount() == 0) {
		if _, ok := pod.Annotations[reservation.AnnotationKey]; ok {
			return fmt.Errorf("%w: pod %s/%s", ErrForeignRecord, pod.Namespace, pod.Name)
		}
		if err := e.notOptedIn(pod, args.Node); err != nil {
			return err
		}
		// The version read, which carries no record: a record added
		// since makes the binding fail.
		return e.bind(ctx, pod, args.Node, nil)
	}
	if err != nil {
		return err
	}
	if err := e.synced(); err != nil {
		return err
	}
	if err := e.noMIG(args.Node); err != nil {
		return err
	}
	release, err := e.claimNode(ctx, args.Node, string(pod.UID), &req)
	if err != nil {
		return err
	}
	defer release()
	as, err := e.view.Reserve(args.Node, pod, &req)
	if err != nil {
		return fmt.Errorf("extender: reserve pod %s/%s on %s: %w", pod.Namespace, pod.Name, args.Node, err)
	}
	value := reservation.EncodeString(schedule.Allocations(as))
	// One write binds the pod and sets its record, on the version read.
	err = e.bind(ctx, pod, args.Node, map[string]string{
		reservation.AnnotationKey: value,
		kube.BindTimeAnnotation:   strconv.FormatInt(e.opts.Clock.Now().Unix(), 10),
	})
	if err != nil {
		return e.bindFailed(ctx, pod, args.Node, value, as, err)
	}
	// Recorded before the node claim is released: the pod holds the
	// node's lock until the device plugin realized it.
	e.view.Bound(pod, args.Node, as)
	e.log.Info("bound MIG pod", "pod", pod.Namespace+"/"+pod.Name, "node", args.Node, "reservation", value)
	return nil
}

// CleanupTimeout bounds the reads and writes with which Bind settles a
// failed binding call. They run even when the call's context is done (a
// timeout is the likeliest failure), so a Bind may return up to
// CleanupTimeout after its context ended.
const CleanupTimeout = 5 * time.Second

// bindFailed settles a binding call that failed with berr for pod (the
// version read) and the record value. The binding wrote nothing, or, when
// it failed after the API server applied it (a timeout after the commit),
// everything: so the pod is read again, for up to [CleanupTimeout] even
// when the call's context is done. Bound to node with the same UID and the
// same placements, it is recorded as bound and the bind succeeds;
// otherwise, or when it cannot be read, the reservation is forgotten (a
// bound pod counts again as soon as the informer, or the next Bind's
// listing of the node, shows it).
func (e *Extender) bindFailed(ctx context.Context, pod *corev1.Pod, node, value string, as []placement.Assignment, berr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	uid, ref := string(pod.UID), pod.Namespace+"/"+pod.Name
	cur, err := e.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err == nil && cur.UID == pod.UID && cur.Spec.NodeName == node && reservation.SameScheduled(cur.Annotations[reservation.AnnotationKey], value) {
		e.view.Bound(pod, node, as)
		e.log.Warn("bound MIG pod although the binding call failed", "pod", ref, "node", node, "reservation", value, "err", berr)
		return nil
	}
	e.view.Forget(uid)
	if err != nil && !apierrors.IsNotFound(err) {
		e.log.Error("bind failed and the pod could not be read again: whether it is bound is unknown", "pod", ref, "node", node, "err", err)
		return errors.Join(berr, fmt.Errorf("extender: read the pod again: %w", err))
	}
	return berr
}

// bind binds pod to node with one pods/binding call whose metadata carries
// the pod's UID and resourceVersion as preconditions (the binding fails
// with a Conflict when the pod changed since it was read, or is another
// pod of the same name) and annotations, which the API server merges into
// the pod in the same write that sets spec.nodeName and the PodScheduled
// condition.
func (e *Extender) bind(ctx context.Context, pod *corev1.Pod, node string, annotations map[string]string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, Annotations: annotations},
		Target: corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("extender: bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

// Handler serves the extender over HTTP: POST /filter, /prioritize and
// /bind with the kube-scheduler extender's JSON bodies.
func (e *Extender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", func(w http.ResponseWriter, r *http.Request) {
		var args Args
		if !decode(w, r, &args) {
			return
		}
		if args.Pod == nil {
			reply(w, FilterResult{Error: "no pod"})
			return
		}
		reply(w, e.Filter(r.Context(), args))
	})
	mux.HandleFunc("POST /prioritize", func(w http.ResponseWriter, r *http.Request) {
		var args Args
		if !decode(w, r, &args) {
			return
		}
		if args.Pod == nil {
			http.Error(w, "no pod", http.StatusBadRequest)
			return
		}
		list, err := e.Prioritize(r.Context(), args)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, list)
	})
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		var args BindingArgs
		if !decode(w, r, &args) {
			return
		}
		var res BindingResult
		if err := e.Bind(r.Context(), args); err != nil {
			res.Error = err.Error()
		}
		reply(w, res)
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(v); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
