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
// scheduler (pods arrive with memory requests and are placed and assumed
// through a placement.Ledger; the informer confirms and forgets them), the
// API server (pods end as Succeeded, Failed or deleting, or vanish; listings
// fail or lag), kubelet (Allocate, repeated Allocate, lost annotation
// patches, processes on the exposed MIG devices), the device plugin
// (reconcile, leak collection, restarts between any two steps followed by
// startup adoption, deaths in the middle of a hardware call) and an
// adversary (forged annotations that copy another pod's placement or MIG
// UUID, truncated JSON, partial runtime identity, garbage, placements the
// scheduler never chose, a second pod duplicating a placement). NVML faults
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
// After every step: the hardware holds no overlapping or otherwise illegal
// instances (fakehal's Check); no active pod's realized instance has been
// destroyed or moved; no MIG UUID was handed to two pods; every live
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
// # Running
//
// go test ./systemtest runs 2,000 sequences by default (TestMain sets
// -rapid.checks=2000 unless the flag or RAPID_CHECKS is given); -short runs a
// fifth of them. A longer campaign:
//
//	go test ./systemtest -run TestSystem -rapid.checks=50000 -timeout 2h
//
// A failure prints the rapid seed and a minimal failing action sequence and
// writes a fail file under testdata/rapid, which reproduces it with
// -rapid.failfile.
//
// # Concurrency
//
// Each sequence runs in one goroutine; the test starts no goroutine that
// outlives it (checked with go.uber.org/goleak).
package systemtest
