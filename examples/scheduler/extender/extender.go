package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// DefaultLockTimeout is how long a node stays locked by an unrealized pod.
const DefaultLockTimeout = 2 * time.Minute

// Options configures an [Extender]. The zero value works.
type Options struct {
	// Ledger options: placement policy, search bound, score mode.
	Ledger placement.LedgerOptions
	// LockTimeout bounds how long a bound but unrealized MIG pod keeps
	// its node out of Filter; 0 means [DefaultLockTimeout].
	LockTimeout time.Duration
	// Clock stamps bind times and ages locks; nil is the real clock.
	Clock clock.PassiveClock
	// Logger; nil discards.
	Logger *slog.Logger
}

// Extender answers scheduler-extender calls for MIG pods.
type Extender struct {
	client kubernetes.Interface
	ledger *placement.Ledger
	opts   Options
	log    *slog.Logger

	mu       sync.Mutex        // guards the maps below; serialises Sync
	regs     map[string]string // node -> registration value the ledger holds
	observed map[string]string // pod UID -> node+annotation the ledger holds
	locked   map[string]string // node -> the bound, unrealized pod locking it (rebuilt by Sync)
	binding  map[string]string // node -> the MIG pod a Bind call is binding to it now
}

// ErrNodeLocked: Bind refused a MIG pod because the node still waits for
// the device plugin to realize another bound pod, or another Bind call is
// binding a MIG pod to it (see the package documentation).
var ErrNodeLocked = errors.New("extender: node is locked by an unrealized MIG pod")

// New returns an extender over client.
func New(client kubernetes.Interface, opts Options) *Extender {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Extender{
		client: client, ledger: placement.NewLedger(opts.Ledger), opts: opts, log: log,
		regs: map[string]string{}, observed: map[string]string{}, locked: map[string]string{},
		binding: map[string]string{},
	}
}

// Ledger returns the extender's ledger, for inspection.
func (e *Extender) Ledger() *placement.Ledger { return e.ledger }

// Sync brings the ledger up to date with the API server: node registrations
// (SetNode when a value changed, with no GPUs when it is malformed or empty
// so that the node's pods keep their slots; RemoveNode when the node
// vanished) and the reservations of bound, active pods (AddPod when changed,
// DeletePod when the pod is gone or terminal). Pods the ledger only assumed
// and that are not bound yet are left alone. A production scheduler would
// feed the same calls from informers; listing keeps the example short.
func (e *Extender) Sync(ctx context.Context) error {
	nodes, err := e.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("extender: list nodes: %w", err)
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("extender: list pods: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.syncNodes(nodes.Items)
	e.syncPods(pods.Items)
	return nil
}

func (e *Extender) syncNodes(nodes []corev1.Node) {
	seen := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		seen[n.Name] = true
		v := n.Annotations[capability.NodeRegisterAnnotation]
		if prev, ok := e.regs[n.Name]; ok && prev == v {
			continue
		}
		e.regs[n.Name] = v
		gpus, err := kube.NodeGPUs(n)
		if err != nil {
			// No GPUs until the registration is usable again, but the
			// node's pods stay in the ledger: their slots are still
			// taken when the GPUs come back.
			e.log.Warn("node registration unusable; node gets no MIG pods", "node", n.Name, "err", err)
			gpus = nil
		}
		if len(gpus) == 0 {
			// Without GPUs the pods' reservations do not resolve, which
			// is expected and not worth a warning per pod.
			_ = e.ledger.SetNode(n.Name, nil)
			continue
		}
		if err := e.ledger.SetNode(n.Name, gpus); err != nil {
			// Reservations that no longer resolve are reported, but the
			// node is updated; a GPU that cannot be compiled is not.
			e.log.Warn("node registration applied with problems", "node", n.Name, "err", err)
		}
	}
	for name := range e.regs {
		if !seen[name] {
			e.ledger.RemoveNode(name)
			delete(e.regs, name)
			// RemoveNode forgot the node's pods; have syncPods record
			// any that are still listed again.
			for uid, key := range e.observed {
				if strings.HasPrefix(key, name+"\x00") {
					delete(e.observed, uid)
				}
			}
		}
	}
}

