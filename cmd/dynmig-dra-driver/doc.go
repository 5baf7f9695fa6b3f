// Command dynmig-dra-driver is the Kubernetes DRA kubelet plugin for
// dynamic MIG (package dradriver holds the logic). It publishes the node's
// MIG partitions as partitionable devices of driver mig.dynmig.io in
// ResourceSlices, in the order that makes the scheduler's structured
// allocator choose as dynmig's default policy does, and, when the kubelet
// prepares a ResourceClaim, creates exactly the allocated GPU and compute
// instances and hands them to the container runtime as CDI devices.
//
// The default backend is fakehal, in-memory hardware that needs no GPU and
// no cgo (-fake-gpus chooses its models). -backend=nvml drives real GPUs
// through nvmlhal; it exists only in binaries built with cgo.
//
// It runs in the cluster as the DaemonSet of deploy/dra/driver.yaml, with
// the permissions of deploy/dra/rbac.yaml; deploy/dra/deviceclass.yaml
// defines the DeviceClass claims use, and deploy/dra/claim-example.yaml
// shows claims for a profile and for a memory size.
//
// Flags: -node (default $NODE_NAME), -kubeconfig, -backend (fake or, with
// cgo, nvml), -fake-gpus, -cdi-dir (default /var/run/cdi), -plugin-data-dir
// (default /var/lib/kubelet/plugins/mig.dynmig.io: the DRA socket and the
// checkpoint of prepared claims), -registrar-dir (default
// /var/lib/kubelet/plugins_registry), -device-config (a scheduler device
// config whose nvidia.migProfileAllowlist is the profile policy; SIGHUP
// reads it again and republishes), -maintain-interval, -device-nodes
// ("auto": with -backend=nvml, the CDI specs inject each MIG device's
// /dev/nvidia-caps nodes, its parent GPU's /dev/nvidia<minor>, nvidiactl
// and nvidia-uvm, read from the NVIDIA driver's /proc files; "on"; "off"),
// and -disable-healthchecks and -enable-healthchecks (default
// $DP_DISABLE_HEALTHCHECKS and $DP_ENABLE_HEALTHCHECKS, with the meaning
// NVIDIA's device plugin gives them); -help lists them. -kubeconfig names
// a kubeconfig file for running out of a cluster;
// empty means $KUBECONFIG, and with that empty too, the pod's service
// account ([kube.RESTConfig]).
//
// Placements are half-open slot intervals [start, start+size). The
// command runs one dradriver.Driver until SIGINT or SIGTERM and exits when
// every goroutine has stopped.
package main
