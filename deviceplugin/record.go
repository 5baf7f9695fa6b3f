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
	boot string // the node's boot ID, written with every checkpoint
	log  *slog.Logger

	mu        sync.Mutex
	obs       map[types.UID]kube.Observation
	inherited map[types.UID]bool
	// trusted holds each inherited pod's entries that named a runtime
	// identity while the plugin inherited it (PodObservation.InheritedEntries).
	trusted map[types.UID][]reservation.Allocation
	// inheriting: the plugin started without a checkpoint and serves no
	// Allocate yet, so every pod observed now is inherited.
	inheriting bool
	devices    map[managedRef]HandedDevice
}

// newNodeRecord holds c, read from path; exists false means no checkpoint
// was found. boot is the node's boot ID: devices c recorded under another
// one are marked PreviousBoot (see the package documentation, "Reboots").
func newNodeRecord(path string, c Checkpoint, exists bool, boot string, log *slog.Logger) *nodeRecord {
	r := &nodeRecord{path: path, boot: boot, log: log, obs: map[types.UID]kube.Observation{}, inherited: map[types.UID]bool{},
		trusted: map[types.UID][]reservation.Allocation{}, inheriting: !exists, devices: map[managedRef]HandedDevice{}}
	rebooted := c.BootID != "" && c.BootID != boot
	if rebooted {
		log.Warn("the node rebooted since the checkpoint was written: its MIG devices are kept as claims, not as live instances",
			"checkpoint_boot_id", c.BootID, "boot_id", boot, "devices", len(c.Devices))
	}
	for _, p := range c.Pods {
		r.obs[types.UID(p.UID)] = p.Observation
		if p.Inherited {
			r.inherited[types.UID(p.UID)] = true
		}
		if len(p.InheritedEntries) > 0 {
			r.trusted[types.UID(p.UID)] = p.InheritedEntries
		}
	}
	for _, d := range c.Devices {
		d.PreviousBoot = d.PreviousBoot || rebooted
		r.devices[managedRef{types.UID(d.PodUID), d.ContainerIndex, d.DeviceIndex}] = d
	}
	return r
}

