// Package schedplugin is a kube-scheduler framework plugin ("DynMIG") that
// places MIG pods with dynmig's placement ledger inside the scheduler, as
// the extender package does beside it. It reads the scheduler's own node and
// pod informers ([kube.SchedulerView]), writes the same
// hami.io/vgpu-mig-allocations record and hami.io/bind-time annotation as
// the extender, and binds MIG pods as the extender does, with the record
// in the binding, so the device plugin and the deployed HAMi pair need no
// change. It lives in its own
// module so that the library keeps no dependency on k8s.io/kubernetes;
// cmd/kube-scheduler is the upstream scheduler with the plugin registered.
//
// # Extension points
//
//   - PreFilter parses the pod's MIG request ([kube.ParseRequestFor] with
//     [Options.Resource]). Pods that neither opt in to MIG nor request the
//     device resource skip the plugin. A malformed request, or a pod not
//     asking for MIG that carries a reservation record, is
//     UnschedulableAndUnresolvable.
//   - Filter checks the device resource against the node's allocatable
//     minus its pods' requests (for every pod requesting it, MIG or not: the
//     profile's NodeResourcesFit is configured to ignore the device and
//     memory resources, see "Scheduler configuration"), then for a MIG pod
//     the node lock and [placement.Ledger.Evaluate]. A node that publishes
//     no MIG GPU is UnschedulableAndUnresolvable ([ErrNoMIGGPUs]).
//   - Score returns the node score Filter computed, scaled to 0..100; no
//     second placement search runs.
//   - Reserve claims the node and assumes the placements in the ledger.
//   - Bind, for a MIG pod, reads the node's pods consistently, decides
//     again against that read, and reads the pod (the scheduler's copy may
//     lag behind its own status writes); then it makes one pods/binding
//     call whose Binding carries the record and the bind time as
//     annotations, with the UID and resourceVersion it read as
//     preconditions: the API server
//     merges them into the pod atomically with nodeName and PodScheduled,
//     so a pod that arrives scheduled carries the record this plugin
//     decided, never one its owner wrote in between. Other pods are left
//     to DefaultBinder.
//   - PostBind records the bind in the view and releases the node claim.
//   - PreFilterExtensions (AddPod, RemovePod) change a cycle-local copy of
//     a node's occupancy, which Filter then reads; see "Preemption".
//
// # Failure semantics
//
// The rules are the extender's (see its package documentation): one
// unrealized MIG pod per node (a node is locked by a bound pod whose
// reservation is not realized, and while another MIG pod is being bound
// to it); a claim older than [Options.LockTimeout] is reported once with a
// [StaleClaimReason] event and counted in [MetricStaleClaims] (served on
// kube-scheduler's /metrics), and then blocks only pods the device plugin
// could confuse with it; only entries the trust rule keeps occupy slots.
// A bound pod's slots are held until the pod ends, whatever its owner does
// to its record meanwhile, in the hints' updates and in Bind's read alike
// (kube.SchedulerView, "Held until the pod ends", which also states the
// residual after a restart).
//
// A binding cycle that fails after Bind called the API server calls
// Unreserve, which reads the pod again for up to [CleanupTimeout] even when
// the cycle's context is done (the binding may have been applied although
// its answer was lost): bound to the node with the record's placements,
// the pod is recorded as bound. Otherwise the assumption is forgotten; a
// binding that was not applied wrote nothing, so nothing is undone.
//
// # High availability
//
// Replicas of the custom kube-scheduler are leader-elected as upstream's
// are. A new leader's informers may not have delivered the previous
// leader's last writes, so Bind lists the node's pods with a consistent
// read (fieldSelector spec.nodeName, resourceVersion unset), applies them
// to the view ([kube.SchedulerView.ObservePods]), checks the node lock
// again and decides the placements again before writing anything. The read
// runs in the binding cycle, off the scheduling cycle's critical path;
// [Options.SkipFreshNodeRead] turns it off for a single scheduler. The same
// lag shows the new leader the previous one's last binds as pending pods,
// which it schedules again: their binding fails (the API server refuses
// to bind a bound pod, and Bind's read of it then finds it bound),
// and a read that lists such a pod bound to another node counts its slots
// there at once, even while the pod's own binding cycle runs.
//
// # Requests per MIG pod
//
// Beyond a plain pod's binding, a MIG pod costs kube-scheduler one
// request: Bind's consistent listing of the node's pods. The binding
// carries the record (no separate patch), and it is conditioned on the
// pod's UID and the resourceVersion of the scheduler's own copy, the
// version whose request the cycle decided on, so Bind does not read the
// pod first. That is as safe as reading it: any write to the pod since
// that version (its owner changing the request or forging a record,
// another replica's binding, a deletion, kube-scheduler's own status
// write) changes the resourceVersion, and the API server refuses the
// binding with a Conflict before writing anything. Only then does Bind
// read the pod, and it binds the version read, conditioned the same way,
// only if that pod is unbound and asks for exactly what was decided; a
// second Conflict makes the cycle Unschedulable ([ErrPodChanged]).
//
// The listing asks for the node's pods by field selector (spec.nodeName)
// with resourceVersion unset, so it sees every write the API server had
// completed when it began. The API server e2e runs (1.37, consistent
// reads from cache on) serves it from its watch cache, through the
// cache's spec.nodeName index, once the cache has caught up with etcd's
// current revision: it asks etcd for that revision, not for the pods. A
// read of one pod with resourceVersion unset, by contrast, goes to etcd;
// that is the read Bind no longer makes. e2e/scale counts the requests
// of both kinds per pod. The listing cannot be skipped on the view's
// word: the view's informer may lag behind another replica's binding by
// any amount, and no local fact proves it has not.
//
// # Requeueing
//
// The plugin registers four events, each with a queueing hint. Three
// return Queue only when the pending pod fits the event's node afterwards
// (allocatable devices, node lock, ledger): a bound pod deleted (its slots,
// claim or devices freed; the scheduler also sends this event when a
// binding fails), a bound MIG pod's record or lifecycle changing (realized
// or admitted by the kubelet: the node lock is lifted; deleting or ended:
// slots freed) or a bound plain device pod ending (devices freed), and a
// node added or its hami.io/node-nvidia-register annotation or allocatable
// changing. A pending pod that asks for no MIG device is queued by them
// only when the event frees or adds devices (a deletion, an ended pod, a
// node change), and one whose request is malformed or that carries a
// foreign record never: only its own update can fix it. The fourth is the
// pending pod's own update, which the queue reports as TargetPod (a
// general Update for annotations): it returns Queue when what the plugin
// decides on changed (the MIG opt-in, the request with its GPU type and
// UUID constraints and profile preference, the device count, a record)
// and the new request is well formed. A MIG request that cannot fit a node
// even with every slot free (no profile of its GPUs is large enough, its
// constraints exclude every GPU, or it needs more slots than the node has)
// is UnschedulableAndUnresolvable there ([ErrNeverFits]), so preemption's
// dry run skips the node. The scheduler's own informer handler and the view's run
// independently, so a hint applies its event to the view before deciding
// (once per event; the view orders events by resourceVersion and ignores
// repeats). The scheduler also reports every failed binding cycle as a
// deletion of the pod it gave Unreserve, which is not one: that report
// changes nothing in the view, where Unreserve has already forgotten the
// assumption or kept a bind that was applied, and where a pod a previous
// leader bound keeps the slots Bind's read found.
//
// A claim that ages past the lock timeout produces no cluster event. So
// when no node can take a pod and a young claim's lock kept it off one,
// PostFilter arms a timer for the earliest such lock's end, which moves
// the pod back to the active queue (Handle.Activate); [Plugin.Close]
// stops it. The timer needs an [Options.Clock] with timers (the real
// clock has them). Nor does a bind in flight end with an event the plugin
// registers (a bound pod's arrival is an assigned pod's Add; a failed
// bind changes nothing): a pod such a bind kept off a node waits for it,
// and the bind's end (PostBind or Unreserve) moves the pod back to the
// active queue.
//
// # One state per scheduler
//
// kube-scheduler builds one plugin per profile. The DynMIG plugins of one
// scheduler (one API client) for one device resource share one state: the
// view and its ledger, the binds in flight, and the pods waiting for them,
// so that two profiles never place two pods on the same slots or bind two
// MIG pods to one node at once. The first profile's plugin makes it; a
// later profile that asks for other ledger options is refused at start
// with [ErrProfileConflict]; per-profile arguments (lock timeout, fresh
// node read) stay the profile's own. Profiles for different resources
// place different device plugins' devices and keep a state each. The
// state lives while any of its plugins is open ([Plugin.Close]).
//
// # Preemption
//
// Upstream's DefaultPreemption chooses victims by removing a node's pods of
// lower priority and putting them back one at a time, asking the filters
// each time. The ledger, not the NodeInfo, holds what MIG pods occupy, so
// AddPod and RemovePod change a copy of the node's occupancy kept in the
// cycle state, made on first use for the nodes they touch (Filter on
// other nodes reads the ledger and allocates nothing), and copied by the
// state's Clone: each node's dry run, and each Filter with nominated pods,
// works on a clone of its own. A pod the ledger counts takes or frees its
// recorded slots and media engines. A pod it does not count, a nominated
// pod, takes the placements Filter would choose for it with the node's
// terminating pods gone, so a pod of lower priority cannot take the
// placement preemption is freeing for it; nothing is kept for a pod once
// it is no longer nominated. A victim set is sufficient exactly when
// Filter then places every device of the preemptor.
//
// The victims are chosen by DynMIG, not by upstream's reprieve order. On
// the first Filter after a dry run removed the lower-priority pods, the
// plugin pins, for each device of the preemptor, the free placement whose
// victims cost least: the fewest PodDisruptionBudget violations (counted
// by DefaultPreemption's rule on the scheduler's PodDisruptionBudget
// informer), then the lowest highest priority, then the fewest pods, then
// the lowest sum of priorities, then the youngest. From then on Filter
// reports the preemptor fitting exactly while the pinned placements are
// free, so the reprieve keeps every pod outside them. The pin is shared by
// the clones of the node's dry run and lives only as long as its state.
//
// The wait for the victims lives in the scheduler. The device plugin
// reclaims a victim's instance only after its containers stop (or its
// deletion deadline passes), and the view holds a deleting pod's slots by
// the same rule, so Filter and Bind's read of the node refuse the
// preemptor (Unschedulable) until the victims are gone; their deletion
// requeues it. Binding earlier would give the kubelet a pod whose instance
// cannot be created yet, and a failed Allocate fails the pod's admission
// instead of waiting. The extender implements no preempt verb: an
// extender is asked only after kube-scheduler's dry run chose the victims
// with the framework's filters, so preemption by MIG placement needs this
// plugin. The repository's docs/preemption.md has the whole story.
//
// # Scheduler configuration
//
// The profile enables DynMIG at bind ahead of DefaultBinder (an explicit
// bind entry: multiPoint alone would order it after the default binder),
// at preFilter, filter, postFilter, preScore, score, reserve and
// postBind,
// and configures NodeResourcesFit with
// ignoredResources listing the device resource, nvidia.com/gpumem and
// nvidia.com/gpumem-percentage: the plugin checks the device count itself,
// and upstream's NodeResourcesFit queueing hint checks a node change
// against every extended resource the pod requests, ignoredResources
// included, so a MIG pod it rejected would never be requeued by a node
// change. schedplugin/deploy in the repository holds a complete
// configuration.
//
// # Concurrency
//
// A Plugin is safe for concurrent use, as the framework requires; it
// starts no goroutines (the scheduler's informers run its view's
// handlers).
package schedplugin
