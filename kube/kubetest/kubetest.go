package kubetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
)

var (
	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podGVK  = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podsGR  = schema.GroupResource{Resource: "pods"}
)

// DefaultGracePeriodSeconds is the grace period of a pod deletion that
// names none, for a pod whose spec.terminationGracePeriodSeconds is unset:
// the value the API server's defaulting writes into every pod.
const DefaultGracePeriodSeconds = 30

// Options configures [New]. The zero value is a server that behaves, in
// every respect the package documentation lists, like a real API server.
type Options struct {
	// Clock stamps deletion timestamps; nil is the real clock.
	Clock clock.PassiveClock
	// DeleteImmediately removes a pod at every delete, whatever its grace
	// period, as the plain fake clientset does. [NewClientset] sets it.
	DeleteImmediately bool
	// Untracked leaves out the fake's field management (no managedFields,
	// no server-side apply), which builds a REST mapper on every write;
	// the other rules hold. Long model-based runs set it: writes are then
	// several times cheaper.
	Untracked bool
}

// Server is a fake API server: a fake clientset with the reactors the
// package documentation describes, plus the controls a test needs for what
// a real server does by itself, such as a lagging watch cache. Its
// embedded clientset is what code under test is given.
type Server struct {
	*fake.Clientset

	clock     clock.PassiveClock
	immediate bool

	mu       sync.Mutex
	rv       uint64          // the last resourceVersion given to a pod
	cached   *corev1.PodList // the watch cache's view of pods; nil while it is current
	caughtUp chan struct{}   // closed when the lagging watch cache catches up
	holding  chan struct{}   // closed when held watches are released; nil while events flow
}

// New returns a server holding objs. Pods among them keep the
// resourceVersions they carry; every later write of a pod gets a new one,
// greater than any before.
func New(opts Options, objs ...runtime.Object) *Server {
	cs := fake.NewSimpleClientset
	if !opts.Untracked {
		cs = fake.NewClientset
	}
	s := &Server{Clientset: cs(objs...), clock: opts.Clock, immediate: opts.DeleteImmediately}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			if n, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64); err == nil {
				s.rv = max(s.rv, n)
			}
		}
	}
	s.PrependReactor("create", "pods", s.createPod)
	s.PrependReactor("update", "pods", s.updatePod)
	s.PrependReactor("patch", "pods", s.mergePatchPod)
	s.PrependReactor("delete", "pods", s.deletePod)
	s.PrependReactor("list", "pods", s.listPods)
	s.PrependWatchReactor("pods", s.watchPods)
	return s
}

// NewClientset returns the clientset of a server holding objs that
// removes pods at once when they are deleted, whatever the grace period:
// New(Options{DeleteImmediately: true}, objs...).Clientset.
func NewClientset(objs ...runtime.Object) *fake.Clientset {
	return New(Options{DeleteImmediately: true}, objs...).Clientset
}

// LagWatchCache makes the server's watch cache fall behind, as a real
// one does after a restart or under load: until
// [Server.CatchUpWatchCache],
//
//   - lists of pods that accept an answer from the cache (resourceVersion
//     "0") return the pods as they are stored now, whatever is written
//     meanwhile, while consistent lists (resourceVersion "") return the
//     current pods;
//   - watches of pods started meanwhile deliver no event; they deliver
//     what they missed, in order, once the cache catches up.
//
// Calling it while the cache lags changes nothing.
func (s *Server) LagWatchCache() {
	obj, err := s.Tracker().List(podsGVR, podGVK, metav1.NamespaceAll)
	list, ok := obj.(*corev1.PodList)
	if err != nil || !ok {
		list = &corev1.PodList{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caughtUp == nil {
		s.cached, s.caughtUp = list, make(chan struct{})
	}
}

// CatchUpWatchCache makes the watch cache current again and releases the
// events held back from watches.
func (s *Server) CatchUpWatchCache() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caughtUp != nil {
		close(s.caughtUp)
		s.cached, s.caughtUp = nil, nil
	}
}

// FinishDeletion removes a pod as the kubelet does once its containers
// have terminated: a delete with gracePeriodSeconds 0 and the pod's UID as
// precondition. It works with any client; a pod recreated under the same
// name meanwhile is a Conflict.
func FinishDeletion(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID) error {
	zero := int64(0)
	return client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
}

// nextVersion returns a new resourceVersion. Reactors run one at a time
// (the fake holds its lock around them), so a read-modify-write of a pod
// in one reactor is atomic.
func (s *Server) nextVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	return strconv.FormatUint(s.rv, 10)
}

