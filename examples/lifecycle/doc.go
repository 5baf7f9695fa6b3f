// Command lifecycle walks through dynamic MIG end to end on a built-in fake
// node, with no GPU: the device plugin discovers capability and publishes the
// node registration, the scheduler places a mixed workload through its
// ledger, the device plugin realizes each reservation and patches the runtime
// identity into the pod, the scheduler exports metrics, finished pods are
// reclaimed, the device plugin restarts and adopts what is running, and a
// last pod stays Pending because the free slots are fragmented. After each
// step it draws every GPU's slot map.
//
// Usage:
//
//	go run ./examples/lifecycle [-model NAME] [-gpus N]
//
// -model takes any fakehal preset (for example A100-SXM4-40GB, H100, H200,
// B200, A30, "RTX PRO 6000"); -gpus the number of GPUs (1..64). The output
// is deterministic; a golden test pins it.
//
// In a slot map each character is one memory slot of a GPU's placement
// grid and each reservation covers the half-open interval
// [start, start+size) of its placement; memory is MiB. The walk-through
// runs on one goroutine and starts no others; the "API server" is a slice
// of pods in memory, and the device plugin's restart is a new
// realize.Manager over the same fake hardware.
package main
