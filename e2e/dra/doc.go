// Package dra holds dynmig's end-to-end test of the DRA path against a
// real Kubernetes control plane built from source and run in the test
// process (package e2e/internal/cluster): kube-apiserver with
// resource.k8s.io/v1 and partitionable devices (DRAPartitionableDevices),
// a default-profile kube-scheduler whose DynamicResources plugin
// allocates devices from the ResourceSlices the example DRA driver
// (dradriver) publishes over fakehal hardware,
// kube-controller-manager's resourceclaim controller, which makes the
// claims of pods from their templates and deallocates them, and the
// kubelet's own DRA manager (k8s.io/kubernetes/pkg/kubelet/cm/dra) and
// plugin manager, which register the driver through its registration
// socket and call NodePrepareResources and NodeUnprepareResources as the
// kubelet does. The package has test files only.
package dra
