// Package kube adapts dynmig to Kubernetes through client-go: it turns
// corev1 pods into the reservation pod view and the placement request
// model, keeps a reflector-backed snapshot of one node's pods for the device
// plugin, writes the runtime identity and the node registration back with
// JSON merge patches, drives periodic and event-driven reconciliation, and
// guards a node against concurrent mutation by NVIDIA MIG Manager; [Events]
// records the components' Kubernetes Events through client-go's recorder. For
// schedulers it decodes node registrations ([NodeGPUs]) and pod records
// ([PodAllocations]), converting them to the placement ledger's terms with
// package schedule; a [SchedulerView] keeps a
// scheduler's ledger current from shared informers and the scheduler's own
// binds, applying events in order and freeing a pod's slots by the same
// release rule the device plugin reclaims by (a bound pod's slots are held
// until it ends, whatever its record says later: see the view's "Held
// until the pod ends"), and [NodeBinds] holds the one
// MIG bind a scheduler runs per node and says what keeps a pod off a node
// (that bind, or a claim [Blocking] finds). It is the library's
// adapter layer to Kubernetes: the components (deviceplugin, extender,
// dradriver) build on it, and the model, decision and node-engine packages
// never import Kubernetes. Its subpackage kubetest is a fake API server for
// tests.
//
// # Model
//
// Containers are indexed as the deployed scheduler and device plugin index
// them in hami.io/vgpu-mig-allocations: init containers first, then regular
// containers ([ContainerAt]); ephemeral containers never hold devices.
// Memory quantities are MiB (nvidia.com/gpumem) or a percentage of the
// physical GPU (nvidia.com/gpumem-percentage). Placements are half-open slot
// intervals [start, start+size), as everywhere in dynmig.
//
// [PodView] and [PodViewFor] fill the fields reservation's trust and release
// rules need from data only the API server and the kubelet set:
// creationTimestamp, deletionTimestamp (the end of the grace period),
// container statuses and each container's limit of the MIG resource
// (nvidia.com/gpu by default, [ResourceGPU]). [Snapshot] stamps the listing
// with the time it was taken. Annotations are user-writable and never rank
// or authorise anything by themselves. A [NodePodSource] adds what only it
// can know: when it first saw each pod's reservation claim
// (reservation.Pod.RecordSeen, its own clock) and whether the claim was on
// the pod, together with the PodScheduled=True condition the API server
// sets on binding, when the source first saw the pod
// (reservation.Pod.RecordScheduled). reservation.Desired keeps, of two
// overlapping records, the scheduled one, else the earlier one; a pod
// created with spec.nodeName preset has no such condition until the
// kubelet admits it, and its creator cannot write status.
//
// # Failure semantics
//
// Anything that authorises destroying hardware state is conservative:
//
//   - A [NodePodSource] snapshot is Complete only when it rests on a
//     listing that is provably fresh: the source runs, its last list or
//     watch call succeeded, and its cache holds a consistent listing
//     (resourceVersion "": a quorum read, which the API server answers
//     from etcd or from a watch cache it has first confirmed current, never
//     a resourceVersion "0" answer from a possibly lagging watch cache)
//     updated only by the one watch that continued that listing, which has
//     not ended. From the moment that watch ends, for whatever reason,
//     snapshots are incomplete, and the source lists again before it
//     watches again; a watch resumed at an old resourceVersion (which a
//     restarted API server accepts while its own cache is stale) never
//     makes a snapshot complete. On an incomplete snapshot reservation and
//     realize skip destructive reconciliation: adoption's cleanup of idle
//     GPUs, leak collection and reconcile destruction run only on complete
//     snapshots. A complete snapshot still lags the API
//     server by the events in flight on the watch. A deleting pod's
//     reservations stay in the desired set until reservation.Pod.Released;
//     the source's OnInactive fires when a pod is deleted (also when only a
//     relisting shows it gone), becomes terminal, or reports every
//     container terminated, so reclamation follows at once.
//   - The [AnnotationWriter] patches the runtime identity with a
//     resourceVersion precondition; on a conflict it re-reads the pod and
//     re-validates the reservation, and refuses (without writing) when the
//     reservation it realized is no longer the one in the pod.
//   - A [SchedulerView] holds a bound pod's slots until the pod ends,
//     whatever its record says later (removed, moved, changed,
//     unreadable), from events and fresh reads alike. The residual: a view
//     that never held the pod (a scheduler started after the record was
//     removed) does not count it, since nothing it may read says what the
//     pod holds; pods it places on those slots are refused by the node's
//     device plugin, which keeps what it handed out, until the pod ends.
//   - The [OwnershipGuard] fails closed: if the node or its pods cannot be
//     read, ownership is unknown and mutation is refused.
//
// # Concurrency
//
// Every exported type is safe for concurrent use unless its documentation
// says otherwise. [NodePodSource.Run] and [ReconcileRunner.Run] block until
// their ctx is done and own every goroutine they start; no other function in
// the package leaves a goroutine running. A ctx is never stored.
//
// # Zero values
//
// Option structs work as zero values. The adapters themselves are built by
// their constructors; their zero values are not usable.
package kube
