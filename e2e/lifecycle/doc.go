// Package lifecycle holds dynmig's end-to-end tests against a real
// Kubernetes control plane built from source and run in the test process
// (package e2e/internal/cluster): the deployed RBAC, the kubelet's device
// manager and the device plugin over fakehal hardware, and a scheduler
// from its shipped configuration. TestLifecycle runs once with the
// upstream kube-scheduler and the extender
// (deploy/scheduler/kube-scheduler-config.yaml) and once with
// kube-scheduler built with the DynMIG framework plugin
// (schedplugin/deploy/kube-scheduler-config.yaml); the other tests use
// the extender. The package has test files only.
package lifecycle
