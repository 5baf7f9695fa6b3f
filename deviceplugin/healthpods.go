package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// holder is the container a device ID was given to, with the MIG devices
// realized for it. The kubelet hands out device IDs regardless of GPU (the
// reservation decides the hardware), so an ID's own GPU says nothing about
// where its container's MIG devices are; a holder does.
type holder struct {
	uid             types.UID
	namespace, name string
	container       string
	devices         []heldMIG
}

// heldMIG is one realized MIG device of a holder.
type heldMIG struct {
	gpu    int // NVML index
	gi, ci uint32
	uuid   string
}

// affectedBy reports whether e (a transition to unhealthy) hits one of the
// holder's MIG devices: its GPU as a whole, or that very device.
func (h holder) affectedBy(e realize.HealthEvent) (heldMIG, bool) {
	for _, d := range h.devices {
		if d.gpu == e.GPU && (e.WholeGPU() || d.gi == e.GI && d.ci == e.CI) {
			return d, true
		}
	}
	return heldMIG{}, false
}

// hold records that the kubelet gave ids to h's container.
func (t *healthTracker) hold(ids []string, h holder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = map[string]holder{}
	}
	for _, id := range ids {
		t.held[id] = h
	}
}

// setHeld replaces every holder, from a fresh reading, and wakes
// ListAndWatch when that changed who holds an ID.
func (t *healthTracker) setHeld(held map[string]holder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	same := len(held) == len(t.held)
	for id, h := range held {
		if o, ok := t.held[id]; !ok || o.uid != h.uid || o.container != h.container {
			same = false
		}
	}
	t.held = held
	if !same && t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// holdIDs records the holder of the device IDs an Allocate realized devs
// for (container ci of pod).
func (p *Plugin) holdIDs(ids []string, pod *corev1.Pod, ci int, devs []realize.Device) {
	h := holder{uid: pod.UID, namespace: pod.Namespace, name: pod.Name}
	if c := kube.ContainerAt(pod, ci); c != nil {
		h.container = c.Name
	}
	for _, d := range devs {
		if gpu, ok := p.gpuIndex(d.Entry.GPUUUID); ok {
			h.devices = append(h.devices, heldMIG{gpu: gpu, gi: d.Runtime.GPUInstanceID, ci: d.Runtime.ComputeInstanceID, uuid: d.Runtime.MIGUUID})
		}
	}
	p.health.hold(ids, h)
}

// holders returns the holders of IDs, for the events of one transition.
func (t *healthTracker) holders() map[string]holder {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]holder, len(t.held))
	for id, h := range t.held {
		out[id] = h
	}
	return out
}

// unhealthyIDs returns the Unhealthy device IDs among the advertised ones
// (ids, per GPU index, as ListAndWatch lists them). An ID is Unhealthy
// when it is held by a container whose MIG device is on an unhealthy GPU
// or is an unhealthy MIG device: the kubelet then reports exactly the
// affected pods' devices unhealthy. Then, so that the kubelet's
// allocatable count drops by the lost capacity, free IDs (held by no
// container) are added: for an unhealthy GPU as many as its IDs less those
// already counted for it, for an unhealthy MIG device nobody holds one;
// the GPU's own IDs first, from the last, then other GPUs' free IDs.
func (t *healthTracker) unhealthyIDs(gpus []capability.GPU, ids map[int][]string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	bad, counted, heldMIGs := t.heldUnhealthy(ids)
	for _, g := range gpus {
		if !t.state.GPUHealthy(g.Index) {
			t.markFree(bad, gpus, ids, g.Index, len(ids[g.Index])-counted[g.Index])
			continue
		}
		need := 0
		for _, e := range t.state.UnhealthyMIG(g.Index) {
			if !heldMIGs[migRef{g.Index, e.GI, e.CI}] {
				need++
			}
		}
		t.markFree(bad, gpus, ids, g.Index, need)
	}
	return bad
}

// heldUnhealthy is unhealthyIDs' first half: the advertised IDs held by a
// container with a device on an unhealthy GPU or an unhealthy MIG device
// (bad), per unhealthy GPU how many of them it counted, and the unhealthy
// MIG devices someone holds. t.mu is held.
func (t *healthTracker) heldUnhealthy(ids map[int][]string) (bad map[string]bool, counted map[int]int, heldMIGs map[migRef]bool) {
	bad, counted, heldMIGs = map[string]bool{}, map[int]int{}, map[migRef]bool{}
	advertised := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			advertised[id] = true
		}
	}
	for id, h := range t.held {
		if !advertised[id] {
			continue
		}
		for _, d := range h.devices {
			switch {
			case !t.state.GPUHealthy(d.gpu):
				if !bad[id] {
					counted[d.gpu]++
				}
				bad[id] = true
			case !t.state.MIGHealthy(d.gpu, d.gi, d.ci):
				bad[id] = true
				heldMIGs[migRef{d.gpu, d.gi, d.ci}] = true
			}
		}
	}
	return bad, counted, heldMIGs
}

