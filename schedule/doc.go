// Package schedule converts between the scheduler's placement ledger and
// the hami.io/vgpu-mig-allocations reservation a pod carries, without
// Kubernetes: a scheduler reserves with [placement.Ledger.Reserve], writes
// [Allocations] of the result with reservation.EncodeString, and rebuilds
// its ledger from active pods' records with [LedgerReservations].
//
// A reservation occupies its placement's half-open slot interval
// [start, start+size) whether or not it has been realized, so the runtime
// identity (MIG UUID, GI and CI IDs) plays no part in either conversion.
//
// The functions are pure and safe for concurrent use.
package schedule
