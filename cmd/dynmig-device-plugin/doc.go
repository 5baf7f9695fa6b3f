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
// -pod-resources-socket, -allow-mig-manager, -device-config,
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
// read again on SIGHUP and when it changes (every -device-config-poll); a
// malformed config, or one whose profiles this node's GPUs do not know, is
// refused with a message naming the file and the cause: at start the
// plugin exits, on reload the last good config stays in force (package
// internal/wiring/devconfig).
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
