package schedplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "DynMIG"

// DefaultLockTimeout is how long a node stays locked by an unrealized pod
// before the claim is reported as stale (the extender's default).
const DefaultLockTimeout = 2 * time.Minute

// CleanupTimeout bounds the reads and writes with which Unreserve settles
// a failed binding; see "Failure semantics" in the package documentation.
const CleanupTimeout = 5 * time.Second

// StaleClaimReason is the reason of the event recorded on a pod whose
// reservation was not realized within the lock timeout.
const StaleClaimReason = "MIGReservationNotRealized"

// Sentinels; statuses carry them as their error or reason.
var (
	// ErrNotSynced: the view's informers have not applied their first
	// listing; nothing is decided from a partial view.
	ErrNotSynced = errors.New("schedplugin: pod and node view not synced")
	// ErrNodeLocked: the node waits for the device plugin to realize
	// another bound MIG pod, or another MIG pod is being bound to it.
	ErrNodeLocked = errors.New("schedplugin: node is locked by an unrealized MIG pod")
	// ErrNoMIGGPUs: the node publishes no usable MIG GPU.
	ErrNoMIGGPUs = errors.New("schedplugin: node publishes no MIG GPUs")
	// ErrForeignRecord: a pod that asks for no MIG device carries a
	// hami.io/vgpu-mig-allocations record, which only this scheduler
	// writes.
	ErrForeignRecord = errors.New("schedplugin: pod not asking for MIG carries a reservation record")
	// ErrInsufficientDevices: the node's allocatable device count (the
	// device plugin's resource) minus what its pods request is below the
	// pod's request.
	ErrInsufficientDevices = errors.New("schedplugin: insufficient devices")
	// ErrPodChanged: between the scheduling cycle and Bind the pod was
	// replaced, bound, or changed its MIG request; nothing was written.
	ErrPodChanged = errors.New("schedplugin: pod changed while being bound")
	// ErrNeverFits: the pod's MIG request does not fit the node even
	// with every slot free (no profile of the node's GPUs is large
	// enough, its constraints exclude every GPU, or the request needs
	// more slots than the node has); the status is
	// UnschedulableAndUnresolvable, so preemption skips the node.
	ErrNeverFits = errors.New("schedplugin: MIG request cannot fit the node")
	// ErrInvalidArgs is wrapped by every error about the plugin's
	// configuration arguments.
	ErrInvalidArgs = errors.New("schedplugin: invalid plugin arguments")
)

// Options configures a [Plugin]. The zero value works.
type Options struct {
	// Ledger options: placement policy, search bound, score mode.
	Ledger placement.LedgerOptions
	// Resource is the device plugin's extended resource; empty means
	// kube.ResourceGPU.
	Resource corev1.ResourceName
	// LockTimeout is how long a bound but unrealized MIG pod keeps its
	// node to itself; 0 means [DefaultLockTimeout].
	LockTimeout time.Duration
	// SkipFreshNodeRead turns off the consistent listing of the node's
	// pods in Bind (see "High availability" in the package
	// documentation). Only a single scheduler that never follows another
	// may turn it off.
	SkipFreshNodeRead bool
	// Clock stamps bind times, ages locks and, when it has timers
	// (clock.WithDelayedExecution), times the wake at a lock's end; nil
	// is the real clock.
	Clock clock.PassiveClock
	// Logger; nil logs through the scheduler's klog logger.
	Logger *slog.Logger
}

// Args are the plugin's arguments in a KubeSchedulerConfiguration
// (pluginConfig[].args); they override the [Options] given to [Factory].
// Unknown fields are refused.
type Args struct {
	// Resource is [Options.Resource].
	Resource string `json:"resource,omitempty"`
	// LockTimeout is [Options.LockTimeout] as a Go duration ("2m").
	LockTimeout string `json:"lockTimeout,omitempty"`
	// SkipFreshNodeRead is [Options.SkipFreshNodeRead].
	SkipFreshNodeRead bool `json:"skipFreshNodeRead,omitempty"`
}

