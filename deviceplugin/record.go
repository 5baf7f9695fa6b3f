package deviceplugin

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// nodeRecord is the plugin's copy of its checkpoint, the durable record of
// what it observed and did (see the package documentation,
// "Checkpoint"), and writes it back on every change. It is safe for
// concurrent use.
type nodeRecord struct {
	path string
	log  *slog.Logger

	mu        sync.Mutex
	obs       map[types.UID]kube.Observation
	inherited map[types.UID]bool
	// inheriting: the plugin started without a checkpoint and serves no
	// Allocate yet, so every pod observed now is inherited.
	inheriting bool
	devices    map[managedRef]HandedDevice
}

// newNodeRecord holds c, read from path; exists false means no checkpoint
// was found.
func newNodeRecord(path string, c Checkpoint, exists bool, log *slog.Logger) *nodeRecord {
	r := &nodeRecord{path: path, log: log, obs: map[types.UID]kube.Observation{}, inherited: map[types.UID]bool{},
		inheriting: !exists, devices: map[managedRef]HandedDevice{}}
	for _, p := range c.Pods {
		r.obs[types.UID(p.UID)] = p.Observation
		if p.Inherited {
			r.inherited[types.UID(p.UID)] = true
		}
	}
	for _, d := range c.Devices {
		r.devices[managedRef{types.UID(d.PodUID), d.ContainerIndex, d.DeviceIndex}] = d
	}
	return r
}

// observations returns the first observations to start the pod source
// from.
func (r *nodeRecord) observations() map[types.UID]kube.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.obs)
}

// setObservations replaces the observations with the pod source's and
// writes the checkpoint; a pod observed while inheriting is inherited.
func (r *nodeRecord) setObservations(obs map[types.UID]kube.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obs = obs
	for uid := range obs {
		if r.inheriting {
			r.inherited[uid] = true
		}
	}
	for uid := range r.inherited {
		if _, ok := obs[uid]; !ok {
			delete(r.inherited, uid)
		}
	}
	if err := r.save(); err != nil {
		r.log.Error("could not write the checkpoint; first observations since the last write are lost on a restart", "path", r.path, "err", err)
	}
}

// serving ends inheritance: from now on this plugin realizes what is
// realized on the node.
func (r *nodeRecord) serving() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inheriting = false
}

// handOut records the devices an Allocate realized for a container and
// writes the checkpoint, before they are handed to the kubelet.
func (r *nodeRecord) handOut(uid types.UID, devices []realize.Device) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := maps.Clone(r.devices)
	for _, d := range devices {
		ref := managedRef{uid, d.Entry.ContainerIndex, d.Entry.DeviceIndex}
		adopted := d.Origin == realize.OriginAdopted
		if prev, ok := r.devices[ref]; ok && d.Origin == realize.OriginManaged && prev.Runtime == d.Runtime {
			adopted = prev.Adopted
		}
		r.put(ref, HandedDevice{PodUID: string(uid), ContainerIndex: d.Entry.ContainerIndex, DeviceIndex: d.Entry.DeviceIndex,
			GPUUUID: d.Entry.GPUUUID, Profile: d.Entry.Profile, Placement: d.Entry.Placement, Runtime: d.Runtime, Adopted: adopted})
	}
	if err := r.save(); err != nil {
		r.devices = old
		return err
	}
	return nil
}

// sync follows the manager after a maintenance pass: the instances it
// manages are recorded (adoption), and the devices of pods a complete
// listing no longer holds, which it no longer manages, are forgotten.
//
// managed is read under the record's lock: an Allocate stores its
// instance with the manager before it records the hand-out, so a device
// handed out after snap was taken, which snap cannot list, is always
// among them and never forgotten.
func (r *nodeRecord) sync(managed func() []realize.ManagedInstance, snap reservation.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	live := map[managedRef]bool{}
	for _, in := range managed() {
		ref := managedRef{types.UID(in.Owner.PodUID), in.Owner.ContainerIndex, in.Owner.DeviceIndex}
		live[ref] = true
		h := HandedDevice{PodUID: in.Owner.PodUID, ContainerIndex: in.Owner.ContainerIndex, DeviceIndex: in.Owner.DeviceIndex,
			GPUUUID: in.GPUUUID, Profile: in.Key.Profile, Placement: in.Key.Placement, Runtime: in.Runtime,
			Adopted: in.Origin == realize.OriginAdopted}
		if prev, ok := r.devices[ref]; !ok || prev.Runtime != h.Runtime || prev.Placement != h.Placement || prev.GPUUUID != h.GPUUUID {
			r.put(ref, h)
			changed = true
		}
	}
	if snap.Complete {
		listed := map[types.UID]bool{}
		for i := range snap.Pods {
			listed[types.UID(snap.Pods[i].UID)] = true
		}
		for ref := range r.devices {
			if !listed[ref.pod] && !live[ref] {
				delete(r.devices, ref)
				changed = true
			}
		}
	}
	if !changed {
		return
	}
	if err := r.save(); err != nil {
		r.log.Error("could not write the checkpoint", "path", r.path, "err", err)
	}
}

