// Package extender is the core of the example scheduler extender: how a
// scheduler embeds dynmig's placement ledger. It reads node registrations
// and pod reservations from the API server, answers the kube-scheduler
// extender's filter, prioritize and bind calls, reserves placements in a
// [placement.Ledger] before binding, writes the hami.io/vgpu-mig-allocations
// annotation and binds the pod.
//
// # Failure semantics
//
//   - A reservation is assumed in the ledger (atomically, per node) before
//     anything is written, so concurrent binds never take the same slots.
//   - If writing the annotation fails, the assumption is forgotten and the
//     bind fails; the scheduler retries the pod later.
//   - If the binding fails after the annotation was written, the
//     assumption is forgotten and the annotation removed again (best
//     effort: a leftover annotation on an unbound pod is overwritten by the
//     next bind, and never realized because no device plugin sees the pod).
//   - A node that carries a bound MIG pod whose reservation is not yet
//     realized is filtered out until the device plugin realized it (or
//     [Options.LockTimeout] passed), and Bind refuses a second MIG pod for
//     it with [ErrNodeLocked], also while another MIG bind to the node is
//     in flight: the device plugin identifies the pod the kubelet admits
//     as the earliest-bound unrealized one, so binding one such pod per
//     node at a time keeps that unambiguous (HAMi's node lock plays the
//     same role).
//   - Reading the API fails the call; nothing is assumed from a partial
//     view.
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
// An Extender is safe for concurrent use and starts no goroutines: the
// caller serves [Extender.Handler] (an http.Handler) on its own server.
package extender