// Plugin is the kube-scheduler framework plugin; see the package
// documentation.
type Plugin struct {
	handle fwk.Handle
	client kubernetes.Interface
	view   *kube.SchedulerView // sh.view
	opts   Options
	log    *slog.Logger
	pdbs   policylisters.PodDisruptionBudgetLister // nil without an informer factory (victims.go)

	// sh is the state of every DynMIG profile of the scheduler: view,
	// ledger, binds in flight (see "One state per scheduler" in the
	// package documentation).
	sh *shared

	index atomic.Pointer[nodeIndex] // the last node list's positions (nodeIndex)

	hintMu   sync.Mutex
	hintLast any // the last object a queueing hint applied to the view

	wakeMu  sync.Mutex // guards the wake fields (wake.go)
	waking  map[types.UID]wake
	timer   clock.Timer // fires at timerAt; nil when no wake is pending
	timerAt time.Time
	closed  bool
}

var (
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.ReservePlugin     = (*Plugin)(nil)
	_ fwk.BindPlugin        = (*Plugin)(nil)
	_ fwk.PostBindPlugin    = (*Plugin)(nil)
	_ fwk.PostFilterPlugin  = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ io.Closer             = (*Plugin)(nil)
)

// New returns the plugin for the framework handle h. It registers its view
// with h's shared informer factory (the scheduler's own node and pod
// informers), which the scheduler starts.
func New(h fwk.Handle, opts Options) (*Plugin, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Resource == "" {
		opts.Resource = kube.ResourceGPU
	}
	registerMetricsOnce()
	log := opts.Logger
	if log == nil {
		log = slog.New(logr.ToSlogHandler(klog.Background().WithName(Name)))
	}
	sh, err := acquireShared(h, opts, log)
	if err != nil {
		return nil, err
	}
	p := &Plugin{handle: h, client: h.ClientSet(), view: sh.view, opts: opts, log: log, sh: sh,
		waking: map[types.UID]wake{}}
	if f := h.SharedInformerFactory(); f != nil {
		// DefaultPreemption lists the same informer's budgets.
		p.pdbs = f.Policy().V1().PodDisruptionBudgets().Lister()
	}
	return p, nil
}

// Factory returns the plugin factory to register with kube-scheduler
// (app.WithPlugin(Name, Factory(opts))). The profile's [Args], when given,
// override opts.
func Factory(opts Options) frameworkruntime.PluginFactory {
	return func(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		o, err := applyArgs(obj, opts)
		if err != nil {
			return nil, err
		}
		return New(h, o)
	}
}