// stamp writes the checkpoint at once, so that it names the current boot
// and marks a previous boot's devices before anything else is decided.
func (r *nodeRecord) stamp() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.save()
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
			delete(r.trusted, uid)
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
// adopted are recorded, those recorded already updated, and the devices of pods a complete
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
		prev, ok := r.devices[ref]
		if !ok && in.Origin == realize.OriginCreated {
			// What this process creates is recorded by handOut, once its
			// Allocate succeeded: recorded here, an instance that the
			// failing Allocate of a multi-device container then rolls
			// back would leave its container handed, never pending again.
			continue
		}
		h := HandedDevice{PodUID: in.Owner.PodUID, ContainerIndex: in.Owner.ContainerIndex, DeviceIndex: in.Owner.DeviceIndex,
			GPUUUID: in.GPUUUID, Profile: in.Key.Profile, Placement: in.Key.Placement, Runtime: in.Runtime,
			Adopted: in.Origin == realize.OriginAdopted}
		if !ok || prev.PreviousBoot || prev.Runtime != h.Runtime || prev.Placement != h.Placement || prev.GPUUUID != h.GPUUUID {
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

// put records h, a device of this boot, for ref and forgets the devices
// of other owners that overlap its placement or, of this boot, name its
// MIG UUID or GPU instance: the manager never hands out or adopts what it
// manages for another owner, so theirs were reclaimed and are stale. A
// previous boot's identities name nothing now. The caller holds r.mu.
func (r *nodeRecord) put(ref managedRef, h HandedDevice) {
	for other, o := range r.devices {
		sameGPU := o.GPUUUID == h.GPUUUID
		named := !o.PreviousBoot && (o.Runtime.MIGUUID == h.Runtime.MIGUUID || sameGPU && o.Runtime.GPUInstanceID == h.Runtime.GPUInstanceID)
		if other != ref && (named || sameGPU && o.Placement.Overlaps(h.Placement)) {
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

// overlay rewrites pod into the recorded view (see the package
// documentation, "The recorded view"). An inherited pod's entries that
// the plugin handed nothing keep the identities its record named while
// the plugin inherited it, also the entries of a container's requested
// devices that none of its recorded devices stands for.
func (r *nodeRecord) overlay(pod *reservation.Pod) {
	value := pod.Annotations[reservation.AnnotationKey]
	var allocs []reservation.Allocation
	if value != "" {
		var err error
		if allocs, err = reservation.DecodeString(value); err != nil {
			return
		}
	}
	r.mu.Lock()
	recorded := r.devicesOf(types.UID(pod.UID))
	trusted := r.trust(types.UID(pod.UID), allocs)
	r.mu.Unlock()
	if value == "" && len(recorded) == 0 {
		return
	}
	view := make([]reservation.Allocation, 0, len(allocs)+len(recorded))
	emitted := map[int]bool{}
	onlyRecorded := len(recorded) > 0
	for _, a := range allocs {
		devs, ok := recorded[a.ContainerIndex]
		if ok && !emitted[a.ContainerIndex] {
			view = append(view, devs...)
			emitted[a.ContainerIndex] = true
		}
		switch {
		case ok && (hasDevice(devs, a.DeviceIndex) || !requested(pod, a)):
			// The container's entries are its recorded devices. A device
			// it requests that none recorded (a restart that lost the
			// checkpoint adopted the container's other devices only)
			// keeps its entry, as for a container with none.
		case slices.Contains(trusted, a):
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

// trust returns the entries of the pod whose identities the recorded view
// reads: none unless the pod is inherited. While the plugin inherits, they
// are those of allocs, the pod's record now, that name a runtime identity,
// and are written to the checkpoint; from its first Allocate on, those it
// wrote: an identity the pod's owner writes into its record later names
// nothing, not even an instance the checkpoint no longer records (its pod
// is gone) that is still to be collected. The caller holds r.mu.
func (r *nodeRecord) trust(uid types.UID, allocs []reservation.Allocation) []reservation.Allocation {
	if !r.inherited[uid] || !r.inheriting {
		return r.trusted[uid]
	}
	var named []reservation.Allocation
	for _, a := range allocs {
		if _, ok := a.Runtime(); ok {
			named = append(named, a)
		}
	}
	if slices.Equal(named, r.trusted[uid]) {
		return named
	}
	if named == nil {
		delete(r.trusted, uid)
	} else {
		r.trusted[uid] = named
	}
	if err := r.save(); err != nil {
		r.log.Error("could not write the checkpoint; an inherited pod's identities are not trusted after a restart", "path", r.path, "err", err)
	}
	return named
}

// hasDevice reports whether devs holds device index d.
func hasDevice(devs []reservation.Allocation, d int) bool {
	return slices.ContainsFunc(devs, func(a reservation.Allocation) bool { return a.DeviceIndex == d })
}

// requested reports whether a's container requests a's device: its index
// is below the container's device count.
func requested(pod *reservation.Pod, a reservation.Allocation) bool {
	return a.ContainerIndex >= 0 && a.ContainerIndex < len(pod.DeviceRequests) && a.DeviceIndex < pod.DeviceRequests[a.ContainerIndex]
}

// recordedClaim makes pod, every entry of which is a device the plugin
// handed out, win every conflict in reservation.Desired: as started and
// scheduled (no binding outranks the plugin's own record), and first seen
// no later than the pod was created (a time the API server set).
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
		out[ref.container] = append(out[ref.container], d.entry())
	}
	for _, devs := range out {
		slices.SortFunc(devs, func(a, b reservation.Allocation) int { return a.DeviceIndex - b.DeviceIndex })
	}
	return out
}

// save writes the checkpoint. The caller holds r.mu.
func (r *nodeRecord) save() error {
	c := Checkpoint{BootID: r.boot}
	for uid, o := range r.obs {
		c.Pods = append(c.Pods, PodObservation{UID: string(uid), Observation: o, Inherited: r.inherited[uid],
			InheritedEntries: r.trusted[uid]})
	}
	for _, d := range r.devices {
		c.Devices = append(c.Devices, d)
	}
	return WriteCheckpoint(r.path, c)
}
