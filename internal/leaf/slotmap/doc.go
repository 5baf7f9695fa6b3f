// Package slotmap draws MIG slot maps for people: one line per GPU showing
// which owner holds each placement of the GPU's memory-slot grid, as in
//
//	GPU0 [aa|bb|..|cccc]
//
// Each character is one memory slot (not a compute slice). A placement
// covers the half-open interval [start, start+size); its slots carry the
// owner's mark and '|' separates neighbouring intervals, so two adjacent
// placements of one owner stay visible as two. '.' is a free slot, '?' a slot
// held by an instance without a known owner, '!' a slot claimed by more than
// one span (a conflict).
//
// A [Legend] gives every owner a stable one-character mark on first use, so
// the same pod keeps its letter from one drawing to the next. [Measure] adds
// the figures a person wants next to a map, from package placement: free
// slots, remaining instance capacity, the largest profile that still fits
// and free slots no placement can use.
//
// It is shared by examples/lifecycle and cmd/migctl, so both draw the same
// picture. A Legend is not safe for concurrent use; the functions are pure
// and start no goroutines. Zero values: a Row with no spans draws a free
// grid of its Width; the zero Figures describe a GPU without slots; the
// zero Legend is not usable (call NewLegend).
package slotmap
