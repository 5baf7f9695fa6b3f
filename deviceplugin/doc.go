// Package deviceplugin is a kubelet device plugin that
// realizes dynmig reservations: it publishes the node's MIG capability,
// adopts instances after a restart, realizes each container's reservation
// in Allocate through realize.Manager, writes the runtime identity back to
// the pod, and reclaims instances of finished pods.
//
// # Which pod is being admitted?
//
// The kubelet's Allocate call names only device IDs from the plugin's
// advertised list, not the pod. The plugin advertises interchangeable IDs
// (the reservation, not the ID, decides the hardware) and chooses the
// container from data only the API server and the kubelet set, as the
// kubelet itself orders admission:
//
//   - a candidate is a container of a pod bound to this node that is not
//     terminal and that the kubelet has not admitted yet, that requests
//     the plugin's resource with a limit equal to the number of device IDs
//     in the request, and that is neither realized (every entry carries a
//     runtime identity and the manager manages an instance under each of
//     those identities for it: the pod's creator can write the identities;
//     when nothing confirms them the Allocate fails with [ErrAmbiguous])
//     nor being realized by a concurrent call; a pod requesting none of
//     the resource is never a candidate, whatever its annotations say;
//   - a pod is admitted when its status, which only the kubelet writes,
//     says the pod is Running or any of its containers was created, runs,
//     ran or started: the kubelet allocates the devices of all of a pod's
//     containers when it admits the pod, before creating any, so no
//     container of an admitted pod is a candidate, whatever its record
//     says (an owner who strips the runtime identities from a running
//     pod's record cannot make it look pending);
//   - the kubelet admits pods in creation-timestamp order, so the earliest
//     created candidate pod wins, and in it the first candidate container
//     (init containers first);
//   - annotations never rank candidates (hami.io/bind-time is writable by
//     anyone who can create a pod);
//   - when several candidate pods share the earliest creation timestamp
//     (it has one-second resolution), the Allocate fails with an
//     [*AmbiguousError] naming them, and when the chosen container has no
//     complete reservation (a pod bound without the scheduler) it fails
//     with [ErrUnreserved]: the kubelet then reports an admission error for
//     the pod, which is safe, rather than a guess handing one pod's device
//     to another.
//
// The plugin looks for candidates in its pod cache first, then in a direct
// listing of the node's pods (the kubelet may admit a pod the cache does
// not hold yet). A pod found only by the listing is realized once the
// cache holds it too (at most [Config.CacheCatchUp]): the cache then has
// every event before the pod's bind, so a preemptor bound after its
// victims ended is realized with their ends known and their instances
// reclaimed first.
//
// Only entries that pass reservation's trust rule are realized: the
// container must request exactly as many devices as its entries.
//
// Residual risk: the device plugin API does not say which pod is being
// admitted. If the kubelet admits a later-created pod before an earlier
// one this plugin already sees (the kubelet's own pod source lags the
// plugin's), the two pods' devices are swapped. After the fact, every
// maintenance pass lists the kubelet's PodResources API
// ([Config.PodResourcesSocket], [Plugin.VerifyAssignments]) and logs and
// counts ([MetricMismatches], [Plugin.Mismatches]) each device ID that went
// to another container than the one it was realized for. What closes the
// gap is an API that names the pod: the kubelet's Dynamic Resource
// Allocation (a DRA driver is told the claim and pod it prepares), or
// admitting at most one unrealized MIG pod per node at a time, which the
// scheduler extender enforces.
//
// # Checkpoint
//
// Who owns a MIG instance is recorded, never inferred: the plugin keeps a
// durable node-local checkpoint ([Config.Checkpoint]; by default
// [CheckpointDir]/[CheckpointFile] under the kubelet's device plugin
// directory, a directory because a starting kubelet removes every plain
// file there but its own) of what it observed and did, in the spirit of
// the kubelet's device manager checkpoint:
//
//   - per pod UID, the first observation of its claim: the scheduled
//     fields of its record, when the plugin first saw them, whether they
//     arrived with the binding of a scheduler whose extender writes
//     records and whether the kubelet had already admitted the pod
//     (reservation.Pod.RecordSeen, RecordScheduled and RecordStarted;
//     kube.NodePodSourceOptions.Observations);
//   - per container device, the instance the plugin created or adopted
//     for it: GPU, profile, placement, GPU and compute instance IDs, MIG
//     UUID. An Allocate records them before the kubelet receives them;
//   - per inherited pod, the entries of its record that named a runtime
//     identity while the plugin inherited it (see "The recorded view").
//
// It is rewritten on every change, atomically (a temporary file, fsync,
// rename, directory fsync) and decoded strictly (versioned, unknown fields
// refused). A checkpoint that cannot be read or trusted makes [New] fail
// with a [*CheckpointError]: the plugin destroys nothing rather than guess.
// [New] also takes an exclusive lock (flock) on the checkpoint's
// directory, held until [Plugin.Run] returns or [Plugin.Close]: a second
// plugin process on the node (a rolling update with surge, a stray copy)
// fails with [ErrCheckpointInUse] instead of overwriting the first one's
// hand-outs. Holding it, [New] removes the temporary files an interrupted
// write left.
//
// # The recorded view
//
// Every decision (container choice, the health refusal and the holders of
// device IDs, the manager's Allocate, adoption, reconcile and leak
// collection, at startup and after) reads each pod's record as the
// checkpoint overlays it, never the raw annotation: a container the plugin
// handed devices to (or adopted them for) has exactly those devices as its
// entries, with their runtime identities, whatever the annotation says
// now (moved, stripped, removed, or naming another identity); any other
// entry keeps its scheduled fields only, since the pod's creator can write
// identities. A pod all of whose entries are such devices wins every
// conflict with another record (reservation.Desired): a device the plugin
// handed to a live pod stays that pod's, and is never destroyed, nor its
// placement handed to another pod, until the pod is released. So after a
// restart with the checkpoint intact the plugin decides exactly as before
// it; a MIG UUID or GPU instance ID copied into another pod's record names
// nothing there. A record that does not decode is left as it is (it
// withholds destruction on the node, with or without a restart).
// CONTRIBUTING.md lists the few reads of the raw annotation and why each
// is safe. Only a plugin that starts without a
// checkpoint (first installation, or the file was removed) falls back to
// the records: the pods it lists before it serves its first Allocate are
// inherited, the runtime identities their records name then are trusted
// and adopted, and the checkpoint holds them from then on, the devices
// adopted and the identities trusted (a later pass or restart adopts by
// them once what stopped an adoption is gone). An identity an inherited
// pod's owner writes into its record afterwards names nothing, as for any
// other pod: it never takes over an instance, not even one whose pod is
// gone and that the checkpoint therefore no longer records while it
// waits for leak collection. A running pod among them keeps
// its claim against a record that arrived with a binding
// (reservation.Pod.RecordStarted): its containers may use a device the
// lost checkpoint recorded.
//
// # Reboots
//
// The checkpoint records the node's boot ID ([Config.BootID]). A reboot
// resets the GPUs: no MIG instance survives it unless a tool re-creates
// instances, and those get new MIG UUIDs. A plugin that finds a
// checkpoint written under another boot ID keeps the pods' first
// observations and keeps each recorded device as a claim
// ([HandedDevice.PreviousBoot]): its container still holds the placement
// (nothing there is destroyed, and no other pod gets it, until the pod is
// released), but the recorded runtime identity is not trusted, so nothing
// is adopted or reported by it. A checkpoint without a boot ID (written by
// an earlier plugin) counts as written in the current boot: its devices
// are adopted as before, verified field by field against the hardware,
// which no longer matches after a reboot. Either way the checkpoint names
// the current boot from [New] on.
//
// # Failure semantics
//
//   - Startup refuses to run while NVIDIA MIG Manager owns the node
//     (kube.OwnershipGuard) unless AllowMIGManager is set; Allocate and
//     every reconcile pass re-check it and refuse likewise.
//   - Startup waits for a complete pod listing, then runs the first
//     maintenance pass (realize.Manager.Maintain) before serving: adoption,
//     then, on every pass until adoption settles (authorised, nothing
//     rejected or unverified), adoption again; reconcile; leak collection
//     every Manager.LeakInterval. Adoption and reconciliation only destroy
//     instances when the snapshot is complete and every reservation is
//     valid (realize decides).
//   - A deleting pod's instances are reclaimed only once every container
//     is terminated or its grace period has passed (or it is gone).
//   - Allocate realizes exactly the reserved placements or fails; instances
//     created by a failed attempt are rolled back by the manager. If writing
//     the runtime identity fails, the instances stay managed and the
//     Allocate fails: a retry returns the same instances and writes again;
//     if the reservation changed meanwhile, the orphaned instance is
//     reclaimed by the next reconcile pass.
//   - A kubelet that fails admission marks the pod Failed; the pod leaves
//     the desired set and its instances are reclaimed.
//   - A restarting kubelet removes the plugin's socket; the plugin notices
//     within SocketCheckInterval, serves a new socket and registers again
//     (retrying until the kubelet answers). Realized instances are
//     untouched by this.
//   - GPU health: when the backend is a realize.HealthWatcher (fakehal,
//     nvmlhal) the plugin follows its transitions. A GPU with a critical
//     Xid, an uncorrectable ECC error or a driver-reported need for a reset
//     is published without "health" in the node registration (the
//     scheduler then places nothing new on it), all its device IDs turn
//     Unhealthy in ListAndWatch, Allocate refuses a reservation that would
//     create an instance on it ([ErrUnhealthyGPU], FailedPrecondition), a
//     GPUUnhealthy Event is recorded on the node and
//     dynmig_gpu_healthy ([Plugin.HealthCollector]) drops to 0. Instances
//     already running there stay until their pods end: health alone never
//     destroys one, nor withholds one already realized. An Xid on one MIG
//     device turns one of its GPU's IDs Unhealthy (MIGDeviceUnhealthy) and
//     leaves the GPU schedulable; the ID comes back once that device's
//     instance is gone (checked every 30 s while any is marked). Recovery
//     reported by the driver undoes all of it (GPUHealthy). A registration
//     update the API server refuses is retried every few seconds.
//     [Config.HealthChecks] say which Xids count (NVIDIA's
//     DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS).
//   - A GPU whose health cannot be watched (the backend cannot open a
//     watch: NVML cannot create its event set) is unmonitored, not
//     healthy: published and listed as an unhealthy one is, with a
//     GPUUnmonitored Event, while the watch is retried with a doubling
//     backoff (realize.HealthMonitor); GPUMonitored says it is watched
//     again.
//   - Health survives restarts: every GPU unhealthy for a failure the
//     hardware reported (Xid, ECC, unavailable, a failed wait) is written,
//     with its first cause and the time, to the node annotation
//     [HealthRecordAnnotation] with the node's boot ID. At startup, before
//     the first registration and ListAndWatch, the plugin reads it back
//     and keeps those GPUs out of service, until the driver reports a
//     recovery, the node reboots (another boot ID: the GPUs were reset),
//     or an operator removes the GPU's entry or the whole annotation
//     (kubectl annotate node NODE dynmig.io/gpu-health-), which the plugin
//     notices within 30 s and answers with a GPUHealthy Event "(cleared)".
//     A GPU reset without a reboot is not seen: clear the entry then.
//   - Health reaches the right pods. The kubelet hands out device IDs
//     regardless of GPU, so the plugin reports Unhealthy exactly the IDs
//     held by containers whose MIG devices are on a failed GPU (or are a
//     failed MIG device), learnt from its own Allocate calls and, after a
//     restart, from the kubelet's PodResources API and the pods'
//     reservations; the kubelet then shows those pods' devices unhealthy
//     (allocatedResourcesStatus). Free IDs, the failed GPU's own first,
//     make up the rest of its capacity so that allocatable drops by as
//     much as before. Each affected pod gets a Warning Event
//     (GPUUnhealthy or MIGDeviceUnhealthy) naming its container, MIG
//     device and the cause.
//
// # Device lists
//
// [Config.DeviceListStrategy] says how an Allocate response hands a
// container its MIG devices, with the names NVIDIA's device plugin gives
// its -device-list-strategy values:
//
//   - [DeviceListEnvVar] (the zero value): NVIDIA_VISIBLE_DEVICES=<MIG
//     UUIDs>, which the NVIDIA container toolkit acts on in legacy mode.
//     With the toolkit's defaults a pod can set the variable itself, in a
//     container that requests no device or, because the kubelet puts the
//     pod's own variables after the plugin's, in one that does, and so
//     reach devices nobody gave it.
//   - [DeviceListVolumeMounts]: NVIDIA_VISIBLE_DEVICES=[VolumeMountsRoot]
//     and /dev/null mounted at VolumeMountsRoot/<MIG UUID> per device; a
//     toolkit with accept-nvidia-visible-devices-as-volume-mounts = true
//     and accept-nvidia-visible-devices-envvar-when-unprivileged = false
//     reads the mounts, which a pod cannot forge, and ignores the
//     variable of an unprivileged container.
//   - [DeviceListCDICRI]: the response's CDIDevices name [CDIKind]=<MIG
//     UUID> per device (Kubernetes 1.29+; containerd 2 and CRI-O resolve
//     them, containerd 1.7 with enable_cdi), and [DeviceListCDIAnnotations]
//     the same names in CDI's container annotation. The runtime applies
//     the plugin's CDI spec of each instance, whose edits it applies after
//     the pod's own environment.
//
// # CDI specs
//
// Under a CDI strategy the plugin keeps, in [Config.CDIDir] (default
// [DefaultCDIDir]), exactly one spec file per MIG instance its manager
// manages, "dynmig.io-mig_<MIG UUID>.json", defining the one device
// [CDIKind]=<MIG UUID> with the edits of [Config.CDIGenerator] and its
// common edits:
//
//   - Allocate writes the spec of each of the container's instances,
//     atomically (a temporary file, fsync, rename, directory fsync),
//     before it records the runtime identities and before the kubelet
//     gets the names; a spec that cannot be written fails the Allocate
//     ([ErrCDISpec]) with the instances kept, and the kubelet's retry
//     writes it again;
//   - after every maintenance pass, and at start before the socket is
//     served, the directory is reconciled with the managed instances:
//     the spec of an instance no longer managed (destroyed with its pod,
//     or gone while the plugin was down) is removed, a managed instance
//     without one (adopted after a crash between its creation and its
//     spec, or realized under another strategy) gets it. At start a
//     failure stops the plugin; later ones are logged and retried on the
//     next pass. Files of other vendors are never touched.
//
// A MIG UUID names one instance from its creation to its destruction, so
// a name never resolves to another instance's spec. A container given
// several instances gets each spec's common edits once per spec.
//
// # Model and units
//
// Each reservation is an entry of hami.io/vgpu-mig-allocations: a physical
// GPU (by UUID), a profile and a placement, the half-open slot interval
// [start, start+size) on that GPU, as the scheduler chose it; the plugin
// realizes exactly that interval or fails, and never picks another one.
// Memory is in MiB throughout. The advertised device IDs, "<GPU
// UUID>::<k>", only tell the kubelet how many devices a GPU can hold; the
// reservation, not the ID, decides the hardware.
//
// # Concurrency
//
// A [Plugin] is safe for concurrent use; the kubelet may call Allocate
// concurrently. [Plugin.Run] starts the pod source, the reconcile runner,
// the health watch and the gRPC server(s), and every one of those
// goroutines has stopped when it returns. No other method leaves a goroutine running.
package deviceplugin