// applyArgs decodes the profile's arguments over opts.
func applyArgs(obj runtime.Object, opts Options) (Options, error) {
	if obj == nil {
		return opts, nil
	}
	var raw []byte
	switch a := obj.(type) {
	case *runtime.Unknown:
		raw = a.Raw
	default:
		b, err := json.Marshal(obj)
		if err != nil {
			return opts, fmt.Errorf("%w: %v", ErrInvalidArgs, err)
		}
		raw = b
	}
	if len(raw) == 0 {
		return opts, nil
	}
	var args Args
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil {
		return opts, fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	if args.Resource != "" {
		opts.Resource = corev1.ResourceName(args.Resource)
	}
	if args.LockTimeout != "" {
		d, err := time.ParseDuration(args.LockTimeout)
		if err != nil || d <= 0 {
			return opts, fmt.Errorf("%w: lockTimeout %q is not a positive duration", ErrInvalidArgs, args.LockTimeout)
		}
		opts.LockTimeout = d
	}
	if args.SkipFreshNodeRead {
		opts.SkipFreshNodeRead = true
	}
	return opts, nil
}

// Name returns [Name].
func (p *Plugin) Name() string { return Name }

// View returns the scheduler view the plugin decides on.
func (p *Plugin) View() *kube.SchedulerView { return p.view }

const stateKey fwk.StateKey = Name

// cycleState is what PreFilter learns about the pod, and what Reserve and
// Bind decided for it.
type cycleState struct {
	mig     bool // a MIG pod: the ledger decides
	req     placement.Request
	devices int64 // the pod's effective request of the device resource

	// Node scores from Filter, by the position PreFilter gave each node.
	index  map[string]int
	scores []atomic.Int64

	// Written by Reserve and Bind, which run one after the other.
	as       []placement.Assignment
	value    string      // the record Bind writes
	bindTime string      // the hami.io/bind-time Bind writes
	read     *corev1.Pod // the pod Bind read: the binding is conditioned on its version
	tried    bool        // Bind called the API server

	// What Filter met for PostFilter (wake.go); shared with the clones
	// Filter runs on when a node has nominated pods. The original's
	// point to its own notes, one allocation less per cycle than a
	// separate object (newCycleState).
	*filterNotes
	notes filterNotes

	// The cycle-local occupancy of the nodes AddPod and RemovePod touched
	// (preempt.go); each clone has its own copy.
	ov overlays
}

// filterNotes are the earliest end of a young claim's lock Filter met
// (Unix ns, 0 for none), and the binds in flight it met (node -> UID), for
// PostFilter (wake.go).
type filterNotes struct {
	lockEnd atomic.Int64
	bindMu  sync.Mutex
	binds   map[string]string
}

// Clone returns a state whose cycle-local occupancy is a copy, as the
// framework's CycleState.Clone requires: each preemption dry run and each
// Filter with nominated pods changes its own. The rest is shared: the
// nodes' scores are only ever written for the node being filtered, the
// binding fields only by the binding cycle (on the original), and what
// Filter met is for PostFilter whichever copy met it.
func (s *cycleState) Clone() fwk.StateData {
	c := &cycleState{mig: s.mig, req: s.req, devices: s.devices, index: s.index, scores: s.scores,
		as: s.as, value: s.value, bindTime: s.bindTime, read: s.read, tried: s.tried, filterNotes: s.filterNotes}
	s.ov.cloneInto(&c.ov)
	return c
}

// newCycleState returns PreFilter's state for a pod requesting devices of
// the device resource, a MIG pod when req is not nil, with its own notes.
func newCycleState(devices int64, req *placement.Request, index map[string]int, scores []atomic.Int64) *cycleState {
	s := &cycleState{devices: devices, index: index, scores: scores}
	if req != nil {
		s.mig, s.req = true, *req
	}
	s.filterNotes = &s.notes
	return s
}

func readState(cs fwk.CycleState) *cycleState {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil
	}
	s, _ := d.(*cycleState)
	return s
}

// PreFilter parses the pod's MIG request. Pods that neither opt in to MIG
// nor request the device resource skip the plugin.
func (p *Plugin) PreFilter(_ context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	devices := p.deviceRequest(pod)
	req, err := kube.ParseRequestFor(pod, p.opts.Resource)
	notMIG := errors.Is(err, kube.ErrNotMIG) || (err == nil && req.DeviceCount() == 0)
	if notMIG {
		if _, ok := pod.Annotations[reservation.AnnotationKey]; ok {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrForeignRecord.Error())
		}
		if devices == 0 {
			return nil, fwk.NewStatus(fwk.Skip)
		}
		cs.Write(stateKey, newCycleState(devices, nil, nil, nil))
		return nil, nil
	}
	if err != nil {
		// A malformed request fits no node, and retrying cannot help.
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if !p.view.HasSynced() {
		return nil, fwk.AsStatus(ErrNotSynced)
	}
	p.view.Refresh()
	p.prune()
	s := newCycleState(devices, &req, p.nodeIndex(nodes), make([]atomic.Int64, len(nodes)))
	cs.Write(stateKey, s)
	return nil, nil
}

// nodeIndex returns the position of each node in nodes, by name. The
// scheduler passes the same list, in the same order, cycle after cycle
// until a node comes or goes, so the index of the previous call is reused
// when it still matches: checking it costs a comparison per node, building
// it a map of every node. An index is never changed once built, so cycles
// running at once may share it.
func (p *Plugin) nodeIndex(nodes []fwk.NodeInfo) map[string]int {
	if c := p.index.Load(); c != nil && len(c.names) == len(nodes) {
		same := true
		for i, n := range nodes {
			if node := n.Node(); node == nil || node.Name != c.names[i] {
				same = false
				break
			}
		}
		if same {
			return c.byName
		}
	}
	c := &nodeIndex{names: make([]string, len(nodes)), byName: make(map[string]int, len(nodes))}
	for i, n := range nodes {
		if node := n.Node(); node != nil {
			c.names[i] = node.Name
			c.byName[node.Name] = i
		}
	}
	p.index.Store(c)
	return c.byName
}

