// Package plugin holds the end-to-end tests of the DynMIG kube-scheduler
// framework plugin (module schedplugin): kube-scheduler built from source
// with the plugin registered (app.WithPlugin, as schedplugin's
// cmd/kube-scheduler does) and schedplugin/deploy/kube-scheduler-config.yaml
// as shipped, the deployed RBAC, the kubelet's device manager and the
// device plugin over fakehal hardware (package e2e/internal/cluster):
// the requeue latency after capacity frees, against the extender for
// comparison (TestPluginRequeue, TestExtenderRequeue), and the retry of a
// pod a node lock kept off when the lock times out (TestLockEndRetries).
// The package has test files only.
package plugin