// put records h for ref and forgets the devices of other owners that name
// its MIG UUID or GPU instance or overlap its placement: the manager never
// hands out or adopts what it manages for another owner, so theirs were
// reclaimed and are stale. The caller holds r.mu.
func (r *nodeRecord) put(ref managedRef, h HandedDevice) {
	for other, o := range r.devices {
		if other != ref && (o.Runtime.MIGUUID == h.Runtime.MIGUUID || o.GPUUUID == h.GPUUUID &&
			(o.Placement.Overlaps(h.Placement) || o.Runtime.GPUInstanceID == h.Runtime.GPUInstanceID)) {
			delete(r.devices, other)
		}
	}
	r.devices[ref] = h
}

// handed reports whether the plugin handed a device to container c of the
// pod.
func (r *nodeRecord) handed(uid types.UID, c int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ref := range r.devices {
		if ref.pod == uid && ref.container == c {
			return true
		}
	}
	return false
}

// overlay rewrites pod's record into the recorded view (see the package
// documentation, "Checkpoint"). A container the plugin handed devices to
// (or adopted them for) has exactly those devices as its entries, with
// their runtime identities, whatever the record says now: moved, stripped
// or removed. Every other entry keeps its scheduled fields only, unless
// the pod is inherited, whose entries keep the identity the record names.
// A pod all of whose entries are recorded devices wins every conflict
// ([recordedClaim]). A record that does not decode is left as it is: it
// withholds destruction on the node whether or not the plugin restarted.
func (r *nodeRecord) overlay(pod *reservation.Pod) {
	value := pod.Annotations[reservation.AnnotationKey]
	r.mu.Lock()
	recorded := r.devicesOf(types.UID(pod.UID))
	inherited := r.inherited[types.UID(pod.UID)]
	r.mu.Unlock()
	if value == "" && len(recorded) == 0 {
		return
	}
	var allocs []reservation.Allocation
	if value != "" {
		var err error
		if allocs, err = reservation.DecodeString(value); err != nil {
			return
		}
	}
	view := make([]reservation.Allocation, 0, len(allocs)+len(recorded))
	emitted := map[int]bool{}
	onlyRecorded := len(recorded) > 0
	for _, a := range allocs {
		devs, ok := recorded[a.ContainerIndex]
		switch {
		case ok && !emitted[a.ContainerIndex]:
			view = append(view, devs...)
			emitted[a.ContainerIndex] = true
		case ok: // the container's entries are its recorded devices
		case inherited:
			view, onlyRecorded = append(view, a), false
		default:
			view, onlyRecorded = append(view, a.Scheduled()), false
		}
	}
	for _, c := range slices.Sorted(maps.Keys(recorded)) {
		if !emitted[c] {
			view = append(view, recorded[c]...)
		}
	}
	if onlyRecorded {
		recordedClaim(pod)
	}
	if v := reservation.EncodeString(view); v != value {
		ann := maps.Clone(pod.Annotations)
		if ann == nil {
			ann = map[string]string{}
		}
		ann[reservation.AnnotationKey] = v
		pod.Annotations = ann
	}
}

// recordedClaim marks the view of a pod whose every entry is a device the
// plugin handed out as the claim that wins every conflict
// (reservation.Desired): it was admitted with them (RecordStarted), they
// are the plugin's own record, stronger than any binding
// (RecordScheduled), and they were claimed no later than the pod was
// created. A pod whose other containers are not handed yet keeps its
// observation: those entries are only the record's.
func recordedClaim(pod *reservation.Pod) {
	pod.RecordScheduled, pod.RecordStarted = true, true
	if pod.Created.IsZero() || !pod.RecordSeen.IsZero() && pod.RecordSeen.Before(pod.Created) {
		return
	}
	pod.RecordSeen = pod.Created
}

// devicesOf returns the recorded devices of the pod by container, each
// container's ordered by device index, as reservation entries. The caller
// holds r.mu.
func (r *nodeRecord) devicesOf(uid types.UID) map[int][]reservation.Allocation {
	var out map[int][]reservation.Allocation
	for ref, d := range r.devices {
		if ref.pod != uid {
			continue
		}
		if out == nil {
			out = map[int][]reservation.Allocation{}
		}
		out[ref.container] = append(out[ref.container], d.allocation())
	}
	for _, devs := range out {
		slices.SortFunc(devs, func(a, b reservation.Allocation) int { return a.DeviceIndex - b.DeviceIndex })
	}
	return out
}

// save writes the checkpoint. The caller holds r.mu.
func (r *nodeRecord) save() error {
	c := Checkpoint{}
	for uid, o := range r.obs {
		c.Pods = append(c.Pods, PodObservation{UID: string(uid), Observation: o, Inherited: r.inherited[uid]})
	}
	for _, d := range r.devices {
		c.Devices = append(c.Devices, d)
	}
	return WriteCheckpoint(r.path, c)
}
