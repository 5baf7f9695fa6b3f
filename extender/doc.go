// Package extender is a kube-scheduler extender that places MIG pods with
// dynmig's placement ledger. It follows node
// registrations and pods through shared informers ([kube.SchedulerView]),
// answers the kube-scheduler extender's filter, prioritize and bind calls,
// reserves placements in a [placement.Ledger] before binding, and binds
// the pod with its hami.io/vgpu-mig-allocations record in one write.
//
// # The binding carries the record
//
// Bind writes nothing but one pods/binding call. Its metadata carries the
// pod's UID and the resourceVersion of the pod Bind read, which the API
// server's binding storage checks as preconditions (a Conflict when the
// pod changed since, or is another pod of the same name), and the record
// and bind time as annotations, which it merges into the pod in the same
// write that sets spec.nodeName and the PodScheduled condition. A pod
// bound by this extender therefore carries, at the moment it is bound,
// exactly the record the extender wrote, whatever its owner wrote before
// (the binding replaces it); an owner who changes the pod between Bind's
// read and the binding makes the binding fail, and the scheduler retries.
// Pods that ask for no MIG device are bound the same way, without
// annotations: the version read carries no record ([ErrForeignRecord]
// otherwise), so neither does the bound pod. A pod that requests the
// device plugin's resource without opting in to MIG is refused on every
// node with dynmig's registration ([ErrNotOptedIn]): the device plugin
// there serves the resource only as reserved MIG devices.
//
// # Failure semantics
//
//   - Decisions use the view the informers keep, plus the extender's own
//     binds; until the first listings are applied (or while [Extender.Run]
//     is not running) every MIG call fails with [ErrNotSynced]. Bind also
//     applies a consistent listing of the target node's pods before it
//     reserves (see "High availability"); a listing only adds what the
//     view has not seen yet and never deletes anything.
//   - Pod events apply in order; a view of a pod older than its bind (one
//     that shows it unbound) is ignored, so a lagging informer never drops a
//     reservation the extender made, nor the node lock it holds.
//   - A reservation is assumed in the ledger (atomically, per node) before
//     anything is written, so concurrent binds never take the same slots.
//     Bind records what it bound, and the pod's slots are freed as soon as
//     the informer shows it released ([reservation.Pod.Released], the rule
//     the device plugin reclaims by: Succeeded or Failed, or deleting with
//     its containers terminated or its grace period over) or deleted.
//   - Only entries the trust rule keeps ([reservation.ValidateRequests]:
//     the container requests that many devices of [Options.Resource])
//     occupy slots; other entries are logged and ignored. Requests are read
//     with the same resource ([kube.ParseRequestFor]), so a renamed
//     resource is counted and trusted under one name.
//   - A node that publishes no MIG GPUs (no hami.io/node-nvidia-register
//     annotation, or one listing no usable MIG GPU) fails Filter with a
//     reason saying so, and Bind with an error wrapping [ErrNoMIGGPUs].
//   - A reservation the node's profile table no longer describes keeps its
//     slots and is reported by [placement.Ledger.Conflicts].
//   - If the binding fails, the assumption is forgotten and the bind
//     fails; the scheduler retries the pod later. A binding call can fail
//     after the API server applied it (a timeout after the commit), so
//     after a failed one Bind reads the pod again, for up to
//     [CleanupTimeout] even when its context is done: bound to the node
//     with the same UID and placements, it is recorded as bound and Bind
//     succeeds. If the read does not get through, the assumption is
//     forgotten: a bound pod counts again as soon as the informer, or the
//     next Bind's listing of the node, shows it. Nothing is ever left to
//     undo: a binding that failed wrote nothing.
//   - One unrealized MIG pod per node: a node is locked by a bound pod whose
//     reservation is not realized, if the extender bound it or it provably
//     requests the MIG resource with trusted entries all on the node's GPUs
//     (no annotation alone locks a node), and while another MIG Bind to it
//     is in flight. Filter skips a locked node and Bind refuses with
//     [ErrNodeLocked]; a second Bind of a pod whose first is still running
//     gets [ErrBindInProgress] and leaves the first call's claim alone; a
//     Bind of a pod already bound to the node succeeds without doing
//     anything. The device plugin identifies the pod the kubelet admits as
//     the earliest-created unrealized one with a container whose resource
//     limit is the requested device count, so this keeps that unambiguous.
//   - A claim not realized within [Options.LockTimeout] (counted from the
//     extender's own bind or first sight, never from pod-written data) is
//     reported once, with a [StaleClaimReason] event on the pod and the
//     dynmig_scheduler_stale_claims_total counter ([Extender.Collector]).
//     It then blocks only pods the device plugin could confuse with it: any
//     with a container requesting as many devices as one of its unrealized
//     containers holds. Pods of other device counts are placed.
//
// # Scheduler configuration
//
// The kube-scheduler calls the extender only for pods that request one of
// its managedResources, and its own resource fit runs before the extender
// is called. nvidia.com/gpu (or [Options.Resource]) is advertised by the
// device plugin in the node's status, so it is listed with
// ignoredByScheduler: false and the scheduler still counts it against
// allocatable. nvidia.com/gpumem and nvidia.com/gpumem-percentage are
// advertised by nobody: they must be listed with ignoredByScheduler: true,
// or the scheduler fails every node with "Insufficient nvidia.com/gpumem"
// and never asks the extender:
//
//	managedResources:
//	- {name: nvidia.com/gpu, ignoredByScheduler: false}
//	- {name: nvidia.com/gpumem, ignoredByScheduler: true}
//	- {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}
//
// with filterVerb filter, prioritizeVerb prioritize, bindVerb bind (the
// extender must bind MIG pods itself) and nodeCacheCapable: true. The
// complete, working KubeSchedulerConfiguration is
// deploy/scheduler/kube-scheduler-config.yaml in this repository.
//
// # High availability
//
// Each Extender keeps its own ledger and node locks in memory. Two active
// replicas behind one Service would each admit a pod onto the same slots
// (or the same unrealized node), so that is unsupported. The supported
// shape is one extender per kube-scheduler replica, called on loopback as
// a sidecar of a leader-elected scheduler: only the leader calls its
// extender. A new leader's extender has followed the API server through
// its informers all along, but an informer may not yet have delivered the
// previous leader's last writes, so before it reserves on a node, Bind
// lists that node's pods with a consistent read (fieldSelector
// spec.nodeName, resourceVersion unset: a quorum read, served from the
// watch cache once it has caught up on servers with consistent list
// reads) and applies the listing to the view
// ([kube.SchedulerView.ObservePods]). Its decision then counts every pod
// bound to the node when the Bind began, delivered or not, and the
// listing is taken under the node's claim, so no Bind of this extender
// changes the node in between. The cost is one List call per MIG Bind;
// [Options.SkipFreshNodeRead] turns it off for a single scheduler that
// never follows another (it records its own binds itself, so only other
// writers' binds can be missing from its view).
//
// A previous leader's Bind still running when the new leader starts is not
// covered by any read: its request is cancelled when the old
// kube-scheduler exits or the call times out, so the gap leader election
// leaves between two leaders (leaseDuration minus renewDeadline) must be
// at least the extender's httpTimeout; see the deploy configuration. After
// its context is done Bind only reads ([CleanupTimeout]); it writes
// nothing.
//
// # Model and units
//
// The ledger holds, per node, the GPUs of its registration and the
// reservations of its bound and assumed pods; each reservation occupies
// the half-open slot interval [start, start+size) of its placement, and a
// new one fits only where a published placement overlaps none of them.
// Memory requests are MiB (nvidia.com/gpumem) or a percentage of the GPU.
// Node scores are scaled to 0..[MaxExtenderPriority].
//
// # Concurrency
//
// An Extender is safe for concurrent use. Its informers' goroutines run
// while [Extender.Run] does, which stops them all before returning; no
// other method starts goroutines. The caller serves [Extender.Handler] (an
// http.Handler) on its own server.
package extender
