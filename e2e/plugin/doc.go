// Package plugin holds the end-to-end tests of the DynMIG kube-scheduler
// framework plugin (module schedplugin): kube-scheduler built from source
// with the plugin registered (app.WithPlugin, as schedplugin's
// cmd/kube-scheduler does) and schedplugin/deploy/kube-scheduler-config.yaml
// as shipped, the deployed RBAC, the kubelet's device manager and the
// device plugin over fakehal hardware (package e2e/internal/cluster):
// the requeue latency after capacity frees, against the extender for
// comparison (TestPluginRequeue, TestExtenderRequeue), and the retry of a
// pod a node lock kept off when the lock times out (TestLockEndRetries).
//
// The preemption tests run upstream's DefaultPreemption, which the
// shipped profile keeps enabled (checked on the running scheduler), on a
// GPU that low-priority pods fill in a fragmented layout: a high-priority
// pod that needs a 3g.20gb evicts exactly the fewest pods that free a
// legal placement and no other (TestPreemption), or, when a
// PodDisruptionBudget protects one of those, the other half's pods
// (TestPreemptionPDB); a lower-priority pod created while the preemptor
// waits does not take the freed slots; the preemptor is bound only once
// its last victim has ended, and the kubelet's Allocate, called as soon
// as it is bound, gives it its MIG device, although the kubelet the tests
// play removes each victim the moment its containers end, before the
// device plugin may have listed it ended. TestPreemptionLatency repeats
// the preemption DYNMIG_E2E_PREEMPT_TRIALS times (default 2) and logs the
// time from the preemptor's creation to its bind and from its last
// victim's termination to the preemptor running (BENCHMARKS.md).
// The package has test files only.
package plugin
