package dradriver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/dynmig/dynmig/internal/leaf/atomicfile"
	"github.com/dynmig/dynmig/reservation"
)

// CheckpointFile is the checkpoint's file name in the plugin data
// directory.
const CheckpointFile = "checkpoint.json"

// checkpointVersion is the version WriteCheckpoint writes. ReadCheckpoint
// also reads version 1 (no boot ID, no states: every claim completed).
const checkpointVersion = 2

// Checkpoint lists the claims the driver began or finished preparing and
// has not yet unprepared, with the runtime identities of their MIG
// devices, and the boot ID of the node when it was written. It is the
// driver's own durable record of what it handed out: a restarted driver
// adopts these instances instead of destroying them, keeps them until the
// kubelet unprepares their claims, refuses to prepare their devices for
// another claim, and unprepares a claim that is gone from the API. The zero
// value is an empty checkpoint.
type Checkpoint struct {
	// BootID is the node's boot ID (the kernel's random boot_id) when the
	// checkpoint was written; "" for a version 1 file. A different boot
	// ID means the node rebooted since: no MIG instance and no container
	// of a checkpointed claim survived.
	BootID string
	Claims []PreparedClaim
}

// ClaimState is how far the driver got in preparing a claim.
type ClaimState string

// The claim states. A claim is checkpointed as PrepareStarted, with its
// allocated devices, before any of its MIG instances is created, and as
// PrepareCompleted, with their runtime identities, once they all exist
// and its CDI spec is written, before the kubelet is answered. A
// PrepareStarted claim was therefore never handed to a container.
const (
	PrepareStarted   ClaimState = "PrepareStarted"
	PrepareCompleted ClaimState = "PrepareCompleted"
)

// PreparedClaim is one checkpointed ResourceClaim.
type PreparedClaim struct {
	UID       string
	Namespace string
	Name      string
	State     ClaimState
	Devices   []PreparedDevice
}

// PreparedDevice is one checkpointed device of a claim: the allocation
// result it came from, the partition it names and, once prepared, the
// realized instance.
type PreparedDevice struct {
	Request        string // allocation result's request (may be "<request>/<subrequest>")
	Device         string // DRA device name in the node's pool
	ContainerIndex int    // the request's position among the claim's requests for this driver
	DeviceIndex    int    // the device's position within that request
	Partition      Partition
	// AdminAccess is the allocation result's adminAccess: such a device
	// is never realized or held, only exposed (see [Catalog.ClaimDevices]).
	AdminAccess bool
	// Runtime is the realized instance; zero while PrepareStarted and for
	// admin access.
	Runtime   reservation.RuntimeIdentity
	CDIDevice string // qualified CDI device name handed to the kubelet
}

// Claim returns the checkpointed claim with the given UID.
func (c Checkpoint) Claim(uid string) (*PreparedClaim, bool) {
	for i := range c.Claims {
		if c.Claims[i].UID == uid {
			return &c.Claims[i], true
		}
	}
	return nil, false
}

// Holds returns the checkpointed claim, other than except, one of whose
// devices without admin access overlaps p (same GPU, overlapping
// placement), and that device.
func (c Checkpoint) Holds(p Partition, except string) (*PreparedClaim, *PreparedDevice, bool) {
	for i := range c.Claims {
		pc := &c.Claims[i]
		if pc.UID == except {
			continue
		}
		for j := range pc.Devices {
			d := &pc.Devices[j]
			if !d.AdminAccess && d.Partition.GPUUUID == p.GPUUUID && d.Partition.Placement.Overlaps(p.Placement) {
				return pc, d, true
			}
		}
	}
	return nil, nil, false
}

// ErrCheckpoint is wrapped by every [*CheckpointError].
var ErrCheckpoint = errors.New("dradriver: unreadable checkpoint")

// CheckpointError reports a checkpoint file that cannot be read or
// trusted. The driver refuses to start on one rather than forget what it
// prepared: remove the file only after checking that no prepared claim's
// MIG device is still in use.
type CheckpointError struct {
	Path   string
	Claim  int // index of the offending claim, or -1
	Device int // index of the offending device, or -1
	Err    error
}

