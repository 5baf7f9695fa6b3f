package kube

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/reservation"
)

// ContainerCount returns the number of containers the allocation
// annotation's containerIndex ranges over: init containers plus regular
// containers. Ephemeral containers never receive devices and are not
// counted.
func ContainerCount(pod *corev1.Pod) int {
	return len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
}

// ContainerAt returns the container that containerIndex index designates:
// init containers first, then regular containers, the indexing the deployed
// scheduler and device plugin share. It returns nil when index is out of
// range.
func ContainerAt(pod *corev1.Pod, index int) *corev1.Container {
	if index < 0 {
		return nil
	}
	if index < len(pod.Spec.InitContainers) {
		return &pod.Spec.InitContainers[index]
	}
	index -= len(pod.Spec.InitContainers)
	if index < len(pod.Spec.Containers) {
		return &pod.Spec.Containers[index]
	}
	return nil
}

// ContainerIndex returns the containerIndex of the container named name,
// searching init containers first, then regular containers, and false when
// the pod has no such container.
func ContainerIndex(pod *corev1.Pod, name string) (int, bool) {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return i, true
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return len(pod.Spec.InitContainers) + i, true
		}
	}
	return 0, false
}

// PodView converts a Kubernetes pod into the small view reservation and
// realize work on. Annotations are copied, so later changes to pod do not
// show through. A nil pod yields the zero Pod.
func PodView(pod *corev1.Pod) reservation.Pod {
	if pod == nil {
		return reservation.Pod{}
	}
	var ann map[string]string
	if len(pod.Annotations) > 0 {
		ann = make(map[string]string, len(pod.Annotations))
		for k, v := range pod.Annotations {
			ann[k] = v
		}
	}
	return reservation.Pod{
		UID:         string(pod.UID),
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		Phase:       podPhase(pod.Status.Phase),
		Deleting:    pod.DeletionTimestamp != nil,
		Annotations: ann,
	}
}

// podPhase maps corev1 phases one to one; an empty phase (a pod the kubelet
// has not reported on yet) is Pending, as the API server defaults it, and an
// unrecognised one is Unknown.
func podPhase(p corev1.PodPhase) reservation.PodPhase {
	switch p {
	case corev1.PodPending, "":
		return reservation.PodPending
	case corev1.PodRunning:
		return reservation.PodRunning
	case corev1.PodSucceeded:
		return reservation.PodSucceeded
	case corev1.PodFailed:
		return reservation.PodFailed
	}
	return reservation.PodUnknown
}

// Terminal reports whether the pod will never run again: it is being
// deleted or has reached Succeeded or Failed. Its reservations leave the
// desired set.
func Terminal(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Snapshot converts a pod listing into a reservation snapshot. complete
// must be true only when pods is the whole, current listing of the node.
// The pods are converted in order.
func Snapshot(pods []*corev1.Pod, complete bool) reservation.Snapshot {
	out := make([]reservation.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodView(p))
	}
	return reservation.Snapshot{Pods: out, Complete: complete}
}

// BindTimeAnnotation records when a scheduler bound the pod, in Unix
// seconds, as HAMi's scheduler writes it. Device plugins use it to find the
// pod the kubelet is admitting: the earliest-bound pod whose reservation is
// not yet realized.
const BindTimeAnnotation = "hami.io/bind-time"

// BindTime returns the pod's [BindTimeAnnotation] time, falling back to its
// creation time when the annotation is absent or not a number.
func BindTime(pod *corev1.Pod) time.Time {
	if v, ok := pod.Annotations[BindTimeAnnotation]; ok {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(sec, 0)
		}
	}
	return pod.CreationTimestamp.Time
}