// nodeIndex is a node list's positions by name (Plugin.nodeIndex).
type nodeIndex struct {
	names  []string
	byName map[string]int
}

// deviceRequest is the pod's effective request of the device resource
// (the larger of its init containers' and the sum of its containers').
func (p *Plugin) deviceRequest(pod *corev1.Pod) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	q, ok := reqs[p.opts.Resource]
	if !ok {
		return 0
	}
	return q.Value()
}

// Filter keeps the node when it has the devices the pod requests and, for a
// MIG pod, when the node publishes MIG GPUs, no other MIG pod holds it and
// the ledger places the request on it now.
func (p *Plugin) Filter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	s := readState(cs)
	node := ni.Node()
	if s == nil || node == nil {
		return fwk.AsStatus(fmt.Errorf("schedplugin: no PreFilter state for pod %s/%s", pod.Namespace, pod.Name))
	}
	alloc := ni.GetAllocatable().GetScalarResources()[p.opts.Resource]
	used := ni.GetRequested().GetScalarResources()[p.opts.Resource]
	if s.devices > alloc-used {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%v: %s: %d requested, %d of %d free", ErrInsufficientDevices, p.opts.Resource, s.devices, max(alloc-used, 0), alloc))
	}
	if !s.mig {
		return nil
	}
	if who, ok := p.blocker(ctx, node.Name, string(pod.UID), &s.req, true); ok {
		p.noteLockEnd(s, node.Name, who)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%v: waiting for the device plugin to realize %s", ErrNodeLocked, who))
	}
	score, err := p.evaluate(s, node.Name)
	if err != nil {
		if nm := p.noMIG(node.Name); nm != nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, nm.Error())
		}
		if p.neverFits(node.Name, &s.req, err) {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%v: %v", ErrNeverFits, err))
		}
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	if i, ok := s.index[node.Name]; ok {
		s.scores[i].Store(score)
	}
	return nil
}

// neverFits reports whether req, which the ledger refused on node with
// err, would not fit the node with every slot free either: no pod's
// removal (preemption's) can make room, and the node's GPUs changing is a
// node event, which requeues the pod anyway.
func (p *Plugin) neverFits(node string, req *placement.Request, err error) bool {
	switch {
	case errors.Is(err, placement.ErrNoProfile), errors.Is(err, placement.ErrExcluded):
		return true // decided by the node's GPUs and the request alone
	case !errors.Is(err, placement.ErrCapacity):
		return false // fragmented or search-bounded: free slots exist
	}
	gpus, ok := p.view.Ledger().Node(node)
	if !ok {
		return false
	}
	for i := range gpus {
		gpus[i].Used, gpus[i].Engines = 0, placement.Engines{}
	}
	sel := placement.NewSelector(placement.SelectorOptions{Policy: p.opts.Ledger.Policy, MaxSteps: p.opts.Ledger.MaxSteps})
	_, err = sel.Select(gpus, req, nil)
	return err != nil && !errors.Is(err, placement.ErrSearchLimit)
}

// noMIG returns an error wrapping [ErrNoMIGGPUs] when the node publishes
// no usable MIG GPU, and nil otherwise.
func (p *Plugin) noMIG(node string) error {
	gpus, annotated := p.view.RegisteredGPUs(node)
	switch {
	case gpus > 0:
		return nil
	case !annotated:
		return fmt.Errorf("%w: node %s has no %s annotation (no MIG device plugin registered it)", ErrNoMIGGPUs, node, capability.NodeRegisterAnnotation)
	}
	return fmt.Errorf("%w: the %s annotation of node %s lists no usable MIG GPU", ErrNoMIGGPUs, capability.NodeRegisterAnnotation, node)
}

