// Package gpulock serialises hardware mutation per physical GPU.
//
// A [Set] holds one mutual-exclusion lock per GPU index, made on first use.
// Waiting for a lock honours a context: [Set.Lock] returns the context's
// error as soon as it is done, and never takes a lock for a context that is
// already done, even a free one, so a cancelled caller touches no hardware.
//
// The model has no units and no intervals: a GPU is its NVML index, and any
// int (negative ones included) names a distinct lock. Callers check an
// index is real before locking, so the set only grows to the number of GPUs
// a node has; locks are never removed.
//
// Concurrency: a Set is safe for concurrent use. Lock starts no goroutine,
// and a waiter that gives up leaves nothing behind. The zero Set is ready to
// use; a Set must not be copied after first use.
//
// Both the NVML backend (package nvmlhal) and the realize.Manager use it,
// each with its own Set: the manager's lock orders its bookkeeping around a
// change, the backend's keeps two callers of one Backend from interleaving
// NVML calls on a GPU.
package gpulock