func (e *Extender) syncPods(pods []corev1.Pod) {
	now := e.opts.Clock.Now()
	clear(e.locked)
	seen := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		uid := string(p.UID)
		if p.Spec.NodeName == "" || kube.Terminal(p) {
			continue
		}
		v, ok := p.Annotations[reservation.AnnotationKey]
		if !ok {
			continue
		}
		seen[uid] = true
		allocs, err := kube.PodAllocations(p)
		if err != nil {
			e.log.Warn("pod reservation unreadable; its slots are unknown", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		if unrealized(allocs) && now.Sub(kube.BindTime(p)) < e.opts.LockTimeout {
			e.locked[p.Spec.NodeName] = p.Namespace + "/" + p.Name
		}
		key := p.Spec.NodeName + "\x00" + v
		if e.observed[uid] == key {
			continue
		}
		if err := e.ledger.AddPod(p.Spec.NodeName, uid, kube.LedgerReservations(uid, allocs)); err != nil {
			e.log.Warn("pod reservation recorded with problems", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
		e.observed[uid] = key
	}
	for uid := range e.observed {
		if !seen[uid] {
			e.ledger.DeletePod(uid)
			delete(e.observed, uid)
		}
	}
}

func unrealized(allocs []reservation.Allocation) bool {
	for _, a := range allocs {
		if _, ok := a.Runtime(); !ok {
			return true
		}
	}
	return false
}

// Filter keeps the nodes where the pod's MIG request fits now. Pods that
// do not opt in to MIG pass every node.
func (e *Extender) Filter(ctx context.Context, args Args) FilterResult {
	names := args.names()
	req, err := kube.ParseRequest(args.Pod)
	if errors.Is(err, kube.ErrNotMIG) || (err == nil && req.DeviceCount() == 0) {
		return FilterResult{NodeNames: &names, Nodes: args.Nodes}
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
	if err := e.Sync(ctx); err != nil {
		return FilterResult{Error: err.Error()}
	}
	res := FilterResult{FailedNodes: map[string]string{}}
	kept := []string{}
	locked := e.locks()
	for _, name := range names {
		if who, ok := locked[name]; ok {
			res.FailedNodes[name] = "waiting for the device plugin to realize " + who
			continue
		}
		if _, err := e.ledger.Evaluate(name, &req); err != nil {
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

// locks returns, per locked node, the pod that locks it: a bound pod not
// yet realized, or a MIG pod being bound right now.
func (e *Extender) locks() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := maps.Clone(e.locked)
	maps.Copy(out, e.binding)
	return out
}

// lockNode claims node for binding pod (namespace/name) and returns the
// release function, or [ErrNodeLocked] when another pod holds the node.
func (e *Extender) lockNode(node, pod string) (release func(), err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, who := range []string{e.locked[node], e.binding[node]} {
		if who != "" && who != pod {
			return nil, fmt.Errorf("%w: node %s waits for the device plugin to realize %s", ErrNodeLocked, node, who)
		}
	}
	e.binding[node] = pod
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.binding, node)
	}, nil
}

// Prioritize scores each node with the ledger's node score, scaled to
// 0..[MaxExtenderPriority]. Nodes where the pod does not fit score 0.
func (e *Extender) Prioritize(ctx context.Context, args Args) ([]HostPriority, error) {
	names := args.names()
	out := make([]HostPriority, len(names))
	req, err := kube.ParseRequest(args.Pod)
	for i, name := range names {
		out[i] = HostPriority{Host: name}
	}
	if errors.Is(err, kube.ErrNotMIG) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if err := e.Sync(ctx); err != nil {
		return nil, err
	}
	for i, name := range names {
		if score, err := e.ledger.Evaluate(name, &req); err == nil {
			out[i].Score = score * MaxExtenderPriority / placement.MaxNodeScore
		}
	}
	return out, nil
}

// Bind reserves the pod's placements on the node, writes its allocation
// annotation and binds it. See the package documentation for what happens
// on each failure.
func (e *Extender) Bind(ctx context.Context, args BindingArgs) error {
	pod, err := e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("extender: get pod %s/%s: %w", args.PodNamespace, args.PodName, err)
	}
	if args.PodUID != "" && pod.UID != args.PodUID {
		return fmt.Errorf("extender: pod %s/%s has UID %s, not %s", pod.Namespace, pod.Name, pod.UID, args.PodUID)
	}
	req, err := kube.ParseRequest(pod)
	if errors.Is(err, kube.ErrNotMIG) || (err == nil && req.DeviceCount() == 0) {
		return e.bind(ctx, pod, args.Node)
	}
	if err != nil {
		return err
	}
	if err := e.Sync(ctx); err != nil {
		return err
	}
	key := pod.Namespace + "/" + pod.Name
	release, err := e.lockNode(args.Node, key)
	if err != nil {
		return err
	}
	defer release()
	uid := string(pod.UID)
	as, err := e.ledger.Reserve(args.Node, uid, &req)
	if err != nil {
		return fmt.Errorf("extender: reserve pod %s/%s on %s: %w", pod.Namespace, pod.Name, args.Node, err)
	}
	value := reservation.EncodeString(kube.Allocations(as))
	if err := e.annotate(ctx, pod, value); err != nil {
		e.ledger.Forget(uid)
		return fmt.Errorf("extender: annotate pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err := e.bind(ctx, pod, args.Node); err != nil {
		e.ledger.Forget(uid)
		if uerr := e.unannotate(ctx, pod); uerr != nil {
			err = errors.Join(err, fmt.Errorf("extender: remove the annotation again: %w", uerr))
		}
		return err
	}
	// Bound and not realized: the node stays locked until a Sync sees
	// the runtime identity.
	e.mu.Lock()
	e.locked[args.Node] = key
	e.mu.Unlock()
	// Observed now: the reservation is a fact, no longer an assumption.
	if err := e.ledger.AddPod(args.Node, uid, placement.Reservations(uid, as)); err != nil {
		e.log.Warn("confirming reservation", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	e.log.Info("bound MIG pod", "pod", pod.Namespace+"/"+pod.Name, "node", args.Node, "reservation", value)
	return nil
}

// annotate writes the allocation and bind time, conditioned on the pod's
// resourceVersion: a pod changed meanwhile fails the bind rather than
// being annotated blindly.
func (e *Extender) annotate(ctx context.Context, pod *corev1.Pod, value string) error {
	meta := map[string]any{"annotations": map[string]any{
		reservation.AnnotationKey: value,
		kube.BindTimeAnnotation:   strconv.FormatInt(e.opts.Clock.Now().Unix(), 10),
	}}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	return e.patch(ctx, pod, meta)
}

func (e *Extender) unannotate(ctx context.Context, pod *corev1.Pod) error {
	return e.patch(ctx, pod, map[string]any{"annotations": map[string]any{
		reservation.AnnotationKey: nil, kube.BindTimeAnnotation: nil,
	}})
}

func (e *Extender) patch(ctx context.Context, pod *corev1.Pod, meta map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = e.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func (e *Extender) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
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
