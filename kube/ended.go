package kube

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/reservation"
)

// EndedPodMemory is how long a [NodePodSource] keeps listing a pod the
// watch reported deleted in a released state (see "Deleted pods" in the
// package documentation). It exceeds realize's default AbsentPodGrace, so
// every maintenance pass until then judges the pod released rather than
// merely absent.
const EndedPodMemory = 5 * time.Minute

// endedPods remembers the last state of the node's pods the watch reported
// deleted while released, so that snapshots list them as released for
// [EndedPodMemory]. A pod's UID never comes back, so its last state stays
// true.
type endedPods struct {
	mu   sync.Mutex
	pods map[types.UID]endedPod
}

type endedPod struct {
	view    reservation.Pod
	deleted time.Time
}

// remember keeps view, the pod's last state, when it was released at now.
func (e *endedPods) remember(uid types.UID, view reservation.Pod, now time.Time) {
	if !view.Released(now) {
		return // deleted while its containers may run: merely absent
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pods == nil {
		e.pods = make(map[types.UID]endedPod)
	}
	e.pods[uid] = endedPod{view: view, deleted: now}
}

// appendTo appends to pods the remembered pods not listed in it, and
// forgets those remembered longer than [EndedPodMemory] before now.
func (e *endedPods) appendTo(pods []reservation.Pod, listed []*corev1.Pod, now time.Time) []reservation.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	for uid, p := range e.pods {
		if now.Sub(p.deleted) > EndedPodMemory {
			delete(e.pods, uid)
			continue
		}
		if !listedUID(listed, uid) {
			pods = append(pods, p.view)
		}
	}
	return pods
}

func listedUID(pods []*corev1.Pod, uid types.UID) bool {
	for _, p := range pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}
