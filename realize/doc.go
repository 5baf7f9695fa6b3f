// Package realize turns scheduler reservations into MIG hardware: the
// [Realizer] interface a hardware backend implements, and the [Manager]
// that a device plugin embeds to allocate, roll back, reconcile, adopt
// after a restart and collect leaks.
package realize
