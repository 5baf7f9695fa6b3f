// Package ha holds the end-to-end test of the scheduler's high-availability
// deployments, both run leader-elected over a Lease, only the leader
// scheduling:
//
//   - two kube-scheduler replicas, each with the extender as a localhost
//     sidecar. The extender keeps its ledger in memory, so two extenders
//     serving at once could each hand the same placement to a different
//     pod; the deployment prevents that by putting each extender behind
//     its own scheduler, and the extender re-reads the node's pods before
//     each bind so that a new leader never trusts a view that lags its
//     predecessor's binds.
//   - two replicas of kube-scheduler built with the DynMIG framework
//     plugin (schedplugin), whose PreBind re-reads the node's pods for the
//     same reason.
//
// The test runs each replica as a subprocess (the test binary
// re-executed: kube-scheduler exits the process when it stops leading, so
// it cannot run leader-elected inside the test process), over a control
// plane, fake kubelet nodes, fakehal GPUs and the device plugin from
// e2e/internal/cluster. The standby's pod watches stall so that it takes
// over with a view lacking all of the leader's binds, and the leader is
// killed with SIGKILL in the middle of a stream of MIG pods.
//
// The package has no non-test code; run it with
//
//	cd e2e && go test -v ./ha
package ha
