// Package extender is the core of the example scheduler extender: how a
// scheduler embeds dynmig's placement ledger. It follows node
// registrations and pods through shared informers ([kube.SchedulerView]),
// answers the kube-scheduler extender's filter, prioritize and bind calls,
// reserves placements in a [placement.Ledger] before binding, writes the
// hami.io/vgpu-mig-allocations annotation and binds the pod.
//
// # Failure semantics
//
//   - Decisions use the view the informers keep, plus the extender's own
//     binds; until the first listings are applied (or while [Extender.Run]
//     is not running) every MIG call fails with [ErrNotSynced]. Nothing is
//     decided from an ad-hoc listing, and a listing never deletes anything.
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
//     occupy slots; other entries are logged and ignored.
//   - A reservation the node's profile table no longer describes keeps its
//     slots and is reported by [placement.Ledger.Conflicts].
//   - If writing the annotation fails, the assumption is forgotten and the
//     bind fails; the scheduler retries the pod later. If the binding fails
//     after the annotation was written, the assumption is forgotten and the
//     annotation removed again (best effort: a leftover annotation on an
//     unbound pod is overwritten by the next bind and occupies nothing).
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
