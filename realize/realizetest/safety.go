package realizetest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// ErrUnsafe is matched by every error a [Safety] model returns: the plugin
// loop broke one of the manager's safety invariants.
var ErrUnsafe = errors.New("realizetest: safety invariant broken")

// Safety is a model of the realization manager's safety invariants that an
// embedder asserts on its own device-plugin loop, whatever drives it:
//
//   - nothing handed to two owners: a MIG device granted to a pod is
//     never granted to another pod, even after the first is released (a
//     MIG UUID names one instance for its lifetime; a device that outlived
//     its pod, kept because it was in use, must not pass to the next one);
//   - no forged claim granted: a pod gets only devices its own record
//     names, with the scheduler-written fields unchanged, for entries the
//     trust rule accepts: the record decodes and validates, and the entry
//     passes reservation.ValidateRequests against the pod's
//     DeviceRequests (its other entries may fail it);
//   - nothing in use destroyed: every device granted to a pod that is not
//     released stays live, at the placement the pod's entry names, and
//     every GPU instance that ran processes at the previous observation
//     is still live.
//
// Call [Safety.Grant] after every successful Allocate ([Safety.GrantHolder]
// after every successful Prepare of a DRA plugin), [Safety.Release] when a
// pod is released (reservation.Pod.Released, or gone from the API) or a
// claim's consumers have ended, and [Safety.Observe] after every step of
// the loop, process changes included. What it says of pods it says of
// ResourceClaims too. The zero Safety is not usable; call [NewSafety]. A
// Safety is not safe for concurrent use.
type Safety struct {
	owner    map[string]string  // MIG UUID -> pod UID holding it
	first    map[string]string  // MIG UUID -> the pod it was first granted to
	grants   map[string][]grant // pod UID -> devices granted
	busy     map[giKey]string   // GPU instances with processes at the last observation -> a MIG UUID
	gpuIndex map[string]int     // GPU UUID -> NVML index, from Observe
}

type grant struct {
	migUUID string
	entry   reservation.Allocation
}

type giKey struct {
	gpu  int
	giid uint32
}

// NewSafety returns a model that has seen no grant.
func NewSafety() *Safety {
	return &Safety{owner: map[string]string{}, first: map[string]string{}, grants: map[string][]grant{}}
}

func unsafe(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsafe}, args...)...)
}

// Grant records that Allocate handed devices to pod (the pod as the call
// saw it). It returns an error matching [ErrUnsafe] when a device was ever
// granted to another pod, or is not backed by a trusted entry of pod's own
// record; the devices are recorded anyway, so that later checks keep
// protecting them.
func (s *Safety) Grant(pod reservation.Pod, devices []realize.Device) error {
	allocs, err := reservation.DecodeString(pod.Annotations[reservation.AnnotationKey])
	if err == nil {
		err = reservation.Validate(allocs)
	}
	return s.grant("pod", pod.UID, allocs, err, untrustedEntries(allocs, pod.DeviceRequests), devices)
}

// GrantHolder is [Safety.Grant] for a holder of a neutral demand (a DRA
// ResourceClaim): it records that [realize.Manager.Prepare] handed devices
// to h (the holder as the call saw it), and returns an error matching
// [ErrUnsafe] when a device was ever granted to another holder, when h's
// record is unreadable (Err set, or devices failing reservation.Validate),
// or when a device is not h's own trusted device (the scheduler-written
// fields of h.Devices[Device.Index], whose Untrusted is nil). Pods and
// claims share one namespace of holders: their UIDs never collide.
func (s *Safety) GrantHolder(h realize.Holder, devices []realize.Device) error {
	allocs := make([]reservation.Allocation, len(h.Devices))
	untrusted := map[int]bool{}
	for i, w := range h.Devices {
		allocs[i] = w.Allocation
		if w.Untrusted != nil {
			untrusted[i] = true
		}
	}
	err := h.Err
	if err == nil {
		err = reservation.Validate(allocs)
	}
	return s.grant("holder", h.UID, allocs, err, untrusted, devices)
}

func (s *Safety) grant(kind, uid string, allocs []reservation.Allocation, invalid error, untrusted map[int]bool, devices []realize.Device) error {
	var errs []error
	who := kind + " " + uid
	if invalid != nil && len(devices) > 0 {
		errs = append(errs, unsafe("%s was granted %d devices although its record is invalid: %v", who, len(devices), invalid))
	}
	for _, d := range devices {
		u := d.Runtime.MIGUUID
		if o, ok := s.first[u]; ok && o != uid {
			errs = append(errs, unsafe("%s granted to %s, already granted to %s", u, who, o))
		} else if !ok {
			s.first[u] = uid
		}
		switch {
		case invalid != nil:
		case !entryMatches(allocs, d):
			errs = append(errs, unsafe("%s was granted %s for %v, which its record does not name", who, u, d.Entry.Scheduled()))
		case untrusted[d.Index]:
			errs = append(errs, unsafe("%s was granted %s for entry %d, which it does not request (trust rule)", who, u, d.Index))
		}
		s.owner[u] = uid
		if !slices.ContainsFunc(s.grants[uid], func(g grant) bool { return g.migUUID == u }) {
			s.grants[uid] = append(s.grants[uid], grant{migUUID: u, entry: d.Entry.Scheduled()})
		}
	}
	return errors.Join(errs...)
}