// blocker returns what keeps the pod uid with request req off node
// ([kube.NodeBinds.Blocker]) and whether anything does. A stale claim is
// reported once when report is set.
func (p *Plugin) blocker(ctx context.Context, node, uid string, req *placement.Request, report bool) (kube.Holder, bool) {
	var stale func(kube.NodeClaim)
	if report {
		stale = func(c kube.NodeClaim) { p.reportStale(ctx, node, c) }
	}
	return p.sh.binds.Blocker(node, uid, req, p.view.Claims(node), p.opts.Clock.Now(), p.opts.LockTimeout, stale)
}

// reportStale records a warning event on a claim's pod the first time it
// is found past the lock timeout.
func (p *Plugin) reportStale(_ context.Context, node string, c kube.NodeClaim) {
	p.sh.mu.Lock()
	done := p.sh.reported[c.Pod.UID]
	p.sh.reported[c.Pod.UID] = true
	p.sh.mu.Unlock()
	if done {
		return
	}
	staleClaims.Inc()
	p.log.Warn("stale node claim", "pod", c.Pod.String(), "node", node, "since", c.Since)
	if rec := p.handle.EventRecorder(); rec != nil {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: types.UID(c.Pod.UID)}
		rec.Eventf(ref, nil, corev1.EventTypeWarning, StaleClaimReason, "Scheduling",
			"MIG reservation on node %s not realized within %v; it blocks only pods the device plugin cannot tell apart from it", node, p.opts.LockTimeout)
	}
}

// prune forgets the reported claims the view no longer holds unrealized,
// and the pods Unreserve was given longer ago than the scheduler takes to
// report them.
func (p *Plugin) prune() {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	for uid := range p.sh.reported {
		if !p.view.Unrealized(uid) {
			delete(p.sh.reported, uid)
		}
	}
	for uid, u := range p.sh.unreserved {
		if p.opts.Clock.Since(u.at) > unreservedMemory {
			delete(p.sh.unreserved, uid)
		}
	}
}

// unreservedMemory is how long the plugin remembers a pod Unreserve was
// given. The scheduler reports the failed binding cycle right after
// Unreserve returns, on the same goroutine; this only bounds the memory.
const unreservedMemory = time.Minute

// unreservedPod is a pod Unreserve was given, and when.
type unreservedPod struct {
	pod *corev1.Pod
	at  time.Time
}

// noteUnreserved remembers pod as given to Unreserve.
func (p *Plugin) noteUnreserved(pod *corev1.Pod) {
	p.sh.mu.Lock()
	p.sh.unreserved[string(pod.UID)] = unreservedPod{pod: pod, at: p.opts.Clock.Now()}
	p.sh.mu.Unlock()
}

// reportsUnreserve reports whether pod, shown deleted to a queueing hint,
// is the scheduler's report of a binding cycle that failed rather than a
// deletion: the very pod Unreserve was given (or, should the scheduler
// ever copy it, a pod of the same UID and version, which a deletion's
// final state never is: deleting writes a new version).
func (p *Plugin) reportsUnreserve(pod *corev1.Pod) bool {
	p.sh.mu.Lock()
	u, ok := p.sh.unreserved[string(pod.UID)]
	p.sh.mu.Unlock()
	return ok && (u.pod == pod || u.pod.ResourceVersion == pod.ResourceVersion)
}

