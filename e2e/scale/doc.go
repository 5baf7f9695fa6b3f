// Package scale measures the throughput of a real kube-scheduler (built
// from k8s.io/kubernetes) on many fake nodes: pods per second for plain
// pods, for MIG pods through the DynMIG framework plugin (module
// schedplugin) and for MIG pods through the scheduler extender, in one
// run, in the spirit of the upstream scheduler_perf harness.
//
// The control plane (etcd and the API server, package
// e2e/internal/cluster) runs in the test process; kube-scheduler, with
// DynMIG or with the extender's configuration, and the extender each run
// as a process of their own: the test binary re-executed with
// DYNMIG_E2E_SCALE_ROLE set. So every measurement attributes CPU time per
// process (kube-scheduler's and the extender's from /proc/<pid>/stat; the
// test process's, which holds the API server, etcd and the stand-ins
// below, from getrusage) and counts the API requests per pod by verb and
// resource from the API server's own apiserver_request_total, with the
// API server's etcd requests (etcd_requests_total) and its pod LISTs
// served from the watch cache, all read before a measurement's pods are
// created and after every one of them is Running.
//
// The nodes are Node objects only (no kubelet, no device plugin): each
// has allocatable CPU, memory, pods and nvidia.com/gpu and the
// hami.io/node-nvidia-register registration of eight fakehal GPUs of one
// model (capability.Discover over fakehal, encoded with
// capability.EncodeNodeRegistration). A bound, unrealized MIG pod keeps
// its node from other MIG pods (the node lock of both schedulers), so the
// test stands in for the nodes' device plugins and kubelets: it fills in
// the runtime identity of every bound MIG pod's record, as the device
// plugin does when it realizes the pod, and records every bound pod
// Running, as the kubelet does.
//
// By default the test runs a small configuration that checks the harness
// works. DYNMIG_E2E_SCALE_NODES (a comma-separated list of node counts,
// measured in increasing order on one control plane) and
// DYNMIG_E2E_SCALE_PODS (pods per measurement) select a measurement, and
// DYNMIG_E2E_SCALE_SCHEDULERS ("plugin", "extender" or both, the default)
// the schedulers measured; see
// BENCHMARKS.md for the command and the results. The package has test
// files only.
package scale
