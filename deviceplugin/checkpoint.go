package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/internal/leaf/atomicfile"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// CheckpointDir and CheckpointFile locate the default checkpoint under
// Config.SocketDir: a directory, because a starting kubelet removes every
// file but its own from its device plugin directory, and keeps
// directories.
const (
	CheckpointDir  = "dynmig"
	CheckpointFile = "checkpoint.json"
)

// checkpointVersion is the only version DecodeCheckpoint accepts. The
// boot ID, the previous-boot mark and the inherited entries are optional
// fields of it, added later: a file without them (an earlier plugin's)
// still loads, and an earlier plugin refuses a file with them (unknown
// fields) rather than guess.
const checkpointVersion = 1

// Checkpoint is the plugin's durable node-local record of what it observed
// and did; see the package documentation ("Checkpoint"). The zero value is
// an empty checkpoint.
type Checkpoint struct {
	// BootID is the node's boot ID when the checkpoint was written; "" in
	// a file an earlier plugin wrote (see the package documentation,
	// "Reboots").
	BootID string
	// Pods are the first observations of the node's pods' claims, by UID
	// (kube.NodePodSourceOptions.Observations).
	Pods []PodObservation
	// Devices are the MIG devices the plugin created or adopted for a
	// container and has not reclaimed.
	Devices []HandedDevice
}

// PodObservation is the first observation of one pod's claim.
type PodObservation struct {
	UID string
	kube.Observation
	// Inherited marks a pod the plugin first observed before it served
	// its first Allocate after starting without a checkpoint: what its
	// record says was realized may have been realized by an earlier
	// plugin whose checkpoint is lost, so the runtime identities its
	// record names then are trusted (InheritedEntries).
	Inherited bool
	// InheritedEntries are the entries of an inherited pod's record that
	// named a runtime identity while the plugin inherited the pod: the
	// only identities of its record the recorded view reads, so that one
	// its owner writes later names nothing (see the package
	// documentation, "The recorded view"). A file without them (an
	// earlier plugin's) trusts none of its inherited pods' identities.
	InheritedEntries []reservation.Allocation
}

// HandedDevice is one MIG device the plugin handed to (or adopted for) one
// container: its owner, reservation and the instance's identity.
type HandedDevice struct {
	PodUID                      string
	ContainerIndex, DeviceIndex int
	GPUUUID                     string
	Profile                     string
	Placement                   capability.Placement
	Runtime                     reservation.RuntimeIdentity
	// Adopted is true when the plugin adopted an instance it found rather
	// than created it.
	Adopted bool
	// PreviousBoot is true when the device was handed out before the node
	// last rebooted: the container keeps its claim to the placement, but
	// no instance is taken for it by Runtime (see the package
	// documentation, "Reboots").
	PreviousBoot bool
}

// allocation returns the device as a reservation entry, with its runtime
// identity.
func (d HandedDevice) allocation() reservation.Allocation {
	return d.claim().WithRuntime(d.Runtime)
}

// claim returns the device as a reservation entry without runtime
// identity: the placement it claims.
func (d HandedDevice) claim() reservation.Allocation {
	return reservation.Allocation{ContainerIndex: d.ContainerIndex, DeviceIndex: d.DeviceIndex, GPUUUID: d.GPUUUID,
		Profile: d.Profile, Placement: d.Placement}
}

// entry returns the device as the recorded view shows it: with its
// runtime identity, unless it was handed out before the last reboot.
func (d HandedDevice) entry() reservation.Allocation {
	if d.PreviousBoot {
		return d.claim()
	}
	return d.allocation()
}

// ErrCheckpoint is matched by every [*CheckpointError].
var ErrCheckpoint = errors.New("deviceplugin: unreadable checkpoint")

// CheckpointError reports a checkpoint that cannot be read or trusted. The
// plugin refuses to start on one rather than forget what it handed out:
// remove the file only after checking that no MIG device of the node is in
// use, or accept that the plugin then falls back to the pods' records.
type CheckpointError struct {
	Path   string
	Pod    int // index of the offending pod, or -1
	Device int // index of the offending device, or -1
	Err    error
}