// untrustedEntries returns the positions of the entries that fail the
// trust rule (reservation.ValidateRequests).
func untrustedEntries(allocs []reservation.Allocation, requests []int) map[int]bool {
	out := map[int]bool{}
	err := reservation.ValidateRequests(allocs, requests)
	if err == nil {
		return out
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ve *reservation.ValidationError
		if errors.As(e, &ve) {
			out[ve.Index] = true
		}
	}
	if len(out) == 0 { // an error without positions: trust nothing
		for i := range allocs {
			out[i] = true
		}
	}
	return out
}

// entryMatches reports whether the pod's record has, at the device's
// index, the entry the device was realized for.
func entryMatches(allocs []reservation.Allocation, d realize.Device) bool {
	return d.Index >= 0 && d.Index < len(allocs) && allocs[d.Index].Scheduled() == d.Entry.Scheduled()
}

// Release records that the pod is released: its devices may be destroyed
// (never granted to another pod).
func (s *Safety) Release(podUID string) {
	for _, g := range s.grants[podUID] {
		if s.owner[g.migUUID] == podUID {
			delete(s.owner, g.migUUID)
		}
	}
	delete(s.grants, podUID)
}

// Forget stops protecting one device: the loop knowingly gave it up, and
// nothing proves any more who owns it. The device may then be destroyed,
// and granted to another pod without [ErrUnsafe]. Two cases call for it:
// a running pod's record was wiped and the plugin restarted (a new manager
// may reclaim the device), and the residual risk package realize
// documents, where the owner ended and left the API and a restarted
// plugin is shown a forged copy of its identity.
func (s *Safety) Forget(migUUID string) {
	delete(s.first, migUUID)
	pod, ok := s.owner[migUUID]
	if !ok {
		return
	}
	delete(s.owner, migUUID)
	s.grants[pod] = slices.DeleteFunc(s.grants[pod], func(g grant) bool { return g.migUUID == migUUID })
}

// Observe reads the hardware through r (every MIG-enabled GPU's instances
// and processes) and returns an error matching [ErrUnsafe] for every
// device granted to an unreleased pod that is gone or has moved, and for
// every GPU instance that ran processes at the previous observation and is
// gone. Errors from r are returned as they are.
func (s *Safety) Observe(ctx context.Context, r realize.Realizer) error {
	devs, err := r.Devices(ctx)
	if err != nil {
		return err
	}
	live := map[string]realize.Instance{}
	gis := map[giKey]bool{}
	busy := map[giKey]string{}
	s.gpuIndex = map[string]int{}
	for _, d := range devs {
		s.gpuIndex[d.UUID] = d.Index
		if d.MIGMode != capability.MIGEnabled {
			continue
		}
		insts, err := r.Instances(ctx, d.Index)
		if err != nil {
			return err
		}
		procs, err := r.Processes(ctx, d.Index)
		if err != nil {
			return err
		}
		for _, in := range insts {
			gis[giKey{d.Index, in.GIID}] = true
			for _, ci := range in.ComputeInstances {
				live[ci.MIGUUID] = in
				if procs.ByGPUInstance[in.GIID] > 0 {
					busy[giKey{d.Index, in.GIID}] = ci.MIGUUID
				}
			}
		}
	}
	var errs []error
	for k, u := range s.busy {
		if !gis[k] {
			errs = append(errs, unsafe("GPU %d instance %d (%s) ran processes and was destroyed", k.gpu, k.giid, u))
		}
	}
	for pod, gs := range s.grants {
		for _, g := range gs {
			in, ok := live[g.migUUID]
			switch {
			case !ok:
				errs = append(errs, unsafe("pod %s's device %s (%v) was destroyed while the pod is not released", pod, g.migUUID, g.entry))
			case in.Placement != g.entry.Placement || s.gpuIndex[g.entry.GPUUUID] != in.GPU:
				errs = append(errs, unsafe("pod %s's device %s is at GPU %d %v, its entry names %s %v", pod, g.migUUID, in.GPU, in.Placement, g.entry.GPUUUID, g.entry.Placement))
			}
		}
	}
	s.busy = busy
	return errors.Join(errs...)
}

// Holder returns the pod that holds the MIG device, if any.
func (s *Safety) Holder(migUUID string) (podUID string, ok bool) {
	podUID, ok = s.owner[migUUID]
	return podUID, ok
}
