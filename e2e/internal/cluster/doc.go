// Package cluster is the e2e harness: a real Kubernetes control plane built
// from source and run inside the test process, with dynmig's example
// components wired to it as they are deployed.
//
//   - Start: an embedded etcd (go.etcd.io/etcd/server/v3/embed, temporary
//     data directory, random localhost ports) and a kube-apiserver from
//     k8s.io/kubernetes (cmd/kube-apiserver/app/testing.StartTestServer)
//     with RBAC and the Node authorizer, reached through a front proxy so
//     that Cluster.RestartAPIServer keeps the address, the certificates and
//     the issued ServiceAccount tokens valid. Cluster.AdminConfig is a
//     system:masters client for the test's own hand.
//   - Cluster.ApplyManifests creates the objects of multi-document YAML files
//     (deploy/namespace.yaml, deploy/rbac/*.yaml); Cluster.ServiceAccountConfig
//     returns a client authenticated as a ServiceAccount through the
//     TokenRequest API, so each component runs with exactly what its RBAC
//     grants.
//   - Cluster.StartScheduler runs a kube-scheduler from k8s.io/kubernetes
//     (cmd/kube-scheduler/app/testing.StartTestServer) with the deployed
//     KubeSchedulerConfiguration used verbatim but for its kubeconfig, and
//     leader election off.
//   - HTTPFront puts a plain-HTTP loopback front before the API server
//     whose requests go through a given config's transport, so that a
//     test can wrap the transport of a component configured only by a
//     kubeconfig file (kube-scheduler) and see its requests.
//   - StartExtender serves extender over HTTP on the
//     address that configuration names, holding a cross-process file lock
//     on that port meanwhile.
//   - Cluster.StartNode is a fake kubelet: a Node object and the kubelet's
//     real device manager (pkg/kubelet/cm/devicemanager) serving the
//     device-plugin registration socket in a temporary directory; it
//     publishes the manager's capacity in the Node's status, and Node.Admit
//     calls the manager's Allocate and GetDeviceRunContainerOptions per
//     container as the kubelet's admission and container start do.
//     Node.Terminate and Node.FinishDeletion write the statuses and the
//     final delete the kubelet would.
//   - Node.StartPlugin runs deviceplugin against that node;
//     it registers over the registration socket like a deployed plugin.
//
// Nothing is written outside temporary directories. KubernetesVersion
// reports the k8s.io/kubernetes module the binary was built from (the API
// server's own version string is a placeholder).
//
// # Lifetimes and concurrency
//
// Every Start* function registers the component's shutdown with the
// test's Cleanup, and every component also has an idempotent Stop that
// waits for its goroutines (the control plane's own background goroutines
// aside, see the e2e tests' goleak options). The API server started by Start
// is tied to the *testing.T it was given: it stops when that test ends.
// Clients and Nodes are safe for concurrent use; Cluster's API server
// start, stop and restart are serialised.
//
// The kube-scheduler calls os.Exit when a leader-elected instance stops
// leading, so schedulers here never run with leader election; tests of
// leader election run schedulers as subprocesses (Cluster.WriteKubeconfig
// writes the kubeconfig they need).
package cluster
