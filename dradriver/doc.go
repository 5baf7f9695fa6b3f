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
//   - one counter set per GPU, "gpu-<index>", sized from the GPU's full
//     profile table as NVML reports it, whatever the allowlist publishes
//     (capacity comes from the hardware, not from policy): a counter per
//     memory slot ("memory-slice-<slot>", value 1), "multiprocessors" (the
//     largest profile's SMs), and the media-engine counters of
//     [placement.Engines] where the GPU's profiles need them ("ofa" for
//     the one optical-flow set of "+me" profiles, "decoders" on GPUs with
//     "+me.all" profiles);
//   - one device per (GPU, profile, published placement), named by
//     [Partition.DeviceName] ("mig-<GPU UUID>-<profile>-<start>-<size>"),
//     consuming its slots [start, start+size) (half-open), its profile's
//     SMs and engines, with the attributes "type" ("mig"), "profile",
//     "gpuUUID", "gpuIndex", "model", "placementStart", "placementSize",
//     "computeSlices", and the capacities "memory" (bytes) and
//     "multiprocessors".
//
// A device whose profile the allowlist no longer publishes but that a
// claim is allocated, or a checkpointed claim holds, stays published
// ([PublishedDevice.Retained]) with a NoSchedule taint
// ([RetainedTaintKey]): the allocator keeps counting its slots until it is
// released, and gives it to no new claim.
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
// NoSchedule otherwise ([Driver.Resources]). A retained device gets every
// taint a published one gets, beside its [RetainedTaintKey]. [Driver.WatchHealthStatus]
// reports every prepared device's health to the kubelet (KEP-4680), which
// shows it in the status of the pods using it. Each change is also an
// Event on the node ([EventSource], package kube's reasons such as
// GPUUnhealthy), as the device plugin records. Health is not kept across a
// restart of the driver.
//
// # Preparation and trust
//
// A claim's devices are read only from its status.allocation (which the
// scheduler writes, not the claim's creator), and only results of
// [DriverName] in this node's pool count. A device name that does not
// decode names no hardware and fails the claim; one that decodes to a
// partition the node does not publish (another allowlist, another GPU) is
// withheld: respected, never realized. A result with adminAccess is never
// an exclusive holder: it is exposed (its parent GPU) without creating,
// holding or destroying anything, and conflicts with no claim.
//
// # Lifecycle: release only by the kubelet
//
// The checkpoint in the plugin data directory is the driver's own record
// of what it handed out, written atomically, with the node's boot ID. A
// claim is checkpointed PrepareStarted, with its allocated devices, before
// any instance is created for it, and PrepareCompleted, with the runtime
// identities, once its instances exist and its CDI spec is written, before
// the kubelet is answered. Each checkpointed claim is one
// [realize.Holder] (its UID owns the devices; request and device
// positions are the owner's indexes) of its checkpointed devices, in a
// [realize.Demand] that adds the listed claims allocated to this node
// ([ClaimSource], by default an informer on every ResourceClaim) that are
// not checkpointed. No holder is ever released: a checkpointed claim's
// instances are destroyed only by its UnprepareResourceClaims, never
// because the API server no longer shows the claim allocated here (a
// force-deleted pod's container may still hold the device; a new instance
// at the same placement would get the same IDs). The one exception is a
// PrepareStarted claim, never handed to a container, that the API server
// confirms deleted: maintenance unprepares it, since the kubelet may never
// do so.
//
// The control plane can hand a device to a new claim before the node has
// released it. A device that overlaps a device another checkpointed claim
// holds is therefore refused ([ErrDeviceHeld]) and, while listed, withheld
// (never realized nor adopted); the kubelet retries until the holder is
// unprepared. A claim re-allocated under the same UID while its earlier
// preparation is PrepareCompleted is refused ([ErrReallocated]) until that
// preparation is unprepared: its checkpointed instance stays its own,
// across restarts, and is never adopted for another claim.
//
// PrepareResourceClaims realizes a claim's devices through
// [realize.Manager.Prepare] (exact placements only, rollback on failure,
// idempotent), writes one CDI spec file per claim into the CDI directory
// (one CDI device per device, "k8s.mig.dynmig.io/mig=<claim
// UID>-<device>"; see CDI below), and checkpoints it. UnprepareResourceClaims releases
// the claim's checkpointed instances through [realize.Manager.Unprepare],
// then removes its CDI spec and checkpoint entry; it depends only on the
// claim's own checkpoint entry and the hardware (conflicts between other
// claims and an incomplete listing do not hold it up), works for a claim
// already deleted from the API, and succeeds for a claim with nothing
// left. After a restart, [Driver.Setup] reads the checkpoint and adopts
// the checkpointed claims' instances (by their recorded identities, or at
// their checkpointed placements while PrepareStarted); a checkpoint that
// cannot be read stops the driver rather than forget what it prepared. A
// checkpoint written under another boot ID describes instances and
// containers that did not survive the reboot: its claims are dropped.
//
// Two claims whose overlapping devices are both listed and neither
// checkpointed (a scheduler bug) withhold maintenance's authorisation, as
// realize's rules say; an incomplete listing never authorises destruction;
// an instance in use is never destroyed.
//
// # CDI
//
// Each claim's CDI spec ([ClaimSpecWith]) gives one CDI device per
// device. With Config.DeviceNodes (real GPUs: [ProcNodes]), a MIG
// device's edits inject its GPU instance's and compute instance's
// capability nodes (/dev/nvidia-caps/nvidia-cap<minor>) and its parent
// GPU's /dev/nvidia<minor>, and the spec injects /dev/nvidiactl and
// /dev/nvidia-uvm(-tools), all with their numbers, so a runtime that only
// applies CDI edits (the NVIDIA container toolkit in CDI mode, where an
// unprivileged pod's NVIDIA_VISIBLE_DEVICES is not honoured) grants
// exactly the claim's MIG devices. With Config.CDIGenerator ([CDIGenerator];
// real GPUs: package nvmlhal/nvcdigen, which asks NVIDIA's container
// toolkit library; fakehal: [NewFakeCDI]) the edits are the generator's
// instead ([ClaimSpecFrom]): the same nodes, and from NVIDIA's library
// also the driver's libraries and binaries and the toolkit's hooks in
// the spec's common edits, so a container needs neither legacy mode nor
// libraries in its image. Every device's edits also set
// NVIDIA_VISIBLE_DEVICES to the MIG UUIDs of all devices of its request,
// for runtimes that act on it (the toolkit's legacy mode, which also
// mounts the driver's libraries); a container given several MIG devices
// of one request sees them all. A container using two requests of one
// claim sees the variable of the request applied last: its device nodes
// are still all there. Under a CDI-only runtime without a full generator
// the image must carry the driver's user-space libraries (or another CDI
// spec must mount them).
//
// # Concurrency
//
// A [Driver] is safe for concurrent use; the kubelet plugin helper also
// serialises the DRA calls. [Driver.Run] starts the claim informer, the
// health watch and the kubelet plugin's servers and ResourceSlice
// controller, and stops them all before it returns. No other method
// starts a goroutine. A [Catalog] is immutable.
package dradriver
