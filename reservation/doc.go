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
//   - [ParseLegacyDevices] and [IsLegacyIdentifier] recognise v2.9
//     template/slot identifiers, which are never adoptable.
//   - [Collector] exports hami_node_gpu_mig_instance_info (and, on request,
//     the legacy nodeGPUMigInstance) for Prometheus.
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
// The zero [Allocation] fails validation (no GPU UUID). The zero
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
