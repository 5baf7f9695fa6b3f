// Command simulate replays a MIG request trace on N GPUs of one model under
// the placement policies (first fit, the deployed v2.10 order and the
// fragmentation-aware default) and prints their results side by side:
// accepted, rejected for capacity, for fragmentation, for lack of a profile,
// and the mean slot utilisation.
//
// Without -trace it generates a seeded heavy-churn trace (see
// placement/sim.HeavyChurn); -trace FILE replays a JSON-lines trace in the
// format documented in package placement/sim ("-" reads stdin).
//
// Usage:
//
//	go run ./examples/simulate -model A100-SXM4-40GB -gpus 8 -seed 1
//	go run ./examples/simulate -model A30 -mix uniform -json
//	go run ./examples/simulate -model H100 -trace trace.jsonl
//	go run ./examples/simulate -model A30 -write trace.jsonl
//
// Models are the built-in tables of package fakehal (names or aliases).
// Profiles are those the chart-default allowlist permits for the model
// (-profiles allowlist, the default), the plain profiles without engine
// variants (-profiles plain), or every profile (-profiles all).
//
// Concurrency: the command runs single-threaded and starts no goroutines.
package main
