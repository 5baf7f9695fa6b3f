// Package plugin is the core of the example kubelet device plugin that
// realizes dynmig reservations: it publishes the node's MIG capability,
// adopts instances after a restart, realizes each container's reservation
// in Allocate through realize.Manager, writes the runtime identity back to
// the pod, and reclaims instances of finished pods.
//
// # Which pod is being admitted?
//
// The kubelet's Allocate call names only device IDs from the plugin's
// advertised list, not the pod. The plugin advertises interchangeable IDs
// (the reservation, not the ID, decides the hardware) and maps a call to a
// container like HAMi does: among the pods bound to this node that are
// active and carry a reservation, it takes the earliest-bound pod
// ([kube.BindTime]) that has a container whose reservation is not realized
// yet and whose device count equals the number of IDs requested, and in
// that pod the first such container (init containers first). Containers it
// realized are remembered, so the next call moves to the next container
// even before the cache sees the patched annotation. This is unambiguous
// as long as at most one unrealized MIG pod is bound to a node at a time,
// which the example scheduler enforces. The cache is consulted first; when
// it has no candidate the API server is listed directly.
//
// # Failure semantics
//
//   - Startup refuses to run while NVIDIA MIG Manager owns the node
//     (kube.OwnershipGuard) unless AllowMIGManager is set; Allocate and
//     every reconcile pass re-check it and refuse likewise.
//   - Startup waits for a complete pod listing before adoption; adoption and
//     reconciliation only destroy instances when the snapshot is complete
//     and every active reservation is valid (realize decides).
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
// concurrently. [Plugin.Run] starts the pod source, the reconcile runner
// and the gRPC server(s), and every one of those goroutines has stopped
// when it returns. No other method leaves a goroutine running.
package plugin