func (e *CheckpointError) Error() string {
	msg := "deviceplugin: checkpoint " + e.Path
	if e.Pod >= 0 {
		msg += fmt.Sprintf(" pods[%d]", e.Pod)
	}
	if e.Device >= 0 {
		msg += fmt.Sprintf(" devices[%d]", e.Device)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns [ErrCheckpoint] and the cause.
func (e *CheckpointError) Unwrap() []error { return []error{ErrCheckpoint, e.Err} }

// Wire forms, with explicit JSON names so that the format does not follow
// Go renames.
type checkpointJSON struct {
	Version int          `json:"version"`
	BootID  string       `json:"bootID,omitempty"`
	Pods    []podJSON    `json:"pods"`
	Devices []deviceJSON `json:"devices"`
}

type podJSON struct {
	UID       string    `json:"uid"`
	Claim     string    `json:"claim"`
	FirstSeen time.Time `json:"firstSeen"`
	Scheduled bool      `json:"scheduled"`
	Started   bool      `json:"started,omitempty"`
	Inherited bool      `json:"inherited"`
	// InheritedEntries is an annotation value (reservation.Encode).
	InheritedEntries string `json:"inheritedEntries,omitempty"`
}

type deviceJSON struct {
	PodUID         string               `json:"podUID"`
	ContainerIndex int                  `json:"containerIndex"`
	DeviceIndex    int                  `json:"deviceIndex"`
	GPUUUID        string               `json:"gpuUUID"`
	Profile        string               `json:"profile"`
	Placement      capability.Placement `json:"placement"`
	MIGUUID        string               `json:"migUUID"`
	GIID           uint32               `json:"gpuInstanceID"`
	CIID           uint32               `json:"computeInstanceID"`
	Adopted        bool                 `json:"adopted"`
	PreviousBoot   bool                 `json:"previousBoot,omitempty"`
}

// EncodeCheckpoint returns the checkpoint's file content, pods ordered by
// UID and devices by owner, so that equal checkpoints encode equally.
func EncodeCheckpoint(c Checkpoint) ([]byte, error) {
	out := checkpointJSON{Version: checkpointVersion, BootID: c.BootID, Pods: []podJSON{}, Devices: []deviceJSON{}}
	for _, p := range c.Pods {
		pj := podJSON{UID: p.UID, Claim: p.Claim, FirstSeen: p.At.UTC(), Scheduled: p.Scheduled,
			Started: p.Started, Inherited: p.Inherited}
		if len(p.InheritedEntries) > 0 {
			pj.InheritedEntries = reservation.EncodeString(p.InheritedEntries)
		}
		out.Pods = append(out.Pods, pj)
	}
	for _, d := range c.Devices {
		out.Devices = append(out.Devices, deviceJSON{PodUID: d.PodUID, ContainerIndex: d.ContainerIndex, DeviceIndex: d.DeviceIndex,
			GPUUUID: d.GPUUUID, Profile: d.Profile, Placement: d.Placement,
			MIGUUID: d.Runtime.MIGUUID, GIID: d.Runtime.GPUInstanceID, CIID: d.Runtime.ComputeInstanceID, Adopted: d.Adopted,
			PreviousBoot: d.PreviousBoot})
	}
	slices.SortFunc(out.Pods, func(a, b podJSON) int { return strings.Compare(a.UID, b.UID) })
	slices.SortFunc(out.Devices, func(a, b deviceJSON) int {
		if c := strings.Compare(a.PodUID, b.PodUID); c != 0 {
			return c
		}
		if a.ContainerIndex != b.ContainerIndex {
			return a.ContainerIndex - b.ContainerIndex
		}
		return a.DeviceIndex - b.DeviceIndex
	})
	return json.MarshalIndent(out, "", "  ")
}

// DecodeCheckpoint parses a checkpoint file's content strictly: unknown
// fields, trailing data, a version other than 1, an empty or repeated pod
// UID, a claim kube.ValidClaim refuses, a missing first observation time,
// inherited entries of a pod not inherited, that do not decode or that
// name no whole runtime identity, a device without owner, with negative
// or repeated indexes, whose
// reservation and identity reservation.Validate refuses, or that names a
// MIG UUID or GPU instance another device of the same boot names, or
// overlaps another device's placement on its GPU, are each a
// [*CheckpointError] naming the pod or device; path only labels them.
func DecodeCheckpoint(path string, data []byte) (Checkpoint, error) {
	bad := func(pod, dev int, err error) (Checkpoint, error) {
		return Checkpoint{}, &CheckpointError{Path: path, Pod: pod, Device: dev, Err: err}
	}
	var in checkpointJSON
	if err := atomicfile.DecodeJSON(data, &in); err != nil {
		return bad(-1, -1, err)
	}
	if in.Version != checkpointVersion {
		return bad(-1, -1, fmt.Errorf("version %d, want %d", in.Version, checkpointVersion))
	}
	out := Checkpoint{BootID: in.BootID}
	seen := map[string]bool{}
	for i, p := range in.Pods {
		o, err := decodePod(p, seen)
		if err != nil {
			return bad(i, -1, err)
		}
		seen[p.UID] = true
		out.Pods = append(out.Pods, o)
	}
	owners := map[managedRef]bool{}
	migs := map[string]bool{}
	gis := map[string]bool{}
	for j, d := range in.Devices {
		h := HandedDevice{PodUID: d.PodUID, ContainerIndex: d.ContainerIndex, DeviceIndex: d.DeviceIndex, GPUUUID: d.GPUUUID,
			Profile: d.Profile, Placement: d.Placement, Adopted: d.Adopted, PreviousBoot: d.PreviousBoot,
			Runtime: reservation.RuntimeIdentity{MIGUUID: d.MIGUUID, GPUInstanceID: d.GIID, ComputeInstanceID: d.CIID}}
		owner := managedRef{types.UID(d.PodUID), d.ContainerIndex, d.DeviceIndex}
		if d.PodUID == "" || owners[owner] {
			return bad(-1, j, errors.New("empty or repeated owner"))
		}
		owners[owner] = true
		if err := reservation.Validate([]reservation.Allocation{h.allocation()}); err != nil {
			return bad(-1, j, err)
		}
		// A previous boot's identities name nothing now: only
		// placements must not overlap across boots.
		gi := fmt.Sprint(d.PreviousBoot, "/", d.GPUUUID, "/", d.GIID)
		mig := fmt.Sprint(d.PreviousBoot, "/", d.MIGUUID)
		if migs[mig] || gis[gi] {
			return bad(-1, j, errors.New("MIG UUID or GPU instance named by another device"))
		}
		migs[mig], gis[gi] = true, true
		for _, o := range out.Devices {
			if o.GPUUUID == h.GPUUUID && o.Placement.Overlaps(h.Placement) {
				return bad(-1, j, fmt.Errorf("placement %v overlaps another device's %v on %s", h.Placement, o.Placement, h.GPUUUID))
			}
		}
		out.Devices = append(out.Devices, h)
	}
	return out, nil
}

// decodePod returns p as decoded, or why DecodeCheckpoint refuses it;
// seen holds the UIDs of the pods decoded before it.
func decodePod(p podJSON, seen map[string]bool) (PodObservation, error) {
	switch {
	case p.UID == "" || seen[p.UID]:
		return PodObservation{}, errors.New("empty or repeated pod UID")
	case !kube.ValidClaim(p.Claim):
		return PodObservation{}, errors.New("claim is not one the pod source makes")
	case p.FirstSeen.IsZero():
		return PodObservation{}, errors.New("no first observation time")
	}
	entries, err := decodeInheritedEntries(p)
	if err != nil {
		return PodObservation{}, err
	}
	return PodObservation{UID: p.UID, Inherited: p.Inherited, InheritedEntries: entries,
		Observation: kube.Observation{Claim: p.Claim, At: p.FirstSeen, Scheduled: p.Scheduled, Started: p.Started}}, nil
}

// decodeInheritedEntries returns p's inherited entries: those of an
// inherited pod, each naming a whole runtime identity.
func decodeInheritedEntries(p podJSON) ([]reservation.Allocation, error) {
	if p.InheritedEntries == "" {
		return nil, nil
	}
	if !p.Inherited {
		return nil, errors.New("inherited entries of a pod not inherited")
	}
	entries, err := reservation.DecodeString(p.InheritedEntries)
	if err != nil {
		return nil, fmt.Errorf("inherited entries: %w", err)
	}
	for k, a := range entries {
		if _, ok := a.Runtime(); !ok {
			return nil, fmt.Errorf("inherited entry %d names no whole runtime identity", k)
		}
	}
	return entries, nil
}

// ReadCheckpoint reads the checkpoint at path. A missing file is reported
// by exists false and an empty checkpoint; anything else that fails is a
// [*CheckpointError].
func ReadCheckpoint(path string) (c Checkpoint, exists bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, true, &CheckpointError{Path: path, Pod: -1, Device: -1, Err: err}
	}
	c, err = DecodeCheckpoint(path, data)
	return c, true, err
}

// WriteCheckpoint replaces the checkpoint at path atomically and durably
// (internal/leaf/atomicfile): a crash leaves the old or the new content.
func WriteCheckpoint(path string, c Checkpoint) error {
	data, err := EncodeCheckpoint(c)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
