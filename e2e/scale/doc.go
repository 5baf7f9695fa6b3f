// Package scale measures the throughput of a real kube-scheduler (built
// from k8s.io/kubernetes, in process, package e2e/internal/cluster) on
// many fake nodes: pods per second for plain pods, for MIG pods through
// the DynMIG framework plugin (module schedplugin) and for MIG pods
// through the scheduler extender, in one run, in the spirit of the
// upstream scheduler_perf harness.
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
// DYNMIG_E2E_SCALE_PODS (pods per measurement) select a measurement; see
// BENCHMARKS.md for the command and the results. The package has test
// files only.
package scale
