// Package placement chooses MIG profiles and physical placements for pods and
// keeps the scheduler's occupancy ledger.
//
// # Model
//
// A GPU's MIG capability ([capability.GPU]) is compiled into a [Grid]: its
// profiles, ordered by NVML memory, then slice count, then name
// ([capability.CompareProfiles]), each with the placements NVML publishes.
// Placement legality comes only from those published placements; nothing is
// derived from slice counts or names. The grid width is the largest
// placement end among the GPU's profiles: 4 slots on A30, 8 on A100, H100,
// H200 and B200, 12 on RTX PRO 6000 Blackwell. No width is assumed; any grid
// of up to 64 slots works.
//
// The taken slots of one GPU are an [Occupancy], a uint64 bitmask with bit i
// set when slot i is taken. A placement fits when its mask ANDed with the
// occupancy is zero: one instruction.
//
// A pod's demand is a [Request]: per container a device count and a
// per-device [Memory] demand (MiB, percent of the GPU, or the whole GPU,
// mirroring nvidia.com/gpu, nvidia.com/gpumem and
// nvidia.com/gpumem-percentage), plus the pod's profile preference and GPU
// UUID and type allow and deny lists. A [Selector] places all devices of all
// containers at once, or none, and returns one [Assignment] per device:
// container index, device index, GPU UUID, profile name and placement,
// exactly the scheduler-written fields of a hami.io/vgpu-mig-allocations
// entry. A pod that does not fit gets an [*UnschedulableError] whose reason
// is one of [ErrExcluded], [ErrNoProfile], [ErrCapacity], [ErrFragmented] or
// [ErrSearchLimit].
//
// A [Policy] ranks the legal candidates of a device: [FirstFit],
// [V210] (the deployed HAMi v2.10 order) and the default
// [FragmentationAware]. [NodeScore] ranks fitting nodes (bin-packing by
// default). The [Ledger] holds every node's occupancy, built from pod
// reservations and updated per pod, with assume-before-bind.
//
// Media engines are a per-GPU budget independent of slots: a GPU refuses
// an instance whose decoders or optical-flow/JPEG engines other instances
// already hold (on an A30, 1g.6gb+me and 2g.12gb+me exclude each other; on
// an RTX PRO 6000 a +me.all instance excludes every other engine-bearing
// one). The wire format carries no engine counts, so a [Grid] derives them
// from the profile names and table ([Engines] states the rules and which
// are read from NVIDIA's guide), [GPUState].Engines holds what a GPU's
// instances take, and selection never adds an instance whose engines are
// taken.
//
// For Kubernetes DRA drivers, whose structured allocator takes the first
// free device in slice order, [PublishOrder] and [PublishNode] give the
// order to publish partitionable devices in so that the allocator chooses
// what the default policy would; republished after every change
// (BENCHMARKS.md, "DRA published order", has the figures).
//
// Package placement/sim replays arrival/departure traces against the
// policies; migctl simulate prints the comparison.
//
// # Units and intervals
//
// Memory is in MiB, as NVML reports MemorySizeMB. Placements are in memory
// slots of the GPU's placement grid, not compute slices. A placement covers
// the half-open interval [start, start+size): [0,2) and [2,4) do not
// overlap.
//
// # Fragmentation metric
//
// The default policy, [FragmentationAware] with the [Stranding] metric,
// keeps the most future placements open. For a GPU with taken slots U let
//
//	stranded(U) = free slots of the grid - size of the largest free published placement
//	capacity(U) = sum over the GPU's profiles p of the largest number of
//	              further instances of p that fit under U
//
// (capacity is exact and cheap: for intervals, taking free placements by
// earliest end maximises their number). A candidate c costs, compared
// lexicographically,
//
//	( stranded(U|c) - stranded(U),  capacity(U) - capacity(U|c) )
//
// so the choice first avoids creating free slots that no single new instance
// can use together (and prefers filling such holes, a negative increase),
// then destroys as few future instances as possible. Only the chosen GPU
// changes, so this is also the change of the node-wide sums. Ties go to the
// lowest GPU position, then the lowest start, which piles small profiles
// onto GPUs that are already split and keeps empty GPUs whole (bin-packing
// across GPUs). Both values come from lookup tables indexed by U, built once
// per distinct profile table for grids of up to 12 slots, so a cost is two
// loads.
//
// Why this metric: on the heavy-churn traces of package placement/sim
// (A100, H100, A30 and RTX PRO 6000; uniform and skewed profile mixes;
// 8 GPUs) it was compared with capacity loss alone ([InstanceCapacity]), the
// slot-weighted number of distinct free placements blocked
// ([FreePlacements]), their slot-squared and unweighted variants, best fit,
// per-profile stranding, and every lexicographic order of up to three of
// stranding, capacity loss (plain and weighted by the demand mix), best
// fit, blocked placements and start (see the placement/sim
// documentation). It had, summed per model, under half of first fit's
// fragmentation rejections and is the only order found that accepts at
// least as many requests as both baselines on every A100 and H100 trace
// with their plain profiles. The per-trace target is not met: on the 4-unit buddy grids
// (A30, RTX PRO 6000) and on the A100 with the allowlist's profiles it
// accepts fewer than the better baseline on some traces (at worst 1.8%
// fewer), and it does not halve fragmentation rejections on every trace.
// No policy tried does: under overload, accepting a large request takes
// slots several small ones would have used, so a policy that turns fewer
// large requests away (fewer fragmentation rejections, higher slot
// utilisation) can accept fewer requests in all.
//
// # Determinism and bounds
//
// Equal inputs give equal outputs: candidate order is total (preference,
// profile order, policy cost, GPU position, start) and no map iteration or
// randomness is involved. A single-device request is an exhaustive scan, so
// it is pending only when no free published placement of a fitting profile
// exists on an allowed GPU. Multi-device pods are placed greedily, then by a
// depth-first search bounded by [SelectorOptions.MaxSteps] candidates per
// phase (see [Selector.Select]).
//
// # Concurrency
//
// [Grid] values are immutable and safe for concurrent use. [Occupancy],
// [GPUState], [Request] and [Assignment] are plain values. A [Selector]
// holds scratch space and must be used by one goroutine at a time; the
// package-level [Select] allocates a fresh one. A [Ledger] is safe for
// concurrent use, with one lock per node; see its documentation. No
// function starts a goroutine.
//
// The zero values: an Occupancy of 0 is an empty GPU; a zero [Memory] demands
// a whole GPU; a zero [Request] requests nothing; zero option structs use
// the defaults.
package placement
