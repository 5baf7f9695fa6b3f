package schedplugin

import (
	"context"
	"math"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/kube"
)

// A lock's end is no cluster event: a pod refused only because a node was
// locked by a young claim would wait for kube-scheduler's periodic retry
// (5 minutes by default) once the claim ages past the lock timeout. Filter
// notes when the earliest such lock ends, PostFilter arms a timer for it,
// and the timer moves the pod back to the active queue (Handle.Activate).
// Nor is a bind in flight's end: the bound pod's arrival is an assigned
// pod's Add, and a failed bind changes nothing in the cluster. Filter
// notes such binds, PostFilter has the pod wait for them, and the bind's
// end (PostBind or Unreserve) moves it back to the active queue.

// noteLockEnd records in s what ends the lock h on node: a bind in flight,
// or a young claim's timeout. A stale claim ends only with its realization
// or its pod's end, both cluster events.
func (p *Plugin) noteLockEnd(s *cycleState, node string, h kube.Holder) {
	if h.Binding != "" {
		s.noteBind(node, h.Binding)
		return
	}
	if p.opts.Clock.Now().Sub(h.Claim.Since) >= p.opts.LockTimeout {
		return
	}
	end := h.Claim.Since.Add(p.opts.LockTimeout).UnixNano()
	for {
		cur := s.lockEnd.Load()
		if cur != 0 && cur <= end || s.lockEnd.CompareAndSwap(cur, end) {
			return
		}
	}
}

// PostFilter runs when no node can take the pod. If a young claim's lock
// or a bind in flight kept it off a node, the pod is moved back to the
// active queue when that lock ends. It never makes the pod schedulable
// itself.
func (p *Plugin) PostFilter(_ context.Context, cs fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if s := readState(cs); s != nil {
		if end := s.lockEnd.Load(); end != 0 {
			p.wakeAt(pod, time.Unix(0, end))
		}
		for node, uid := range s.bindsMet() {
			p.waitForBind(pod, node, uid)
		}
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// noteBind records that a bind of the pod uid in flight kept the cycle's
// pod off node.
func (s *filterNotes) noteBind(node, uid string) {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if s.binds == nil {
		s.binds = map[string]string{}
	}
	s.binds[node] = uid
}

// bindsMet returns the binds noteBind recorded, by node.
func (s *filterNotes) bindsMet() map[string]string {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	return s.binds
}

// waitForBind has pod wait for the bind of pod uid to node to end, or
// activates it now when that bind has already ended.
func (p *Plugin) waitForBind(pod *corev1.Pod, node, uid string) {
	if !p.sh.waitForBind(p, pod, node, uid) {
		p.activate(map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
	}
}

// activate moves pods back to the active queue unless the plugin is
// closed.
func (p *Plugin) activate(pods map[string]*corev1.Pod) {
	p.wakeMu.Lock()
	closed := p.closed
	p.wakeMu.Unlock()
	if !closed && len(pods) > 0 {
		p.handle.Activate(logr.FromSlogHandler(p.log.Handler()), pods)
	}
}

// wakeAt activates pod at t (or just after), with one timer for the
// earliest pending wake. A clock without timers (a passive test clock)
// wakes nobody.
func (p *Plugin) wakeAt(pod *corev1.Pod, t time.Time) {
	c, ok := p.opts.Clock.(clock.WithDelayedExecution)
	if !ok {
		return
	}
	p.wakeMu.Lock()
	defer p.wakeMu.Unlock()
	if p.closed {
		return
	}
	p.waking[pod.UID] = wake{pod: pod, at: t}
	if p.timer != nil && !p.timerAt.After(t) {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timerAt = t
	p.timer = c.AfterFunc(max(t.Sub(c.Now()), 0), p.fire)
}

// fire runs wakeDue on a goroutine of its own: a test clock calls timer
// functions while holding its lock, which wakeDue takes again.
func (p *Plugin) fire() { go p.wakeDue() }

// wakeDue activates the pods whose wake is due and re-arms the timer for
// the next.
func (p *Plugin) wakeDue() {
	c := p.opts.Clock.(clock.WithDelayedExecution)
	now := c.Now()
	due := map[string]*corev1.Pod{}
	p.wakeMu.Lock()
	if p.closed {
		p.wakeMu.Unlock()
		return
	}
	next := time.Unix(0, math.MaxInt64)
	for uid, w := range p.waking {
		if !w.at.After(now) {
			due[w.pod.Namespace+"/"+w.pod.Name] = w.pod
			delete(p.waking, uid)
		} else if w.at.Before(next) {
			next = w.at
		}
	}
	p.timer = nil
	if len(p.waking) > 0 {
		p.timerAt = next
		p.timer = c.AfterFunc(max(next.Sub(now), 0), p.fire)
	}
	p.wakeMu.Unlock()
	if len(due) > 0 {
		p.log.Debug("lock timeout passed; retrying the pods it kept off their nodes", "pods", len(due))
		p.activate(due)
	}
}

// Close stops the wake timer; kube-scheduler calls it when the profile's
// framework closes. A wake already firing finishes on its own: it only
// moves pods between the scheduler's queues.
func (p *Plugin) Close() error {
	p.wakeMu.Lock()
	defer p.wakeMu.Unlock()
	if !p.closed {
		p.sh.close(p)
	}
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	clear(p.waking)
	return nil
}

// wake is a pod to move back to the active queue at a lock's end.
type wake struct {
	pod *corev1.Pod
	at  time.Time
}
