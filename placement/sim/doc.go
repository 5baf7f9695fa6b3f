// Package sim replays MIG request traces against placement policies and
// reports, per policy side by side, how many requests were accepted, how
// many were rejected for capacity (not enough free slots), for fragmentation
// (free slots but no legal placement) or for lack of a large enough profile,
// and the mean slot utilisation.
//
// # Trace format
//
// A trace is JSON lines, one event per line, in non-decreasing time:
//
//	{"t":0.5,"op":"arrive","id":"r1","profile":"3g.20gb"}
//	{"t":0.7,"op":"arrive","id":"r2","memoryMB":9000,"devices":2}
//	{"t":1.0,"op":"arrive","id":"r3","percent":50}
//	{"t":2.5,"op":"depart","id":"r1"}
//
// Fields: "t" time (any unit, >= 0); "op" "arrive" or "depart"; "id" names
// the request (unique among live requests). An arrival carries at most one
// demand: "profile" (exact profile name), "memoryMB" (MiB per device; the
// smallest covering profile is chosen) or "percent" (of the GPU's memory);
// with none it asks for a whole GPU. "devices" (default 1) asks for several
// devices placed all or nothing. A departure carries only t, op and id and
// releases what its arrival got (nothing if it was rejected). Blank lines
// and lines starting with '#' are ignored. [ReadTrace] and [WriteTrace]
// read and write it.
//
// # Generators
//
// [Generate] draws Poisson arrivals with exponential lifetimes from a
// weighted profile [Mix] ([UniformMix], [SkewedMix]) at a chosen offered
// load; [HeavyChurn] gives the options of the quality traces. Equal options
// and seeds give equal traces.
//
// # Concurrency
//
// Functions are safe for concurrent use on distinct arguments; nothing is
// shared between calls, and no goroutine is started.
package sim