// PreScore skips Score for pods the ledger does not place.
func (p *Plugin) PreScore(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if s := readState(cs); s == nil || !s.mig {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score returns the ledger's node score Filter computed (0..100, the
// framework's range).
func (p *Plugin) Score(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s := readState(cs)
	node := ni.Node()
	if s == nil || node == nil {
		return 0, nil
	}
	if i, ok := s.index[node.Name]; ok {
		return s.scores[i].Load() * fwk.MaxScore / placement.MaxNodeScore, nil
	}
	score, err := p.view.Ledger().Evaluate(node.Name, &s.req)
	if err != nil {
		return 0, nil
	}
	return score * fwk.MaxScore / placement.MaxNodeScore, nil
}

// ScoreExtensions returns nil: scores are already in the framework's range.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve claims the node and assumes the pod's placements in the ledger.
func (p *Plugin) Reserve(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	s := readState(cs)
	if s == nil || !s.mig {
		return nil
	}
	uid := string(pod.UID)
	if err := p.claim(ctx, node, uid, &s.req); err != nil {
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	as, err := p.view.Reserve(node, pod, &s.req)
	if err != nil {
		p.release(node, uid)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("schedplugin: reserve on %s: %v", node, err))
	}
	s.as = as
	return nil
}

// claim marks node as binding pod uid, or fails with [ErrNodeLocked].
func (p *Plugin) claim(ctx context.Context, node, uid string, req *placement.Request) error {
	if who, ok := p.sh.binds.Claim(node, uid); !ok {
		return fmt.Errorf("%w: node %s is binding pod %s", ErrNodeLocked, node, who)
	}
	if who, ok := p.blocker(ctx, node, uid, req, false); ok {
		p.release(node, uid)
		return fmt.Errorf("%w: node %s waits for the device plugin to realize %s", ErrNodeLocked, node, who)
	}
	return nil
}

// release ends the bind of pod uid to node and wakes the pods that bind
// kept off the node (wake.go).
func (p *Plugin) release(node, uid string) { p.sh.endBind(node, uid) }

// Unreserve settles a binding that did not complete: see "Failure
// semantics" in the package documentation.
func (p *Plugin) Unreserve(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, node string) {
	s := readState(cs)
	if s == nil {
		return
	}
	p.noteUnreserved(pod)
	if !s.mig || s.as == nil {
		return
	}
	uid := string(pod.UID)
	defer p.release(node, uid)
	if !s.tried {
		p.view.Forget(uid)
		return
	}
	if p.settle(ctx, s, node) {
		p.view.Bound(pod, node, s.as)
		p.log.Warn("bound MIG pod although the binding cycle failed", "pod", pod.Namespace+"/"+pod.Name, "node", node, "reservation", s.value)
		return
	}
	p.view.Forget(uid)
}

// settle reads the pod again after a binding call that failed: the API
// server may have applied it although the answer was lost. It reports
// true when the pod is bound to node with the record's placements. A
// binding that was not applied wrote nothing, so nothing is undone.
func (p *Plugin) settle(ctx context.Context, s *cycleState, node string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	a := s.read
	cur, err := p.client.CoreV1().Pods(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			p.log.Warn("reading a pod whose binding failed", "pod", a.Namespace+"/"+a.Name, "err", err)
		}
		return false
	}
	return cur.UID == a.UID && cur.Spec.NodeName == node && reservation.SameScheduled(cur.Annotations[reservation.AnnotationKey], s.value)
}

// prepareBind is Bind's first half: it reads the node's pods
// consistently (unless [Options.SkipFreshNodeRead]), decides the
// placements again against what it read and encodes the record. It
// writes nothing.
func (p *Plugin) prepareBind(ctx context.Context, s *cycleState, pod *corev1.Pod, node string) *fwk.Status {
	uid := string(pod.UID)
	if !p.opts.SkipFreshNodeRead {
		if err := p.readNode(ctx, node); err != nil {
			return fwk.AsStatus(fmt.Errorf("schedplugin: read the pods of node %s: %w", node, err))
		}
		if who, ok := p.blocker(ctx, node, uid, &s.req, false); ok {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%v: node %s waits for the device plugin to realize %s", ErrNodeLocked, node, who))
		}
		// Decide again, against what the read added: the node's claim
		// keeps every other decision of this scheduler off the node.
		p.view.Forget(uid)
		as, err := p.view.Reserve(node, pod, &s.req)
		if err != nil {
			s.as = nil
			p.release(node, uid)
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("schedplugin: reserve on %s after reading its pods: %v", node, err))
		}
		s.as = as
	}
	s.value = reservation.EncodeString(schedule.Allocations(s.as))
	s.bindTime = strconv.FormatInt(p.opts.Clock.Now().Unix(), 10)
	return nil
}

