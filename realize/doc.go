// Package realize turns scheduler reservations into MIG hardware on one
// node: the [Realizer] interface a hardware backend implements (fakehal,
// nvmlhal), and the [Manager] a device plugin or a DRA kubelet plugin
// embeds to allocate, roll back, reconcile, adopt after a restart and
// collect leaks.
//
// # Model
//
// A scheduler reserves, per MIG device, an exact GPU, profile and
// placement. The manager realizes exactly that: one GPU instance (GI) at
// the reserved placement with one compute instance (CI) spanning it, and
// reports its runtime identity (MIG UUID, GI ID, CI ID) for the caller to
// record. It never chooses another placement.
//
// Two protocols carry reservations, and the manager owns neither: both
// are sources of one desired set, with the same safety rules.
//
//   - Annotation protocol (device plugin): the pod annotation
//     hami.io/vgpu-mig-allocations (package reservation). [Manager.Allocate]
//     realizes one container's entries and returns the merge patch that
//     records the identities in the same annotation; [Manager.Adopt],
//     [Manager.Reconcile], [Manager.CollectLeaks] and [Manager.Maintain]
//     take a reservation.Snapshot of the node's pods.
//   - Claim protocol (DRA): the ResourceClaims allocated to the node. The
//     embedder lists them as a [Demand]: one [Holder] per claim (its UID,
//     whether it is released) with one [Want] per allocated device (request
//     index, device index, GPU, profile, placement, and the runtime identity
//     the embedder recorded, e.g. in a checkpoint). [Manager.Prepare] and
//     [Manager.Unprepare] serve NodePrepareResources and
//     NodeUnprepareResources and write nothing; [Manager.AdoptDemand],
//     [Manager.ReconcileDemand], [Manager.CollectLeaksDemand] and
//     [Manager.MaintainDemand] are the Demand forms of the periodic passes.
//     [PodDemand] expresses the annotation protocol as a Demand too, with
//     exactly the desired set the snapshot methods use.
//
// Each managed instance is keyed by [Key] (GPU index, profile name,
// placement) and owned by one [Owner]: the holder's UID (a pod's or a
// ResourceClaim's), the container or request index, and the device index.
// The manager's records are memory only; after a restart adoption rebuilds
// them from the listing and the live hardware: by the recorded runtime
// identity, verified field by field, or, for a Demand whose placements only
// a trusted allocator writes ([Demand.AdoptAtPlacement], a claim's status),
// by exact GPU, profile and placement when nothing was recorded.
//
// One manager must own the MIG devices of its GPUs, fed with one
// protocol's listing, which holds every holder on them: an instance another
// manager, tool or protocol created is, to it, an unmanaged instance that
// leak collection may destroy, and Allocate's own reconcile sees only pods.
// A device plugin and a DRA driver therefore never share GPUs.
//
// Units: GPUs are NVML device indexes; placements are memory slots, not
// compute slices (an A100 3g instance has size 4, 7g size 8). A placement
// occupies the half-open interval [Start, Start+Size): [0,4) and [4,8) do
// not overlap.
//
// # Health
//
// A backend that can see GPU failures implements [HealthWatcher]: its
// [HealthWatch] reports transitions ([HealthEvent]) of whole GPUs and of
// single MIG devices, counting the events [HealthChecks] count (NVIDIA's
// DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS, read by
// [ParseHealthChecks]). [HealthState] is what a sequence of events leaves:
// it keeps each device's first cause, and keeps a GPU whose health cannot
// be watched ([CauseUnmonitored]) apart from failed and healthy ones.
// [HealthMonitor] keeps a watch open for a component: it reports the GPUs
// unmonitored while none can be opened and retries with backoff. Health
// never destroys an instance: it only decides where new ones may go.
//
// # Safety rules
//
// The rules below are stated for pods; they hold for every holder. A
// ResourceClaim is "released" when its Holder says so (its consumers
// ended), "active" otherwise; its record is "unreadable" when Holder.Err is
// set or its devices fail reservation.Validate; a Want whose Untrusted is
// set plays the part of an entry failing the trust rule.
//
//   - Nothing is destroyed unless the listing authorises it: it is
//     complete, and every active holder's record decodes, validates and
//     conflicts with no other holder's (reservation.Desired for pods; the
//     same rules, through reservation.Validate and reservation.Conflicts,
//     for a Demand). Otherwise reconcile, idle-GPU cleanup and leak
//     collection do nothing and say why
//     ([ReconcileReport.Reasons], Stats.SkippedReconciles). Two holders
//     whose devices overlap on one GPU, or name one MIG device or GPU
//     instance, are both withheld: neither is realized nor adopted, and
//     nothing they name or overlap is destroyed or handed out. The
//     exception is reservation.Desired's conflict rule for pods: of two
//     overlapping records the one that arrived with a scheduler's binding
//     (reservation.Pod.RecordScheduled), else the one first seen earlier
//     (reservation.Pod.RecordSeen), stays active; the other's entry is
//     withheld alone, as an untrusted entry (reservation.ErrLaterConflict),
//     and authorisation is kept. [PodDemand] marks those entries
//     Untrusted, so the Demand path resolves the same conflicts.
//   - Reconcile destroys only managed instances whose reservation is gone,
//     and exactly their recorded CI, then GI. An instance that is in use
//     stays managed and is retried on the next pass. A listed pod is
//     released only by reservation.Pod.Released at the snapshot's time:
//     Succeeded or Failed, or deleting with every container terminated or
//     its grace period (deletionTimestamp) over. A deleting pod whose
//     containers may still run keeps its instance: NVML destroys an
//     instance no process holds a context on, even while a container
//     between contexts still has its device nodes open, and a new instance
//     at the same placement would get the same IDs. A pod merely missing
//     from the listing is released only after [Options.AbsentPodGrace],
//     counted to the time the listing was taken, since an informer may
//     not list a pod yet when kubelet allocates for it. A pod that is not
//     released keeps its instance even when its record stops naming it
//     ([ReconcileReport.Retained]).
//   - Only entries that pass reservation's trust rule
//     (reservation.ValidateRequests: the container requests the resource
//     with the matching device count) are realized or adopted; the others
//     are claims that are respected (nothing they name or overlap is
//     destroyed or collected) but never granted, and, like the scheduler,
//     Allocate and Adopt do not let them refuse another pod's reservation.
//   - Allocate checks the reserved profile and placement against the GPU's
//     capability before creating anything, and creates only the reserved
//     placement.
//   - A reservation is refused with [ErrConflict] when its key is managed
//     for another owner, when its runtime identity names an instance other
//     than the one at its key or another managed instance, when it overlaps
//     another pod's reservation or managed instance, or when the live
//     instance it would hand out belongs to an ended pod. A forged
//     annotation therefore cannot obtain another pod's device. Residual
//     risk: after a restart, an annotation that copies the identity of a
//     pod that has vanished from the API entirely, or whose own record no
//     longer decodes (an ended pod's record is the only trace of what it
//     held), cannot be told from the original.
//   - An unmanaged instance is handed out only when the pod's own
//     annotation names it exactly (profile, placement, GI ID, CI ID, MIG
//     UUID) and nothing runs on it. Any other unmanaged instance at a
//     reserved key (the remnant of a create that crashed before the pod
//     was patched, including a GI without a CI, or an ended pod's) is
//     destroyed and created afresh, complete instances only with an
//     authorised snapshot, when nothing runs on them and no active
//     reservation names one of their MIG devices.
//   - Allocate validates everything it can (the record, the trust rule,
//     every entry against its GPU's MIG mode and capability) before
//     creating anything. When it fails after creating (a later entry, or
//     the annotation patch), only the instances that call created are
//     destroyed; adopted and previously managed ones stay.
//   - Allocate calls for the same container are serialised end to end, so
//     one call's rollback never destroys an instance a concurrent call for
//     that container has handed out (kubelet retrying after a timeout, two
//     plugin processes overlapping in a rolling update). Prepare and
//     Unprepare calls for one holder are serialised the same way, and
//     Prepare follows Allocate's rules: exact placement, everything checked
//     before anything is created, rollback of only what the call created,
//     idempotent repetition.
//   - Unprepare destroys exactly the holder's instances (CI, then GI),
//     never one that runs processes ([ErrInUse]) or whose MIG UUID another
//     listed holder's runtime identity names ([ErrConflict]); those stay
//     managed and a retry or a later reconcile releases them. Under each
//     GPU's lock it first takes over the holder's live but unmanaged
//     devices (after a restart): the instance a recorded runtime identity
//     names, verified exactly, or with [Demand.AdoptAtPlacement] and
//     nothing recorded the instance at exactly the device's GPU, profile
//     and placement. Another holder wanting the same placement does not
//     keep an instance: it gets one of its own once this one is gone. It depends
//     only on the holder's own devices and records and the hardware: an
//     incomplete listing or a conflict between other holders does not hold
//     it up (kubelet would keep unrelated pods Terminating), and cannot
//     widen it, since it touches nothing but the holder's instances. An
//     instance already gone is forgotten, so a repeated Unprepare does
//     nothing.
//   - Adopt cleans a GPU only when it is idle (no active or withheld
//     reservation on it or naming one of its MIG devices, no process,
//     nothing managed) and the snapshot is authorised. It adopts an
//     annotated instance only with an authorised snapshot (adopting is
//     taking ownership, which a forged copy on a partial listing must not
//     get), after verifying every identity field against the hardware, and
//     when no other reservation names or overlaps it. Reservations without
//     runtime identity are left to Allocate; legacy v2.9 identifiers and
//     mismatches are reported, never adopted, and so is a realized
//     reservation on a GPU the node does not have (Rejected, matching
//     reservation.ErrUnknownGPU). With [Demand.AdoptAtPlacement] a device
//     without a recorded identity is adopted (and, by Prepare, handed out)
//     from the live instance at exactly its GPU, profile and placement with
//     one CI, under the same checks, only when it runs no process, no
//     listed released holder's device overlaps it and no other holder's
//     identity names it: a busy instance there stays unmanaged (and
//     claimed, so never collected) until idle, and one a released holder
//     may have left is replaced by Prepare. The claim source therefore
//     records each identity before it answers NodePrepareResources and
//     keeps a prepared claim listed, with its identities, until Unprepare
//     succeeds. Residual risk: if the source loses the record of an ended
//     claim whose idle instance is still live, that instance may pass to a
//     new claim allocated exactly the same placement.
//   - [Manager.CollectLeaks] destroys unmanaged instances only with an
//     authorised snapshot, when no reservation may own them (none is at
//     exactly their placement or names their MIG device) and no process
//     runs on them (or on the GPU outside any GI).
//
// # Concurrency
//
// A Manager is safe for concurrent use. Hardware mutation is serialised per
// physical GPU by a lock whose wait honours the caller's ctx; calls for
// different GPUs run in parallel, and no node-wide lock is held during a
// hardware call. Allocate calls for one container (pod UID, container
// index) also wait for each other, honouring ctx. A multi-device Allocate
// takes one GPU lock at a time, so it cannot deadlock. Records are checked
// again under the GPU lock, so a reconcile racing an Allocate never
// destroys what the Allocate just claimed. No method starts a goroutine
// that outlives the call.
//
// # Failure semantics for a device plugin
//
// (For a DRA kubelet plugin, see the end of this section.)
//
// Call [Manager.Maintain] at startup and then periodically (every reconcile
// interval, and when a pod ends) with a fresh listing. It runs
// [Manager.Adopt] until a pass is authorised with nothing Rejected or
// Unverified (kubelet never calls Allocate again for a running container,
// so only a later adoption takes an instance that an unauthorised or
// ambiguous start left unmanaged back under management; the whole-system
// test in package systemtest re-runs adoption this way), then
// [Manager.Reconcile], and [Manager.CollectLeaks] every
// [Options.LeakInterval]. In kubelet's Allocate, call [Manager.Allocate]
// with the pod (its DeviceRequests filled from the spec) and a fresh
// listing, expose each Device.Runtime.MIGUUID to the container and send
// AllocateResult.Patch to the API server; on error, fail kubelet's
// Allocate (kubelet reports an admission error), and nothing this call
// created is left behind unless the error also carries a [*ReleaseError]
// from a failed rollback, in which case the instance stays managed for its
// owner and is reused by a retry or reclaimed by a later reconcile. A
// repeated Allocate is idempotent, also when two run at once for the same
// container, so retrying after a lost patch is safe. Rollback after a
// cancelled request runs on a detached context bounded by
// [Options.CleanupTimeout].
//
// The device plugin API does not say which pod kubelet is admitting; which
// container an Allocate is for is the embedder's choice, and the manager
// realizes what it is asked to. The repository's docs/failure-semantics.md
// ("Which container is the kubelet admitting?") says how the example
// plugin chooses and checks after the fact.
//
// A DRA kubelet plugin lists the claims allocated to its node as a
// [Demand] (Complete only once its informer is synced; AdoptAtPlacement
// set, since only the scheduler writes a claim's allocation; claims it
// prepared listed with their recorded identities until Unprepare succeeds,
// whatever the API says of them, since a force-deleted pod's container
// may still hold the device: dradriver never lists a claim as released,
// so only Unprepare destroys a prepared claim's instance), calls
// [Manager.MaintainDemand] at startup and periodically, [Manager.Prepare]
// in NodePrepareResources (recording each Device.Runtime before it
// answers, and reporting it in later demands), and [Manager.Unprepare] in
// NodeUnprepareResources, failing the call on error so that kubelet
// retries. A lost record is harmless: adoption finds the instance at the
// claim's exact placement again.
package realize
