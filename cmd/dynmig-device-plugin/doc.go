// Command dynmig-device-plugin is the kubelet device plugin that realizes
// dynmig MIG reservations: it publishes the node's MIG capability in
// hami.io/node-nvidia-register, creates each container's GPU and compute
// instances at exactly the scheduler-reserved placements during Allocate,
// exposes them through NVIDIA_VISIBLE_DEVICES, writes the runtime identity
// back to the pod, reclaims instances of finished pods and adopts live
// instances after a restart. The logic lives in package deviceplugin.
//
// -backend is required, so that a node never runs fake hardware by
// omission: -backend=nvml drives real GPUs through nvmlhal (only in
// binaries built with cgo); -backend=fake is fakehal, in-memory hardware
// that needs no GPU and no cgo (-fake-gpus chooses its models).
//
// It runs in the cluster as a DaemonSet pod with the node's name in
// NODE_NAME and the kubelet's device-plugin and pod-resources directories
// mounted: deploy/device-plugin.yaml, with the permissions of
// deploy/rbac/device-plugin.yaml (get, list, watch and patch on pods; get
// and patch on nodes; create on events) narrowed to its own node by
// deploy/rbac/device-plugin-node-policy.yaml.
//
// Flags: -node (default $NODE_NAME), -backend (required: fake or, with
// cgo, nvml), -fake-gpus, -socket-dir, -resource, -scheduler-names,
// -pod-resources-socket, -device-list-strategy (envvar, volume-mounts,
// cdi-cri or cdi-annotations, as NVIDIA's device plugin names them;
// default envvar, see package deviceplugin, "Device lists"), -cdi-dir
// (default /var/run/cdi: where a cdi-* strategy keeps one CDI spec per MIG
// instance, generated with NVIDIA's container toolkit library with
// -backend=nvml (device nodes, the driver's libraries, the toolkit's
// hooks: package nvmlhal/nvcdigen), numbered device nodes with
// -backend=fake), -driver-root (default /: where NVIDIA's library finds
// the driver's files; /run/nvidia/driver for the GPU Operator's
// containerised driver, mounted at that path; a path that is no directory
// is refused at start),
// -allow-mig-manager, -enable-mig, -device-config,
// -device-config-poll, -metrics-addr, -kubeconfig, -disable-healthchecks
// and -enable-healthchecks (default $DP_DISABLE_HEALTHCHECKS and
// $DP_ENABLE_HEALTHCHECKS, with the meaning NVIDIA's device plugin gives
// them),
// and those every dynmig binary has (-version, -log-format=text|json,
// -log-level, -v; package internal/wiring/cli); -help lists them.
// -metrics-addr (default :9396, clear of dcgm-exporter's 9400) serves
// /metrics (the per-GPU health gauge dynmig_gpu_healthy, the assignment
// mismatch counter, Go and process collectors), /healthz and /readyz,
// ready once the plugin serves its socket and registered with the kubelet.
// -device-config names the scheduler's device config file (the ConfigMap
// both read); its nvidia.migProfileAllowlist is the profile policy. It is
// read again on SIGHUP and when it changes (every -device-config-poll; 0:
// only on SIGHUP); a
// malformed config, or one whose profiles this node's GPUs do not know, is
// refused with a message naming the file and the cause: at start the
// plugin exits, on reload the last good config stays in force (package
// internal/wiring/devconfig).
// -enable-mig (off by default) switches MIG mode on, at start, for each
// idle GPU whose MIG mode is off: never a GPU that runs processes or that
// a record names (realize.Options.EnableMIG). NVIDIA's MIG User Guide says
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
// -kubeconfig names a kubeconfig file (its current context) for running
// out of a cluster; empty means $KUBECONFIG, and with that empty too, the
// pod's service account ([kube.RESTConfig], which loads it with client-go's
// clientcmd as kubectl does).
//
// Placements are half-open slot intervals [start, start+size) and memory
// is MiB, as in package deviceplugin, which also states the failure semantics
// and the concurrency contract: the command runs one deviceplugin.Plugin until
// SIGINT or SIGTERM and exits when every goroutine has stopped.
package main
