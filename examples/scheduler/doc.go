// Command scheduler is an example kube-scheduler extender that places MIG
// pods with dynmig: it filters and scores nodes with the placement ledger,
// reserves before binding, writes the hami.io/vgpu-mig-allocations
// annotation and binds the pod. The logic lives in package extender; this
// file only wires it to HTTP and an in-cluster client.
//
// Run it in the cluster (it uses the pod's service account) and point the
// scheduler's extender configuration at it:
//
//	extenders:
//	- urlPrefix: "http://dynmig-extender.kube-system:8888"
//	  filterVerb: filter
//	  prioritizeVerb: prioritize
//	  bindVerb: bind
//	  weight: 1
//	  nodeCacheCapable: true
//	  managedResources: [{name: nvidia.com/gpu, ignoredByScheduler: false}]
//
// Flags: -addr (listen address, default :8888) and -lock-timeout; -help
// lists them. Placements are half-open slot intervals [start, start+size)
// and memory is MiB, as in package extender, which also states the failure
// semantics and the concurrency contract: the command runs one
// extender.Extender (its informers) and serves it until SIGINT or SIGTERM,
// then shuts the HTTP server down (10 s grace), stops the informers and
// exits. Its service account needs list and watch on nodes and pods, get,
// patch and binding create on pods, and create on events.
package main