// markFree adds need free IDs (held by no container, not yet in bad) to
// bad: gpu's own IDs first, from the last, then other GPUs' in gpus
// order, each from the last. t.mu is held.
func (t *healthTracker) markFree(bad map[string]bool, gpus []capability.GPU, ids map[int][]string, gpu, need int) {
	order := slices.Clone(ids[gpu])
	slices.Reverse(order)
	for _, g := range gpus {
		if g.Index != gpu {
			rest := slices.Clone(ids[g.Index])
			slices.Reverse(rest)
			order = append(order, rest...)
		}
	}
	for _, id := range order {
		if need <= 0 {
			return
		}
		if _, held := t.held[id]; !held && !bad[id] {
			bad[id] = true
			need--
		}
	}
}

type migRef struct {
	gpu    int
	gi, ci uint32
}

// deviceIDs returns the advertised device IDs of each MIG-enabled GPU, by
// index, as [Plugin.devices] lists them. The caller holds p.mu.
func (p *Plugin) deviceIDs() map[int][]string {
	out := map[int][]string{}
	for _, g := range p.gpus {
		if g.MIGMode != capability.MIGEnabled {
			continue
		}
		n := uint32(0)
		for _, pr := range g.Profiles {
			n = max(n, pr.MaxInstances)
		}
		for k := range n {
			out[g.Index] = append(out[g.Index], g.UUID+"::"+strconv.FormatUint(uint64(k), 10))
		}
	}
	return out
}

// holderOf builds the holder of a device ID from the pod's reservation in
// the recorded view ([Plugin.view]): the realized MIG devices of the
// container. It reports false when the container has none realized (or
// the record cannot be read).
func (p *Plugin) holderOf(pod *corev1.Pod, ci int) (holder, bool) {
	view := p.view(pod)
	allocs, err := reservation.DecodeString(view.Annotations[reservation.AnnotationKey])
	if err != nil {
		return holder{}, false
	}
	h := holder{uid: pod.UID, namespace: pod.Namespace, name: pod.Name}
	if c := kube.ContainerAt(pod, ci); c != nil {
		h.container = c.Name
	}
	for _, a := range allocs {
		if a.ContainerIndex != ci {
			continue
		}
		rt, ok := a.Runtime()
		if !ok {
			continue
		}
		gpu, ok := p.gpuIndex(a.GPUUUID)
		if !ok {
			continue
		}
		h.devices = append(h.devices, heldMIG{gpu: gpu, gi: rt.GPUInstanceID, ci: rt.ComputeInstanceID, uuid: rt.MIGUUID})
	}
	return h, len(h.devices) > 0
}

// refreshHolders reads which container holds each device ID back from the
// kubelet's PodResources API (its own record, which survives the plugin's
// restarts and forgets ended pods) and the pods' reservations. Without a
// PodResources socket, or when the kubelet does not answer, it keeps the
// holders Allocate recorded and drops those whose pod has left the node.
func (p *Plugin) refreshHolders(ctx context.Context) {
	pods := map[string]*corev1.Pod{}
	for _, pod := range p.source.Pods() {
		pods[pod.Namespace+"/"+pod.Name] = pod
	}
	list, err := p.listPodResources(ctx)
	if err != nil || list == nil {
		if err != nil {
			p.log.Warn("cannot read the kubelet's device assignments; GPU health follows the plugin's own records", "err", err)
		}
		held := p.health.holders()
		for id, h := range held {
			if pod, ok := pods[h.namespace+"/"+h.name]; !ok || pod.UID != h.uid {
				delete(held, id)
			}
		}
		p.health.setHeld(held)
		return
	}
	held := map[string]holder{}
	for _, pr := range list.GetPodResources() {
		pod, ok := pods[pr.GetNamespace()+"/"+pr.GetName()]
		if !ok {
			continue
		}
		for _, c := range pr.GetContainers() {
			ci, ok := kube.ContainerIndex(pod, c.GetName())
			if !ok {
				continue
			}
			h, ok := p.holderOf(pod, ci)
			if !ok {
				continue
			}
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != p.cfg.ResourceName {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					held[id] = h
				}
			}
		}
	}
	p.health.setHeld(held)
}

// listPodResources lists the kubelet's PodResources API; nil without a
// socket.
func (p *Plugin) listPodResources(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	if p.cfg.PodResourcesSocket == "" {
		return nil, nil
	}
	conn, err := grpc.NewClient("unix://"+p.cfg.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPodResources, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: list: %w", ErrPodResources, err)
	}
	return list, nil
}

// recordPodEvents records a Warning Event on every pod holding a MIG
// device that the transition e (to unhealthy) hits, once per pod.
// The recorder logs failures.
func (p *Plugin) recordPodEvents(e realize.HealthEvent) {
	if e.Healthy || e.Cause == realize.CauseUnmonitored {
		return
	}
	done := map[types.UID]bool{}
	for _, h := range p.health.holders() {
		d, hit := h.affectedBy(e)
		if !hit || done[h.uid] {
			continue
		}
		done[h.uid] = true
		reason := ReasonGPUUnhealthy
		if !e.WholeGPU() {
			reason = ReasonMIGDeviceUnhealthy
		}
		ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: h.namespace, Name: h.name, UID: h.uid}
		p.events.Eventf(ref, nil, corev1.EventTypeWarning, reason, HealthAction,
			"%s: container %s's MIG device %s is on it; the pod keeps it, and the kubelet reports its device Unhealthy",
			e.String(), h.container, d.uuid)
	}
}
