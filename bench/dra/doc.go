// Package dra models a MIG node the way a Kubernetes DRA driver publishes it
// with KEP-4815 partitionable devices, and drives the real structured
// allocator of k8s.io/dynamic-resource-allocation on it, so that dynmig's
// placement package can be compared with it on the same requests and the
// same node state.
//
// # Model
//
// A node's GPUs ([capability.GPU], as dynmig discovers them) become one
// resource pool, named after the node, of driver [DriverName]:
//
//   - Counter slices carry the SharedCounters: one counter set per GPU,
//     "gpu-<index>-counter-set", holding one counter per memory slot,
//     "memory-slice-0" .. "memory-slice-<width-1>", each of value 1, and a
//     "multiprocessors" counter holding the largest profile's SM count. A
//     slice holds at most [resourceapi.ResourceSliceMaxCounterSets] sets.
//   - Device slices hold one device per (GPU, profile, published placement),
//     named "gpu-<index>-<profile>-<start>" with the profile's dots and
//     pluses turned into dashes. A device consumes, from its GPU's counter
//     set, the memory-slice counters of the slots its placement covers
//     ([start, start+size), half-open) and the profile's SMs. A slice holds
//     at most [resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures]
//     devices, in (GPU index, profile order, start) order, the order the
//     allocator tries them in.
//
// Devices carry the attributes "type" ("mig"), "profile", "index" (GPU
// index), "uuid" (parent GPU UUID), "placementStart" and "placementSize",
// and the capacities "memory" (MiB) and "multiprocessors". This is the shape
// KEP-4815 describes for dynamic MIG and the NVIDIA DRA driver publishes,
// minus the engine counters (copy engines, decoders, encoders, JPEG, OFA),
// which never bind for the plain profiles used here.
//
// A request becomes a ResourceClaim of [DeviceClassName] (the class selects
// the driver's "mig" devices by CEL). The profile is chosen by attribute,
// answering the question dynmig's selector answers: an exact profile becomes
// one request whose CEL selector names it; a memory demand becomes a
// prioritized list (firstAvailable) of the profiles whose memory covers it,
// smallest first in [capability.CompareProfiles] order, at most
// [resourceapi.FirstAvailableDeviceRequestMaxSize] of them, one CEL
// selector each. The allocator then takes, for the first sub-request that
// fits, the first free device in slice order: lowest GPU, then lowest start.
// That is exactly [placement.FirstFit]; the tests check it choice for choice.
//
// # State and allocation
//
// A [Node] holds the allocated devices, the scheduler's AllocatedState. Each
// decision builds a fresh allocator with [structured.NewAllocator] (the
// allocator caches the pool's available counters for its lifetime, as the
// scheduler does for one pod's cycle) and calls Allocate for one claim, as
// kube-scheduler's DRA plugin does in PreFilter and Filter for one pod on one
// node. [Node.Commit] and [Node.Release] change the allocated set.
//
// # Published order
//
// Because the allocator is first fit in slice order, the order a driver
// publishes its devices in decides where instances go. [NodeOptions].Order
// replaces the model's (GPU, profile, start) order by another [Order]
// (static, or refreshed from the occupancy and republished with a new pool
// generation after every change, or after every RefreshEvery-th), and
// [NodeOptions].Layout says how the order is cut into slices and in which
// order the allocator reads them: kube-scheduler lists a pool's slices from
// an informer cache, in no particular order, and the allocator does not
// sort them ([Layout]). [Orders] are the orders compared (the NVIDIA DRA
// driver's among them), [SimRun] replays a trace with a simulated allocator
// (the first free matching device in the same slices, same shuffle) that
// the tests check against the real one, and cmd/publishorder prints the
// comparison.
//
// # Classification
//
// When the allocator finds no allocation, the rejection is classified with
// dynmig's own definition (placement's explanation on the same occupancy):
// capacity when no GPU has enough free slots for the smallest fitting
// profile, fragmentation when one has enough free slots but no legal free
// placement. A DRA rejection that dynmig's exhaustive scan can place is an
// error ([ErrDisagree]): the two models would not be answering the same
// question.
//
// # Concurrency
//
// A [Model] is immutable after [NewModel] and safe for concurrent use. A
// [Node] is not safe for concurrent use. Nothing here starts a goroutine.
package dra
