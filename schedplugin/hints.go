package schedplugin

import (
	"context"
	"errors"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// EventsToRegister returns the events that can make a pod this plugin
// rejected fit, each with a queueing hint that answers Queue only when the
// pod fits the event's node afterwards (see "Requeueing" in the package
// documentation).
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: p.afterPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update}, QueueingHintFn: p.afterPodUpdate},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation | fwk.UpdateNodeAllocatable}, QueueingHintFn: p.afterNodeChange},
		// The queue reports a pending pod's own update as TargetPod: a
		// general Update for annotations (the MIG opt-in, use-gputype,
		// nouse-gpuuuid, the profile preference), specific kinds for
		// labels or resources. Update matches them all.
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}, QueueingHintFn: p.afterOwnUpdate},
	}, nil
}

// afterOwnUpdate answers the pending pod's own update: it may fit now when
// what the plugin decides on changed (its MIG request, its device count,
// whether it carries a record) and the new request is well formed.
func (p *Plugin) afterOwnUpdate(_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, newPod := asPod(oldObj), asPod(newObj)
	if newPod == nil {
		return fwk.QueueSkip, nil
	}
	cur := p.demandOf(newPod)
	if cur.malformed {
		return fwk.QueueSkip, nil // refused by PreFilter again until fixed
	}
	if oldPod != nil && reflect.DeepEqual(p.demandOf(oldPod), cur) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// demand is what the plugin decides on of a pod: it changes only with the
// pod's annotations and resources.
type demand struct {
	devices   int64
	record    bool
	mig       bool // asks for MIG: req is its request
	malformed bool // opts in to MIG with a request that does not parse
	req       placement.Request
}

func (p *Plugin) demandOf(pod *corev1.Pod) demand {
	_, record := pod.Annotations[reservation.AnnotationKey]
	d := demand{devices: p.deviceRequest(pod), record: record}
	req, err := kube.ParseRequestFor(pod, p.opts.Resource)
	switch {
	case errors.Is(err, kube.ErrNotMIG):
	case err != nil:
		d.malformed = true
	case req.DeviceCount() > 0:
		d.mig, d.req = true, req
	}
	return d
}

// afterPodDelete answers a bound pod's deletion: its slots, its claim on
// the node or its devices are free.
func (p *Plugin) afterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	deleted := asPod(oldObj)
	if deleted == nil {
		deleted = asPod(newObj)
	}
	if deleted == nil || deleted.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	_, record := deleted.Annotations[reservation.AnnotationKey]
	if !record && p.deviceRequest(deleted) == 0 {
		return fwk.QueueSkip, nil
	}
	// The scheduler also sends this event for a pod whose binding cycle
	// failed, which was not deleted: Unreserve has already set the view
	// right, and a pod another scheduler bound, which the view counts
	// since Bind read it, must keep its slots.
	ending := deleted.DeletionTimestamp != nil || deleted.Status.Phase == corev1.PodSucceeded || deleted.Status.Phase == corev1.PodFailed
	if ending || !p.reportsUnreserve(deleted) {
		p.applyOnce(deleted, func() { p.view.PodHandler().OnDelete(deleted) })
	}
	return p.fitsNow(logger, pod, deleted.Spec.NodeName, nil, p.deviceRequest(deleted) > 0), nil
}

// afterPodUpdate answers a bound pod's update that changes its record
// (realized), lifts its node claim (the kubelet admitted it: kube.Admitted)
// or may release it (deleting, ended).
func (p *Plugin) afterPodUpdate(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, newPod := asPod(oldObj), asPod(newObj)
	if newPod == nil || newPod.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	before, after := "", newPod.Annotations[reservation.AnnotationKey]
	if oldPod != nil {
		before = oldPod.Annotations[reservation.AnnotationKey]
	}
	// Only an ended pod frees devices: realization and admission free
	// none.
	freed := podEnded(newPod) && (oldPod == nil || !podEnded(oldPod)) && p.deviceRequest(newPod) > 0
	if before == "" && after == "" && !freed {
		return fwk.QueueSkip, nil // not a MIG pod: only its end frees devices
	}
	ending := newPod.DeletionTimestamp != nil || podEnded(newPod)
	admitted := kube.Admitted(newPod) && (oldPod == nil || !kube.Admitted(oldPod))
	if before == after && !ending && !admitted {
		return fwk.QueueSkip, nil
	}
	p.applyOnce(newPod, func() { p.view.PodHandler().OnUpdate(oldPod, newPod) })
	return p.fitsNow(logger, pod, newPod.Spec.NodeName, nil, freed), nil
}

// podEnded reports whether pod's containers have all terminated for good.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// afterNodeChange answers a node added, or its registration or allocatable
// resources changed.
func (p *Plugin) afterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	node, _ := newObj.(*corev1.Node)
	if node == nil {
		return fwk.QueueSkip, nil
	}
	if old, _ := oldObj.(*corev1.Node); old != nil &&
		old.Annotations[capability.NodeRegisterAnnotation] == node.Annotations[capability.NodeRegisterAnnotation] &&
		equality.Semantic.DeepEqual(old.Status.Allocatable[p.opts.Resource], node.Status.Allocatable[p.opts.Resource]) {
		return fwk.QueueSkip, nil
	}
	p.applyOnce(node, func() { p.view.NodeHandler().OnUpdate(oldObj, node) })
	return p.fitsNow(logger, pod, node.Name, node, true), nil
}

// fitsNow answers whether pod fits node on the view as it is now: the
// node has the devices (when node is given), is not held by another MIG
// pod, and the ledger places the request. A pod that asks for no MIG
// device was refused for the device count only, so it is queued only when
// the event frees or adds devices (devicesFreed); a malformed request or a
// foreign record only the pod's own update can fix (afterOwnUpdate).
func (p *Plugin) fitsNow(logger klog.Logger, pod *corev1.Pod, name string, node *corev1.Node, devicesFreed bool) fwk.QueueingHint {
	d := p.demandOf(pod)
	if node != nil {
		alloc := node.Status.Allocatable[p.opts.Resource]
		if d.devices > alloc.Value() {
			return fwk.QueueSkip
		}
	}
	switch {
	case d.malformed || d.record && !d.mig:
		return fwk.QueueSkip
	case !d.mig && d.devices > 0 && devicesFreed:
		return fwk.Queue
	case !d.mig:
		return fwk.QueueSkip
	}
	req := d.req
	p.view.Refresh()
	if who, ok := p.blocker(context.Background(), name, string(pod.UID), &req, false); ok {
		logger.V(5).Info("node still held by an unrealized MIG pod", "pod", klog.KObj(pod), "node", name, "holder", who.String())
		return fwk.QueueSkip
	}
	if _, err := p.view.Ledger().Evaluate(name, &req); err != nil {
		logger.V(5).Info("MIG request still does not fit", "pod", klog.KObj(pod), "node", name, "err", err)
		return fwk.QueueSkip
	}
	logger.V(5).Info("MIG request fits now", "pod", klog.KObj(pod), "node", name)
	return fwk.Queue
}

// applyOnce applies an event the scheduler's queue delivers to the view
// before a hint decides on it, once per event: the hint runs once per
// pending pod, and the view's own informer handler may not have run yet.
// Applying again is harmless: the view orders events by resourceVersion.
func (p *Plugin) applyOnce(obj any, apply func()) {
	p.hintMu.Lock()
	defer p.hintMu.Unlock()
	if p.hintLast == obj {
		return
	}
	p.hintLast = obj
	apply()
}

func asPod(obj any) *corev1.Pod {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}