// createPod gives a created pod a new resourceVersion (one the client set
// is replaced) and the status of a new pod, and makes pods/binding set
// spec.nodeName and the PodScheduled condition.
func (s *Server) createPod(a k8stesting.Action) (bool, runtime.Object, error) {
	ca, ok := a.(k8stesting.CreateAction)
	if !ok {
		return false, nil, nil
	}
	switch ca.GetSubresource() {
	case "binding":
		return s.bindPod(ca)
	case "":
	default:
		return false, nil, nil
	}
	pod, ok := ca.GetObject().(*corev1.Pod)
	if !ok {
		return true, nil, apierrors.NewBadRequest("pods: not a Pod")
	}
	pod = pod.DeepCopy()
	if pod.Namespace == "" {
		pod.Namespace = ca.GetNamespace()
	}
	pod.ResourceVersion = s.nextVersion()
	// Only the kubelet and the binding write a pod's status: whatever
	// status the creator sent is dropped.
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	if err := s.Tracker().Create(podsGVR, pod, pod.Namespace); err != nil {
		return true, nil, err
	}
	out, err := s.getPod(pod.Namespace, pod.Name)
	return true, out, err
}

// updatePod applies an update of a pod or its status only to the stored
// version it names, if it names one, and to the pod with its UID, and
// gives the pod a new resourceVersion. An update of the pod keeps the
// stored status; one of its status keeps the stored spec.
func (s *Server) updatePod(a k8stesting.Action) (bool, runtime.Object, error) {
	ua, ok := a.(k8stesting.UpdateAction)
	if !ok || ua.GetSubresource() != "" && ua.GetSubresource() != "status" {
		return false, nil, nil
	}
	pod, ok := ua.GetObject().(*corev1.Pod)
	if !ok {
		return true, nil, apierrors.NewBadRequest("pods: not a Pod")
	}
	stored, err := s.getPod(ua.GetNamespace(), pod.Name)
	if err != nil {
		return true, nil, err
	}
	if err := preconditions(stored, pod.UID, pod.ResourceVersion); err != nil {
		return true, nil, err
	}
	pod = pod.DeepCopy()
	keepOther(pod, stored, ua.GetSubresource())
	pod.ResourceVersion = s.nextVersion()
	if err := s.Tracker().Update(podsGVR, pod, stored.Namespace); err != nil {
		return true, nil, err
	}
	out, err := s.getPod(stored.Namespace, pod.Name)
	return true, out, err
}

