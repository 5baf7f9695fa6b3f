// Package adversarial holds end-to-end tests of dynmig against a real API
// server (e2e/internal/cluster) under conditions a unit test's fake client
// cannot produce faithfully: pods whose creator forges what the scheduler
// and device plugin write (spec.nodeName, hami.io/bind-time,
// hami.io/vgpu-mig-allocations), resourceVersion conflicts answered by the
// real server (409), watches that break, and an API server stopped and
// started again over the same etcd in the middle of a pod's lifecycle.
//
// Each test runs the device plugin (deviceplugin)
// on a fake kubelet node whose kubelet device manager is the real one, over
// fakehal GPUs, and the scheduler extender
// (extender) called as kube-scheduler calls it. The
// tests check hardware state, not only API objects: a fakehal monitor
// samples the live MIG devices throughout and fails the test if a device
// in use by a running pod ever disappears.
//
// The package has no non-test code; run it with
//
//	cd e2e && go test -v ./adversarial
package adversarial
