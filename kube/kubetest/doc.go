// Package kubetest is a fake Kubernetes API server for tests of code built
// on package kube, in the spirit of testing/fstest: a
// k8s.io/client-go/kubernetes/fake clientset made strict in the ways
// dynmig's correctness depends on and the plain fake is not.
//
// # Model
//
// [New] holds objects in the fake's tracker and adds reactors so that pods
// behave as on a real API server:
//
//   - resourceVersions of pods come from one counter, as etcd's revisions
//     do: every create, update, merge patch, binding and graceful deletion
//     gives the pod a new one, greater than any before (a create replaces
//     whatever the client set). A pod deleted and created again under the
//     same name therefore never matches a version read from the old one;
//   - an update, a JSON merge patch, a binding or a delete that carries a
//     resourceVersion or a UID precondition (metadata.resourceVersion and
//     metadata.uid of the object or patch, the Binding's own metadata, or
//     DeleteOptions.Preconditions) is applied only to that version of that
//     pod, and otherwise fails with a Conflict (409), so a write computed
//     from a stale cached pod cannot silently overwrite a newer one or
//     land on a pod recreated under the same name; a pod that does not
//     exist is NotFound (404);
//   - a pod's status is the kubelet's and the binding's to write, as on
//     a real API server: a created pod gets the status of a new pod
//     (phase Pending, nothing else) whatever its creator sent, an update
//     or merge patch of a pod keeps its stored status, and one of its
//     status subresource keeps its stored spec. Tests that play the
//     kubelet write status through UpdateStatus or a status patch;
//   - creating the pods/binding subresource sets spec.nodeName, merges the
//     Binding's metadata.annotations into the pod's (each replacing the
//     pod's value under its key) and sets the PodScheduled=True status
//     condition, all in one write, as the API server's binding storage
//     does; binding a pod that is already bound or is being deleted is a
//     Conflict;
//   - deleting a pod is graceful: it stays, with metadata.deletionTimestamp
//     set to the end of its grace period and
//     metadata.deletionGracePeriodSeconds, and gets a new resourceVersion
//     (watchers see a modification). The grace period is the one the
//     DeleteOptions give, else the pod's terminationGracePeriodSeconds,
//     else [DefaultGracePeriodSeconds]; it is 0 for a pod that is not
//     bound or has reached Succeeded or Failed, and 1 if negative. A grace
//     period of 0 removes the pod; deleting a deleting pod again with a
//     shorter grace period moves its deadline closer. [FinishDeletion]
//     sends the kubelet's final delete. Finalizers are not modelled;
//   - [Server.LagWatchCache] lets the watch cache fall behind: lists of
//     pods that accept a cached answer (resourceVersion "0") return stale
//     pods and new watches hold their events back, until
//     [Server.CatchUpWatchCache]. Consistent lists (resourceVersion "")
//     are always current;
//   - [Server.HoldWatches] holds back the events of every pod watch,
//     running or new, until [Server.ReleaseWatches], as watches lag behind
//     writes under load: a consistent list then shows what no watch has
//     delivered yet.
//
// [NewClientset] is a server that removes a deleted pod at once, as the
// plain fake does, for tests that do not play the kubelet's part.
//
// A watch that names a listing's resourceVersion, as a reflector's does,
// first delivers each pod created or changed since that listing as one
// ADDED event, as the plain fake does; a pod deleted between the listing
// and the watch is not replayed, where a real API server replays its
// deletion. Tests that delete pods while a reflector starts wait until its
// watch call is made.
//
// Other resources, and pod writes the list does not name (strategic merge
// and JSON patches, apply), behave as in the plain fake. Field selectors
// are ignored, as there. Placements inside the annotations it stores are
// opaque to it; the half-open slot interval rule [start, start+size) is the
// concern of the code under test.
//
// # Concurrency
//
// A server is safe for concurrent use, as the fake's tracker is; the fake
// runs one reactor at a time. Each pod watch has a goroutine that relays
// its events; it ends when the watch is stopped, or, once nothing holds
// the events back, when the watch has ended and delivered every event. No
// other goroutine is started. Reactors a test prepends later run before these,
// so fault injection still works.
package kubetest
