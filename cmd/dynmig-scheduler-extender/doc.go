// Command dynmig-scheduler-extender is the kube-scheduler extender that places MIG
// pods with dynmig: it filters and scores nodes with the placement ledger,
// reserves before binding, writes the hami.io/vgpu-mig-allocations
// annotation and binds the pod. The logic lives in package extender; this
// file only wires it to HTTP and an API client.
//
// # Deploying
//
// deploy/scheduler runs it as a sidecar of a second kube-scheduler (profile
// dynmig-scheduler), listening on loopback, with leader election among two
// replicas; deploy/rbac/scheduler.yaml holds its permissions. The
// scheduler's extender configuration (deploy/scheduler/kube-scheduler-config.yaml)
// is, in short:
//
//	extenders:
//	- urlPrefix: http://127.0.0.1:8888
//	  filterVerb: filter
//	  prioritizeVerb: prioritize
//	  bindVerb: bind
//	  weight: 5
//	  nodeCacheCapable: true
//	  managedResources:
//	  - {name: nvidia.com/gpu, ignoredByScheduler: false}
//	  - {name: nvidia.com/gpumem, ignoredByScheduler: true}
//	  - {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}
//
// One extender serves one kube-scheduler: its reservations and node locks
// are in memory until the API shows them, so several replicas behind one
// Service could place two pods on the same slots.
//
// # Flags
//
// -addr (listen address, default 127.0.0.1:8888: the extender serves
// unauthenticated HTTP to its own pod's kube-scheduler), -metrics-addr
// (default :9395: /metrics with hami_node_gpu_mig_instance_info,
// dynmig_scheduler_stale_claims_total and the Go and process collectors,
// /healthz, and /readyz, ready once the informers synced), -legacy-metrics
// (also nodeGPUMigInstance), -lock-timeout, -resource (the device plugin's
// extended resource), -skip-fresh-node-read, -kube-api-qps and
// -kube-api-burst (the API client's rate limit, default 50 and 100 as
// kube-scheduler's; client-go's 5 and 10 would allow about one bind a
// second) and -kubeconfig, and those
// every dynmig binary has (-version, -log-format=text|json, -log-level,
// -v; package internal/wiring/cli); -help lists them. -kubeconfig names a kubeconfig file (its current
// context) for running out of a cluster; empty means $KUBECONFIG, and with
// that empty too, the pod's service account ([kube.RESTConfig], which
// loads it with client-go's clientcmd as kubectl does).
//
// Every flag is checked before the cluster is contacted: an empty -addr or
// -resource, a negative -lock-timeout (0 means the default, 2m) and a
// -kube-api-qps or -kube-api-burst that is not positive are usage errors, exit 64, one line per flag (package internal/wiring/cli).
//
// Placements are half-open slot intervals [start, start+size) and memory
// is MiB, as in package extender, which also states the failure semantics
// and the concurrency contract: the command runs one extender.Extender
// (its informers) and serves it until SIGINT or SIGTERM, then shuts the
// HTTP server down (10 s grace), stops the informers and exits. Its
// service account needs list and watch on nodes and pods, get and patch
// on pods, create on pods/binding, and create on events.
package main
