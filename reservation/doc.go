// Package reservation implements the pod reservation contract of dynamic
// MIG: the hami.io/vgpu-mig-allocations annotation that the scheduler writes
// and the device plugin completes, and what a node derives from it.
//
// # Model
//
// An [Allocation] is one MIG device reserved for one container: the physical
// GPU (by UUID), the profile name and the exact placement the scheduler
// chose, and, once the device plugin has realized it, the runtime identity
// (MIG UUID, GPU instance ID, compute instance ID). A pod's annotation value
// is a JSON array of such entries.
//
//   - [Decode], [DecodeString] and [DecodeWithOptions] parse a value
//     strictly (syntax, JSON types, number ranges, duplicate and unknown
//     keys) with a hand-written scanner; errors are [*DecodeError] values
//     matching [ErrMalformed] and a kind sentinel such as [ErrType].
//   - [Encode] and [AppendEncode] write exactly the bytes the deployed
//     writer (encoding/json) writes.
//   - [Validate] and [ValidateAgainst] check the contract's semantic rules
//     and report every problem as a [*ValidationError] matching
//     [ErrInvalid] and a problem sentinel such as [ErrOverlap].
//   - [SetRuntime] fills the runtime identity into one entry and builds the
//     JSON merge patch for the pod.
//   - [Desired] turns a [Snapshot] of a node's pods into the [DesiredSet]:
//     the active reservations and whether destructive reconciliation is
//     authorised, with typed reasons when it is not.
//   - [ValidateRequests] applies the trust rule below; [Pod.Released] is
//     the one rule for when a pod's devices may be reclaimed.
//   - [ParseLegacyDevices] and [IsLegacyIdentifier] recognise v2.9
//     template/slot identifiers, which are never adoptable.
//   - [Collector] exports hami_node_gpu_mig_instance_info (and, on request,
//     the legacy nodeGPUMigInstance) for Prometheus.
//
// # Trust rule
//
// Who owns what is decided from facts a pod's creator cannot write, never
// inferred from what it can. The rule relies on these facts alone:
//
//  1. Server-set fields: a container's resource limits (immutable spec),
//     the pod's UID and creation time, its phase, deletion timestamp and
//     container statuses (written by the API server and the kubelet), and
//     the PodScheduled condition, which the API server sets when it binds
//     a pod and a pod created with spec.nodeName preset lacks until its
//     kubelet admits it.
//  2. The binder's own write: the scheduler extender writes the record in
//     the binding itself (the API server copies the Binding's annotations
//     onto the pod in the write that binds it, conditioned on the version
//     the extender read), so a record that arrives on the node with a
//     binding of that scheduler is the binder's ([Pod.RecordScheduled]).
//  3. The node-local record: the observer's own first observation of each
//     claim ([Pod.RecordSeen], [Pod.RecordScheduled]) and which instance
//     it handed to which container, kept across restarts (the device
//     plugin's checkpoint); runtime identities count only as that record
//     gives them.
//
// From them:
//
//   - An entry counts only for a container that requests the MIG resource
//     (nvidia.com/gpu by default) with the matching device count: a
//     container c with [Pod.DeviceRequests][c] == n > 0 must have exactly
//     n entries, device indexes 0..n-1 ([ValidateRequests], otherwise
//     [ErrNotRequested]).
//   - A pod that requests no MIG device owns none: whatever its record
//     holds, undecodable, invalid or legacy, is untrusted and withholds
//     nothing.
//   - Of two valid records whose placements overlap, the one that arrived
//     with a scheduler's binding wins over one that did not
//     ([ErrUnscheduledConflict]), unless the latter was first seen on a
//     pod the kubelet had already admitted ([Pod.RecordStarted]: the
//     observer lost its node-local record, and the running containers may
//     hold a device it handed out); otherwise the one first seen earlier
//     wins ([ErrLaterConflict]).
//
// Untrusted and losing entries go to [DesiredSet.Withheld] (claims still
// respected: nothing they name or overlap is destroyed) and are reported in
// [DesiredSet.Untrusted], without withholding authorisation. What the
// facts cannot decide withholds authorisation and makes the pods
// [DesiredSet.Unknown]: a record that cannot be read of a pod that requests
// a device, two records first seen at the same time that the binding
// does not decide (both scheduled, neither, or the unscheduled one first
// seen started), and two records naming one MIG UUID or GPU instance (which
// the node-local record resolves before [Desired] sees them: an identity
// counts only for the container that was handed the instance).
//
// The rule relies on fact 3 surviving restarts. Where the node-local
// record is lost (an operator deleted a corrupt checkpoint), one residual
// remains, counted by package systemtest's device-plugin model: a forged
// copy of an ended pod's record, runtime identity included, cannot be
// told from a record whose realization the lost record held, and may be
// adopted for the forger. A record its owner replaced after the binding
// is, at the first listing, indistinguishable from the binder's; it
// therefore does not outrank a record first seen on a pod the kubelet
// already runs ([Pod.RecordStarted]), whose containers may use a device
// the lost record held.
//
// # Release rule
//
// A pod's devices may be reclaimed only once [Pod.Released] holds: it
// reached Succeeded or Failed, or it is deleting and every container is
// terminated or its grace period (the deletionTimestamp) has passed at
// [Snapshot.Now]; or the pod is gone from the API. Until then a deleting
// pod's containers may still run and its reservations stay in the desired
// set.
//
// # Units and intervals
//
// Placements are in memory slots of the GPU's placement grid, as NVML
// reports them, not compute slices. A placement occupies the half-open
// interval [start, start+size): [0,2) and [2,4) do not overlap. Indexes
// are zero-based: containerIndex counts init containers first, then regular
// containers; deviceIndex counts devices within one container's request.
// GPU and compute instance IDs are driver-assigned unsigned 32-bit numbers
// in which 0 is valid, so [OptionalID] marks presence separately.
//
// # Zero values
//
// The zero [Allocation] fails validation (no GPU UUID). The zero [Pod]
// requests no device, so none of its entries is trusted. The zero
// [Snapshot] is incomplete, taken at an unknown time. The zero
// [OptionalID] is absent. The zero [DecodeOptions], [PatchOptions] and
// [CollectorOptions] are the strict defaults. The zero [DesiredSet] is empty
// and authorises nothing. An empty annotation value decodes to no
// allocations.
//
// # Concurrency
//
// All functions are safe for concurrent use and keep no state between calls.
// Values they return are owned by the caller. A [Collector] may be
// collected concurrently; it calls its source once per collection.
package reservation
