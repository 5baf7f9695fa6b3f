// Package lifecycle holds dynmig's end-to-end tests against a real
// Kubernetes control plane built from source and run in the test process
// (package e2e/internal/cluster): the deployed scheduler configuration and
// RBAC, the kube-scheduler with the extender, the kubelet's device
// manager and the device plugin over fakehal hardware. The package
// has test files only.
package lifecycle
