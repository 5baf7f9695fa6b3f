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
// realize work on, counting the devices each container requests of
// [ResourceGPU]. It is [PodViewFor] with ResourceGPU.
func PodView(pod *corev1.Pod) reservation.Pod {
	return PodViewFor(pod, ResourceGPU)
}

// PodViewFor converts a Kubernetes pod into the small view reservation and
// realize work on, for a device plugin serving resource. Every field but
// Annotations comes from data the API server or the kubelet sets:
//
//   - Created is metadata.creationTimestamp; DeletionDeadline is
//     metadata.deletionTimestamp (the end of the grace period), zero when
//     the pod is not deleting;
//   - ContainersTerminated is true when every init and regular container
//     has a status and every status is terminated;
//   - DeviceRequests[c] is container c's limit of resource (its request
//     when no limit is set; extended resources cannot be overcommitted, so
//     both are equal when both are set), nil when no container requests
//     the resource. A value that is not a whole number of devices, or
//     larger than [MaxDeviceRequest], counts as no request: no record can
//     match it.
//
// RecordSeen stays zero and RecordScheduled false (unknown): one pod
// object does not say when its record first appeared on the node, nor
// whether it arrived with the pod's binding. [NodePodSource.View] and
// [NodePodSource.Snapshot] fill them from the source's own observations.
//
// Annotations are copied, so later changes to pod do not show through. A
// nil pod yields the zero Pod.
func PodViewFor(pod *corev1.Pod, resource corev1.ResourceName) reservation.Pod {
	if pod == nil {
		return reservation.Pod{}
	}
	v := podViewBare(pod, resource)
	if len(pod.Annotations) > 0 {
		v.Annotations = make(map[string]string, len(pod.Annotations))
		for k, a := range pod.Annotations {
			v.Annotations[k] = a
		}
	}
	return v
}

// podViewBare is [PodViewFor] of a non-nil pod without its annotations,
// for callers that read the record from the pod itself (SchedulerView): it
// spares the copy of every annotation per pod event.
func podViewBare(pod *corev1.Pod, resource corev1.ResourceName) reservation.Pod {
	v := reservation.Pod{
		UID:                  string(pod.UID),
		Namespace:            pod.Namespace,
		Name:                 pod.Name,
		Phase:                podPhase(pod.Status.Phase),
		Deleting:             pod.DeletionTimestamp != nil,
		Created:              pod.CreationTimestamp.Time,
		ContainersTerminated: containersTerminated(pod),
		DeviceRequests:       DeviceRequests(pod, resource),
	}
	if pod.DeletionTimestamp != nil {
		v.DeletionDeadline = pod.DeletionTimestamp.Time
	}
	return v
}

// MaxDeviceRequest bounds the devices one container can request of a MIG
// resource: seven instances on each of 64 GPUs is far beyond any node.
const MaxDeviceRequest = 7 * 64

// DeviceRequests returns, per containerIndex (init containers first, then
// regular containers), the number of devices the container requests of
// resource, or nil when no container requests any. See [PodViewFor].
func DeviceRequests(pod *corev1.Pod, resource corev1.ResourceName) []int {
	var out []int
	n := ContainerCount(pod)
	for i := range n {
		c := ContainerAt(pod, i)
		q, ok := c.Resources.Limits[resource]
		if !ok {
			q, ok = c.Resources.Requests[resource]
		}
		if !ok {
			continue
		}
		v, exact := q.AsInt64()
		if !exact || v <= 0 || v > MaxDeviceRequest {
			continue
		}
		if out == nil {
			out = make([]int, n)
		}
		out[i] = int(v)
	}
	return out
}

// containersTerminated reports whether every init and regular container of
// the pod has a status and every status is terminated.
func containersTerminated(pod *corev1.Pod) bool {
	if ContainerCount(pod) == 0 {
		return false
	}
	check := func(specs []corev1.Container, statuses []corev1.ContainerStatus) bool {
		for _, c := range specs {
			st := containerStatus(statuses, c.Name)
			if st == nil || st.State.Terminated == nil {
				return false
			}
		}
		return true
	}
	return check(pod.Spec.InitContainers, pod.Status.InitContainerStatuses) &&
		check(pod.Spec.Containers, pod.Status.ContainerStatuses)
}

func containerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
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

// Terminal reports whether the pod will never start a container again: it
// is being deleted or has reached Succeeded or Failed. No device is
// allocated for it any more; whether its devices may be reclaimed is
// [reservation.Pod.Released], since a deleting pod's containers may still
// run through the grace period.
func Terminal(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Snapshot converts a pod listing taken now into a reservation snapshot;
// it is [SnapshotAt] with time.Now(). complete must be true only when pods
// is the whole, current listing of the node.
func Snapshot(pods []*corev1.Pod, complete bool) reservation.Snapshot {
	return SnapshotAt(pods, complete, time.Now())
}

// SnapshotAt converts a pod listing taken at now into a reservation
// snapshot, counting device requests of [ResourceGPU]. The pods are
// converted in order.
func SnapshotAt(pods []*corev1.Pod, complete bool, now time.Time) reservation.Snapshot {
	return SnapshotFor(pods, complete, now, ResourceGPU)
}

// SnapshotFor is [SnapshotAt] for a device plugin serving resource.
func SnapshotFor(pods []*corev1.Pod, complete bool, now time.Time, resource corev1.ResourceName) reservation.Snapshot {
	out := make([]reservation.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodViewFor(p, resource))
	}
	return reservation.Snapshot{Pods: out, Complete: complete, Now: now}
}

// BindTimeAnnotation records when a scheduler bound the pod, in Unix
// seconds, as HAMi's scheduler writes it. Anyone who may create or update
// the pod can write it too, so it must never decide which pod a device
// plugin serves: the kubelet admits pods in creation-timestamp order
// ([reservation.Pod.Created]), and the example plugin chooses by that.
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

// Admitted reports whether the kubelet has already admitted the pod, from
// its status alone, which only the kubelet writes (a pod's creator cannot):
// the pod is Running, or a container of any kind has been created, runs,
// has run or has started. The kubelet allocates every container's devices
// (init containers and regular ones) when it admits the pod, before it
// creates any container, so no container of such a pod is ever allocated
// again: its devices were handed out, whatever its record says (a record
// whose runtime identities were stripped looks unrealized). The device
// plugin never offers such a pod's containers to Allocate, and a
// [SchedulerView] counts no claim of it on its node.
func Admitted(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range list {
			st := &list[i]
			if st.ContainerID != "" || st.State.Running != nil || st.State.Terminated != nil ||
				st.LastTerminationState.Terminated != nil || st.Started != nil && *st.Started {
				return true
			}
		}
	}
	return false
}
