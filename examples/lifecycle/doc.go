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
// B200, A30, "RTX PRO 6000"); -gpus the number of GPUs. The output is
// deterministic.
package main