// readPod reads the pod and keeps its version for the binding (s.read)
// only if it is the same pod, unbound, and still asks for what was
// decided.
func (p *Plugin) readPod(ctx context.Context, s *cycleState, pod *corev1.Pod) *fwk.Status {
	cur, err := p.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("schedplugin: read pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	if cur.UID != pod.UID || cur.Spec.NodeName != "" {
		return fwk.AsStatus(fmt.Errorf("%w: pod %s/%s is another pod now, or bound to %q", ErrPodChanged, pod.Namespace, pod.Name, cur.Spec.NodeName))
	}
	if req, err := kube.ParseRequestFor(cur, p.opts.Resource); err != nil || !reflect.DeepEqual(req, s.req) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%v: pod %s/%s changed its MIG request", ErrPodChanged, pod.Namespace, pod.Name))
	}
	s.read = cur
	return nil
}

// Bind binds a MIG pod with its record in one write, after reading the
// node (see the package documentation): a pods/binding call whose Binding
// carries the hami.io/vgpu-mig-allocations record and the bind time as
// annotations, with a UID and resourceVersion as preconditions. The
// version is first that of the scheduler's copy, whose request the cycle
// decided on; only when the API server refuses it as outdated does Bind
// read the pod and bind its current version, if that still asks for what
// was decided ("Requests per MIG pod" in the package documentation).
// Other pods are left to the profile's next binder.
//
// The reads are not a PreBind: kube-scheduler writes a NominatedNodeName
// to every pod whose PreBind has work, and then runs every Filter twice on
// the nodes of nominated pods, for no gain here (the pod is assumed in the
// scheduler's cache either way).
func (p *Plugin) Bind(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	s := readState(cs)
	if s == nil || !s.mig || s.as == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	if st := p.prepareBind(ctx, s, pod, node); !st.IsSuccess() {
		return st
	}
	s.read = pod
	err := errOutdated
	if pod.ResourceVersion != "" {
		err = p.bindRead(ctx, s, node)
	}
	if apierrors.IsConflict(err) || errors.Is(err, errOutdated) {
		if st := p.readPod(ctx, s, pod); !st.IsSuccess() {
			return st
		}
		err = p.bindRead(ctx, s, node)
	}
	if apierrors.IsConflict(err) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%v: %v", ErrPodChanged, err))
	}
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("schedplugin: bind pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err))
	}
	return nil
}

// errOutdated stands for a binding not tried: the scheduler's copy of the
// pod has no resourceVersion to condition it on.
var errOutdated = errors.New("schedplugin: no version to bind")

// bindRead binds the version of the pod in s.read to node with the
// record.
func (p *Plugin) bindRead(ctx context.Context, s *cycleState, node string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.read.Namespace, Name: s.read.Name, UID: s.read.UID,
			ResourceVersion: s.read.ResourceVersion,
			Annotations:     map[string]string{reservation.AnnotationKey: s.value, kube.BindTimeAnnotation: s.bindTime}},
		Target: corev1.ObjectReference{Kind: "Node", Name: node},
	}
	s.tried = true
	return p.client.CoreV1().Pods(b.Namespace).Bind(ctx, b, metav1.CreateOptions{})
}

// readNode applies a consistent listing of the pods bound to node to the
// view.
func (p *Plugin) readNode(ctx context.Context, node string) error {
	return p.view.ObservePods(ctx, func(ctx context.Context) ([]corev1.Pod, error) {
		list, err := p.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != node }), nil
	})
}

// PostBind records the bind in the view, where the pod holds the node's
// claim until the device plugin realizes it, and releases the binding
// claim.
func (p *Plugin) PostBind(_ context.Context, cs fwk.CycleState, pod *corev1.Pod, node string) {
	s := readState(cs)
	if s == nil || !s.mig || s.as == nil {
		return
	}
	p.view.Bound(pod, node, s.as)
	p.release(node, string(pod.UID))
	p.log.Info("bound MIG pod", "pod", pod.Namespace+"/"+pod.Name, "node", node, "reservation", s.value)
}
