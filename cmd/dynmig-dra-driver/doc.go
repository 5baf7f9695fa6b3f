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
// or, with cgo, nvml), -fake-gpus, -cdi-dir (default /var/run/cdi),
// -driver-root (default /: where NVIDIA's library finds the driver's
// files for the claims' specs; /run/nvidia/driver for the GPU Operator's
// containerised driver; a path that is no directory is refused at start), -plugin-data-dir
// (default /var/lib/kubelet/plugins/mig.dynmig.io: the DRA socket and the
// checkpoint of prepared claims), -registrar-dir (default
// /var/lib/kubelet/plugins_registry), -device-config (a scheduler device
// config whose nvidia.migProfileAllowlist is the profile policy; SIGHUP
// and a change of the file, seen every -device-config-poll, read it again
// and republish; a refused config stops the start and keeps the last good
// one on reload, as package internal/wiring/devconfig says), -maintain-interval,
// -metrics-addr (default :9397: /metrics with the Go and process
// collectors, /healthz, and /readyz, ready once the driver serves the
// kubelet), -device-nodes ("auto": with -backend=nvml, the CDI specs are
// generated with NVIDIA's container toolkit library, package
// nvmlhal/nvcdigen: each MIG device's /dev/nvidia-caps nodes and its
// parent GPU's node, the control nodes, the driver's libraries and the
// toolkit's hooks; with -backend=fake, numbered fake nodes; "on": device
// nodes only, read from the NVIDIA driver's /proc files; "off": none), -disable-healthchecks and
// -enable-healthchecks (default $DP_DISABLE_HEALTHCHECKS and
// $DP_ENABLE_HEALTHCHECKS, with the meaning NVIDIA's device plugin gives
// them), -enable-mig, and those every dynmig binary has (-version, -log-format=text|json,
// -log-level, -v; package internal/wiring/cli); -help lists them. -kubeconfig
// names a kubeconfig file for running out of a cluster;
// empty means $KUBECONFIG, and with that empty too, the pod's service
// account ([kube.RESTConfig]).
//
// -enable-mig (off by default) switches MIG mode on, at start, for each
// idle GPU whose MIG mode is off: never a GPU that runs processes or that
// a checkpointed claim names (realize.Options.EnableMIG). NVIDIA's MIG User Guide says
// A100 and A30 need a GPU reset for the change; NVML attempts it when the
// GPU is idle and no other client (DCGM, an exporter) holds it, and
// otherwise leaves the change pending. The component never resets a GPU:
// one whose change is pending, or that the driver refuses to switch, is
// logged as a warning and takes no MIG pods until an operator resets it
// (nvidia-smi -r) or reboots the node and restarts the component. Without
// the flag a GPU with MIG mode off is reported (a mig-disabled discovery
// finding) and left alone.
//
// Every flag is checked before the cluster is contacted or the backend
// opened: a missing -node or -backend, an unknown backend or fake model, a
// malformed health check list or a negative duration is a usage error,
// exit 64, with one line per flag (package internal/wiring/cli).
//
// Placements are half-open slot intervals [start, start+size). The
// command runs one dradriver.Driver until SIGINT or SIGTERM and exits when
// every goroutine has stopped.
package main
