// Package kubetest is a fake Kubernetes API server for tests of code built
// on package kube, in the spirit of testing/fstest: a
// k8s.io/client-go/kubernetes/fake clientset made strict in the ways
// dynmig's correctness depends on and the plain fake is not.
//
// # Model
//
// [NewClientset] holds objects in the fake's tracker and adds reactors so
// that pods behave as on a real API server:
//
//   - a JSON merge patch of a pod gets a new resourceVersion, and one that
//     carries metadata.resourceVersion is applied only to that version
//     (otherwise the call fails with a Conflict), so a patch computed from
//     a stale cached pod cannot silently overwrite a newer annotation;
//   - creating the pods/binding subresource sets spec.nodeName and gets a
//     new resourceVersion; binding a pod that is already bound is a
//     Conflict.
//
// resourceVersions are decimal counters per object. Placements inside the
// annotations it stores are opaque to it; the half-open slot interval rule
// [start, start+size) is the concern of the code under test.
//
// # Concurrency
//
// The clientset is safe for concurrent use, as the fake's tracker is; the
// reactors start no goroutines. Reactors a test prepends later run before
// these, so fault injection still works.
package kubetest