func (e *CheckpointError) Error() string {
	msg := "dradriver: checkpoint " + e.Path
	if e.Claim >= 0 {
		msg += fmt.Sprintf(" claims[%d]", e.Claim)
	}
	if e.Device >= 0 {
		msg += fmt.Sprintf(" devices[%d]", e.Device)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns [ErrCheckpoint] and the cause.
func (e *CheckpointError) Unwrap() []error { return []error{ErrCheckpoint, e.Err} }

// wire forms: explicit JSON names, so the file format does not follow Go
// field renames.
type checkpointJSON struct {
	Version int         `json:"version"`
	BootID  string      `json:"bootID,omitempty"`
	Claims  []claimJSON `json:"claims"`
}

type claimJSON struct {
	UID       string       `json:"uid"`
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	State     ClaimState   `json:"state,omitempty"`
	Devices   []deviceJSON `json:"devices"`
}

type deviceJSON struct {
	Request        string `json:"request"`
	Device         string `json:"device"`
	ContainerIndex int    `json:"containerIndex"`
	DeviceIndex    int    `json:"deviceIndex"`
	AdminAccess    bool   `json:"adminAccess,omitempty"`
	MIGUUID        string `json:"migUUID"`
	GIID           uint32 `json:"gpuInstanceID"`
	CIID           uint32 `json:"computeInstanceID"`
	CDIDevice      string `json:"cdiDevice"`
}

// EncodeCheckpoint returns the checkpoint's file content (version 2). The
// partition of each device is its device name, so it is not stored twice.
func EncodeCheckpoint(c Checkpoint) ([]byte, error) {
	out := checkpointJSON{Version: checkpointVersion, BootID: c.BootID, Claims: make([]claimJSON, 0, len(c.Claims))}
	for _, cl := range c.Claims {
		cj := claimJSON{UID: cl.UID, Namespace: cl.Namespace, Name: cl.Name, State: cl.State, Devices: make([]deviceJSON, 0, len(cl.Devices))}
		for _, d := range cl.Devices {
			cj.Devices = append(cj.Devices, deviceJSON{
				Request: d.Request, Device: d.Device, ContainerIndex: d.ContainerIndex, DeviceIndex: d.DeviceIndex,
				AdminAccess: d.AdminAccess,
				MIGUUID:     d.Runtime.MIGUUID, GIID: d.Runtime.GPUInstanceID, CIID: d.Runtime.ComputeInstanceID,
				CDIDevice: d.CDIDevice,
			})
		}
		out.Claims = append(out.Claims, cj)
	}
	return json.MarshalIndent(out, "", "  ")
}

// ErrCheckpointState: a checkpointed claim's state is unknown, or its
// devices do not fit it (a completed claim's device without admin access
// and without a runtime identity, a started claim's or an admin-access
// device with one).
var ErrCheckpointState = errors.New("dradriver: checkpointed claim state does not fit its devices")

// DecodeCheckpoint parses a checkpoint file's content, version 2 or 1 (a
// version 1 claim is PrepareCompleted). Unknown fields, another version,
// an empty or repeated claim UID, an unknown state or devices that do not
// fit it ([ErrCheckpointState]), a device name that does not decode (the
// partition is the name), a negative index, a repeated (ContainerIndex,
// DeviceIndex) within a claim, a runtime identity reservation would not
// accept, or two claims whose devices without admin access overlap are
// each a [*CheckpointError] naming the claim and device; path only labels
// them.
func DecodeCheckpoint(path string, data []byte) (Checkpoint, error) {
	bad := func(claim, dev int, err error) (Checkpoint, error) {
		return Checkpoint{}, &CheckpointError{Path: path, Claim: claim, Device: dev, Err: err}
	}
	in, err := decodeCheckpointJSON(data)
	if err != nil {
		return bad(-1, -1, err)
	}
	out := Checkpoint{BootID: in.BootID}
	seen := map[string]bool{}
	for i, cj := range in.Claims {
		if cj.UID == "" || seen[cj.UID] {
			return bad(i, -1, errors.New("empty or repeated claim UID"))
		}
		seen[cj.UID] = true
		cl, j, err := decodeClaim(in.Version, cj, out)
		if err != nil {
			return bad(i, j, err)
		}
		out.Claims = append(out.Claims, cl)
	}
	return out, nil
}

// decodeCheckpointJSON parses the file's one JSON object, of a version
// DecodeCheckpoint reads.
func decodeCheckpointJSON(data []byte) (checkpointJSON, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in checkpointJSON
	if err := dec.Decode(&in); err != nil {
		return in, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return in, errors.New("trailing data after the checkpoint object")
	}
	switch in.Version {
	case 1:
		if in.BootID != "" {
			return in, errors.New("version 1 has no boot ID")
		}
	case checkpointVersion:
	default:
		return in, fmt.Errorf("version %d, want 1 or %d", in.Version, checkpointVersion)
	}
	return in, nil
}

// decodeClaim decodes one claim of a file of the given version; prior
// holds the claims decoded before it. A failure returns the offending
// device's index, or -1 for the claim itself.
func decodeClaim(version int, cj claimJSON, prior Checkpoint) (PreparedClaim, int, error) {
	state := cj.State
	switch {
	case version == 1 && state == "":
		state = PrepareCompleted
	case version == 1:
		return PreparedClaim{}, -1, fmt.Errorf("%w: version 1 has no states", ErrCheckpointState)
	case state != PrepareStarted && state != PrepareCompleted:
		return PreparedClaim{}, -1, fmt.Errorf("%w: state %q", ErrCheckpointState, state)
	}
	cl := PreparedClaim{UID: cj.UID, Namespace: cj.Namespace, Name: cj.Name, State: state}
	idx := map[[2]int]bool{}
	for j, dj := range cj.Devices {
		d, err := decodeDevice(version, state, dj, idx)
		if err != nil {
			return PreparedClaim{}, j, err
		}
		if !d.AdminAccess {
			if other, _, held := prior.Holds(d.Partition, ""); held {
				return PreparedClaim{}, j, fmt.Errorf("device overlaps a device of claim %s", other.UID)
			}
		}
		cl.Devices = append(cl.Devices, d)
	}
	return cl, -1, nil
}

// decodeDevice decodes one device of a claim in the given state; idx
// holds the (ContainerIndex, DeviceIndex) of the claim's devices decoded
// before it, and gets this one's.
func decodeDevice(version int, state ClaimState, dj deviceJSON, idx map[[2]int]bool) (PreparedDevice, error) {
	p, err := ParseDeviceName(dj.Device)
	if err != nil {
		return PreparedDevice{}, err
	}
	key := [2]int{dj.ContainerIndex, dj.DeviceIndex}
	if dj.ContainerIndex < 0 || dj.DeviceIndex < 0 || idx[key] {
		return PreparedDevice{}, errors.New("negative or repeated (containerIndex, deviceIndex)")
	}
	if version == 1 && dj.AdminAccess {
		return PreparedDevice{}, errors.New("version 1 has no admin access")
	}
	idx[key] = true
	rt := reservation.RuntimeIdentity{MIGUUID: dj.MIGUUID, GPUInstanceID: dj.GIID, ComputeInstanceID: dj.CIID}
	recorded := rt != reservation.RuntimeIdentity{}
	if want := state == PrepareCompleted && !dj.AdminAccess; recorded != want {
		return PreparedDevice{}, fmt.Errorf("%w: %s device (admin access %t) with runtime identity %t", ErrCheckpointState, state, dj.AdminAccess, recorded)
	}
	a := reservation.Allocation{ContainerIndex: dj.ContainerIndex, DeviceIndex: dj.DeviceIndex,
		GPUUUID: p.GPUUUID, Profile: p.Profile, Placement: p.Placement}
	if recorded {
		a = a.WithRuntime(rt)
	}
	if err := reservation.Validate([]reservation.Allocation{a}); err != nil {
		return PreparedDevice{}, err
	}
	return PreparedDevice{
		Request: dj.Request, Device: dj.Device, ContainerIndex: dj.ContainerIndex, DeviceIndex: dj.DeviceIndex,
		Partition: p, AdminAccess: dj.AdminAccess, Runtime: rt, CDIDevice: dj.CDIDevice,
	}, nil
}

// ReadCheckpoint reads the checkpoint at path. A missing file is an empty
// checkpoint; anything else that fails is a [*CheckpointError].
func ReadCheckpoint(path string) (Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{}, nil
	}
	if err != nil {
		return Checkpoint{}, &CheckpointError{Path: path, Claim: -1, Device: -1, Err: err}
	}
	return DecodeCheckpoint(path, data)
}

// WriteCheckpoint replaces the checkpoint at path atomically and durably:
// a crash leaves the old or the new content, never a mix
// (internal/leaf/atomicfile).
func WriteCheckpoint(path string, c Checkpoint) error {
	data, err := EncodeCheckpoint(c)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// sortClaims orders claims by UID, so equal checkpoints encode equally.
func sortClaims(cs []PreparedClaim) {
	slices.SortFunc(cs, func(a, b PreparedClaim) int { return strings.Compare(a.UID, b.UID) })
}

// Checkpoint returns a copy of the prepared claims.
func (d *Driver) Checkpoint() Checkpoint {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cloneCheckpoint(d.ck)
}

func cloneCheckpoint(ck Checkpoint) Checkpoint {
	out := Checkpoint{BootID: ck.BootID, Claims: slices.Clone(ck.Claims)}
	for i := range out.Claims {
		out.Claims[i].Devices = slices.Clone(out.Claims[i].Devices)
	}
	return out
}

// updateCheckpoint applies f to a copy of the checkpoint, writes it
// atomically and, only when that succeeded, makes it current. What f adds
// is copied too: a claim being prepared keeps writing its own devices
// (their runtime identities) while builds read the current checkpoint
// without a lock.
func (d *Driver) updateCheckpoint(f func(*Checkpoint)) error {
	d.ckMu.Lock()
	defer d.ckMu.Unlock()
	ck := d.Checkpoint()
	f(&ck)
	ck = cloneCheckpoint(ck)
	sortClaims(ck.Claims)
	if err := WriteCheckpoint(d.CheckpointPath(), ck); err != nil {
		return fmt.Errorf("dradriver: write checkpoint: %w", err)
	}
	d.mu.Lock()
	d.ck = ck
	d.mu.Unlock()
	return nil
}
