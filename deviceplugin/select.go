package deviceplugin

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// ErrAmbiguous: more than one pod could be the one the kubelet is
// admitting. The plugin fails the Allocate rather than guess; the kubelet
// then reports an admission error for the pod, which is safe.
var ErrAmbiguous = errors.New("deviceplugin: cannot tell which pod the kubelet is admitting")

// ErrUnreserved: the container the kubelet is admitting requests the
// plugin's resource but has no reservation (or an incomplete one) in its
// hami.io/vgpu-mig-allocations record: a pod bound without the scheduler.
var ErrUnreserved = errors.New("deviceplugin: the admitted container has no reservation")

// AmbiguousError names the pods an Allocate could not choose between. It
// matches [ErrAmbiguous].
type AmbiguousError struct {
	Devices    int      // device IDs in the request
	Candidates []string // namespace/name of each candidate pod, sorted
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("deviceplugin: %d pods created at the same time each have a container requesting %d devices: %s",
		len(e.Candidates), e.Devices, strings.Join(e.Candidates, ", "))
}

// Unwrap returns [ErrAmbiguous].
func (e *AmbiguousError) Unwrap() error { return ErrAmbiguous }

// candidate is a container the kubelet may be admitting.
type candidate struct {
	pod       *corev1.Pod
	view      reservation.Pod
	container int
	reserved  bool // its record holds exactly n valid entries for it
	unsure    bool // its record says realized, but nothing server-set confirms it
	listed    bool // found by a direct listing: the cache may lag behind it
}

// choose applies the package's admission rule to pods, for a request of n
// device IDs: among pods that are not terminal and have a container that
// requests n devices of the plugin's resource (by its limit) and is not
// realized yet, the earliest created; in it, the first such container.
// Annotations never rank candidates. Several pods created in the same
// second are ambiguous. ok is false when no pod qualifies. The caller
// holds p.mu.
func (p *Plugin) choose(pods []*corev1.Pod, n int) (candidate, bool, error) {
	var cands []candidate
	for _, pod := range pods {
		if kube.Terminal(pod) {
			continue
		}
		if c, ok := p.firstPending(pod, n); ok {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return candidate{}, false, nil
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(a.view.Created.Compare(b.view.Created),
			cmp.Compare(a.pod.Namespace, b.pod.Namespace), cmp.Compare(a.pod.Name, b.pod.Name))
	})
	first := cands[0]
	var tied []string
	for _, c := range cands {
		if c.view.Created.Equal(first.view.Created) {
			tied = append(tied, c.pod.Namespace+"/"+c.pod.Name)
		}
	}
	if len(tied) > 1 {
		return candidate{}, false, &AmbiguousError{Devices: n, Candidates: tied}
	}
	if first.unsure {
		// It may be a container the kubelet admitted before a restart of
		// this plugin (handing its device out again would share it) or a
		// forged record (choosing the next pod would hand that pod's
		// device to this one): refuse rather than guess.
		return candidate{}, false, fmt.Errorf("%w: pod %s/%s container %d: its record names runtime identities that neither the kubelet's container status nor the manager confirms",
			ErrAmbiguous, first.pod.Namespace, first.pod.Name, first.container)
	}
	if !first.reserved {
		return candidate{}, false, fmt.Errorf("%w: pod %s/%s container %d requests %d devices of %s",
			ErrUnreserved, first.pod.Namespace, first.pod.Name, first.container, n, p.cfg.ResourceName)
	}
	return first, true, nil
}

// firstPending returns the pod's first container, in kubelet's order (init
// containers, then regular containers), that requests exactly n devices of
// the plugin's resource and that this plugin has neither realized nor is
// realizing, and that is not done ([Plugin.done]). A pod the kubelet has
// already admitted ([admitted]) has none, whatever its record says.
func (p *Plugin) firstPending(pod *corev1.Pod, n int) (candidate, bool) {
	if kube.Admitted(pod) {
		return candidate{}, false
	}
	view := p.view(pod)
	allocs, err := reservation.DecodeString(view.Annotations[reservation.AnnotationKey])
	trusted := err == nil && reservation.Validate(allocs) == nil
	var managed map[managedRef]string // the manager's instances, read when needed
	for c, want := range view.DeviceRequests {
		if want != n {
			continue
		}
		cl, claimed := p.claims[target{pod.UID, c}]
		retry := cl == unrecorded // this process wrote its identity; the kubelet got nothing
		if claimed && !retry || p.record.handed(pod.UID, c) {
			continue
		}
		entries, realized := 0, 0
		for _, a := range allocs {
			if a.ContainerIndex == c {
				entries++
				if _, ok := a.Runtime(); ok {
					realized++
				}
			}
		}
		unsure := entries > 0 && realized == entries && trusted && !retry
		if unsure && p.done(pod, c, allocs, &managed) {
			continue // done: the kubelet does not allocate a running container again
		}
		reserved := trusted && entries == n &&
			reservation.ValidateRequests(containerOnly(allocs, c), requestOnly(c, n)) == nil
		return candidate{pod: pod, view: view, container: c, reserved: reserved, unsure: unsure}, true
	}
	return candidate{}, false
}

// containerOnly returns the entries of container c.
func containerOnly(allocs []reservation.Allocation, c int) []reservation.Allocation {
	var out []reservation.Allocation
	for _, a := range allocs {
		if a.ContainerIndex == c {
			out = append(out, a)
		}
	}
	return out
}

// requestOnly is the device requests of a pod whose container c requests n
// devices and no other container requests any.
func requestOnly(c, n int) []int {
	out := make([]int, c+1)
	out[c] = n
	return out
}

// done reports whether container c of a pod the kubelet has not admitted,
// whose record names a runtime identity for each of its devices, is
// realized. The pod's creator can write such a record, so it counts only
// when the manager manages an instance under each named identity for it.
// managed caches the manager's instances across calls.
func (p *Plugin) done(pod *corev1.Pod, c int, allocs []reservation.Allocation, managed *map[managedRef]string) bool {
	if *managed == nil {
		*managed = p.managedFor()
	}
	for _, a := range allocs {
		if id, ok := a.Runtime(); ok && a.ContainerIndex == c && (*managed)[managedRef{pod.UID, c, a.DeviceIndex}] != id.MIGUUID {
			return false
		}
	}
	return true
}

// managedRef names one device of one container, as the manager owns it.
type managedRef struct {
	pod       types.UID
	container int
	device    int
}

// managedFor returns the MIG UUID of every instance the manager manages,
// by owner.
func (p *Plugin) managedFor() map[managedRef]string {
	out := map[managedRef]string{}
	for _, in := range p.manager.Managed() {
		out[managedRef{types.UID(in.Owner.PodUID), in.Owner.ContainerIndex, in.Owner.DeviceIndex}] = in.Runtime.MIGUUID
	}
	return out
}
