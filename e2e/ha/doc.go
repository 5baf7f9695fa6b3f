// Package ha holds the end-to-end test of the scheduler's high-availability
// deployment: two kube-scheduler replicas, each with the extender
// (extender) as a localhost sidecar, elect a leader over
// a Lease, and only the leader schedules. The extender keeps its ledger in
// memory, so two extenders serving at once could each hand the same
// placement to a different pod; the deployment prevents that by putting
// each extender behind its own scheduler, and the extender re-reads the
// node's pods before each bind so that a new leader never trusts a view
// that lags its predecessor's binds.
//
// The test runs each scheduler+extender pair as a subprocess (the test
// binary re-executed: kube-scheduler exits the process when it stops
// leading, so it cannot run leader-elected inside the test process), over
// a control plane, fake kubelet nodes, fakehal GPUs and the example device
// plugin from e2e/internal/cluster, and kills the leader with SIGKILL in
// the middle of a stream of MIG pods.
//
// The package has no non-test code; run it with
//
//	cd e2e && go test -v ./ha
package ha
