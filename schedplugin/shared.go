package schedplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
)

// ErrProfileConflict: a second DynMIG profile of one scheduler, for the
// same device resource, asks for other ledger options than the first. The
// profiles share one view and ledger (see "One state per scheduler" in the
// package documentation), so the plugin refuses to start.
var ErrProfileConflict = errors.New("schedplugin: DynMIG profiles of one scheduler disagree")

// shared is what every DynMIG profile of one scheduler decides on: the
// view and its ledger, the binds in flight, and what the binding cycle
// remembers. kube-scheduler builds one plugin per profile; with a view
// each, two profiles would place two pods on the same slots.
type shared struct {
	key    any // the registry's key; nil when not registered
	view   *kube.SchedulerView
	binds  kube.NodeBinds // the MIG pod being bound to each node (Reserve to PostBind or Unreserve)
	ledger placement.LedgerOptions
	refs   int // open plugins; guarded by sharedMu

	mu       sync.Mutex
	reported map[string]bool // UIDs whose stale claim was reported
	// The pods Unreserve was given, by UID: the scheduler reports a failed
	// binding cycle as a deletion of that very pod, which is not one (see
	// afterPodDelete).
	unreserved map[string]unreservedPod
	// Pods a bind in flight kept off a node, by node, then pod UID
	// (wake.go).
	waiters map[string]map[types.UID]bindWaiter
}

// bindWaiter is a pod waiting for the bind of the pod bind to end, and the
// plugin (profile) that refused it.
type bindWaiter struct {
	pod  *corev1.Pod
	bind string
	pl   *Plugin
}

var (
	sharedMu sync.Mutex
	// sharedBy holds the state of each scheduler and device resource, by
	// sharedKey: the profiles of one kube-scheduler share its API client
	// and informers.
	sharedBy = map[any]*shared{}
)

// sharedKey names a scheduler's state for one device resource. Profiles
// that name different resources place different device plugins' devices
// and keep a state each.
type sharedKey struct {
	client   any // the handle's kubernetes.Interface
	resource corev1.ResourceName
}

// acquireShared returns the state of the scheduler whose handle is h,
// made on its first profile's plugin, or fails with [ErrProfileConflict]
// when opts disagree with that profile's.
func acquireShared(h fwk.Handle, opts Options, log *slog.Logger) (*shared, error) {
	var key any
	if c := h.ClientSet(); c != nil && reflect.TypeOf(c).Comparable() {
		key = sharedKey{client: c, resource: opts.Resource}
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := sharedBy[key]; key != nil && s != nil {
		if !reflect.DeepEqual(s.ledger, opts.Ledger) {
			return nil, fmt.Errorf("%w: ledger options %+v for resource %s, another profile's are %+v", ErrProfileConflict, opts.Ledger, opts.Resource, s.ledger)
		}
		s.refs++
		return s, nil
	}
	view := kube.NewSchedulerView(placement.NewLedger(opts.Ledger),
		kube.SchedulerViewOptions{Resource: opts.Resource, Clock: opts.Clock, Logger: log})
	if err := view.Register(h.SharedInformerFactory()); err != nil {
		return nil, fmt.Errorf("schedplugin: register the view's informers: %w", err)
	}
	s := &shared{key: key, view: view, ledger: opts.Ledger, refs: 1,
		reported: map[string]bool{}, unreserved: map[string]unreservedPod{}, waiters: map[string]map[types.UID]bindWaiter{}}
	if key != nil {
		sharedBy[key] = s
	}
	return s, nil
}

// close forgets pl's waiters and, with the last plugin, the state.
func (s *shared) close(pl *Plugin) {
	s.mu.Lock()
	for node, ws := range s.waiters {
		for uid, w := range ws {
			if w.pl == pl {
				delete(ws, uid)
			}
		}
		if len(ws) == 0 {
			delete(s.waiters, node)
		}
	}
	s.mu.Unlock()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s.refs--; s.refs == 0 && s.key != nil && sharedBy[s.key] == s {
		delete(sharedBy, s.key)
	}
}

// waitForBind records pod, refused by pl, as waiting for the bind of pod
// bind to node, and reports whether it did: false when that bind has
// ended already.
func (s *shared) waitForBind(pl *Plugin, pod *corev1.Pod, node, bind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.binds.Blocker(node, string(pod.UID), &placement.Request{}, nil, time.Time{}, 0, nil)
	if !ok || h.Binding != bind {
		return false
	}
	ws := s.waiters[node]
	if ws == nil {
		ws = map[types.UID]bindWaiter{}
		s.waiters[node] = ws
	}
	ws[pod.UID] = bindWaiter{pod: pod, bind: bind, pl: pl}
	return true
}

// endBind ends the bind of pod uid to node, if it holds the node, and
// moves the pods it kept off the node back to the active queue.
func (s *shared) endBind(node, uid string) {
	s.mu.Lock()
	s.binds.Release(node, uid)
	var wake map[*Plugin]map[string]*corev1.Pod
	for puid, w := range s.waiters[node] {
		if w.bind != uid {
			continue
		}
		if wake == nil {
			wake = map[*Plugin]map[string]*corev1.Pod{}
		}
		if wake[w.pl] == nil {
			wake[w.pl] = map[string]*corev1.Pod{}
		}
		wake[w.pl][w.pod.Namespace+"/"+w.pod.Name] = w.pod
		delete(s.waiters[node], puid)
	}
	if len(s.waiters[node]) == 0 {
		delete(s.waiters, node)
	}
	s.mu.Unlock()
	for pl, pods := range wake {
		pl.activate(pods)
	}
}
