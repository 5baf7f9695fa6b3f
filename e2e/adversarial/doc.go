// Package adversarial holds end-to-end tests of dynmig against a real API
// server (e2e/internal/cluster) under conditions a unit test's fake client
// cannot produce faithfully: pods whose creator forges what the scheduler
// and device plugin write (spec.nodeName, hami.io/bind-time,
// hami.io/vgpu-mig-allocations), resourceVersion conflicts answered by the
// real server (409), watches that break, and an API server stopped and
// started again over the same etcd in the middle of a pod's lifecycle.
//
// Each test runs the device plugin (deviceplugin) on a fake kubelet node
// whose kubelet device manager is the real one, over fakehal GPUs. The
// tests check hardware state, not only API objects: a fakehal monitor
// samples the live MIG devices throughout and fails the test if a device
// in use by a running pod ever disappears.
//
// # Schedulers
//
// Every case that involves the scheduler runs once against each dynmig
// scheduler, as subtests named "extender" and "plugin" of one test body:
// a real kube-scheduler from k8s.io/kubernetes either with the shipped
// deploy/scheduler/kube-scheduler-config.yaml and the scheduler extender
// (extender) it calls over HTTP, or with the DynMIG framework plugin
// registered (app.WithPlugin, as schedplugin/cmd/kube-scheduler does) and
// the shipped schedplugin/deploy/kube-scheduler-config.yaml. Pods are
// created and kube-scheduler schedules them; nothing calls the extender
// or the plugin directly. A test that must see or change a binding wraps
// the transport of the component that makes it: the extender's client, or
// kube-scheduler's own, which reaches the API server through
// cluster.HTTPFront, forwarding through the wrapped transport (so the
// plugin's Bind is seen as kube-scheduler sends it).
//
// Run against both: TestBindConflict (the owner swaps the record during
// the binding call: the extender's Bind, or the plugin's Bind),
// TestForgedRecordsCaptureNothing (the forger takes w's record from the
// binding request), TestStrippedIdentityRestart, and
// TestAPIServerRestartMidLifecycle and TestWatchDropAndPartition, where
// the scheduler places pods across the outage and while the device
// plugin cannot see a deletion.
//
// Run once: TestConflictingWrites exercises kube.AnnotationWriter, the
// device plugin's runtime-identity writer, on pods bound to a node no
// device plugin serves; no scheduler takes part, so there is nothing to
// run twice.
//
// The package has no non-test code; run it with
//
//	cd e2e && go test -v ./adversarial
package adversarial
