package schedplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
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
	}, nil
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
	return p.fitsNow(logger, pod, deleted.Spec.NodeName, nil), nil
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
	if before == "" && after == "" {
		return fwk.QueueSkip, nil // not a MIG pod: its updates change no slots
	}
	ending := newPod.DeletionTimestamp != nil || newPod.Status.Phase == corev1.PodSucceeded || newPod.Status.Phase == corev1.PodFailed
	admitted := kube.Admitted(newPod) && (oldPod == nil || !kube.Admitted(oldPod))
	if before == after && !ending && !admitted {
		return fwk.QueueSkip, nil
	}
	p.applyOnce(newPod, func() { p.view.PodHandler().OnUpdate(oldPod, newPod) })
	return p.fitsNow(logger, pod, newPod.Spec.NodeName, nil), nil
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
	return p.fitsNow(logger, pod, node.Name, node), nil
}

// fitsNow answers whether pod fits node on the view as it is now: the
// node has the devices (when node is given), is not held by another MIG
// pod, and the ledger places the request.
func (p *Plugin) fitsNow(logger klog.Logger, pod *corev1.Pod, name string, node *corev1.Node) fwk.QueueingHint {
	devices := p.deviceRequest(pod)
	if node != nil {
		alloc := node.Status.Allocatable[p.opts.Resource]
		if devices > alloc.Value() {
			return fwk.QueueSkip
		}
	}
	req, err := kube.ParseRequestFor(pod, p.opts.Resource)
	if err != nil || req.DeviceCount() == 0 {
		// Rejected for the device count only: the event freed or added
		// devices on the node.
		if devices > 0 {
			return fwk.Queue
		}
		return fwk.QueueSkip
	}
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
