// Package dradriver is a Kubernetes DRA (dynamic resource allocation) kubelet
// plugin for dynamic MIG, built on k8s.io/dynamic-resource-allocation's
// kubeletplugin: it publishes a node's MIG partitions as KEP-4815
// partitionable devices for the scheduler's structured allocator, and
// realizes exactly the partitions the allocator chose when the kubelet
// prepares a ResourceClaim.
//
// # Publication
//
// The node's GPUs, as [capability.Discover] reads them from the
// [realize.Realizer] under the allowlist, become one resource pool of
// driver [DriverName] named after the node ([Catalog]):
//
//   - one counter set per GPU, "gpu-<index>": a counter per memory slot
//     ("memory-slice-<slot>", value 1), "multiprocessors" (the largest
//     profile's SMs), and the media-engine counters of [placement.Engines]
//     where the GPU's profiles need them ("ofa" for the one optical-flow
//     set of "+me" profiles, "decoders" on GPUs with "+me.all" profiles);
//   - one device per (GPU, profile, published placement), named by
//     [Partition.DeviceName] ("mig-<GPU UUID>-<profile>-<start>-<size>"),
//     consuming its slots [start, start+size) (half-open), its profile's
//     SMs and engines, with the attributes "type" ("mig"), "profile",
//     "gpuUUID", "gpuIndex", "model", "placementStart", "placementSize",
//     "computeSlices", and the capacities "memory" (bytes) and
//     "multiprocessors".
//
// The allocator takes, for each request, the first device in slice order
// whose counters are free. Devices are therefore published in
// [placement.PublishOrder]'s order under the slots already allocated
// (GPUs merged per profile by cost, GPU index, start), all devices of a
// profile in one slice, and republished whenever the allocated set, the
// GPUs' health or the allowlist changes; the allocator then places a
// request naming one profile where dynmig's default policy would. An
// unhealthy GPU keeps its counter set and publishes no device.
//
// # Health
//
// When the backend is a realize.HealthWatcher, Run follows a
// realize.HealthMonitor with [Config.HealthChecks]: a failed NVML wait is
// logged and the watch goes on (every GPU unhealthy, then what NVML
// reports next); a watch that cannot be opened makes every GPU unmonitored
// and is retried with backoff. An unhealthy or unmonitored GPU publishes
// no free device and gets no new instance ([ErrUnhealthyGPU]); prepared
// claims keep theirs. Prepared devices a failure hits are published with
// a device taint ([TaintKey], KEP-5055, beta since Kubernetes 1.36):
// NoExecute when the GPU is lost, so that the pods using it are evicted,
// NoSchedule otherwise ([Driver.Resources]). [Driver.WatchHealthStatus]
// reports every prepared device's health to the kubelet (KEP-4680), which
// shows it in the status of the pods using it. Health is not kept across a
// restart of the driver.
//
// # Preparation and trust
//
// A claim's devices are read only from its status.allocation (which the
// scheduler writes, not the claim's creator), and only results of
// [DriverName] in this node's pool count. A device name that does not
// decode names no hardware and fails the claim; one that decodes to a
// partition the node does not publish (another allowlist, another GPU) is
// withheld: respected, never realized. Each claim is one
// [realize.Holder] (its UID owns the devices; request and device
// positions are the owner's indexes) in a [realize.Demand] built from the
// claim listing ([ClaimSource], by default an informer on every
// ResourceClaim) plus the checkpointed claims no longer allocated here,
// listed as released. realize decides the rest: two claims with
// overlapping placements are both withheld and nothing is destroyed while
// they are listed; an incomplete listing never authorises destruction; an
// instance in use is never destroyed.
//
// PrepareResourceClaims realizes a claim's devices through
// [realize.Manager.Prepare] (exact placements only, rollback on failure,
// idempotent), writes one CDI spec file per claim into the CDI directory
// (one CDI device per MIG device, "k8s.mig.dynmig.io/mig=<claim
// UID>-<device>", whose container edits set NVIDIA_VISIBLE_DEVICES to
// the MIG device's UUID), and records the runtime identities in the
// checkpoint file of the plugin data directory, written atomically.
// UnprepareResourceClaims releases the claim's instances through
// [realize.Manager.Unprepare], then removes its CDI spec and checkpoint
// entry; it works for a claim already deleted from the API, and a claim
// with nothing left succeeds. After a restart, [Driver.Setup] reads the
// checkpoint and adopts the prepared claims' instances (by their
// recorded identities, or at their allocated placements when the
// checkpoint was lost); a checkpoint that cannot be read stops the driver
// rather than forget what it prepared.
//
// A container given several MIG devices by CDI sees the last one's
// NVIDIA_VISIBLE_DEVICES: the variable holds one value. One device per
// container, or per request that a container uses, avoids that.
//
// # Concurrency
//
// A [Driver] is safe for concurrent use; the kubelet plugin helper also
// serialises the DRA calls. [Driver.Run] starts the claim informer, the
// health watch and the kubelet plugin's servers and ResourceSlice
// controller, and stops them all before it returns. No other method
// starts a goroutine. A [Catalog] is immutable.
package dradriver
