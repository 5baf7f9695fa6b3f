// Command dynmig-dra-driver is the Kubernetes DRA kubelet plugin for
// dynamic MIG (package dradriver holds the logic). It publishes the node's
// MIG partitions as partitionable devices of driver mig.dynmig.io in
// ResourceSlices, in the order that makes the scheduler's structured
// allocator choose as dynmig's default policy does, and, when the kubelet
// prepares a ResourceClaim, creates exactly the allocated GPU and compute
// instances and hands them to the container runtime as CDI devices.
//
// -backend is required, so that a node never runs fake hardware by
// omission: -backend=nvml drives real GPUs through nvmlhal (only in
// binaries built with cgo); -backend=fake is fakehal, in-memory hardware
// that needs no GPU and no cgo (-fake-gpus chooses its models).
//
// It runs in the cluster as the DaemonSet of deploy/dra/driver.yaml, with
// the permissions of deploy/dra/rbac.yaml; deploy/dra/deviceclass.yaml
// defines the DeviceClass claims use, and deploy/dra/claim-example.yaml
// shows claims for a profile and for a memory size.
//
// Flags: -node (default $NODE_NAME), -kubeconfig, -backend (required: fake
// or, with cgo, nvml), -fake-gpus, -cdi-dir (default /var/run/cdi), -plugin-data-dir
// (default /var/lib/kubelet/plugins/mig.dynmig.io: the DRA socket and the
// checkpoint of prepared claims), -registrar-dir (default
// /var/lib/kubelet/plugins_registry), -device-config (a scheduler device
// config whose nvidia.migProfileAllowlist is the profile policy; SIGHUP
// and a change of the file, seen every -device-config-poll, read it again
// and republish; a refused config stops the start and keeps the last good
// one on reload, as package internal/wiring/devconfig says), -maintain-interval,
// -metrics-addr (default :9397: /metrics with the Go and process
// collectors, /healthz, and /readyz, ready once the driver serves the
// kubelet), -device-nodes ("auto": with -backend=nvml, the CDI specs inject
// each MIG device's /dev/nvidia-caps nodes, its parent GPU's
// /dev/nvidia<minor>, nvidiactl and nvidia-uvm, read from the NVIDIA
// driver's /proc files; "on"; "off"), -disable-healthchecks and
// -enable-healthchecks (default $DP_DISABLE_HEALTHCHECKS and
// $DP_ENABLE_HEALTHCHECKS, with the meaning NVIDIA's device plugin gives
// them), and those every dynmig binary has (-version, -log-format=text|json,
// -log-level, -v; package internal/wiring/cli); -help lists them. -kubeconfig
// names a kubeconfig file for running out of a cluster;
// empty means $KUBECONFIG, and with that empty too, the pod's service
// account ([kube.RESTConfig]).
//
// Placements are half-open slot intervals [start, start+size). The
// command runs one dradriver.Driver until SIGINT or SIGTERM and exits when
// every goroutine has stopped.
package main
