// Package systemtest holds the whole-system model-based test of dynamic MIG:
// the scheduler's occupancy ledger (package placement), the device plugin's
// realization manager (package realize) and strict fake hardware (package
// fakehal) driven together on one small fake node, through the wire formats
// that connect them in a cluster (the node registration from package
// capability, the pod annotation from package reservation). The package has
// no exported API; everything is in its _test.go files.
//
// # Model
//
// A pgregory.net/rapid state machine plays every actor of a node: the
// scheduler (pods arrive with requests drawn by placementtest.RequestGen
// over the node's registration: several containers and devices, MiB,
// percent, whole-GPU and exact-profile demands, preferences, UUID and type
// constraints; they are placed and assumed through a placement.Ledger, or
// stay pending; the informer confirms and forgets them), the
// API server (pods end as Succeeded, Failed, deleted with a grace period
// while their containers still run, or vanish; listings fail or lag),
// kubelet (Allocate, repeated Allocate, two Allocates for the same container
// at once, lost annotation patches, processes on the exposed MIG devices,
// containers of a deleting pod reported terminated), the device plugin
// (reconcile, leak collection, restarts between any two steps followed by
// startup adoption, deaths in the middle of a hardware call, two Allocates
// and a reconcile served together, a retried Allocate of a multi-device
// container whose devices a restart stranded) and an
// adversary (forged annotations that copy another pod's placement or MIG
// UUID, truncated JSON, partial runtime identity, garbage, placements the
// scheduler never chose, a second pod duplicating a placement, pods bound
// without the scheduler with spec.nodeName preset, a forged
// hami.io/bind-time and a spec that really requests the devices; forgers'
// specs request what their records reserve, or nothing). NVML faults
// (failed create and destroy calls, a crash between GPU instance and compute
// instance creation, stale listings) are injected at random. Each sequence
// draws one GPU model for a 2-GPU node: A100-SXM4-40GB (8-slot grid), A30
// (4 slots), RTX PRO 6000 Blackwell (12 slots) or H100 (8 slots).
//
// Placements are memory slots of the GPU's grid and occupy the half-open
// interval [start, start+size).
//
// # Invariants
//
// Device ownership is asserted through realizetest.Safety, the exported
// model of the manager's safety invariants: every device a container
// receives is granted there (against the record the Allocate saw), a pod
// is released once its containers can no longer run, and the model
// observes the hardware after every step and every process change.
//
// After every step: the hardware holds no overlapping or otherwise illegal
// instances (fakehal's Check); no device granted to a pod whose
// containers may still run (active, or deleting and not yet
// reservation.Pod.Released) has been destroyed or moved, also when two
// Allocates for its container raced, and no GPU instance that ran
// processes has been destroyed; no MIG UUID was handed to two pods, and
// none to a pod whose own trusted record does not name it; every live
// instance sits at a placement that some validated reservation named; the
// scheduler ledger maintained incrementally equals one rebuilt from the
// pods' annotations, and covers every realized instance. After a restart,
// every valid, unambiguous realized reservation is adopted with its MIG
// UUID. At the end of every sequence, once faults stop: an authorised
// reconcile and leak collection leave no instance without an active owner,
// every active pod's reservation is realized exactly as annotated, the
// ledger's occupancy equals the hardware's, a further restart adopts
// everything, and ending every pod leaves the hardware empty.
//
// # Device plugin model
//
// TestDevicePlugin drives the real deviceplugin.Plugin (its pod source,
// maintenance passes, Allocate and checkpoint) over a kubetest API server
// and fakehal, on a fake clock whose maintenance passes the model
// triggers. Its actors: the scheduler binds pods through pods/binding with
// the record in the Binding and the version it read as precondition (an
// honest pod has one or two containers, each requesting one or two MIG
// devices, every device on its own free slot, and the record names them
// by container and device index); the
// pod's owner replaces the record before the binding (the binding is
// refused and retried) or after it, or strips the runtime identity from
// its running pod's record; forgers create pods with spec.nodeName preset
// and a copy of another pod's record (placement, and MIG UUID when
// drawn; a multi-device pod's first entry); pods request nvidia.com/gpu without MIG opt-in, bound by another
// scheduler with a copied record; GPU-free pods carry undecodable,
// invalid, legacy or copied records; the kubelet admits one pod at a time
// (Allocate once per container, in container order, as its device manager
// does, then status), retries an honest pod's failed Allocate, and rejects
// a pod once one container's Allocate still fails; an NVML fault may fail
// the create of a later device of a multi-device container (the manager
// rolls back what the call created; the retry must hand every device);
// the plugin may restart, its checkpoint kept or lost, between two
// containers' Allocates of one pod; pods
// end (Succeeded, Failed, deleted); the plugin restarts between any two
// steps, pods may end or be forged while it is down (or a running pod is
// deleted and a forger copies its record), and it starts with its
// checkpoint kept, lost (deleted), or corrupted (garbage, truncated at a
// random length, or version 2), and three steps restart it with the
// checkpoint kept right after what only the checkpoint answers: an
// owner's edit of a running pod's record; a running pod deleted and
// its record copied while the plugin is down; and a running pod's record
// copied by a forger and then moved or removed by its owner (its
// recorded device must still win the conflict with the copy: the guard
// recordedClaim: the plugin sees the copy a maintenance pass before the
// edit, so that without the guard the copy's claim is the earlier one and
// wins); maintenance passes run as
// a step; the
// GPU reports Xid 79 and recovers (the model waits until the plugin and
// the node's health record agree); owners edit their running pods'
// records (strip or forge the runtime identity, move the record to a
// free slot or onto one another pod claims, remove it, or copy another
// running pod's); forgers create pods with a made-up runtime identity.
//
// Each sequence draws whether the admission policy of the record is
// modelled (-model.policy=on or off forces it): the fake API server then
// refuses, with Forbidden, an owner's create of a pod carrying the record
// and an owner's update that adds, changes or removes it, as the chart's
// ValidatingAdmissionPolicy does; the scheduler's binding and the
// plugin's runtime patch pass. The model checks that every owner write is
// refused exactly when the policy says so.
//
// Without the policy the owner's record edits and Xid injection are
// drawn as with it, and go through: strips, moves to a free slot or onto
// one another pod claims, removals, copies of another running pod's
// record and forged identities. Such edits make records conflict, and a
// conflict between listed pods' records withholds authorisation from
// every snapshot, which pauses all destruction on the node, taking over
// an instance the manager does not manage included. An honest pod whose
// slot holds such an instance (an ended pod's, whose checkpoint was
// lost) is then refused although no listed record holds the slot, and so
// is a later container of a pod whose earlier container's instance,
// created before a restart that lost the checkpoint, is not taken over
// (its identity unconfirmed, the plugin refuses to guess): the class
// refusedUnauthorised allows exactly those refusals (a conflict,
// codes.Internal, or, for a later container, codes.FailedPrecondition)
// while the plugin's last reconcile report
// (deviceplugin.Plugin.LastReconcile) is unauthorised and every reason
// names pods still in the API (a *reservation.PodError or a
// *reservation.ConflictError). Once every pod is gone the drain checks
// that the pause ended (the last report is authorised) and every
// instance was reclaimed.
//
// Coverage also fails in a forced variant of 300 sequences or more: with
// -model.policy=off no owner write is refused; with -model.policy=on no
// made-up identity or forged copy is created, no record moved, replaced
// or forged, and no Xid injected without the policy, yet those paths are
// claimed.
//
// Invariants: a corrupted checkpoint makes deviceplugin.New fail with a
// *deviceplugin.CheckpointError, leaving the file and the hardware as they
// were (the operator then deletes it); no MIG device is handed to a pod
// while another running pod holds it; an ended pod's device is handed to,
// or managed (adopted) for, another pod only once the checkpoint that
// recorded the handout is lost (the residual below); while the plugin's
// last maintenance pass was authorised, every device of an admitted
// running pod that the intact checkpoint recorded is managed for that pod
// (checkRecordedManaged: its recorded entries win every conflict, so a
// restart adopts it for the pod whatever its record says now); a container is
// handed exactly as many devices as it asked for, none twice, and each is
// the one the pod's record then names for that container and device
// index, at the scheduler's placement for a pod the scheduler bound; a
// failed Allocate leaves no instance it created; no running pod's device
// (any of them) is destroyed, whoever bound it and whether or not the
// checkpoint survived; the hardware is legal after every step; once
// every pod ended and was deleted, the plugin reclaims every instance (an
// instance adopted during the drain only once a listing is the manager's
// AbsentPodGrace past its adoption, so the drain lets that much time pass
// before each pass) and its checkpoint names no pod and no device.
// No new instance appears on the GPU while it is unhealthy. Liveness: a
// pod the scheduler bound whose Allocate for a container is still refused
// after the kubelet's retries (which pass AbsentPodGrace and run
// maintenance) fails the model unless its refusal has an allowed class:
// the GPU is unhealthy (refusedUnhealthy), or another pod still in the API
// holds one of that container's slots: its record names the slot, cannot
// be decided, or, the pod not released, names the instance at the slot by
// MIG UUID (refusedHeld; the rule
// pauses such slots until those pods are gone, which the final drain
// checks), or destruction is paused by listed pods' records
// (refusedUnauthorised, above).
//
// A second residual exists only without the policy (lostAfterEdit): a
// running pod whose owner stripped, moved, removed, replaced or forged its
// record loses its device when the checkpoint is lost after that edit, or
// when the edit was made while the checkpoint had not recorded the pod's
// device since it was last lost (the model reads the checkpoint after
// every step and before every edit), since nothing the plugin then reads
// says the device is the pod's. The model allows exactly that
// (dpSystem.lostAfterEdit: no policy, an edit, and the edit's epoch older
// than the checkpoint's or dpPod.unrecordedEdit); with the checkpoint that
// recorded the device intact at the edit and since, or with the policy,
// no running pod may lose its device.
//
// The residual, counted rather than failed (TestDevicePlugin logs the
// count as endedReused): with the checkpoint lost, a forged copy of an
// ended pod's record, MIG UUID included, is adopted for the forger.
// Nothing the plugin can read tells the copy from the record of a pod
// whose earlier plugin handed it the device and lost its checkpoint; the
// ended pod's containers no longer run. The model checks the manager's
// instances after every step (an ended pod's device managed for another
// pod fails unless that loss happened); the forger is still handed
// nothing, since its record names a realized container the kubelet did
// not admit (the plugin refuses such a candidate).
//
// The model waits, after each start, until the plugin watches pods: the
// fake clientset's watch replays the pods created or changed since the
// listing but not those deleted meanwhile (kube/kubetest), where a real
// API server replays every event. Such lost deletions made deleted pods
// linger in the checkpoint in runs of the model before it waited.
//
// Six defects the model found are fixed: a maintenance pass whose
// listing predated a pod's Allocate ran after the clock passed the
// manager's AbsentPodGrace and destroyed the running pod's new instance
// (regression test: realize's TestReconcileJudgesAbsenceAtListingTime);
// with the checkpoint lost, a record its owner replaced after the binding
// outranked a running pod's that no configured scheduler's binding
// brought (reservation.Pod.RecordStarted; deviceplugin's
// TestLostCheckpointKeepsARunningPodsDeviceAgainstABoundRecord); and a
// maintenance pass read the manager's instances just before taking the
// checkpoint's lock, so a hand-out in between was forgotten and, while the
// cache lagged the listing the Allocate chose from, the device was handed
// again to another pod. That one is a race no public-API test can time:
// the model guards it (deviceplugin's TestLaggingCacheNeverHandsADeviceTwice
// covers the rest of its scenario). With multi-device pods: a maintenance
// pass that ran while an Allocate realized a multi-device container
// recorded its first, just created, instance in the checkpoint as handed;
// the Allocate then failed on a later device and rolled the instance
// back, but the container stayed recorded as handed, so every retry of the
// kubelet found no pending pod (deviceplugin's
// TestPassRecordsNoCreatedInstanceBeforeItsHandOut; the model's failure
// depends on when the pass runs and does not replay); and, after a restart
// that lost the checkpoint, a running pod's two-device container had one
// device adopted and not the other (an opt-out pod's ended record named
// its MIG UUID too), the recorded view then dropped the entry of the
// device not adopted, and leak collection destroyed that instance under
// the running pod (deviceplugin's
// TestRecordedViewKeepsAContainersDevicesNotAdopted; replays). Without
// the policy, with the copy-edit-restart step: a pod the plugin inherited
// (listed when it started without a checkpoint) kept its record's runtime
// identities trusted whatever its owner wrote there later, so an owner
// who copied another running pod's record, MIG UUID included, into it
// got that pod's instance adopted for it by a restart with the checkpoint
// kept once the other pod was deleted, although the checkpoint recorded
// the instance as the other pod's (checkEndedAdoptions); the plugin now
// trusts only the identities an inherited pod's record named while it
// inherited the pod, kept in the checkpoint (deviceplugin's
// TestInheritedPodNeverAdoptsAnotherPodsRecordedDevice and
// TestInheritedPodKeepsOnlyTheIdentitiesItsRecordNamedThen; the model's
// fail file did not replay on a later tree).
//
// # Coverage and mutation check
//
// Both models count the paths they claim to exercise and go test -v logs
// each count; a run of at least 300 sequences fails when one was reached
// zero times. TestDevicePlugin claims: a claim on a slot whose pod's
// identity was stripped before a restart with the checkpoint kept; a
// running pod deleted and its record copied while the plugin is down; a
// copy of an ended pod's record, MIG UUID included, claimed while the
// checkpoint that recorded the hand-out is intact; owner writes the
// policy refused; Xid 79; made-up identities; a running pod's record
// moved or removed, then a restart with the checkpoint kept; a deleted
// pod's record copied with its MIG UUID while the plugin is down, then a
// restart with the checkpoint kept; the residual endedReused; honest pods
// admitted with more than one device, and with more than one container; a
// multi-device container's Allocate that failed part-way (an NVML fault on
// a later device's create), rolled back, and whose retry handed every
// device; a plugin restart between two containers' Allocates of one pod;
// and, without the policy, a record moved onto a claimed slot, replaced
// with a copy of another running pod's, or given a forged identity, Xid
// 79, made-up identities on the unhealthy GPU, and a running pod's record
// copied, then moved or removed, then a restart with the checkpoint kept.
// It also logs, unclaimed,
// the refusal classes (refusedUnauthorised was first reached in a
// 2,000-sequence run of seed 21, by a later container; BENCHMARKS.md), the
// instances failed Allocates rolled back and those an Allocate took over
// rather than created (rollbacks, allocAdoptions, from the plugin's log):
// the plugin takes an instance over only for a container whose record
// names it and that it never handed, so rollback-adopted's guard is not
// reachable through the device plugin (BENCHMARKS.md). TestSystem
// claims: running pods' records rewritten to another placement, and onto
// one another active pod's record names (it loses the conflict; the
// scheduler keeps the slots it bound, and the kubelet calls no Allocate for the admitted
// containers until the record is restored); restarts; multi-device pods;
// strandedRetry's Allocates (a running pod's record breaks, the plugin
// restarts without adopting its devices, the record is repaired, a
// process runs on the last device of a multi-device container, and the
// kubelet calls Allocate for that container again: the call may take over
// the first devices and fail on the busy one, and its rollback must leave
// what it took over, the rollback-adopted guard).
// TestSystem's honest Allocates refused with ErrConflict or ErrOccupied
// fail unless something holds the placement (holderOf: another listed
// pod's record, an undecidable record, an instance the pod was not
// handed, its own earlier device whose identity its record lost) or the
// call's listing did not authorise taking over; counts per class are
// logged. Its counted residual (forgetResidual) forgives exactly a copy of
// the device of a pod that no longer holds it (!holds(now)).
//
// hack/mutants.sh removes each guard listed in systemtest/mutants (one
// sed script each) in a scratch copy, reports which model caught it, and
// replays each failure once from its fail file; see CONTRIBUTING.md.
//
// # Replaying a failure
//
// TestSystem runs in one goroutine on a fake clock. Its burst and
// raceAllocate steps serve several manager calls as a device plugin
// serves them at once; without the race detector they run one after
// another, in an order the sequence draws (a fixed-length shuffle of
// rapid.IntRange draws: rapid.Permutation's nested repeat made fail files
// stop short of the failure), so every TestSystem failure replays from
// rapid's fail file and shrinks. Under the race detector, or with
// -model.concurrent, they run from their own goroutines at the same time,
// so the detector and the invariants watch real interleavings; which call
// reaches the hardware first then decides MIG UUIDs, which call an armed
// fault hits and what a concurrent reconcile sees, and such a failure may
// not replay (rollback-adopted's failure on seed 1 before this rule was
// such a one: a reconcile and an Allocate interleaved inside a burst).
// The order is drawn in both modes, so a fail file written in one replays
// in the other when the failure does not depend on the interleaving.
// TestDevicePlugin
// runs the real plugin, whose informer, maintenance loop and health watch
// are goroutines; the model steps a fake clock and, before each step that
// depends on the plugin's view, waits for an observable effect (the
// watch started and the maintenance runner's first pass ended after each
// start, a barrier pod recorded in the checkpoint, the pass count, the
// health state and record), so the model's actions and draws replay.
// What is not controlled: when the informer delivers a write made since
// the last barrier (at most 30 writes) relative to the next Allocate,
// whether a maintenance pass the clock step triggers runs once or twice,
// and when the pass that a pod's end triggers at once (the pod source's
// OnInactive) runs relative to the model's next step.
// A failure that depends on such an interleaving may replay with other
// MIG UUIDs or not at all; the failures of issue 35's defects replayed
// every time.
//
// # Running
//
// go test ./systemtest runs 2,000 sequences of each model, of 50 steps on
// average (TestMain sets -rapid.checks=2000 and -rapid.steps=50 unless
// the flags or RAPID_CHECKS and RAPID_STEPS are given; under the race
// detector TestDevicePlugin asks for 50 unless the count is given); -short
// runs a fifth of them. The device-plugin model waits, at every step, for
// the real plugin's goroutines, informer and checkpoint writes (polling in
// 20 µs naps), but never for a fixed time: it steps its fake clock the
// moment the plugin's maintenance runner waits for its next tick
// (tickClock), keeps the checkpoint on a memory file system where there
// is one (/dev/shm: the plugin fsyncs every write), and ends a sequence
// by stepping past kube.EndedPodMemory rather than towards it. A sequence
// takes about 0.1 s on two loaded cores, 2,000 in about 2 to 5 minutes;
// a run of 300 or more fails when a claimed path was reached zero times.
// rapid stops drawing, and passes, when go test's deadline nears; both
// models then fail (ranAll), so give a long -timeout. CI runs both: the
// README's go test -race ./... and then go test -count=1 -timeout 40m
// ./systemtest -rapid.seed=12 (a fixed seed, so that a red CI replays;
// the mutation check and longer campaigns draw others).
// Both models log what their sequences exercised (allocations,
// restarts, checkpoints kept, lost and corrupted, faults, forgeries, the
// counted residual) with go test -v. A longer campaign:
//
//	go test ./systemtest -run TestSystem -rapid.checks=50000 -timeout 2h
//	go test ./systemtest -run TestDevicePlugin -rapid.checks=10000 -timeout 2h
//
// A failure prints the rapid seed and a minimal failing action sequence and
// writes a fail file under testdata/rapid (not committed), which reproduces
// it with -rapid.failfile. Failures the model found are kept as small
// deterministic regression tests in regression_test.go.
//
// The model follows the manager's documented failure semantics: a plugin
// whose Adopt had no authorised snapshot (or rejected a reservation) calls
// Adopt again before its next call, and kubelet retries a failed Allocate.
// One documented residual risk is counted rather than failed, through
// realizetest.Safety.Forget and for exactly that case: after a restart (the
// ended pod received the device from an earlier plugin process), a forger's
// copy of the record of a pod that has ended and left no trace in the API
// (gone from it, or its record no longer decodes and so names nothing)
// cannot be told from the original.
//
// # Concurrency
//
// Each sequence runs in one goroutine, except, under the race detector or
// with -model.concurrent, the burst and raceAllocate actions, which call
// the manager from two or three goroutines and wait for them (see
// "Replaying a failure"); the test starts no goroutine that outlives it
// (checked with go.uber.org/goleak). CI runs it with -race too.
package systemtest