// mergePatchPod applies a pod merge patch with its resourceVersion and UID
// preconditions and gives the pod a new resourceVersion; as with an
// update, a patch of the pod keeps its status and one of its status its
// spec.
func (s *Server) mergePatchPod(a k8stesting.Action) (bool, runtime.Object, error) {
	pa, ok := a.(k8stesting.PatchAction)
	if !ok || pa.GetPatchType() != types.MergePatchType || pa.GetSubresource() != "" && pa.GetSubresource() != "status" {
		return false, nil, nil
	}
	pod, err := s.getPod(pa.GetNamespace(), pa.GetName())
	if err != nil {
		return true, nil, err
	}
	var pre struct {
		Metadata struct {
			ResourceVersion string    `json:"resourceVersion"`
			UID             types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &pre); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if err := preconditions(pod, pre.Metadata.UID, pre.Metadata.ResourceVersion); err != nil {
		return true, nil, err
	}
	orig, err := json.Marshal(pod)
	if err != nil {
		return true, nil, err
	}
	merged, err := jsonpatch.MergePatch(orig, pa.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(merged, out); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	keepOther(out, pod, pa.GetSubresource())
	out.ResourceVersion = s.nextVersion()
	return true, out, s.Tracker().Update(podsGVR, out, out.Namespace)
}

// keepOther keeps the part of stored that a write of subresource may not
// change: the status when the pod itself is written, the spec when its
// status is.
func keepOther(pod, stored *corev1.Pod, subresource string) {
	if subresource == "status" {
		pod.Spec = *stored.Spec.DeepCopy()
		return
	}
	pod.Status = *stored.Status.DeepCopy()
}

// bindPod makes pods/binding set spec.nodeName of the pod the Binding
// names and merge the Binding's annotations into the pod's, honouring its
// UID and resourceVersion preconditions; a pod that is bound or being
// deleted is a Conflict.
func (s *Server) bindPod(ca k8stesting.CreateAction) (bool, runtime.Object, error) {
	b, ok := ca.GetObject().(*corev1.Binding)
	if !ok {
		return true, nil, apierrors.NewBadRequest("pods/binding: not a Binding")
	}
	ns := b.Namespace
	if ns == "" {
		ns = ca.GetNamespace()
	}
	pod, err := s.getPod(ns, b.Name)
	if err != nil {
		return true, nil, err
	}
	if err := preconditions(pod, b.UID, b.ResourceVersion); err != nil {
		return true, nil, err
	}
	bindings := schema.GroupResource{Resource: "pods/binding"}
	switch {
	case pod.DeletionTimestamp != nil:
		return true, nil, apierrors.NewConflict(bindings, b.Name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", b.Name))
	case pod.Spec.NodeName != "":
		return true, nil, apierrors.NewConflict(bindings, b.Name, fmt.Errorf("pod %s is already assigned to node %q", b.Name, pod.Spec.NodeName))
	}
	pod.Spec.NodeName = b.Target.Name
	// The Binding's annotations are merged into the pod's in the same
	// write, each replacing the pod's value under its key.
	if len(b.Annotations) > 0 && pod.Annotations == nil {
		pod.Annotations = make(map[string]string, len(b.Annotations))
	}
	for k, v := range b.Annotations {
		pod.Annotations[k] = v
	}
	// The API server's binding also marks the pod scheduled in its status,
	// which a pod created with spec.nodeName preset lacks until its kubelet
	// writes status (kube.NodePodSource tells the two apart by it).
	setScheduled(&pod.Status)
	pod.ResourceVersion = s.nextVersion()
	return true, b, s.Tracker().Update(podsGVR, pod, ns)
}

// setScheduled sets the PodScheduled=True condition, as the binding does.
func setScheduled(st *corev1.PodStatus) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.PodScheduled {
			st.Conditions[i].Status = corev1.ConditionTrue
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
}

// deletePod deletes a pod as the API server does: with its UID and
// resourceVersion preconditions, and gracefully unless the grace period is
// 0.
func (s *Server) deletePod(a k8stesting.Action) (bool, runtime.Object, error) {
	da, ok := a.(k8stesting.DeleteAction)
	if !ok || da.GetSubresource() != "" {
		return false, nil, nil
	}
	pod, err := s.getPod(da.GetNamespace(), da.GetName())
	if err != nil {
		return true, nil, err
	}
	opts := da.GetDeleteOptions()
	if p := opts.Preconditions; p != nil {
		var uid types.UID
		var rv string
		if p.UID != nil {
			uid = *p.UID
		}
		if p.ResourceVersion != nil {
			rv = *p.ResourceVersion
		}
		if err := preconditions(pod, uid, rv); err != nil {
			return true, nil, err
		}
	}
	remove := func() (bool, runtime.Object, error) {
		return true, nil, s.Tracker().Delete(podsGVR, pod.Namespace, pod.Name)
	}
	if s.immediate {
		return remove()
	}
	if pod.DeletionTimestamp != nil {
		// Already deleting: a shorter grace period moves the deadline
		// closer; 0 removes the pod; anything else changes nothing.
		old := pod.DeletionGracePeriodSeconds
		if old == nil {
			return remove()
		}
		if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds >= *old {
			return true, nil, nil
		}
		grace := max(*opts.GracePeriodSeconds, 0)
		if grace == 0 {
			return remove()
		}
		deadline := metav1.NewTime(pod.DeletionTimestamp.Add(time.Duration(grace-*old) * time.Second))
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &deadline, &grace
		pod.ResourceVersion = s.nextVersion()
		return true, nil, s.Tracker().Update(podsGVR, pod, pod.Namespace)
	}
	grace := gracePeriod(pod, opts.GracePeriodSeconds)
	if grace == 0 {
		return remove()
	}
	deadline := metav1.NewTime(s.clock.Now().Add(time.Duration(grace) * time.Second)).Rfc3339Copy()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &deadline, &grace
	pod.ResourceVersion = s.nextVersion()
	return true, nil, s.Tracker().Update(podsGVR, pod, pod.Namespace)
}

// gracePeriod is the API server's pod deletion grace period: the one
// requested, else the pod's terminationGracePeriodSeconds, else the
// default; 0 for a pod that is not bound or has terminated; at least 1 if
// negative.
func gracePeriod(pod *corev1.Pod, requested *int64) int64 {
	grace := int64(DefaultGracePeriodSeconds)
	switch {
	case requested != nil:
		grace = *requested
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0
	}
	if grace < 0 {
		return 1
	}
	return grace
}

// listPods answers a list that accepts a cached answer (resourceVersion
// "0") from the lagging watch cache, if it lags.
func (s *Server) listPods(a k8stesting.Action) (bool, runtime.Object, error) {
	la, ok := a.(k8stesting.ListActionImpl)
	if !ok || la.ListOptions.ResourceVersion != "0" {
		return false, nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached == nil {
		return false, nil, nil
	}
	out := &corev1.PodList{ListMeta: s.cached.ListMeta}
	for i := range s.cached.Items {
		if ns := la.GetNamespace(); ns == "" || s.cached.Items[i].Namespace == ns {
			out.Items = append(out.Items, *s.cached.Items[i].DeepCopy())
		}
	}
	return true, out, nil
}

// watchPods relays the events of every pod watch through a heldWatch, so
// that [Server.HoldWatches] can hold them back; a watch started while the
// watch cache lags also holds its events until the cache catches up.
func (s *Server) watchPods(a k8stesting.Action) (bool, watch.Interface, error) {
	s.mu.Lock()
	caughtUp := s.caughtUp
	s.mu.Unlock()
	var opts metav1.ListOptions
	if wa, ok := a.(k8stesting.WatchActionImpl); ok {
		opts = wa.ListOptions
	}
	w, err := s.Tracker().Watch(podsGVR, a.GetNamespace(), opts)
	if err != nil {
		return true, nil, err
	}
	return true, newHeldWatch(w, func() <-chan struct{} {
		select {
		case <-caughtUp:
		default:
			if caughtUp != nil {
				return caughtUp
			}
		}
		return s.hold()
	}), nil
}

// HoldWatches holds back the events of every pod watch, those running and
// those started later, as a real API server's watches lag under load,
// until [Server.ReleaseWatches]. Lists stay current, so a consistent list
// may show what no watch delivered yet. Calling it while watches are held
// changes nothing.
func (s *Server) HoldWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holding == nil {
		s.holding = make(chan struct{})
	}
}

// ReleaseWatches delivers, in order, the events [Server.HoldWatches] held
// back, and lets later events flow.
func (s *Server) ReleaseWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holding != nil {
		close(s.holding)
		s.holding = nil
	}
}

// hold returns the channel closed when held watches are released, or nil
// while events flow.
func (s *Server) hold() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// heldWatch relays the events of a watch, holding them back while hold
// returns a channel (until it is closed); hold returns nil while events
// flow. It keeps receiving while it holds, so the watch it wraps never
// fills up. Its goroutine ends when the watch is stopped, or when the
// watch it wraps has ended and every event is delivered.
type heldWatch struct {
	inner watch.Interface
	hold  func() <-chan struct{}
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func newHeldWatch(inner watch.Interface, hold func() <-chan struct{}) *heldWatch {
	h := &heldWatch{inner: inner, hold: hold, out: make(chan watch.Event), stop: make(chan struct{})}
	go h.run()
	return h
}

func (h *heldWatch) run() {
	defer close(h.out)
	in := h.inner.ResultChan()
	var pending []watch.Event
	for {
		held := h.hold()
		if held == nil && in == nil && len(pending) == 0 {
			return
		}
		var send chan watch.Event
		var next watch.Event
		if held == nil && len(pending) > 0 {
			send, next = h.out, pending[0]
		}
		select {
		case <-h.stop:
			return
		case <-held: // released: look again
		case ev, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			pending = append(pending, ev)
		case send <- next:
			pending = pending[1:]
		}
	}
}

// ResultChan returns the channel of released events.
func (h *heldWatch) ResultChan() <-chan watch.Event { return h.out }

// Stop ends the watch and its goroutine.
func (h *heldWatch) Stop() {
	h.once.Do(func() {
		close(h.stop)
		h.inner.Stop()
	})
}

// preconditions checks a write's UID and resourceVersion preconditions
// ("" for none) against the stored pod.
func preconditions(pod *corev1.Pod, uid types.UID, rv string) error {
	switch {
	case uid != "" && uid != pod.UID:
		return apierrors.NewConflict(podsGR, pod.Name,
			fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", uid, pod.UID))
	case rv != "" && rv != pod.ResourceVersion:
		return apierrors.NewConflict(podsGR, pod.Name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return nil
}

// getPod returns a copy of the stored pod.
func (s *Server) getPod(namespace, name string) (*corev1.Pod, error) {
	obj, err := s.Tracker().Get(podsGVR, namespace, name)
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, apierrors.NewInternalError(errors.New("stored pod is not a *v1.Pod"))
	}
	return pod.DeepCopy(), nil
}
